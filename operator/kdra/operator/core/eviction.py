"""Which pods a NoExecute device taint evicts, and when — the pure half of the operator's
taint eviction controller (upstream's ``device-taint-eviction`` controller, KEP-5055).

For an allocated claim: every result's device is looked up in the current taints (slices
and DeviceTaintRules); the result's tolerations decide (the allocation keeps them; for an
allocation made before kdra copied them, the claim's request is read instead). The earliest
:func:`~kdra.dra.taints.eviction` over the claim's devices is the claim's; every pod in
``reservedFor`` is evicted then.

Invariants:
- Pure: taints come in through a look-up function, time as ``now``.
- Admin-access results are never a reason to evict (upstream: such allocations do not own the
  device), and a claim that is not allocated, or reserved for no pod, evicts nothing.
- A malformed claim is skipped (InvalidObject is the caller's to log), never an exception for
  the others.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdra.dra.models import DeviceToleration, ResourceClaim
from kdra.dra.taints import Eviction, Taint, TaintLike, eviction

DeviceId = tuple[str, str, str]  # (driver, pool, device)
TaintLookup = Callable[[str, str, str], Sequence[TaintLike]]


@dataclass(frozen=True, slots=True)
class ClaimEviction:
    """The pods of one claim that must go, when, and because of which device and taint."""

    namespace: str
    claim: str
    claim_uid: str
    device: DeviceId
    decision: Eviction
    pods: tuple[tuple[str, str], ...]
    """(name, uid) of the pods in ``reservedFor``."""

    def reason(self) -> str:
        taint = self.decision.taint
        label = f"{taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}"
        why = ("tolerated only for a while" if self.decision.tolerated else "not tolerated")
        return f"device {'/'.join(self.device)} has taint {label} ({why})"


def request_tolerations(claim: ResourceClaim) -> dict[str, tuple[DeviceToleration, ...]]:
    """Tolerations per result request name (``req`` or ``req/sub``) from the claim's spec."""
    found: dict[str, tuple[DeviceToleration, ...]] = {}
    for request in claim.spec.devices.requests:
        for name, alternative in request.alternatives():
            found[name] = alternative.tolerations
    return found


def claim_eviction(claim: ResourceClaim, taints: TaintLookup,
                   now: dt.datetime) -> ClaimEviction | None:
    """When the claim's pods must be evicted (None: they may stay)."""
    allocation = claim.status.allocation
    pods = tuple((ref.name, ref.uid) for ref in claim.status.reserved_for
                 if ref.resource == "pods" and not ref.api_group)
    if allocation is None or not pods:
        return None
    from_spec: Mapping[str, tuple[DeviceToleration, ...]] | None = None
    earliest: ClaimEviction | None = None
    for result in allocation.devices.results:
        if result.admin_access:
            continue
        device_taints = taints(result.driver, result.pool, result.device)
        if not device_taints:
            continue
        tolerations = result.tolerations
        if not tolerations:
            if from_spec is None:
                from_spec = request_tolerations(claim)
            tolerations = from_spec.get(result.request, ())
        decision = eviction(device_taints, tolerations, now)
        if decision is None or (earliest is not None and decision.at >= earliest.decision.at):
            continue
        earliest = ClaimEviction(
            namespace=claim.metadata.namespace or "", claim=claim.metadata.name,
            claim_uid=claim.metadata.uid, device=(result.driver, result.pool, result.device),
            decision=decision, pods=pods)
    return earliest


def slice_taints(slices: Sequence[Mapping[str, Any]]) -> dict[DeviceId, list[Taint]]:
    """Taints per device of the newest generation of each pool (fields that are not strings
    read as empty: the slice schema bounds them, this only keeps hostile input harmless)."""
    newest: dict[tuple[str, str], int] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (str(spec.get("driver")), str(pool.get("name")))
        generation = pool.get("generation")
        if isinstance(generation, int):
            newest[key] = max(newest.get(key, generation), generation)
    found: dict[DeviceId, list[Taint]] = {}
    for obj in slices:
        spec = obj.get("spec") or {}
        pool = spec.get("pool") or {}
        driver, name = str(spec.get("driver")), str(pool.get("name"))
        if pool.get("generation") != newest.get((driver, name)):
            continue
        for device in spec.get("devices") or ():
            taints = device.get("taints") if isinstance(device, dict) else None
            if taints and isinstance(taints, list):
                found[(driver, name, str(device.get("name")))] = [
                    _taint(t) for t in taints if isinstance(t, dict)]
    return found


def _taint(raw: Mapping[str, Any]) -> Taint:
    def text(name: str) -> str:
        value = raw.get(name)
        return value if isinstance(value, str) else ""

    return Taint(text("key"), text("value"), text("effect"), text("timeAdded") or None)


__all__ = ["ClaimEviction", "DeviceId", "TaintLookup", "claim_eviction", "request_tolerations",
           "slice_taints"]
