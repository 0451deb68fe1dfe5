"""Cluster-scale allocation for the binder: one pod's claims against many candidate nodes.

:func:`place` evaluates candidate nodes in the order given and returns, per node, a
:class:`Placement` (results plus what a scorer needs) or a :class:`~.reasons.Reason`;
:class:`Placing` does the same in steps, within a budget. Work per node is kept small:

- pools come from the snapshot's per-node cache (slices indexed by node once, invalidated only
  by changes the node can see), so no slice is rescanned per node;
- each request's matching devices on a node are cached per selector set on that node's pools,
  and every selector result is memoised per device, so a warm cluster evaluates ~no CEL;
- a node is rejected without searching when, for some request, its free matching devices are
  fewer than requested (unless a candidate could raise an error, which only the search may
  decide; :mod:`.diagnosis`);
- free/matching counts per request are cached on the node's pools under the node's "busy
  stamp" (it moves only when a device the node sees changes hands), so a full node costs a
  few dictionary lookups, and equal reasons are shared between nodes;
- a pod with one request (ExactCount, no adminAccess, no constraint, no ``firstAvailable``)
  is decided by those counts alone on a node where none of its candidates could raise: the
  search would take the first ``count`` free matching devices, so it succeeds exactly when
  enough are free. Such a
  node gets a *counted* :class:`Placement` whose search runs only if its devices or results
  are asked for (the node the binder takes) — scoring 230 feasible nodes of 500 costs
  lookups, not 230 searches;
- ``limit`` stops after that many placements (like kube-scheduler's percentage of nodes to
  score), ``start`` rotates where the scan begins (kube-scheduler's ``nextStartNodeIndex``;
  :attr:`ClusterOutcome.next_start` tells the caller where to continue);
- AllocationResult models are built only for the placement the binder takes;
- a pod with ``firstAvailable`` requests is searched per node by :class:`~.choices.ChoiceSearch`
  (combinations of alternatives, best first); its :attr:`Placement.preference` tells the
  binder how good the node's choice is.

The search is bounded when asked (:class:`Placing`; upstream bounds it with a filter timeout,
10 s by default): ``node_steps`` caps one node's search — past it the node's reason is
``search-exhausted`` and the next node is evaluated, so one pathological node does not hide the
others (every ``firstAvailable`` alternative tried on the node counts against it) — and
:meth:`Placing.advance` stops after a number of steps and resumes later, so the caller can
interleave other work and give up (:meth:`Placing.give_up`) at its own budget. Steps include
the selectors' run-time cost (:mod:`.pacing`): a slice may end between two evaluations of a
node's devices — whichever step of the node's evaluation reached them (counting, the ``All``
checks, planning a search) — and the next call goes on from the devices' memos, deciding what
an unpaced evaluation decides. :class:`~.placement.Placement` (re-exported here) is one
node's answer.

Node-independent bad input (missing class, a selector that does not compile, more than 32
devices by count) is reported once as :attr:`ClusterOutcome.fatal`, without evaluating nodes.
Bad input met on one node (a selector failing at run time on a device, an invalid or — for
``All`` — incomplete pool) becomes that node's reason, with ``Reason.error`` set.

:func:`~.diagnosis.summarize` renders per-node reasons as one line, e.g. ``0/12 nodes
available: 7 no device of class "gpu.kdra.dev" matches request "gpu" of claim "train-gpu"
(selector ...), 4 matching devices all allocated (request "gpu" of claim "train-gpu")``.
"""

from __future__ import annotations

from collections.abc import Collection, Container, Sequence
from dataclasses import dataclass, field

from kdra.dra.allocator.choices import ChoiceSearch, preference
from kdra.dra.allocator.diagnosis import count_request, diagnose, raw_counts, summarize
from kdra.dra.allocator.fragmentation import placement_cost
from kdra.dra.allocator.ledger import Ledger
from kdra.dra.allocator.nodeselector import NodeInfo
from kdra.dra.allocator.pacing import UNITS_PER_STEP, Paused, steps_of
from kdra.dra.allocator.placement import Placement
from kdra.dra.allocator.pools import DeviceId, NodePools
from kdra.dra.allocator.prepared import PreparedClaim, PreparedRequest, prepare
from kdra.dra.allocator.reasons import Reason, ReasonCode, Unallocatable, none_available
from kdra.dra.allocator.results import Pick
from kdra.dra.allocator.search import busy_view
from kdra.dra.allocator.snapshot import Snapshot
from kdra.dra.allocator.stats import Stats
from kdra.dra.models import ResourceClaim

