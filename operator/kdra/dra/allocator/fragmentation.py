"""Fragmentation-aware order of a request's candidates on one node: take the partition (or
share) that keeps the largest partitions allocatable.

Upstream takes the first device in walk order that fits (first-fit). On partitionable GPUs
that scatters small partitions over every GPU: after a few ``1g`` requests no GPU has room
for a ``7g`` any more, although the memory is there. kdra sorts the candidates of a request
before the search tries them (the search itself, its step budget and its all-or-nothing rule
are unchanged; :class:`~.search.NodeSearch` with ``scoring=False`` keeps walk order):

1. devices that neither consume counters nor allow multiple allocations, in walk order
   (taking one fragments nothing);
2. shares of devices that already have shares, tightest fit first (binpack: the capacity
   left over after this share, as a fraction of the total, smallest first);
3. devices that consume counters (a partition, a whole GPU, a first share), preferring in
   this order: the one that *opens* no counter set (an empty GPU stays whole for the next
   ``7g``); the one on the fuller set (binpack on the device level: mean of used / total
   over the set's counters); the one that *strands* the least capacity (:func:`stranded`:
   a ``1g`` at memory slice 6 strands slice 7, which only a ``3g`` at 4 could use); the one
   with the best *fragmentation vector* — for every counter set of the node the size of the
   largest device still allocatable from it, sorted descending, with this candidate taken,
   lexicographically largest first; the smaller candidate; walk order. (The order of these
   criteria was chosen with bench/fragmentation.py: over six seeds of the quick run it
   placed 4602 requests where first-fit placed 4565; putting stranding or the vector before
   fullness placed 4588-4592, dropping the vector 4568-4583.)
4. candidates that do not fit now, in walk order (the search rejects them quickly).

A device's *size* is the sum, over the counters it consumes, of amount / the counter's
total: the whole GPU and ``7g`` are largest, ``1g`` smallest — no knowledge of MIG needed.

Invariants:
- The order is a permutation of the candidates: scoring never adds or drops one, so the
  search finds a solution exactly when first-fit would (possibly another one).
- Pure and bounded: per request, O(candidates x devices of the same counter set) fits
  checks, memoised across GPUs with the same layout and usage.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from kdra.dra.allocator.capacity import RequestedCapacity
from kdra.dra.allocator.counters import SetKey
from kdra.dra.allocator.ledger import Ledger
from kdra.dra.allocator.pools import DeviceEntry, MatchItem, Pool
from kdra.dra.allocator.results import Pick

__all__ = ["largest_free", "order_candidates", "placement_cost", "size", "stranded"]

_ZERO = Decimal(0)
_MEMO_LIMIT = 4096
_memo: dict[tuple[object, ...], tuple[Decimal, Decimal]] = {}


def size(entry: DeviceEntry, ledger: Ledger) -> Decimal:
    """Σ amount / total over the counters ``entry`` consumes."""
    driver, pool, _ = entry.id
    total = _ZERO
    for set_name, counter, amount in entry.consumes:
        limit = ledger.counters.totals.get((driver, pool, set_name), {}).get(counter)
        if limit:
            total += amount / limit
    return total


def _consumers(pool: Pool, set_name: str) -> tuple[DeviceEntry, ...]:
    return pool.consumers.get(set_name, ())


_signatures: dict[int, tuple[Sequence[DeviceEntry], tuple[object, ...] | None]] = {}
"""id(consumers) → (the consumers, kept alive so the id stays theirs; their signature)."""


def _signature(key: SetKey, consumers: Sequence[DeviceEntry]) -> tuple[object, ...] | None:
    """What the set's consumers draw, without the set's name (GPUs of one layout share it);
    None when a consumer also draws on another set (then no memo: its fit depends on it).
    Cached per consumers tuple (``Pool.consumers`` values live as long as their pool)."""
    cached = _signatures.get(id(consumers))
    if cached is not None and cached[0] is consumers:
        return cached[1]
    if len(_signatures) >= _MEMO_LIMIT:
        _signatures.clear()
    signature = _compute_signature(key, consumers)
    _signatures[id(consumers)] = (consumers, signature)
    return signature


def _compute_signature(key: SetKey,
                       consumers: Sequence[DeviceEntry]) -> tuple[object, ...] | None:
    shapes = []
    for entry in consumers:
        shape = []
        for set_name, counter, amount in entry.consumes:
            if set_name != key[2]:
                return None
            shape.append((counter, amount))
        shapes.append(tuple(shape))
    return tuple(sorted(shapes))


def largest_free(key: SetKey, consumers: Sequence[DeviceEntry], ledger: Ledger) -> Decimal:
    """The size of the largest device of ``consumers`` (devices drawing on set ``key``) that
    the counters still allow, with the ledger as it is now (0: none)."""
    return _state(key, consumers, ledger)[0]


def stranded(key: SetKey, consumers: Sequence[DeviceEntry], ledger: Ledger) -> Decimal:
    """Free capacity of set ``key`` that no device the counters still allow could use: for
    every counter with something left that no allocatable consumer draws on, the free
    fraction (a MIG memory slice only a 3g could use, once every such 3g is blocked)."""
    return _state(key, consumers, ledger)[1]


def _state(key: SetKey, consumers: Sequence[DeviceEntry],
           ledger: Ledger) -> tuple[Decimal, Decimal]:
    used = ledger.counters.used.get(key, {})
    totals = ledger.counters.totals.get(key, {})
    signature = _signature(key, consumers)
    memo_key = (tuple(sorted(used.items())), signature, tuple(sorted(totals.items())))
    hit = _memo.get(memo_key) if signature is not None else None
    if hit is not None:
        return hit
    best = _ZERO
    covered: set[str] = set()
    for entry in consumers:
        if ledger.counters.fits(entry):
            best = max(best, size(entry, ledger))
            covered.update(counter for set_name, counter, _ in entry.consumes
                           if set_name == key[2])
    waste = sum(((total - used.get(name, _ZERO)) / total for name, total in totals.items()
                 if total > 0 and name not in covered and used.get(name, _ZERO) < total),
                _ZERO)
    if len(_memo) >= _MEMO_LIMIT:
        _memo.clear()
    _memo[memo_key] = (best, waste)
    return best, waste


def order_candidates(items: tuple[MatchItem, ...], ledger: Ledger,
                     capacity: RequestedCapacity) -> tuple[MatchItem, ...]:
    """``items`` in the order the search should try them (see the module doc)."""
    if not any(item.entry.special for item in items):
        return items
    plain: list[MatchItem] = []
    keyed: list[tuple[tuple[Any, ...], MatchItem]] = []
    late: list[MatchItem] = []
    consumers: dict[SetKey, tuple[DeviceEntry, ...]] = {}
    before: dict[SetKey, Decimal] = {}
    waste_before: dict[SetKey, Decimal] = {}
    for item in items:  # every set a candidate draws on, with its largest free device now
        for set_name, _, _ in item.entry.consumes:
            key = (item.pool.driver, item.pool.name, set_name)
            if key not in consumers:
                consumers[key] = _consumers(item.pool, set_name)
    for key, group in consumers.items():
        before[key], waste_before[key] = _state(key, group, ledger)
    waste_total = sum(waste_before.values(), _ZERO)
    untouched = {key for key in consumers if not ledger.counters.used.get(key)}
    for position, item in enumerate(items):
        entry = item.entry
        if not entry.special:
            plain.append(item)
            continue
        holders = ledger.holders(entry.id) if entry.shared else 0
        if entry.id in ledger.busy or not ledger.can_take(entry, capacity):
            late.append(item)
            continue
        if entry.shared and (holders or not entry.consumes):
            keyed.append(((1, _slack(entry, ledger, capacity), position), item))
            continue
        consumed = ledger.admit(entry, capacity)
        assert consumed is not None  # can_take said it fits
        touched = {(item.pool.driver, item.pool.name, s) for s, _, _ in entry.consumes}
        after = {key: _state(key, consumers[key], ledger) for key in touched}
        vector = sorted((after[key][0] if key in touched else value
                         for key, value in before.items()), reverse=True)
        waste = waste_total + sum((after[key][1] - waste_before[key] for key in touched),
                                  _ZERO)
        opened = len(touched & untouched)
        ledger.release(entry, consumed)
        fill = max((ledger.counters.fill(key) for key in touched), default=_ZERO)
        keyed.append(((2, opened, -fill, waste, tuple(-v for v in vector),
                       size(entry, ledger), position), item))
    keyed.sort(key=lambda pair: pair[0])
    return tuple(plain) + tuple(item for _, item in keyed) + tuple(late)


def _slack(entry: DeviceEntry, ledger: Ledger, capacity: RequestedCapacity) -> Decimal:
    """Capacity a share leaves over, as a fraction of the device's totals (smaller: tighter)."""
    used = ledger.used_capacity(entry.id)
    asked = dict(capacity)
    slack = _ZERO
    for spec in entry.capacities:
        if spec.value <= 0:
            continue
        amount = asked.get(spec.name, asked.get(spec.name.split("/")[-1], _ZERO))
        slack += (spec.value - used.get(spec.name, _ZERO) - amount) / spec.value
    return slack


def placement_cost(picks: Sequence[Sequence[Pick]], ledger: Ledger) -> int:
    """How many counter sets the node's picks *open*: sets with no usage before them (an
    empty GPU that stops being empty). 0 for picks that use no counters. The ledger must
    hold the picks; it is left as it was. (Measured in bench/fragmentation.py: choosing the
    node that opens no GPU, then the first by name, places more than also weighing stranded
    capacity or how full the node is.)"""
    everything = [pick for chosen in picks for pick in chosen if pick.consumed is not None]
    keys = {(pick.entry.id.driver, pick.entry.id.pool, set_name)
            for pick in everything for set_name, _, _ in pick.entry.consumes}
    if not keys:
        return 0
    for pick in reversed(everything):
        ledger.release(pick.entry, pick.consumed or {})
    opened = sum(1 for key in keys if not ledger.counters.used.get(key))
    for pick in everything:
        again = ledger.admit(pick.entry, pick.request.capacity)
        assert again is not None  # the same picks, in the same order, fit again
    return opened
