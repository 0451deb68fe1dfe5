"""Who has which devices: utilisation per DeviceClass, node and pool, and holders per
namespace and pod (pure, no I/O).

The views behind ``kubectl kdra free`` / ``top`` and the operator's utilisation metrics
(``kdra_devices``, ``kdra_pool_devices``, ``kdra_namespace_devices_allocated``), so
the command line and the dashboards count the same way:

- :func:`utilisation` — per (class, node, driver, pool): devices ``free``, ``allocated``,
  ``blocked`` and ``unhealthy``; and per pool its total regardless of class.
- :func:`namespace_usage` — devices allocated per (namespace, class).
- :func:`top` — per namespace and per pod: devices held, claims.

Rules (also in ``docs/user-guide.md``):

- A device is counted for every DeviceClass whose selectors it passes (classes may overlap:
  a GPU can be in ``gpu.kdra.dev`` and in ``h100``), and under class ``""`` when it passes
  none — devices nobody can ask for, shown rather than hidden. Per-pool totals count each
  device once.
- Only the newest generation of a pool counts (as for the allocator); a device name repeated
  in a pool counts once.
- A claim's admin-access results hold nothing (:attr:`ClaimRow.held`, upstream's rule): a
  device a monitoring claim sees counts as whatever else makes it so, free if nothing does.
- State, one per device: ``unhealthy`` when its slice carries the agent's acting health
  taint (``gpu.kdra.dev/unhealthy``, NoSchedule or NoExecute: issue 25), or a claim holds
  it and either no current slice publishes it any more or the agent reported it
  ``Ready=False`` with reason ``DeviceUnhealthy`` or ``Healthy=False``; ``allocated`` when
  a claim holds it alone; else ``free`` when it could be allocated now, ``blocked`` when
  not: a counter it consumes has no room (below), or its slice puts another acting taint
  (NoSchedule, NoExecute) on it that keeps it from claims without a toleration (as
  ``describe`` leaves such devices out of a pool's FREE; a DeviceTaintRule's taints are not
  counted here, neither there). Unpublished devices are counted under their claim's request
  class, on the claim's node.
- *Could be allocated now* is the allocator's own test (:meth:`~kdra.dra.allocator.ledger.
  Ledger.can_take` with no capacity request), on one ledger for the whole cluster seeded with
  every held device: every counter the device consumes (``consumesCounters`` against its
  pool's ``sharedCounters``) has room after what the held devices of the pool consume — a
  partition whose memory slices another partition holds, or a whole GPU with a partition in
  use, is ``blocked``. A device that allows multiple allocations (a *shared* device) is
  ``free`` while a share of its default size still fits (its capacity, after what its
  shares consume; its counters are taken once, by its first share), ``allocated`` once its
  capacity is used up; its shares are held by their claims all the same (``top``, the
  namespace gauges).
- A selector that fails on a device (CEL runtime error) or does not compile counts as "does
  not match": the view never fails on bad input.

Invariants:
- Pure functions of their arguments; selector verdicts come from (and fill) the devices'
  memos in the :class:`~kdra.dra.allocator.Snapshot`, so the operator pays almost no CEL
  per call on a warm cluster.
- Rows come sorted (class, node, driver, pool; namespaces by devices held, most first).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kdra.dra.allocator.capacity import EXACT, amount
from kdra.dra.allocator.gather import PoolKey, cluster_pools
from kdra.dra.allocator.ledger import Ledger, SharedUse
from kdra.dra.allocator.nodeselector import NodeInfo
from kdra.dra.allocator.pools import DeviceEntry, DeviceId, NodePools, Pool, Selector, SliceEntry
from kdra.dra.allocator.snapshot import Snapshot
from kdra.dra.allocator.stats import Stats
from kdra.dra.cel import compile_selector
from kdra.dra.errors import CelCompileError, CelRuntimeError, InvalidObject
from kdra.dra.models import DeviceClass, ResourceSlice
from kdra.dra.quantity import InvalidQuantity
from kdra.dra.taints import UNHEALTHY_KEY, acts
from kdra.dra.usage.claims import ClaimRow, natural

__all__ = [
    "STATES",
    "NamespaceTop",
    "PodTop",
    "Usage",
    "UsageMemo",
    "namespace_usage",
    "pool_totals",
    "top",
    "utilisation",
]

STATES = ("free", "allocated", "blocked", "unhealthy")
NO_CLASS = ""


@dataclass(frozen=True)
class Usage:
    """Devices of one class in one pool, by state."""

    device_class: str
    """The DeviceClass; ``""``: devices no class selects."""
    node: str
    """The pool's ``nodeName``; ``<all nodes>`` / ``<selector>`` for pools not on one node;
    for held devices no slice publishes, the claim's node (empty when it has none)."""
    driver: str
    pool: str
    free: int = 0
    allocated: int = 0
    unhealthy: int = 0
    blocked: int = 0
    """Nobody holds it, but it cannot be allocated now: a counter it consumes has no room."""

    @property
    def total(self) -> int:
        return self.free + self.allocated + self.blocked + self.unhealthy

    def count(self, state: str) -> int:
        return int(getattr(self, state))

    def to_json(self) -> dict[str, Any]:
        return {"class": self.device_class, "node": self.node, "driver": self.driver,
                "pool": self.pool, "total": self.total, "allocated": self.allocated,
                "free": self.free, "blocked": self.blocked, "unhealthy": self.unhealthy}


