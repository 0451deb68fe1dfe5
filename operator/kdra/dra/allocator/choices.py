"""Prioritized lists (``firstAvailable``) on one node, and the node-level entry point
:func:`allocate`.

A request with ``firstAvailable`` names up to 8 alternatives, best first. On a node, kdra
tries the *combinations* of the pod's alternatives in order — the first request's choice
varies slowest, so ``(first, first)`` comes before ``(first, second)`` before ``(second,
first)`` — and takes the first combination whose search (:class:`~.search.NodeSearch`)
succeeds. Results name the chosen alternative ``<request>/<subrequest>``.

Upstream's allocator interleaves the choice with its depth-first device search (a device
chosen for an earlier request may push a later request onto a worse alternative); taking
whole combinations in order finds, on each node, the best combination that fits, which is
never worse in that order. :func:`preference` scores the choice for the binder as upstream's
scheduler does (each chosen alternative adds ``8 - its position``), so a node where the first
choice fits beats one where only the third does.

:class:`ChoiceSearch` runs those searches one after another in steps, like
:class:`~.search.NodeSearch` (same ``advance`` / ``steps`` / ``finished`` / ``result``), so the
binder's budget covers a prioritized pod as it covers any other.

Invariants:
- A pod without ``firstAvailable`` requests costs exactly one search, as before.
- Every alternative's search counts against the same budget: :attr:`ChoiceSearch.steps` is
  the sum of the steps of every combination searched on the node, and a caller's step limit
  or deadline stops the node's evaluation wherever it is, between combinations or inside one.
- Before any search, alternatives that cannot fit the node on their own (too few free
  matching devices, for an ExactCount request whose candidates cannot raise errors) are
  dropped; if a request has none left, the node does not fit.
- At most :data:`MAX_COMBINATIONS` combinations are considered per node (searched, or skipped
  because a claim would get more than 32 devices); past that the node gets the
  ``too-many-choices`` reason instead of an unbounded enumeration.
- Before any search, every ``All`` request and alternative of the pod is checked on the
  node as upstream checks them before its search (:func:`~.allmode.validate_on_node`): an
  incomplete or invalid pool on the node is an error for them, and so is a claim whose
  smallest alternatives would need more than 32 devices; a combination that would give a
  claim more than 32 devices while a smaller one exists does not fit (upstream moves on to
  the next alternative).
- Errors met by a search (a selector failing at run time, an ``All`` device a constraint
  rejects) end the node's evaluation, as upstream's would. When no combination fits and a
  pool on the node is invalid, that is the node's error (upstream: "invalid resource pools
  were encountered"), not "does not fit".
- :func:`allocate` is bounded by default: its search stops after :data:`DEFAULT_STEPS`
  steps (selector evaluations' run-time cost counted as steps, :mod:`.pacing`) or
  :data:`DEFAULT_TIMEOUT` seconds with :class:`~kdra.dra.errors.SearchExhausted`;
  callers with a budget of their own (the binder) pass it.
- A :class:`~.pacing.Paused` raised by a selector evaluation (planning a combination,
  deciding which alternatives are viable, the ``All`` checks) leaves the search where it
  was: calling :meth:`ChoiceSearch.advance` again goes on from there.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Collection, Container, Iterator, Sequence

from kdra.dra.allocator.allmode import validate_on_node
from kdra.dra.allocator.busy import shares_of
from kdra.dra.allocator.ledger import Ledger
from kdra.dra.allocator.nodeselector import NodeInfo
from kdra.dra.allocator.pacing import Meter, Paused
from kdra.dra.allocator.pools import DeviceId, NodePools
from kdra.dra.allocator.prepared import PreparedClaim, PreparedRequest, pool_unusable, prepare
from kdra.dra.allocator.reasons import ReasonCode, Unallocatable
from kdra.dra.allocator.results import Pick, build_result
from kdra.dra.allocator.search import NodeSearch, busy_view
from kdra.dra.allocator.snapshot import Snapshot
from kdra.dra.allocator.stats import Stats
from kdra.dra.errors import SearchExhausted
from kdra.dra.models import (
    MAX_DEVICES_PER_CLAIM,
    MAX_SUBREQUESTS,
    AllocationResult,
    ResourceClaim,
)

MAX_COMBINATIONS = 256
"""Combinations of ``firstAvailable`` alternatives searched per node, at most."""

DEFAULT_STEPS = 1_000_000
"""Search steps (devices tried) :func:`allocate` spends at most unless told otherwise (the
binder's default budget per pod, which normal pods never come near)."""

DEFAULT_TIMEOUT = 10.0
"""Seconds :func:`allocate` searches at most unless told otherwise (upstream's scheduler
filter timeout, DRASchedulerFilterTimeout)."""


def preference(claims: Sequence[PreparedClaim]) -> int:
    """Upstream's DRA score of a choice: for every ``firstAvailable`` request, ``8 - the
    chosen alternative's position``. Higher is better; 0 without prioritized lists."""
    return sum(MAX_SUBREQUESTS - request.rank
               for claim in claims for request in claim.requests if request.choices > 1)


def _free_matching(pools: NodePools, request: PreparedRequest, busy: Container[DeviceId],
                   stats: Stats) -> tuple[int, int, bool]:
    """(matching, free, whether a candidate could raise an error)."""
    matching = free = 0
    unsure = False
    for item in pools.matching(request.selectors, request.key, stats, request.tolerations):
        if item.failure is not None:
            unsure = True
            continue
        matching += 1
        free += item.entry.id not in busy
    return matching, free, unsure


def viable(request: PreparedRequest, pools: NodePools, busy: Container[DeviceId],
           stats: Stats) -> bool:
    """Whether ``request`` could fit the node on its own (True when unsure)."""
    matching, free, unsure = _free_matching(pools, request, busy, stats)
    if unsure:
        return True
    if request.all_devices:
        return matching > 0 and (request.admin_access or free == matching)
    return (matching if request.admin_access else free) >= request.count


def combinations(claims: Sequence[PreparedClaim], pools: NodePools,
                 busy: Container[DeviceId], stats: Stats,
                 skipped: Callable[[], None] = lambda: None,
                 ) -> Iterator[tuple[PreparedClaim, ...]]:
    """The claims with each combination of viable alternatives, best first (see the module
    doc). Claims without prioritized lists are passed through. ``skipped`` is called for each
    combination left out because a claim would get more than 32 devices.

    Which alternatives are viable is decided now, before the first combination is asked for
    (it evaluates selectors: :class:`~.pacing.Paused` is raised from this call, never from
    the iterator, so a paused caller calls again)."""
    options: list[list[PreparedRequest]] = []
    for claim in claims:
        for alternatives in claim.alternatives:
            if len(alternatives) == 1:
                options.append(list(alternatives))
                continue
            # An All alternative under a constraint may raise when searched: keep it.
            kept = [a for a in alternatives if (a.all_devices and claim.constraints)
                    or viable(a, pools, busy, stats)]
            if not kept:
                return iter(())  # no alternative of this request fits the node
            options.append(kept)
    return _combined(claims, options, skipped)


def _combined(claims: Sequence[PreparedClaim], options: list[list[PreparedRequest]],
              skipped: Callable[[], None]) -> Iterator[tuple[PreparedClaim, ...]]:
    for combination in itertools.product(*options):
        position = 0
        resolved = []
        for claim in claims:
            size = len(claim.alternatives)
            picks = combination[position:position + size]
            position += size
            resolved.append(claim.choose(picks))
        if all(sum(r.count for r in claim.requests) <= MAX_DEVICES_PER_CLAIM
               for claim in resolved):
            yield tuple(resolved)
        else:
            skipped()


class ChoiceSearch:
    """The first combination of alternatives that fits the node (see the module doc), searched
    in steps. Once :attr:`finished`, :attr:`result` holds the picks per claim (None: no
    combination fits) and :attr:`claims` the claims with their chosen alternatives.

    Raises Unallocatable for bad input met by a search, or when more than
    :data:`MAX_COMBINATIONS` combinations would be needed.
    """

    def __init__(self, claims: Sequence[PreparedClaim], pools: NodePools,
                 busy: Container[DeviceId], stats: Stats, *, scoring: bool = True) -> None:
        self.scoring = scoring
        """Fragmentation-aware candidate order (False: upstream's first-fit walk order)."""
        self.claims = tuple(claims)
        """The claims; once a combination fits, with its alternatives."""
        self.pools = pools
        self.busy = busy
        self.stats = stats
        self.steps = 0
        """Devices tried so far, over every combination searched."""
        self.finished = False
        self.result: list[list[Pick]] | None = None
        self.ledger: Ledger | None = None
        """The winning search's ledger, with its picks taken (None without one)."""
        self._order: Iterator[tuple[PreparedClaim, ...]] | None = None
        self._considered = 0
        self._search: NodeSearch | None = None

    def run(self) -> list[list[Pick]] | None:
        """Search to the end."""
        self.advance(None)
        return self.result

    def advance(self, steps: int | None) -> bool:
        """Search on for about ``steps`` more devices tried (None: no limit); True once
        finished. Raises :class:`~.pacing.Paused` where a selector evaluation found an open
        meter's allowance spent; call again to go on from there."""
        if self.finished:
            return True
        if self._order is None:
            validate_on_node(self.claims, self.pools, self.busy, shares_of(self.busy),
                             self.stats)
            self._order = (iter((self.claims,)) if not any(c.prioritized for c in self.claims)
                           else combinations(self.claims, self.pools, self.busy, self.stats,
                                             self._skipped))
        spent = 0
        while True:
            search = self._search
            if search is None:
                resolved = next(self._order, None)
                if resolved is None:
                    invalid = self.pools.invalid
                    if invalid is not None:
                        raise pool_unusable(invalid)
                    self.finished = True
                    return True
                self._count()
                search = self._search = NodeSearch(resolved, self.pools, self.busy,
                                                   self.stats, scoring=self.scoring)
            before = search.steps
            try:
                done = search.advance(None if steps is None else max(0, steps - spent))
            finally:
                spent += search.steps - before
                self.steps += search.steps - before
            if not done:
                return False
            self._search = None
            if search.result is not None:
                self.claims = tuple(search.claims)
                self.result = search.result
                self.ledger = search.ledger
                self.finished = True
                return True
            if steps is not None and spent >= steps:
                return False

    def _skipped(self) -> None:
        """A combination skipped without a search (a claim would get too many devices)."""
        self._count()

    def _count(self) -> None:
        if self._considered == MAX_COMBINATIONS:
            raise Unallocatable(
                ReasonCode.TOO_MANY_CHOICES,
                f"the pod's firstAvailable requests combine into more than {MAX_COMBINATIONS} "
                "choices per node",
                f"none of the first {MAX_COMBINATIONS} combinations of the pod's "
                "firstAvailable alternatives fits the node; list fewer alternatives, or "
                "fewer firstAvailable requests per pod",
            )
        self._considered += 1


def allocate(
    claims: Sequence[ResourceClaim],
    snapshot: Snapshot,
    node: NodeInfo,
    in_flight: Collection[DeviceId] = (),
    *,
    scoring: bool = True,
    steps: int | None = DEFAULT_STEPS,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> list[AllocationResult] | None:
    """Allocate ``claims`` (all unallocated) on ``node``: results, None, or AllocationError.
    ``scoring=False``: candidates in upstream's walk order (first-fit) instead of
    :mod:`.fragmentation`'s. The search stops after ``steps`` steps (devices tried, and the
    selectors' run-time cost as steps: :mod:`.pacing`) or ``timeout`` seconds (None: no
    limit) and raises :class:`~kdra.dra.errors.SearchExhausted`."""
    deadline = None if timeout is None else time.monotonic() + timeout
    stats = snapshot.stats
    spent = 0  # search steps, selector evaluations' cost included (.pacing)
    try:
        prepared = prepare(claims, snapshot)
        search = ChoiceSearch(prepared, snapshot.node_pools(node),
                              busy_view(snapshot, in_flight), stats, scoring=scoring)
        while True:
            allowed = None if steps is None else min(_SLICE, max(0, steps - spent))
            before = search.steps
            with Meter(stats, allowed) as meter:
                try:
                    done = search.advance(allowed)
                except Paused:
                    done = False
            spent += search.steps - before + meter.steps()
            if done:
                break
            if (steps is not None and spent >= steps) or (
                    deadline is not None and time.monotonic() >= deadline):
                raise SearchExhausted(
                    f"no allocation of claims {', '.join(c.key for c in claims)} on node "
                    f"{node.name} found within {spent} search steps"
                    + ("" if deadline is None else f" and {timeout:g} s"))
    except Unallocatable as problem:
        raise problem.to_error() from problem.__cause__
    if search.result is None:
        return None
    return [build_result(claim, picked, node.name)
            for claim, picked in zip(search.claims, search.result, strict=True)]


_SLICE = 10_000
"""Steps between two looks at the clock in :func:`allocate`."""
