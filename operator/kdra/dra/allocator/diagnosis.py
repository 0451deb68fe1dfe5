"""Why a pod's claims do not fit a node, judged from counts: :func:`diagnose`, and the one-line
summary of many nodes' reasons (:func:`summarize`).

Counting is cheap and certain where the search is expensive: a request with fewer free
matching devices than it needs cannot be served, whatever the search would try. Counts of a
node are cached on its pools under the node's busy stamp (:meth:`Snapshot.busy_stamp`), so a
full node costs a few dictionary look-ups per pod.

Devices that consume counters or allow multiple allocations, and requests with capacity
requests, make counts uncertain (a free partition may have no counters left, one shared
device may serve several slots): such a request is left to the search, and after a failed
search :func:`_ledger_reason` names the counter or capacity that ran out, per device
(``gpu-3: memory-slices 7/8 used, asked 4``; ``gpu-0: memory 70Gi of 80Gi used, asked
20Gi``).

Invariants:
- Before a search (``searched=False``) a reason is given only when it is certain; a node
  where a candidate could raise an error is left to the search (which raises it).
- Messages do not depend on the node (nodes are grouped by them); details may.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterable, Sequence
from typing import Literal, overload

from kdra.dra.allocator.ledger import Ledger
from kdra.dra.allocator.pools import DeviceEntry, DeviceId, MatchItem, NodePools, Selector
from kdra.dra.allocator.prepared import PreparedClaim, PreparedRequest
from kdra.dra.allocator.reasons import Reason, ReasonCode, nodes_available
from kdra.dra.allocator.search import shares_of
from kdra.dra.allocator.stats import Stats
from kdra.dra.allocator.tainting import DeviceTaints
from kdra.dra.models import DeviceToleration
from kdra.dra.taints import untolerated


def tainted_note(entries: Iterable[DeviceEntry], selectors: Sequence[Selector],
                 tolerations: Sequence[DeviceToleration], taints: DeviceTaints) -> str:
    """``3 devices tainted k1, k2 (not tolerated)`` for the devices that pass every selector
    (as memoised) but carry a taint the request does not tolerate; empty when none."""
    keys: dict[str, None] = {}
    count = 0
    for entry in entries:
        if entry.unsupported or not all(entry.memoised(s.expression) is True
                                        for s in selectors):
            continue
        blocking = untolerated(taints.of(entry), tolerations)
        if blocking:
            count += 1
            keys.update((t.key, None) for t in blocking)
    if not count:
        return ""
    noun = "device" if count == 1 else "devices"
    return f"{count} {noun} tainted {', '.join(keys)} (not tolerated)"

__all__ = ["count_request", "diagnose", "raw_counts", "summarize"]

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
    ledger_reason = _ledger_reason(prepared, pools, busy, stats)
    if ledger_reason is not None:
        return ledger_reason
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
    matching, free, unsure = count_request(pools, request, busy, stats, stamp)
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


def count_request(
    pools: NodePools,
    request: PreparedRequest,
    busy: Container[DeviceId],
    stats: Stats,
    stamp: tuple[int, int] | None,
) -> tuple[int, int, bool]:
    """(matching devices, free ones, whether counting is uncertain: a free candidate could
    raise an error, or needs the ledger — counters, shares, capacity requests)."""
    matching, free, failing, failing_free, invalid, special = raw_counts(
        pools, request.selectors, request.key, busy, stats, stamp, request.tolerations)
    if request.admin_access:
        return matching, matching, bool(invalid or failing)
    return matching, free, bool(invalid or failing_free or special or request.capacity)


def raw_counts(
    pools: NodePools,
    selectors: tuple[Selector, ...],
    key: tuple[str, ...],
    busy: Container[DeviceId],
    stats: Stats,
    stamp: tuple[int, int] | None,
    tolerations: tuple[DeviceToleration, ...] = (),
) -> tuple[int, ...]:
    """:func:`_raw_count` of the devices matching ``selectors`` (``key``: their expressions
    and the ``tolerations``' key) and tolerated, cached on the pools under the node's busy
    stamp."""
    if stamp is not None:
        cached = pools.counts.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    raw = _raw_count(pools.matching(selectors, key, stats, tolerations), busy)
    if stamp is not None:
        pools.counts[key] = (stamp, raw)
    return raw


def _raw_count(items: tuple[MatchItem, ...], busy: Container[DeviceId]) -> tuple[int, ...]:
    """(matching, free, failing, failing and free, in an invalid pool — none: such pools
    offer no device —, free and special)."""
    matching = free = failing = failing_free = invalid = special = 0
    for item in items:
        in_use = item.entry.id in busy
        if item.failure is not None:
            failing += 1
            failing_free += not in_use
            continue
        matching += 1
        free += not in_use
        special += item.entry.special and not in_use
    return matching, free, failing, failing_free, invalid, special


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


def _ledger_reason(prepared: Sequence[PreparedClaim], pools: NodePools,
                   busy: Container[DeviceId], stats: Stats) -> Reason | None:
    """After a failed search: the first request whose free matching devices cannot take it
    because of counters or capacity, with each device's shortfall (at most 4 named)."""
    ledger: Ledger | None = None
    for claim in prepared:
        for request in claim.requests:
            if request.admin_access:
                continue
            items = pools.matching(request.selectors, request.key, stats, request.tolerations)
            candidates = [item.entry for item in items if item.failure is None
                          and item.entry.id not in busy
                          and (item.entry.special or request.capacity)]
            if not candidates:
                continue
            if ledger is None:
                ledger = Ledger(pools, busy, shares_of(busy))
            shortfalls = [(entry, ledger.why_not(entry, request.capacity))
                          for entry in candidates]
            fitting = sum(1 for _, why in shortfalls if why is None)
            plain = sum(1 for item in items if item.failure is None
                        and item.entry.id not in busy and not item.entry.special
                        and not request.capacity)
            if fitting + plain >= max(request.count, 1) or any(
                    entry.shared and why is None for entry, why in shortfalls):
                continue  # alone it fits (a shared device may serve several slots)
            named = [why for _, why in shortfalls if why is not None]
            capacity = any(entry.shared or request.capacity for entry, why in shortfalls
                           if why is not None and not entry.consumes)
            code = ReasonCode.CAPACITY_EXHAUSTED if capacity else ReasonCode.COUNTERS_EXHAUSTED
            what = ("matching devices lack the capacity asked (or what is left of it)"
                    if capacity else "shared counters of the matching devices used up")
            more = f"; and {len(named) - 4} more" if len(named) > 4 else ""
            return Reason(
                code,
                f'{what} (request "{request.name}" of claim "{request.claim_name}")',
                "; ".join(named[:4]) + more + f" ({request.describe()})",
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
    if pools.unusable:
        more = f" (and {len(pools.unusable) - 1} more)" if len(pools.unusable) > 1 else ""
        parts.append(pools.unusable[0].describe() + more)
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
    """``"<available>/<total> nodes are available: <n> <message>, ..."``, most frequent
    first (:func:`~kdra.dra.allocator.reasons.nodes_available`)."""
    return nodes_available(Counter(reason.message for reason in reasons), total, available)
