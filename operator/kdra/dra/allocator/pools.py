"""Devices, slices and pools as the allocator sees them from one node.

- :class:`DeviceEntry` wraps one device of one ResourceSlice *object*. It memoises selector
  results per expression: a slice object never changes (models are frozen, and a device is
  immutable within a pool generation), and a new version of the slice gets new entries, so a
  memoised result can never be stale. A device that uses a feature kdra does not implement
  yet (counters, binding conditions, ... — ``Device.unsupported``) is never matched:
  :attr:`DeviceEntry.unsupported` names the features, for explanations. A device with an
  acting taint (its slice's or a DeviceTaintRule's) is matched only for requests that
  tolerate it (:mod:`~kdra.dra.allocator.tainting`).
- :func:`gather_pools` groups the slices a node can see into pools (upstream's GatherPools):
  per (driver, pool name) only the slices of the highest ``generation`` count; a pool is
  *incomplete* when that generation has fewer (or more) slices than ``resourceSliceCount``;
  *invalid* when a device name repeats inside it.
- :class:`NodePools` is the result for one node, in a stable walk order: pools by (driver,
  name), slices by name, devices as listed. It caches, per selector set, the devices that match
  (:meth:`NodePools.matching`); the cache dies with the object, which the snapshot replaces
  whenever the node's slices change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple

from kdra.dra.allocator.capacity import CapacitySpec, device_capacities
from kdra.dra.allocator.nodeselector import NodeInfo, selector_matches
from kdra.dra.allocator.stats import Stats
from kdra.dra.allocator.tainting import DeviceTaints
from kdra.dra.cel import CelDevice, make_device
from kdra.dra.cel import DeviceSelector as CompiledSelector
from kdra.dra.errors import CelRuntimeError, InvalidObject
from kdra.dra.models import DeviceTaint, DeviceToleration, ResourceSlice
from kdra.dra.quantity import InvalidQuantity, parse_quantity

Consumption = tuple[tuple[str, str, Decimal], ...]
"""What a device consumes from its pool's shared counters: ``(counter set, counter,
amount)``."""

CACHE_LIMIT = 128
"""Most expressions (or selector sets) one device memo / one node cache keeps; past it the
cache starts over. Selectors are few in practice (classes are shared); this only bounds memory
when pods carry one-off selectors (a uuid each)."""

AttributeValue = tuple[str, int | bool | str]
"""An attribute as ``(kind, value)``; kind is ``int``, ``bool``, ``string`` or ``version``."""

SelectorFailure = CelRuntimeError | InvalidObject
"""Why a selector could not be evaluated on a device (a runtime error, or device data CEL
cannot represent, such as an invalid version)."""


class DeviceId(NamedTuple):
    """A device's identity across the cluster: ``driver/pool/device``."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled CEL selector and where it came from (for messages)."""

    expression: str
    compiled: CompiledSelector
    origin: str
    """``class gpu.kdra.dev selector #0``, or ``selector #1`` for a request's own."""


