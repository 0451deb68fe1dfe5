"""``kdra describe`` for partitioned and shared GPUs: partitions in use, counters used/total,
shares and their consumers."""

from __future__ import annotations

from typing import Any

from kdra.agent.core.inventory import parse_inventory
from kdra.agent.core.publication import build_slices
from kdra.cli.core.describe import describe, render

GPU = "gpu.kdra.dev"


def slices(text: str, node: str = "n1") -> list[dict[str, Any]]:
    devices = parse_inventory(text, node).devices
    return build_slices(node=node, driver=GPU, devices=devices, generation=1)


def claim(name: str, *results: dict[str, Any], pods: tuple[str, ...] = ("p",)) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": name},
            "status": {"allocation": {"devices": {"results": [
                {"request": "r", "driver": GPU, "pool": "n1", **r} for r in results]}},
                "reservedFor": [{"resource": "pods", "name": p, "uid": p} for p in pods]}}


def test_partitioned_gpus_show_partitions_in_use_and_counters() -> None:
    view = describe(slices("gpus: [{profile: H100-80GB, count: 2, partitions: mig}]"), [
        claim("a", {"device": "gpu-0-mig-3g-40gb-4"}),
        claim("b", {"device": "gpu-0-mig-1g-10gb-0"}),
        claim("c", {"device": "gpu-0-mig-1g-10gb-1", "adminAccess": True}),  # counts nothing
        claim("d", {"device": "gpu-1"}),
    ])
    gpu0, gpu1 = view.gpus
    assert (gpu0.gpu, gpu0.partitions) == ("gpu-0", 15)
    assert [(u.device, u.claim) for u in gpu0.allocated] == [
        ("gpu-0-mig-1g-10gb-0", "ns/b"), ("gpu-0-mig-3g-40gb-4", "ns/a")]
    counters = {name: (used, total) for name, used, total in gpu0.counters}
    assert counters["memory-slices"] == ("5", "8")
    assert counters["compute-slices"] == ("4", "7")
    assert gpu0.counter_text() == ("compute-slices 4/7, memory-slices 5/8, "
                                   "memory-slice-[0-7] #...####")
    assert {name: used for name, used, _ in gpu1.counters}["compute-slices"] == "7"
    text = render(view)
    assert "COUNTERS (USED/TOTAL)" in text
    assert "gpu-0-mig-1g-10gb-0 (ns/b),gpu-0-mig-3g-40gb-4 (ns/a)" in text
    data = view.to_json()
    assert data["partitionedGPUs"][0]["counters"]["memory-slices"] == {"used": "5",
                                                                       "total": "8"}
    # Free partitions with no room left are blocked, named by the counter that is short.
    (pool,) = view.pools
    states = {d.name: d.state for d in pool.devices}
    assert states["gpu-0"] == "blocked (gpu-0 compute-slices in use)"
    assert states["gpu-0-mig-3g-40gb-0"] == "blocked (gpu-0 memory-slice-0 in use)"
    assert states["gpu-0-mig-2g-20gb-2"] == "free"  # slices 2-3 are free, 3 compute left
    assert states["gpu-1-mig-1g-10gb-0"] == "blocked (gpu-1 compute-slices in use)"
    # Seen through admin access: held by nobody, so free (issue 41; upstream's rule).
    assert states["gpu-0-mig-1g-10gb-1"] == "free"
    free = {d.name for d in pool.devices if d.state == "free"}
    assert free == {"gpu-0-mig-1g-10gb-1", "gpu-0-mig-1g-10gb-2", "gpu-0-mig-1g-10gb-3",
                    "gpu-0-mig-2g-20gb-2"}
    assert pool.free == 4
    assert "gpu-0-mig-1g-10gb-1 (admin access)" in text  # the claims table says how c sees it
    assert next(d for d in data["pools"][0]["devices"] if d["name"] == "gpu-0")["blocked"] \
        == "gpu-0 compute-slices"


def test_shared_devices_show_each_share_and_the_capacity_used() -> None:
    view = describe(slices("gpus: [{profile: H100-80GB, count: 2, sharing: memory}]"), [
        claim("a", {"device": "gpu-0", "shareID": "s-a",
                    "consumedCapacity": {"memory": "20Gi"}}, pods=("train",)),
        claim("b", {"device": "gpu-0", "shareID": "s-b",
                    "consumedCapacity": {"memory": "40Gi"}}, pods=("serve",)),
    ])
    gpu0, gpu1 = view.shared
    assert gpu0.capacity == (("memory", "60Gi", "80Gi"),)
    assert [(s.claim, s.share_id, s.pods) for s in gpu0.shares] == [
        ("ns/a", "s-a", ("ns/train",)), ("ns/b", "s-b", ("ns/serve",))]
    assert gpu1.shares == () and gpu1.capacity == (("memory", "0", "80Gi"),)
    lines = [line.split() for line in render(view).splitlines() if "s-a" in line
             or "s-b" in line]
    assert [line[-4:] for line in lines] == [["s-a", "ns/a", "train", "memory=20Gi"],
                                             ["s-b", "ns/b", "serve", "memory=40Gi"]]
    assert view.to_json()["sharedDevices"][0]["shares"][1]["consumedCapacity"] == {
        "memory": "40Gi"}


def test_malformed_counters_and_claims_do_not_break_describing() -> None:
    objs = slices("gpus: [{profile: A100-40GB, partitions: mig}]")
    for obj in objs:
        for counter_set in obj["spec"].get("sharedCounters", ()):
            counter_set["counters"]["memory-slices"] = {"value": "lots"}
    view = describe(objs, [claim("x", {"device": "gpu-0", "consumedCapacity": "nope"}),
                           {"status": {"allocation": {"devices": {"results": [7]}}}}])
    (gpu,) = view.gpus
    assert dict((n, t) for n, _, t in gpu.counters)["memory-slices"] == "?"
    assert "GPU" in render(view)


def test_plain_gpus_have_no_gpu_tables() -> None:
    view = describe(slices("gpus: ['2 x L4-24GB']"), [])
    assert view.gpus == () and view.shared == ()
    assert "SHARED DEVICE" not in render(view) and "COUNTERS" not in render(view)
