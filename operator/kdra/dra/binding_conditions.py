"""When an allocated claim's devices let its pod bind: upstream's binding conditions
(KEP-5007) and kdra's prepare-before-bind, one mechanism.

A device's allocation result may carry ``bindingConditions`` and
``bindingFailureConditions`` (copied from the device by the allocator). Upstream's scheduler
binds the pod only once every binding condition is ``True`` in the claim's
``status.devices[]`` entry of that device, fails the attempt when a failure condition turns
``True``, and gives up after its binding timeout (600 s by default). kdra's node agent
reports its own devices ``Ready`` once they are prepared, and kdra binds only then: that is
kdra's *implicit* binding condition — ``Ready`` (``Ready=False`` is the failure) — of every
device whose result declares none. A device that declares binding conditions is waited for on
them alone (its driver reports them, not kdra's agent).

Invariants:
- Pure functions of the claim as read from the API (raw JSON); anything malformed reads as
  "not yet", never as ready.
- A device is ready only when all its required conditions are ``True``; a failure condition
  that is ``True`` (or, for the implicit one, ``Ready=False``) is a failure, whatever else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["READY", "DeviceKey", "explicit", "has_binding_conditions", "pending", "readiness",
           "unready_devices"]

READY = "Ready"
"""kdra's implicit binding condition: the condition kdra's node agent reports ``True`` on a
device it prepared (``status.devices[].conditions``), ``False`` when preparing it failed."""

DeviceKey = tuple[str, str, str]
"""(driver, pool, device)."""

JSON = Mapping[str, Any]


def _results(claim: JSON) -> list[JSON]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    devices = allocation.get("devices") if isinstance(allocation, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    return [r for r in results or () if isinstance(r, Mapping)]


def _key(entry: JSON) -> DeviceKey:
    return (str(entry.get("driver", "")), str(entry.get("pool", "")),
            str(entry.get("device", "")))


def explicit(result: JSON) -> bool:
    """The result declares binding conditions of its own (else kdra's ``Ready`` applies)."""
    conditions = result.get("bindingConditions")
    return isinstance(conditions, Sequence) and not isinstance(conditions, str) and bool(
        conditions)


def has_binding_conditions(claim: JSON) -> bool:
    """Some device of the claim's allocation declares binding conditions."""
    return any(explicit(r) for r in _results(claim))


def _conditions(entry: JSON | None) -> dict[str, JSON]:
    if entry is None:
        return {}
    return {str(c.get("type")): c for c in entry.get("conditions") or ()
            if isinstance(c, Mapping)}


def _device_state(result: JSON, entry: JSON | None, implicit: bool) -> bool | str | None:
    conditions = _conditions(entry)
    device = f"{result.get('pool', '')}/{result.get('device', '')}"
    if not explicit(result) and not implicit:
        return True  # no binding condition at all: ready once allocated (upstream)
    if explicit(result):
        for name in result.get("bindingFailureConditions") or ():
            failed = conditions.get(str(name))
            if failed is not None and failed.get("status") == "True":
                return (f"device {device}: binding failed: {name} (reason="
                        f"{failed.get('reason', '')}, message={failed.get('message', '')!r})")
        return all(conditions.get(str(name), {}).get("status") == "True"
                   for name in result["bindingConditions"]) or None
    ready = conditions.get(READY)
    if ready is None:
        return None
    if ready.get("status") == "False":
        return (f"device {device}: {ready.get('reason', '')} "
                f"{ready.get('message', '')}").strip()
    return True if ready.get("status") == "True" else None


def readiness(claim: JSON, implicit: bool = True) -> bool | str | None:
    """True: every allocated device may let the pod bind (its binding conditions, or kdra's
    ``Ready``, are True); a string: a device reported failure (what it said); None: still
    waiting. A claim without an allocation reads as the failure "deallocated".

    ``implicit``: a device without binding conditions waits for kdra's ``Ready`` (prepare
    before bind); False: it is ready once allocated, as upstream's scheduler has it (the
    kubelet prepares after binding)."""
    status = claim.get("status") or {}
    if not status.get("allocation"):
        return "the claim was deallocated"
    entries = {_key(d): d for d in status.get("devices") or () if isinstance(d, Mapping)}
    waiting = False
    for result in _results(claim):
        state = _device_state(result, entries.get(_key(result)), implicit)
        if isinstance(state, str):
            return state
        waiting = waiting or state is None
    return None if waiting else True


def unready_devices(claim: JSON, implicit: bool = True) -> list[DeviceKey]:
    """The allocated devices whose binding conditions (or, ``implicit``, ``Ready``) are not
    all True."""
    entries = {_key(d): d for d in (claim.get("status") or {}).get("devices") or ()
               if isinstance(d, Mapping)}
    return [_key(r) for r in _results(claim)
            if _device_state(r, entries.get(_key(r)), implicit) is not True]


def pending(claim: JSON, implicit: bool = True) -> tuple[bool, bool]:
    """Whether some device still waits on kdra's ``Ready`` (only with ``implicit``), and
    whether some device still waits on binding conditions of its own (each has its own
    timeout)."""
    entries = {_key(d): d for d in (claim.get("status") or {}).get("devices") or ()
               if isinstance(d, Mapping)}
    ready = binding = False
    for result in _results(claim):
        if _device_state(result, entries.get(_key(result)), implicit) is None:
            if explicit(result):
                binding = True
            else:
                ready = True
    return ready, binding
