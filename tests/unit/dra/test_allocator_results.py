"""What goes into an AllocationResult besides devices: config and nodeSelector."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.dra.allocator import Snapshot, allocate, node_name_selector
from kdra.dra.models import AllocationResult, ResourceClaim, ResourceSlice, dump
from tests.unit.builders import (
    DRIVER,
    claim_config,
    claim_with,
    class_with,
    device,
    devices,
    gpu_class,
    node,
    opaque,
    request,
    slice_with,
)


def allocate_one(claim: ResourceClaim, *slices: ResourceSlice, **kw: Any) -> AllocationResult:
    classes = kw.pop("classes", [gpu_class()])
    results = allocate([claim], Snapshot.build(slices, classes), kw.pop("on", node()))
    assert results is not None
    return results[0]


def configs(result: AllocationResult) -> list[tuple[str, list[str], Any]]:
    return [(c.source, list(c.requests), c.opaque.parameters.get("n"))
            for c in result.devices.config]


# --------------------------------------------------------------------------- config


def test_class_config_then_claim_config() -> None:
    classes = [gpu_class(config=[opaque(n="class-1"), opaque(n="class-2")])]
    claim = claim_with(request("a"), request("b", cls="other.kdra.dev"),
                       config=[claim_config(n="claim-all"), claim_config("b", n="claim-b")])
    other = class_with("other.kdra.dev", config=[opaque(n="other-1")])
    result = allocate_one(claim, slice_with(*devices(2)), classes=[*classes, other])
    assert configs(result) == [
        ("FromClass", ["a"], "class-1"),
        ("FromClass", ["a"], "class-2"),
        ("FromClass", ["b"], "other-1"),
        ("FromClaim", [], "claim-all"),
        ("FromClaim", ["b"], "claim-b"),
    ]


def test_class_config_once_per_class_naming_its_requests() -> None:
    classes = [gpu_class(config=[opaque(n="class-1")]),
               class_with("other.kdra.dev", config=[opaque(n="other-1")])]
    claim = claim_with(request("a"), request("b", cls="other.kdra.dev"), request("c"))
    result = allocate_one(claim, slice_with(*devices(3)), classes=classes)
    assert configs(result) == [("FromClass", ["a", "c"], "class-1"),
                               ("FromClass", ["b"], "other-1")]


def test_config_for_every_request_names_them() -> None:
    """As upstream (with-class-device-config): a class config names its requests even when
    they are all of the claim's, a claim config keeps its ``requests`` verbatim."""
    classes = [gpu_class(config=[opaque(n="class-1")])]
    claim = claim_with(request("a"), request("b"), config=[claim_config("a", "b", n="both")])
    result = allocate_one(claim, slice_with(*devices(2)), classes=classes)
    assert configs(result) == [("FromClass", ["a", "b"], "class-1"),
                               ("FromClaim", ["a", "b"], "both")]


def test_claim_config_is_copied_once_and_verbatim() -> None:
    claim = claim_with(request("a"), request("b"), request("c"),
                       config=[claim_config("a", "c", n="ac", extra={"k": [1, 2]})])
    result = allocate_one(claim, slice_with(*devices(3)))
    [entry] = result.devices.config
    assert entry.source == "FromClaim"
    assert entry.requests == ("a", "c")
    assert entry.opaque.driver == DRIVER
    assert entry.opaque.parameters == {"n": "ac", "extra": {"k": [1, 2]}}


def test_no_config_anywhere() -> None:
    assert allocate_one(claim_with(), slice_with(*devices(1))).devices.config == ()


# --------------------------------------------------------------------------- nodeSelector

RACK_A = {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}
ZONE_1 = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["1"]}]}


def node_selector(result: AllocationResult) -> Any:
    return dump(result).get("nodeSelector")


@pytest.mark.parametrize(
    ("slices", "expected"),
    [
        pytest.param([slice_with(*devices(2))],
                     dump(node_name_selector("worker-1"))["nodeSelectorTerms"],
                     id="nodeName slice pins to the node"),
        pytest.param([slice_with(*devices(2), all_nodes=True, pool="shared")], None,
                     id="allNodes slice adds nothing"),
        pytest.param([slice_with(*devices(2), node_selector=RACK_A, pool="rack")],
                     [RACK_A], id="nodeSelector slice gives its term"),
        pytest.param([slice_with(device("gpu-0"), node_selector=RACK_A, pool="rack"),
                      slice_with(device("gpu-1"), node_selector=ZONE_1, pool="zone")],
                     [{"matchExpressions": RACK_A["matchExpressions"]
                       + ZONE_1["matchExpressions"]}],
                     id="nodeSelector terms are merged"),
        pytest.param([slice_with(device("gpu-0"), node_selector=RACK_A, pool="rack-1"),
                      slice_with(device("gpu-1"), node_selector=RACK_A, pool="rack-2")],
                     [RACK_A], id="repeated requirements are merged once"),
        pytest.param([slice_with(device("gpu-0"), node_selector=RACK_A, pool="a-rack"),
                      slice_with(device("gpu-1"), all_nodes=True, pool="b-shared")],
                     [RACK_A], id="allNodes next to nodeSelector"),
        pytest.param([slice_with(device("gpu-0"), node_selector=RACK_A, pool="a-rack"),
                      slice_with(device("gpu-1"), pool="b-local")],
                     dump(node_name_selector("worker-1"))["nodeSelectorTerms"],
                     id="nodeName wins over nodeSelector"),
    ],
)
def test_result_node_selector(slices: list[ResourceSlice], expected: Any) -> None:
    result = allocate_one(claim_with(request(count=2)), *slices,
                          on=node("worker-1", rack="a", zone="1"))
    got = node_selector(result)
    if expected is None:
        assert got is None
    else:
        assert non_empty(got["nodeSelectorTerms"]) == non_empty(expected)


def non_empty(terms: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in term.items() if v} for term in terms]
