"""Typed models of ResourceClaims, ResourceClaimTemplates and DeviceClasses in kdra's storage
version ``resource.kdra.dev/v1`` — upstream ``resource.k8s.io/v1`` (Kubernetes 1.36) field for
field, plus kdra's ``status.allocatedDevices`` summary: the kinds, built from a claim's spec
(:mod:`kdra.dra.models.v1_claim_spec`) and status (:mod:`kdra.dra.models.v1_claim_status`).

These models are the source of the kinds' CRD schemas (``crds/*.yaml``, written by ``python -m
hack.crdgen``; :mod:`kdra.dra.models.crd` says how): a docstring describes, ``crd(...)`` adds
what only the API server checks. Change a model, then run the generator.

Invariants:
- A claim's and a template's ``spec`` are immutable once created (the schema's rule).
- A field kdra does not act on would be reported by :meth:`ResourceClaim.unsupported`
  instead of ignored; today every field is acted on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from kdra.dra.models.base import (
    MAX_CONFIGS,
    MAX_SELECTORS,
    APIObject,
    DeviceConfiguration,
    DeviceSelector,
    _Model,
    parse,
)
from kdra.dra.models.crd import EXTENDED_RESOURCE, crd, crd_object, immutable, item
from kdra.dra.models.v1_claim_spec import ResourceClaimSpec
from kdra.dra.models.v1_claim_status import ResourceClaimStatus


class ResourceClaim(APIObject):
    """A ResourceClaim asks for devices (GPUs, FPGAs, NICs, or anything a driver publishes in
    ResourceSlices) for pods, the way a PersistentVolumeClaim asks for storage. Pods refer to
    it in the `resource.kdra.dev/claims` annotation; kdra's binder allocates matching devices,
    records them in `status.allocation`, reserves the claim for the pod and then binds the pod
    to a node that can reach the devices. A claim named by several pods is shared by them; use
    a ResourceClaimTemplate to give each pod its own claim. This is kdra's copy of
    resource.k8s.io/v1 ResourceClaim (structured parameters)."""

    kind: str = "ResourceClaim"
    spec: ResourceClaimSpec = Field(default=ResourceClaimSpec(), json_schema_extra=crd(
        required=True, rules=[immutable(
            "spec is immutable: a ResourceClaim's spec cannot be changed after creation; "
            "delete the claim and create a new one instead")]))
    """What is requested. Immutable: it cannot be changed once the claim exists."""
    status: ResourceClaimStatus = ResourceClaimStatus()

    @property
    def key(self) -> str:
        """``namespace/name`` — how kdra refers to a claim in messages and indexes."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def allocated(self) -> bool:
        return self.status.allocation is not None

    def unsupported(self) -> list[str]:
        """``field: feature`` for each field kdra accepts but does not act on yet (empty
        when the claim uses none): the allocator refuses such claims with this text rather
        than ignoring what the user asked for."""
        found = []
        for i, request in enumerate(self.spec.devices.requests):
            if request.exactly is not None:
                found += [f"spec.devices.requests[{i}].exactly.{field}"
                          for field in request.exactly.unsupported()]
            for j, sub in enumerate(request.first_available):
                found += [f"spec.devices.requests[{i}].firstAvailable[{j}].{field}"
                          for field in sub.unsupported()]
        return found


# --------------------------------------------------------------------------- templates


class TemplateMeta(_Model):
    """Labels and annotations copied onto every claim created from this template. Other
    metadata fields are accepted but ignored (the name, namespace and owner are chosen by
    kdra)."""

    model_config = crd_object(preserve_unknown_fields=True)

    labels: dict[str, Annotated[str, item("A label value.")]] = Field(default_factory=dict)
    """Labels for the generated claims."""
    annotations: dict[str, Annotated[str, item("An annotation value.")]] = Field(
        default_factory=dict)
    """Annotations for the generated claims. kdra adds `resource.kdra.dev/pod-claim-name`."""


class ResourceClaimTemplateSpec(_Model):
    """The blueprint: metadata and spec for each generated claim. Immutable."""

    metadata: TemplateMeta = TemplateMeta()
    spec: ResourceClaimSpec = Field(default=ResourceClaimSpec(),
                                    json_schema_extra=crd(required=True))
    """The spec of every generated claim, copied as is. Same fields and rules as a
    ResourceClaim's spec."""


class ResourceClaimTemplate(APIObject):
    """A ResourceClaimTemplate is a blueprint for ResourceClaims. When a pod's
    `resource.kdra.dev/claims` annotation names a template, kdra's claim controller creates a
    claim just for that pod (named `<pod>-<claim>-<random>`, owned by the pod) and deletes it
    when the pod is done. Use it when every pod, for example every replica of a Deployment,
    needs devices of its own."""

    kind: str = "ResourceClaimTemplate"
    spec: ResourceClaimTemplateSpec = Field(
        default=ResourceClaimTemplateSpec(), json_schema_extra=crd(required=True, rules=[
            immutable("spec is immutable: a ResourceClaimTemplate's spec cannot be changed "
                      "after creation; create a new template (or delete and recreate this "
                      "one)")]))


# --------------------------------------------------------------------------- DeviceClass


class DeviceClassConfiguration(DeviceConfiguration):
    """One piece of configuration that applies to every device allocated through this class.
    Exactly one kind must be given; today the only kind is `opaque`."""


class DeviceClassSpec(_Model):
    """What devices belong to the class and how to configure them."""

    selectors: tuple[DeviceSelector, ...] = Field(default=(), max_length=MAX_SELECTORS)
    """Conditions every device of this class must satisfy, in addition to the selectors of the
    request that uses the class. All must be true. At most 32."""
    config: tuple[DeviceClassConfiguration, ...] = Field(default=(), max_length=MAX_CONFIGS)
    """Driver configuration applied to every device allocated through this class. It is not
    used to choose devices; the allocator copies it into the claim's
    `status.allocation.devices.config` (source `FromClass`), before the claim's own
    configuration. At most 32."""
    extended_resource_name: str | None = Field(default=None, json_schema_extra=crd(
        max_length=253, pattern=EXTENDED_RESOURCE))
    """An extended resource name (`gpu.kdra.dev/gpu`) pods may ask for in `resources.limits` to
    get devices of this class without writing a claim: kdra's mutating webhook turns such
    limits into one generated claim per pod (a request per container) and removes them from
    the containers. Every class also serves `deviceclass.resource.kdra.dev/<class name>`; when
    several classes name the same resource, the newest wins."""


class DeviceClass(APIObject):
    """A DeviceClass describes a kind of device that claims can ask for, the way a StorageClass
    describes a kind of volume. It holds selectors that every device of the class must pass
    and configuration that drivers apply to every device allocated through it. Usually created
    by the cluster administrator or shipped with a driver. Classes may change at any time; an
    existing allocation keeps the configuration it was made with."""

    kind: str = "DeviceClass"
    spec: DeviceClassSpec = Field(default=DeviceClassSpec(),
                                  json_schema_extra=crd(required=True))


# --------------------------------------------------------------------------- parsing


def parse_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    return parse(ResourceClaim, obj)


def parse_template(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    return parse(ResourceClaimTemplate, obj)


def parse_class(obj: Mapping[str, Any]) -> DeviceClass:
    return parse(DeviceClass, obj)


__all__ = [
    "DeviceClass",
    "DeviceClassConfiguration",
    "DeviceClassSpec",
    "ResourceClaim",
    "ResourceClaimTemplate",
    "ResourceClaimTemplateSpec",
    "TemplateMeta",
    "parse_claim",
    "parse_class",
    "parse_template",
]
