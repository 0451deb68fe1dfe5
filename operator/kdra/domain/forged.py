"""Forged outputs: kdra's per-pod outputs (claim-statuses, device and GPU annotations, the
device env) that say something kdra did not decide — the rules ``kdra check`` adds to
:mod:`kdra.domain.invariants` for issue 22's attacks 6 and 7.

Only kdra writes those outputs (the validating webhook denies everyone else, and the binder
refuses pods that carry them unbound), so in a settled cluster none of these rules is
broken; a violation means a webhook was bypassed (down, removed, or an old object) and a pod
may see devices it was not given. The rules (``rule`` of each violation):

``foreign-claim``
    A pod's claim-statuses records, for a template entry, a claim another pod owns; or a
    generated claim is reserved for a pod that does not own it (upstream's IsForPod).
``forged-devices``
    A pod's ``devices.resource.kdra.dev/<container>`` annotation names a device, or its
    ``gpus.resource.kdra.dev/<container>`` annotation the UUID of a published GPU, that none
    of its claims (allocated and reserved for it) holds.
``forged-env``
    A container that uses the pod's claims sets ``KDRA_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES``
    other than through kdra's downward-API entry; or any bound pod's container sets them to
    published devices its claims do not hold (``NVIDIA_VISIBLE_DEVICES=all`` on a node where
    kdra publishes GPUs included).

Invariants: pure, total (a malformed piece is skipped), messages cut short.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kdra.domain.podclaims import (
    DEVICE_ENVS,
    DEVICES_ANNOTATION_PREFIX,
    DEVICES_ENV,
    GPU_DRIVER,
    GPU_UUIDS_ANNOTATION_PREFIX,
    GPU_UUIDS_ENV,
    POD_CLAIM_NAME_ANNOTATION,
    PodClaim,
    claim_statuses,
    owned_by,
    pod_claims,
)
from kdra.domain.untrusted import shorten
from kdra.dra.errors import InvalidObject

JSON = Mapping[str, Any]
DeviceKey = tuple[str, str, str]

RULES = ("foreign-claim", "forged-devices", "forged-env")


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _name(obj: JSON) -> str:
    meta = _map(obj.get("metadata"))
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def _finished(pod: JSON) -> bool:
    return _map(pod.get("status")).get("phase") in ("Succeeded", "Failed")


def _results(claim: JSON) -> list[DeviceKey]:
    allocation = _map(_map(claim.get("status")).get("allocation"))
    results = _map(allocation.get("devices")).get("results")
    return [(str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
            for r in results or () if isinstance(r, Mapping)]


def _reserved_uids(claim: JSON) -> set[str]:
    return {str(r.get("uid")) for r in _map(claim.get("status")).get("reservedFor") or ()
            if isinstance(r, Mapping)}


def _owner(claim: JSON) -> Mapping[str, Any] | None:
    meta = _map(claim.get("metadata"))
    if POD_CLAIM_NAME_ANNOTATION not in _map(meta.get("annotations")):
        return None
    return next((ref for ref in meta.get("ownerReferences") or ()
                 if isinstance(ref, Mapping) and ref.get("controller")
                 and ref.get("kind") == "Pod"), None)


class _Published:
    """What the slices publish: each device's UUID, and the nodes with kdra GPUs."""

    def __init__(self, slices: Iterable[JSON]) -> None:
        self.uuids: dict[str, DeviceKey] = {}
        self.devices: set[DeviceKey] = set()
        self.gpu_nodes: set[str] = set()
        for slice_ in slices:
            spec = _map(slice_.get("spec"))
            driver = str(spec.get("driver"))
            pool = str(_map(spec.get("pool")).get("name"))
            devices = [d for d in spec.get("devices") or () if isinstance(d, Mapping)]
            if driver == GPU_DRIVER and devices and spec.get("nodeName"):
                self.gpu_nodes.add(str(spec["nodeName"]))
            for device in devices:
                key = (driver, pool, str(device.get("name")))
                self.devices.add(key)
                attributes = _map(device.get("attributes"))  # v1: devices are flat
                uuid = _map(attributes.get("uuid") or attributes.get(f"{driver}/uuid"))
                if isinstance(uuid.get("string"), str):
                    self.uuids[uuid["string"]] = key


def forged_outputs(pods: Sequence[JSON], claims: Sequence[JSON],
                   slices: Sequence[JSON]) -> list[tuple[str, str]]:
    """(rule, message) for every forged output found."""
    by_key = {(_map(c.get("metadata")).get("namespace"), _map(c.get("metadata")).get("name")): c
              for c in claims}
    published = _Published(slices)
    found: list[tuple[str, str]] = []
    for claim in claims:
        owner = _owner(claim)
        if owner is None:
            continue
        for uid in sorted(_reserved_uids(claim) - {str(owner.get("uid"))}):
            found.append(("foreign-claim", f"generated claim {_name(claim)} of pod "
                          f"{owner.get('name')} is reserved for another pod (uid {uid})"))
    for pod in pods:
        if not _finished(pod):
            found += _pod_outputs(pod, by_key, published)
    return found


