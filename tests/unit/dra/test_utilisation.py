"""kdra.dra.usage.utilisation: devices per class/node/pool by state, and who holds them.

Objects are raw API dicts, as the command line reads them and the operator caches them."""

from __future__ import annotations

from typing import Any

from kdra.dra.allocator import Snapshot
from kdra.dra.models import parse_class, parse_slice
from kdra.dra.usage.claims import claims_of
from kdra.dra.usage.utilisation import namespace_usage, pool_totals, top, utilisation
from tests.unit.builders import device
from tests.unit.cli.test_describe import CATS, GPU, gpus, raw_claim, raw_slice


def device_class(name: str, expression: str) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


GPU_CLASS = device_class(GPU, f'device.driver == "{GPU}"')
H100 = device_class("h100", f'device.attributes["{GPU}"].productName.contains("H100")')
CAT_CLASS = device_class("cats", f'device.driver == "{CATS}"')


def snapshot(slices: list[dict[str, Any]], classes: list[dict[str, Any]]) -> Snapshot:
    return Snapshot.build(slices=[parse_slice(s) for s in slices],
                          classes=[parse_class(c) for c in classes])


def with_class(claim: dict[str, Any], device_class: str) -> dict[str, Any]:
    requests = sorted({r["request"] for r in claim["status"]["allocation"]["devices"]["results"]})
    claim["spec"] = {"devices": {"requests": [
        {"name": r, "exactly": {"deviceClassName": device_class}} for r in requests]}}
    return claim


def rows(found: list[Any]) -> list[tuple[Any, ...]]:
    return [(u.device_class, u.node, u.pool, u.total, u.allocated, u.free, u.unhealthy)
            for u in found]


def test_devices_per_class_node_and_pool() -> None:
    slices = [raw_slice("node-a", *gpus(4)), raw_slice("node-b", *gpus(2, "NVIDIA A100")),
              raw_slice("worker-1", device("kitten-0", color="white"), driver=CATS)]
    claims = claims_of([
        with_class(raw_claim("train", ("gpu", GPU, "node-a", "gpu-1"), node="node-a",
                             pods=("p",)), GPU),
        with_class(raw_claim("pair", ("gpu", GPU, "node-b", "gpu-0"),
                             ("gpu", GPU, "node-b", "gpu-1"), node="node-b"), GPU),
    ])
    found = utilisation(snapshot(slices, [GPU_CLASS, H100]), claims)
    assert rows(found) == [
        ("", "worker-1", "worker-1", 1, 0, 1, 0),  # no class selects the cat: shown
        (GPU, "node-a", "node-a", 4, 1, 3, 0),
        (GPU, "node-b", "node-b", 2, 2, 0, 0),
        ("h100", "node-a", "node-a", 4, 1, 3, 0),  # overlapping classes both count
    ]
    assert pool_totals(snapshot(slices, [GPU_CLASS, H100])) == {
        ("node-a", GPU, "node-a"): 4, ("node-b", GPU, "node-b"): 2,
        ("worker-1", CATS, "worker-1"): 1}


def test_unhealthy_is_a_held_device_gone_from_its_slice_or_reported_unhealthy() -> None:
    slices = [raw_slice("node-a", *gpus(3)[:2])]  # gpu-2 went unhealthy: left out
    lost = with_class(raw_claim("lost", ("gpu", GPU, "node-a", "gpu-2"), node="node-a"), GPU)
    sick = with_class(raw_claim("sick", ("gpu", GPU, "node-a", "gpu-1"), node="node-a",
                                ready={"gpu-1": False}), GPU)
    sick["status"]["devices"][0]["conditions"][0]["reason"] = "DeviceUnhealthy"
    busy = with_class(raw_claim("busy", ("gpu", GPU, "node-a", "gpu-0"), node="node-a",
                                ready={"gpu-0": False}), GPU)  # not ready, but not unhealthy
    found = utilisation(snapshot(slices, [GPU_CLASS]), claims_of([lost, sick, busy]))
    assert rows(found) == [(GPU, "node-a", "node-a", 3, 1, 0, 2)]


def test_a_device_with_the_health_taint_is_unhealthy_held_or_not() -> None:
    """Issue 25: the agent publishes unhealthy devices with its taint (it used to leave them
    out); a Healthy=False condition on a claim counts too."""
    free_sick, held_sick, held_fine, plain = gpus(4)
    for sick, effect in ((free_sick, "NoSchedule"), (held_sick, "NoExecute")):
        sick["taints"] = [{"key": "gpu.kdra.dev/unhealthy", "value": "XID-79",
                           "effect": effect}]
    held_fine["taints"] = [{"key": "other.example.com/note", "effect": "None"}]
    slices = [raw_slice("node-a", free_sick, held_sick, held_fine, plain)]
    claims = [with_class(raw_claim(name, ("gpu", GPU, "node-a", dev["name"]), node="node-a"),
                         GPU) for name, dev in (("a", held_sick), ("b", held_fine))]
    found = utilisation(snapshot(slices, [GPU_CLASS]), claims_of(claims))
    assert rows(found) == [(GPU, "node-a", "node-a", 4, 1, 1, 2)]
    flagged = with_class(raw_claim("c", ("gpu", GPU, "node-a", plain["name"]), node="node-a",
                                   ready={plain["name"]: True}), GPU)
    flagged["status"]["devices"][0]["conditions"].append(
        {"type": "Healthy", "status": "False", "reason": "MarkedLost"})
    found = utilisation(snapshot(slices, [GPU_CLASS]), claims_of([*claims, flagged]))
    assert rows(found) == [(GPU, "node-a", "node-a", 4, 1, 0, 3)]


