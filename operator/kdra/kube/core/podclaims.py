"""Pods and their claims: the ``resource.kdra.dev/claims`` annotation, generated claim names,
and the rules that decide when a pod is done with a claim.

Pure functions over plain dicts (pods come straight from the API; kdra reads only a few of
their fields). The claim controller and the binder both build on these.

Invariants:
- :func:`parse_pod_claims` accepts exactly the shape of ``pod.spec.resourceClaims`` (plus an
  optional ``containers`` list and ``request``, and at most one entry whose claim kdra
  generates from the pod's extended resources: ``extendedResources``,
  :mod:`kdra.kube.core.extended_entry`) and raises InvalidObject naming the entry and
  field — never another exception, whatever the text (size, depth, YAML aliases, key types);
  a pod with a bad annotation is never half-processed.
- Names read from annotations (claim names, pod-claim names, container names) are checked as
  DNS subdomains / labels before they are returned, so they are safe as URL path segments.
- kdra-owned keys (:func:`is_kdra_owned`: claim-statuses and the per-container device and
  GPU annotations) are written by kdra only; :func:`claim_statuses` ignores a malformed value.
- :func:`generate_name_prefix` mirrors upstream: ``<pod>-<claim>-`` truncated proportionally to
  57 characters, so the API server's 5 random characters keep the name within 63.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kdra import GROUP, VERSION
from kdra.dra.errors import InvalidObject
from kdra.dra.models import DNS_LABEL, DNS_SUBDOMAIN
from kdra.kube.core.extended_entry import ExtendedRequest, parse_extended_requests
from kdra.kube.core.jsonscan import UNDECODABLE_KEY
from kdra.kube.core.untrusted import load_json, load_yaml, shorten

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
DEVICE_ENVS = (DEVICES_ENV, GPU_UUIDS_ENV)


def is_kdra_owned(key: str) -> bool:
    """Whether a pod annotation key is one only kdra writes: the claim-statuses record and
    the per-container device / GPU summaries the injected env reads."""
    return (key == CLAIM_STATUSES_ANNOTATION or key.startswith(DEVICES_ANNOTATION_PREFIX)
            or key.startswith(GPU_UUIDS_ANNOTATION_PREFIX))


NRI_TOLERATE_ANNOTATION = "tolerate-missing-plugins.kdra.dev"
"""The pod annotation containerd's NRI default validator is configured to read
(``tolerate_missing_plugins_annotation``, docs/architecture.md): a pod carrying it (or NRI's
per-container and per-pod forms, ``<key>/container.<name>``, ``<key>/pod``) starts without
kdra's NRI plugin — no device adjustment, no env override. kdra's own pods need it; a
tenant's pod must not have it (kdra.operator.core.admission)."""


def is_nri_tolerance(key: str) -> bool:
    """Whether a pod annotation key lets a container start without kdra's NRI plugin."""
    return key == NRI_TOLERATE_ANNOTATION or key.startswith(NRI_TOLERATE_ANNOTATION + "/")


def kdra_owned(annotations: Mapping[str, Any] | None) -> dict[str, Any]:
    """The kdra-owned entries of ``annotations``."""
    if not isinstance(annotations, Mapping):
        return {}
    return {k: v for k, v in annotations.items() if isinstance(k, str) and is_kdra_owned(k)}

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
    extended: tuple[ExtendedRequest, ...] | None = None
    """A claim kdra generates from the pod's extended resources (``extendedResources``);
    ``containers`` is then the containers its requests are for."""

    @property
    def from_template(self) -> bool:
        return self.resource_claim_template_name is not None

    @property
    def generated(self) -> bool:
        """kdra generates the entry's claim for the pod (from a template or from its
        extended resources): it serves only the pod that owns it."""
        return self.from_template or self.extended is not None

    def shows(self, container: str, request: str) -> bool:
        """Whether ``container`` (one the entry applies to) sees the devices of the claim's
        result ``request`` (``req`` or ``req/sub``): only the entry's ``request``, and for a
        generated extended-resource claim only the container's own requests."""
        base = request.split("/", 1)[0]
        if self.extended is not None:
            return any(r.request == base and r.container == container for r in self.extended)
        return not self.request or base == self.request


_KNOWN_KEYS = ("name", "resourceClaimName", "resourceClaimTemplateName", "extendedResources",
               "containers", "request")