class DeviceEntry:
    """One device of one slice object, with its CEL view and selector memo."""

    __slots__ = ("_cel", "_memo", "attributes", "capacities", "consumes", "id", "index",
                 "shared", "slice", "special", "taints", "unsupported")

    def __init__(self, slice_: ResourceSlice, index: int) -> None:
        device = slice_.spec.devices[index]
        self.slice = slice_
        self.index = index
        self.id = DeviceId(slice_.spec.driver, slice_.spec.pool.name, device.name)
        self.attributes: dict[str, AttributeValue] = {}
        for name, attr in device.attributes.items():
            scalar = attr.scalar()
            if scalar is not None:
                self.attributes[name] = scalar
        unsupported = device.unsupported()
        self.consumes: Consumption = ()
        """The device's ``consumesCounters``, parsed (:mod:`.counters`)."""
        self.capacities: tuple[CapacitySpec, ...] = ()
        """Its capacities with their request policies, parsed (:mod:`.capacity`)."""
        self.shared = bool(device.allow_multiple_allocations)
        try:
            self.consumes = tuple(
                (use.counter_set, name, parse_quantity(counter.value).value)
                for use in device.consumes_counters for name, counter in use.counters.items())
        except InvalidQuantity:
            unsupported.append("a counter amount that is not a valid quantity")
        try:
            self.capacities = device_capacities(device)
        except InvalidQuantity:  # selectors fail on it (CEL cannot represent it), as upstream
            if self.shared:
                unsupported.append("a capacity that is not a valid quantity")
        """allowMultipleAllocations: several results may hold it, each a share."""
        self.special = self.shared or bool(self.consumes)
        """Its allocation needs the ledger (counters, shares): counting free devices alone
        does not decide whether it can be taken."""
        if slice_.spec.per_device_node_selection and "per-device node selection" not in \
                unsupported:
            unsupported.append("per-device node selection")
        self.unsupported: tuple[str, ...] = tuple(unsupported)
        """Features of the device kdra does not implement yet; non-empty: never allocated."""
        self.taints: tuple[DeviceTaint, ...] = device.taints
        """The slice's taints on the device (rules' taints: :class:`NodePools`)."""
        self._cel: CelDevice | None = None
        self._memo: dict[str, bool | SelectorFailure] = {}

    def __repr__(self) -> str:
        return f"DeviceEntry({self.id})"

    def attribute(self, qualified_name: str) -> AttributeValue | None:
        """Look up a fully qualified attribute; the bare name counts when its domain is the
        device's driver (``gpu.kdra.dev/index`` finds ``index`` on a ``gpu.kdra.dev`` device)."""
        value = self.attributes.get(qualified_name)
        if value is not None:
            return value
        domain, _, name = qualified_name.partition("/")
        if name and domain == self.id.driver:
            return self.attributes.get(name)
        return None

    def cel_device(self) -> CelDevice:
        """The device as CEL sees it, built once. Raises InvalidObject on bad data."""
        if self._cel is None:
            device = self.slice.spec.devices[self.index]
            capacity = {name: value.value for name, value in device.capacity.items()}
            self._cel = make_device(self.id.driver, self.attributes, capacity)
        return self._cel

    def evaluate(self, selector: Selector, stats: Stats) -> bool:
        """The selector's verdict on this device, memoised per expression.

        Raises CelRuntimeError / InvalidObject (also memoised: evaluating again would fail
        the same way). The verdict does not look at :attr:`unsupported`: callers that offer
        devices (:meth:`NodePools.matching`) skip those first.
        """
        hit = self._memo.get(selector.expression)
        if hit is None:
            if len(self._memo) >= CACHE_LIMIT:
                self._memo.clear()
            stats.cel_evaluations += 1
            try:
                result = selector.compiled.matches(self.cel_device(), str(self.id))
            except (CelRuntimeError, InvalidObject) as exc:
                self._memo[selector.expression] = exc
                raise
            self._memo[selector.expression] = result
            return result
        stats.memo_hits += 1
        if isinstance(hit, bool):
            return hit
        raise hit.with_traceback(None)

    def memoised(self, expression: str) -> bool | SelectorFailure | None:
        """The memoised verdict for ``expression``, or None if never evaluated."""
        return self._memo.get(expression)


@dataclass(frozen=True, slots=True)
class SliceEntry:
    """A slice object with its device entries (built once per slice object)."""

    slice: ResourceSlice
    entries: tuple[DeviceEntry, ...]

    @classmethod
    def of(cls, slice_: ResourceSlice) -> SliceEntry:
        return cls(slice_, tuple(DeviceEntry(slice_, i) for i in range(len(slice_.spec.devices))))

    @property
    def name(self) -> str:
        return self.slice.metadata.name


