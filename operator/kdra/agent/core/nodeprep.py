"""Preparing claims on a node, without the I/O: which claims, what the checkpoint records of
them, and the ``status.devices[]`` entries the node agent reports.

kubelet calls a DRA driver's NodePrepareResources for a claim reserved for a pod on its node;
kdra's agent does the same job from the claim itself (kubelet's side: kubernetes/kubernetes
``pkg/kubelet/cm/dra/manager.go``). This module decides:

- :func:`our_results`: the allocation results a node agent serves (its drivers, pool = node);
  :func:`wants_prepared`: whether the claim should be prepared there now (allocated to the
  pool and ``reservedFor`` non-empty, not being deleted).
- :func:`prepared_devices`: what the checkpoint records of the prepared results.
- The CDI spec of a claim is :mod:`kdra.agent.core.cdi`'s
  (:func:`~kdra.agent.core.cdi.build_cdi_spec`), the checkpoint
  :mod:`kdra.agent.core.checkpoint`'s (the agent's durable record of the claims it prepared,
  with a checksum).
- :func:`device_statuses` / :func:`merge_device_statuses`: the ``status.devices[]`` entries
  (condition ``Ready``) and how they replace the agent's own entries while keeping every entry
  another driver or node wrote.

Crash consistency (the order the agent follows; a restart re-runs the same decisions):
prepare = checkpoint ``preparing`` → CDI file → checkpoint ``prepared`` → status;
unprepare = CDI file removed → checkpoint entry removed → status entries removed. A CDI file
therefore always has a checkpoint entry (``preparing`` or ``prepared``), and any file without
one is an orphan the agent may delete.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdra.agent.core.backend import NO_BACKENDS, Backends
from kdra.agent.core.cdi import cdi_device_id
from kdra.agent.core.checkpoint import Checkpoint, ClaimRef, PreparedDevice
from kdra.agent.core.inventory_devices import InventoryDevice
from kdra.dra.binding_conditions import READY
from kdra.dra.timestamps import transition_time
from kdra.kube.core.printable import MAX_LINE, printable

HEALTHY = "Healthy"
"""The device's applied health (issue 25), beside Ready in ``status.devices[].conditions``."""

JSON = dict[str, Any]


# --------------------------------------------------------------------------- which claims


@dataclass(frozen=True)
class Result:
    """One allocated device of a claim that this node agent serves."""

    request: str
    driver: str
    pool: str
    device: str
    share_id: str = ""
    """The result's ``shareID``: set for a share of a device several claims hold at once."""
    consumed_capacity: tuple[tuple[str, str], ...] = ()
    """The result's ``consumedCapacity`` as sorted (capacity, quantity) pairs."""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.device)


def admin_requests(claim: Mapping[str, Any]) -> frozenset[str]:
    """Names of the claim's requests with ``exactly.adminAccess: true``."""
    requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return frozenset(r.get("name", "") for r in requests
                     if isinstance(r, Mapping) and (r.get("exactly") or {}).get("adminAccess"))


def busy_devices(checkpoint: Checkpoint, uid: str) -> dict[tuple[str, str, str], ClaimRef]:
    """Devices the checkpoint holds for claims other than ``uid`` (admin access and shares
    aside): a device is prepared for at most one claim at a time, whatever the allocations
    say. (Shares of a device are bounded by its capacity instead, partitions by their GPU's
    counters: :mod:`kdra.agent.core.node_accounting`.)"""
    return {device.key: entry.claim for entry in checkpoint.claims.values()
            if entry.claim.uid != uid for device in entry.devices
            if not device.admin_access and not device.share_id}


def still_holds(claim: Mapping[str, Any] | None, holder: ClaimRef,
                device: tuple[str, str, str], node: str, drivers: Iterable[str]) -> bool:
    """Does ``holder`` — a claim the node's checkpoint holds ``device`` (driver, pool,
    device) for — still hold it, by ``claim``, the newest version of it the agent has seen?
    Not when that claim is gone or replaced (another uid), no longer wants preparing on
    ``node``, or no longer allocates the device: then only its unprepare, already queued by
    the event that said so, stands between the device and its next claim."""
    if claim is None or (claim.get("metadata") or {}).get("uid") != holder.uid:
        return False
    drivers = list(drivers)
    return wants_prepared(claim, node, drivers) and any(
        result.key == device for result in our_results(claim, node, drivers))


