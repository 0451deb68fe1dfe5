"""Device exposure: which CDI devices and env a container gets when it is created.

The node agent answers the runtime's NRI ``CreateContainer`` with :func:`decide`: from the
claims the agent **prepared** on its node for the container's pod (by pod uid, through the
claims' ``reservedFor``) and the pod's claims annotation (which pod claim goes to which
container, and which request's devices), it computes the container's CDI device names
(containerd injects them from the CDI spec files the agent wrote) and the two env vars that
sum up a container's devices. Nothing the pod's author controls adds a device: not the
per-container device annotations, not env.

Decision table (``consumer``: an entry of the claims annotation applies to the container,
its ``containers`` list names it or is absent):

=============================================  =============================================
pod / container                                outcome
=============================================  =============================================
no claims annotation                           :class:`Adjustment` without devices; the two
                                               env names overridden only if the container
                                               already has them (image or pod spec)
annotation does not parse, or is too large     :class:`Refusal` naming the annotation
consumer entry whose claim is not reserved     :class:`Refusal` naming the claim
for the pod on this node, or not prepared
(no recorded result covering its allocation)
every consumer entry prepared                  :class:`Adjustment`: the entries' devices
                                               (``request`` narrows to that request's
                                               devices), CDI names in claim order without
                                               duplicates, ``KDRA_DEVICES`` and the
                                               backends' env (the GPUs' UUID list)
no consumer entry (another container's claims) :class:`Adjustment` without devices, as in
                                               the first row
=============================================  =============================================

Env: ``KDRA_DEVICES`` = ``driver/pool/device,...`` (the binder's annotation format), then
each device backend's conventions over the container's devices of that backend
(:meth:`~kdra.agent.core.backend.DeviceBackend.container_env`; the GPU backends' list of the
container's GPU UUIDs, :mod:`kdra.agent.core.gpu_backend`). A container without devices gets
``KDRA_DEVICES=""`` (and a backend's "nothing", the GPUs' ``void``) where it set the variable
itself: containerd 2.2 cannot remove a variable the pod set (containerd#13432), so kdra
overrides it. The CDI specs never
set these lists: a CDI env edit replaces a variable of the same name, and these are lists
over all of a container's devices, from many claims.

Init containers: NRI does not say whether a container is an init container, so an entry
without ``containers`` applies to every container of the pod here (the webhook's env path
gives such entries to regular containers only). List containers to be exact.

Invariants:
- Pure: the caller passes the pod, the container and the node's prepared claims.
- A device reaches a container only if it is in a prepared result of a claim whose
  ``reservedFor`` holds the container's pod uid, in the pod's namespace, on this node.
- Every refusal names the pod, the container and (where there is one) the claim, and says
  what is missing; messages are bounded (at most 1 KiB).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kdra.agent.core.backend import NO_BACKENDS, Backends
from kdra.agent.core.checkpoint import ClaimEntry, PreparedDevice
from kdra.agent.core.nodeprep import our_results
from kdra.dra.errors import InvalidObject
from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    DEVICES_ENV,
    POD_CLAIM_NAME_ANNOTATION,
    PodClaim,
    claim_statuses,
    parse_pod_claims,
)

MAX_ANNOTATION = 256 * 1024
"""The API server's limit on all of an object's annotations together; a claims annotation
larger than that did not come from a pod the API server admitted."""
MAX_MESSAGE = 1024

Outcome = Literal["adjusted", "no_devices"]


@dataclass(frozen=True)
class PodInfo:
    """The pod of the container being created, as the runtime describes it."""

    uid: str
    namespace: str
    name: str
    annotations: Mapping[str, str]


@dataclass(frozen=True)
class PreparedClaim:
    """A claim reserved for the pod, as the node agent knows it."""

    namespace: str
    name: str
    uid: str
    pod_claim_name: str = ""
    """``resource.kdra.dev/pod-claim-name`` of a generated claim."""
    devices: tuple[PreparedDevice, ...] | None = None
    """The recorded result of preparing the claim on this node; None: not prepared here."""


@dataclass(frozen=True)
class Adjustment:
    """What the container gets: CDI devices to inject and env to set."""

    cdi_devices: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    devices: tuple[str, ...] = ()
    """``driver/pool/device`` of each device, for logs."""

    @property
    def outcome(self) -> Outcome:
        return "adjusted" if self.devices else "no_devices"


@dataclass(frozen=True)
class Refusal:
    """The container must not be created (yet): ``message`` says why."""

    message: str
    claim: str = ""
    """``namespace/name`` of the claim at fault, when there is one."""


Decision = Adjustment | Refusal


def reserved_for(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """Whether ``claim``'s ``status.reservedFor`` holds the pod ``pod_uid``."""
    reserved = (claim.get("status") or {}).get("reservedFor") or ()
    return bool(pod_uid) and any(
        isinstance(entry, Mapping) and entry.get("uid") == pod_uid
        and entry.get("resource", "pods") == "pods" for entry in reserved)


