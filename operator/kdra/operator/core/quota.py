"""The status kdra writes on a DeviceQuota: per limited class the usage of what the quota
limits, the ``usedSummary`` / ``hardSummary`` text ``kubectl get kdevicequota`` shows, and the
``Exceeded`` condition. The arithmetic is the DRA core's (:mod:`kdra.dra.quota`).

Invariants:
- The status fits its schema whatever the quota says: summaries are cut to
  :data:`MAX_SUMMARY` characters.
- Pure: no I/O, no clock (the caller adds the condition's transition time).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kdra.dra.quantity import Quantity
from kdra.dra.quota import DEVICES, Charge, DeviceQuota, Limit, Usage
from kdra.kube.core.untrusted import shorten

__all__ = ["MAX_SUMMARY", "quota_status"]

MAX_SUMMARY = 4000
"""Characters of the status's summary lines (the CRD allows 4096)."""


def _describe(limit: Limit, amounts: Callable[[str], Quantity]) -> str:
    parts = []
    for resource in limit.hard:
        value = amounts(resource)
        parts.append(f"{value} devices" if resource == DEVICES
                     else f"{resource.split('/', 1)[1]} {value}")
    return f"{limit.device_class}: {', '.join(parts) or 'nothing limited'}"


def quota_status(quota: DeviceQuota, used: Charge, *, claims: int = 0,
                 in_flight: int = 0) -> dict[str, Any]:
    """The status the operator writes (without the condition's transition time): per limited
    class the usage of what the quota limits, and the ``usedSummary`` / ``hardSummary`` text
    ``kubectl get kdevicequota`` shows."""
    rows = []
    used_text = []
    hard_text = []
    exceeded = []
    for limit in quota.limits:
        usage = used.get(limit.device_class, Usage())
        row: dict[str, Any] = {"deviceClassName": limit.device_class, "devices": usage.devices}
        for kind in ("capacity", "counters"):
            values = {resource.split("/", 1)[1]: str(usage.amount(resource))
                      for resource in limit.hard if resource.startswith(kind + "/")}
            if values:
                row[kind] = values
        rows.append(row)
        used_text.append(_describe(limit, usage.amount))
        hard_text.append(_describe(limit, limit.hard.__getitem__))
        exceeded += [f"{limit.device_class} {r.split('/', 1)[-1]}" for r, hard in
                     limit.hard.items() if usage.amount(r) > hard]
    in_flight_text = f" ({in_flight} being allocated)" if in_flight else ""
    return {
        "used": rows,
        "usedSummary": shorten("; ".join(used_text), MAX_SUMMARY),
        "hardSummary": shorten("; ".join(hard_text), MAX_SUMMARY),
        "conditions": [{
            "type": "Exceeded",
            "status": "True" if exceeded else "False",
            "reason": "UsedAboveHard" if exceeded else "WithinHard",
            "message": (f"used above hard for {shorten(', '.join(exceeded), MAX_SUMMARY)} "
                        "(the quota was lowered below what is allocated; new allocations of "
                        "these wait)" if exceeded else
                        f"{claims} allocated claim(s) counted{in_flight_text}"),
            "observedGeneration": quota.generation,
        }],
    }
