"""Typed model of what a ResourceClaim asks for (``spec``, also a template's ``spec.spec``) in
kdra's storage version ``resource.kdra.dev/v1`` — upstream ``resource.k8s.io/v1``
(Kubernetes 1.36) field for field. These classes are the source of the CRD schema's
``spec`` (:mod:`kdra.dra.models.crd`: docstrings describe, ``crd(...)`` adds what only the
API server checks).

A request is ``{name, exactly}`` (one kind of device: class, selectors, count or All,
adminAccess, tolerations, capacity requests) or ``{name, firstAvailable: [...]}`` (up to 8
sub-requests tried in order; results name the chosen one ``<request>/<subrequest>``).
Constraints are ``matchAttribute`` or ``distinctAttribute``.

Invariants:
- Parsing enforces what the allocator relies on: exactly one of ``exactly`` /
  ``firstAvailable``, counts that agree with the allocation mode, unique request and
  sub-request names, constraint and config references to existing requests (``req`` or
  ``req/sub``), exactly one kind of constraint, upstream's list limits. The CRD schema
  enforces the same at admission; this is the second line for objects that bypassed it.
- A field kdra does not act on would be reported by :meth:`BaseDeviceRequest.unsupported`
  instead of ignored; today every field is acted on: tolerations (issue 25), capacity
  requests (issue 26: the allocator's capacity module; quantities are checked there, bad
  ones refused naming the field).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import Field, model_validator

from kdra.dra.models.base import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    MAX_CONFIGS,
    MAX_CONSTRAINTS,
    MAX_REQUESTS,
    MAX_SELECTORS,
    MAX_SUBREQUESTS,
    MAX_TOLERATIONS,
    All,
    DeviceConfiguration,
    DeviceSelector,
    ExactCount,
    _Model,
    qualified_name_problem,
)
from kdra.dra.models.crd import (
    FULLY_QUALIFIED,
    LABEL_NAME,
    LABEL_VALUE,
    REQUEST_REF,
    JsonDict,
    crd,
    crd_object,
    item,
    qualified_keys,
    quantity,
    rule,
)

RequestRef = Annotated[str, item(
    "Name of one request of this claim, or `<request>/<subrequest>` for one sub-request of a "
    "`firstAvailable` request.", min_length=1, max_length=127, pattern=REQUEST_REF)]
"""What constraints and config name: a request, or ``<request>/<subrequest>``."""

# --------------------------------------------------------------------------- requests


class DeviceToleration(_Model):
    """A toleration: which device taints the request accepts (upstream's matching: empty key
    with `Exists` matches every taint, empty effect every effect)."""

    # Unset fields stay unset (None), so a toleration dumps back as it was written: an empty
    # ``effect`` or ``key`` would not pass the allocation result's schema.
    model_config = crd_object(rules=[rule(
        "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || "
        "self.value == ''", "value must be empty when operator is Exists", field_path=".value")])

    key: str | None = Field(default=None, json_schema_extra=crd(max_length=317,
                                                                 pattern=LABEL_NAME))
    """The taint key to match; empty matches every key (then `operator` must be `Exists`). A
    label name."""
    operator: Literal["Exists", "Equal"] = Field(
        default="Equal", json_schema_extra=crd(defaulted=True, max_length=8))
    """`Equal` (the default: key and value must match) or `Exists` (any value; `value` must be
    empty)."""
    value: str | None = Field(default=None, json_schema_extra=crd(max_length=63,
                                                                   pattern=LABEL_VALUE))
    """The taint value to match with `Equal`. A label value."""
    effect: str | None = Field(default=None, json_schema_extra=crd(
        enum=["None", "NoSchedule", "NoExecute"], max_length=16))
    """The taint effect to match; empty matches every effect."""
    toleration_seconds: int | None = None
    """For `NoExecute`: how long a pod may keep using the device after it is tainted; unset
    tolerates for ever, zero or less evicts at once."""


MAX_CAPACITY_REQUESTS = 32


class CapacityRequirements(_Model):
    requests: dict[str, Annotated[str, quantity(
        "An amount: an integer or a quantity string such as `40Gi`.")]] | None = Field(
        default=None, max_length=MAX_CAPACITY_REQUESTS,
        json_schema_extra=crd(rules=[qualified_keys("capacity", "memory")]))
    """Capacity name (same naming rules as a device's capacity) to the amount needed."""


class BaseDeviceRequest(_Model):
    # What ``exactly`` and a sub-request share: class, selectors, mode and count.
    model_config = crd_object(rules=[rule(
        "!(has(self.allocationMode) && self.allocationMode == 'All' && has(self.count))",
        "count must not be set when allocationMode is All (All takes every matching device); "
        "remove count or use allocationMode ExactCount", field_path=".count")])

    device_class_name: str = Field(pattern=DNS_SUBDOMAIN.pattern, max_length=253,
                                   json_schema_extra=crd(min_length=1))
    """Name of the DeviceClass (cluster-scoped, `kubectl get kdeviceclass`) whose selectors and
    configuration apply to this request. Classes are how administrators describe kinds of
    devices ("a GPU", "a white cat"); a claim cannot be allocated while its class does not
    exist. Required."""
    selectors: tuple[DeviceSelector, ...] = Field(default=(), max_length=MAX_SELECTORS)
    """Extra conditions, on top of the class's own selectors, that every device allocated for
    this request must satisfy. All of them must be true for a device to be chosen. At most
    32."""
    allocation_mode: Literal["ExactCount", "All"] = Field(
        default="ExactCount", json_schema_extra=crd(defaulted=True, max_length=16))
    """How many devices this request wants. `ExactCount` (the default) asks for `count`
    devices. `All` asks for every device that matches the class and the selectors in the pools
    the pod can use; allocation fails if one of those devices is already in use or if a pool
    is incomplete, and `count` must not be set. Other values are rejected."""
    count: int | None = Field(default=None, json_schema_extra=crd(minimum=1))
    """Number of devices to allocate when `allocationMode` is `ExactCount`. Leave it unset to
    ask for exactly one device; when set it must be at least 1. Must not be set when
    `allocationMode` is `All`."""
    tolerations: tuple[DeviceToleration, ...] = Field(default=(), max_length=MAX_TOLERATIONS)
    """Device taints the request tolerates: a device with a `NoSchedule` or `NoExecute` taint
    is allocated only when a toleration matches it, and a pod using a device with a
    `NoExecute` taint is evicted after `tolerationSeconds` (never, without). At most 16."""
    capacity: CapacityRequirements | None = None
    """How much of each capacity the request needs from each device (consumable capacity): a
    device must have that much; a device that allows multiple allocations gives a share of it,
    rounded up by the capacity's `requestPolicy`, while enough is left."""

    @model_validator(mode="after")
    def _count_matches_mode(self) -> BaseDeviceRequest:
        if self.allocation_mode == All and self.count not in (None, 0):
            raise ValueError("count must not be set when allocationMode is All")
        if self.allocation_mode == ExactCount and self.count is not None and self.count <= 0:
            raise ValueError("count must be greater than zero")
        return self

    @property
    def exact_count(self) -> int:
        """Devices needed in ExactCount mode (count defaults to 1)."""
        return self.count or 1

    def unsupported(self) -> list[str]:
        """Fields kdra accepts but does not act on yet (see the allocator): none today."""
        return []


class ExactDeviceRequest(BaseDeviceRequest):
    """A request for devices of one kind: the class, extra selectors, how many."""

    admin_access: bool | None = None
    """Ask for administrative access: the devices are handed out even if they are already
    allocated to other claims, for monitoring or maintenance tools, and they are not taken away
    from others. Only allowed in namespaces labelled `resource.kdra.dev/admin-access: "true"`.
    Defaults to false."""


class DeviceSubRequest(BaseDeviceRequest):
    """One alternative of a `firstAvailable` request: which devices it takes and how many."""

    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63,
                      json_schema_extra=crd(min_length=1))
    """Name of the sub-request, unique within its request. The allocation result names the
    chosen sub-request `<request>/<subrequest>`, and constraints and config may refer to it
    that way. A DNS label."""


