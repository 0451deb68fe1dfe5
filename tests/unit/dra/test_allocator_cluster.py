"""The cluster entry point: placements, per-node reasons, and the summary line."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.dra.allocator import (
    DeviceId,
    NodeInfo,
    Reason,
    ReasonCode,
    Snapshot,
    allocate,
    place,
    summarize,
)
from kdra.dra.errors import AllocationError
from kdra.dra.models import ResourceClaim, ResourceSlice
from tests.unit.builders import (
    CLASS,
    DRIVER,
    allocated,
    claim_with,
    device,
    devices,
    gpu_class,
    match,
    node,
    request,
    slice_with,
)

GPU = f'device.attributes["{DRIVER}"]'
H100 = f'{GPU}.productName == "H100"'


def cluster(*per_node: list[dict[str, object]]) -> tuple[Snapshot, list[NodeInfo]]:
    """Node worker-i gets the i-th device list (1-based)."""
    slices: list[ResourceSlice] = [
        slice_with(*node_devices, node=f"worker-{i}")
        for i, node_devices in enumerate(per_node, start=1)
    ]
    return Snapshot.build(slices, [gpu_class()]), [node(f"worker-{i}")
                                                   for i in range(1, len(per_node) + 1)]


def h100s(count: int) -> list[dict[str, object]]:
    return [device(f"gpu-{i}", productName="H100", index=i)
            for i in range(count)]


def a100s(count: int) -> list[dict[str, object]]:
    return [device(f"gpu-{i}", productName="A100", index=i) for i in range(count)]


def test_placements_and_reasons_per_node() -> None:
    snapshot, nodes = cluster(h100s(2), a100s(2), h100s(1), [])
    snapshot.upsert_claim(allocated(claim_with(name="old"), ("gpu", "gpu-0"), pool="worker-3"))
    claim = claim_with(request("gpu", H100), name="train-gpu")
    outcome = place(snapshot, [claim], nodes)
    assert list(outcome.placements) == ["worker-1"]
    placement = outcome.placements["worker-1"]
    assert [r.device for r in placement.results[0].devices.results] == ["gpu-0"]
    assert placement.devices == {DeviceId(DRIVER, "worker-1", "gpu-0")}
    assert placement.free_after == {CLASS: 1}
    codes = {name: reason.code for name, reason in outcome.reasons.items()}
    assert codes == {
        "worker-2": ReasonCode.NO_MATCHING_DEVICE,
        "worker-3": ReasonCode.DEVICES_BUSY,
        "worker-4": ReasonCode.NO_MATCHING_DEVICE,
    }
    assert outcome.reasons["worker-2"].message == (
        f'no device of class "{CLASS}" matches request "gpu" of claim "train-gpu" '
        f"(selector {H100})"
    )
    assert outcome.reasons["worker-3"].message == (
        'matching devices all allocated (request "gpu" of claim "train-gpu")'
    )
    assert outcome.reasons["worker-4"].message.endswith("(no devices on the node)")
    assert outcome.fatal is None


def test_summary_groups_nodes_by_message() -> None:
    snapshot, nodes = cluster(a100s(1), a100s(1), h100s(1), a100s(2))
    snapshot.upsert_claim(allocated(claim_with(name="old"), ("gpu", "gpu-0"), pool="worker-3"))
    outcome = place(snapshot, [claim_with(request("gpu", H100), name="train-gpu")], nodes)
    assert outcome.summary() == (
        f'0/4 nodes are available: 3 no device of class "{CLASS}" matches request "gpu" of claim '
        f'"train-gpu" (selector {H100}), 1 matching devices all allocated '
        '(request "gpu" of claim "train-gpu").'
    )


def test_summarize_orders_by_count_then_text() -> None:
    reasons = [Reason(ReasonCode.DEVICES_BUSY, "b busy"),
               Reason(ReasonCode.NO_MATCHING_DEVICE, "a none"),
               Reason(ReasonCode.DEVICES_BUSY, "b busy")]
    assert summarize(reasons, 12) == "0/12 nodes are available: 2 b busy, 1 a none."
    assert summarize([], 3, 3) == "3/3 nodes are available"


def test_too_few_free_and_too_few_matching() -> None:
    snapshot, nodes = cluster(h100s(1), h100s(3))
    snapshot.upsert_claim(allocated(claim_with(name="old"), ("gpu", "gpu-0"), pool="worker-2"))
    outcome = place(snapshot, [claim_with(request("gpu", H100, count=3), name="c")], nodes)
    assert outcome.reasons["worker-1"].code is ReasonCode.NO_MATCHING_DEVICE
    assert outcome.reasons["worker-1"].message.startswith('too few devices of class')
    assert outcome.reasons["worker-2"].code is ReasonCode.DEVICES_BUSY
    assert outcome.reasons["worker-2"].message == (
        'too few free matching devices (request "gpu" of claim "c" needs 3)')
    assert "1 matching" not in outcome.reasons["worker-2"].detail
    assert "3 matching, 2 free, 3 needed" in outcome.reasons["worker-2"].detail


def test_constraint_unsatisfiable() -> None:
    roots = [device(f"gpu-{i}", pcieRoot=f"root-{i % 2}") for i in range(4)]
    snapshot, nodes = cluster(roots)
    claim = claim_with(request(count=3), constraints=[match(f"{DRIVER}/pcieRoot")], name="c")
    outcome = place(snapshot, [claim], nodes)
    reason = outcome.reasons["worker-1"]
    assert reason.code is ReasonCode.CONSTRAINT_UNSATISFIABLE
    assert reason.message == (
        f'matchAttribute {DRIVER}/pcieRoot cannot be satisfied by free devices (claim "c")')
    assert reason.error is None


def test_requests_competing_for_the_same_devices() -> None:
    snapshot, nodes = cluster(h100s(2))
    claims = [claim_with(request(count=2), name="a"), claim_with(name="b")]
    outcome = place(snapshot, claims, nodes)
    assert outcome.reasons["worker-1"].code is ReasonCode.DEVICES_BUSY
    assert "all requests of the pod together" in outcome.reasons["worker-1"].message


def test_pool_incomplete_for_all_is_a_node_reason_with_an_error() -> None:
    snapshot = Snapshot.build(
        [slice_with(*devices(2), node="worker-1", count=2),
         slice_with(*devices(2), node="worker-2")],
        [gpu_class()],
    )
    outcome = place(snapshot, [claim_with(request(all=True))], [node("worker-1"),
                                                                 node("worker-2")])
    assert list(outcome.placements) == ["worker-2"]
    reason = outcome.reasons["worker-1"]
    assert reason.code is ReasonCode.POOL_INCOMPLETE
    assert reason.error is not None
    assert "gpu.kdra.dev/worker-1 is incomplete" in str(reason.error)


def test_pool_invalid_is_a_node_reason() -> None:
    snapshot = Snapshot.build(
        [slice_with(device("gpu-0"), name="s1", count=2),
         slice_with(device("gpu-0"), name="s2", count=2)],
        [gpu_class()],
    )
    outcome = place(snapshot, [claim_with()], [node()])
    assert outcome.reasons["worker-1"].code is ReasonCode.POOL_INVALID
    assert outcome.reasons["worker-1"].message == (
        "invalid resource pools were encountered (device name gpu-0 appears more than once)")
    assert "device name gpu-0 appears more than once" in outcome.reasons["worker-1"].detail


def test_cel_runtime_error_is_a_node_reason_naming_expression_and_device() -> None:
    snapshot, nodes = cluster([device("gpu-0")], h100s(1))
    outcome = place(snapshot, [claim_with(request("gpu", H100), name="c")], nodes)
    assert list(outcome.placements) == ["worker-2"]
    reason = outcome.reasons["worker-1"]
    assert reason.code is ReasonCode.CEL_ERROR
    assert H100 in reason.message
    assert "gpu.kdra.dev/worker-1/gpu-0" in reason.detail
    assert reason.error is not None and reason.error.__cause__ is not None


def test_missing_class_is_fatal_once() -> None:
    snapshot, nodes = cluster(h100s(1), h100s(1))
    outcome = place(snapshot, [claim_with(request("gpu", cls="nope.kdra.dev"), name="c")],
                    nodes)
    assert outcome.fatal is not None
    assert outcome.fatal.code is ReasonCode.CLASS_MISSING
    assert not outcome.placements and not outcome.reasons
    assert outcome.summary(2) == (
        "0/2 nodes are available: device class nope.kdra.dev not found (request gpu of claim "
        "default/c).")


def test_too_many_devices_by_count_is_fatal() -> None:
    snapshot, nodes = cluster(h100s(1))
    outcome = place(snapshot, [claim_with(request(count=40))], nodes)
    assert outcome.fatal is not None
    assert outcome.fatal.code is ReasonCode.TOO_MANY_DEVICES


def test_too_many_devices_for_all_depends_on_the_node() -> None:
    snapshot, nodes = cluster(h100s(33), h100s(2))
    outcome = place(snapshot, [claim_with(request(all=True))], nodes)
    assert outcome.reasons["worker-1"].code is ReasonCode.TOO_MANY_DEVICES
    assert list(outcome.placements) == ["worker-2"]


def test_limit_stops_after_enough_placements() -> None:
    snapshot, nodes = cluster(*[h100s(1) for _ in range(5)])
    outcome = place(snapshot, [claim_with()], nodes, limit=2)
    assert list(outcome.placements) == ["worker-1", "worker-2"]
    assert outcome.unevaluated == 3


def test_in_flight_devices_are_busy() -> None:
    snapshot, nodes = cluster(h100s(1), h100s(1))
    outcome = place(snapshot, [claim_with()], nodes,
                    in_flight={DeviceId(DRIVER, "worker-1", "gpu-0")})
    assert list(outcome.placements) == ["worker-2"]
    assert outcome.reasons["worker-1"].code is ReasonCode.DEVICES_BUSY


def test_free_after_counts_matching_devices_per_class() -> None:
    snapshot, nodes = cluster(h100s(4), h100s(8))
    outcome = place(snapshot, [claim_with(request(count=3))], nodes)
    assert {n: p.free_after[CLASS] for n, p in outcome.placements.items()} == {
        "worker-1": 1, "worker-2": 5}


def test_warm_cluster_evaluates_no_cel() -> None:
    snapshot, nodes = cluster(*[h100s(4) for _ in range(10)])
    claim = claim_with(request("gpu", H100))
    place(snapshot, [claim], nodes)
    warm = snapshot.stats.copy()
    outcome = place(snapshot, [claim], nodes)
    assert len(outcome.placements) == 10
    assert snapshot.stats.since(warm).cel_evaluations == 0


def test_start_rotates_the_scan_and_tells_where_to_continue() -> None:
    snapshot, nodes = cluster(*[h100s(1) for _ in range(4)])
    outcome = place(snapshot, [claim_with()], nodes, limit=1, start=2)
    assert list(outcome.placements) == ["worker-3"]
    assert outcome.next_start == 3
    outcome = place(snapshot, [claim_with()], nodes, limit=2, start=3)
    assert list(outcome.placements) == ["worker-4", "worker-1"]
    assert outcome.next_start == 1
    assert outcome.unevaluated == 2


def test_cached_counts_follow_allocations() -> None:
    snapshot, nodes = cluster(h100s(1), h100s(1))
    claim = claim_with(name="a")
    first = place(snapshot, [claim], nodes)
    assert set(first.placements) == {"worker-1", "worker-2"}
    snapshot.assume(claim, first.placements["worker-1"].results[0])
    second = place(snapshot, [claim_with(name="b")], nodes)
    assert list(second.placements) == ["worker-2"]
    assert second.reasons["worker-1"].code is ReasonCode.DEVICES_BUSY
    snapshot.forget(claim.key)
    assert set(place(snapshot, [claim_with(name="b")], nodes).placements) == {
        "worker-1", "worker-2"}


def test_cached_counts_follow_allocations_in_shared_pools() -> None:
    snapshot = Snapshot.build([slice_with(*devices(1), all_nodes=True, pool="shared")],
                              [gpu_class()])
    nodes = [node("worker-1"), node("worker-2")]
    claim = claim_with(name="a")
    first = place(snapshot, [claim], nodes)
    assert set(first.placements) == {"worker-1", "worker-2"}
    snapshot.assume(claim, first.placements["worker-1"].results[0])
    second = place(snapshot, [claim_with(name="b")], nodes)
    assert not second.placements
    assert second.summary() == (
        '0/2 nodes are available: 2 matching devices all allocated (request "gpu" of claim "b").')
    assert second.reasons["worker-1"] is second.reasons["worker-2"]  # shared, not rebuilt


def test_all_without_matching_devices_is_no_matching_device() -> None:
    snapshot, nodes = cluster(a100s(2))
    outcome = place(snapshot, [claim_with(request("gpu", H100, all=True), name="c")], nodes)
    assert outcome.reasons["worker-1"].code is ReasonCode.NO_MATCHING_DEVICE


def test_all_with_a_busy_device_is_devices_busy() -> None:
    snapshot, nodes = cluster(h100s(2))
    snapshot.upsert_claim(allocated(claim_with(name="old"), ("gpu", "gpu-1"), pool="worker-1"))
    outcome = place(snapshot, [claim_with(request(all=True), name="c")], nodes)
    reason = outcome.reasons["worker-1"]
    assert reason.code is ReasonCode.DEVICES_BUSY
    assert reason.message == (
        'matching devices partly allocated (request "gpu" of claim "c" asks for all of them)')


def test_placement_results_match_allocate() -> None:
    snapshot, nodes = cluster(h100s(3))
    claims = [claim_with(request(count=2), name="a"), claim_with(name="b")]
    outcome = place(snapshot, claims, nodes)
    assert list(outcome.placements["worker-1"].results) == allocate(claims, snapshot, nodes[0])


# --------------------------------------------------------------------------- counted placements

SIZE = f"{GPU}.size"  # raises on a device without ``size``


@st.composite
def one_request_clusters(draw: st.DrawFn) -> tuple[Snapshot, list[NodeInfo], ResourceClaim]:
    """Nodes with a few devices (some lacking ``size``, some in use by other claims, now and
    then a shared pool every node sees) and a pod with one request, perhaps constrained."""
    slices: list[ResourceSlice] = []
    busy: list[ResourceClaim] = []
    node_count = draw(st.integers(1, 4))
    for i in range(1, node_count + 1):
        specs = draw(st.lists(st.tuples(st.sampled_from(["x", "y"]),
                                        st.sampled_from([1, 2, None]), st.booleans()),
                              max_size=5))
        members = [device(f"gpu-{d}", kind=kind, **({"size": size} if size else {}))
                   for d, (kind, size, _) in enumerate(specs)]
        slices.append(slice_with(*members, node=f"worker-{i}"))
        for d, (_, _, in_use) in enumerate(specs):
            if in_use:
                busy.append(allocated(claim_with(name=f"old-{i}-{d}"), ("gpu", f"gpu-{d}"),
                                      pool=f"worker-{i}"))
    if draw(st.booleans()):
        slices.append(slice_with(*devices(draw(st.integers(1, 3)), prefix="s", kind="x"),
                                 all_nodes=True, pool="shared"))
    selectors = draw(st.lists(st.sampled_from([f'{GPU}.kind == "x"', f"{SIZE} > 1"]),
                              max_size=2, unique=True))
    constrained = draw(st.booleans())
    claim = claim_with(request("gpu", *selectors, count=draw(st.integers(1, 3)),
                               admin=draw(st.integers(0, 4)) == 0),
                       name="pod-gpu",
                       constraints=[match(f"{DRIVER}/kind")] if constrained else [])
    snapshot = Snapshot.build(slices, [gpu_class()])
    for old in busy:
        snapshot.upsert_claim(old)
    return snapshot, [node(f"worker-{i}") for i in range(1, node_count + 1)], claim


@settings(max_examples=300, deadline=None)
@given(one_request_clusters())
def test_placements_agree_with_a_search_on_each_node(
    scenario: tuple[Snapshot, list[NodeInfo], ResourceClaim],
) -> None:
    """Counted or searched, a node is placed exactly when ``allocate`` finds a result there,
    with the same result and free-after count; bad input on a node stays that node's error.
    Twice, so the second pass runs on cached counts."""
    snapshot, nodes_, claim = scenario
    for _ in range(2):
        outcome = place(snapshot, [claim], nodes_)
        for info in nodes_:
            try:
                expected = allocate([claim], snapshot, info)
            except AllocationError:
                reason = outcome.reasons[info.name]
                assert reason.error, reason
                continue
            if expected is None:
                assert info.name in outcome.reasons
                continue
            placement = outcome.placements[info.name]
            assert list(placement.results) == expected
            taken = {(r.pool, r.device) for r in expected[0].devices.results}
            free = sum(1 for pool in snapshot.node_pools(info).pools for e in pool.entries
                       if e.id not in snapshot.devices_in_use  # every device is the class's
                       and (e.id.pool, e.id.device) not in taken)
            if not claim.spec.devices.requests[0].admin_access:
                assert placement.free_after == {CLASS: free}