@dataclass(frozen=True, slots=True)
class Pool:
    """One pool as seen from one node (newest generation only)."""

    driver: str
    name: str
    generation: int
    slices: tuple[SliceEntry, ...]
    entries: tuple[DeviceEntry, ...]
    incomplete: bool
    duplicate: str | None
    """The first repeated device name, when the pool is invalid."""
    counter_sets: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    """The pool's ``sharedCounters`` (from every slice of its newest generation): set →
    counter → total. A set published twice keeps its first definition (slices by name)."""
    broken: Mapping[str, str] = field(default_factory=dict)
    """Device name → why it cannot be allocated in this pool (it consumes a counter set or
    counter the pool does not publish)."""
    consumers: Mapping[str, tuple[DeviceEntry, ...]] = field(default_factory=dict)
    """Counter set → the pool's allocatable devices that consume from it."""

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    @property
    def invalid(self) -> bool:
        return self.duplicate is not None


class MatchItem(NamedTuple):
    """A device that matches a selector set, or whose evaluation failed."""

    entry: DeviceEntry
    pool: Pool
    failure: tuple[Selector, SelectorFailure] | None


class NodePools:
    """The pools one node can see, in walk order, with per-selector-set match caches.

    Invariant: the pools never change (the snapshot builds a new object instead). The match
    cache and ``notes`` depend only on the pools and the selectors' expressions; ``counts``
    (free-device counts kept by the cluster entry point) are valid only under the busy stamp
    stored with them.
    """

    __slots__ = ("_matching", "counts", "node", "notes", "pools", "special", "taints")

    def __init__(self, node: NodeInfo, pools: tuple[Pool, ...],
                 taints: DeviceTaints | None = None) -> None:
        self.node = node
        self.pools = pools
        self.taints = taints if taints is not None else DeviceTaints()
        """Each device's taints, its slice's and the DeviceTaintRules' (snapshot's rules)."""
        self._matching: dict[tuple[str, ...], tuple[MatchItem, ...]] = {}
        self.counts: dict[tuple[str, ...], tuple[tuple[int, int], tuple[int, ...]]] = {}
        self.special = any(entry.special for pool in pools for entry in pool.entries)
        """Some device consumes counters or allows multiple allocations (the search then
        keeps a :class:`~.ledger.Ledger`)."""
        self.notes: dict[tuple[str, ...], str] = {}
        """Per selector set: which selectors turned this node's devices away (for reasons)."""

    def matching(
        self, selectors: tuple[Selector, ...], key: tuple[str, ...], stats: Stats,
        tolerations: tuple[DeviceToleration, ...] = (),
    ) -> tuple[MatchItem, ...]:
        """The devices (in walk order, in use or not) that pass every selector and whose
        taints ``tolerations`` tolerate, plus those on which a selector failed (``failure``
        set; evaluation stops at the failing one, like the search would). ``key`` is the
        tuple of the selectors' expressions and :func:`tolerations_key`."""
        cached = self._matching.get(key)
        if cached is not None:
            return cached
        stats.match_lists_built += 1
        if len(self._matching) >= CACHE_LIMIT:
            self._matching.clear()
            self.counts.clear()
            self.notes.clear()
        items: list[MatchItem] = []
        for pool in self.pools:
            for entry in pool.entries:
                if entry.unsupported or entry.id.device in pool.broken:
                    continue  # never allocated (see DeviceEntry.unsupported, Pool.broken)
                failure = None
                matched = True
                for selector in selectors:
                    try:
                        if not entry.evaluate(selector, stats):
                            matched = False
                            break
                    except (CelRuntimeError, InvalidObject) as exc:
                        failure = (selector, exc)
                        break
                if matched and failure is None and self.taints.blocks(entry, tolerations):
                    continue  # tainted, not tolerated (explained by tainted_note)
                if matched:
                    items.append(MatchItem(entry, pool, failure))
        result = tuple(items)
        self._matching[key] = result
        return result


    def unsupported(self) -> list[DeviceEntry]:
        """The node's devices that use features kdra does not implement yet."""
        return [entry for pool in self.pools for entry in pool.entries if entry.unsupported]

    def broken(self) -> list[tuple[DeviceEntry, str]]:
        """The node's devices whose counters their pool does not publish, with why."""
        return [(entry, pool.broken[entry.id.device]) for pool in self.pools
                for entry in pool.entries if entry.id.device in pool.broken]



