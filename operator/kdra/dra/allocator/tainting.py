"""Device taints as the allocator applies them (upstream KEP-5055): a device with a
``NoSchedule`` or ``NoExecute`` taint — from its slice or from a DeviceTaintRule — is offered
to a request only when the request's tolerations match every such taint.

Invariants:
- A request's tolerations are part of the cache key of its matching-device list
  (:func:`tolerations_key`), so two requests with equal selectors but different tolerations
  never share a list, a free-device count or an explanation.
- Rule taints are looked up by device name only (driver, pool, device), as upstream.
- The explanation of tainted devices (``diagnosis.tainted_note``) reads memoised selector
  verdicts only (no CEL evaluation).
- It depends on no other module of the allocator: a device is anything with an ``id`` and
  ``taints`` (:class:`Tainted`; the pools' ``DeviceEntry`` is one).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol

from kdra.dra.models import DeviceToleration
from kdra.dra.taint_rules import TaintRule, rule_taints
from kdra.dra.taints import TaintLike, untolerated

TOLERATIONS_PREFIX = "\x00tolerations:"
"""Marks the key element that stands for a request's tolerations (never a CEL expression)."""


def tolerations_key(tolerations: Sequence[DeviceToleration]) -> tuple[str, ...]:
    """The key element of ``tolerations`` (empty tuple: none)."""
    if not tolerations:
        return ()
    parts = [f"{t.key}|{t.operator}|{t.value}|{t.effect}|{t.toleration_seconds}"
             for t in tolerations]
    return (TOLERATIONS_PREFIX + ";".join(parts),)


class Tainted(Protocol):
    """A device as taints see it: its (driver, pool, device) name and its own taints."""

    @property
    def id(self) -> tuple[str, str, str]: ...

    @property
    def taints(self) -> Sequence[TaintLike]: ...


class DeviceTaints:
    """The taints of the devices one node sees: each device's own plus the rules'."""

    __slots__ = ("_cache", "rules")

    def __init__(self, rules: tuple[TaintRule, ...] = ()) -> None:
        self.rules = rules
        self._cache: dict[Hashable, tuple[TaintLike, ...]] = {}

    def of(self, entry: Tainted) -> tuple[TaintLike, ...]:
        cached = self._cache.get(entry.id)
        if cached is None:
            cached = (*entry.taints, *rule_taints(self.rules, *entry.id))
            self._cache[entry.id] = cached
        return cached

    def blocks(self, entry: Tainted, tolerations: Sequence[DeviceToleration]) -> bool:
        """Whether an acting taint of the device is not tolerated."""
        taints = self.of(entry)
        return bool(taints) and bool(untolerated(taints, tolerations))


__all__ = ["TOLERATIONS_PREFIX", "DeviceTaints", "Tainted", "tolerations_key"]