__all__ = ["ClusterOutcome", "Placement", "Placing", "place", "summarize"]


@dataclass(frozen=True, slots=True)
class ClusterOutcome:
    placements: dict[str, Placement] = field(default_factory=dict)
    reasons: dict[str, Reason] = field(default_factory=dict)
    fatal: Reason | None = None
    """Node-independent bad input; no node was evaluated."""
    unevaluated: int = 0
    """Nodes not looked at because ``limit`` placements were found first, or the search
    budget ran out (``exhausted``)."""
    next_start: int = 0
    """Where a rotating caller should start next time (kube-scheduler style)."""
    exhausted: bool = False
    """The caller's budget ran out before every node was evaluated (:meth:`Placing.give_up`)
    or a node's search hit ``node_steps``: a complete search might have found more."""
    steps: int = 0
    """Search steps spent (devices tried, and the selectors' run-time cost as steps)."""
    cel_units: int = 0
    """Run-time cost of the selector evaluations run (:mod:`.pacing`; 0 when every verdict
    was memoised or every selector is an ordinary one)."""

    def summary(self, total: int | None = None) -> str:
        """One line for events / conditions (see :func:`summarize`)."""
        count = total if total is not None else (
            len(self.placements) + len(self.reasons) + self.unevaluated
        )
        if self.fatal is not None:
            return none_available(self.fatal.detail or self.fatal.message, count)
        return summarize(self.reasons.values(), count, len(self.placements))


def place(
    snapshot: Snapshot,
    claims: Sequence[ResourceClaim],
    nodes: Sequence[NodeInfo],
    *,
    in_flight: Collection[DeviceId] = (),
    limit: int | None = None,
    start: int = 0,
    scoring: bool = True,
) -> ClusterOutcome:
    """Evaluate ``nodes`` (from index ``start``, wrapping around) for a pod's unallocated
    ``claims``, stopping after ``limit`` placements (see the module doc). Unbounded: see
    :class:`Placing` for a search within a budget."""
    outcome = Placing(snapshot, claims, nodes, in_flight=in_flight, limit=limit,
                      start=start, scoring=scoring).advance(None)
    assert outcome is not None
    return outcome


