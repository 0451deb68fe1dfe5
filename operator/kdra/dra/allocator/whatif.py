"""What if devices were freed: the nearest node where a pod that fits nowhere would fit.

``kubectl kdra why POD`` tells a user not only why their pod waits but what would change
that: "gpu-node-1 would fit if 1 device were freed (gpu-node-1/gpu-3, held by claim
default/train-1-gpu-x7k2p)". :func:`nearest_fits` answers it with the allocator's own search,
on the same snapshot the explanation came from.

Per node, in the order given:

1. The search runs as if no device were in use. No solution → the node can never take the
   pod (too few matching devices, a constraint no set satisfies): not a candidate.
2. A lower bound: each request needs ``count`` (or, for ``All``, every matching) devices, of
   which some are free; the first busy matching devices in walk order make up the shortfall.
   If the search succeeds with those freed, that set is the answer — it is minimal, as no
   request can do with fewer.
3. Otherwise (requests compete for the same devices, or a constraint needs particular
   ones) the busy devices of the step-1 solution are the answer: freeing them certainly
   makes it fit, though fewer might do.

Invariants:
- Pure; every answer is verified by a search (steps 2 and 3 both name a set with which the
  search succeeds), never estimated.
- A pod with ``firstAvailable`` requests fits now as the binder would find it
  (:class:`~.choices.ChoiceSearch`); steps 1-3 run per combination of alternatives (at most
  256 considered, as the binder's), and the node's answer is the smallest; it is minimal
  only when every combination's answer is.
- Bounded: at most three searches per node (and combination of alternatives), the caller
  chooses the nodes, and ``steps`` caps the search steps (devices tried, and the selectors'
  run-time cost as steps: :mod:`.pacing`) of all searches together, as the binder's budget
  caps its own: a node
  whose search the budget cuts short is left out and the answer says it is incomplete
  (:attr:`WhatIf.complete`).
- Admin-access requests take devices in use anyway: they never need anything freed.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Iterable, Sequence
from dataclasses import dataclass

from kdra.dra.allocator.choices import MAX_COMBINATIONS, ChoiceSearch, combinations
from kdra.dra.allocator.nodeselector import NodeInfo
from kdra.dra.allocator.pacing import StepBudget
from kdra.dra.allocator.pools import DeviceId, NodePools
from kdra.dra.allocator.prepared import PreparedClaim, prepare
from kdra.dra.allocator.reasons import Unallocatable
from kdra.dra.allocator.results import Pick
from kdra.dra.allocator.search import NodeSearch
from kdra.dra.allocator.snapshot import Snapshot
from kdra.dra.allocator.stats import Stats
from kdra.dra.models import ResourceClaim

__all__ = ["Freeing", "WhatIf", "nearest_fits"]


@dataclass(frozen=True, slots=True)
class Freeing:
    """The pod would fit ``node`` once ``devices`` (now in use) were free."""

    node: str
    devices: tuple[DeviceId, ...]
    minimal: bool
    """Whether no smaller set would do (step 2 of the module doc)."""


class _Without:
    """``busy`` minus ``freed``, as a container for the search."""

    __slots__ = ("busy", "freed")

    def __init__(self, busy: Container[DeviceId], freed: Collection[DeviceId]) -> None:
        self.busy = busy
        self.freed = freed

    def __contains__(self, device: object) -> bool:
        return device in self.busy and device not in self.freed


@dataclass(frozen=True, slots=True)
class WhatIf:
    """:func:`nearest_fits`' answer."""

    fits: list[Freeing]
    complete: bool
    """False when the step budget ran out: nodes not (fully) searched may need fewer."""
    steps: int
    """Search steps spent."""


class _OutOfSteps(Exception):
    """Internal: the budget ran out in the middle of a node's searches."""


class _Budget(StepBudget):
    __slots__ = ()

    def run(self, search: ChoiceSearch | NodeSearch) -> list[list[Pick]] | None:
        """Run ``search`` within what is left (its selectors' run-time cost counted as steps,
        :mod:`.pacing`); raises _OutOfSteps when it is not enough."""
        if self.out or not self.advance(search):
            raise _OutOfSteps
        return search.result