MAX_ANNOTATION_BYTES = 16 * 1024
"""The claims annotation's size limit: 32 entries of the longest names fit in ~12 KiB."""
MAX_CONTAINERS = 64
"""Container names one entry may list."""
_ANNOTATION_DEPTH = 5  # list → entry → extendedResources → request → count
_CLAIMS_FIELD = f"metadata.annotations[{CLAIMS_ANNOTATION}]"
_STATUSES_FIELD = f"metadata.annotations[{CLAIM_STATUSES_ANNOTATION}]"


def is_dns_label(value: object) -> bool:
    """A DNS label (RFC 1123): at most 63 lowercase alphanumerics or '-'."""
    return isinstance(value, str) and len(value) <= 63 and bool(DNS_LABEL.fullmatch(value))


def is_object_name(value: object) -> bool:
    """A name kdra may put in a URL path: a DNS subdomain (RFC 1123) of at most 253
    characters, so never ``..``, ``/``, ``%`` or a query."""
    return (isinstance(value, str) and len(value) <= 253
            and bool(DNS_SUBDOMAIN.fullmatch(value)))


def parse_pod_claims(text: str) -> tuple[PodClaim, ...]:
    """Parse the annotation's value (YAML or JSON list). Raises InvalidObject (only).

    Total and bounded (:mod:`kdra.kube.core.untrusted`): at most 16 KiB, 4 levels, no YAML
    anchors or aliases, 32 entries of at most 64 containers, and one error reported (the
    first), its values cut short. Memoised by text, errors included: every watch event of a
    pod reads it, and YAML parsing was ~7% of the operator's CPU in the scale bench. The
    result is immutable."""
    outcome = _parse_cached(text)
    if isinstance(outcome, InvalidObject):
        raise InvalidObject(outcome.field, outcome.message)
    return outcome


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> tuple[PodClaim, ...] | InvalidObject:
    try:
        return _parse(text)
    except InvalidObject as exc:  # kept without its traceback (and the parser it holds)
        return InvalidObject(exc.field, exc.message)


def _parse(text: str) -> tuple[PodClaim, ...]:
    field = _CLAIMS_FIELD
    if not isinstance(text, str):
        raise InvalidObject(field, "must be a string holding a YAML/JSON list")
    data = load_yaml(text, field=field, max_bytes=MAX_ANNOTATION_BYTES,
                     max_depth=_ANNOTATION_DEPTH)
    if not isinstance(data, list):
        raise InvalidObject(field, "must be a list of {name, resourceClaimName | "
                                   "resourceClaimTemplateName} entries")
    if len(data) > MAX_POD_CLAIMS:
        raise InvalidObject(field, f"at most {MAX_POD_CLAIMS} entries (has {len(data)})")
    claims: list[PodClaim] = []
    seen: set[str] = set()
    for index, entry in enumerate(data):
        claims.append(_entry(f"{field}[{index}]", entry, seen))
        if claims[-1].extended is not None and any(c.extended is not None for c in claims[:-1]):
            raise InvalidObject(f"{field}[{index}].extendedResources", "only one entry may "
                                "have extendedResources (one generated claim per pod)")
    return tuple(claims)


def check_name(where: str, name: object, seen: set[str]) -> str:
    """An entry's name (both flavours): a DNS label no earlier entry (``seen``, which gets
    it) has. Raises InvalidObject."""
    if not is_dns_label(name):
        raise InvalidObject(f"{where}.name", "required; a DNS label (lowercase letters, "
                            "digits, '-'; at most 63 characters)")
    assert isinstance(name, str)
    if name in seen:
        raise InvalidObject(f"{where}.name", f"duplicate entry name {name!r}")
    seen.add(name)
    return name


def check_reference(where: str, claim_name: object, template_name: object) -> None:
    """An entry's claim reference (both flavours): exactly one of ``resourceClaimName`` and
    ``resourceClaimTemplateName``, an object name. Raises InvalidObject."""
    if (claim_name is None) == (template_name is None):
        raise InvalidObject(where, "exactly one of resourceClaimName or "
                                   "resourceClaimTemplateName must be set")
    reference = claim_name if claim_name is not None else template_name
    key = "resourceClaimName" if claim_name is not None else "resourceClaimTemplateName"
    if not is_object_name(reference):
        raise InvalidObject(f"{where}.{key}", "must be the name of an object in the "
                                              "pod's namespace (a DNS subdomain)")