class Placing:
    """:func:`place` in steps. :meth:`advance` evaluates nodes until it has the outcome, or
    until about ``steps`` search steps were spent (it returns None; call it again, after the
    snapshot changed or not). :meth:`give_up` ends early with what was found so far.

    Steps are devices tried by the searches plus the run-time cost of the selector
    evaluations, as steps (:mod:`.pacing`): a slice also ends between two evaluations of a
    node's devices, and the node's evaluation goes on from its devices' memos at the next
    call. ``node_steps`` caps each node's steps: a node whose search (or whose selectors)
    take more gets the reason ``search-exhausted`` (and the outcome ``exhausted``) and the
    next node is evaluated.

    Resuming after the snapshot changed is safe but may be stale: a device taken meanwhile
    counts as taken from then on, not before. Check the placement taken with
    :meth:`still_fits` before acting on it.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        claims: Sequence[ResourceClaim],
        nodes: Sequence[NodeInfo],
        *,
        in_flight: Collection[DeviceId] = (),
        limit: int | None = None,
        start: int = 0,
        node_steps: int | None = None,
        scoring: bool = True,
        freed: Collection[DeviceId] = (),
    ) -> None:
        self.snapshot = snapshot
        self.scoring = scoring
        """Fragmentation-aware candidate order on each node (False: first-fit, upstream's)."""
        self.nodes = nodes
        self.limit = limit
        self.start = start
        self.node_steps = node_steps
        self.in_flight = in_flight
        self.freed = freed
        """Devices in use counted as free (preemption's what-if: a gang's victims gone)."""
        self.version = snapshot.version
        """The snapshot's version when the evaluation started."""
        self.search_steps = 0
        """Devices tried by the searches so far."""
        self.cel_units = 0
        """Run-time cost of the selector evaluations this evaluation ran (:mod:`.pacing`)."""
        self.placements: dict[str, Placement] = {}
        self.reasons: dict[str, Reason] = {}
        self._memo: dict[tuple[int, int, int, int, str], Reason] = {}
        self._processed = 0
        self._exhausted = False
        self._current: tuple[NodeInfo, NodePools, tuple[int, int] | None, ChoiceSearch] | None = (
            None)
        self._again = False  # the next node is one whose counting paused: it goes on
        self._node_units = 0  # the cost of the current node's evaluations
        self._mark = 0  # snapshot.stats.cel_cost when last added to cel_units
        self._outcome: ClusterOutcome | None = None
        self.prepared: tuple[PreparedClaim, ...] = ()
        try:
            self.prepared = prepare(claims, snapshot)
        except Unallocatable as problem:
            self._outcome = ClusterOutcome(fatal=problem.to_reason(), unevaluated=len(nodes),
                                           next_start=start)
        self._sole = _sole_request(self.prepared)

    @property
    def done(self) -> bool:
        return self._outcome is not None

    @property
    def steps(self) -> int:
        """Search steps spent so far: devices tried, and the selectors' run-time cost as
        steps."""
        return self.search_steps + steps_of(self.cel_units)

    def advance(self, steps: int | None) -> ClusterOutcome | None:
        """Evaluate on; the outcome once every node (or ``limit`` placements) is done, None
        when about ``steps`` more search steps were spent first (None: no limit)."""
        if self._outcome is not None:
            return self._outcome
        stop = None if steps is None else self.steps + steps
        snapshot = self.snapshot
        in_flight = self.in_flight
        busy = busy_view(snapshot, in_flight, self.freed)
        stats = snapshot.stats
        nodes = self.nodes
        total = len(nodes)
        limit = total + 1 if self.limit is None else self.limit
        placements, reasons, prepared, memo = self.placements, self.reasons, self.prepared, \
            self._memo
        sole = self._sole
        start = self.start
        processed = self._processed
        outer = stats.pause_at  # restored on return; an enclosing allowance is not consulted
        self._mark = stats.cel_cost
        self._arm(stats, stop, 0)
        try:
            while True:
                if self._current is not None:
                    if not self._search_on(stop, stats):
                        return None
                    continue
                self._sync(stats)
                if processed >= total or len(placements) >= limit:
                    self._processed = processed
                    return self._finish()
                if stop is not None and self.steps >= stop:
                    return None
                node = nodes[(start + processed) % total]
                processed += 1
                if self._again:
                    self._again = False
                else:
                    self._node_units = 0
                pools = snapshot.node_pools(node)
                stamp = None if in_flight or self.freed else snapshot.busy_stamp(node.name)
                if pools.unusable:  # counts do not know upstream's pool errors: search
                    self._current = (node, pools, stamp, ChoiceSearch(
                        prepared, pools, busy, stats, scoring=self.scoring))
                    continue
                try:
                    if sole is not None:
                        _, free, unsure = count_request(pools, sole, busy, stats, stamp)
                        if not unsure and free >= sole.count:
                            class_free = raw_counts(pools, sole.class_selectors,
                                                    sole.class_key, busy, stats, stamp)[1]
                            # The list it was counted from: its search evaluates nothing.
                            known = {sole.key: pools.matching(sole.selectors, sole.key, stats,
                                                              sole.tolerations)}
                            placements[node.name] = Placement(
                                node.name, prepared, None,
                                {sole.class_name: class_free - sole.count},
                                (pools, busy, stats), pools, known=known)
                            continue
                    reason = diagnose(prepared, pools, busy, stats, searched=False,
                                      stamp=stamp, memo=memo)
                except Paused:  # the selectors spent the node's steps or the slice
                    self._sync(stats)
                    if self._node_spent(0):
                        reasons[node.name] = self._gave_up(0)
                        self._exhausted = True
                        continue
                    processed -= 1  # this node again, from its devices' memos
                    self._again = True
                    if stop is not None and self.steps >= stop:
                        return None
                    self._arm(stats, stop, 0)  # an earlier node's spending, not this one's
                    continue
                if reason is not None:
                    reasons[node.name] = reason
                    continue
                self._current = (node, pools, stamp, ChoiceSearch(prepared, pools, busy, stats,
                                                                  scoring=self.scoring))
        finally:
            stats.pause_at = outer
            self._sync(stats)
            self._processed = processed

    def _arm(self, stats: Stats, stop: int | None, searched: int) -> None:
        """Let selector evaluations from now on spend what is left of the slice (``stop``)
        and of the current node's steps (``searched``: its devices tried), and at least one
        evaluation (:mod:`.pacing`)."""
        left = None if stop is None else stop - self.steps
        if self.node_steps is not None:
            rest = self.node_steps - searched - steps_of(self._node_units)
            left = rest if left is None else min(left, rest)
        stats.pause_at = None if left is None else (
            stats.cel_cost + max(1, left * UNITS_PER_STEP))

    def _sync(self, stats: Stats) -> None:
        """Add the selector evaluations' cost since the last call to this evaluation's (and
        to the current node's)."""
        units = stats.cel_cost - self._mark
        if units:
            self._mark = stats.cel_cost
            self.cel_units += units
            self._node_units += units

    def _node_spent(self, searched: int) -> bool:
        """The current node spent its ``node_steps`` (``searched``: its devices tried)."""
        return (self.node_steps is not None
                and searched + steps_of(self._node_units) >= self.node_steps)

    def _search_on(self, stop: int | None, stats: Stats) -> bool:
        """Step the current node's search; True when that node is decided. A pause
        (:mod:`.pacing`) changes nothing but the steps spent: the next call goes on."""
        assert self._current is not None
        node, pools, stamp, search = self._current
        while True:
            self._sync(stats)
            if stop is not None and self.steps >= stop:
                return False
            allowed = None if stop is None else max(0, stop - self.steps)
            capped = False
            if self.node_steps is not None:
                left = self.node_steps - search.steps - steps_of(self._node_units)
                if allowed is None or left <= allowed:
                    allowed, capped = max(0, left), True
            self._arm(stats, stop, search.steps)
            before = search.steps
            try:
                decided = self._decide(node, pools, stamp, search, allowed)
            except Unallocatable as problem:
                self.search_steps += search.steps - before
                self.reasons[node.name] = problem.to_reason()
                self._current = None
                return True
            except Paused:  # the selectors spent the node's steps or the slice
                self.search_steps += search.steps - before
                self._sync(stats)
                if self._node_spent(search.steps):
                    return self._exhaust(node.name, search.steps)
                if stop is not None and self.steps >= stop:
                    return False
                continue  # spent by an earlier node: this one goes on
            self.search_steps += search.steps - before
            if decided:
                return True
            if not capped and not self._node_spent(search.steps):
                return False
            return self._exhaust(node.name, search.steps)

    def _decide(self, node: NodeInfo, pools: NodePools, stamp: tuple[int, int] | None,
                search: ChoiceSearch, allowed: int | None) -> bool:
        """Search on; once the search finished, the node's placement or reason (True).
        Raises Paused before changing anything but the search's own progress."""
        if not search.advance(allowed):
            return False
        picks = search.result
        if picks is None:
            self.reasons[node.name] = diagnose(self.prepared, pools, search.busy,
                                               self.snapshot.stats, searched=True,
                                               stamp=stamp, memo=self._memo)
        else:
            resolved = search.claims
            placement = Placement(
                node.name, resolved, picks,
                _free_after(resolved, picks, pools, search.busy, self.snapshot.stats),
                pools=pools, preference=preference(resolved))
            if search.ledger is not None:
                placement.fragmentation = placement_cost(picks, search.ledger)
            self.placements[node.name] = placement
        self._current = None
        return True

    def _exhaust(self, node: str, searched: int) -> bool:
        """The current node spent its steps: ``search-exhausted``, on to the next node."""
        self.reasons[node] = self._gave_up(searched)
        self._exhausted = True
        self._current = None
        return True

    def give_up(self) -> ClusterOutcome:
        """End now: the placements found so far; the node being searched gets the reason
        ``search-exhausted``, nodes not reached count as unevaluated."""
        if self._outcome is not None:
            return self._outcome
        if self._current is not None:
            node, _, _, search = self._current
            self.reasons[node.name] = self._gave_up(search.steps)
            self._current = None
        elif self._again:  # a node whose selectors were being evaluated
            node = self.nodes[(self.start + self._processed) % len(self.nodes)]
            self.reasons[node.name] = self._gave_up(0)
            self._processed += 1
            self._again = False
        self._exhausted = True
        return self._finish()

    def _gave_up(self, steps: int) -> Reason:
        """``steps``: the node's devices tried by its search (its selectors' cost is added)."""
        claims = ", ".join(f'"{claim.claim.metadata.name}"' for claim in self.prepared)
        units = self._node_units
        total = steps + steps_of(units)
        if units and steps_of(units) * 2 >= total:
            return Reason(
                ReasonCode.SEARCH_EXHAUSTED,
                f"allocation search gave up evaluating CEL selectors (claims {claims})",
                f"no placement of claims {claims} found within {total} search steps: their "
                f"selectors cost {units} units at run time on the node's devices "
                f"({UNITS_PER_STEP} units a step); the devices evaluated so far are "
                "remembered, so a later attempt goes on from there (cheaper selectors are "
                "decided sooner)",
            )
        return Reason(
            ReasonCode.SEARCH_EXHAUSTED,
            f"allocation search gave up (claims {claims})",
            f"no placement of claims {claims} found within {total} search steps",
        )

    def _finish(self) -> ClusterOutcome:
        total = len(self.nodes)
        self._outcome = ClusterOutcome(
            self.placements, self.reasons, None, total - self._processed,
            (self.start + self._processed) % total if total else 0,
            self._exhausted, self.steps, self.cel_units)
        return self._outcome

    def still_fits(self, placement: Placement) -> bool:
        """Whether ``placement`` (made by this evaluation) can still be taken: the snapshot did
        not change since the evaluation started, or the node's pools are the same, none of
        the placement's exclusive devices is in use now, and its counters and shares still
        fit (replayed on a fresh :class:`~.ledger.Ledger`)."""
        snapshot = self.snapshot
        if snapshot.version == self.version or placement.pools is None:
            return True
        node = next((n for n in self.nodes if n.name == placement.node), None)
        if node is None or snapshot.node_pools(node) is not placement.pools:
            return False
        picks = placement.search()
        if picks is None:
            return False
        busy = busy_view(snapshot, self.in_flight, self.freed)
        if any(pick.entry.id in busy for chosen in picks for pick in chosen
               if not pick.request.admin_access):
            return False
        ledgered = [pick for chosen in picks for pick in chosen if pick.consumed is not None]
        if not ledgered:
            return True
        ledger = Ledger(placement.pools, busy, snapshot.shares)
        return all(ledger.admit(pick.entry, pick.request.capacity) is not None
                   for pick in ledgered)


def _sole_request(prepared: Sequence[PreparedClaim]) -> PreparedRequest | None:
    """The pod's only request, when counts alone decide whether it fits a node: one claim
    with one ExactCount request, no adminAccess, no constraint, no alternatives. (Its devices
    are free matching ones, so they match its class too: free-after is the class's free count
    less ``count``.)"""
    if len(prepared) != 1 or len(prepared[0].requests) != 1 or prepared[0].constraints:
        return None
    request = prepared[0].requests[0]
    if request.all_devices or request.admin_access or request.choices > 1:
        return None
    return request


def _free_after(
    prepared: Sequence[PreparedClaim],
    picks: list[list[Pick]],
    pools: NodePools,
    busy: Container[DeviceId],
    stats: Stats,
) -> dict[str, int]:
    """Per class: matching devices still free after the picks. Devices with counters or
    shares do not count (a partition is "free" until its memory slices are gone: counting
    them would make binpack prefer the node where a placement cuts the most partitions off;
    :attr:`Placement.fragmentation` ranks such placements instead)."""
    taken = {pick.entry.id for chosen in picks for pick in chosen if not pick.request.admin_access}
    free_after: dict[str, int] = {}
    for claim in prepared:
        for request in claim.requests:
            if request.class_name in free_after:
                continue
            items = pools.matching(request.class_selectors, request.class_key, stats)
            free_after[request.class_name] = sum(
                1
                for item in items
                if item.failure is None
                and item.entry.id not in busy
                and item.entry.id not in taken
                and not item.entry.special
            )
    return free_after