def test_a_device_another_acting_taint_keeps_from_claims_is_blocked_as_describe_says() -> None:
    """A NoSchedule/NoExecute taint of the slice (not the health taint) keeps an unheld device
    from claims without a toleration: not free but blocked, and describe's FREE agrees; held,
    it stays allocated; a taint with effect None changes nothing."""
    from kdra.cli.core.describe import describe

    drained, held, noted, plain = gpus(4)
    for dev, effect in ((drained, "NoSchedule"), (held, "NoExecute"), (noted, "None")):
        dev["taints"] = [{"key": "example.com/maintenance", "effect": effect}]
    slices = [raw_slice("node-a", drained, held, noted, plain)]
    claims = [with_class(raw_claim("a", ("gpu", GPU, "node-a", held["name"]), node="node-a"),
                         GPU)]
    (found,) = utilisation(snapshot(slices, [GPU_CLASS]), claims_of(claims))
    assert (found.total, found.allocated, found.free, found.blocked, found.unhealthy) == \
        (4, 1, 2, 1, 0)
    (pool,) = describe(slices, claims).pools
    assert pool.free == found.free


def test_only_the_newest_generation_counts_and_bad_selectors_match_nothing() -> None:
    slices = [raw_slice("node-a", *gpus(4), generation=0, name="old"),
              raw_slice("node-a", *gpus(2), generation=1, name="new")]
    broken = device_class("broken", f'device.attributes["{GPU}"].missing == 1')  # runtime error
    found = utilisation(snapshot(slices, [GPU_CLASS, broken]), [])
    assert rows(found) == [(GPU, "node-a", "node-a", 2, 0, 2, 0)]


def test_namespace_usage_and_top() -> None:
    claims = claims_of([
        with_class(raw_claim("a", ("gpu", GPU, "n", "gpu-0"), ("gpu", GPU, "n", "gpu-1"),
                             namespace="team-a", pods=("p1",)), GPU),
        with_class(raw_claim("shared", ("cat", CATS, "w", "kitten-0"), namespace="team-a",
                             pods=("p1", "p2")), "cats"),
        with_class(raw_claim("b", ("gpu", GPU, "n", "gpu-2"), namespace="team-b",
                             pods=("q",)), GPU),
        raw_claim("pending", namespace="team-b"),
    ])
    assert namespace_usage(claims) == {("team-a", GPU): 2, ("team-a", "cats"): 1,
                                       ("team-b", GPU): 1}
    found = top(claims)
    assert [(n.namespace, n.devices, n.claims, n.pending) for n in found] == [
        ("team-a", 3, 2, 0), ("team-b", 1, 1, 1)]
    assert [(p.pod, p.devices, p.claims) for p in found[0].pods] == [
        ("p1", 3, ("a", "shared")), ("p2", 1, ("shared",))]
    assert found[0].by_class == {"cats": 1, GPU: 2}


def admin_claim(name: str, namespace: str, *results: tuple[str, str, str, str],
                flagged: bool = True) -> dict[str, Any]:
    """A claim of allocationMode All with ``exactly.adminAccess`` (its results flagged
    ``adminAccess: true`` as kdra's allocator writes them, or not: older writers)."""
    claim = raw_claim(name, *results, namespace=namespace, node="node-a", pods=("monitor",))
    claim["spec"] = {"devices": {"requests": [{"name": "gpus", "exactly": {
        "deviceClassName": GPU, "allocationMode": "All", "adminAccess": True}}]}}
    for result in claim["status"]["allocation"]["devices"]["results"]:
        if flagged:
            result["adminAccess"] = True
    return claim


def test_admin_access_holds_no_device() -> None:
    """Issue 41: a monitoring claim with admin access to every GPU of a node beside a pod
    using one of them: the GPU is allocated once, the others stay free; ``top`` and the
    namespace gauge count the monitor's namespace no devices (its claim still counts)."""
    slices = [raw_slice("node-a", *gpus(3))]
    train = with_class(raw_claim("train", ("gpu", GPU, "node-a", "gpu-1"), node="node-a",
                                 pods=("p",)), GPU)
    everything = [("gpus", GPU, "node-a", f"gpu-{i}") for i in range(3)]
    for flagged in (True, False):
        monitor = admin_claim("monitor", "ops", *everything, flagged=flagged)
        claims = claims_of([train, monitor])
        assert rows(utilisation(snapshot(slices, [GPU_CLASS]), claims)) == [
            (GPU, "node-a", "node-a", 3, 1, 2, 0)]
        assert namespace_usage(claims) == {("default", GPU): 1}
        default, ops = sorted(top(claims), key=lambda n: n.namespace)
        assert (ops.namespace, ops.devices, ops.claims, dict(ops.by_class)) == ("ops", 0, 1, {})
        assert [(p.pod, p.devices, p.claims) for p in ops.pods] == [("monitor", 0,
                                                                      ("monitor",))]
        assert (default.devices, dict(default.by_class)) == (1, {GPU: 1})
