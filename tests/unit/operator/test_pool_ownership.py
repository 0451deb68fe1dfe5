"""A node speaks only for the pool named after it (issue 36: an agent on node A published
a slice of its own node in pool B — a huge generation, NoExecute taints, 1000Ti of memory —
and the operator's readers, looking devices up by driver and pool, took it for node B's):
kdra.kube.core.pool_ownership, and the readers that drop such a slice — the binder's view (its
slices, snapshot and quota facts), the taint eviction controller, the slice GC — and ``kdra
check``."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.checks import check
from kdra.kube.core.pool_ownership import foreign_pool, speaks_for_pool
from kdra.kube.store import Store
from kdra.operator.caches import claim_store
from kdra.operator.scheduler.cluster import ClusterView
from kdra.operator.slice_gc import decide
from kdra.operator.taint_eviction import TaintEvictionController

GPU = "gpu.kdra.dev"
NODES = ("node-a", "node-b")


def is_node(name: str) -> bool:
    return name in NODES


def node_store() -> Store:
    nodes = Store("Node")
    for name in NODES:
        nodes.upsert({"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"}})
    return nodes


def slice_(name: str, node: str | None, pool: str, *, generation: int = 0, version: str = "1",
           memory: str = "80Gi", taint: bool = False) -> dict[str, Any]:
    device: dict[str, Any] = {"name": "gpu-0", "capacity": {"memory": {"value": memory}}}
    if taint:
        device["taints"] = [{"key": "gpu.kdra.dev/unhealthy", "effect": "NoExecute"}]
    spec: dict[str, Any] = {"driver": GPU, "devices": [device],
                            "pool": {"name": pool, "generation": generation,
                                     "resourceSliceCount": 1}}
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": version},
            "spec": spec}


@pytest.mark.parametrize(("obj", "speaks"), [
    (slice_("a", "node-a", "node-a"), True),
    (slice_("a", "node-a", "node-b"), False),
    (slice_("net", None, "fabric"), True),  # not node-local: an administrator's pool
    # A pool named after no node may span nodes, as upstream's (issue 39).
    (slice_("s", "node-a", "shared"), True),
    ({"spec": {"nodeName": "node-a", "pool": "node-a"}}, True),  # malformed: no pool name
    ({"spec": {"nodeName": 7, "pool": {"name": "x"}}}, True),  # no usable node name
    ({}, True),
])
def test_a_node_local_slice_speaks_only_for_its_nodes_pool(obj: dict[str, Any],
                                                           speaks: bool) -> None:
    assert speaks_for_pool(obj, is_node) is speaks
    assert (foreign_pool(obj, is_node) is None) is speaks


def test_the_reason_names_the_slice_its_node_and_the_pool() -> None:
    assert foreign_pool(slice_("forged", "node-a", "node-b"), is_node) == (
        "slice forged of node node-a publishes pool 'node-b': a node speaks only for the pool "
        "named after it ('node-a')")


def test_the_binder_ignores_another_nodes_pool_until_the_slice_speaks_for_its_own() -> None:
    view = ClusterView(claim_store())
    for node in node_store():
        view.on_node(None, node)
    view.on_slice(None, slice_("real", "node-b", "node-b"))
    forged = slice_("forged", "node-a", "node-b", generation=2_000_000_000, memory="1000Ti")
    view.on_slice("ADDED", forged)
    assert [s["metadata"]["name"] for s in view.slices.index("pool", f"{GPU}/node-b")] == [
        "real"]
    assert [s.metadata.name for s in view.snapshot.slices()] == ["real"]
    facts = view.quotas.facts(GPU, "node-b", "gpu-0")
    assert facts is not None and str(facts.capacity["memory"]) == "80Gi"
    # The same slice, now in its own node's pool (a later version): taken, not buried.
    view.on_slice("MODIFIED", slice_("forged", "node-a", "node-a", version="2"))
    assert sorted(s.metadata.name for s in view.snapshot.slices()) == ["forged", "real"]
    assert [s["metadata"]["name"] for s in view.slices.index("pool", f"{GPU}/node-a")] == [
        "forged"]
    # Moved into another node's pool again: gone again.
    view.on_slice("MODIFIED", slice_("forged", "node-a", "node-b", version="3"))
    assert [s.metadata.name for s in view.snapshot.slices()] == ["real"]


def test_taint_eviction_sees_only_taints_of_the_nodes_own_pool() -> None:
    controller = TaintEvictionController(
        None, None, claims=claim_store(), pods=Store("Pod"),  # type: ignore[arg-type]
        nodes=node_store())
    controller.prime(slices=[slice_("real", "node-b", "node-b"),
                             slice_("forged", "node-a", "node-b", generation=9, taint=True)],
                     rules=[])
    assert controller.taints(GPU, "node-b", "gpu-0") == []
    controller.on_slice("MODIFIED", slice_("own", "node-b", "node-b", generation=1,
                                           taint=True))
    assert [t.effect for t in controller.taints(GPU, "node-b", "gpu-0")] == ["NoExecute"]


def test_the_slice_gc_lets_no_other_node_supersede_or_keep_a_pool() -> None:
    def judge(slices: list[dict[str, Any]], live: set[str]) -> list[tuple[str, str]]:
        return [(d.slice["metadata"]["name"], d.reason) for d in decide(
            slices, node_exists=lambda n: True,
            lease_state=lambda d, n: "live" if n in live else "none")]

    real = slice_("real", "node-b", "node-b", generation=1)
    newer = slice_("forged", "node-a", "node-b", generation=2_000_000_000)
    # A complete, newer generation from node A does not get node B's slices deleted...
    assert judge([real, newer], live=set()) == []
    # ... and node A's live agent does not keep node B's old generation alive.
    old = slice_("old", "node-b", "node-b", generation=0)
    assert judge([old, real, newer], live={"node-a"}) == [("old", "old-generation")]


def test_kdra_check_names_a_foreign_slice_and_stray_device_statuses() -> None:
    nodes = [{"metadata": {"name": n}} for n in ("node-a", "node-b")]
    claim = {"metadata": {"namespace": "ns", "name": "c"},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "r", "driver": GPU, "pool": "node-b", "device": "gpu-0"}]}},
                 "reservedFor": [],
                 "devices": [{"driver": GPU, "pool": "node-b", "device": "gpu-0"},
                             {"driver": GPU, "pool": "node-a", "device": "gpu-0"}]}}
    found = check(slices=[slice_("real", "node-b", "node-b"),
                          slice_("forged", "node-a", "node-b")], claims=[claim], nodes=nodes)
    assert [(v.rule, v.message) for v in found] == [
        ("foreign-pool", "slice forged of node node-a publishes pool 'node-b': a node speaks "
                         "only for the pool named after it ('node-a')"),
        ("unallocated-device-status", "claim ns/c reports devices it is not allocated: "
                                      "gpu.kdra.dev/node-a/gpu-0")]


def test_kubectl_kdra_free_and_why_see_what_the_scheduler_sees() -> None:
    from kdra.cli.kubectl_commands import Session

    class Nodes:
        """The one read own_pools makes: the nodes."""

        def list(self, kind: Any, namespace: str | None = None) -> list[dict[str, Any]]:
            return [{"metadata": {"name": name}} for name in NODES]

    session = Session(Nodes())  # type: ignore[arg-type]
    real, forged = slice_("real", "node-b", "node-b"), slice_("forged", "node-a", "node-b")
    assert session.own_pools([real, forged]) == [real]
    assert session.notes == ["ignored slice forged of node node-a publishes pool 'node-b': a "
                             "node speaks only for the pool named after it ('node-a')"]
    assert session.own_pools(None) is None


def test_a_bad_device_status_does_not_free_the_claims_devices() -> None:
    """Issue 36: what a driver writes into status.devices must not make the binder drop the
    claim's allocation (its device would be allocated a second time)."""
    view = ClusterView(claim_store())
    view.on_slice(None, slice_("real", "node-b", "node-b"))
    claim = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
             "metadata": {"namespace": "ns", "name": "c", "uid": "u", "resourceVersion": "5"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": GPU}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "gpu", "driver": GPU, "pool": "node-b", "device": "gpu-0"}]}},
                 "devices": [{"driver": GPU, "pool": "node-b", "device": "gpu-0",
                              "conditions": [{"type": "Ready", "status": ["not", "a", "str"]}],
                              "data": {"kdra.dev/undecodable": "too deep"}}]}}
    view.snapshot_claim(claim)
    assert view.snapshot.in_use((GPU, "node-b", "gpu-0"))  # type: ignore[arg-type]
    assert view.parse(claim).status.devices == ()
