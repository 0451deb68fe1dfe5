"""Issue 39, points 1 and 6 at the binder: the allocator's snapshot is built from every slice
the binder sees (its watch has no selector), so a pool spread over nodes is whole for each
node's search — counters held by another node's devices count, and the pool is complete.

The slices and the allocated claim come in as the watch delivers them (raw JSON), through
:class:`~kdra.operator.scheduler.cluster.ClusterView`, and the binder's entry point into the
allocator (:class:`~kdra.dra.allocator.Placing`) decides."""

from __future__ import annotations

from typing import Any

from kdra.dra.allocator import NodeInfo, Placing
from kdra.dra.models import parse_claim
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler.cluster import ClusterView

DRIVER = "fabric.kdra.dev"
POOL = {"name": "shared", "generation": 1, "resourceSliceCount": 3}


def raw_slice(name: str, node: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
            "metadata": {"name": name, "resourceVersion": "1"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": POOL, **spec}}


def partition(name: str, amount: str) -> dict[str, Any]:
    return {"name": name, "capacity": {"memory": {"value": amount}},
            "consumesCounters": [{"counterSet": "gpu", "counters": {
                "memory": {"value": amount}}}]}


def claim(name: str, device: str | None = None, memory: str = "6Gi") -> dict[str, Any]:
    raw: dict[str, Any] = {
        "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                     "resourceVersion": "3"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "fabric", "selectors": [{"cel": {"expression":
                f'device.capacity["{DRIVER}"].memory == quantity("{memory}")'}}]}}]}}}
    if device is not None:
        raw["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": "shared", "device": device}]}}}
    return raw


def cluster() -> ClusterView:
    view = ClusterView(claim_store())
    view.on_class(None, {"metadata": {"name": "fabric"}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
    view.on_slice(None, raw_slice("shared-counters", "node-1", sharedCounters=[
        {"name": "gpu", "counters": {"memory": {"value": "8Gi"}}}]))
    view.on_slice(None, raw_slice("shared-node-1", "node-1",
                                  devices=[partition("a6", "6Gi"), partition("a2", "2Gi")]))
    view.on_slice(None, raw_slice("shared-node-2", "node-2", devices=[partition("b6", "6Gi")]))
    return view


def fits(view: ClusterView, raw: dict[str, Any], node: str) -> list[str]:
    outcome = Placing(view.snapshot, [parse_claim(raw)], [NodeInfo(node)]).advance(None)
    assert outcome is not None
    return [r.device for p in outcome.placements.values() for r in p.results[0].devices.results]


def test_counters_held_on_another_node_count_in_the_binder() -> None:
    view = cluster()
    assert fits(view, claim("want"), "node-1") == ["a6"]
    view.snapshot_claim(claim("held", device="b6"))  # 6 of the 8Gi, on node-2
    assert fits(view, claim("want"), "node-1") == []
    assert fits(view, claim("small", memory="2Gi"), "node-1") == ["a2"]


def test_a_pool_spread_over_nodes_is_complete_for_each_node() -> None:
    """Node-1 sees two of the pool's three slices; the third, node-2's, makes it complete
    (an incomplete pool would offer no device)."""
    view = cluster()
    assert fits(view, claim("want", memory="2Gi"), "node-1") == ["a2"]
    view.on_slice("DELETED", raw_slice("shared-node-2", "node-2", devices=[]))
    assert fits(view, claim("want", memory="2Gi"), "node-1") == []
