"""Structured allocation on one node: a depth-first search with backtracking.

:class:`NodeSearch` is the pure core of upstream's ``Allocate(node)`` for a pod's
*unallocated* claims, each request already resolved to one alternative (``firstAvailable``
choices are :mod:`kdra.domain.allocator.choices`' job, which also has :func:`allocate`). It
returns the devices picked per claim or ``None`` when they do not fit the node, and raises
:class:`~.reasons.Unallocatable` for bad input. It is all-or-nothing across the claims.
Devices of allocated claims in the snapshot, of assumed allocations, and ``in_flight``
devices are in use (admin-access results are not).

The search, in upstream's order (first complete solution wins; scoring is the binder's job):

1. :func:`prepare` (node-independent): every request (every ``firstAvailable`` alternative)
   needs its DeviceClass; selectors are compiled (class selectors first, then the
   request's); ExactCount needs ``count`` devices (default 1); more than 32 devices for one
   claim is an error; a claim using fields kdra does not act on yet (capacity requests) is
   refused with that reason instead of being allocated as if they were absent. A device
   with a taint the request does not tolerate is not among its matching devices.
2. Per node, each request gets its list of matching devices in walk order (pools by driver
   and name, slices by name, devices as listed), memoised per device and expression. An
   ``All`` request takes every matching device of the gathered pools; it is an error if one
   of them lies in an incomplete or invalid pool; zero matching devices = does not fit.
3. One slot per device: claims in order → requests in order → devices. A slot takes the next
   matching device that is not in use (adminAccess may take in-use devices, not one already
   picked for the same claim) and not picked by this allocation, and that satisfies the
   claim's constraints (``matchAttribute``: same value as the devices before it;
   ``distinctAttribute``: a value none of them has); the search recurses, and on failure
   undoes the pick and tries the next device. Devices that use features kdra does not
   implement yet are never candidates; an ``All`` request that would need one fails.

Differences from a literal transcription, none changing the first solution found:
- slots of one request take devices in increasing walk order (any solution reordered within a
  request is still a solution, so the lexicographically first one is increasing);
- a request stops early when its remaining candidates are fewer than its remaining slots, or
  when a matchAttribute value is already fixed and fewer free, unpicked candidates carry it
  than the request still needs — only when none of the request's candidates could raise an
  error (upstream would walk on and fail the same way, just slower: without this an
  unsatisfiable constraint over 128 devices takes ~10^5 steps).

Errors met during the walk (a selector failing at run time, an invalid pool holding a matching
device) are raised only when the walk reaches them, as upstream's lazy evaluation would.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Container, Sequence
from dataclasses import dataclass

from kdra.domain.allocator.pools import (
    AttributeValue,
    DeviceEntry,
    DeviceId,
    MatchItem,
    NodePools,
    Selector,
    SelectorFailure,
)
from kdra.domain.allocator.prepared import (
    PreparedClaim,
    PreparedConstraint,
    PreparedRequest,
    too_many_devices,
)
from kdra.domain.allocator.reasons import ReasonCode, Unallocatable
from kdra.domain.allocator.results import Pick
from kdra.domain.allocator.snapshot import Snapshot
from kdra.domain.allocator.stats import Stats
from kdra.domain.errors import CelRuntimeError, InvalidObject
from kdra.domain.models import (
    MAX_DEVICES_PER_CLAIM,
)

# --------------------------------------------------------------------------- errors in the walk


def pool_invalid(item: MatchItem, request: PreparedRequest) -> Unallocatable:
    return Unallocatable(
        ReasonCode.POOL_INVALID,
        f'a resource pool with devices for request "{request.name}" of claim '
        f'"{request.claim_name}" is invalid (duplicate device names)',
        f"resource pool {item.pool.id} is invalid: device name {item.pool.duplicate} appears "
        f"more than once ({request.describe()})",
    )


def selector_failed(
    entry: DeviceEntry, failure: tuple[Selector, SelectorFailure], request: PreparedRequest
) -> Unallocatable:
    selector, exc = failure
    if isinstance(exc, CelRuntimeError):
        what = "CEL runtime error: " + exc.message.removesuffix(f" on device {exc.device}")
    else:
        what = f"cannot be evaluated: {exc}"
    problem = Unallocatable(
        ReasonCode.CEL_ERROR,
        f"selector {_short(selector.expression)} fails at run time "
        f'(request "{request.name}" of claim "{request.claim_name}")',
        f"claim {request.claim_key}, request {request.name}: {selector.origin} on device "
        f"{entry.id}: {what} (expression: {_short(selector.expression)})",
    )
    problem.__cause__ = exc
    return problem


def _short(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- the search


class _ConstraintState:
    """A constraint while searching. ``matchAttribute``: the first device fixes the value,
    ``count`` devices hold it. ``distinctAttribute``: ``taken`` holds the values of the
    devices picked so far (each once)."""

    __slots__ = ("attribute", "count", "distinct", "taken", "value")

    def __init__(self, constraint: PreparedConstraint) -> None:
        self.attribute = constraint.attribute
        self.distinct = constraint.distinct
        self.value: AttributeValue | None = None
        self.count = 0
        self.taken: set[AttributeValue] = set()

    def add(self, value: AttributeValue | None) -> bool:
        """Take a device with ``value`` (None: it lacks the attribute); False if the
        constraint forbids it (then nothing changed)."""
        if value is None:
            return False
        if self.distinct:
            if value in self.taken:
                return False
            self.taken.add(value)
        elif self.count and value != self.value:
            return False
        elif not self.count:
            self.value = value
        self.count += 1
        return True

    def remove(self, value: AttributeValue | None) -> None:
        """Undo an :meth:`add` of a device with ``value``."""
        self.count -= 1
        if self.distinct:
            self.taken.discard(value)  # type: ignore[arg-type]


@dataclass(slots=True)
class _Slot:
    claim: int
    request: PreparedRequest
    items: tuple[MatchItem, ...]
    """ExactCount: the request's matching devices. All: the one device this slot takes."""
    constraints: tuple[_ConstraintState, ...]
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