def nearest_fits(snapshot: Snapshot, claims: Sequence[ResourceClaim],
                 nodes: Sequence[NodeInfo], *, limit: int = 3,
                 steps: int | None = None) -> WhatIf:
    """The ``limit`` nodes of ``nodes`` needing the fewest devices freed for ``claims`` (the
    pod's unallocated claims) to fit, fewest first (ties by node name). Nodes where the claims
    fit now, or never could, are left out; bad input (a missing class...) gives no answer.
    ``steps``: the search steps all searches together may spend (None: no limit)."""
    stats = Stats()
    try:
        prepared = prepare(claims, snapshot)
    except Unallocatable:
        return WhatIf([], True, 0)
    busy = snapshot.devices_in_use
    budget = _Budget(steps)
    found = []
    complete = True
    for node in nodes:
        try:
            freeing = _freeing(prepared, snapshot.node_pools(node), busy, stats, budget)
        except _OutOfSteps:
            complete = False
            break
        if freeing is not None:
            found.append(Freeing(node.name, *freeing))
    found.sort(key=lambda f: (len(f.devices), f.node))
    return WhatIf(found[:limit], complete, budget.spent)


def _freeing(prepared: Sequence[PreparedClaim], pools: NodePools, busy: Container[DeviceId],
             stats: Stats, budget: _Budget) -> tuple[tuple[DeviceId, ...], bool] | None:
    """The devices to free on the node, and whether no smaller set would do; None when the
    claims fit now or never could. For ``firstAvailable`` requests, the smallest answer over
    the combinations of alternatives (minimal only when every combination's answer is)."""
    try:
        if budget.run(ChoiceSearch(prepared, pools, busy, stats)) is not None:
            return None  # fits now
        seen = _Considered()
        options: Iterable[tuple[PreparedClaim, ...]] = (
            combinations(prepared, pools, frozenset(), stats, seen.skip)
            if any(claim.prioritized for claim in prepared) else (tuple(prepared),))
        best: tuple[tuple[DeviceId, ...], bool] | None = None
        proven = True
        try:
            for resolved in options:
                seen.count()
                answer = _freeing_one(resolved, pools, busy, stats, budget)
                if answer is None:
                    continue
                proven = proven and answer[1]
                if best is None or len(answer[0]) < len(best[0]):
                    best = answer
        except _TooManyChoices:
            proven = False  # combinations left unconsidered might need fewer
    except Unallocatable:
        return None
    return None if best is None else (best[0], best[1] and proven)


def _freeing_one(claims: Sequence[PreparedClaim], pools: NodePools, busy: Container[DeviceId],
                 stats: Stats, budget: _Budget) -> tuple[tuple[DeviceId, ...], bool] | None:
    """Steps 1-3 of the module doc for claims with one alternative per request."""
    ideal = budget.run(NodeSearch(claims, pools, frozenset(), stats))
    if ideal is None:
        return None  # never
    shortfall: dict[DeviceId, None] = {}
    for claim in claims:
        for request in claim.requests:
            if request.admin_access:
                continue
            items = [item for item in pools.matching(request.selectors, request.key, stats,
                                                     request.tolerations)
                     if item.failure is None]
            need = len(items) if request.all_devices else request.count
            missing = need - sum(1 for item in items if item.entry.id not in busy)
            for item in items:
                if missing <= 0:
                    break
                if item.entry.id in busy and item.entry.id not in shortfall:
                    shortfall[item.entry.id] = None
                    missing -= 1
    if budget.run(NodeSearch(claims, pools, _Without(busy, shortfall), stats)) is not None:
        return tuple(shortfall), True
    picked = tuple(dict.fromkeys(
        pick.entry.id for chosen in ideal for pick in chosen
        if not pick.request.admin_access and pick.entry.id in busy))
    return picked, False


class _TooManyChoices(Exception):
    """Internal: more combinations of alternatives than a node's search may consider."""


class _Considered:
    """Combinations of alternatives considered on one node, searched or skipped; at most
    MAX_COMBINATIONS, as the binder's search."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = 0

    def count(self) -> None:
        if self.seen >= MAX_COMBINATIONS:
            raise _TooManyChoices
        self.seen += 1

    def skip(self) -> None:
        self.count()