def _entry(where: str, entry: object, seen: set[str]) -> PodClaim:
    if not isinstance(entry, dict):
        raise InvalidObject(where, "each entry must be a mapping")
    for key in entry:
        if not isinstance(key, str):
            raise InvalidObject(where, f"keys must be strings (found {shorten(repr(key), 40)})")
        if key not in _KNOWN_KEYS:
            raise InvalidObject(f"{where}.{shorten(key, 40)}", "unknown field; allowed: "
                                + ", ".join(sorted(_KNOWN_KEYS)))
    name = check_name(where, entry.get("name"), seen)
    claim_name = entry.get("resourceClaimName")
    template_name = entry.get("resourceClaimTemplateName")
    if "extendedResources" in entry:
        return _extended_entry(where, name, entry)
    check_reference(where, claim_name, template_name)
    containers = entry.get("containers")
    if containers is not None:
        if not isinstance(containers, list) or not all(is_dns_label(c) for c in containers):
            raise InvalidObject(f"{where}.containers", "must be a list of container names "
                                                       "(DNS labels)")
        if len(containers) > MAX_CONTAINERS:
            raise InvalidObject(f"{where}.containers", f"at most {MAX_CONTAINERS} names "
                                                       f"(has {len(containers)})")
        if len(set(containers)) != len(containers):
            raise InvalidObject(f"{where}.containers", "names a container twice")
    request = entry.get("request")
    if request is not None and not is_dns_label(request):
        raise InvalidObject(f"{where}.request", "must be a request name (a DNS label)")
    return PodClaim(name, claim_name, template_name,
                    tuple(containers) if containers is not None else None, request)


