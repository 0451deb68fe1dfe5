"""Node filters, scores, explanations and per-container annotations of the binder."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from kdra.dra.allocator import Placement
from kdra.dra.scheduling import (
    Resources,
    SearchWindow,
    best,
    explain,
    feasible_nodes_to_find,
    node_allocatable,
    node_filter,
    pod_policy,
    pod_requests,
    search_window,
    tolerates,
)
from kdra.kube.core.podclaims import PodClaim
from kdra.operator.core.pod_devices import container_devices


def pod(**spec: Any) -> dict[str, Any]:
    base = {"containers": [{"name": "main", "resources": {"requests": {
        "cpu": "500m", "memory": "1Gi"}}}]}
    base.update(spec)
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": base}


def node(name: str = "n1", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec,
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}


def test_pod_requests_sum_containers_and_max_init() -> None:
    p = pod(containers=[
        {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "100Mi"}}},
        {"name": "b", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        {"name": "c"},
    ], initContainers=[{"name": "i", "resources": {"requests": {"cpu": "2"}}}])
    assert pod_requests(p) == Resources(2000, 100 * 2**20 + 2**30, 1)


def test_node_allocatable() -> None:
    assert node_allocatable(node()) == Resources(4000, 8 * 2**30, 110)


@pytest.mark.parametrize(("tolerations", "taint", "expected"), [
    ([], {"key": "a", "value": "b", "effect": "NoSchedule"}, False),
    ([{"key": "a", "value": "b", "effect": "NoSchedule"}],
     {"key": "a", "value": "b", "effect": "NoSchedule"}, True),
    ([{"key": "a", "operator": "Exists"}], {"key": "a", "value": "x", "effect": "NoExecute"},
     True),
    ([{"operator": "Exists"}], {"key": "anything", "effect": "NoSchedule"}, True),
    ([{"key": "a", "value": "c"}], {"key": "a", "value": "b", "effect": "NoSchedule"}, False),
    ([{"key": "a", "value": "b", "effect": "NoExecute"}],
     {"key": "a", "value": "b", "effect": "NoSchedule"}, False),
])
def test_tolerates(tolerations: list[dict[str, str]], taint: dict[str, str],
                   expected: bool) -> None:
    assert tolerates(tolerations, taint) is expected


NO_USE = Resources()


@pytest.mark.parametrize(("p", "n", "used", "expected"), [
    (pod(), node(), NO_USE, None),
    (pod(), node(unschedulable=True), NO_USE, "node(s) were unschedulable"),
    (pod(), node(taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
     NO_USE, "node(s) had untolerated taint {dedicated: infra}"),
    (pod(tolerations=[{"key": "dedicated", "operator": "Exists"}]),
     node(taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]),
     NO_USE, None),
    (pod(), node(taints=[{"key": "soft", "effect": "PreferNoSchedule"}]), NO_USE, None),
    (pod(nodeSelector={"gpu": "h100"}), node(labels={"gpu": "a100"}), NO_USE,
     "node(s) didn't match Pod's node affinity/selector"),
    (pod(nodeSelector={"gpu": "h100"}), node(labels={"gpu": "h100"}), NO_USE, None),
    (pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}),
     node(labels={"zone": "c"}), NO_USE, "node(s) didn't match Pod's node affinity/selector"),
    (pod(), node(), Resources(3600, 0, 1), "Insufficient cpu"),
    (pod(), node(), Resources(0, 7 * 2**30 + 1, 1), "Insufficient memory"),
    (pod(), node(), Resources(0, 0, 110), "Too many pods"),
])
def test_node_filter(p: dict[str, Any], n: dict[str, Any], used: Resources,
                     expected: str | None) -> None:
    assert node_filter(p, n, used, pod_requests(p)) == expected


def placement(node_name: str, free: int) -> Placement:
    return Placement(node_name, (), frozenset(), {"gpu.kdra.dev": free})


def test_binpack_spread_first_fit() -> None:
    placements = {"a": placement("a", 6), "b": placement("b", 1), "c": placement("c", 7)}
    order = ["a", "b", "c"]
    assert best(placements, "binpack", order).node == "b"  # type: ignore[union-attr]
    assert best(placements, "spread", order).node == "c"  # type: ignore[union-attr]
    assert best(placements, "first-fit", order).node == "a"  # type: ignore[union-attr]
    assert best({}, "binpack", order) is None


def test_policy_annotation() -> None:
    p = pod()
    assert pod_policy(p, "binpack") == "binpack"
    p["metadata"]["annotations"] = {"resource.kdra.dev/placement-policy": "spread"}
    assert pod_policy(p, "binpack") == "spread"
    p["metadata"]["annotations"] = {"resource.kdra.dev/placement-policy": "bogus"}
    assert pod_policy(p, "first-fit") == "first-fit"


def test_explain_groups_most_frequent_first() -> None:
    messages = Counter({"matching devices all allocated": 4, "no device matches": 7,
                        "node(s) had untolerated taint {dedicated: infra}": 1})
    assert explain(messages, 12) == (
        "0/12 nodes are available: 7 no device matches, 4 matching devices all allocated, "
        "1 node(s) had untolerated taint {dedicated: infra}.")
    assert explain(Counter(), 0) == "no nodes available to schedule pods"


def test_container_devices() -> None:
    p = pod(containers=[{"name": "a"}, {"name": "b"}], initContainers=[{"name": "init"}])
    claims = [PodClaim("gpus", resource_claim_template_name="t"),
              PodClaim("cat", resource_claim_name="c", containers=("b", "init")),
              PodClaim("big", resource_claim_name="d", request="large")]
    results = {
        "gpus": [("gpu", "gpu.kdra.dev", "n1", "gpu-0"), ("gpu", "gpu.kdra.dev", "n1", "gpu-1")],
        "cat": [("cat", "resource-driver.example.com", "worker-1", "kitten-0")],
        "big": [("small", "x.dev", "p", "s0"), ("large", "x.dev", "p", "l0")],
    }
    uuids = {("gpu.kdra.dev", "n1", "gpu-0"): "GPU-0", ("gpu.kdra.dev", "n1", "gpu-1"): "GPU-1"}
    assert container_devices(p, claims, results, uuids) == {
        "devices.resource.kdra.dev/a": "gpu.kdra.dev/n1/gpu-0,gpu.kdra.dev/n1/gpu-1,x.dev/p/l0",
        "devices.resource.kdra.dev/b": "gpu.kdra.dev/n1/gpu-0,gpu.kdra.dev/n1/gpu-1,"
                                       "resource-driver.example.com/worker-1/kitten-0,"
                                       "x.dev/p/l0",
        "devices.resource.kdra.dev/init": "resource-driver.example.com/worker-1/kitten-0",
        "gpus.resource.kdra.dev/a": "GPU-0,GPU-1",
        "gpus.resource.kdra.dev/b": "GPU-0,GPU-1",
    }


@pytest.mark.parametrize(("nodes", "expected"), [
    (0, 0), (1, 1), (99, 99),                  # below 100: every node
    (100, 100), (200, 100),                   # 49% of 200 is 98 -> at least 100
    (500, 230), (2000, 680), (5000, 500),     # 46%, 34%, 10%
    (10_000, 500), (20_000, 1000),            # 5% at the least
])
def test_feasible_nodes_to_find_follows_kube_scheduler(nodes: int, expected: int) -> None:
    assert feasible_nodes_to_find(nodes) == expected


def test_search_windows_per_policy() -> None:
    assert search_window("first-fit", 500, 42) == SearchWindow(1, 0, rotates=False)
    assert search_window("binpack", 500, 42) == SearchWindow(230, 0, rotates=False)
    assert search_window("spread", 500, 42) == SearchWindow(230, 42, rotates=True)
    assert search_window("spread", 40, 42) == SearchWindow(40, 2, rotates=True)  # wraps
    assert search_window("spread", 0, 42) == SearchWindow(0, 0, rotates=True)
