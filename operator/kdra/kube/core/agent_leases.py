"""The node agent's heartbeat Leases: their names, label and annotations, and which pools a
Lease vouches for (the agent writes them, kdra.agent.heartbeat; the operator's slice
garbage collector and ``kdra check`` read them).

Invariants:
- Pure and deterministic: the same node(s) and driver always give the same Lease name, a
  valid object name however long the node names are (:func:`kdra.kube.core.names.bounded_name`).
- A Lease that names no driver or no node vouches for nothing (:func:`lease_pools`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from kdra import GROUP
from kdra.kube.core.names import bounded_name, dashed

AGENT_LEASE_LABEL = f"{GROUP}/agent-lease"
"""Label (value ``"true"``) on every node agent heartbeat Lease, for watching them."""
LEASE_NODE_ANNOTATION = f"{GROUP}/node"
LEASE_NODES_ANNOTATION = f"{GROUP}/nodes"
LEASE_DRIVER_ANNOTATION = f"{GROUP}/driver"
"""Annotations on a heartbeat Lease naming the pools it vouches for (node = pool name): one
node (an agent per node, the DaemonSet) or a comma-separated list (one agent process serving
many simulated nodes renews one Lease for all of them)."""


def lease_name(node: str, driver: str) -> str:
    """``kdra-agent-<node>-<driver-dashed>``: the heartbeat Lease of one node and driver."""
    return bounded_name(f"kdra-agent-{node}-{dashed(driver)}")


def shared_lease_name(nodes: Sequence[str], driver: str) -> str:
    """``kdra-agent-nodes-<digest>-<driver-dashed>``: the one heartbeat Lease of an agent
    process serving ``nodes`` (the same name after a restart with the same nodes)."""
    digest = hashlib.sha1("\n".join(sorted(nodes)).encode(),
                          usedforsecurity=False).hexdigest()[:10]
    return bounded_name(f"kdra-agent-nodes-{digest}-{dashed(driver)}")


def lease_pools(lease: Mapping[str, Any]) -> tuple[str | None, tuple[str, ...]]:
    """(driver, nodes) a heartbeat Lease vouches for; (None, ()) when it names none."""
    annotations = (lease.get("metadata") or {}).get("annotations") or {}
    driver = annotations.get(LEASE_DRIVER_ANNOTATION)
    many = annotations.get(LEASE_NODES_ANNOTATION)
    nodes = tuple(n for n in many.split(",") if n) if many else tuple(
        n for n in [annotations.get(LEASE_NODE_ANNOTATION)] if n)
    return (str(driver), nodes) if driver and nodes else (None, ())
