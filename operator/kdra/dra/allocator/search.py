"""Structured allocation on one node: a depth-first search with backtracking, resumable.

:class:`NodeSearch` is the pure core of upstream's ``Allocate(node)`` for a pod's
*unallocated* claims, each request already resolved to one alternative (``firstAvailable``
choices are :mod:`.choices`' job, which also has :func:`~.choices.allocate`). It returns the
devices picked per claim or ``None`` when they do not fit the node, and raises
:class:`~.reasons.Unallocatable` for bad input. It is all-or-nothing across the claims.
Devices of allocated claims in the snapshot, of assumed allocations, and ``in_flight``
devices are in use (admin-access results are not).

Devices that consume counters or allow multiple allocations, and requests with capacity
requests, go through a :class:`~.ledger.Ledger` when a slot takes them (counters within their
totals, shares within the capacity; undone on backtrack like the pick itself); a device that
allows multiple allocations may fill several slots, also of one request. With ``scoring``
(default) such candidates are tried in :mod:`.fragmentation`'s order; without, in walk order.

The search, in upstream's order (first complete solution wins; scoring is the binder's job):

1. :func:`~.prepared.prepare` (node-independent): every request (every ``firstAvailable``
   alternative) needs its DeviceClass; selectors are compiled (class selectors first, then
   the request's); ExactCount needs ``count`` devices (default 1); more than 32 devices for
   one claim is an error. A device with a taint the request does not tolerate is not among
   its matching devices.
2. Per node (:mod:`.gather`), each request gets its list of matching devices in walk order
   (pools by driver and name, pools with binding conditions last, slices by name, devices as
   listed), memoised per device and expression; incomplete and invalid pools offer none.
   An ``All`` request takes every matching device of the node (:mod:`.allmode`): an
   incomplete or invalid pool on the node is an error; a device whose capacity cannot serve
   the request's capacity requests is left out; zero devices = does not fit; a claim that
   would get more than 32 devices is an error, unless another ``firstAvailable``
   alternative needs fewer (then this combination does not fit).
3. One slot per device: claims in order → requests in order → devices. A slot takes the next
   matching device that is not in use (adminAccess may take in-use devices, not one already
   picked for the same claim) and not picked by this allocation, and that satisfies the
   claim's constraints (:mod:`.constraints`: ``matchAttribute``, same value as the devices
   before it; ``distinctAttribute``, a value none of them has); the search descends, and on
   failure undoes the pick and tries the next device. Devices that use features kdra does
   not implement yet are never candidates; an ``All`` request that would need one fails.
   An ``All`` device the claim's constraints reject is an error.

Differences from a literal transcription, none changing the outcome (results, "does not
fit", or the error upstream reports first):
- slots of one request take devices in increasing walk order (any solution reordered within a
  request is still a solution, so the lexicographically first one is increasing);
- a request stops early when its remaining candidates are fewer than its remaining slots, or
  when a matchAttribute value is already fixed and fewer free, unpicked candidates carry it
  than the request still needs — only when none of the request's candidates could raise an
  error (upstream would walk on and fail the same way, just slower: without this an
  unsatisfiable constraint over 128 devices takes ~10^5 steps);
- an early stop for ``All`` (the ``errStop`` of upstream's 1.31 allocator): when a device an
  ``All`` request (without adminAccess) needs is held outside this allocation or carries a
  taint the request does not tolerate, the node does not fit and nothing is searched — only
  when no slot of the search could raise an error (no candidate whose selector fails, no
  ``All`` request under a constraint): no choice of the other slots can free that device, so
  the backtracking upstream does can only fail, after trying every combination of the slots
  before it (16 single-device claims ahead of such a request took 1.1 M steps). Where a slot
  could raise, the walk runs as upstream's does, bounded by the caller's budget. A device
  taken by *this* allocation's earlier picks is backtracked over, as upstream does.

Errors met during the walk (a selector failing at run time, an ``All`` device a constraint
rejects) are raised only when the walk reaches them, as upstream's lazy evaluation would; an
invalid pool on the node is the error when no combination fits
(:class:`~.choices.ChoiceSearch`).

The walk keeps its own stack (a position per slot) instead of recursing, so it can stop after
a number of steps and resume later (:meth:`NodeSearch.advance`): the binder steps a long search
in slices between other pods and gives up at its budget. Resuming sees the snapshot as it is
then (devices taken meanwhile count as taken from then on); a caller that resumes after the
snapshot changed re-checks the result (the binder does, before it assumes a placement).

Invariants:
- Every device tried is one step (:attr:`NodeSearch.steps`, ``stats.search_steps``); a walk
  pauses only between slots, so a slice overruns its steps by at most one slot's scan.
- Backtracking undoes a pick exactly (the picks, the devices held, the constraints' states).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field

from kdra.dra.allocator.allmode import all_devices, fewest_devices
from kdra.dra.allocator.busy import InUse, busy_view, shares_of
from kdra.dra.allocator.constraints import (
    ConstraintState,
    all_unconstrained,
    constrain,
    release,
)
from kdra.dra.allocator.fragmentation import order_candidates
from kdra.dra.allocator.ledger import Ledger, SharedUse
from kdra.dra.allocator.pools import (
    AttributeValue,
    DeviceEntry,
    DeviceId,
    MatchItem,
    NodePools,
)
from kdra.dra.allocator.prepared import (
    PreparedClaim,
    PreparedRequest,
    selector_failed,
    too_many_devices,
)
from kdra.dra.allocator.results import Pick
from kdra.dra.allocator.stats import Stats
from kdra.dra.models import MAX_DEVICES_PER_CLAIM

__all__ = ["InUse", "NodeSearch", "busy_view", "shares_of"]

# --------------------------------------------------------------------------- the search


@dataclass(slots=True)
class _Slot:
    claim: int
    request: PreparedRequest
    items: tuple[MatchItem, ...]
    """ExactCount: the request's matching devices. All: the one device this slot takes."""
    constraints: tuple[ConstraintState, ...]
    """The claim's constraints that apply to this request."""
    remaining: int
    """Slots of this request from this one on (this one included)."""
    continues: bool
    """The next slot belongs to the same request."""
    prunable: bool
    """No candidate can raise (no failed selector, no invalid pool among ``items``)."""
    fixed: bool
    """An ``All`` slot: exactly ``items[0]``, no alternatives."""
    supply: tuple[_Supply | None, ...] | None = None
    """Per applying constraint, where devices for its value can come from (prunable,
    non-admin ExactCount slots only; None for a distinctAttribute constraint)."""
    raises: bool = False
    """Reaching the slot may raise an error: a candidate's selector failed at run time, or
    (``All``) the claim's constraints may reject its device."""
    frame: _Frame = field(init=False)
    """What the walk reads at every visit, in one tuple."""

    def __post_init__(self) -> None:
        # A prunable slot stops where too few candidates remain for its request's slots.
        end = len(self.items)
        if self.prunable and not self.fixed:
            end = min(end, end - self.remaining + 1)
        self.frame = (self.items, end, self.claim, self.request, self.request.admin_access,
                      self.fixed, bool(self.constraints))


