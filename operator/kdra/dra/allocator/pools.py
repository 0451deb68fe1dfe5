"""Devices, slices and pools as the allocator sees them from one node.

- :class:`DeviceEntry` wraps one device of one ResourceSlice *object*. It memoises selector
  results per expression: a slice object never changes (models are frozen, and a device is
  immutable within a pool generation), and a new version of the slice gets new entries, so a
  memoised result can never be stale. A device that uses a feature kdra does not implement
  yet (node-allocatable mappings, list-typed attributes — ``Device.unsupported``) is never
  matched: :attr:`DeviceEntry.unsupported` names the features, for explanations. A device
  with an acting taint (its slice's or a DeviceTaintRule's) is matched only for requests
  that tolerate it (:mod:`~kdra.dra.allocator.tainting`). A device of a slice with
  ``perDeviceNodeSelection`` says itself which nodes reach it (:meth:`DeviceEntry.reaches`).
- :class:`Pool` is one pool as one node sees it, built by :mod:`.gather` (upstream's
  GatherPools): its newest generation, whether it is *incomplete* or *invalid* (then none of
  its devices is offered), its counter sets, and the devices of its slices for other nodes
  that draw on them (:attr:`Pool.counted`).
- :class:`NodePools` is the result for one node, in a stable walk order: pools by (driver,
  name) — pools with binding conditions last, as upstream —, slices by name, devices as
  listed. It caches, per selector set, the devices that match (:meth:`NodePools.matching`);
  the cache dies with the object, which the snapshot replaces whenever the node's slices
  change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import NamedTuple

from kdra.dra.allocator.capacity import CapacitySpec, amount, device_capacities
from kdra.dra.allocator.nodeselector import NodeInfo, selector_matches
from kdra.dra.allocator.pacing import Paused
from kdra.dra.allocator.stats import Stats
from kdra.dra.allocator.tainting import DeviceTaints
from kdra.dra.cel import CelDevice, make_device
from kdra.dra.cel import DeviceSelector as CompiledSelector
from kdra.dra.errors import CelRuntimeError, InvalidObject
from kdra.dra.models import DeviceTaint, DeviceToleration, NodeSelector, ResourceSlice
from kdra.dra.quantity import InvalidQuantity

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

NodeScope = tuple[str | None, NodeSelector | None, bool]
"""A device's own node selection (``perDeviceNodeSelection``): nodeName, nodeSelector,
allNodes."""


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

    __slots__ = ("_cel", "_memo", "attributes", "binding", "capacities", "consumes", "id",
                 "index", "scope", "shared", "slice", "special", "taints", "unsupported")

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
        """allowMultipleAllocations: several results may hold it, each a share."""
        try:
            self.consumes = tuple(
                (use.counter_set, name, amount(counter.value))
                for use in device.consumes_counters for name, counter in use.counters.items())
        except InvalidQuantity:
            unsupported.append("a counter amount that is not a valid quantity (or beyond 2^63)")
        try:
            self.capacities = device_capacities(device)
        except InvalidQuantity:  # selectors fail on it (CEL cannot represent it), as upstream
            if self.shared:
                unsupported.append("a capacity that is not a valid quantity (or beyond 2^63)")
        self.special = self.shared or bool(self.consumes)
        """Its allocation needs the ledger (counters, shares): counting free devices alone
        does not decide whether it can be taken."""
        self.unsupported: tuple[str, ...] = tuple(unsupported)
        """Features of the device kdra does not implement yet; non-empty: never allocated."""
        self.taints: tuple[DeviceTaint, ...] = device.taints
        """The slice's taints on the device (rules' taints: :class:`NodePools`)."""
        self.scope: NodeScope | None = (
            (device.node_name, device.node_selector, bool(device.all_nodes))
            if slice_.spec.per_device_node_selection else None)
        """The device's own node selection (None: its slice's applies)."""
        self.binding = bool(device.binding_conditions)
        """It has binding conditions (its pool is walked after those without)."""
        self._cel: CelDevice | None = None
        self._memo: dict[str, bool | SelectorFailure] = {}

    def reaches(self, node: NodeInfo) -> bool:
        """Whether ``node`` can use the device, by its own node selection (a device without
        one is reached wherever its slice is)."""
        scope = self.scope
        if scope is None:
            return True
        node_name, selector, all_nodes = scope
        if node_name:
            return node_name == node.name
        if all_nodes:
            return True
        return selector is not None and selector_matches(selector, node)

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
            self._cel = make_device(self.id.driver, self.attributes, capacity,
                                    allow_multiple_allocations=self.shared)
        return self._cel

    def evaluate(self, selector: Selector, stats: Stats) -> bool:
        """The selector's verdict on this device, memoised per expression.

        Raises CelRuntimeError / InvalidObject (also memoised: evaluating again would fail
        the same way). The verdict does not look at :attr:`unsupported`: callers that offer
        devices (:meth:`NodePools.matching`) skip those first. The run-time cost of an
        evaluation is added to ``stats.cel_cost``; one of a selector that may be charged which
        would start past the caller's allowance raises :class:`~.pacing.Paused` instead,
        evaluating and memoising nothing (:mod:`.pacing`).
        """
        hit = self._memo.get(selector.expression)
        if hit is None:
            pause = stats.pause_at
            if pause is not None and stats.cel_cost >= pause and selector.compiled.charged:
                raise Paused  # the caller's CEL allowance is spent (.pacing)
            if len(self._memo) >= CACHE_LIMIT:
                self._memo.clear()
            stats.cel_evaluations += 1
            try:
                result, cost = selector.compiled.evaluate(self.cel_device(), str(self.id))
            except CelRuntimeError as exc:
                stats.cel_cost += exc.cost
                self._memo[selector.expression] = exc
                raise
            except InvalidObject as exc:
                self._memo[selector.expression] = exc
                raise
            stats.cel_cost += cost
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

    @property
    def counters_only(self) -> bool:
        """It publishes counter sets (``sharedCounters``), no devices."""
        return bool(self.slice.spec.shared_counters)

    def reaches(self, node: NodeInfo) -> bool:
        """Whether ``node`` can use some device of the slice (its scope, or with
        ``perDeviceNodeSelection`` some device's own)."""
        spec = self.slice.spec
        if spec.node_name:
            return spec.node_name == node.name
        if spec.all_nodes:
            return True
        if spec.per_device_node_selection:
            return any(entry.reaches(node) for entry in self.entries)
        return spec.node_selector is not None and selector_matches(spec.node_selector, node)


@dataclass(frozen=True, slots=True)
class Pool:
    """One pool as seen from one node (newest generation only; see :mod:`.gather`)."""

    driver: str
    name: str
    generation: int
    slices: tuple[SliceEntry, ...]
    """The pool's slices of that generation the node sees (device slices that reach it and
    the pool's counter-set slices), by name."""
    entries: tuple[DeviceEntry, ...]
    """The devices the node may be allocated, in walk order; empty when the pool is
    incomplete or invalid."""
    incomplete: bool = False
    """Its newest generation has fewer (or more) slices than ``resourceSliceCount``, also
    counting its slices for other nodes."""
    invalid: str | None = None
    """Why the pool is invalid (a device name repeats, a counter set is published twice, a
    device consumes a counter set or counter the pool does not define), or None."""
    counter_sets: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)
    """The pool's ``sharedCounters``: set → counter → total."""
    counted: tuple[DeviceEntry, ...] = ()
    """Every device of the pool's generation that consumes counters, in the node's slices
    and in the pool's slices for other nodes: the ledger counts those held."""
    consumers: Mapping[str, tuple[DeviceEntry, ...]] = field(default_factory=dict)
    """Counter set → the pool's allocatable devices that consume from it."""
    binding: bool = False
    """A device of the node's slices has binding conditions."""

    @property
    def id(self) -> str:
        return f"{self.driver}/{self.name}"

    @property
    def unusable(self) -> bool:
        """Incomplete or invalid: none of its devices is offered."""
        return self.incomplete or self.invalid is not None

    def describe(self) -> str:
        """Why the pool is unusable (for messages): ``resource pool d/p is invalid: ...``."""
        if self.incomplete:
            return f"resource pool {self.id} is incomplete (being updated)"
        return f"resource pool {self.id} is invalid: {self.invalid}"


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

    __slots__ = ("_matching", "counts", "node", "notes", "pools", "special", "taints",
                 "unusable")

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
        self.unusable = tuple(pool for pool in pools if pool.unusable)
        """The incomplete and invalid pools (an ``All`` request fails on them; an invalid
        one is the error when nothing fits)."""
        self.notes: dict[tuple[str, ...], str] = {}
        """Per selector set: which selectors turned this node's devices away (for reasons)."""

    @property
    def invalid(self) -> Pool | None:
        """The first invalid pool (upstream: "invalid resource pools were encountered")."""
        return next((pool for pool in self.unusable if pool.invalid is not None), None)

    def matching(
        self, selectors: tuple[Selector, ...], key: tuple[str, ...], stats: Stats,
        tolerations: tuple[DeviceToleration, ...] = (),
    ) -> tuple[MatchItem, ...]:
        """The devices (in walk order, in use or not) that pass every selector and whose
        taints ``tolerations`` tolerate, plus those on which a selector failed (``failure``
        set; evaluation stops at the failing one, like the search would). ``key`` is the
        tuple of the selectors' expressions and :func:`tolerations_key`.

        Raises :class:`~.pacing.Paused` when an open meter's CEL allowance runs out before
        the list is complete; nothing is cached then (the verdicts so far are memoised on the
        devices: calling again resumes at the first device not evaluated yet)."""
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
                if entry.unsupported:
                    continue  # never allocated (see DeviceEntry.unsupported)
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
