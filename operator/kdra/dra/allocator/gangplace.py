"""A gang's joint search over the cluster: :class:`~.gang.GangSearch` with the allocator as
each pod's options.

:func:`gang_search` builds the search the binder (kdra.operator.scheduler.gangs) and
bench/gang.py run: for pod ``i`` of the gang, given the devices the earlier pods took, a
:class:`~.cluster.Placing` over the pod's candidate nodes (those of the scope, and with
``spread`` not used by an earlier pod) with those devices — plus the devices outside the
scope's ``matchAttribute`` value and the pod's ``reserved`` ones — counted as in use. Each
node where the pod fits is one choice, nodes the pod fills best first (binpack: the gang
keeps whole nodes for others).

Invariants:
- Nothing here changes the snapshot: the gang's devices are passed as in flight (and a
  preemption's victims' devices as freed); the caller assumes the picks once the whole gang
  has them.
- The Placings together spend at most ``steps`` (each gets what is left; one that runs out
  gives up with what it found). An evaluation costs its Placing's steps plus one per node
  evaluated. A Placing is stepped within what the caller's slice has left
  (``GangSearch.allowance``): one that needs more pauses the search
  (:class:`~.gang.Unfinished`) and goes on at the next slice, so the time between two yields
  is bounded by the slice, not by a pod's evaluation.
- A device without the ``match_attribute`` attribute is never in a scope; a node without
  the ``topology_key`` label never either (:func:`~.gang.scopes`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from kdra.dra.allocator.cluster import ClusterOutcome, Placing
from kdra.dra.allocator.gang import Choice, GangSearch, Scope, Unfinished, scopes
from kdra.dra.allocator.nodeselector import NodeInfo
from kdra.dra.allocator.placement import Placement
from kdra.dra.allocator.pools import DeviceId
from kdra.dra.allocator.snapshot import Snapshot
from kdra.dra.models import ResourceClaim

__all__ = ["SCOPE_BACKTRACKS", "GangPod", "Pick", "gang_search"]

SCOPE_BACKTRACKS = 8
"""Backtracks per pod of the gang one scope (one ``matchAttribute`` value, one
``topologyKey`` value) may take before the search moves on to the next: a domain the gang
nearly fits could otherwise spend the whole budget proving it does not, while the next one
fits at once. A gang placed in no scope after such a cut is reported out of budget (and
retried), not impossible."""


@dataclass(frozen=True)
class GangPod:
    """One pod of a gang: its unallocated claims, candidate nodes, devices held for others
    (preemption's nominations) and whether placements are scored."""

    claims: Sequence[ResourceClaim]
    nodes: Sequence[NodeInfo]
    reserved: frozenset[DeviceId] = frozenset()
    scoring: bool = True


@dataclass
class Pick:
    """A pod's choice: its placement, and the Placing it came from (None without claims) to
    check it still fits after a search that yielded."""

    placement: Placement
    placing: Placing | None


def gang_search(snapshot: Snapshot, pods: Sequence[GangPod], *, steps: int,
                match_attribute: str = "", topology_key: str = "", spread: bool = False,
                node_steps: Callable[[int], int] | None = None,
                freed: frozenset[DeviceId] = frozenset()) -> GangSearch[Pick]:
    """The joint search for ``pods`` (see the module doc); run it with ``advance``.
    ``freed``: devices in use counted as free (gang preemption's what-if: its victims
    gone). A freed device an earlier member of the gang took in this search, or one outside
    the member's matchAttribute scope, stays taken for the member (only what the snapshot
    holds is freed; else the next member would count its predecessor's device free again)."""
    values: dict[DeviceId, object] = {}
    # Value → the nodes with a device of it (None: some slice is not a single node's, so
    # every node stays a candidate): a scope's pods skip the nodes that cannot help.
    where: dict[object, set[str]] | None = {}
    if match_attribute:
        for entry in snapshot.slice_entries():
            node = entry.slice.spec.node_name
            for device in entry.entries:
                value = values[device.id] = device.attribute(match_attribute)
                if value is None or where is None:
                    continue
                if not node or device.scope is not None:
                    where = None
                else:
                    where.setdefault(value, set()).add(node)
    excluded: dict[object, frozenset[DeviceId]] = {}

    def outside(scope: Scope) -> frozenset[DeviceId]:
        if not match_attribute:
            return frozenset()
        if scope.value not in excluded:
            excluded[scope.value] = frozenset(d for d, v in values.items()
                                              if v is None or v != scope.value)
        return excluded[scope.value]

    spent = [0]
    ongoing: dict[Hashable, tuple[Placing, int]] = {}  # a paused evaluation, steps reported

    def options(i: int, scope: Scope, taken: frozenset[Hashable],
                used: frozenset[str]) -> tuple[Sequence[Choice[Pick]], int]:
        pod = pods[i]
        reach = where.get(scope.value, set()) if where is not None and match_attribute \
            else None
        nodes = [n for n in pod.nodes if scope.allows(n.name)
                 and not (spread and n.name in used) and (reach is None or n.name in reach)]
        if not pod.claims:
            return [Choice(n.name, frozenset(), Pick(Placement(n.name, (), [], {}), None))
                    for n in nodes], len(nodes)
        key = (i, scope, taken, used)
        placing, reported = ongoing.pop(key, (None, 0))
        if placing is None:
            ours = frozenset(d for d in taken if isinstance(d, DeviceId)) | outside(scope)
            placing = Placing(snapshot, pod.claims, nodes, in_flight=ours | pod.reserved,
                              node_steps=node_steps(max(1, len(nodes))) if node_steps
                              else None, scoring=pod.scoring, freed=freed - ours)
        left = max(1, steps - spent[0])
        allowance = search.allowance
        found: ClusterOutcome | None = placing.advance(
            left if allowance is None else min(left, allowance))
        if found is None:
            if allowance is not None and placing.steps - reported < left:
                ongoing.clear()  # one evaluation at a time: the search resumes this one
                ongoing[key] = (placing, placing.steps)
                spent[0] += placing.steps - reported
                raise Unfinished(placing.steps - reported)
            found = placing.give_up()  # the gang's budget is spent
        # Each node evaluated counts a step too: a count-only evaluation tries no device,
        # yet costs the event loop its time (the search slices by these steps).
        cost = placing.steps - reported + len(nodes)
        spent[0] += cost
        ordered = sorted(found.placements.values(), key=lambda p: (
            -p.preference, sum(p.free_after.values()), p.node))
        return [Choice(p.node, frozenset(p.devices), Pick(p, placing))
                for p in ordered], cost

    labels = {n.name: n.labels for pod in pods for n in pod.nodes}
    search = GangSearch(len(pods), options, scopes(
        node_labels=labels, topology_key=topology_key, attribute=match_attribute,
        attribute_values={v for v in values.values() if v is not None}, show=_shown),
        distinct_nodes=spread, scope_backtracks=SCOPE_BACKTRACKS * max(1, len(pods)))
    return search


def _shown(value: object) -> str:
    """An attribute's value as users wrote it (``nv-1``, not ``('string', 'nv-1')``)."""
    if isinstance(value, tuple) and len(value) == 2:
        return str(value[1])
    return str(value)