_Frame = tuple[tuple[MatchItem, ...], int, int, PreparedRequest, bool, bool, bool]
"""items, where the scan ends, claim index, request, adminAccess, fixed (All), constrained."""


@dataclass(frozen=True, slots=True)
class _Supply:
    own: dict[AttributeValue, list[int]]
    """This request: attribute value → positions of free candidates."""
    later: tuple[tuple[tuple[MatchItem, ...], dict[AttributeValue, list[int]], int], ...]
    """Later requests of the claim under the same constraint: (items, index, count)."""


@dataclass(slots=True)
class _RequestPlan:
    request: PreparedRequest
    items: tuple[MatchItem, ...]
    applies: tuple[int, ...]
    """Indexes of the claim's constraints that cover this request."""
    prunable: bool
    eligible: bool
    """ExactCount, not adminAccess, prunable: its candidates can bound a constraint."""
    values: dict[int, dict[AttributeValue, list[int]]]
    """Per constraint index: value → positions of free candidates (filled lazily)."""


_NO_LIMIT = 1 << 62


class NodeSearch:
    """One search on one node: ``run()`` returns the picks per claim, or None; or step it
    with :meth:`advance` and read :attr:`result` once it is :attr:`finished`.

    Raises Unallocatable for bad input met on the way.
    """

    def __init__(
        self,
        claims: Sequence[PreparedClaim],
        pools: NodePools,
        busy: Container[DeviceId],
        stats: Stats,
        shares: Mapping[DeviceId, SharedUse] | None = None,
        *,
        scoring: bool = True,
        known: Mapping[tuple[str, ...], tuple[MatchItem, ...]] | None = None,
    ) -> None:
        self.claims = claims
        self.known = known
        """Matching-device lists already built on ``pools`` (by request key), used instead
        of the pools' cache, which other pods' work may have emptied meanwhile (a counted
        placement keeps the list it was counted from: its search evaluates no selector)."""
        self.pools = pools
        self.busy = busy
        self.stats = stats
        self.shares = shares if shares is not None else shares_of(busy)
        self.scoring = scoring
        """Order partitionable and shared candidates by :mod:`.fragmentation` (False:
        upstream's walk order, first-fit)."""
        self.ledger: Ledger | None = None
        """Counters and shares (:mod:`.ledger`), when the node has devices that need it."""
        self.picked: dict[DeviceId, list[int]] = {}
        self.picks: list[list[Pick]] = [[] for _ in claims]
        self.refused: frozenset[DeviceId] = frozenset()
        """Devices ``All`` requests need but may not take (an untolerated taint)."""
        self.slots: list[_Slot] = []
        self.steps = 0
        """Devices tried so far (also added to ``stats.search_steps``)."""
        self.finished = False
        self.result: list[list[Pick]] | None = None
        """Once finished: the picks per claim, or None (does not fit)."""
        self._started = False
        self._planned = False
        self._blocked = False
        self._level = 0
        self._back = False
        self._positions: list[int] = []
        self._starts: list[int] = []

    def run(self) -> list[list[Pick]] | None:
        """Search to the end."""
        self.advance(None)
        return self.result

    def advance(self, steps: int | None) -> bool:
        """Search on for about ``steps`` more devices tried (None: no limit); True once
        finished. A pause happens between slots, so a call may overrun ``steps`` by the
        devices one slot scans. Before the walk, planning evaluates selectors and may raise
        :class:`~.pacing.Paused` (an open meter's allowance ran out); call again to go on."""
        if self.finished:
            return True
        if not self._planned:
            if not self._started:  # counted once, also when planning pauses (.pacing)
                self.stats.searches += 1
                self._started = True
            self._plan()
            self._planned = True
            self._positions = [0] * len(self.slots)
            self._starts = [0] * (len(self.slots) + 1)
        found = False if self._blocked else self._walk(steps)
        if found is None:
            return False
        self.finished = True
        self.result = self.picks if found else None
        return True

    def _plan(self) -> None:
        """Lay out the slots (validating All requests, counting devices per claim). Starts
        from scratch each time: a plan that a selector evaluation paused (:mod:`.pacing`)
        runs again, from the devices' memos."""
        self.slots = []
        self.refused = frozenset()
        self.ledger = None
        if self.pools.special or any(r.capacity for c in self.claims for r in c.requests):
            self.ledger = Ledger(self.pools, self.busy, self.shares)
        blocked = oversize = False
        for index, claim in enumerate(self.claims):
            states = [ConstraintState(c) for c in claim.constraints]
            total = claim.exact_devices
            plans: list[_RequestPlan] = []
            for request in claim.requests:
                items = self.known.get(request.key) if self.known else None
                if items is None:
                    items = self.pools.matching(request.selectors, request.key, self.stats,
                                                request.tolerations)
                if request.all_devices:
                    items, refused, stuck = all_devices(items, request, self.pools, self.busy,
                                                        self.shares, self.stats)
                    self.refused |= refused
                    total += len(items)
                    blocked = blocked or stuck
                applies = tuple(
                    k for k, c in enumerate(claim.constraints) if c.applies(request)
                )
                if self.ledger is not None and self.scoring and not request.all_devices:
                    items = order_candidates(items, self.ledger, request.capacity)
                prunable = request.all_devices or all(
                    item.failure is None and not item.entry.shared  # shared: may repeat
                    for item in items
                )
                eligible = prunable and not request.all_devices and not request.admin_access
                plans.append(_RequestPlan(request, items, applies, prunable, eligible, {}))
            if total > MAX_DEVICES_PER_CLAIM:
                least = fewest_devices(claim, self.pools, self.busy, self.shares, self.stats)
                if least > MAX_DEVICES_PER_CLAIM:
                    raise too_many_devices(claim.claim, least)
                oversize = True  # other alternatives need fewer: this combination does not fit
            for position, plan in enumerate(plans):
                self._lay_out(index, plan, plans[position + 1:], states)
        # Stopping early hides nothing only where no slot could raise an error (see the
        # module doc); otherwise the walk runs and meets what upstream would.
        self._blocked = oversize or (blocked and not any(slot.raises for slot in self.slots))

    def _lay_out(
        self,
        claim: int,
        plan: _RequestPlan,
        later: list[_RequestPlan],
        states: list[ConstraintState],
    ) -> None:
        request, items = plan.request, plan.items
        applying = tuple(states[k] for k in plan.applies)
        if request.all_devices:
            if not items:  # fails when reached: All needs at least one device
                self.slots.append(_Slot(claim, request, (), applying, 0, False, True, True))
            for position, item in enumerate(items):
                self.slots.append(
                    _Slot(claim, request, (item,), applying, len(items) - position,
                          position + 1 < len(items), True, True, raises=bool(applying))
                )
            return
        supply = None
        if plan.eligible and any(not states[k].distinct for k in plan.applies):
            supplies: list[_Supply | None] = []
            for k in plan.applies:
                if states[k].distinct:
                    supplies.append(None)  # bounds only matchAttribute values
                    continue
                sharing = [other for other in later if k in other.applies]
                if not all(other.eligible for other in sharing):
                    sharing = []  # bound by this request alone (weaker, still sound)
                attribute = states[k].attribute
                supplies.append(_Supply(
                    self._values(plan, k, attribute),
                    tuple((o.items, self._values(o, k, attribute), o.request.count)
                          for o in sharing),
                ))
            supply = tuple(supplies)
        # Only a candidate whose selector failed can raise; a prunable request has none.
        raises = not plan.prunable and any(item.failure is not None for item in items)
        for k in range(request.count):
            self.slots.append(
                _Slot(claim, request, items, applying, request.count - k,
                      k + 1 < request.count, plan.prunable, False, supply, raises)
            )

    def _values(
        self, plan: _RequestPlan, constraint: int, attribute: str
    ) -> dict[AttributeValue, list[int]]:
        """Attribute value → positions of the request's free candidates with that value."""
        index = plan.values.get(constraint)
        if index is None:
            index = {}
            for position, item in enumerate(plan.items):
                value = item.entry.attribute(attribute)
                if value is not None and item.entry.id not in self.busy:
                    index.setdefault(value, []).append(position)
            plan.values[constraint] = index
        return index

    def _hopeless(self, slot: _Slot, start: int) -> bool:
        """A matchAttribute value is fixed, and fewer free, unpicked devices carry it than the
        requests it covers still need: this request's candidates from ``start`` on plus later
        requests' candidates (all distinct devices). Only for prunable slots, so skipping the
        rest of the walk hides no error."""
        assert slot.supply is not None
        items = slot.items
        picked = self.picked
        for state, supply in zip(slot.constraints, slot.supply, strict=True):
            if supply is None or not state.count or state.value is None:
                continue
            value = state.value
            need = slot.remaining + sum(count for _, _, count in supply.later)
            found: set[DeviceId] = set()
            positions = supply.own.get(value, ())
            for position in positions[bisect_left(positions, start):]:
                device = items[position].entry.id
                if device not in picked:
                    found.add(device)
            for later_items, index, _ in supply.later:
                if len(found) >= need:
                    break
                for position in index.get(value, ()):
                    device = later_items[position].entry.id
                    if device not in picked:
                        found.add(device)
            if len(found) < need:
                return True
        return False

    def _walk(self, limit: int | None) -> bool | None:
        """Depth-first over the slots from where the last call stopped: True (every slot
        filled), False (no solution), None (paused after ``limit`` steps)."""
        slots = self.slots
        count = len(slots)
        positions = self._positions
        starts = self._starts
        picked = self.picked
        picks = self.picks
        busy = self.busy
        ledger = self.ledger
        unpick = self._unpick
        level = self._level
        back = self._back
        stop = _NO_LIMIT if limit is None else limit
        steps = 0
        try:
            while True:
                if level == count:
                    return True
                if steps >= stop:
                    self._level, self._back = level, back
                    return None
                slot = slots[level]
                items, end, claim, request, admin, fixed, constrained = slot.frame
                if back:  # the deeper slots failed: undo this slot's pick, try its next
                    unpick(slot, items[positions[level]].entry)
                    if fixed:
                        level -= 1
                        if level < 0:
                            return False
                        continue
                    start = positions[level] + 1
                elif fixed:  # an All slot: its one device, or the slots before must change
                    taken = True  # also when the request has no device (1.33+: no fit)
                    if items:
                        entry = items[0].entry
                        device = entry.id
                        holders = picked.get(device)
                        taken = bool((holders and claim in holders) if admin else (
                            (holders and not entry.shared) or device in busy)
                            ) or device in self.refused
                    if taken:
                        level -= 1
                        back = True
                        if level < 0:
                            return False
                        continue
                    steps += 1
                    consumed = None
                    if ledger is not None and (entry.special or request.capacity) and not admin:
                        consumed = ledger.admit(entry, request.capacity)
                        if consumed is None:  # counters or capacity: the slots before must change
                            level -= 1
                            back = True
                            if level < 0:
                                return False
                            continue
                    if constrained and not constrain(slot.constraints, entry):
                        raise all_unconstrained(request, slot.constraints, entry)
                    picked.setdefault(device, []).append(claim)
                    picks[claim].append(Pick(request, entry, consumed))
                    positions[level] = 0
                    level += 1
                    starts[level] = 0
                    continue
                else:
                    start = starts[level]
                    if slot.supply is not None and self._hopeless(slot, start):
                        level -= 1
                        back = True
                        if level < 0:
                            return False
                        continue
                chosen = None
                consumed = None
                for index in range(start, end):
                    entry, _, failure = items[index]
                    device = entry.id
                    holders = picked.get(device)
                    if admin:
                        if holders and claim in holders:
                            continue
                    elif (holders and not entry.shared) or device in busy:
                        continue
                    if failure is not None:
                        raise selector_failed(entry, failure, request)
                    steps += 1
                    if ledger is not None and (entry.special or request.capacity) and not admin:
                        consumed = ledger.admit(entry, request.capacity)
                        if consumed is None:
                            continue  # counters or capacity do not allow it
                    if constrained and not constrain(slot.constraints, entry):
                        if consumed is not None:
                            assert ledger is not None
                            ledger.release(entry, consumed)
                            consumed = None
                        continue
                    chosen = index
                    break
                if chosen is None:
                    level -= 1
                    back = True
                    if level < 0:
                        return False
                    continue
                picked.setdefault(device, []).append(claim)
                picks[claim].append(Pick(request, entry, consumed))
                positions[level] = chosen
                level += 1
                # a shared device may serve the request's next slot too
                starts[level] = (chosen + (not entry.shared)) if slot.continues else 0
                back = False
        finally:
            self.steps += steps
            self.stats.search_steps += steps

    def _unpick(self, slot: _Slot, entry: DeviceEntry) -> None:
        release(slot.constraints, entry)
        picked = self.picked
        holders = picked[entry.id]
        holders.pop()
        if not holders:
            del picked[entry.id]
        pick = self.picks[slot.claim].pop()
        if pick.consumed is not None:
            assert self.ledger is not None
            self.ledger.release(entry, pick.consumed)