def our_results(claim: Mapping[str, Any], node: str, drivers: Iterable[str]) -> list[Result]:
    """Allocation results of ``claim`` for ``drivers`` in pool ``node``, in claim order."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    wanted = set(drivers)
    results = []
    for entry in (allocation.get("devices") or {}).get("results") or ():
        if entry.get("driver") in wanted and entry.get("pool") == node:
            consumed = entry.get("consumedCapacity")
            results.append(Result(
                str(entry.get("request", "")), entry["driver"], node,
                str(entry.get("device", "")), str(entry.get("shareID") or ""),
                tuple(sorted((str(k), str(v)) for k, v in consumed.items()))
                if isinstance(consumed, Mapping) else ()))
    return results


def pools_of(claim: Mapping[str, Any]) -> set[tuple[str, str]]:
    """(driver, pool) of every allocation result of ``claim``."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return {(str(entry.get("driver")), str(entry.get("pool")))
            for entry in (allocation.get("devices") or {}).get("results") or ()}


def wants_prepared(claim: Mapping[str, Any] | None, node: str, drivers: Iterable[str]) -> bool:
    """Should the claim's devices on ``node`` be prepared now? Allocated to the pool and
    reserved for at least one consumer; a claim that is being deleted stays prepared while it
    is still reserved (its pods may still run)."""
    if claim is None:
        return False
    status = claim.get("status") or {}
    return bool(status.get("reservedFor")) and bool(our_results(claim, node, drivers))


