"""The two API flavours kdra serves, as one object each: where the four DRA kinds live, where a
pod's claims and their names are, how a generated claim is marked, which finalizer protects an
allocated claim (docs/architecture.md, "Two API flavours").

======================  ==========================================  ==========================
                        :data:`NATIVE`                              :data:`KDRA`
======================  ==========================================  ==========================
the four kinds          ``resource.k8s.io/v1`` (built in)           ``resource.kdra.dev/v1``
a pod's claims          ``spec.resourceClaims`` (+ containers'       annotation
                        ``resources.claims``)                       ``resource.kdra.dev/claims``
their claim names       ``status.resourceClaimStatuses``            annotation ``.../claim-
                        (``pods/status``)                           statuses`` (in the Binding
                                                                    for pods kdra binds)
generated-claim marker  ``resource.kubernetes.io/pod-claim-name``    ``resource.kdra.dev/pod-
                                                                    claim-name``
finalizer               ``resource.kubernetes.io/delete-protection``  ``resource.kdra.dev/
                                                                    delete-protection``
devices reach a pod     the kubelet calls the driver (no prepare-    kdra's agent prepares
                        before-bind; binding conditions still)       before bind; NRI / env
slices                  every driver's (kdra writes only its own)   kdra's agents'
======================  ==========================================  ==========================

The services (claim controller, scheduler, slice GC, eviction, quota, preemption, ``why``)
take a :class:`Flavour` and never ask which one it is: they call its methods and read its
capabilities (:attr:`Flavour.agent_prepares`, :attr:`Flavour.device_annotations`,
:attr:`Flavour.shared_slices`). Decoding needs nothing: kdra's v1 models are upstream's v1
field for field, so a native object parses into the same models.

Invariants:
- Pure: no I/O. Choosing a flavour by asking the API server is :mod:`kdra.kube.flavour`'s.
- Both flavours parse a pod's claims totally and bounded (InvalidObject naming the field,
  never another exception) into the same :class:`~kdra.kube.core.podclaims.PodClaim` entries,
  with names safe as URL path segments.
- :meth:`Flavour.statuses_write` carries the pod's resourceVersion as its precondition.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kdra import GROUP, VERSION
from kdra.kube.core import native_pods, podclaims
from kdra.kube.core.paths import Resource
from kdra.kube.core.podclaims import PodClaim

__all__ = ["FLAVOURS", "KDRA", "NATIVE", "Flavour", "flavour_named", "read_flavour",
           "settled"]

JSON = Mapping[str, Any]


@dataclass(frozen=True)
class Flavour:
    """One API flavour (see the module doc); :data:`KDRA` and :data:`NATIVE` are the two."""

    name: str
    """``native`` or ``kdra``: what the flag ``--flavour`` names."""
    group: str
    """The API group of ResourceClaims, templates, DeviceClasses and ResourceSlices."""
    pod_claim_name_annotation: str
    """The annotation on a claim generated for a pod (its value: the pod's entry name)."""
    finalizer: str
    """The finalizer the claim controller and the scheduler put on claims they allocate."""
    claims_field: str
    """Where a pod's claims are, as a field path (``kubectl explain`` notation)."""
    claims_name: str
    """Where a pod's claims are, as messages say it (``claims annotation``)."""
    agent_prepares: bool
    """kdra's node agent prepares the devices before the pod binds and reports them Ready
    (prepare before bind); else the kubelet calls the driver after binding, and only
    devices' own binding conditions are waited for."""
    device_annotations: bool
    """The binder writes the per-container device annotations (in the Binding) that the
    mutating webhook's env reads; else the kubelet and the runtime give containers their
    devices (CDI)."""
    shared_slices: bool
    """The slice kind holds every driver's slices (the built-in one), so the slice GC and taint
    eviction act only on kdra's agents' drivers; else every slice of the kind is kdra's."""
    upstream_controllers: bool
    """kube-controller-manager's resourceclaim-controller may serve these objects too (the
    built-in kinds): kdra's claim controller then checks whether it runs, and leaves claim
    generation and clean-up to it if so (:mod:`kdra.operator.claim_owner`)."""
    records_in_binding: bool = False
    """The claim names' record is a pod annotation, which a Binding can carry: for a pod
    kdra's scheduler binds, the record rides on the Binding (one pod write fewer per pod;
    :mod:`kdra.operator.core.claim_records`); else (``pods/status``) it is written apart."""
    version: str = VERSION

    @property
    def spec_claims(self) -> bool:
        """Whether a pod's claims are its ``spec.resourceClaims`` (else that field is not
        read: kdra's flavour reads its annotation)."""
        return self.claims_field == "spec.resourceClaims"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @cached_property
    def claims(self) -> Resource:
        return Resource(self.group, self.version, "resourceclaims", True, "ResourceClaim")

    @cached_property
    def templates(self) -> Resource:
        return Resource(self.group, self.version, "resourceclaimtemplates", True,
                        "ResourceClaimTemplate")

    @cached_property
    def classes(self) -> Resource:
        return Resource(self.group, self.version, "deviceclasses", False, "DeviceClass")

    @cached_property
    def slices(self) -> Resource:
        return Resource(self.group, self.version, "resourceslices", False, "ResourceSlice")

    # ------------------------------------------------------------------ a pod's claims

    def has_claims(self, pod: JSON) -> bool:
        """Whether the pod names claims (the claim controller keeps it)."""
        raise NotImplementedError

    def pod_claims(self, pod: JSON) -> tuple[PodClaim, ...]:
        """The pod's claims (empty when it has none). Raises InvalidObject."""
        raise NotImplementedError

    def claim_statuses(self, pod: JSON) -> dict[str, str]:
        """The claim names recorded for the pod: pod-claim name → claim name (malformed
        records ignored)."""
        raise NotImplementedError

    def binding_record(self, pod: JSON, names: Mapping[str, str]) -> dict[str, str]:
        """The annotations a Binding carries to record ``names`` (pod-claim name → claim
        name, every entry's) on the pod: none where the pod's record already says exactly that
        or the flavour keeps its record elsewhere (:attr:`records_in_binding`)."""
        return {}

    def statuses_write(self, pod: JSON, entries: Sequence[PodClaim],
                       names: Mapping[str, str]) -> tuple[str | None, JSON] | None:
        """How to record ``names`` (pod-claim name → claim name) for the pod's ``entries``:
        (subresource or None, JSON merge patch), with the pod's resourceVersion as
        precondition; None when the pod's record already says exactly that."""
        raise NotImplementedError

    # ------------------------------------------------------------------ claims

    def generated_claim(self, template: JSON, pod: JSON, entry: PodClaim) -> dict[str, Any]:
        """The claim the controller creates for a template entry (upstream's naming and owner
        reference, the flavour's marker and finalizer)."""
        return podclaims.generated_claim(template, pod, entry,
                                         annotation=self.pod_claim_name_annotation,
                                         finalizer=self.finalizer,
                                         api_version=self.api_version)

    def is_generated(self, claim: JSON) -> bool:
        """Whether the claim carries the generated-claim marker."""
        annotations = (claim.get("metadata") or {}).get("annotations")
        return isinstance(annotations, Mapping) and \
            self.pod_claim_name_annotation in annotations

    def generated_for(self, claim: JSON) -> JSON | None:
        """The pod reference a generated claim serves (upstream's IsForPod), or None."""
        return podclaims.generated_for(claim, self.pod_claim_name_annotation)

    def protected(self, claim: JSON) -> bool:
        """Whether the claim carries the flavour's finalizer (allocated by a scheduler that
        deallocates through the claim controller, or generated by kdra)."""
        return podclaims.protected_by_kdra(claim, self.finalizer)

    def set_allocation(self, status: dict[str, Any], allocation: Mapping[str, Any]) -> None:
        """Put ``allocation`` into a claim's status (kdra's CRD also has a summary field)."""
        podclaims.set_allocation(status, allocation, summary=self.group == GROUP)


@dataclass(frozen=True)
class _Kdra(Flavour):
    def has_claims(self, pod: JSON) -> bool:
        annotations = (pod.get("metadata") or {}).get("annotations")
        return isinstance(annotations, Mapping) and podclaims.CLAIMS_ANNOTATION in annotations

    def pod_claims(self, pod: JSON) -> tuple[PodClaim, ...]:
        return podclaims.pod_claims(pod)

    def claim_statuses(self, pod: JSON) -> dict[str, str]:
        return podclaims.claim_statuses(pod)

    def binding_record(self, pod: JSON, names: Mapping[str, str]) -> dict[str, str]:
        if dict(names) == podclaims.claim_statuses(pod):
            return {}
        return {podclaims.CLAIM_STATUSES_ANNOTATION: json.dumps(dict(names), sort_keys=True)}

    def statuses_write(self, pod: JSON, entries: Sequence[PodClaim],
                       names: Mapping[str, str]) -> tuple[str | None, JSON] | None:
        # Every entry's claim, shared ones too (the agent's NRI plugin reads them here).
        record = self.binding_record(pod, names)
        if not record:
            return None
        meta = pod.get("metadata") or {}
        return None, {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                                   "annotations": record}}


