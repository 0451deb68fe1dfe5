"""kdra.cli.core.describe: free vs allocated devices per pool, and what each claim holds.

Objects are raw API dicts (what the CLI reads), built by the small helpers below.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kdra.cli.core.describe import describe, render
from tests.unit.builders import device

GPU = "gpu.kdra.dev"
CATS = "resource-driver.example.com"


def raw_slice(node: str | None, *devices: dict[str, Any], driver: str = GPU,
              pool: str | None = None, generation: int = 0, count: int = 1,
              name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": driver, "devices": list(devices), "pool": {
        "name": pool or node or "shared", "generation": generation,
        "resourceSliceCount": count}}
    if node is None:
        spec["allNodes"] = True
    else:
        spec["nodeName"] = node
    return {"metadata": {"name": name or f"{spec['pool']['name']}-{driver}-g{generation}"},
            "spec": spec}


def gpus(count: int, product: str = "NVIDIA H100 80GB HBM3") -> list[dict[str, Any]]:
    return [device(f"gpu-{i}", index=i, productName=product) for i in range(count)]


def raw_claim(name: str, *devices: tuple[str, str, str, str], namespace: str = "default",
              node: str | None = None, pods: tuple[str, ...] = (),
              ready: dict[str, bool] | None = None, deleting: bool = False) -> dict[str, Any]:
    """``devices``: (request, driver, pool, device); ``ready``: device → Ready status."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {}
    if devices:
        allocation: dict[str, Any] = {"devices": {"results": [
            {"request": r, "driver": d, "pool": p, "device": dev} for r, d, p, dev in devices]}}
        if node:
            allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}
        status["allocation"] = allocation
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}
                                 for pod in pods]
        status["devices"] = [
            {"driver": d, "pool": p, "device": dev, "conditions": [
                {"type": "Ready", "status": "True" if (ready or {})[dev] else "False",
                 "reason": "Prepared", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
            for _, d, p, dev in devices if dev in (ready or {})]
    return {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaim",
            "metadata": meta, "spec": {"devices": {"requests": []}}, "status": status}


def counts(view: Any) -> dict[tuple[str, str], tuple[int, int, int]]:
    return {(p.node, p.pool): (p.total, p.allocated, p.free) for p in view.pools}


# --------------------------------------------------------------------------- pools


@pytest.mark.parametrize(("slices", "claims", "expected"), [
    pytest.param([], [], {}, id="nothing published"),
    pytest.param([raw_slice("worker-1", *gpus(8))], [], {("worker-1", "worker-1"): (8, 0, 8)},
                 id="all free"),
    pytest.param(
        [raw_slice("worker-1", *gpus(8)), raw_slice("worker-2", *gpus(8))],
        [raw_claim("a", ("gpu", GPU, "worker-1", "gpu-0"), ("gpu", GPU, "worker-1", "gpu-1")),
         raw_claim("b", ("gpu", GPU, "worker-2", "gpu-7"))],
        {("worker-1", "worker-1"): (8, 2, 6), ("worker-2", "worker-2"): (8, 1, 7)},
        id="allocations counted per pool"),
    pytest.param(
        [raw_slice("worker-1", *gpus(2))],
        [raw_claim("a", ("gpu", GPU, "worker-1", "gpu-0")),
         raw_claim("admin", ("gpu", GPU, "worker-1", "gpu-0"))],
        {("worker-1", "worker-1"): (2, 1, 1)},
        id="a device held by two claims counts once"),
    pytest.param(
        [raw_slice("worker-1", *gpus(8), generation=1),
         raw_slice("worker-1", *gpus(4), generation=2)],
        [], {("worker-1", "worker-1"): (4, 0, 4)},
        id="only the newest generation counts"),
    pytest.param(
        [raw_slice("worker-1", *gpus(2), name="a", count=2),
         raw_slice("worker-1", device("gpu-2"), device("gpu-3"), name="b", count=2)],
        [], {("worker-1", "worker-1"): (4, 0, 4)},
        id="slices of one pool add up"),
    pytest.param(
        [raw_slice(None, device("nic-0"), pool="fabric", driver="net.example.com")],
        [], {("<all nodes>", "fabric"): (1, 0, 1)},
        id="network-attached pool"),
    pytest.param(
        [raw_slice("worker-1", *gpus(2))],
        [raw_claim("pending")], {("worker-1", "worker-1"): (2, 0, 2)},
        id="a pending claim holds nothing"),
])
def test_pool_counts(slices: list[dict[str, Any]], claims: list[dict[str, Any]],
                     expected: dict[tuple[str, str], tuple[int, int, int]]) -> None:
    assert counts(describe(slices, claims)) == expected


def test_incomplete_pool_is_marked() -> None:
    view = describe([raw_slice("worker-1", *gpus(2), count=2)], [])
    assert not view.pools[0].complete
    assert "0 (incomplete)" in render(view)


def test_device_holders_name_claim_request_pods_and_readiness() -> None:
    view = describe(
        [raw_slice("worker-1", *gpus(3))],
        [raw_claim("shared", ("gpu", GPU, "worker-1", "gpu-1"), pods=("p1", "p2"),
                   node="worker-1", ready={"gpu-1": True}),
         raw_claim("solo", ("big", GPU, "worker-1", "gpu-2"), namespace="team",
                   pods=("q",), ready={"gpu-2": False})])
    by_name = {d.name: d for d in view.pools[0].devices}
    assert by_name["gpu-0"].state == "free"
    (holder,) = by_name["gpu-1"].holders
    assert (holder.claim, holder.request, holder.pods, holder.ready) == (
        "default/shared", "gpu", ("default/p1", "default/p2"), True)
    assert by_name["gpu-2"].holders[0].claim == "team/solo"
    assert by_name["gpu-2"].holders[0].ready is False
    assert by_name["gpu-0"].details == "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(("claim", "state"), [
    (raw_claim("c"), "pending"),
    (raw_claim("c", ("gpu", GPU, "worker-1", "gpu-0")), "allocated"),
    (raw_claim("c", ("gpu", GPU, "worker-1", "gpu-0"), pods=("p",)), "reserved"),
    (raw_claim("c", ("gpu", GPU, "worker-1", "gpu-0"), pods=("p",), deleting=True), "deleting"),
])
def test_claim_states(claim: dict[str, Any], state: str) -> None:
    assert describe([], [claim]).claims[0].state == state


def test_claim_rows_show_devices_node_readiness_and_stale_devices() -> None:
    view = describe(
        [raw_slice("worker-1", *gpus(2))],
        [raw_claim("two", ("gpus", GPU, "worker-1", "gpu-0"), ("gpus", GPU, "worker-1", "gpu-1"),
                   node="worker-1", pods=("trainer",), ready={"gpu-0": True, "gpu-1": False}),
         raw_claim("stale", ("gpu", GPU, "gone-node", "gpu-0"), node="gone-node")])
    two, stale = sorted(view.claims, key=lambda c: c.name, reverse=True)
    assert two.node == "worker-1"
    assert [str(d) for d in two.devices] == ["gpu.kdra.dev/worker-1/gpu-0",
                                             "gpu.kdra.dev/worker-1/gpu-1"]
    assert two.ready == 1
    assert all(d.published for d in two.devices)
    assert not stale.devices[0].published
    text = render(view)
    assert "gpu.kdra.dev/gone-node/gpu-0 (not published)" in text
    assert "1/2" in text


def test_filters_by_node_and_driver() -> None:
    slices = [raw_slice("worker-1", *gpus(2)), raw_slice("worker-2", *gpus(2)),
              raw_slice("worker-1", device("kitten-0", color="white"), driver=CATS)]
    claims = [raw_claim("on-1", ("gpu", GPU, "worker-1", "gpu-0"), node="worker-1"),
              raw_claim("on-2", ("gpu", GPU, "worker-2", "gpu-0"), node="worker-2"),
              raw_claim("cat", ("cat", CATS, "worker-1", "kitten-0"), node="worker-1"),
              raw_claim("pending")]
    on_1 = describe(slices, claims, node="worker-1")
    assert {(p.node, p.driver) for p in on_1.pools} == {("worker-1", GPU), ("worker-1", CATS)}
    assert [c.name for c in on_1.claims] == ["cat", "on-1"]
    gpus_only = describe(slices, claims, driver=GPU)
    assert {p.driver for p in gpus_only.pools} == {GPU}
    assert [c.name for c in gpus_only.claims] == ["on-1", "on-2"]
    assert [c.name for c in describe(slices, claims).claims] == ["cat", "on-1", "on-2",
                                                                "pending"]


def test_details_fall_back_to_string_attributes() -> None:
    cats = raw_slice("worker-1", device("kitten-0", color="white", size="small"), driver=CATS)
    assert describe([cats], []).pools[0].devices[0].details == "color=white,size=small"


def test_devices_sort_naturally() -> None:
    view = describe([raw_slice("worker-1", *reversed(gpus(12)))], [])
    assert [d.name for d in view.pools[0].devices][:3] == ["gpu-0", "gpu-1", "gpu-2"]
    assert view.pools[0].devices[-1].name == "gpu-11"


def test_malformed_objects_do_not_fail() -> None:
    view = describe([{"metadata": {"name": "x"}}, {"spec": {"pool": "nonsense"}}],
                    [{"metadata": {"name": "c"}, "status": {"allocation": {"devices": 7}}},
                     {}])
    assert render(view)
    assert json.dumps(view.to_json())


def test_render_tables() -> None:
    view = describe(
        [raw_slice("worker-1", *gpus(2))],
        [raw_claim("train", ("gpu", GPU, "worker-1", "gpu-1"), node="worker-1",
                   pods=("trainer",), ready={"gpu-1": True})])
    lines = render(view).splitlines()
    assert lines[0].split() == ["NODE", "DRIVER", "POOL", "GENERATION", "DEVICES",
                                "ALLOCATED", "FREE"]
    assert lines[1].split() == ["worker-1", GPU, "worker-1", "0", "2", "1", "1"]
    device_rows = [line.split() for line in lines
                   if line.startswith("worker-1   gpu.kdra.dev/worker-1")]
    assert device_rows[0][2:3] + device_rows[0][-5:] == ["gpu-0", "free", "-", "-", "-", "-"]
    assert device_rows[1][2:3] + device_rows[1][-5:] == [
        "gpu-1", "allocated", "default/train", "gpu", "default/trainer", "True"]
    assert lines[-1].split() == ["default", "train", "reserved", "worker-1",
                                 "gpu.kdra.dev/worker-1/gpu-1", "1/1", "trainer"]
    summary = render(view, devices=False)
    assert "gpu-0" not in summary


def test_render_says_when_there_is_nothing() -> None:
    text = render(describe([], []))
    assert "No ResourceSlices" in text
    assert "No ResourceClaims" in text


def test_json_shape() -> None:
    view = describe([raw_slice("worker-1", *gpus(2))],
                    [raw_claim("c", ("gpu", GPU, "worker-1", "gpu-0"), pods=("p",),
                               node="worker-1")])
    data = json.loads(json.dumps(view.to_json()))
    (pool,) = data["pools"]
    assert {k: pool[k] for k in ("node", "driver", "pool", "total", "allocated", "free",
                                 "complete")} == {
        "node": "worker-1", "driver": GPU, "pool": "worker-1", "total": 2, "allocated": 1,
        "free": 1, "complete": True}
    assert pool["devices"][0]["claims"] == [
        {"claim": "default/c", "request": "gpu", "pods": ["default/p"], "ready": None,
         "adminAccess": False}]
    assert data["claims"][0]["devices"] == [
        {"request": "gpu", "driver": GPU, "pool": "worker-1", "device": "gpu-0", "ready": None,
         "published": True, "adminAccess": False}]


def test_unhealthy_devices_show_their_taints() -> None:
    """Issue 25: the agent's health taint (and any acting taint) shows beside the state."""
    sick, lost, informational = gpus(3)
    sick["taints"] = [{"key": "gpu.kdra.dev/unhealthy", "value": "XID-48",
                       "effect": "NoSchedule"}]
    lost["taints"] = [{"key": "gpu.kdra.dev/unhealthy", "value": "DeviceLost",
                       "effect": "NoExecute"}]
    informational["taints"] = [{"key": "note", "effect": "None"}]
    view = describe([raw_slice("worker-1", sick, lost, informational)],
                    [raw_claim("c", ("gpu", GPU, "worker-1", lost["name"]), pods=("p",),
                               node="worker-1")])
    (pool,) = view.pools
    assert (pool.total, pool.allocated, pool.free) == (3, 1, 1)  # the tainted free one: no
    states = [d.state for d in view.pools[0].devices]
    assert states == ["free (tainted gpu.kdra.dev/unhealthy=XID-48:NoSchedule)",
                      "allocated (tainted gpu.kdra.dev/unhealthy=DeviceLost:NoExecute)",
                      "free"]
    text = render(view)
    assert "free (tainted gpu.kdra.dev/unhealthy=XID-48:NoSchedule)" in text
    assert view.to_json()["pools"][0]["devices"][1]["taints"] == [
        "gpu.kdra.dev/unhealthy=DeviceLost:NoExecute"]


def test_a_prioritized_claims_devices_carry_the_chosen_alternatives_class() -> None:
    from kdra.dra.usage.claims import claims_of

    claim = raw_claim("c", ("gpu/small", GPU, "node-a", "gpu-0"), ("cat", CATS, "w", "k-0"))
    claim["spec"] = {"devices": {"requests": [
        {"name": "gpu", "firstAvailable": [{"name": "big", "deviceClassName": "h100"},
                                           {"name": "small", "deviceClassName": "a100"}]},
        {"name": "cat", "exactly": {"deviceClassName": "cats"}}]}}
    (row,) = claims_of([claim])
    assert [d.device_class for d in row.devices] == ["a100", "cats"]


def test_admin_access_holds_no_device() -> None:
    """Issue 41: a device a pod uses and a monitor sees through admin access is listed once,
    as the pod's claim's; the monitor's claim says how it sees its devices."""
    train = raw_claim("train", ("gpu", GPU, "worker-1", "gpu-0"), pods=("p",), node="worker-1")
    monitor = raw_claim("monitor", ("gpus", GPU, "worker-1", "gpu-0"),
                        ("gpus", GPU, "worker-1", "gpu-1"), pods=("m",), node="worker-1")
    monitor["spec"] = {"devices": {"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": GPU, "allocationMode": "All", "adminAccess": True}}]}}
    view = describe([raw_slice("worker-1", *gpus(2))], [train, monitor])
    (pool,) = view.pools
    assert (pool.total, pool.allocated, pool.free) == (2, 1, 1)
    assert [d.state for d in pool.devices] == ["allocated", "free"]
    text = render(view)
    device_rows = [line.split() for line in text.splitlines()
                   if line.startswith(f"worker-1   {GPU}/worker-1")]
    assert [(r[2], r[-4]) for r in device_rows] == [("gpu-0", "default/train"),
                                                    ("gpu-1", "-")]
    assert f"{GPU}/worker-1/gpu-0 (admin access),{GPU}/worker-1/gpu-1 (admin access)" in text
    data = view.to_json()
    holders = data["pools"][0]["devices"][0]["claims"]
    assert [(h["claim"], h["adminAccess"]) for h in holders] == [
        ("default/train", False), ("default/monitor", True)]