def slice_targets(slice_: ResourceSlice, node: NodeInfo) -> bool:
    """Whether ``node`` can reach the devices of ``slice_`` (nodeName, allNodes, nodeSelector;
    a slice with per-device node selection counts as reaching every node: its devices are
    never allocated, but the node's explanations mention them)."""
    spec = slice_.spec
    if spec.node_name:
        return spec.node_name == node.name
    if spec.all_nodes or spec.per_device_node_selection:
        return True
    return spec.node_selector is not None and selector_matches(spec.node_selector, node)


def gather_pools(slices: Iterable[SliceEntry]) -> tuple[Pool, ...]:
    """Group slices (already filtered to one node) into pools, newest generation only."""
    newest: dict[tuple[str, str], list[SliceEntry]] = {}
    for entry in slices:
        spec = entry.slice.spec
        key = (spec.driver, spec.pool.name)
        current = newest.get(key)
        if current is None:
            newest[key] = [entry]
            continue
        generation = current[0].slice.spec.pool.generation
        if spec.pool.generation > generation:
            newest[key] = [entry]
        elif spec.pool.generation == generation:
            current.append(entry)
    pools = []
    for (driver, name), members in sorted(newest.items()):
        members.sort(key=lambda e: e.name)
        pool_spec = members[0].slice.spec.pool
        entries = tuple(d for member in members for d in member.entries)
        counter_sets = _counter_sets(members)
        pools.append(
            Pool(
                driver=driver,
                name=name,
                generation=pool_spec.generation,
                slices=tuple(members),
                entries=entries,
                incomplete=len(members) != pool_spec.resource_slice_count,
                duplicate=_first_duplicate(entries),
                counter_sets=counter_sets,
                broken=(broken := _broken(entries, counter_sets, name)),
                consumers=_by_set(entries, broken),
            )
        )
    return tuple(pools)


def _counter_sets(members: list[SliceEntry]) -> dict[str, dict[str, Decimal]]:
    sets: dict[str, dict[str, Decimal]] = {}
    for member in members:
        for counter_set in member.slice.spec.shared_counters:
            if counter_set.name in sets:
                continue
            try:
                sets[counter_set.name] = {name: parse_quantity(c.value).value
                                          for name, c in counter_set.counters.items()}
            except InvalidQuantity:
                continue  # its devices are then broken: the set is as good as missing
    return sets


def _by_set(entries: tuple[DeviceEntry, ...],
            broken: Mapping[str, str]) -> dict[str, tuple[DeviceEntry, ...]]:
    groups: dict[str, list[DeviceEntry]] = {}
    for entry in entries:
        if entry.unsupported or entry.id.device in broken:
            continue
        for set_name in dict.fromkeys(c[0] for c in entry.consumes):
            groups.setdefault(set_name, []).append(entry)
    return {name: tuple(group) for name, group in groups.items()}


def _broken(entries: tuple[DeviceEntry, ...], sets: Mapping[str, Mapping[str, Decimal]],
            pool: str) -> dict[str, str]:
    broken: dict[str, str] = {}
    for entry in entries:
        for set_name, counter, _ in entry.consumes:
            counters = sets.get(set_name)
            if counters is None:
                broken[entry.id.device] = (f"consumes counter set {set_name}, which pool "
                                           f"{pool} does not publish (sharedCounters)")
                break
            if counter not in counters:
                broken[entry.id.device] = (f"consumes counter {counter} of set {set_name}, "
                                           f"which pool {pool} does not define")
                break
    return broken


def _first_duplicate(entries: tuple[DeviceEntry, ...]) -> str | None:
    seen: set[str] = set()
    for entry in entries:
        if entry.id.device in seen:
            return entry.id.device
        seen.add(entry.id.device)
    return None
