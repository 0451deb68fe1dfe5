"""Which pools one node sees: upstream's GatherPools (Kubernetes 1.36, the incubating
allocator), over the snapshot's slices.

A node sees a pool through its *device slices that reach the node* — ``nodeName`` the node,
``allNodes``, a ``nodeSelector`` the node matches, or ``perDeviceNodeSelection`` with some
device reaching the node — plus the pool's *counter-set slices* (``sharedCounters``), which
belong to the pool wherever they are published. Per pool:

1. Only the newest generation among those slices counts.
2. The pool is complete when that generation has ``resourceSliceCount`` slices. When the
   node's own view falls short (a pool spread over several nodes), the pool's slices for
   other nodes are counted too: a newer generation among them makes the node's view
   obsolete (the pool is left out), otherwise the pool is complete if all its slices of the
   generation add up, and those for other nodes are kept for counting counters
   (:attr:`~.pools.Pool.counted`). An incomplete pool offers no device.
3. A complete pool is *invalid* — it offers no device — when a device name repeats among the
   node's device slices, a counter set is published twice, or a device (in the node's slices
   or, when they were needed, the other nodes') consumes a counter set or a counter the pool
   does not define.
4. Pools are walked by (driver, name), those whose devices have binding conditions last;
   slices by name; devices as listed. A device of a ``perDeviceNodeSelection`` slice is
   offered only where it reaches (:meth:`~.pools.DeviceEntry.reaches`).

Where kdra differs (docs/api-versions.md): a counter-set slice joins a node's pools only with
a device slice of its pool that the node sees (upstream gathers every counter-set slice for
every node; such a pool offers the node no device, so only an ``All`` request's pool check and
the invalid-pool error could tell).

Invariants:
- Pure: a function of the slices given; the same slices give the same pools in the same order.
- The other nodes' slices are read only for a pool whose own view is incomplete (a pool on one
  node costs nothing more than before).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from decimal import Decimal

from kdra.dra.allocator.capacity import amount
from kdra.dra.allocator.nodeselector import NodeInfo
from kdra.dra.allocator.pools import DeviceEntry, Pool, SliceEntry
from kdra.dra.quantity import InvalidQuantity

__all__ = ["PoolKey", "cluster_pools", "gather_pools"]

PoolKey = tuple[str, str]
"""``(driver, pool name)``."""


def gather_pools(node: NodeInfo, visible: Iterable[SliceEntry],
                 pool_slices: Callable[[PoolKey], Iterable[SliceEntry]]) -> tuple[Pool, ...]:
    """The pools ``node`` sees (see the module doc). ``visible``: the device slices that reach
    the node; ``pool_slices(key)``: every slice of a pool, whatever node it is for."""
    seen: dict[PoolKey, list[SliceEntry]] = {}
    for entry in visible:
        spec = entry.slice.spec
        seen.setdefault((spec.driver, spec.pool.name), []).append(entry)
    pools = []
    for key, members in seen.items():
        everything = tuple(pool_slices(key))
        members.extend(e for e in everything if e.counters_only)
        pool = _pool(node, key, members, everything)
        if pool is not None:
            pools.append(pool)
    pools.sort(key=lambda p: (p.binding, p.driver, p.name))
    return tuple(pools)


def _pool(node: NodeInfo, key: PoolKey, members: list[SliceEntry],
          everything: tuple[SliceEntry, ...]) -> Pool | None:
    generation = max(m.slice.spec.pool.generation for m in members)
    current = sorted((m for m in members if m.slice.spec.pool.generation == generation),
                     key=lambda e: e.name)
    count = current[0].slice.spec.pool.resource_slice_count
    others: list[SliceEntry] = []
    if len(current) != count:
        if any(e.slice.spec.pool.generation > generation for e in everything):
            return None  # the driver is replacing this generation: ignore it
        names = {m.name for m in current}
        all_current = [e for e in everything if e.slice.spec.pool.generation == generation]
        if len(all_current) != count:
            return Pool(key[0], key[1], generation, tuple(current), (), incomplete=True)
        others = sorted((e for e in all_current if e.name not in names), key=lambda e: e.name)
    devices = [m for m in current if not m.counters_only]
    binding = any(e.binding for m in devices for e in m.entries)
    invalid = _duplicate_name(devices)
    counter_sets: dict[str, dict[str, Decimal]] = {}
    if invalid is None:
        counter_sets, invalid = _counter_sets([m for m in current if m.counters_only])
    if invalid is None:
        invalid = _unknown_counters(counter_sets, devices, others)
    if invalid is not None:
        return Pool(key[0], key[1], generation, tuple(current), (), invalid=invalid,
                    binding=binding)
    entries = tuple(e for m in devices for e in m.entries if e.reaches(node))
    counted = tuple(e for m in (*devices, *others) for e in m.entries if e.consumes)
    return Pool(key[0], key[1], generation, tuple(current), entries,
                counter_sets=counter_sets, counted=counted, consumers=_by_set(entries),
                binding=binding)


def _duplicate_name(slices: list[SliceEntry]) -> str | None:
    seen: set[str] = set()
    for member in slices:
        for entry in member.entries:
            if entry.id.device in seen:
                return f"device name {entry.id.device} appears more than once"
            seen.add(entry.id.device)
    return None


def _counter_sets(slices: list[SliceEntry]) -> tuple[dict[str, dict[str, Decimal]], str | None]:
    sets: dict[str, dict[str, Decimal]] = {}
    for member in slices:
        for counter_set in member.slice.spec.shared_counters:
            if counter_set.name in sets:
                return sets, f"counter set {counter_set.name} is published twice"
            try:
                sets[counter_set.name] = {name: amount(c.value)
                                          for name, c in counter_set.counters.items()}
            except InvalidQuantity:
                return sets, (f"counter set {counter_set.name} has a counter that is not a "
                              "valid quantity (or beyond 2^63)")
    return sets, None


def _unknown_counters(sets: dict[str, dict[str, Decimal]], *groups: list[SliceEntry]
                      ) -> str | None:
    for group in groups:
        for member in group:
            for device in member.slice.spec.devices:
                for use in device.consumes_counters:
                    counters = sets.get(use.counter_set)
                    if counters is None:
                        return (f"device {device.name} consumes counter set {use.counter_set}, "
                                "which the pool does not publish (sharedCounters)")
                    for name in use.counters:
                        if name not in counters:
                            return (f"device {device.name} consumes counter {name} of set "
                                    f"{use.counter_set}, which the set does not define")
    return None


def _by_set(entries: tuple[DeviceEntry, ...]) -> dict[str, tuple[DeviceEntry, ...]]:
    groups: dict[str, list[DeviceEntry]] = {}
    for entry in entries:
        if entry.unsupported:
            continue
        for set_name in dict.fromkeys(c[0] for c in entry.consumes):
            groups.setdefault(set_name, []).append(entry)
    return {name: tuple(group) for name, group in groups.items()}


def cluster_pools(slices: Iterable[SliceEntry]) -> tuple[Pool, ...]:
    """Every pool of ``slices`` as the whole cluster sees it (for counting devices, not for
    allocating): its newest generation's slices and all their devices, by (driver, name),
    with its counter sets and the devices that consume them (for a cluster-wide
    :class:`~.counters.CounterLedger`); no completeness or validity checks (the counter sets
    of an invalid pool are read up to the first fault: a device consuming a set or counter
    not read never fits the ledger)."""
    newest: dict[PoolKey, list[SliceEntry]] = {}
    for entry in slices:
        spec = entry.slice.spec
        key = (spec.driver, spec.pool.name)
        members = newest.get(key)
        if members is None or spec.pool.generation > members[0].slice.spec.pool.generation:
            newest[key] = [entry]
        elif spec.pool.generation == members[0].slice.spec.pool.generation:
            members.append(entry)
    pools = []
    for (driver, name), members in sorted(newest.items()):
        members.sort(key=lambda e: e.name)
        entries = tuple(e for m in members for e in m.entries)
        counter_sets, _ = _counter_sets([m for m in members if m.counters_only])
        pools.append(Pool(driver, name, members[0].slice.spec.pool.generation, tuple(members),
                          entries, counter_sets=counter_sets,
                          counted=tuple(e for e in entries if e.consumes)))
    return tuple(pools)