def _extended_entry(where: str, name: str, entry: dict[Any, Any]) -> PodClaim:
    """An entry whose claim kdra generates from the pod's extended resources: no other
    source, no ``containers`` or ``request`` (its requests name their containers)."""
    for key in ("resourceClaimName", "resourceClaimTemplateName", "containers", "request"):
        if key in entry:
            raise InvalidObject(f"{where}.{key}", "not allowed with extendedResources (the "
                                                  "requests name their containers)")
    requests = parse_extended_requests(where, entry["extendedResources"])
    containers = tuple(dict.fromkeys(r.container for r in requests))
    return PodClaim(name, containers=containers, extended=requests)


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def pod_claims(pod: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    """The pod's claims from its annotation (empty when it has none). Raises InvalidObject."""
    text = _annotations(pod).get(CLAIMS_ANNOTATION)
    return parse_pod_claims(text) if text is not None else ()


def parse_claim_statuses(text: str) -> dict[str, str]:
    """The claim-statuses annotation's value: pod-claim name (a DNS label) → claim name (a
    DNS subdomain). Raises InvalidObject (only); bounded like the claims annotation."""
    field = _STATUSES_FIELD
    if not isinstance(text, str):
        raise InvalidObject(field, "must be a string holding a JSON object")
    data = load_json(text, field=field, max_bytes=MAX_ANNOTATION_BYTES, max_depth=1)
    if not isinstance(data, dict):
        raise InvalidObject(field, "must be a JSON object of pod-claim name to claim name")
    if len(data) > MAX_POD_CLAIMS:
        raise InvalidObject(field, f"at most {MAX_POD_CLAIMS} entries (has {len(data)})")
    for key, value in data.items():
        if not is_dns_label(key) or not is_object_name(value):
            raise InvalidObject(f"{field}[{shorten(key, 40)}]", "must map a pod-claim name "
                                "(DNS label) to a claim name (DNS subdomain)")
    return dict(data)


def claim_statuses(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod's recorded pod-claim name → claim name; empty when the annotation is absent
    or malformed (a malformed one is ignored whole: kdra never wrote it, and its names never
    become URL paths)."""
    text = _annotations(pod).get(CLAIM_STATUSES_ANNOTATION)
    if not text:
        return {}
    return dict(_statuses_cached(text))


@functools.lru_cache(maxsize=4096)
def _statuses_cached(text: str) -> dict[str, str]:
    try:
        return parse_claim_statuses(text)
    except InvalidObject:
        return {}


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


def set_allocation(status: dict[str, Any], allocation: Mapping[str, Any], *,
                   summary: bool = True) -> None:
    """Put ``allocation`` (API form) into a claim's ``status``, with its device summary
    (``summary``: kdra's CRD has the field; upstream's API has none)."""
    status["allocation"] = allocation
    if not summary:
        return
    results = (allocation.get("devices") or {}).get("results") or ()
    status[ALLOCATED_DEVICES] = ",".join(str(r.get("device", "")) for r in results)


def clear_allocation(status: dict[str, Any]) -> None:
    """Deallocate in a claim's ``status``: the allocation, its summary and the devices' status
    (what the agent reported about devices the claim no longer has)."""
    for key in ("allocation", ALLOCATED_DEVICES, "devices"):
        status.pop(key, None)


def drop_stray_device_statuses(status: dict[str, Any]) -> None:
    """Before kdra writes a claim's ``status``: keep only the ``devices`` entries of devices
    the allocation holds (upstream's API drops the others when a claim is deallocated, and
    kdra's CRD refuses an update that keeps one) and whose ``data`` could be read (an entry
    read with :data:`~kdra.kube.core.jsonscan.UNDECODABLE_KEY` in place of its data is never
    written back as if the agent had said that)."""
    entries = status.get("devices")
    if entries is None:
        return
    allocation = status.get("allocation")
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    held = {(r.get("driver"), r.get("pool"), r.get("device"))
            for r in results or () if isinstance(r, Mapping)}
    kept = [e for e in entries if isinstance(e, Mapping)
            and (e.get("driver"), e.get("pool"), e.get("device")) in held
            and not (isinstance(e.get("data"), Mapping) and UNDECODABLE_KEY in e["data"])]
    if len(kept) == len(entries):
        return
    if kept:
        status["devices"] = kept
    else:
        del status["devices"]


def protected_by_kdra(claim: Mapping[str, Any], finalizer: str = FINALIZER) -> bool:
    """Whether the claim carries the flavour's ``finalizer``: kdra generated it or allocated it
    (the binder adds the finalizer before it writes an allocation; in the native flavour,
    upstream's scheduler does too)."""
    return finalizer in (claim.get("metadata", {}).get("finalizers") or ())


def generated_for(claim: Mapping[str, Any],
                  annotation: str = POD_CLAIM_NAME_ANNOTATION) -> Mapping[str, Any] | None:
    """The pod a claim was generated for — its controller owner reference of kind Pod when it
    carries the flavour's pod-claim-name ``annotation`` — or None: the claim is not a
    generated one. A generated claim serves only that pod (upstream's IsForPod), however a pod
    names it."""
    meta = claim.get("metadata") if isinstance(claim, Mapping) else None
    if not isinstance(meta, Mapping):
        return None
    annotations = meta.get("annotations")
    if not isinstance(annotations, Mapping) or annotation not in annotations:
        return None
    return next((ref for ref in meta.get("ownerReferences") or ()
                 if isinstance(ref, Mapping) and ref.get("controller")
                 and ref.get("kind") == "Pod"), None)


def owned_by(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Whether ``claim`` is controller-owned by the pod with ``pod_uid``."""
    return any(
        ref.get("controller") and ref.get("uid") == pod_uid and ref.get("kind") == "Pod"
        for ref in claim.get("metadata", {}).get("ownerReferences", ()) or ()
    )


def generated_claim(template: Mapping[str, Any], pod: Mapping[str, Any],
                    pod_claim: PodClaim, *, annotation: str = POD_CLAIM_NAME_ANNOTATION,
                    finalizer: str = FINALIZER,
                    api_version: str = f"{GROUP}/{VERSION}") -> dict[str, Any]:
    """The claim object the controller creates for a template entry (before the server
    fills in the name), with the flavour's pod-claim-name ``annotation``, ``finalizer`` and
    ``api_version``."""
    meta = pod["metadata"]
    tmeta = template.get("spec", {}).get("metadata", {}) or {}
    annotations = dict(tmeta.get("annotations") or {})
    annotations[annotation] = pod_claim.name
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
        "finalizers": [finalizer],
    }
    if tmeta.get("labels"):  # the template's labels, as upstream (none: no labels key)
        metadata["labels"] = dict(tmeta["labels"])
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": template.get("spec", {}).get("spec", {}) or {},
    }