@dataclass
class _Count:
    free: int = 0
    allocated: int = 0
    unhealthy: int = 0
    blocked: int = 0


def _node_of(slice_: ResourceSlice) -> str:
    spec = slice_.spec
    if spec.node_name:
        return spec.node_name
    return "<all nodes>" if spec.all_nodes else "<selector>"


def _class_selectors(classes: Iterable[DeviceClass]) -> list[tuple[str, tuple[Selector, ...]]]:
    """Each class with its compiled selectors; a class whose selector does not compile
    selects nothing (left out)."""
    compiled = []
    for device_class in sorted(classes, key=lambda c: c.metadata.name):
        try:
            selectors = tuple(
                Selector(s.cel.expression, compile_selector(s.cel.expression),
                         f"class {device_class.metadata.name} selector #{i}")
                for i, s in enumerate(device_class.spec.selectors))
        except CelCompileError:
            continue
        compiled.append((device_class.metadata.name, selectors))
    return compiled


class UsageMemo:
    """What :func:`utilisation` counted at its last call, reused at the next while nothing
    the counts depend on changed — kept by a caller that asks repeatedly (the operator's
    scrapes), so a scrape of a cluster where nothing changed walks no device, and one where
    little changed walks only the pools that did.

    The whole result is reused when the claim rows are the same objects as last time (the
    caller keeps a row per claim version) and the slices and classes are unchanged.

    A pool's counts depend on its newest generation's slices (compared by identity: the
    snapshot keeps a slice's entries, with their selector memos, while it is unchanged), the
    classes and their selectors (compared as text), and what the claims hold in the pool (each
    held device's health and, for a shared device, its shares' count and consumed capacity).
    Anything else about a device (taints, attributes, counters) is part of its slice.

    Invariants: a result computed with a memo equals one computed without; the memo keeps
    only the pools of its last call (a removed pool is dropped)."""

    def __init__(self) -> None:
        self._entries: tuple[SliceEntry, ...] = ()
        self._pools: tuple[Pool, ...] = ()
        self._counts: dict[PoolKey, _PoolCounts] = {}
        self._last: tuple[tuple[ClaimRow, ...], tuple[Pool, ...], _ClassKey,
                          list[tuple[tuple[str, str, str, str], _Count]]] | None = None

    def _same_as_last(self, rows: tuple[ClaimRow, ...], pools: tuple[Pool, ...],
                      class_key: _ClassKey) -> list[tuple[tuple[str, str, str, str],
                                                         _Count]] | None:
        last = self._last
        if last is None or last[1] is not pools or last[2] != class_key or len(
                last[0]) != len(rows) or any(
                a is not b for a, b in zip(last[0], rows, strict=True)):
            return None
        return last[3]

    def pools(self, snapshot: Snapshot) -> tuple[Pool, ...]:
        """:func:`cluster_pools` of the snapshot's slices, rebuilt only when a slice changed."""
        entries = tuple(snapshot.slice_entries())
        if len(entries) != len(self._entries) or any(
                a is not b for a, b in zip(entries, self._entries, strict=True)):
            self._entries, self._pools = entries, cluster_pools(entries)
        return self._pools


_ClassKey = tuple[tuple[str, tuple[str, ...]], ...]
"""The classes by name, with their selectors' expressions."""


@dataclass(frozen=True)
class _PoolCounts:
    slices: tuple[SliceEntry, ...]
    classes: _ClassKey
    held: tuple[tuple[str, bool, int, tuple[tuple[str, Decimal], ...]], ...]
    counts: tuple[tuple[tuple[str, str, str, str], _Count], ...]
    names: frozenset[str]