@dataclass(frozen=True)
class _Native(Flavour):
    def has_claims(self, pod: JSON) -> bool:
        return native_pods.has_claims(pod)

    def pod_claims(self, pod: JSON) -> tuple[PodClaim, ...]:
        return native_pods.pod_claims(pod)

    def claim_statuses(self, pod: JSON) -> dict[str, str]:
        return native_pods.claim_statuses(pod)

    def statuses_write(self, pod: JSON, entries: Sequence[PodClaim],
                       names: Mapping[str, str]) -> tuple[str | None, JSON] | None:
        # As upstream's controller: the generated claims only (a shared claim is named in
        # the spec).
        generated = {e.name for e in entries if e.generated}
        wanted = {k: v for k, v in names.items() if k in generated}
        if wanted == native_pods.claim_statuses(pod):
            return None
        return "status", native_pods.statuses_patch(pod, wanted)


KDRA: Flavour = _Kdra(
    name="kdra", group=GROUP, pod_claim_name_annotation=podclaims.POD_CLAIM_NAME_ANNOTATION,
    finalizer=podclaims.FINALIZER,
    claims_field=f"metadata.annotations[{podclaims.CLAIMS_ANNOTATION}]",
    claims_name="claims annotation",
    agent_prepares=True, device_annotations=True, shared_slices=False,
    upstream_controllers=False, records_in_binding=True)