def _held(pod: JSON, entries: Sequence[PodClaim],
          by_key: Mapping[tuple[Any, Any], JSON]) -> tuple[set[DeviceKey], list[tuple[str, str]]]:
    """The devices the pod's claims hold for it; and foreign-claim violations on the way."""
    meta = _map(pod.get("metadata"))
    namespace, uid = meta.get("namespace"), str(meta.get("uid"))
    recorded = claim_statuses(pod)
    held: set[DeviceKey] = set()
    found: list[tuple[str, str]] = []
    for entry in entries:
        name = entry.resource_claim_name or recorded.get(entry.name)
        claim = by_key.get((namespace, name)) if name else None
        if claim is None:
            continue
        if entry.generated and not owned_by(claim, uid):
            found.append(("foreign-claim", f"pod {_name(pod)} records claim {namespace}/{name} "
                          f"for entry {entry.name!r}, which another pod owns"))
            continue
        if uid in _reserved_uids(claim):
            held.update(_results(claim))
    return held, found


def _pod_outputs(pod: JSON, by_key: Mapping[tuple[Any, Any], JSON],
                 published: _Published) -> list[tuple[str, str]]:
    try:
        entries: Sequence[PodClaim] = pod_claims(pod)
    except InvalidObject:
        entries = ()  # the pod-claims invariant reports a malformed annotation
    held, found = _held(pod, entries, by_key)
    held_uuids = {u for u, key in published.uuids.items() if key in held}
    who = f"pod {_name(pod)}"
    annotations = _map(_map(pod.get("metadata")).get("annotations"))
    for key, value in sorted(annotations.items()):
        if not isinstance(value, str) or not value:
            continue
        names = [v.strip() for v in value.split(",") if v.strip()]
        if key.startswith(DEVICES_ANNOTATION_PREFIX):
            bad = [n for n in names if tuple(n.split("/", 2)) not in held]
        elif key.startswith(GPU_UUIDS_ANNOTATION_PREFIX):
            bad = [n for n in names if n in published.uuids and n not in held_uuids]
        else:
            continue
        if bad:
            found.append(("forged-devices", f"{who}: annotation {shorten(key, 100)} names "
                          f"{shorten(', '.join(bad), 200)}, which its claims do not hold"))
    found += _env(pod, entries, held, held_uuids, published)
    return found


def _env(pod: JSON, entries: Sequence[PodClaim], held: set[DeviceKey], held_uuids: set[str],
         published: _Published) -> list[tuple[str, str]]:
    spec = _map(pod.get("spec"))
    node = spec.get("nodeName")
    regular = [str(c.get("name")) for c in spec.get("containers") or ()
               if isinstance(c, Mapping)]
    consumers: set[str] = set()
    for entry in entries:
        consumers.update(entry.containers if entry.containers is not None else regular)
    found: list[tuple[str, str]] = []
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or ():
            if not isinstance(container, Mapping):
                continue
            name = str(container.get("name"))
            for env in container.get("env") or ():
                if not isinstance(env, Mapping) or env.get("name") not in DEVICE_ENVS:
                    continue
                problem = _env_problem(env, name, name in consumers, node, held, held_uuids,
                                       published)
                if problem:
                    found.append(("forged-env", f"pod {_name(pod)} container {name}: "
                                  f"{env.get('name')} {problem}"))
    return found


def _env_problem(env: Mapping[str, Any], container: str, consumer: bool, node: Any,
                 held: set[DeviceKey], held_uuids: set[str], published: _Published) -> str:
    """Why a device env entry is forged ('' when it is not)."""
    name = env.get("name")
    prefix = DEVICES_ANNOTATION_PREFIX if name == DEVICES_ENV else GPU_UUIDS_ANNOTATION_PREFIX
    path = _map(_map(env.get("valueFrom")).get("fieldRef")).get("fieldPath")
    if consumer:
        if path == f"metadata.annotations['{prefix}{container}']" and "value" not in env:
            return ""
        return "is not kdra's entry (kdra sets it in containers that use the pod's claims)"
    value = env.get("value")
    if not isinstance(value, str) or not node:
        return ""
    names = [v.strip() for v in value.split(",") if v.strip()]
    if name == GPU_UUIDS_ENV:
        if "all" in names and node in published.gpu_nodes:
            return f"is 'all' on node {node}, where kdra publishes GPUs"
        bad = [n for n in names if n in published.uuids and n not in held_uuids]
    else:
        bad = [n for n in names if tuple(n.split("/", 2)) in published.devices
               and tuple(n.split("/", 2)) not in held]
    return f"names {shorten(', '.join(bad), 200)}, which its claims do not hold" if bad else ""
