"""The allocator's in-memory view of the cluster, updated incrementally from watch events.

A :class:`Snapshot` holds ResourceSlices (indexed by the node they target), DeviceClasses and
the devices held by allocated claims. The binder (the single writer of allocations) feeds it
from watch events — ``upsert_*`` / ``remove_*`` — and records its own in-flight allocations
with :meth:`Snapshot.assume` until the API write is seen (:meth:`Snapshot.forget`).

Invariants (kept by every method; each mutation bumps :attr:`Snapshot.version`):

- every slice is stored once in ``_slices``, once in ``_by_pool`` (its pool, whatever node it
  is for: :mod:`.gather` reads a pool's other slices from there), and — unless it publishes
  only counter sets, which belong to their pool wherever they are — in exactly one scope
  index: ``_by_node[node]`` (``nodeName``), ``_all_nodes`` (``allNodes``), ``_per_device``
  (``perDeviceNodeSelection``) or ``_selected`` (``nodeSelector``);
- ``_in_use[d]`` is the number of claims in ``_held`` plus assumed allocations in ``_assumed``
  whose device set contains ``d``; devices with no holder are absent (never zero);
  admin-access results never count; results with a ``shareID`` (a share of a device that
  allows multiple allocations) are not exclusive and count in ``_shares`` instead:
  ``_shares[d]`` is the number of such results of held and assumed claims on ``d`` and the
  sum of their ``consumedCapacity`` (absent when none);
- :attr:`Snapshot.releases` grows whenever a holder lets go of a device or a share, so a
  caller can tell that something was freed (a share freed keeps ``_in_use`` as it was);
- a cached :class:`~kdra.dra.allocator.pools.NodePools` for node N is returned only if
  nothing N can see changed since it was built: a change to a slice of pool P stamps every
  node with a ``nodeName`` slice of P (a pool on one node stamps just that node), and the
  global stamp when P has slices of another scope; when ``nodeSelector`` or
  ``perDeviceNodeSelection`` slices exist the node's labels are part of the cache key;
- a slice replaced by one with an equal ``spec`` keeps its device entries, so its selector
  memo survives resourceVersion-only updates;
- :meth:`Snapshot.busy_stamp` of a node changes whenever a device of a pool the node may see
  enters or leaves ``_in_use`` (``_pool_nodes`` maps each ``nodeName`` pool to its nodes,
  ``_global_pools`` counts the other pools' slices), so counts of free devices cached under
  an unchanged stamp are still right.

Not thread-safe: one scheduling loop owns it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from decimal import Decimal

from kdra.dra.allocator.capacity import EXACT, amount
from kdra.dra.allocator.gather import PoolKey, gather_pools
from kdra.dra.allocator.ledger import SharedUse
from kdra.dra.allocator.nodeselector import NodeInfo, selector_matches
from kdra.dra.allocator.pools import DeviceId, NodePools, SliceEntry
from kdra.dra.allocator.stats import Stats
from kdra.dra.allocator.tainting import DeviceTaints
from kdra.dra.models import (
    AllocationResult,
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    ResourceSliceSpec,
)
from kdra.dra.quantity import InvalidQuantity
from kdra.dra.taint_rules import TaintRule

Shares = Mapping[DeviceId, tuple[int, Mapping[str, Decimal]]]
"""One claim's shares: device → (results on it, their consumedCapacity summed)."""


def devices_in_use(
    claim: ResourceClaim, allocation: AllocationResult | None = None
) -> frozenset[DeviceId]:
    """The devices ``allocation`` (default: the claim's own) makes unavailable to others:
    every result except those of admin-access requests."""
    allocation = allocation if allocation is not None else claim.status.allocation
    if allocation is None:
        return frozenset()
    admin = {r.name for r in claim.spec.devices.requests if r.admin_access}
    return frozenset(
        DeviceId(result.driver, result.pool, result.device)
        for result in allocation.devices.results
        if not result.admin_access and result.request.split("/", 1)[0] not in admin
        and result.share_id is None
    )