NATIVE: Flavour = _Native(
    name="native", group=native_pods.GROUP,
    pod_claim_name_annotation=native_pods.POD_CLAIM_NAME_ANNOTATION,
    finalizer=native_pods.FINALIZER, claims_field="spec.resourceClaims",
    claims_name="spec.resourceClaims",
    agent_prepares=False, device_annotations=False, shared_slices=True,
    upstream_controllers=True)
FLAVOURS: dict[str, Flavour] = {f.name: f for f in (NATIVE, KDRA)}


def flavour_named(name: str) -> Flavour:
    """The flavour called ``name`` (``native`` or ``kdra``); ValueError otherwise."""
    try:
        return FLAVOURS[name]
    except KeyError:
        raise ValueError(f"unknown flavour {name!r}: one of {', '.join(FLAVOURS)}") from None


def settled(name: str) -> Flavour:
    """The flavour a process's settings name once its start-up resolved them
    (:func:`kdra.kube.flavour.resolve`); an unresolved ``""``/``auto`` (components built
    without a process, as in unit tests) is the kdra flavour."""
    return KDRA if name.strip().lower() in ("", "auto") else flavour_named(name)


def read_flavour(*, native_served: bool, kdra_served: bool, kdra_slices: bool) -> Flavour:
    """The flavour a command-line tool reads (``kubectl kdra``, ``kdra describe|check``),
    where it cannot ask the operator: the one the cluster serves; where it serves both, kdra's
    if its kind holds slices — nothing writes kdra's slices but kdra's agents in the kdra
    flavour, while the built-in kind may hold other drivers' whichever flavour kdra runs —,
    else native."""
    if not native_served:
        return KDRA
    if not kdra_served:
        return NATIVE
    return KDRA if kdra_slices else NATIVE
