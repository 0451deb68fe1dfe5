"""The structured device allocator (upstream DRA "structured parameters": kubernetes/kubernetes
``staging/src/k8s.io/dynamic-resource-allocation/structured``).

A pure library over an in-memory :class:`Snapshot` of slices, classes and devices in use:

- :func:`allocate` — one node: results per claim, ``None`` (does not fit), or
  :class:`~kdra.dra.errors.AllocationError` (bad input);
- :func:`place` — many nodes for the binder: placements (with what a scorer needs) or a
  :class:`Reason` per node, and :func:`summarize` to explain a pod that fits nowhere;
  :class:`Placing` — the same in steps, within a budget (a bounded, resumable search);
- :func:`selector_matches` — core NodeSelector matching (also for pods' node selection);
- :func:`nearest_fits` — where a pod that fits nowhere would fit if devices were freed.

It follows upstream's allocator (Kubernetes 1.36, the incubating one), checked against
upstream's shared test table (``tests/unit/dra/upstream_cases.py``); where it differs on
purpose, docs/api-versions.md says so ("Where kdra differs from upstream").

The caller persists: nothing here talks to the API server. Modules, one job each:
``nodeselector`` (NodeSelector), ``pools`` (devices, slices, pools per node), ``gather``
(which pools a node sees, as upstream's GatherPools), ``snapshot`` (incremental indexes),
``prepared`` (classes resolved, selectors compiled), ``allmode`` (``All`` requests and the
checks before a node's search), ``search`` (per-node backtracking, resumable), ``busy``
(what a search treats as taken), ``choices`` (``firstAvailable`` alternatives, the one-node
entry point and its default budget), ``results`` (AllocationResult building, shares'
``shareID`` and ``consumedCapacity``, binding conditions), ``cluster`` (many nodes, budgets),
``diagnosis`` (reasons from counts; counters and capacity that ran out), ``reasons``,
``stats``, ``whatif`` (devices to free), ``placement`` (one node's answer), ``pacing``
(selector evaluations' run-time cost counted as search steps, paused between evaluations);
issue 26: ``counters`` (shared counters of
partitionable devices), ``capacity`` (consumable capacity and request policies), ``ledger``
(both, across allocated, assumed and searched devices), ``fragmentation`` (the candidate
order that keeps large partitions allocatable); issue 40: ``gang`` (joint placement of a
pod group, backtracking across pods, per constraint scope), ``gangplace`` (that search with
the allocator as each pod's options).
"""

from kdra.dra.allocator.choices import allocate, preference
from kdra.dra.allocator.cluster import ClusterOutcome, Placement, Placing, place, summarize
from kdra.dra.allocator.nodeselector import NodeInfo, node_name_selector, selector_matches
from kdra.dra.allocator.pools import DeviceId
from kdra.dra.allocator.reasons import (
    NO_NODES,
    Reason,
    ReasonCode,
    nodes_available,
    none_available,
)
from kdra.dra.allocator.snapshot import Snapshot, devices_in_use
from kdra.dra.allocator.stats import Stats
from kdra.dra.allocator.whatif import Freeing, WhatIf, nearest_fits

__all__ = [
    "NO_NODES",
    "ClusterOutcome",
    "DeviceId",
    "Freeing",
    "NodeInfo",
    "Placement",
    "Placing",
    "Reason",
    "ReasonCode",
    "Snapshot",
    "Stats",
    "WhatIf",
    "allocate",
    "devices_in_use",
    "nearest_fits",
    "node_name_selector",
    "nodes_available",
    "none_available",
    "place",
    "preference",
    "selector_matches",
    "summarize",
]
