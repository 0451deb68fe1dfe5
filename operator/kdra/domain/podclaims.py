"""Pods and their claims: the ``resource.kdra.dev/claims`` annotation, generated claim names,
and the rules that decide when a pod is done with a claim.

Pure functions over plain dicts (pods come straight from the API; kdra reads only a few of
their fields). The claim controller and the binder both build on these.

Invariants:
- :func:`parse_pod_claims` accepts exactly the shape of ``pod.spec.resourceClaims`` (plus an
  optional ``containers`` list and ``request``) and raises InvalidObject naming the entry and
  field; a pod with a bad annotation is never half-processed.
- :func:`generate_name_prefix` mirrors upstream: ``<pod>-<claim>-`` truncated proportionally to
  57 characters, so the API server's 5 random characters keep the name within 63.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from kdra import GROUP, VERSION
from kdra.domain.errors import InvalidObject
from kdra.domain.models import DNS_LABEL, DNS_SUBDOMAIN

CLAIMS_ANNOTATION = f"{GROUP}/claims"
CLAIM_STATUSES_ANNOTATION = f"{GROUP}/claim-statuses"
POD_CLAIM_NAME_ANNOTATION = f"{GROUP}/pod-claim-name"
FINALIZER = f"{GROUP}/delete-protection"
SCHEDULER_NAME = "kdra-scheduler"
GPU_DRIVER = "gpu.kdra.dev"

# Per-container allocation summaries the binder writes before binding; the mutating webhook
# points each consuming container's env at them through downward-API fieldRefs, so the
# values exist when the kubelet starts the container. The container name is the key's name
# part (a DNS label fits the 63-character limit).
DEVICES_ANNOTATION_PREFIX = f"devices.{GROUP}/"  # value: "driver/pool/device,..."
GPU_UUIDS_ANNOTATION_PREFIX = f"gpus.{GROUP}/"  # value: "GPU-uuid,..." (gpu.kdra.dev only)
DEVICES_ENV = "KDRA_DEVICES"
GPU_UUIDS_ENV = "NVIDIA_VISIBLE_DEVICES"

MAX_GENERATE_NAME = 57
MAX_POD_CLAIMS = 32


@dataclass(frozen=True)
class PodClaim:
    """One entry of the claims annotation (``pod.spec.resourceClaims[i]`` upstream)."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None
    containers: tuple[str, ...] | None = None  # None: every container
    request: str | None = None  # expose only this request's devices

    @property
    def from_template(self) -> bool:
        return self.resource_claim_template_name is not None


_KNOWN_KEYS = {"name", "resourceClaimName", "resourceClaimTemplateName", "containers", "request"}


@functools.lru_cache(maxsize=4096)
def parse_pod_claims(text: str) -> tuple[PodClaim, ...]:
    """Parse the annotation's value (YAML or JSON list). Raises InvalidObject.

    Memoised by text: every watch event of a pod reads it, and YAML parsing was ~7% of the
    operator's CPU in the scale bench. The result is immutable."""
    field = f"metadata.annotations[{CLAIMS_ANNOTATION}]"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidObject(field, "not valid YAML/JSON: " + " ".join(str(exc).split())) from exc
    if not isinstance(data, list):
        raise InvalidObject(field, "must be a list of {name, resourceClaimName | "
                                   "resourceClaimTemplateName} entries")
    if len(data) > MAX_POD_CLAIMS:
        raise InvalidObject(field, f"at most {MAX_POD_CLAIMS} entries (has {len(data)})")
    claims: list[PodClaim] = []
    seen: set[str] = set()
    for index, entry in enumerate(data):
        where = f"{field}[{index}]"
        if not isinstance(entry, Mapping):
            raise InvalidObject(where, "each entry must be a mapping")
        unknown = sorted(set(entry) - _KNOWN_KEYS)
        if unknown:
            raise InvalidObject(f"{where}.{unknown[0]}", "unknown field; allowed: "
                                + ", ".join(sorted(_KNOWN_KEYS)))
        name = entry.get("name")
        if not isinstance(name, str) or not DNS_LABEL.match(name) or len(name) > 63:
            raise InvalidObject(f"{where}.name", "required; a DNS label (lowercase letters, "
                                "digits, '-'; at most 63 characters)")
        if name in seen:
            raise InvalidObject(f"{where}.name", f"duplicate entry name {name!r}")
        seen.add(name)
        claim_name = entry.get("resourceClaimName")
        template_name = entry.get("resourceClaimTemplateName")
        if (claim_name is None) == (template_name is None):
            raise InvalidObject(where, "exactly one of resourceClaimName or "
                                       "resourceClaimTemplateName must be set")
        reference = claim_name if claim_name is not None else template_name
        key = "resourceClaimName" if claim_name is not None else "resourceClaimTemplateName"
        if (not isinstance(reference, str) or not DNS_SUBDOMAIN.match(reference)
                or len(reference) > 253):
            raise InvalidObject(f"{where}.{key}", "must be the name of an object in the "
                                                  "pod's namespace (a DNS subdomain)")
        containers = entry.get("containers")
        if containers is not None and (
            not isinstance(containers, list)
            or not all(isinstance(c, str) and c for c in containers)
        ):
            raise InvalidObject(f"{where}.containers", "must be a list of container names")
        request = entry.get("request")
        if request is not None and (not isinstance(request, str) or not DNS_LABEL.match(request)):
            raise InvalidObject(f"{where}.request", "must be a request name (a DNS label)")
        claims.append(PodClaim(name, claim_name, template_name,
                               tuple(containers) if containers is not None else None, request))
    return tuple(claims)