def utilisation(snapshot: Snapshot, claims: Sequence[ClaimRow],
                stats: Stats | None = None, *, sort: bool = True,
                memo: UsageMemo | None = None) -> list[Usage]:
    """Per (class, node, driver, pool): free, allocated, blocked and unhealthy devices (module
    doc).

    ``snapshot`` supplies the slices and classes (its claims are not used: ``claims`` say who
    holds what, with the agents' readiness); ``stats`` counts the CEL work (a private one by
    default, so the allocator's figures stay the allocator's). ``sort=False`` leaves the rows
    in no particular order (the metrics need none). ``memo``: the counts of pools that did not
    change since the memo's last call are reused (:class:`UsageMemo`)."""
    stats = stats if stats is not None else Stats()
    memo = memo if memo is not None else UsageMemo()
    rows = tuple(claims)
    classes = _class_selectors(snapshot.classes())
    class_key = tuple((name, tuple(s.expression for s in selectors))
                      for name, selectors in classes)
    pools = memo.pools(snapshot)
    items = memo._same_as_last(rows, pools, class_key)
    if items is None:
        items = _count(rows, classes, class_key, pools, memo, stats)
        memo._last = (rows, pools, class_key, items)
    if sort:
        items = sorted(items, key=lambda kv: (kv[0][0], natural(kv[0][1]), kv[0][2],
                                              natural(kv[0][3])))
    return [Usage(name, node, driver, pool, count.free, count.allocated, count.unhealthy,
                  count.blocked)
            for (name, node, driver, pool), count in items]


def _count(claims: tuple[ClaimRow, ...], classes: list[tuple[str, tuple[Selector, ...]]],
           class_key: _ClassKey, pools: tuple[Pool, ...], memo: UsageMemo,
           stats: Stats) -> list[tuple[tuple[str, str, str, str], _Count]]:
    """:func:`utilisation`'s counts, unsorted (pools unchanged since ``memo``'s last call
    are not walked again)."""
    held: dict[DeviceId, tuple[bool, str, str]] = {}  # device → (unhealthy, class, node)
    shares: dict[DeviceId, SharedUse] = {}
    for claim in claims:
        for device in claim.held:
            key = DeviceId(device.driver, device.pool, device.device)
            was = held.get(key)
            unhealthy = device.unhealthy or (was is not None and was[0])
            held[key] = (unhealthy, device.device_class or (was[1] if was else NO_CLASS),
                         claim.node or (was[2] if was else ""))
            if device.share_id:
                shares.setdefault(key, SharedUse()).add(1, _amounts(device.consumed))
    held_in: dict[PoolKey, list[tuple[str, bool, int, tuple[tuple[str, Decimal], ...]]]] = \
        defaultdict(list)
    for device_id, (unhealthy, _, _) in held.items():
        share = shares.get(device_id)
        held_in[(device_id.driver, device_id.pool)].append(
            (device_id.device, unhealthy, share.count if share else 0,
             tuple(sorted(share.consumed.items())) if share else ()))
    counts: dict[tuple[str, str, str, str], _Count] = defaultdict(_Count)
    ledger: Ledger | None = None
    known: dict[PoolKey, _PoolCounts] = {}
    for pool in pools:
        pool_key = (pool.driver, pool.name)
        held_here = tuple(sorted(held_in.get(pool_key, ())))
        done = memo._counts.get(pool_key)
        if done is None or done.held != held_here or done.classes != class_key or len(
                done.slices) != len(pool.slices) or any(
                a is not b for a, b in zip(done.slices, pool.slices, strict=True)):
            if ledger is None:
                ledger = Ledger(NodePools(NodeInfo(""), pools), held, shares)
            done = _count_pool(pool, classes, held, ledger, stats, class_key, held_here)
        known[pool_key] = done
        for where, count in done.counts:
            into = counts[where]
            into.free += count.free
            into.allocated += count.allocated
            into.unhealthy += count.unhealthy
            into.blocked += count.blocked
    memo._counts = known
    for device_id, (_, device_class, node) in held.items():
        pool_counts = known.get((device_id.driver, device_id.pool))
        if pool_counts is None or device_id.device not in pool_counts.names:
            counts[(device_class, node, device_id.driver, device_id.pool)].unhealthy += 1
    return list(counts.items())


def _count_pool(pool: Pool, classes: list[tuple[str, tuple[Selector, ...]]],
                held: Mapping[DeviceId, tuple[bool, str, str]], ledger: Ledger, stats: Stats,
                class_key: _ClassKey,
                held_here: tuple[tuple[str, bool, int, tuple[tuple[str, Decimal], ...]], ...],
                ) -> _PoolCounts:
    """One pool's counts per (class, node, driver, pool), each published device once."""
    counts: dict[tuple[str, str, str, str], _Count] = defaultdict(_Count)
    seen: set[str] = set()
    for entry in pool.entries:
        if entry.id.device in seen:
            continue
        seen.add(entry.id.device)
        state = _state(entry, held.get(entry.id), ledger)
        node = _node_of(entry.slice)
        matched = [name for name, selectors in classes
                   if _matches(entry, selectors, stats)] or [NO_CLASS]
        for name in matched:
            count = counts[(name, node, pool.driver, pool.name)]
            setattr(count, state, getattr(count, state) + 1)
    return _PoolCounts(pool.slices, class_key, held_here, tuple(counts.items()),
                       frozenset(seen))


