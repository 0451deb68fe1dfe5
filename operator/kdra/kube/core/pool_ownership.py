"""Which node may speak for a pool: a node-local ResourceSlice never counts for the pool named
after *another* node.

kdra's node agents publish one pool per driver, named after the node (as upstream's kubelet
plugin helper does), and their ValidatingAdmissionPolicy (manifests/base/agent) holds them to
it: an agent may write only slices with ``spec.nodeName`` and ``spec.pool.name`` both its own
node. Pool names are otherwise free text, and devices are identified cluster-wide by
``driver/pool/device`` — in allocation results, taints, quotas — so a slice of node A in pool
``B`` (written before the policy, by hand, or with the policy removed) would speak for node
B's devices: taint them NoExecute (evicting B's pods), give them another capacity (a
DeviceQuota's usage) or a newer generation. Every reader that looks a device up by
driver and pool therefore drops such a slice first (:func:`speaks_for_pool`), and ``kdra
check`` names it (rule ``foreign-pool``).

A pool named after no node is not a node agent's (the agents' policy gives them only the pool
named after their node): upstream lets such a pool span nodes — slices for several nodes,
sharing counter sets and completing each other (issue 39) — and so does kdra. The readers
therefore pass the names of the nodes they know (``is_node``).

Slices without ``spec.nodeName`` (``allNodes``, ``nodeSelector``, per-device node selection)
are not node agents' (the policy refuses agents those) but an administrator's or a
network-attached driver's: they speak for their pool as upstream says.

Invariants:
- Pure and total: a malformed slice (no spec, a pool that is not an object) never raises; it
  is judged by what it says (a non-string node or pool name reads as empty).
- :func:`foreign_pool` is None exactly when :func:`speaks_for_pool` is true.
- Only a node-local slice whose pool is the name of another existing node is foreign.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["foreign_pool", "speaks_for_pool"]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _names(slice_: Mapping[str, Any]) -> tuple[str, str]:
    """(spec.nodeName, spec.pool.name), empty where absent or not strings."""
    spec = slice_.get("spec") if isinstance(slice_, Mapping) else None
    spec = spec if isinstance(spec, Mapping) else {}
    pool = spec.get("pool")
    pool = pool if isinstance(pool, Mapping) else {}
    return _text(spec.get("nodeName")), _text(pool.get("name"))


def foreign_pool(slice_: Mapping[str, Any], is_node: Callable[[str], bool]) -> str | None:
    """Why a node-local slice may not speak for its pool (None: it may). ``is_node(name)``:
    whether a node of that name exists."""
    node, pool = _names(slice_)
    if not node or pool == node or not is_node(pool):
        return None
    meta = slice_.get("metadata") if isinstance(slice_, Mapping) else None
    name = _text(meta.get("name")) if isinstance(meta, Mapping) else ""
    return (f"slice {name or '<unnamed>'} of node {node} publishes pool {pool or '<none>'!r}: "
            f"a node speaks only for the pool named after it ({node!r})")


def speaks_for_pool(slice_: Mapping[str, Any], is_node: Callable[[str], bool]) -> bool:
    """Whether the slice's devices count for its pool (see the module)."""
    return foreign_pool(slice_, is_node) is None

