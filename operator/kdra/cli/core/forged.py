"""Forged outputs: kdra's per-pod outputs (claim-statuses, device and GPU annotations, the
device env) that say something kdra did not decide — the rules ``kdra check`` adds to
:mod:`kdra.cli.core.invariants` for issue 22's attacks 6 and 7.

Only kdra writes those outputs (the validating webhook denies everyone else, and the binder
refuses pods that carry them unbound), so in a settled cluster none of these rules is
broken; a violation means a webhook was bypassed (down, removed, or an old object) and a pod
may see devices it was not given. The rules (``rule`` of each violation):

``foreign-claim``
    A pod's claim-statuses records, for a template entry, a claim another pod owns; a pod
    names (``resourceClaimName``) a claim generated for another pod; or a generated claim is
    reserved for a pod that does not own it (upstream's IsForPod).
``forged-devices``
    A pod's ``devices.resource.kdra.dev/<container>`` annotation names a device, or its
    ``gpus.resource.kdra.dev/<container>`` annotation the UUID of a published GPU, that none
    of its claims (allocated and reserved for it) holds.
``forged-env``
    A container that uses the pod's claims gets ``KDRA_DEVICES`` / ``NVIDIA_VISIBLE_DEVICES``
    other than through kdra's downward-API entry; or any bound pod's container (regular, init,
    ephemeral) gets them set to published devices its claims do not hold
    (``NVIDIA_VISIBLE_DEVICES=all`` on a node where kdra publishes GPUs included) — from its
    ``env``, or from a ConfigMap or Secret through ``envFrom`` or ``valueFrom`` (``sources``:
    the data of those the caller could read; an unreadable one is not judged).

Invariants: pure, total (a malformed piece is skipped), messages cut short.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kdra.dra.errors import InvalidObject
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import (
    DEVICE_ENVS,
    DEVICES_ANNOTATION_PREFIX,
    DEVICES_ENV,
    GPU_DRIVER,
    GPU_UUIDS_ANNOTATION_PREFIX,
    GPU_UUIDS_ENV,
    PodClaim,
    owned_by,
)
from kdra.kube.core.untrusted import shorten

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


Sources = Mapping[tuple[str, str, str], Mapping[str, str]]
"""(namespace, ``ConfigMap`` | ``Secret``, name) → its data (a Secret's decoded)."""


def env_sources(pod: JSON) -> set[tuple[str, str, str]]:
    """The ConfigMaps and Secrets whose keys can reach the pod's containers' environment
    (``envFrom``, and ``valueFrom`` of the device variables): what to read for ``sources``."""
    namespace = str(_map(pod.get("metadata")).get("namespace"))
    found: set[tuple[str, str, str]] = set()
    for container in _containers(pod):
        for source in container.get("envFrom") or ():
            for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
                name = _map(_map(source).get(key)).get("name")
                if isinstance(name, str):
                    found.add((namespace, kind, name))
        for env in container.get("env") or ():
            if isinstance(env, Mapping) and env.get("name") in DEVICE_ENVS:
                for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                    name = _map(_map(env.get("valueFrom")).get(key)).get("name")
                    if isinstance(name, str):
                        found.add((namespace, kind, name))
    return found


def forged_outputs(pods: Sequence[JSON], claims: Sequence[JSON],
                   slices: Sequence[JSON], sources: Sources | None = None,
                   flavour: Flavour = KDRA) -> list[tuple[str, str]]:
    """(rule, message) for every forged output found (``flavour``: where pods' claims are,
    how generated claims are marked)."""
    by_key = {(_map(c.get("metadata")).get("namespace"), _map(c.get("metadata")).get("name")): c
              for c in claims}
    published = _Published(slices)
    found: list[tuple[str, str]] = []
    for claim in claims:
        owner = flavour.generated_for(claim)
        if owner is None:
            continue
        for uid in sorted(_reserved_uids(claim) - {str(owner.get("uid"))}):
            found.append(("foreign-claim", f"generated claim {_name(claim)} of pod "
                          f"{owner.get('name')} is reserved for another pod (uid {uid})"))
    for pod in pods:
        if not _finished(pod):
            found += _pod_outputs(pod, by_key, published, sources or {}, flavour)
    return found


def _held(pod: JSON, entries: Sequence[PodClaim], by_key: Mapping[tuple[Any, Any], JSON],
          flavour: Flavour) -> tuple[set[DeviceKey], list[tuple[str, str]]]:
    """The devices the pod's claims hold for it; and foreign-claim violations on the way."""
    meta = _map(pod.get("metadata"))
    namespace, uid = meta.get("namespace"), str(meta.get("uid"))
    recorded = flavour.claim_statuses(pod)
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
        owner = flavour.generated_for(claim)
        if owner is not None and str(owner.get("uid")) != uid:
            found.append(("foreign-claim", f"pod {_name(pod)} names claim {namespace}/{name} "
                          f"(entry {entry.name!r}), which was generated for pod "
                          f"{owner.get('name')}"))
            continue
        if uid in _reserved_uids(claim):
            held.update(_results(claim))
    return held, found


def _pod_outputs(pod: JSON, by_key: Mapping[tuple[Any, Any], JSON],
                 published: _Published, sources: Sources,
                 flavour: Flavour) -> list[tuple[str, str]]:
    try:
        entries: Sequence[PodClaim] = flavour.pod_claims(pod)
    except InvalidObject:
        entries = ()  # the pod-claims invariant reports malformed claims
    held, found = _held(pod, entries, by_key, flavour)
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
    found += _env(pod, entries, held, held_uuids, published, sources)
    return found


def _containers(pod: JSON) -> list[Mapping[str, Any]]:
    spec = _map(pod.get("spec"))
    return [c for kind in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(kind) or () if isinstance(c, Mapping)]


def _effective(container: Mapping[str, Any], namespace: str,
               sources: Sources) -> list[tuple[Mapping[str, Any], str]]:
    """The container's device-variable entries as the kubelet resolves them, each with where
    it comes from: ``env`` wins over ``envFrom`` (a later source over an earlier one); a
    value read from a ConfigMap or Secret is given as a literal ``value``."""
    chosen: dict[str, tuple[Mapping[str, Any], str]] = {}
    for source in container.get("envFrom") or ():
        source = _map(source)
        prefix = source.get("prefix") or ""
        for key, kind in (("configMapRef", "ConfigMap"), ("secretRef", "Secret")):
            name = _map(source.get(key)).get("name")
            data = sources.get((namespace, kind, str(name))) if isinstance(name, str) else None
            for item, value in (data or {}).items():
                variable = f"{prefix}{item}"
                if variable in DEVICE_ENVS:
                    chosen[variable] = ({"name": variable, "value": str(value)},
                                        f"{kind} {namespace}/{name} (envFrom)")
    for env in container.get("env") or ():
        if not isinstance(env, Mapping) or env.get("name") not in DEVICE_ENVS:
            continue
        where, resolved = "env", env
        for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
            ref = _map(_map(env.get("valueFrom")).get(key))
            data = sources.get((namespace, kind, str(ref.get("name"))))
            if ref and data is not None and ref.get("key") in data:
                where = f"{kind} {namespace}/{ref.get('name')} (valueFrom)"
                resolved = {"name": env["name"], "value": str(data[ref["key"]]),
                            "valueFrom": env["valueFrom"]}
        chosen[str(env["name"])] = (resolved, where)
    return list(chosen.values())


def _env(pod: JSON, entries: Sequence[PodClaim], held: set[DeviceKey], held_uuids: set[str],
         published: _Published, sources: Sources) -> list[tuple[str, str]]:
    spec = _map(pod.get("spec"))
    node = spec.get("nodeName")
    namespace = str(_map(pod.get("metadata")).get("namespace"))
    regular = [str(c.get("name")) for c in spec.get("containers") or ()
               if isinstance(c, Mapping)]
    consumers: set[str] = set()
    for entry in entries:
        consumers.update(entry.containers if entry.containers is not None else regular)
    ephemeral = {id(c) for c in spec.get("ephemeralContainers") or ()}
    found: list[tuple[str, str]] = []
    for container in _containers(pod):
        name = str(container.get("name"))
        consumer = name in consumers and id(container) not in ephemeral
        for env, where in _effective(container, namespace, sources):
            problem = _env_problem(env, name, consumer, node, held, held_uuids, published)
            if problem:
                source = "" if where == "env" else f" from {where}"
                found.append(("forged-env", f"pod {_name(pod)} container {name}: "
                              f"{env.get('name')}{source} {problem}"))
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