class DeviceRequest(_Model):
    """One request for devices: `exactly` one kind of device, or a prioritized list
    (`firstAvailable`) of alternatives tried in order. Every request must be satisfied for the
    claim to be allocated."""

    model_config = crd_object(rules=[rule(
        "has(self.exactly) != has(self.firstAvailable)",
        "exactly one of `exactly` or `firstAvailable` must be set")])

    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63,
                      json_schema_extra=crd(min_length=1))
    """Name of the request, unique within this claim. Constraints and configuration entries
    refer to the request by this name, a container can ask for only the devices of one request
    by it, and the allocation result reports it next to each device. A DNS label: lower-case
    letters, digits and '-', at most 63 characters, starting and ending with a letter or
    digit."""
    exactly: ExactDeviceRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = Field(
        default=(), max_length=MAX_SUBREQUESTS, json_schema_extra=crd(min_items=1, rules=[rule(
            "self.all(s, self.exists_one(o, o.name == s.name))",
            "firstAvailable[].name values must be unique within a request")]))
    """Alternatives, best first: kdra allocates the first one that can be satisfied (and,
    across nodes, prefers a node where an earlier one fits). Results name the chosen one
    `<request>/<subrequest>`. Sub-request names must be unique. 1 to 8 entries."""

    @model_validator(mode="after")
    def _one_kind(self) -> DeviceRequest:
        if (self.exactly is None) == (not self.first_available):
            raise ValueError("exactly one of `exactly` or `firstAvailable` must be set")
        names = [sub.name for sub in self.first_available]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate sub-request names: {', '.join(duplicates)}")
        return self

    @property
    def admin_access(self) -> bool:
        return bool(self.exactly is not None and self.exactly.admin_access)

    def alternatives(self) -> Iterator[tuple[str, BaseDeviceRequest]]:
        """``(result name, what is asked)`` in the order to try: the request itself, or each
        sub-request as ``<request>/<subrequest>``."""
        if self.exactly is not None:
            yield self.name, self.exactly
        for sub in self.first_available:
            yield f"{self.name}/{sub.name}", sub


