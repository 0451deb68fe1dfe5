"""Issue 39: the allocator as upstream's v1 (Kubernetes 1.36, the incubating allocator).

One test (or a few) per point of the issue, each failing on the allocator before the issue
and passing after; where upstream's shared table has a case for it, the test names it (the
whole table runs in ``test_allocator_upstream_table.py``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kdra.dra.allocator import NodeInfo, Snapshot, allocate, place
from kdra.dra.allocator.capacity import MAX_AMOUNT
from kdra.dra.cel import compile_selector, make_device
from kdra.dra.cel._check import DEVICE_FIELD_TYPES
from kdra.dra.errors import AllocationError, SearchExhausted
from kdra.dra.models import ResourceClaim, ResourceSlice, parse_claim, parse_slice
from tests.unit.builders import (
    CLASS,
    DRIVER,
    allocated,
    claim_with,
    class_with,
    device,
    devices,
    first_available,
    gpu_class,
    match,
    node,
    request,
    slice_with,
    sub,
)


def raw_slice(name: str, spec: dict[str, Any]) -> ResourceSlice:
    return parse_slice({"metadata": {"name": name},
                        "spec": {"driver": DRIVER, **spec}})


def names(results: list[Any] | None) -> list[list[str]]:
    assert results is not None, "does not fit"
    return [[f"{r.request}:{r.device}" for r in result.devices.results] for result in results]


# --------------------------------------------------------------------------- point 1


def shared_counter_pool(held_on_node_2: str | None) -> Snapshot:
    """Pool ``gpus`` spread over two nodes: one counter set of 8Gi (its own slice), a 6Gi and
    a 2Gi partition reachable from node-1, a 6Gi one from node-2."""
    pool = {"name": "gpus", "generation": 1, "resourceSliceCount": 3}
    counters = raw_slice("gpus-counters", {"nodeName": "node-1", "pool": pool,
                                           "sharedCounters": [{"name": "gpu", "counters": {
                                               "memory": {"value": "8Gi"}}}]})

    def part(name: str, amount: str) -> dict[str, Any]:
        return {"name": name, "capacity": {"memory": {"value": amount}}, "consumesCounters": [
            {"counterSet": "gpu", "counters": {"memory": {"value": amount}}}]}

    here = raw_slice("gpus-node-1", {"nodeName": "node-1", "pool": pool,
                                     "devices": [part("p6-a", "6Gi"), part("p2", "2Gi")]})
    there = raw_slice("gpus-node-2", {"nodeName": "node-2", "pool": pool,
                                      "devices": [part("p6-b", "6Gi")]})
    claims = []
    if held_on_node_2:
        claims.append(allocated(claim_with(name="held"), ("gpu", held_on_node_2), pool="gpus"))
    return Snapshot.build([counters, here, there], [gpu_class()], claims)


def test_counters_are_not_overcommitted_across_nodes() -> None:
    """The issue's reproduction (upstream: partitionable-devices-devices-on-different-nodes-
    consume-same-counter-set): 6Gi of the 8Gi counter set is held by a device on node-2, so
    node-1 cannot have another 6Gi device; the 2Gi one still fits."""
    snapshot = shared_counter_pool("p6-b")
    six = claim_with(request("gpu", 'device.capacity["gpu.kdra.dev"].memory == quantity("6Gi")'))
    assert allocate([six], snapshot, node("node-1")) is None
    assert not place(snapshot, [six], [node("node-1")]).placements
    two = claim_with(request("gpu", 'device.capacity["gpu.kdra.dev"].memory == quantity("2Gi")'))
    assert names(allocate([two], snapshot, node("node-1"))) == [["gpu:p2"]]


def test_a_pool_spread_over_nodes_is_complete_with_the_other_nodes_slices() -> None:
    """Point 6, second half (upstream: allocation-mode-all-with-multi-host-resource-pool): an
    All request on node-1 takes node-1's devices of a pool whose other slice is node-2's."""
    snapshot = shared_counter_pool(None)
    assert names(allocate([claim_with(request(all=True))], snapshot, node("node-1"))) == [
        ["gpu:p6-a", "gpu:p2"]]


def test_the_snapshot_rebuilds_a_node_s_pools_when_another_node_s_slice_changes() -> None:
    snapshot = shared_counter_pool(None)
    six = claim_with(request("gpu", 'device.capacity["gpu.kdra.dev"].memory == quantity("6Gi")'))
    assert names(allocate([six], snapshot, node("node-1"))) == [["gpu:p6-a"]]
    snapshot.upsert_claim(allocated(claim_with(name="held"), ("gpu", "p6-b"), pool="gpus"))
    assert allocate([six], snapshot, node("node-1")) is None  # the counter is held now
    pool = {"name": "gpus", "generation": 2, "resourceSliceCount": 3}
    snapshot.upsert_slice(raw_slice("gpus-node-2", {"nodeName": "node-2", "pool": pool,
                                                    "devices": []}))
    assert allocate([six], snapshot, node("node-1")) is None  # gen 2 replaces node-1's view


# --------------------------------------------------------------------------- point 2


def test_cel_knows_allow_multiple_allocations() -> None:
    """Upstream's 1.36 ``kubernetes.DRADevice`` (ConsumableCapacity on): driver,
    allowMultipleAllocations, attributes, capacity — and nothing else."""
    assert set(DEVICE_FIELD_TYPES) == {"driver", "allowMultipleAllocations", "attributes",
                                       "capacity"}
    assert DEVICE_FIELD_TYPES["allowMultipleAllocations"].name == "bool"
    selector = compile_selector("device.allowMultipleAllocations")
    assert selector.matches(make_device(DRIVER, {}, {}, allow_multiple_allocations=True))
    assert not selector.matches(make_device(DRIVER, {}, {}))  # unset reads as false


def test_a_class_selecting_by_allow_multiple_allocations_allocates_shares() -> None:
    """Upstream: consumable-capacity-multi-allocatable-device-without-policy-with-capacity-
    request (its class selects ``device.allowMultipleAllocations == true``)."""
    shareable = class_with(CLASS, f'device.driver == "{DRIVER}" && '
                                  "device.allowMultipleAllocations == true")
    snapshot = Snapshot.build([slice_with({"name": "gpu-0", "allowMultipleAllocations": True,
                                           "capacity": {"memory": {"value": "2"}}},
                                          device("gpu-1"))], [shareable])
    claims = [claim_with({"name": "gpu", "exactly": {"deviceClassName": CLASS, "capacity": {
        "requests": {"memory": "1"}}}}, name=name) for name in ("a", "b")]
    assert names(allocate(claims, snapshot, node())) == [["gpu:gpu-0"], ["gpu:gpu-0"]]


# --------------------------------------------------------------------------- point 3


def test_an_all_alternative_over_the_device_limit_falls_through() -> None:
    """Upstream: prioritized-list-max-allocation-allocation-mode-all (31 devices for All plus
    2 for the other request would be 33: the next alternative is taken)."""
    snapshot = Snapshot.build([slice_with(*devices(31))], [gpu_class()])
    claim = claim_with(first_available("gpu", sub("all", all=True), sub("two", count=2)),
                       request("more", count=2))
    assert names(allocate([claim], snapshot, node(), scoring=False)) == [
        ["gpu/two:gpu-0", "gpu/two:gpu-1", "more:gpu-2", "more:gpu-3"]]


def test_a_claim_over_the_limit_whatever_the_alternative_is_an_error() -> None:
    snapshot = Snapshot.build([slice_with(*devices(33))], [gpu_class()])
    claim = claim_with(first_available("gpu", sub("all", all=True), sub("many", count=32)),
                       request("more"))
    with pytest.raises(AllocationError, match="asks for 33 devices, more than the limit"):
        allocate([claim], snapshot, node())


# --------------------------------------------------------------------------- points 4, 5


def shared(name: str, *capacity: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "allowMultipleAllocations": True}
    if capacity:
        out["capacity"] = {"memory": {"value": capacity[0]}}
    return out


def share_holder(name: str, device_name: str, memory: str) -> ResourceClaim:
    return parse_claim({
        "metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": CLASS}}]}},
        "status": {"allocation": {"devices": {"results": [{
            "request": "gpu", "driver": DRIVER, "pool": "worker-1", "device": device_name,
            "shareID": "00000000-0000-4000-8000-000000000001",
            "consumedCapacity": {"memory": memory}}]}}}})


def test_all_skips_a_shared_device_without_capacity_left() -> None:
    """Upstream: consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-
    insufficient."""
    snapshot = Snapshot.build([slice_with(shared("gpu-0", "1"), shared("gpu-1", "1"))],
                              [gpu_class()], [share_holder("held", "gpu-0", "1")])
    claim = claim_with({"name": "gpu", "exactly": {"deviceClassName": CLASS,
                                                   "allocationMode": "All",
                                                   "capacity": {"requests": {"memory": "1"}}}})
    assert names(allocate([claim], snapshot, node())) == [["gpu:gpu-1"]]


def test_a_share_of_a_device_without_capacity_leaves_consumed_capacity_unset() -> None:
    """Upstream: consumable-capacity-multi-allocatable-device-without-capacity-without-
    capacity-request (``withConsumedCapacity(&fixedShareID, nil)``)."""
    snapshot = Snapshot.build([slice_with(shared("gpu-0"))], [gpu_class()])
    [result] = allocate([claim_with()], snapshot, node()) or []
    [share] = result.devices.results
    assert share.share_id is not None
    assert share.consumed_capacity is None


# --------------------------------------------------------------------------- point 6

COUNTERS = {"name": "gpu", "counters": {"memory": {"value": "8Gi"}}}


def counter_pool(*extra: ResourceSlice, sets: list[dict[str, Any]] | None = None,
                 count: int = 2, consumes: list[dict[str, Any]] | None = None) -> Snapshot:
    pool = {"name": "p", "generation": 1, "resourceSliceCount": count}
    device_ = {"name": "gpu-0", "consumesCounters": consumes if consumes is not None else [
        {"counterSet": "gpu", "counters": {"memory": {"value": "4Gi"}}}]}
    return Snapshot.build([
        raw_slice("p-devices", {"nodeName": "worker-1", "pool": pool, "devices": [device_]}),
        raw_slice("p-counters", {"nodeName": "worker-1", "pool": pool,
                                 "sharedCounters": sets if sets is not None else [COUNTERS]}),
        *extra], [gpu_class()])


@pytest.mark.parametrize(("label", "snapshot", "why"), [
    ("a counter set the pool does not define, with an empty counters map "
     "(upstream: ...-references-unknown-counter-set)",
     lambda: counter_pool(consumes=[{"counterSet": "other", "counters": {}}]),
     "device gpu-0 consumes counter set other, which the pool does not publish"),
    ("a counter set defined twice "
     "(upstream: partitionable-devices-same-counter-set-name-in-different-resource-slices)",
     lambda: counter_pool(raw_slice("p-counters-2", {
         "nodeName": "worker-1", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 3},
         "sharedCounters": [COUNTERS]}), count=3),
     "counter set gpu is published twice"),
    ("an invalid slice of the pool for another node "
     "(upstream: partitionable-devices-validation-error-on-non-targeting-slice)",
     lambda: counter_pool(raw_slice("p-elsewhere", {
         "nodeName": "worker-2", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 3},
         "devices": [{"name": "gpu-9", "consumesCounters": [
             {"counterSet": "nope", "counters": {"memory": {"value": "1"}}}]}]}), count=3),
     "device gpu-9 consumes counter set nope"),
], ids=["empty-counters", "set-twice", "other-node-slice"])
def test_invalid_pools_are_refused_as_upstream(label: str, snapshot: Any, why: str) -> None:
    with pytest.raises(AllocationError, match="invalid resource pools were encountered") as err:
        allocate([claim_with()], snapshot(), node())
    assert why in str(err.value)


# --------------------------------------------------------------------------- point 7


def test_the_all_early_stop_does_not_hide_a_constraint_error() -> None:
    """gpu-1 breaks the claim's matchAttribute before the walk reaches gpu-2 (held
    elsewhere): upstream reports the constraint (with-constraint-not-matching-int-attribute-
    all-devices), it does not say "does not fit"."""
    snapshot = Snapshot.build(
        [slice_with(device("gpu-0", numa=0), device("gpu-1", numa=1), device("gpu-2", numa=0))],
        [gpu_class()], [allocated(claim_with(name="held"), ("gpu", "gpu-2"))])
    claim = claim_with(request(all=True), constraints=[match(f"{DRIVER}/numa")])
    with pytest.raises(AllocationError, match=r"device gpu\.kdra\.dev/worker-1/gpu-1 does "
                                              r"not satisfy matchAttribute gpu\.kdra\.dev/numa"):
        allocate([claim], snapshot, node())


def test_the_all_early_stop_still_saves_the_search_where_nothing_could_raise() -> None:
    snapshot = Snapshot.build([slice_with(*devices(24))], [gpu_class()],
                              [allocated(claim_with(name="held"), ("gpu", "gpu-23"))])
    claims = [claim_with(name=f"c{i}") for i in range(8)] + [
        claim_with(request(all=True), name="all")]
    before = snapshot.stats.search_steps
    assert allocate(claims, snapshot, node()) is None
    assert snapshot.stats.search_steps == before  # stopped before the walk


# --------------------------------------------------------------------------- point 8


def test_devices_consuming_zero_of_a_counter_backtrack_cleanly() -> None:
    """Taking and giving back two devices that consume 0 of a counter used to raise KeyError
    when the search backtracked over them."""
    zero = [{"counterSet": "gpu", "counters": {"memory": {"value": "0"}}}]
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 2}
    snapshot = Snapshot.build([
        raw_slice("p-devices", {"nodeName": "worker-1", "pool": pool, "devices": [
            {"name": "gpu-0", "consumesCounters": zero},
            {"name": "gpu-1", "consumesCounters": zero}]}),
        raw_slice("p-counters", {"nodeName": "worker-1", "pool": pool,
                                 "sharedCounters": [COUNTERS]})], [gpu_class()])
    claim = claim_with(request("two", count=2), request("never", "false"))
    assert allocate([claim], snapshot, node(), scoring=False) is None


def test_a_huge_capacity_request_is_kdra_s_error_not_a_decimal_crash() -> None:
    """A request above ~1e28 against a validRange step used to raise
    decimal.InvalidOperation."""
    device_ = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"memory": {
        "value": "80Gi", "requestPolicy": {"validRange": {"min": "1", "step": "1"}}}}}
    snapshot = Snapshot.build([slice_with(device_)], [gpu_class()])
    claim = claim_with({"name": "gpu", "exactly": {"deviceClassName": CLASS, "capacity": {
        "requests": {"memory": "1e29"}}}})
    with pytest.raises(AllocationError, match="not a quantity"):
        allocate([claim], snapshot, node())
    assert MAX_AMOUNT == 2**63


# --------------------------------------------------------------------------- point 9


def test_allocate_stops_within_its_default_budget() -> None:
    """24 single-device claims take every device, then an All claim needs them all: the
    exhaustive search took more than a minute; allocate() now stops at its default budget."""
    snapshot = Snapshot.build([slice_with(*devices(24))], [gpu_class()])
    claims = [claim_with(name=f"c{i}") for i in range(24)] + [
        claim_with(request(all=True), name="all")]
    started = time.monotonic()
    with pytest.raises(SearchExhausted, match="within 1000000 search steps"):
        allocate(claims, snapshot, node())
    assert snapshot.stats.search_steps >= 1_000_000
    assert time.monotonic() - started < 60  # its deadline is 10 s; the old search never ended


def test_a_caller_may_pass_its_own_budget() -> None:
    snapshot = Snapshot.build([slice_with(*devices(24))], [gpu_class()])
    claims = [claim_with(name=f"c{i}") for i in range(24)] + [
        claim_with(request(all=True), name="all")]
    with pytest.raises(SearchExhausted, match="within 5000 search steps"):
        allocate(claims, snapshot, node(), steps=5_000)


# --------------------------------------------------------------------------- point 10


def per_device_slice(*devices_: dict[str, Any]) -> ResourceSlice:
    return raw_slice("shared", {"perDeviceNodeSelection": True,
                                "pool": {"name": "fabric", "generation": 1,
                                         "resourceSliceCount": 1},
                                "devices": list(devices_)})


def test_per_device_node_selection() -> None:
    """Upstream: partitionable-devices-per-device-node-selection-nodename / -node-selector."""
    snapshot = Snapshot.build([per_device_slice(
        {"name": "on-2", "nodeName": "node-2"},
        {"name": "rack-a", "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "rack", "operator": "In", "values": ["a"]}]}]}},
        {"name": "everywhere", "allNodes": True})], [gpu_class()])
    two = claim_with(request(count=2))
    assert names(allocate([two], snapshot, NodeInfo("node-1", {"rack": "a"}))) == [
        ["gpu:rack-a", "gpu:everywhere"]]
    assert allocate([two], snapshot, NodeInfo("node-1", {"rack": "b"})) is None
    [result] = allocate([claim_with()], snapshot, NodeInfo("node-2")) or []
    assert result.devices.results[0].device == "on-2"
    assert result.node_selector is not None  # nodeName: pinned to the node allocated for
    assert result.node_selector.node_selector_terms[0].match_fields[0].values == ("node-2",)


def test_binding_conditions_are_allocated_and_copied_into_the_results() -> None:
    """Upstream: device-binding-conditions, node-restriction, and pools with binding
    conditions walked last (check-combinations-with-backtracking-across-slices-and-pools)."""
    bound = {"name": "attach", "bindingConditions": ["Attached"],
             "bindingFailureConditions": ["AttachFailed"], "bindsToNode": True}
    snapshot = Snapshot.build([
        raw_slice("a-fabric", {"allNodes": True, "pool": {"name": "a-fabric", "generation": 1,
                                                          "resourceSliceCount": 1},
                               "devices": [bound]}),
        raw_slice("b-local", {"nodeName": "node-1", "pool": {"name": "b-local",
                                                             "generation": 1,
                                                             "resourceSliceCount": 1},
                              "devices": [{"name": "plain"}]})], [gpu_class()])
    assert names(allocate([claim_with()], snapshot, NodeInfo("node-1"))) == [["gpu:plain"]]
    [result] = allocate([claim_with(request(count=2))], snapshot, NodeInfo("node-1")) or []
    attach = result.devices.results[1]
    assert (attach.device, attach.binding_conditions, attach.binding_failure_conditions) == (
        "attach", ("Attached",), ("AttachFailed",))
    [only] = allocate([claim_with()], Snapshot.build([snapshot.slice_entries().__next__().slice],
                                                     [gpu_class()]), NodeInfo("node-3")) or []
    assert only.node_selector is not None  # bindsToNode on an allNodes device pins the node
    assert only.node_selector.node_selector_terms[0].match_fields[0].values == ("node-3",)
