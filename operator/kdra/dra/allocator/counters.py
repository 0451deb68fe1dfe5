"""Shared counters (KEP-4815, partitionable devices): how much of each counter of a pool's
``sharedCounters`` is used on one node, and whether a device still fits.

A device's ``consumesCounters`` draws from counter sets its pool publishes (in slices of
their own, same pool and generation). A device can be allocated only if, for every counter
it consumes, what is already used plus its own amount stays within the set's total. "Used"
counts every device of the pool that is held — allocated claims', assumed (in-flight)
allocations', and the devices this search has picked so far —, wherever its slice is: a
pool's counter set may be shared by devices in slices for several nodes, and the devices
of the other nodes' slices (``Pool.counted``) draw on it too (upstream counts every
allocated device of the pool). A device that allows multiple allocations
consumes its counters once, however many shares it has (kdra's reading: the counters model
the hardware the device occupies, which its shares do not multiply).

Invariants:
- :meth:`CounterLedger.take` and :meth:`CounterLedger.give` are exact inverses (bounded
  amounts in :data:`~.capacity.EXACT`), so a search that backtracks leaves the ledger as it
  found it; a counter whose use drops to zero is dropped, also when devices consume zero of
  it (giving back never looks up what is not there).
- :meth:`CounterLedger.fits` is true exactly when :meth:`take` would keep every counter it
  touches within its total; counters the pool does not define never reach here (such a
  pool is invalid: its devices are never candidates).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from decimal import Decimal

from kdra.dra.allocator.capacity import EXACT
from kdra.dra.allocator.pools import DeviceEntry, DeviceId, NodePools

__all__ = ["CounterLedger", "SetKey", "describe_amount"]

SetKey = tuple[str, str, str]
"""``(driver, pool, counter set)``."""

_ZERO = Decimal(0)


def describe_amount(value: Decimal) -> str:
    """``7`` for whole numbers, else the exact decimal (counters are usually counts)."""
    return str(value.quantize(Decimal(1))) if value == value.to_integral_value() else str(
        value.normalize())


class CounterLedger:
    """Counter usage of the pools one node sees (see the module doc)."""

    __slots__ = ("totals", "used")

    def __init__(self, pools: NodePools, held: Callable[[DeviceId], bool]) -> None:
        self.totals: dict[SetKey, Mapping[str, Decimal]] = {}
        """Every counter set of the node's pools: its counters' totals."""
        self.used: dict[SetKey, dict[str, Decimal]] = {}
        """What held devices (and this search's picks) consume, per set and counter."""
        for pool in pools.pools:
            for name, counters in pool.counter_sets.items():
                self.totals[(pool.driver, pool.name, name)] = counters
            if not pool.counter_sets:
                continue
            for entry in pool.counted:
                if held(entry.id):
                    self.take(entry)

    def _uses(self, entry: DeviceEntry) -> Iterator[tuple[SetKey, str, Decimal]]:
        driver, pool, _ = entry.id
        for set_name, counter, amount in entry.consumes:
            yield (driver, pool, set_name), counter, amount

    def fits(self, entry: DeviceEntry) -> bool:
        """Whether taking ``entry`` keeps every counter it consumes within its total."""
        for key, counter, amount in self._uses(entry):
            total = self.totals.get(key, {}).get(counter)
            if total is None or EXACT.add(self.used.get(key, {}).get(counter, _ZERO),
                                          amount) > total:
                return False
        return True

    def take(self, entry: DeviceEntry) -> None:
        for key, counter, amount in self._uses(entry):
            used = self.used.setdefault(key, {})
            used[counter] = EXACT.add(used.get(counter, _ZERO), amount)

    def give(self, entry: DeviceEntry) -> None:
        for key, counter, amount in self._uses(entry):
            used = self.used.setdefault(key, {})
            left = EXACT.subtract(used.get(counter, _ZERO), amount)
            if left:
                used[counter] = left
            else:
                used.pop(counter, None)
            if not used:
                del self.used[key]

    def shortfall(self, entry: DeviceEntry) -> str | None:
        """Why ``entry`` does not fit: ``gpu-3: memory-slices 7/8 used, asked 4`` (the set's
        name first, then each counter that would overflow), or None when it fits."""
        parts: list[str] = []
        set_name = ""
        for key, counter, amount in self._uses(entry):
            total = self.totals.get(key, {}).get(counter)
            used = self.used.get(key, {}).get(counter, _ZERO)
            if total is None:
                parts.append(f"{counter} not defined")
            elif EXACT.add(used, amount) > total:
                parts.append(f"{counter} {describe_amount(used)}/{describe_amount(total)} "
                             f"used, asked {describe_amount(amount)}")
            else:
                continue
            set_name = set_name or key[2]
        if not parts:
            return None
        more = f" (and {len(parts) - 3} more counters)" if len(parts) > 3 else ""
        return f"{set_name}: " + ", ".join(parts[:3]) + more

    def fill(self, key: SetKey) -> Decimal:
        """How full the set is: the mean over its counters of used / total (0 to 1)."""
        totals = self.totals.get(key)
        if not totals:
            return _ZERO
        used = self.used.get(key, {})
        shares = [used.get(name, _ZERO) / total for name, total in totals.items() if total > 0]
        return sum(shares, _ZERO) / len(shares) if shares else _ZERO
