"""The node agent's own check that a claim's partitions and shares fit what is prepared.

The allocator already keeps shared counters and consumable capacity within their totals;
the agent checks again before it creates anything, as the hardware would: a MIG instance
cannot be created on memory slices another instance occupies, and a GPU shared by memory
must not be promised more than it has. So two claims that a bug, a stale snapshot or two
binders gave overlapping partitions (or too much of one GPU) never both get prepared.

- **Counters**: every device prepared for another claim (in the checkpoint) draws its
  ``consumesCounters`` from its GPU's counter set; adding the claim's devices must keep
  every counter within the set's total (``gpu-0: memory-slice-4 would be 2/1 used``).
- **Capacity**: the shares (results with a ``shareID``) of one device, over every prepared
  claim and this one, must keep each consumed capacity within the device's capacity.

Invariants:
- Pure: decided from the checkpoint, the node's inventory and the claim's results.
- AdminAccess devices consume nothing (upstream: they do not count against others).
- Total: a quantity that does not parse is a conflict with a message, never an exception.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kdra.agent.core.checkpoint import Checkpoint, ClaimRef
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice
from kdra.agent.core.nodeprep import Result
from kdra.dra.quantity import InvalidQuantity, Quantity, parse_quantity

Key = tuple[str, str, str]
"""(driver, pool, device)."""


@dataclass(frozen=True)
class Clash:
    """Why one result cannot be prepared now, and which other claims hold what it needs."""

    reason: str
    """``CountersExhausted`` or ``CapacityExceeded``."""
    message: str
    holders: tuple[ClaimRef, ...] = ()


def _quantity(text: str) -> Quantity | None:
    try:
        return parse_quantity(text)
    except InvalidQuantity:
        return None


class _Ledger:
    """Running totals: counters per (driver, set), capacity per (device key, name)."""

    def __init__(self, inventory: Inventory) -> None:
        self.inventory = inventory
        self.totals: dict[tuple[str, str], dict[str, Quantity | None]] = {}
        for device in inventory.devices:
            for counter_set in device.counter_sets:
                self.totals[(device.driver, counter_set.name)] = {
                    name: _quantity(value) for name, value in counter_set.counters.items()}
        self.used: dict[tuple[tuple[str, str], str], Quantity] = {}
        self.shares: dict[tuple[Key, str], Quantity] = {}
        self.holders: dict[tuple[str, str] | Key, list[ClaimRef]] = {}

    def _holders(self, key: tuple[str, str] | Key) -> tuple[ClaimRef, ...]:
        return tuple(dict.fromkeys(self.holders.get(key, ())))

    def take(self, device: InventoryDevice, key: Key, share_id: str,
             consumed: Sequence[tuple[str, str]], owner: ClaimRef | None) -> Clash | None:
        """Add what ``device`` (prepared as ``key``) consumes; the first excess as a Clash
        (nothing is added then, unless ``owner`` is given: what is prepared counts, even
        past a total)."""
        clash = self._check(device, key, share_id, consumed)
        if clash is not None and owner is None:
            return clash
        for use in device.consumes_counters:
            set_key = (device.driver, use.name)
            for name, value in use.counters.items():
                amount = _quantity(value)
                if amount is not None:
                    self.used[(set_key, name)] = self.used.get((set_key, name),
                                                               Quantity(0)) + amount
            if owner is not None:
                self.holders.setdefault(set_key, []).append(owner)
        if share_id:
            for name, value in consumed:
                amount = _quantity(value)
                if amount is not None:
                    self.shares[(key, name)] = self.shares.get((key, name), Quantity(0)) + amount
            if owner is not None:
                self.holders.setdefault(key, []).append(owner)
        return clash

    def _check(self, device: InventoryDevice, key: Key, share_id: str,
               consumed: Sequence[tuple[str, str]]) -> Clash | None:
        """The first counter or capacity ``device`` would take past its total."""
        for use in device.consumes_counters:
            set_key = (device.driver, use.name)
            totals = self.totals.get(set_key)
            if totals is None:
                return Clash("CountersExhausted", f"{device.name} consumes counter set "
                             f"{use.name!r}, which no device of the node provides")
            for name, value in sorted(use.counters.items()):
                amount, total = _quantity(value), totals.get(name)
                if amount is None or total is None:
                    return Clash("CountersExhausted", f"{use.name}: counter {name!r} of "
                                 f"{device.name} is not a known counter with a quantity")
                after = self.used.get((set_key, name), Quantity(0)) + amount
                if after > total:
                    return Clash("CountersExhausted",
                                 f"{use.name}: {name} would be {after}/{total} used "
                                 f"(taking {device.name})", self._holders(set_key))
        if share_id:
            for name, value in consumed:
                amount = _quantity(value)
                capacity = _quantity(device.capacity.get(name, ""))
                if amount is None or capacity is None:
                    return Clash("CapacityExceeded", f"{device.name}: consumed capacity "
                                 f"{name}={value!r} does not match a capacity of the device")
                after = self.shares.get((key, name), Quantity(0)) + amount
                if after > capacity:
                    return Clash("CapacityExceeded",
                                 f"{device.name}: {name} would be {after} of {capacity} "
                                 "shared", self._holders(key))
        return None


def clashes(checkpoint: Checkpoint, uid: str, results: Sequence[Result],
            inventory: Inventory, admin: frozenset[str] = frozenset()) -> Mapping[Key, Clash]:
    """The results of claim ``uid`` that do not fit beside what the node has prepared for
    other claims (and the claim's own earlier results), by device key."""
    ledger = _Ledger(inventory)
    for entry in checkpoint.claims.values():
        if entry.claim.uid == uid:
            continue
        for prepared in entry.devices:
            device = inventory.device(prepared.driver, prepared.device)
            if device is None or prepared.admin_access:
                continue
            ledger.take(device, prepared.key, prepared.share_id, prepared.consumed_capacity,
                        entry.claim)
    found: dict[Key, Clash] = {}
    for result in results:
        device = inventory.device(result.driver, result.device)
        if device is None or result.request.split("/", 1)[0] in admin:
            continue
        clash = ledger.take(device, result.key, result.share_id, result.consumed_capacity,
                            None)
        if clash is not None:
            found.setdefault(result.key, clash)
    return found


__all__ = ["Clash", "clashes"]
