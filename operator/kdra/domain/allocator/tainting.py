"""Device taints as the allocator applies them (upstream KEP-5055): a device with a
``NoSchedule`` or ``NoExecute`` taint — from its slice or from a DeviceTaintRule — is offered
to a request only when the request's tolerations match every such taint.

Invariants:
- A request's tolerations are part of the cache key of its matching-device list
  (:func:`tolerations_key`), so two requests with equal selectors but different tolerations
  never share a list, a free-device count or an explanation.
- Rule taints are looked up by device name only (driver, pool, device), as upstream.
- :func:`tainted_note` explains from memoised selector verdicts only (no CEL evaluation):
  "3 devices tainted gpu.kdra.dev/unhealthy (not tolerated)".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from kdra.domain.models import DeviceToleration
from kdra.domain.taint_rules import TaintRule, rule_taints
from kdra.domain.taints import TaintLike, untolerated

if TYPE_CHECKING:
    from kdra.domain.allocator.pools import DeviceEntry, Selector

TOLERATIONS_PREFIX = "\x00tolerations:"
"""Marks the key element that stands for a request's tolerations (never a CEL expression)."""


def tolerations_key(tolerations: Sequence[DeviceToleration]) -> tuple[str, ...]:
    """The key element of ``tolerations`` (empty tuple: none)."""
    if not tolerations:
        return ()
    parts = [f"{t.key}|{t.operator}|{t.value}|{t.effect}|{t.toleration_seconds}"
             for t in tolerations]
    return (TOLERATIONS_PREFIX + ";".join(parts),)


class DeviceTaints:
    """The taints of the devices one node sees: each device's own plus the rules'."""

    __slots__ = ("_cache", "rules")

    def __init__(self, rules: tuple[TaintRule, ...] = ()) -> None:
        self.rules = rules
        self._cache: dict[object, tuple[TaintLike, ...]] = {}

    def of(self, entry: DeviceEntry) -> tuple[TaintLike, ...]:
        cached = self._cache.get(entry.id)
        if cached is None:
            cached = (*entry.taints, *rule_taints(self.rules, *entry.id))
            self._cache[entry.id] = cached
        return cached

    def blocks(self, entry: DeviceEntry, tolerations: Sequence[DeviceToleration]) -> bool:
        """Whether an acting taint of the device is not tolerated."""
        taints = self.of(entry)
        return bool(taints) and bool(untolerated(taints, tolerations))


def tainted_note(entries: Iterable[DeviceEntry], selectors: Sequence[Selector],
                 tolerations: Sequence[DeviceToleration], taints: DeviceTaints) -> str:
    """``3 devices tainted k1, k2 (not tolerated)`` for the devices that pass every selector
    (as memoised) but carry a taint the request does not tolerate; empty when none."""
    keys: dict[str, None] = {}
    count = 0
    for entry in entries:
        if entry.unsupported or not all(entry.memoised(s.expression) is True
                                        for s in selectors):
            continue
        blocking = untolerated(taints.of(entry), tolerations)
        if blocking:
            count += 1
            keys.update((t.key, None) for t in blocking)
    if not count:
        return ""
    noun = "device" if count == 1 else "devices"
    return f"{count} {noun} tainted {', '.join(keys)} (not tolerated)"


__all__ = ["TOLERATIONS_PREFIX", "DeviceTaints", "tainted_note", "tolerations_key"]