def shares_in_use(claim: ResourceClaim, allocation: AllocationResult | None = None) -> Shares:
    """The shares ``allocation`` (default: the claim's own) holds: results with a
    ``shareID``, per device, with their ``consumedCapacity`` summed. An amount that is not
    a quantity (or beyond 2^63) counts as zero (kdra writes these; it never reads what it did
    not write as more than nothing)."""
    allocation = allocation if allocation is not None else claim.status.allocation
    if allocation is None:
        return {}
    shares: dict[DeviceId, tuple[int, dict[str, Decimal]]] = {}
    for result in allocation.devices.results:
        if result.share_id is None or result.admin_access:
            continue
        device = DeviceId(result.driver, result.pool, result.device)
        count, consumed = shares.get(device, (0, {}))
        for name, text in (result.consumed_capacity or {}).items():
            try:
                value = amount(text)
            except InvalidQuantity:
                continue
            consumed[name] = EXACT.add(consumed.get(name, Decimal(0)), max(value, Decimal(0)))
        shares[device] = (count + 1, consumed)
    return shares


class Snapshot:
    """Slices, classes and devices in use, with per-node pool caches. See the module doc."""

    def __init__(self) -> None:
        self.stats = Stats()
        self.version = 0
        self._clock = itertools.count(1)
        self._slices: dict[str, SliceEntry] = {}
        self._by_node: dict[str, dict[str, SliceEntry]] = {}
        self._all_nodes: dict[str, SliceEntry] = {}
        self._selected: dict[str, SliceEntry] = {}
        self._per_device: dict[str, SliceEntry] = {}
        self._by_pool: dict[PoolKey, dict[str, SliceEntry]] = {}
        self._node_stamp: dict[str, int] = {}
        self._global_stamp = 0
        self._node_cache: dict[str, tuple[int, int, dict[str, str] | None, NodePools]] = {}
        self._classes: dict[str, DeviceClass] = {}
        self._held: dict[str, frozenset[DeviceId]] = {}
        self._assumed: dict[str, frozenset[DeviceId]] = {}
        self._in_use: dict[DeviceId, int] = {}
        self._pool_nodes: dict[tuple[str, str], dict[str, int]] = {}
        self._global_pools: dict[tuple[str, str], int] = {}
        self._busy_stamp: dict[str, int] = {}
        self._global_busy_stamp = 0
        self._rules: dict[str, TaintRule] = {}
        self._held_shares: dict[str, Shares] = {}
        self._assumed_shares: dict[str, Shares] = {}
        self._shares: dict[DeviceId, SharedUse] = {}
        self.releases = 0
        """Grows whenever a device or a share is let go (see the module doc)."""

    @classmethod
    def build(
        cls,
        slices: Iterable[ResourceSlice] = (),
        classes: Iterable[DeviceClass] = (),
        claims: Iterable[ResourceClaim] = (),
    ) -> Snapshot:
        snapshot = cls()
        for slice_ in slices:
            snapshot.upsert_slice(slice_)
        for device_class in classes:
            snapshot.upsert_class(device_class)
        for claim in claims:
            snapshot.upsert_claim(claim)
        return snapshot

    # ------------------------------------------------------------------ slices

    def upsert_slice(self, slice_: ResourceSlice) -> None:
        """Add or replace a slice (keyed by ``metadata.name``)."""
        name = slice_.metadata.name
        old = self._slices.get(name)
        if old is not None and old.slice.spec == slice_.spec:
            return
        if old is not None:
            self._unindex(old)
        entry = SliceEntry.of(slice_)
        self._slices[name] = entry
        spec = slice_.spec
        pool = (spec.driver, spec.pool.name)
        self._by_pool.setdefault(pool, {})[name] = entry
        if spec.node_name:
            on_nodes = self._pool_nodes.setdefault(pool, {})
            on_nodes[spec.node_name] = on_nodes.get(spec.node_name, 0) + 1
        else:
            self._global_pools[pool] = self._global_pools.get(pool, 0) + 1
        if not entry.counters_only:
            self._scope(spec)[name] = entry
        self._stamp(pool)

    def _scope(self, spec: ResourceSliceSpec) -> dict[str, SliceEntry]:
        """The scope index of a device slice (see the module doc)."""
        if spec.node_name:
            return self._by_node.setdefault(spec.node_name, {})
        if spec.all_nodes:
            return self._all_nodes
        if spec.per_device_node_selection:
            return self._per_device
        return self._selected

    def remove_slice(self, name: str) -> None:
        entry = self._slices.pop(name, None)
        if entry is not None:
            self._unindex(entry)

    def slices(self) -> Iterator[ResourceSlice]:
        return (entry.slice for entry in self._slices.values())

    def slice_entries(self) -> Iterator[SliceEntry]:
        """Every slice with its device entries (and their selector memos)."""
        return iter(self._slices.values())

    def _unindex(self, entry: SliceEntry) -> None:
        spec = entry.slice.spec
        pool = (spec.driver, spec.pool.name)
        self._stamp(pool)  # before the pool's counts drop: every node that saw it
        in_pool = self._by_pool[pool]
        del in_pool[entry.name]
        if not in_pool:
            del self._by_pool[pool]
        if not entry.counters_only:
            scope = self._scope(spec)
            scope.pop(entry.name, None)
            if spec.node_name and not scope:
                self._by_node.pop(spec.node_name, None)
        if spec.node_name:
            on_nodes = self._pool_nodes[pool]
            on_nodes[spec.node_name] -= 1
            if not on_nodes[spec.node_name]:
                del on_nodes[spec.node_name]
            if not on_nodes:
                del self._pool_nodes[pool]
        else:
            self._global_pools[pool] -= 1
            if not self._global_pools[pool]:
                del self._global_pools[pool]

    def _stamp(self, pool: PoolKey) -> None:
        """A slice of ``pool`` changed: every node that may see the pool rebuilds its pools."""
        self.version += 1
        stamp = next(self._clock)
        for node_name in self._pool_nodes.get(pool, ()):
            self._node_stamp[node_name] = stamp
        if pool in self._global_pools:
            self._global_stamp = stamp

    def pool_slices(self, pool: PoolKey) -> Iterable[SliceEntry]:
        """Every slice of ``pool``, whatever node it is for."""
        return self._by_pool.get(pool, {}).values()

    # ------------------------------------------------------------------ classes

    def upsert_rule(self, rule: TaintRule) -> None:
        """A DeviceTaintRule (new or changed): every node's pools are rebuilt. An unchanged
        rule (e.g. only its status was written) changes nothing."""
        if self._rules.get(rule.name) == rule:
            return
        self._rules[rule.name] = rule
        self._global_stamp = next(self._clock)
        self.version += 1

    def remove_rule(self, name: str) -> None:
        if self._rules.pop(name, None) is not None:
            self._global_stamp = next(self._clock)
            self.version += 1

    def upsert_class(self, device_class: DeviceClass) -> None:
        self._classes[device_class.metadata.name] = device_class
        self.version += 1

    def remove_class(self, name: str) -> None:
        if self._classes.pop(name, None) is not None:
            self.version += 1

    def get_class(self, name: str) -> DeviceClass | None:
        return self._classes.get(name)

    def classes(self) -> Iterator[DeviceClass]:
        return iter(self._classes.values())

    # ------------------------------------------------------------------ claims / in use

    def upsert_claim(self, claim: ResourceClaim) -> None:
        """Record a claim as the API shows it: its allocation's devices are in use."""
        self._set_holder(self._held, claim.key, devices_in_use(claim))
        self._set_shares(self._held_shares, claim.key, shares_in_use(claim))

    def remove_claim(self, key: str) -> None:
        """Forget a deleted claim (``namespace/name``)."""
        self._set_holder(self._held, key, frozenset())
        self._set_shares(self._held_shares, key, {})

    def assume(self, claim: ResourceClaim, allocation: AllocationResult) -> None:
        """Treat ``allocation`` as made (in flight) until :meth:`forget` — the binder calls
        this before writing it, so the next pod cannot take the same devices."""
        self._set_holder(self._assumed, claim.key, devices_in_use(claim, allocation))
        self._set_shares(self._assumed_shares, claim.key, shares_in_use(claim, allocation))

    def forget(self, key: str) -> None:
        """Drop an assumed allocation (written and observed, or abandoned)."""
        self._set_holder(self._assumed, key, frozenset())
        self._set_shares(self._assumed_shares, key, {})

    @property
    def shares(self) -> Mapping[DeviceId, SharedUse]:
        """Device → its shares held by allocated and assumed claims. Read-only view."""
        return self._shares

    def _set_shares(self, holders: dict[str, Shares], key: str, shares: Shares) -> None:
        old = holders.get(key, {})
        if old == shares:
            return
        for device, (count, consumed) in old.items():
            use = self._shares[device]
            use.remove(count, consumed)
            self.releases += 1
            if not use.count:
                del self._shares[device]
            self._busy_changed(device)
        for device, (count, consumed) in shares.items():
            self._shares.setdefault(device, SharedUse()).add(count, consumed)
            self._busy_changed(device)
        if shares:
            holders[key] = shares
        else:
            holders.pop(key, None)
        self.version += 1

    def in_use(self, device: DeviceId) -> bool:
        return device in self._in_use

    @property
    def devices_in_use(self) -> Mapping[DeviceId, int]:
        """Device → number of holders (allocated or assumed claims). Read-only view."""
        return self._in_use

    def _set_holder(
        self, holders: dict[str, frozenset[DeviceId]], key: str, devices: frozenset[DeviceId]
    ) -> None:
        old = holders.get(key, frozenset())
        if old == devices:
            return
        in_use = self._in_use
        for device in old - devices:
            self.releases += 1
            left = in_use[device] - 1
            if left:
                in_use[device] = left
            else:
                del in_use[device]
                self._busy_changed(device)
        for device in devices - old:
            held = in_use.get(device, 0)
            in_use[device] = held + 1
            if not held:
                self._busy_changed(device)
        if devices:
            holders[key] = devices
        else:
            holders.pop(key, None)
        self.version += 1

    def _busy_changed(self, device: DeviceId) -> None:
        pool = (device.driver, device.pool)
        on_nodes = self._pool_nodes.get(pool)
        if on_nodes:
            stamp = next(self._clock)
            for node_name in on_nodes:
                self._busy_stamp[node_name] = stamp
        if pool in self._global_pools:
            self._global_busy_stamp = next(self._clock)

    def busy_stamp(self, node_name: str) -> tuple[int, int]:
        """Changes whenever a device the node may see starts or stops being in use."""
        return self._busy_stamp.get(node_name, 0), self._global_busy_stamp

    # ------------------------------------------------------------------ per node

    def node_pools(self, node: NodeInfo) -> NodePools:
        """The pools ``node`` can see, cached until one of its slices changes."""
        stamp = self._node_stamp.get(node.name, 0)
        cached = self._node_cache.get(node.name)
        if (
            cached is not None
            and cached[0] == stamp
            and cached[1] == self._global_stamp
            and (cached[2] is None or cached[2] == node.labels)
        ):
            return cached[3]
        self.stats.pool_gathers += 1
        visible = list(self._by_node.get(node.name, {}).values())
        visible.extend(self._all_nodes.values())
        visible.extend(
            entry
            for entry in self._selected.values()
            if selector_matches(entry.slice.spec.node_selector, node)
        )
        visible.extend(entry for entry in self._per_device.values() if entry.reaches(node))
        pools = NodePools(node, gather_pools(node, visible, self.pool_slices),
                          DeviceTaints(tuple(self._rules.values())))
        labels = dict(node.labels) if self._selected or self._per_device else None
        self._node_cache[node.name] = (stamp, self._global_stamp, labels, pools)
        return pools

    def forget_node(self, name: str) -> None:
        """Drop the cache of a deleted node (its slices go through :meth:`remove_slice`)."""
        self._node_cache.pop(name, None)
        self._node_stamp.pop(name, None)
        self._busy_stamp.pop(name, None)
