"""The search's accounting for devices that counting alone cannot decide: counters
(:mod:`.counters`) and shares of devices that allow multiple allocations (:mod:`.capacity`).

One :class:`Ledger` per node search starts from the snapshot — exclusive devices held by
allocated and assumed claims (``busy``), shares they hold (``Snapshot.shares``) — and follows
the search: :meth:`Ledger.admit` when a slot takes a device, :meth:`Ledger.release` when the
search backtracks over it.

Invariants:
- ``admit`` then ``release`` of the same device with what ``admit`` returned restores the
  ledger exactly (counters, shares, consumed capacity); the search releases in reverse
  order of admission, like its own undo.
- A device that allows multiple allocations takes its counters with its first share (held
  anywhere) and gives them back with its last; its consumed capacity is the sum over every
  share, never above the capacity's value.
- Capacity requests filter every device (it must have the capacity, and enough of it, after
  what shares already hold of it), but only shares of a ``shared`` device record consumed
  capacity.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from decimal import Decimal

from kdra.dra.allocator.capacity import EXACT, RequestedCapacity, demand, fmt
from kdra.dra.allocator.counters import CounterLedger
from kdra.dra.allocator.pools import DeviceEntry, DeviceId, NodePools

__all__ = ["Ledger", "SharedUse"]

_ZERO = Decimal(0)


class SharedUse:
    """The shares of one device: how many results hold it, and their consumed capacity."""

    __slots__ = ("consumed", "count")

    def __init__(self) -> None:
        self.count = 0
        self.consumed: dict[str, Decimal] = {}

    def add(self, count: int, consumed: Mapping[str, Decimal]) -> None:
        self.count += count
        for name, amount in consumed.items():
            self.consumed[name] = EXACT.add(self.consumed.get(name, _ZERO), amount)

    def remove(self, count: int, consumed: Mapping[str, Decimal]) -> None:
        self.count -= count
        for name, amount in consumed.items():
            left = EXACT.subtract(self.consumed.get(name, _ZERO), amount)
            if left:
                self.consumed[name] = left
            else:
                self.consumed.pop(name, None)

    def __repr__(self) -> str:
        return f"SharedUse({self.count}, {self.consumed})"


_NONE = SharedUse()


class Ledger:
    """Counters and shares on one node during one search (see the module doc)."""

    __slots__ = ("busy", "counters", "mine", "pools", "shares")

    def __init__(self, pools: NodePools, busy: Container[DeviceId],
                 shares: Mapping[DeviceId, SharedUse]) -> None:
        self.pools = pools
        self.busy = busy
        self.shares = shares
        self.mine: dict[DeviceId, SharedUse] = {}
        """Shares this search has taken so far."""
        self.counters = CounterLedger(pools, self._held_outside)

    def _held_outside(self, device: DeviceId) -> bool:
        return device in self.busy or device in self.shares

    def holders(self, device: DeviceId) -> int:
        """Shares of ``device``: the snapshot's plus this search's."""
        return self.shares.get(device, _NONE).count + self.mine.get(device, _NONE).count

    def used_capacity(self, device: DeviceId) -> dict[str, Decimal]:
        """Capacity of a shared device consumed by every share (snapshot's and search's)."""
        used = dict(self.shares.get(device, _NONE).consumed)
        for name, amount in self.mine.get(device, _NONE).consumed.items():
            used[name] = EXACT.add(used.get(name, _ZERO), amount)
        return used

    def admit(self, entry: DeviceEntry, capacity: RequestedCapacity) -> dict[str, Decimal] | None:
        """Take ``entry`` for a request asking ``capacity``: what it consumes (empty for an
        exclusive device without capacity requests), or None when it does not fit."""
        device = entry.id
        shared = entry.shared
        consumed: dict[str, Decimal] = {}
        if capacity or shared:
            wanted = demand(capacity, device.driver, entry.capacities,
                            self.used_capacity(device))
            if wanted is None:
                return None
            consumed = wanted
        first = not shared or not self.holders(device)
        if first and entry.consumes:
            if not self.counters.fits(entry):
                return None
            self.counters.take(entry)
        if shared:
            self.mine.setdefault(device, SharedUse()).add(1, consumed)
        return consumed

    def release(self, entry: DeviceEntry, consumed: Mapping[str, Decimal]) -> None:
        """Undo :meth:`admit` of ``entry`` that returned ``consumed``."""
        device = entry.id
        if entry.shared:
            mine = self.mine[device]
            mine.remove(1, consumed)
            if not mine.count:
                del self.mine[device]
            if self.holders(device):
                return
        if entry.consumes:
            self.counters.give(entry)

    def can_take(self, entry: DeviceEntry, capacity: RequestedCapacity) -> bool:
        """Whether :meth:`admit` would take ``entry`` now (without taking it)."""
        device = entry.id
        if (capacity or entry.shared) and demand(
                capacity, device.driver, entry.capacities, self.used_capacity(device)) is None:
            return False
        if entry.consumes and (not entry.shared or not self.holders(device)):
            return self.counters.fits(entry)
        return True

    def why_not(self, entry: DeviceEntry, capacity: RequestedCapacity) -> str | None:
        """Why ``entry`` cannot be taken now for ``capacity`` (for explanations):
        ``gpu-3: memory-slices 7/8 used, asked 4`` or ``gpu-0: memory 70Gi of 80Gi used,
        asked 20Gi``; None when it can."""
        device = entry.id
        if capacity or entry.shared:
            used = self.used_capacity(device)
            if demand(capacity, device.driver, entry.capacities, used) is None:
                return self._capacity_text(entry, capacity, used)
        if entry.consumes and (not entry.shared or not self.holders(device)):
            return self.counters.shortfall(entry)
        return None

    @staticmethod
    def _capacity_text(entry: DeviceEntry, capacity: RequestedCapacity,
                       used: Mapping[str, Decimal]) -> str:
        asked = dict(capacity)
        parts = []
        for spec in entry.capacities:
            amount = asked.pop(spec.name, None)
            if amount is None:
                amount = asked.pop(f"{entry.id.driver}/{spec.name}", None)
            if amount is None and spec.name.startswith(f"{entry.id.driver}/"):
                amount = asked.pop(spec.name.split("/", 1)[1], None)
            if amount is None and not entry.shared:
                continue
            have = used.get(spec.name, _ZERO)
            text = (f"{spec.name} {fmt(have, spec.format)} of {fmt(spec.value, spec.format)} "
                    f"used" if entry.shared else
                    f"{spec.name} {fmt(spec.value, spec.format)}")
            if amount is not None:
                text += f", asked {fmt(amount, spec.format)}"
            parts.append(text)
        parts += [f"no capacity {name}" for name in asked]
        return f"{entry.id.device}: " + ("; ".join(parts) or "request policy not met")
