"""Cluster-scale allocation for the binder: one pod's claims against many candidate nodes.

:func:`place` evaluates candidate nodes in the order given and returns, per node, a
:class:`Placement` (results plus what a scorer needs) or a :class:`~.reasons.Reason`. Work per
node is kept small:

- pools come from the snapshot's per-node cache (slices indexed by node once, invalidated only
  by changes the node can see), so no slice is rescanned per node;
- each request's matching devices on a node are cached per selector set on that node's pools,
  and every selector result is memoised per device, so a warm cluster evaluates ~no CEL;
- a node is rejected without searching when, for some request, its free matching devices are
  fewer than requested (unless a candidate could raise an error, which only the search may
  decide);
- free/matching counts per request are cached on the node's pools under the node's "busy
  stamp" (it moves only when a device the node sees changes hands), so a full node costs a
  few dictionary lookups, and equal reasons are shared between nodes;
- a pod with one request (ExactCount, no adminAccess, no constraint) is decided by those
  counts alone on a node where none of its candidates could raise: the search would take the
  first ``count`` free matching devices, so it succeeds exactly when enough are free. Such a
  node gets a *counted* :class:`Placement` whose search runs only if its devices or results
  are asked for (the node the binder takes) — scoring 230 feasible nodes of 500 costs
  lookups, not 230 searches;
- ``limit`` stops after that many placements (like kube-scheduler's percentage of nodes to
  score), ``start`` rotates where the scan begins (kube-scheduler's ``nextStartNodeIndex``;
  :attr:`ClusterOutcome.next_start` tells the caller where to continue);
- AllocationResult models are built only for the placement the binder takes.

Node-independent bad input (missing class, a selector that does not compile, more than 32
devices by count) is reported once as :attr:`ClusterOutcome.fatal`, without evaluating nodes.
Bad input met on one node (a selector failing at run time on a device, an invalid or — for
``All`` — incomplete pool) becomes that node's reason, with ``Reason.error`` set.

:func:`summarize` renders per-node reasons as one line, e.g. ``0/12 nodes available: 7 no
device of class "gpu.kdra.dev" matches request "gpu" of claim "train-gpu" (selector ...), 4
matching devices all allocated (request "gpu" of claim "train-gpu")``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

from kdra.domain.allocator.choices import preference, search_choices
from kdra.domain.allocator.nodeselector import NodeInfo
from kdra.domain.allocator.pools import DeviceId, MatchItem, NodePools, Selector
from kdra.domain.allocator.prepared import PreparedClaim, PreparedRequest, prepare
from kdra.domain.allocator.reasons import Reason, ReasonCode, Unallocatable
from kdra.domain.allocator.results import Pick, build_result
from kdra.domain.allocator.search import NodeSearch, busy_view
from kdra.domain.allocator.snapshot import Snapshot
from kdra.domain.allocator.stats import Stats
from kdra.domain.allocator.tainting import tainted_note
from kdra.domain.models import AllocationResult, DeviceToleration, ResourceClaim


class Placement:
    """The pod's claims fit ``node``. ``results`` are built on first access (only the node the
    binder takes needs them).

    A *counted* placement (see the module doc) is made without picks: its search runs on the
    first access of ``devices`` or ``results``, against the snapshot as it is then. Use it
    before the snapshot changes (the binder takes its choice's results in the same step as
    :func:`place`); ``free_after`` needs no search."""

    __slots__ = ("_devices", "_picks", "_prepared", "_results", "_search", "free_after", "node",
                 "preference")

    def __init__(
        self,
        node: str,
        prepared: Sequence[PreparedClaim],
        picks: list[list[Pick]] | None,
        free_after: Mapping[str, int],
        search: tuple[NodePools, Container[DeviceId], Stats] | None = None,
        *,
        preference: int = 0,
    ) -> None:
        self.node = node
        self.preference = preference
        """How good the ``firstAvailable`` choices are (:func:`~.choices.preference`);
        the binder prefers nodes with a higher one, then applies its placement policy."""
        self._prepared = prepared
        self._picks = picks
        if picks is None and search is None:
            raise ValueError("a placement needs its picks or what to search them with")
        self._search = search
        self._results: tuple[AllocationResult, ...] | None = None
        self._devices: frozenset[DeviceId] | None = None
        self.free_after = free_after
        """Per DeviceClass used by the pod: devices on the node matching the class that would
        still be free after this placement (for binpack / spread scoring)."""

    @property
    def picks(self) -> list[list[Pick]]:
        if self._picks is None:
            assert self._search is not None
            picks = NodeSearch(self._prepared, *self._search).run()
            if picks is None:  # the counts said it fits: a changed snapshot, or a bug
                raise RuntimeError(f"counted placement on {self.node} no longer fits; use a "
                                   "placement before the snapshot changes")
            self._picks = picks
        return self._picks

    @property
    def devices(self) -> frozenset[DeviceId]:
        """Devices this placement takes (admin-access results excluded)."""
        if self._devices is None:
            self._devices = frozenset(
                pick.entry.id for chosen in self.picks for pick in chosen
                if not pick.request.admin_access
            )
        return self._devices

    @property
    def results(self) -> tuple[AllocationResult, ...]:
        """One AllocationResult per claim, in the order of the claims given."""
        if self._results is None:
            self._results = tuple(
                build_result(claim, chosen)
                for claim, chosen in zip(self._prepared, self.picks, strict=True)
            )
        return self._results

    def __repr__(self) -> str:
        if self._picks is None:  # never searches: the snapshot may have moved on
            return f"Placement({self.node!r}, counted)"
        return f"Placement({self.node!r}, devices={sorted(map(str, self.devices))})"


@dataclass(frozen=True, slots=True)
class ClusterOutcome:
    placements: dict[str, Placement] = field(default_factory=dict)
    reasons: dict[str, Reason] = field(default_factory=dict)
    fatal: Reason | None = None
    """Node-independent bad input; no node was evaluated."""
    unevaluated: int = 0
    """Nodes not looked at because ``limit`` placements were found first."""
    next_start: int = 0
    """Where a rotating caller should start next time (kube-scheduler style)."""

    def summary(self, total: int | None = None) -> str:
        """One line for events / conditions (see :func:`summarize`)."""
        count = total if total is not None else (
            len(self.placements) + len(self.reasons) + self.unevaluated
        )
        if self.fatal is not None:
            return f"0/{count} nodes available: {self.fatal.detail or self.fatal.message}"
        return summarize(self.reasons.values(), count, len(self.placements))


def place(
    snapshot: Snapshot,
    claims: Sequence[ResourceClaim],
    nodes: Sequence[NodeInfo],
    *,
    in_flight: Collection[DeviceId] = (),
    limit: int | None = None,
    start: int = 0,
) -> ClusterOutcome:
    """Evaluate ``nodes`` (from index ``start``, wrapping around) for a pod's unallocated
    ``claims``, stopping after ``limit`` placements (see the module doc)."""
    try:
        prepared = prepare(claims, snapshot)
    except Unallocatable as problem:
        return ClusterOutcome(fatal=problem.to_reason(), unevaluated=len(nodes), next_start=start)
    busy = busy_view(snapshot, in_flight)
    stats = snapshot.stats
    placements: dict[str, Placement] = {}
    reasons: dict[str, Reason] = {}
    memo: dict[tuple[int, int, int, int, str], Reason] = {}
    total = len(nodes)
    processed = 0
    sole = _sole_request(prepared)
    while processed < total and (limit is None or len(placements) < limit):
        node = nodes[(start + processed) % total]
        processed += 1
        pools = snapshot.node_pools(node)
        stamp = None if in_flight else snapshot.busy_stamp(node.name)
        if sole is not None:
            _, free, unsure = _count(pools, sole, busy, stats, stamp)
            if not unsure and free >= sole.count:
                class_free = _raw(pools, sole.class_selectors, sole.class_key, busy, stats,
                                  stamp)[1]
                placements[node.name] = Placement(
                    node.name, prepared, None, {sole.class_name: class_free - sole.count},
                    (pools, busy, stats))
                continue
        reason = diagnose(prepared, pools, busy, stats, searched=False, stamp=stamp, memo=memo)
        if reason is not None:
            reasons[node.name] = reason
            continue
        try:
            chosen = search_choices(prepared, pools, busy, stats)
        except Unallocatable as problem:
            reasons[node.name] = problem.to_reason()
            continue
        if chosen is None:
            reasons[node.name] = diagnose(prepared, pools, busy, stats, searched=True,
                                          stamp=stamp, memo=memo)
            continue
        resolved, picks = chosen
        placements[node.name] = Placement(
            node.name, resolved, picks, _free_after(resolved, picks, pools, busy, stats),
            preference=preference(resolved),
        )
    return ClusterOutcome(
        placements, reasons, None, total - processed, (start + processed) % total if total else 0
    )


def _sole_request(prepared: Sequence[PreparedClaim]) -> PreparedRequest | None:
    """The pod's only request, when counts alone decide whether it fits a node: one claim
    with one ExactCount request, no adminAccess, no constraint. (Its devices are free
    matching ones, so they match its class too: free-after is the class's free count less
    ``count``.)"""
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
            )
    return free_after


# --------------------------------------------------------------------------- reasons


@overload
def diagnose(
    prepared: Sequence[PreparedClaim],
    pools: NodePools,
    busy: Container[DeviceId],
    stats: Stats,
    *,
    searched: Literal[True],
    stamp: tuple[int, int] | None = None,
    memo: dict[tuple[int, int, int, int, str], Reason] | None = None,
) -> Reason: ...


@overload
def diagnose(
    prepared: Sequence[PreparedClaim],
    pools: NodePools,
    busy: Container[DeviceId],
    stats: Stats,
    *,
    searched: bool,
    stamp: tuple[int, int] | None = None,
    memo: dict[tuple[int, int, int, int, str], Reason] | None = None,
) -> Reason | None: ...


def diagnose(
    prepared: Sequence[PreparedClaim],
    pools: NodePools,
    busy: Container[DeviceId],
    stats: Stats,
    *,
    searched: bool,
    stamp: tuple[int, int] | None = None,
    memo: dict[tuple[int, int, int, int, str], Reason] | None = None,
) -> Reason | None:
    """Why the claims do not fit ``pools``' node, judged request by request.

    Before the search (``searched=False``) it only answers when the answer is certain: a
    request with fewer free matching devices than it needs, and no candidate that could raise
    an error. After a failed search it always answers: if every request could be served on its
    own, the claims' constraints (or the requests competing for the same devices) are why.

    ``stamp`` (the node's busy stamp; None when extra in-flight devices are in play) lets the
    counts be reused from ``pools.counts``; ``memo`` shares equal reasons between nodes.
    """
    for claim_index, claim in enumerate(prepared):
        for request_index, options in enumerate(claim.alternatives or
                                                 [(r,) for r in claim.requests]):
            reason = None
            for request in options:
                reason = _alone(claim_index, request_index, request, pools, busy, stats,
                                searched=searched, stamp=stamp, memo=memo)
                if reason is None:
                    break  # this request (this alternative of it) alone can be served
            if reason is None:
                continue
            if len(options) > 1:
                return Reason(reason.code, f"{reason.message} (and no other firstAvailable "
                                           f"alternative of it fits either)", reason.detail)
            return reason
    if not searched:
        return None
    for claim in prepared:
        if claim.constraints:
            labels = ", ".join(c.label for c in claim.constraints)
            return Reason(
                ReasonCode.CONSTRAINT_UNSATISFIABLE,
                f"{labels} cannot be satisfied by free devices "
                f'(claim "{claim.claim.metadata.name}")',
                f"no set of free matching devices of the node satisfies {labels} "
                f"(claim {claim.key})",
            )
    return Reason(
        ReasonCode.DEVICES_BUSY,
        "not enough free matching devices for all requests of the pod together",
        "each request alone could be served, but not all of them at once",
    )


def _alone(
    claim_index: int,
    request_index: int,
    request: PreparedRequest,
    pools: NodePools,
    busy: Container[DeviceId],
    stats: Stats,
    *,
    searched: bool,
    stamp: tuple[int, int] | None,
    memo: dict[tuple[int, int, int, int, str], Reason] | None,
) -> Reason | None:
    """Why ``request`` on its own does not fit the node; None when it may (or, before the
    search, when that is not certain)."""
    if request.all_devices and not searched:
        return None
    matching, free, unsure = _count(pools, request, busy, stats, stamp)
    if unsure and not searched:
        return None
    if (0 < matching == free) if request.all_devices else free >= request.count:
        return None
    note = _rejecting_selectors(request, pools) if matching < request.count or (
        not matching) else ""
    key = (claim_index, request_index * 16 + request.rank, matching, free, note)
    reason = memo.get(key) if memo is not None else None
    if reason is None:
        reason = _request_reason(request, matching, free, note)
        if reason is not None and memo is not None:
            memo[key] = reason
    return reason


def _count(
    pools: NodePools,
    request: PreparedRequest,
    busy: Container[DeviceId],
    stats: Stats,
    stamp: tuple[int, int] | None,
) -> tuple[int, int, bool]:
    """(matching devices, free ones, whether a free candidate could raise an error)."""
    matching, free, failing, failing_free, invalid = _raw(
        pools, request.selectors, request.key, busy, stats, stamp, request.tolerations)
    if request.admin_access:
        return matching, matching, bool(invalid or failing)
    return matching, free, bool(invalid or failing_free)


def _raw(
    pools: NodePools,
    selectors: tuple[Selector, ...],
    key: tuple[str, ...],
    busy: Container[DeviceId],
    stats: Stats,
    stamp: tuple[int, int] | None,
    tolerations: tuple[DeviceToleration, ...] = (),
) -> tuple[int, ...]:
    """:func:`_raw_count` of the devices matching ``selectors`` (``key``: their expressions),
    cached on the pools under the node's busy stamp."""
    if stamp is not None:
        cached = pools.counts.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    raw = _raw_count(pools.matching(selectors, key, stats, tolerations), busy)
    if stamp is not None:
        pools.counts[key] = (stamp, raw)
    return raw


def _raw_count(items: tuple[MatchItem, ...], busy: Container[DeviceId]) -> tuple[int, ...]:
    """(matching, free, failing, failing and free, in an invalid pool)."""
    matching = free = failing = failing_free = invalid = 0
    for item in items:
        if item.pool.duplicate is not None:
            invalid += 1
        in_use = item.entry.id in busy
        if item.failure is not None:
            failing += 1
            failing_free += not in_use
            continue
        matching += 1
        free += not in_use
    return matching, free, failing, failing_free, invalid


def _request_reason(
    request: PreparedRequest, matching: int, free: int, note: str
) -> Reason | None:
    who = f'request "{request.name}" of claim "{request.claim_name}"'
    needed = request.count
    counts = f"{matching} matching, {free} free, {needed or 'all'} needed ({request.describe()})"
    if matching == 0:
        return Reason(
            ReasonCode.NO_MATCHING_DEVICE,
            f'no device of class "{request.class_name}" matches {who}{note}',
            counts,
        )
    if request.all_devices:
        if free < matching:
            return Reason(
                ReasonCode.DEVICES_BUSY,
                f"matching devices partly allocated ({who} asks for all of them)",
                counts,
            )
        return None
    if matching < needed:
        return Reason(
            ReasonCode.NO_MATCHING_DEVICE,
            f'too few devices of class "{request.class_name}" match {who} (needs {needed})'
            f"{note}",
            counts,
        )
    if free == 0:
        return Reason(ReasonCode.DEVICES_BUSY, f"matching devices all allocated ({who})", counts)
    if free < needed:
        return Reason(
            ReasonCode.DEVICES_BUSY,
            f"too few free matching devices ({who} needs {needed})",
            counts,
        )
    return None


def _rejecting_selectors(request: PreparedRequest, pools: NodePools) -> str:
    """`` (selector X)``: the selectors that turned devices of the node away (memo only)."""
    note = pools.notes.get(request.key)
    if note is None:
        note = pools.notes[request.key] = _find_rejecting(request, pools)
    return note


def _find_rejecting(request: PreparedRequest, pools: NodePools) -> str:
    rejecting: dict[str, None] = {}
    for pool in pools.pools:
        for entry in pool.entries:
            for selector in request.selectors:
                verdict = entry.memoised(selector.expression)
                if verdict is True:
                    continue
                if verdict is False:
                    rejecting[selector.expression] = None
                break
    parts = []
    if rejecting:
        label = "selector" if len(rejecting) == 1 else "selectors"
        parts.append(f"{label} " + "; ".join(_short(e) for e in rejecting))
    tainted = tainted_note((e for pool in pools.pools for e in pool.entries),
                           request.selectors, request.tolerations, pools.taints)
    if tainted:
        parts.append(tainted)
    unsupported = pools.unsupported()
    if unsupported:
        features = sorted({f for entry in unsupported for f in entry.unsupported})
        parts.append(f"{len(unsupported)} device(s) not usable: they use "
                     f"{', '.join(features)}, which kdra does not support yet")
    if not parts:
        return " (no devices on the node)" if not any(p.entries for p in pools.pools) else ""
    return " (" + "; ".join(parts) + ")"


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summarize(reasons: Iterable[Reason], total: int, available: int = 0) -> str:
    """``"<available>/<total> nodes available: <n> <message>, ..."``, most frequent first."""
    counts = Counter(reason.message for reason in reasons)
    head = f"{available}/{total} nodes available"
    if not counts:
        return head
    groups = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return head + ": " + ", ".join(f"{n} {message}" for message, n in groups)