def prepared_claim(claim: Mapping[str, Any], entry: ClaimEntry | None, node: str,
                   drivers: Sequence[str]) -> PreparedClaim:
    """``claim`` with the devices the node's checkpoint ``entry`` recorded for it — only
    when that entry is of this very claim (uid), is ``prepared``, and covers exactly the
    claim's allocation results on ``node``; otherwise ``devices`` is None."""
    meta = claim.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    results = {r.key for r in our_results(claim, node, drivers)}
    devices = None
    if (entry is not None and entry.state == "prepared" and entry.claim.uid == uid
            and results and {d.key for d in entry.devices} == results):
        devices = entry.devices
    return PreparedClaim(str(meta.get("namespace", "")), str(meta.get("name", "")), uid,
                         str((meta.get("annotations") or {}).get(POD_CLAIM_NAME_ANNOTATION,
                                                                 "")), devices)


def decide(pod: PodInfo, container: str, env: Sequence[str],
           claims: Sequence[PreparedClaim], node: str, *,
           backends: Backends = NO_BACKENDS) -> Decision:
    """The container's devices (see the module's decision table). ``env``: the container's
    ``KEY=value`` environment as created; ``claims``: the claims in the pod's namespace
    whose ``reservedFor`` holds ``pod.uid`` and that allocate devices on ``node``;
    ``backends``: the node agent's device backends (their env conventions)."""
    who = f"container {container!r} of pod {pod.namespace}/{pod.name}"
    text = pod.annotations.get(CLAIMS_ANNOTATION)
    if text is None:
        return _adjustment((), env, backends)
    if len(text) > MAX_ANNOTATION:
        return Refusal(_bounded(f"kdra: {who}: annotation {CLAIMS_ANNOTATION} is "
                                f"{len(text)} bytes (at most {MAX_ANNOTATION})"))
    try:
        entries = parse_pod_claims(text)
    except InvalidObject as exc:
        return Refusal(_bounded(f"kdra: {who}: {exc}; fix the pod's annotation"))
    statuses = (claim_statuses({"metadata": {"annotations": pod.annotations}})
                if len(pod.annotations.get(CLAIM_STATUSES_ANNOTATION, "")) <= MAX_ANNOTATION
                else {})
    by_name = {c.name: c for c in claims if c.namespace == pod.namespace}
    devices: dict[tuple[tuple[str, str, str], str], PreparedDevice] = {}  # (key, shareID)
    for entry in entries:
        if entry.containers is not None and container not in entry.containers:
            continue
        claim = _resolve(entry, statuses, by_name)
        if claim is None:
            name = entry.resource_claim_name or statuses.get(entry.name)
            what = (f"ResourceClaim {pod.namespace}/{name} (pod claim {entry.name!r})"
                    if name else f"pod claim {entry.name!r} (its ResourceClaim is not "
                                 "created yet)")
            return Refusal(_bounded(
                f"kdra: {who}: {what} is not allocated and reserved for this pod on node "
                f"{node}; the container is created once it is"),
                f"{pod.namespace}/{name}" if name else "")
        if claim.devices is None:
            return Refusal(_bounded(
                f"kdra: {who}: ResourceClaim {claim.namespace}/{claim.name} (pod claim "
                f"{entry.name!r}) is not prepared on node {node}; the container is created "
                "once the node agent has prepared it"), f"{claim.namespace}/{claim.name}")
        for device in claim.devices:
            if not entry.shows(container, device.request):
                continue
            devices.setdefault((device.key, device.share_id), device)
    return _adjustment(tuple(devices.values()), env, backends)


def _resolve(entry: PodClaim, statuses: Mapping[str, str],
             by_name: Mapping[str, PreparedClaim]) -> PreparedClaim | None:
    """The reserved claim behind a pod claim: by name (``resourceClaimName``, or the
    generated claim's name in the kdra-owned claim-statuses annotation), else the generated
    claim marked with the entry's pod-claim name."""
    name = entry.resource_claim_name or statuses.get(entry.name)
    if name is not None:
        return by_name.get(name)
    return next((c for c in by_name.values() if c.pod_claim_name == entry.name), None)


def _adjustment(devices: Sequence[PreparedDevice], env: Sequence[str],
                backends: Backends) -> Adjustment:
    present = {item.split("=", 1)[0] for item in env}
    listed = tuple(dict.fromkeys(f"{d.driver}/{d.pool}/{d.device}" for d in devices))
    settings: list[tuple[str, str]] = []
    if listed or DEVICES_ENV in present:
        settings.append((DEVICES_ENV, ",".join(listed)))
    settings += [(k, v) for k, v in backends.container_env(devices, present)
                 if k != DEVICES_ENV]
    cdi = tuple(dict.fromkeys(i for d in devices for i in d.cdi_device_ids))
    return Adjustment(cdi, tuple(settings), listed)


def _bounded(message: str) -> str:
    message = re.sub(r"\s+", " ", message)
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."
