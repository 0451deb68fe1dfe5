"""The slice garbage collector's rules, and how it reads agent Leases over time."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kdra.kube.core.agent_leases import (
    AGENT_LEASE_LABEL,
    LEASE_DRIVER_ANNOTATION,
    LEASE_NODE_ANNOTATION,
    LEASE_NODES_ANNOTATION,
)
from kdra.operator.slice_gc import LeaseState, SliceGC, decide

GPU = "gpu.kdra.dev"


def slice_(name: str, generation: int = 0, count: int = 1, node: str | None = "node-1",
           pool: str = "node-1", driver: str = GPU) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver,
                            "pool": {"name": pool, "generation": generation,
                                     "resourceSliceCount": count}}
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
            "spec": spec}


def judge(slices: list[dict[str, Any]], *, nodes: set[str] | None = None,
          lease: LeaseState = "none") -> list[tuple[str, str]]:
    existing = {"node-1"} if nodes is None else nodes
    return [(d.slice["metadata"]["name"], d.reason) for d in decide(
        slices, node_exists=lambda n: n in existing, lease_state=lambda d, n: lease)]


def test_node_gone() -> None:
    assert judge([slice_("a"), slice_("b")], nodes=set(), lease="live") == [
        ("a", "node-gone"), ("b", "node-gone")]


def test_lease_expired_beyond_grace_only() -> None:
    slices = [slice_("a"), slice_("b", count=2), slice_("c", count=2)]
    assert judge(slices, lease="expired") == [("a", "lease-expired"), ("b", "lease-expired"),
                                              ("c", "lease-expired")]
    assert judge(slices, lease="grace") == []
    assert judge(slices, lease="live") == []


OLD_AND_NEW = [slice_("old-0", 3, 2), slice_("old-1", 3, 2), slice_("new-0", 4, 1)]


@pytest.mark.parametrize(("lease", "expected"), [
    ("none", [("old-0", "old-generation"), ("old-1", "old-generation")]),
    ("live", []),   # a live agent's slices are never touched
    ("grace", []),  # nor those of an agent that may be restarting
])
def test_old_generation_once_the_new_one_is_complete(lease: LeaseState,
                                                     expected: list[tuple[str, str]]) -> None:
    assert judge(OLD_AND_NEW, lease=lease) == expected


def test_incomplete_new_generation_keeps_the_old_one() -> None:
    slices = [slice_("old-0", 3, 1), slice_("new-0", 4, 2)]
    assert judge(slices) == []


def test_pool_without_node_is_judged_by_generation_only() -> None:
    slices = [slice_("old", 1, 1, node=None, pool="shared"),
              slice_("new", 2, 1, node=None, pool="shared")]
    assert judge(slices, nodes=set()) == [("old", "old-generation")]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lease(renew: dt.datetime, duration: int = 10, node: str = "node-1",
          namespace: str = "kdra-system", label: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": f"kdra-agent-{node}-gpu-kdra-dev", "namespace": namespace,
                         "labels": {AGENT_LEASE_LABEL: "true"} if label else {},
                         "annotations": {LEASE_NODE_ANNOTATION: node,
                                         LEASE_DRIVER_ANNOTATION: GPU}},
            "spec": {"holderIdentity": "agent", "leaseDurationSeconds": duration,
                     "renewTime": renew.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def gc(clock: Clock) -> SliceGC:
    return SliceGC(None, namespace="kdra-system", grace=5, clock=clock)  # type: ignore[arg-type]


def test_lease_states_over_time() -> None:
    clock = Clock()
    collector = gc(clock)
    assert collector.lease_state(GPU, "node-1") == "none"
    collector.on_lease("ADDED", lease(dt.datetime.now(dt.UTC)))
    assert collector.lease_state(GPU, "node-1") == "live"
    clock.now += 10.5
    assert collector.lease_state(GPU, "node-1") == "grace"
    clock.now += 5
    assert collector.lease_state(GPU, "node-1") == "expired"
    collector.on_lease("MODIFIED", lease(dt.datetime.now(dt.UTC)))  # the agent is back
    assert collector.lease_state(GPU, "node-1") == "live"


def test_released_lease_is_expired_at_once_but_grace_still_runs() -> None:
    clock = Clock()
    collector = gc(clock)
    collector.on_lease("ADDED", lease(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=10)))
    assert collector.lease_state(GPU, "node-1") == "grace"
    clock.now += 5.1
    assert collector.lease_state(GPU, "node-1") == "expired"


def test_agent_clock_ahead_cannot_extend_the_lease() -> None:
    clock = Clock()
    collector = gc(clock)
    collector.on_lease("ADDED", lease(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)))
    clock.now += 10 + 5 + 0.1
    assert collector.lease_state(GPU, "node-1") == "expired"


def test_deleted_lease_expires_now_and_foreign_leases_are_ignored() -> None:
    clock = Clock()
    collector = gc(clock)
    collector.on_lease("ADDED", lease(dt.datetime.now(dt.UTC), node="other",
                                      namespace="kube-node-lease"))
    collector.on_lease("ADDED", lease(dt.datetime.now(dt.UTC), node="other", label=False))
    assert collector.lease_state(GPU, "other") == "none"
    collector.on_lease("ADDED", lease(dt.datetime.now(dt.UTC)))
    collector.on_lease("DELETED", lease(dt.datetime.now(dt.UTC)))
    assert collector.lease_state(GPU, "node-1") == "grace"


def shared_lease(renew: dt.datetime, nodes: list[str], duration: int = 10) -> dict[str, Any]:
    """The one Lease of an agent process serving many simulated nodes."""
    return {"metadata": {"name": "kdra-agent-nodes-0123456789-gpu-kdra-dev",
                         "namespace": "kdra-system", "labels": {AGENT_LEASE_LABEL: "true"},
                         "annotations": {LEASE_NODES_ANNOTATION: ",".join(nodes),
                                         LEASE_DRIVER_ANNOTATION: GPU}},
            "spec": {"holderIdentity": "agent", "leaseDurationSeconds": duration,
                     "renewTime": renew.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


def test_a_shared_lease_vouches_for_every_node_it_names() -> None:
    clock = Clock()
    collector = gc(clock)
    collector.on_lease("ADDED", shared_lease(dt.datetime.now(dt.UTC), ["n-0", "n-1", "n-2"]))
    assert [collector.lease_state(GPU, n) for n in ("n-0", "n-1", "n-2", "n-3")] == [
        "live", "live", "live", "none"]
    clock.now += 15.1
    assert collector.lease_state(GPU, "n-1") == "expired"
    collector.on_lease("DELETED", shared_lease(dt.datetime.now(dt.UTC), ["n-0", "n-1", "n-2"]))
    assert collector.lease_state(GPU, "n-2") == "expired"


def test_the_freshest_lease_naming_a_node_counts() -> None:
    # The agent moved from per-node Leases to a shared one: the old per-node Lease (expired,
    # never renewed again) must not condemn the node's slices, whatever order they come in.
    clock = Clock()
    collector = gc(clock)
    now = dt.datetime.now(dt.UTC)
    collector.on_lease("ADDED", shared_lease(now, ["node-1", "node-2"]))
    collector.on_lease("ADDED", lease(now - dt.timedelta(hours=1)))
    clock.now += 6
    assert collector.lease_state(GPU, "node-1") == "live"
    collector.on_lease("DELETED", lease(now - dt.timedelta(hours=1)))
    assert collector.lease_state(GPU, "node-1") == "live"
    # ... and the other way round: a fresh per-node Lease over an old shared one.
    other = gc(Clock())
    other.on_lease("ADDED", lease(now))
    other.on_lease("ADDED", shared_lease(now - dt.timedelta(hours=1), ["node-1"]))
    assert other.lease_state(GPU, "node-1") == "live"
