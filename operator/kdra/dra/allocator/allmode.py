"""``allocationMode: All`` on one node: which devices a request takes, and the checks upstream
makes before its search (``validateDeviceRequest``).

- :func:`all_devices`: every matching device of the node the request can take — a pool the
  node sees that is incomplete or invalid is an error (any pool, matching or not, as
  upstream), so is a selector failing at run time on a matching device; a device whose
  capacity (after what allocated shares hold) cannot serve the request's capacity requests
  is left out, as upstream's ``CmpRequestOverCapacity`` leaves it out of "all"; and the
  request is *stuck* — it cannot fit the node whatever the search does — when a device it
  needs is held by another claim, or carries a taint it does not tolerate.
- :func:`validate_on_node`: what upstream checks for every request and ``firstAvailable``
  alternative of the pod before searching the node: the ``All`` checks above, and that each
  claim can be served with at most 32 devices by its smallest alternatives (an ``All``
  alternative counts the devices it would take on this node).

Invariants:
- Read-only: nothing here takes a device or changes the snapshot's view.
- Errors are :class:`~.reasons.Unallocatable`; "does not fit" is ``stuck`` (or a count).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from decimal import Decimal

from kdra.dra.allocator.capacity import demand
from kdra.dra.allocator.ledger import SharedUse
from kdra.dra.allocator.pools import DeviceId, MatchItem, NodePools
from kdra.dra.allocator.prepared import (
    PreparedClaim,
    PreparedRequest,
    check_all_request,
    too_many_devices,
    with_tainted,
)
from kdra.dra.allocator.stats import Stats
from kdra.dra.models import MAX_DEVICES_PER_CLAIM

__all__ = ["all_devices", "fewest_devices", "validate_on_node"]


def all_devices(items: tuple[MatchItem, ...], request: PreparedRequest, pools: NodePools,
                busy: Container[DeviceId], shares: Mapping[DeviceId, SharedUse],
                stats: Stats) -> tuple[tuple[MatchItem, ...], frozenset[DeviceId], bool]:
    """The devices an ``All`` request takes on the node (``items``: its matching devices,
    which tolerate the request's taints), the ids of those among them it cannot take because
    of a taint, and whether it is stuck (see the module doc). Raises Unallocatable."""
    check_all_request(items, request, pools, stats)
    if request.capacity or any(item.entry.shared for item in items):
        items = tuple(item for item in items if not (request.capacity or item.entry.shared)
                      or demand(request.capacity, item.entry.id.driver,
                                item.entry.capacities, _held(shares, item.entry.id))
                      is not None)
    items, refused = with_tainted(items, request, pools, stats)
    stuck = bool(refused) or (
        not request.admin_access and any(item.entry.id in busy for item in items))
    return items, refused, stuck


def _held(shares: Mapping[DeviceId, SharedUse], device: DeviceId) -> Mapping[str, Decimal]:
    use = shares.get(device)
    return use.consumed if use is not None else {}


def fewest_devices(claim: PreparedClaim, pools: NodePools, busy: Container[DeviceId],
                   shares: Mapping[DeviceId, SharedUse], stats: Stats) -> int:
    """The fewest devices the claim can be served with on the node: per request, its
    smallest alternative (an ``All`` one: the devices it would take here)."""
    options = claim.alternatives or tuple((r,) for r in claim.requests)
    return sum(min(_size(alternative, pools, busy, shares, stats) for alternative in choice)
               for choice in options)


def _size(request: PreparedRequest, pools: NodePools, busy: Container[DeviceId],
          shares: Mapping[DeviceId, SharedUse], stats: Stats) -> int:
    if not request.all_devices:
        return request.count
    items = pools.matching(request.selectors, request.key, stats, request.tolerations)
    return len(all_devices(items, request, pools, busy, shares, stats)[0])


def validate_on_node(claims: Sequence[PreparedClaim], pools: NodePools,
                     busy: Container[DeviceId], shares: Mapping[DeviceId, SharedUse],
                     stats: Stats) -> None:
    """Upstream's checks of every request and alternative before the node's search (see the
    module doc). Raises Unallocatable."""
    for claim in claims:
        options = claim.alternatives or tuple((r,) for r in claim.requests)
        wholesale = False
        for choice in options:
            for alternative in choice:
                if alternative.all_devices:
                    wholesale = True
                    items = pools.matching(alternative.selectors, alternative.key, stats,
                                           alternative.tolerations)
                    check_all_request(items, alternative, pools, stats)
        if wholesale:
            least = fewest_devices(claim, pools, busy, shares, stats)
            if least > MAX_DEVICES_PER_CLAIM:
                raise too_many_devices(claim.claim, least)