def _state(entry: DeviceEntry, holder: tuple[bool, str, str] | None, ledger: Ledger) -> str:
    """One device's state (module doc): ``holder`` is (unhealthy, class, node) of a device
    some claim holds (alone or a share of it)."""
    acting = [t for t in entry.taints if acts(t)]
    if any(t.key == UNHEALTHY_KEY for t in acting) or (holder is not None and holder[0]):
        return "unhealthy"
    if holder is not None and not entry.shared:
        return "allocated"
    if not acting and ledger.can_take(entry, ()):
        return "free"
    return "allocated" if holder is not None else "blocked"


def _amounts(written: Iterable[tuple[str, str]]) -> dict[str, Decimal]:
    """A share's consumedCapacity as the allocator reads it (:func:`~kdra.dra.allocator.
    snapshot.shares_in_use`): what is not a quantity, or is negative, counts as zero."""
    amounts: dict[str, Decimal] = {}
    for name, text in written:
        try:
            value = max(amount(text), Decimal(0))
        except InvalidQuantity:
            continue
        amounts[name] = EXACT.add(amounts.get(name, Decimal(0)), value)
    return amounts


def pool_totals(snapshot: Snapshot,
                memo: UsageMemo | None = None) -> dict[tuple[str, str, str], int]:
    """(node, driver, pool) → devices the pool's newest generation publishes (each once,
    whatever its classes), for ``kdra_pool_devices`` (``memo``: pools gathered once per change
    of the slices, :meth:`UsageMemo.pools`)."""
    totals: dict[tuple[str, str, str], int] = {}
    for pool in (memo or UsageMemo()).pools(snapshot):
        names = {entry.id.device for entry in pool.entries}
        totals[(_node_of(pool.slices[0].slice), pool.driver, pool.name)] = len(names)
    return totals


def _matches(entry: Any, selectors: tuple[Selector, ...], stats: Stats) -> bool:
    try:
        for selector in selectors:
            if not entry.evaluate(selector, stats):
                return False
    except (CelRuntimeError, InvalidObject):
        return False
    return True


def namespace_usage(claims: Iterable[ClaimRow]) -> Counter[tuple[str, str]]:
    """(namespace, class) → devices allocated to the namespace's claims (admin access
    holds none)."""
    usage: Counter[tuple[str, str]] = Counter()
    for claim in claims:
        for device in claim.held:
            usage[(claim.namespace, device.device_class)] += 1
    return usage


# --------------------------------------------------------------------------- top


@dataclass(frozen=True)
class PodTop:
    namespace: str
    pod: str
    devices: int
    claims: tuple[str, ...]


@dataclass(frozen=True)
class NamespaceTop:
    namespace: str
    devices: int
    """Devices held by the namespace's allocated claims (each device once)."""
    claims: int
    """Allocated claims."""
    pending: int
    """Claims not allocated yet."""
    pods: tuple[PodTop, ...] = field(default_factory=tuple)
    by_class: Mapping[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "devices": self.devices, "claims": self.claims,
                "pending": self.pending, "byClass": dict(self.by_class),
                "pods": [{"pod": p.pod, "devices": p.devices, "claims": list(p.claims)}
                         for p in self.pods]}


def top(claims: Iterable[ClaimRow]) -> list[NamespaceTop]:
    """Per namespace (most devices first, then name): devices held, allocated and pending
    claims, devices per class, and per pod (most first) the devices of the claims reserved
    for it — a shared claim counts for each of its pods, once for the namespace; devices
    seen through admin access are held by nobody (the claim counts, its devices do not)."""
    rows = list(claims)
    namespaces = sorted({claim.namespace for claim in rows})
    result = []
    for namespace in namespaces:
        mine = [claim for claim in rows if claim.namespace == namespace]
        devices = {(d.driver, d.pool, d.device) for claim in mine for d in claim.held}
        by_class = Counter(d.device_class or NO_CLASS for claim in mine for d in claim.held)
        pods: dict[str, list[ClaimRow]] = defaultdict(list)
        for claim in mine:
            for pod in claim.pods:
                pods[pod.split("/", 1)[-1]].append(claim)
        pod_rows = sorted(
            (PodTop(namespace, pod, len({(d.driver, d.pool, d.device)
                                         for claim in held for d in claim.held}),
                    tuple(claim.name for claim in held))
             for pod, held in pods.items()),
            key=lambda p: (-p.devices, natural(p.pod)))
        result.append(NamespaceTop(
            namespace, len(devices), sum(1 for claim in mine if claim.devices),
            sum(1 for claim in mine if claim.state == "pending"), tuple(pod_rows),
            dict(sorted(by_class.items()))))
    result.sort(key=lambda n: (-n.devices, n.namespace))
    return result