class NodeSearch:
    """One search on one node. ``run()`` returns the picks per claim, or None.

    Raises Unallocatable for bad input met on the way.
    """

    def __init__(
        self,
        claims: Sequence[PreparedClaim],
        pools: NodePools,
        busy: Container[DeviceId],
        stats: Stats,
    ) -> None:
        self.claims = claims
        self.pools = pools
        self.busy = busy
        self.stats = stats
        self.picked: dict[DeviceId, list[int]] = {}
        self.picks: list[list[Pick]] = [[] for _ in claims]
        self.slots: list[_Slot] = []

    def run(self) -> list[list[Pick]] | None:
        self.stats.searches += 1
        self._plan()
        return self.picks if self._fill(0, 0) else None

    def _plan(self) -> None:
        """Lay out the slots (validating All requests, counting devices per claim)."""
        for index, claim in enumerate(self.claims):
            states = [_ConstraintState(c) for c in claim.constraints]
            total = claim.exact_devices
            plans: list[_RequestPlan] = []
            for request in claim.requests:
                items = self.pools.matching(request.selectors, request.key, self.stats,
                                            request.tolerations)
                if request.all_devices:
                    self._check_all(items, request)
                    total += len(items)
                applies = tuple(
                    k for k, c in enumerate(claim.constraints) if c.applies(request)
                )
                prunable = request.all_devices or all(
                    item.failure is None and item.pool.duplicate is None for item in items
                )
                eligible = prunable and not request.all_devices and not request.admin_access
                plans.append(_RequestPlan(request, items, applies, prunable, eligible, {}))
            if total > MAX_DEVICES_PER_CLAIM:
                raise too_many_devices(claim.claim, total)
            for position, plan in enumerate(plans):
                self._lay_out(index, plan, plans[position + 1:], states)

    def _lay_out(
        self,
        claim: int,
        plan: _RequestPlan,
        later: list[_RequestPlan],
        states: list[_ConstraintState],
    ) -> None:
        request, items = plan.request, plan.items
        applying = tuple(states[k] for k in plan.applies)
        if request.all_devices:
            if not items:  # fails when reached: All needs at least one device
                self.slots.append(_Slot(claim, request, (), applying, 0, False, True, True))
            for position, item in enumerate(items):
                self.slots.append(
                    _Slot(claim, request, (item,), applying, len(items) - position,
                          position + 1 < len(items), True, True)
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
        for k in range(request.count):
            self.slots.append(
                _Slot(claim, request, items, applying, request.count - k,
                      k + 1 < request.count, plan.prunable, False, supply)
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

    def _check_all(self, items: tuple[MatchItem, ...], request: PreparedRequest) -> None:
        for item in items:
            pool = item.pool
            if pool.incomplete:
                raise Unallocatable(
                    ReasonCode.POOL_INCOMPLETE,
                    f'request "{request.name}" of claim "{request.claim_name}" asks for all '
                    "devices, but a resource pool is being updated",
                    f"claim {request.claim_key}, request {request.name} asks for all devices, "
                    f"but resource pool {pool.id} is incomplete (generation {pool.generation}: "
                    f"{len(pool.slices)} of "
                    f"{pool.slices[0].slice.spec.pool.resource_slice_count} slices)",
                )
            if pool.duplicate is not None:
                raise pool_invalid(item, request)
            if item.failure is not None:
                raise selector_failed(item.entry, item.failure, request)
        for entry in self.pools.unsupported():
            if _matches_quietly(entry, request, self.stats):
                raise Unallocatable(
                    ReasonCode.UNSUPPORTED,
                    f'request "{request.name}" of claim "{request.claim_name}" asks for all '
                    "devices, but a matching device uses a feature kdra does not support yet",
                    f"claim {request.claim_key}, request {request.name} asks for all devices, "
                    f"but matching device {entry.id} uses {', '.join(entry.unsupported)}, "
                    "which kdra does not support yet",
                )

    def _fill(self, index: int, start: int) -> bool:
        if index == len(self.slots):
            return True
        slot = self.slots[index]
        claim = slot.claim
        request = slot.request
        admin = request.admin_access
        busy = self.busy
        picked = self.picked
        items = slot.items
        stats = self.stats
        if slot.fixed:
            if not items:
                return False  # an All request without any device (1.33+: does not fit)
            entry = items[0].entry
            holders = picked.get(entry.id)
            if admin:
                if holders and claim in holders:
                    return False
            elif holders or entry.id in busy:
                return False  # All needs every matching device, and this one is taken
            stats.search_steps += 1
            if not self._constrain(slot, entry):
                raise Unallocatable(
                    ReasonCode.CONSTRAINT_UNSATISFIABLE,
                    f'request "{request.name}" of claim "{request.claim_name}" asks for all '
                    "devices, but they do not satisfy the claim's constraints",
                    f"claim {request.claim_key}, request {request.name} asks for all devices, "
                    f"but device {entry.id} does not satisfy "
                    + ", ".join(("distinctAttribute " if state.distinct else "matchAttribute ")
                                + state.attribute for state in slot.constraints),
                )
            self._pick(slot, entry)
            if self._fill(index + 1, 0):
                return True
            self._unpick(slot, entry)
            return False

        if slot.supply is not None and self._hopeless(slot, start):
            return False
        last = len(items) - slot.remaining  # past it, too few candidates remain
        for position in range(start, len(items)):
            if slot.prunable and position > last:
                break
            entry, pool, failure = items[position]
            if pool.duplicate is not None:
                raise pool_invalid(items[position], request)
            device = entry.id
            holders = picked.get(device)
            if admin:
                if holders and claim in holders:
                    continue
            elif holders or device in busy:
                continue
            if failure is not None:
                raise selector_failed(entry, failure, request)
            stats.search_steps += 1
            if slot.constraints and not self._constrain(slot, entry):
                continue
            self._pick(slot, entry)
            if self._fill(index + 1, position + 1 if slot.continues else 0):
                return True
            self._unpick(slot, entry)
        return False

    def _constrain(self, slot: _Slot, entry: DeviceEntry) -> bool:
        for done, state in enumerate(slot.constraints):
            if not state.add(entry.attribute(state.attribute)):
                for undo in slot.constraints[:done]:
                    undo.remove(entry.attribute(undo.attribute))
                return False
        return True

    def _pick(self, slot: _Slot, entry: DeviceEntry) -> None:
        self.picked.setdefault(entry.id, []).append(slot.claim)
        self.picks[slot.claim].append(Pick(slot.request, entry))

    def _unpick(self, slot: _Slot, entry: DeviceEntry) -> None:
        for state in slot.constraints:
            state.remove(entry.attribute(state.attribute))
        holders = self.picked[entry.id]
        holders.pop()
        if not holders:
            del self.picked[entry.id]
        self.picks[slot.claim].pop()


def _matches_quietly(entry: DeviceEntry, request: PreparedRequest, stats: Stats) -> bool:
    """Whether every selector of ``request`` accepts ``entry``; a failing one counts as no."""
    try:
        return all(entry.evaluate(selector, stats) for selector in request.selectors)
    except (CelRuntimeError, InvalidObject):
        return False


class InUse:
    """Devices in use: the snapshot's plus ``in_flight`` ones (a cheap union view)."""

    __slots__ = ("extra", "held")

    def __init__(self, held: Container[DeviceId], extra: Collection[DeviceId]) -> None:
        self.held = held
        self.extra = extra

    def __contains__(self, device: object) -> bool:
        return device in self.held or device in self.extra


def busy_view(snapshot: Snapshot, in_flight: Collection[DeviceId]) -> Container[DeviceId]:
    held = snapshot.devices_in_use
    return InUse(held, in_flight) if in_flight else held