# --------------------------------------------------------------------------- constraints, config


def _attribute_name(field: str) -> JsonDict:
    return crd(min_length=3, max_length=96, pattern=FULLY_QUALIFIED, rules=[rule(
        "self.indexOf('/') <= 63",
        f"the domain part of {field} (before '/') must be at most 63 characters")])


class DeviceConstraint(_Model):
    """A condition that spans several devices of this claim: exactly one of `matchAttribute`
    and `distinctAttribute`."""

    model_config = crd_object(rules=[rule(
        "has(self.matchAttribute) != has(self.distinctAttribute)",
        "exactly one of matchAttribute or distinctAttribute must be set")])

    requests: tuple[RequestRef, ...] = Field(default=(), max_length=MAX_REQUESTS)
    """Requests whose devices the constraint covers; empty: all of the claim's. `<request>`
    covers whichever sub-request is chosen, `<request>/<subrequest>` only that one. Every name
    must exist in `requests`."""
    match_attribute: str | None = Field(default=None,
                                        json_schema_extra=_attribute_name("matchAttribute"))
    """Fully qualified name of a device attribute (`<domain>/<name>`) whose value must be the
    same on every covered device (GPUs of one model, devices behind one PCIe root). A device
    without the attribute cannot be chosen."""
    distinct_attribute: str | None = Field(
        default=None, json_schema_extra=_attribute_name("distinctAttribute"))
    """Fully qualified name of a device attribute (`<domain>/<name>`) whose value must differ
    between every two covered devices (for example two NICs on different physical ports). A
    device without the attribute cannot be chosen."""

    @model_validator(mode="after")
    def _one_kind(self) -> DeviceConstraint:
        kinds = [name for name in (self.match_attribute, self.distinct_attribute) if name]
        if len(kinds) != 1:
            raise ValueError("exactly one of matchAttribute or distinctAttribute must be set")
        problem = qualified_name_problem(kinds[0], fully=True)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def attribute(self) -> str:
        return self.match_attribute or self.distinct_attribute or ""

    @property
    def distinct(self) -> bool:
        return self.distinct_attribute is not None