def pod_claims(pod: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The pod's claims from its annotation (empty when it has none). Raises InvalidObject."""
    text = pod.get("metadata", {}).get("annotations", {}).get(CLAIMS_ANNOTATION)
    return parse_pod_claims(text) if text is not None else ()


def claim_statuses(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod's recorded pod-claim name → claim name (tolerates a damaged annotation)."""
    text = pod.get("metadata", {}).get("annotations", {}).get(CLAIM_STATUSES_ANNOTATION)
    if not text:
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(v, str)}


def generate_name_prefix(pod_name: str, claim_name: str) -> str:
    """``<pod>-<claim>-``, or, when that is longer than 57 characters, both parts shortened
    in proportion: with L = len(pod) + len(claim) + 2, each keeps ``len*57 // L`` characters
    and they are joined by one ``-`` with no trailing ``-`` (upstream's exact arithmetic).
    """
    prefix = f"{pod_name}-{claim_name}-"
    if len(prefix) <= MAX_GENERATE_NAME:
        return prefix
    total = len(prefix)
    pod_part = pod_name[: len(pod_name) * MAX_GENERATE_NAME // total]
    claim_part = claim_name[: len(claim_name) * MAX_GENERATE_NAME // total]
    return f"{pod_part}-{claim_part}"


# --------------------------------------------------------------------------- pod state


def pod_is_done(pod: Mapping[str, Any]) -> bool:
    """True when the pod will never run (again): it finished, or it was deleted before it got
    a node. Such a pod no longer needs its claims' devices."""
    phase = pod.get("status", {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return True
    deleting = pod.get("metadata", {}).get("deletionTimestamp") is not None
    return deleting and not pod.get("spec", {}).get("nodeName")


def pod_ref(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod as a ``reservedFor`` entry."""
    meta = pod["metadata"]
    return {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}  # core: no apiGroup


#: kdra's summary of ``status.allocation`` for ``kubectl get``: every allocated device's name,
#: comma-separated (a printer column's JSONPath shows only the first element of a list).
ALLOCATED_DEVICES = "allocatedDevices"


def set_allocation(status: dict[str, Any], allocation: Mapping[str, Any]) -> None:
    """Put ``allocation`` (API form) into a claim's ``status``, with its device summary."""
    status["allocation"] = allocation
    results = (allocation.get("devices") or {}).get("results") or ()
    status[ALLOCATED_DEVICES] = ",".join(str(r.get("device", "")) for r in results)


def clear_allocation(status: dict[str, Any]) -> None:
    """Deallocate in a claim's ``status``: the allocation, its summary and the devices' status
    (what the agent reported about devices the claim no longer has)."""
    for key in ("allocation", ALLOCATED_DEVICES, "devices"):
        status.pop(key, None)


def protected_by_kdra(claim: Mapping[str, Any]) -> bool:
    """Whether the claim carries kdra's finalizer: kdra generated it or allocated it (the
    binder adds the finalizer before it writes an allocation)."""
    return FINALIZER in (claim.get("metadata", {}).get("finalizers") or ())


def owned_by(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Whether ``claim`` is controller-owned by the pod with ``pod_uid``."""
    return any(
        ref.get("controller") and ref.get("uid") == pod_uid and ref.get("kind") == "Pod"
        for ref in claim.get("metadata", {}).get("ownerReferences", ()) or ()
    )


def generated_claim(template: Mapping[str, Any], pod: Mapping[str, Any],
                    pod_claim: PodClaim) -> dict[str, Any]:
    """The claim object the controller creates for a template entry (before the server
    fills in the name)."""
    meta = pod["metadata"]
    tmeta = template.get("spec", {}).get("metadata", {}) or {}
    annotations = dict(tmeta.get("annotations") or {})
    annotations[POD_CLAIM_NAME_ANNOTATION] = pod_claim.name
    metadata: dict[str, Any] = {
        "generateName": generate_name_prefix(meta["name"], pod_claim.name),
        "namespace": meta["namespace"],
        "annotations": annotations,
        "ownerReferences": [{
            "apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True,
        }],
        # Set at birth, so the binder needs no extra write before allocating it; the
        # claim controller removes it once the claim is deallocated or deleted unused.
        "finalizers": [FINALIZER],
    }
    if tmeta.get("labels"):  # the template's labels, as upstream (none: no labels key)
        metadata["labels"] = dict(tmeta["labels"])
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": template.get("spec", {}).get("spec", {}) or {},
    }