def same_for_preparer(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether two versions of a claim are the same to a node's preparer: it reads a claim's
    uid, deletion, generation, spec and status (allocation, reservations, device statuses)
    and nothing else, so a version that moved only other metadata — the claim controller
    removing its finalizer before the DELETE, a label, an annotation — asks for no sync (a
    sync of a prepared claim costs a worker thread's visit to its CDI files and a status
    comparison: issue 42)."""
    old_meta, new_meta = old.get("metadata") or {}, new.get("metadata") or {}
    return all(old_meta.get(field) == new_meta.get(field)
               for field in ("uid", "deletionTimestamp", "generation")) and \
        old.get("spec") == new.get("spec") and old.get("status") == new.get("status")


MAX_SHARE_ID = 64
"""A ``shareID`` longer than this is cut (upstream's are UIDs: 36 characters)."""


def prepared_devices(claim: ClaimRef, results: Sequence[Result],
                     devices: Mapping[tuple[str, str], InventoryDevice],
                     admin_requests: frozenset[str] = frozenset(), *,
                     backends: Backends = NO_BACKENDS) -> tuple[PreparedDevice, ...]:
    """The recorded result of preparing ``results`` (every device must be in ``devices``,
    keyed by (driver, name)); results of ``admin_requests`` are marked admin access.

    Each record's ``data``: the device's ``uuid`` attribute, what its backend records
    (:meth:`~kdra.agent.core.backend.DeviceBackend.device_data`, e.g. a GPU's
    ``productName``, a partition's UUID), a share's ``shareID`` and ``consumedCapacity``,
    and the ``cdiDeviceIDs``; ``backend``: the device's backend."""
    prepared = []
    for result in results:
        device = devices[(result.driver, result.device)]
        ids = (cdi_device_id(result.driver, claim.uid, result.device, result.share_id),)
        data: dict[str, Any] = {}
        uuid = device.attribute("uuid")
        if uuid is not None:
            data["uuid"] = uuid
        data.update(backends.named(device.backend).device_data(device, result.pool))
        if result.share_id:
            data["shareID"] = result.share_id[:MAX_SHARE_ID]
            data["consumedCapacity"] = dict(result.consumed_capacity)
        data["cdiDeviceIDs"] = list(ids)
        admin = result.request.split("/", 1)[0] in admin_requests
        prepared.append(PreparedDevice(result.request, result.driver, result.pool,
                                       result.device, ids, data, admin, result.share_id,
                                       result.consumed_capacity, device.backend))
    return tuple(prepared)


# --------------------------------------------------------------------------- claim status


@dataclass(frozen=True)
class DeviceOutcome:
    """How preparing one device went, for ``status.devices[]``."""

    driver: str
    pool: str
    device: str
    ready: bool
    reason: str
    message: str
    data: Mapping[str, Any] | None = None
    health: tuple[bool, str, str] | None = None
    """(healthy, reason, message) for the ``Healthy`` condition; None: not reported."""
    share_id: str = ""
    """The share's ``shareID`` (``status.devices[]`` entries are keyed by it too)."""


def ready_outcomes(devices: Sequence[PreparedDevice]) -> list[DeviceOutcome]:
    return [DeviceOutcome(d.driver, d.pool, d.device, True, "Prepared",
                          "CDI devices: " + ", ".join(d.cdi_device_ids), d.data,
                          share_id=d.share_id)
            for d in devices]


def device_statuses(outcomes: Sequence[DeviceOutcome], *, now: str,
                    previous: Sequence[Mapping[str, Any]] = (),
                    generation: int | None = None) -> list[JSON]:
    """``status.devices[]`` entries for ``outcomes``. A condition whose status did not change
    keeps its ``lastTransitionTime`` from ``previous`` (so re-reporting is a no-op).

    ``Healthy`` is written once a health source has reported a problem with the device
    (``False``, its reason and since when), and stays (``True`` again) after it recovers; a
    device nothing was ever reported about has no ``Healthy`` condition — its absence says
    what ``True`` would, and every claim write and watch event of the claim stays ~350 bytes
    (the condition and its managed fields) smaller (issue 42)."""
    before = {(e.get("driver"), e.get("pool"), e.get("device"), e.get("shareID") or ""): e
              for e in previous}
    entries = []
    for outcome in outcomes:
        status = "True" if outcome.ready else "False"
        old = before.get((outcome.driver, outcome.pool, outcome.device,
                          outcome.share_id)) or {}
        since = transition_time(old.get("conditions"), READY, status, now)
        condition: JSON = {"type": READY, "status": status, "reason": outcome.reason,
                           "message": printable(outcome.message, MAX_LINE),
                           "lastTransitionTime": since}
        if generation is not None:
            condition["observedGeneration"] = generation
        conditions = [condition]
        if outcome.health is not None and (
                not outcome.health[0] or _reported(old.get("conditions"), HEALTHY)):
            healthy, reason, message = outcome.health
            status = "True" if healthy else "False"
            since = transition_time(old.get("conditions"), HEALTHY, status, now)
            health: JSON = {"type": HEALTHY, "status": status, "reason": reason,
                            "message": printable(message, MAX_LINE), "lastTransitionTime": since}
            if generation is not None:
                health["observedGeneration"] = generation
            conditions.append(health)
        entry: JSON = {"driver": outcome.driver, "pool": outcome.pool, "device": outcome.device,
                       "conditions": conditions}
        if outcome.share_id:
            entry["shareID"] = outcome.share_id
        if outcome.data:
            entry["data"] = dict(outcome.data)
        entries.append(entry)
    return entries


def _reported(conditions: Any, kind: str) -> bool:
    """Whether ``conditions`` (a status entry's, as read back: anything) hold one of
    ``kind``."""
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == kind for c in conditions)


def merge_device_statuses(existing: Sequence[Mapping[str, Any]], ours: Sequence[JSON], *,
                          node: str, drivers: Iterable[str]) -> list[JSON]:
    """``existing`` with every entry of (our drivers, pool ``node``) replaced by ``ours``;
    entries other drivers or nodes wrote are kept, in their order, before ours."""
    wanted = set(drivers)
    kept = [dict(e) for e in existing
            if not (e.get("driver") in wanted and e.get("pool") == node)]
    return kept + list(ours)