class DeviceClaimConfiguration(DeviceConfiguration):
    """One piece of configuration for the devices allocated to some or all requests of this
    claim. Exactly one kind must be given; today the only kind is `opaque`."""

    requests: tuple[RequestRef, ...] = Field(default=(), max_length=MAX_REQUESTS)
    """Names of the requests (or `<request>/<subrequest>`) this configuration applies to;
    empty: every request. Every name must exist in `requests`."""


def _names_known(kind: str) -> JsonDict:
    return rule(
        f"!has(self.{kind}) || self.{kind}.all(c, !has(c.requests) || c.requests.all(n, "
        "self.requests.exists(r, r.name == n || n.startsWith(r.name + '/'))))",
        f"every name in {kind}[].requests must name a request in requests[] (or "
        "`<request>/<subrequest>` of a firstAvailable request); fix the typo or add the "
        "missing request", field_path=f".{kind}")


class DeviceClaim(_Model):
    """What devices the claim wants and how to configure them."""

    model_config = crd_object(rules=[_names_known("constraints"), _names_known("config")])

    requests: tuple[DeviceRequest, ...] = Field(
        default=(), max_length=MAX_REQUESTS, json_schema_extra=crd(rules=[rule(
            "self.all(r, self.exists_one(o, o.name == r.name))",
            "requests[].name values must be unique within a claim; rename one of the "
            "requests that share a name")]))
    """The device requests. Every request must be satisfied for the claim to be allocated.
    Request names must be unique. At most 32."""
    constraints: tuple[DeviceConstraint, ...] = Field(default=(), max_length=MAX_CONSTRAINTS)
    """Conditions that must hold across the devices of several requests (all on one PCIe root,
    all different NICs, ...). At most 32."""
    config: tuple[DeviceClaimConfiguration, ...] = Field(default=(), max_length=MAX_CONFIGS)
    """Driver configuration for the devices of some or all requests. It is not used to choose
    devices; the allocator copies it, after the configuration of the device classes, into
    `status.allocation.devices.config` for the driver. At most 32."""

    @model_validator(mode="after")
    def _request_names(self) -> DeviceClaim:
        names = [request.name for request in self.requests]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate request names: {', '.join(duplicates)}")
        known = self.reference_names()
        named: tuple[tuple[str, tuple[DeviceConstraint | DeviceClaimConfiguration, ...]], ...] = (
            ("constraints", self.constraints), ("config", self.config))
        for kind, entries in named:
            for index, entry in enumerate(entries):
                unknown = [name for name in entry.requests if name not in known]
                if unknown:
                    raise ValueError(
                        f"{kind}[{index}].requests names unknown request(s) "
                        f"{', '.join(unknown)}; known: {', '.join(sorted(known)) or 'none'}"
                    )
        return self

    def reference_names(self) -> frozenset[str]:
        """What constraints and config may name: every request, and ``<request>/<sub>``
        for each sub-request."""
        names = {request.name for request in self.requests}
        names.update(f"{r.name}/{s.name}" for r in self.requests for s in r.first_available)
        return frozenset(names)


class ResourceClaimSpec(_Model):
    devices: DeviceClaim = DeviceClaim()


__all__ = [
    "MAX_CAPACITY_REQUESTS",
    "BaseDeviceRequest",
    "CapacityRequirements",
    "DeviceClaim",
    "DeviceClaimConfiguration",
    "DeviceConstraint",
    "DeviceRequest",
    "DeviceSubRequest",
    "DeviceToleration",
    "ExactDeviceRequest",
    "RequestRef",
    "ResourceClaimSpec",
]
