"""The snapshot's incremental indexes and the selector memo."""

from __future__ import annotations

from kdra.dra.allocator import DeviceId, Snapshot, allocate, devices_in_use
from kdra.dra.allocator.pools import CACHE_LIMIT
from kdra.dra.models import AllocationResult
from tests.unit.builders import (
    DRIVER,
    NODE,
    allocated,
    claim_with,
    device,
    devices,
    gpu_class,
    node,
    request,
    slice_with,
)

GPU = f'device.attributes["{DRIVER}"]'


def gpu(name: str, pool: str = NODE) -> DeviceId:
    return DeviceId(DRIVER, pool, name)


def test_slices_replace_and_remove_update_what_a_node_sees() -> None:
    snapshot = Snapshot.build([slice_with(*devices(1))], [gpu_class()])
    assert allocate([claim_with(request(count=2))], snapshot, node()) is None
    snapshot.upsert_slice(slice_with(*devices(2)))  # same name, more devices
    assert allocate([claim_with(request(count=2))], snapshot, node()) is not None
    snapshot.remove_slice(slice_with(*devices(2)).metadata.name)
    assert allocate([claim_with()], snapshot, node()) is None


def test_node_cache_is_per_node() -> None:
    snapshot = Snapshot.build(
        [slice_with(*devices(1), node=f"worker-{i}") for i in (1, 2)], [gpu_class()]
    )
    first, second = node("worker-1"), node("worker-2")
    pools_1, pools_2 = snapshot.node_pools(first), snapshot.node_pools(second)
    assert snapshot.node_pools(first) is pools_1
    snapshot.upsert_slice(slice_with(*devices(3), node="worker-2"))
    assert snapshot.node_pools(first) is pools_1  # untouched
    assert snapshot.node_pools(second) is not pools_2
    snapshot.upsert_slice(slice_with(*devices(1), all_nodes=True, pool="shared"))
    assert snapshot.node_pools(first) is not pools_1  # global slices reach every node


def test_node_labels_key_the_cache_only_when_selectors_exist() -> None:
    rack_a = {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a"]}]}
    snapshot = Snapshot.build([slice_with(*devices(1), node_selector=rack_a, pool="rack")],
                              [gpu_class()])
    assert allocate([claim_with()], snapshot, node(rack="a")) is not None
    assert allocate([claim_with()], snapshot, node(rack="b")) is None
    assert allocate([claim_with()], snapshot, node(rack="a")) is not None


def test_equal_spec_keeps_the_memo() -> None:
    snapshot = Snapshot.build([slice_with(*devices(2))], [gpu_class()])
    allocate([claim_with()], snapshot, node())
    before = snapshot.stats.cel_evaluations
    republished = slice_with(*devices(2))
    republished = republished.model_copy(
        update={"metadata": republished.metadata.model_copy(update={"resource_version": "9"})})
    snapshot.upsert_slice(republished)
    allocate([claim_with()], snapshot, node())
    assert snapshot.stats.cel_evaluations == before


def test_changed_slice_is_evaluated_again() -> None:
    snapshot = Snapshot.build([slice_with(*devices(2))], [gpu_class()])
    allocate([claim_with()], snapshot, node())
    before = snapshot.stats.cel_evaluations
    snapshot.upsert_slice(slice_with(*devices(2), generation=1))
    allocate([claim_with()], snapshot, node())
    assert snapshot.stats.cel_evaluations > before


def test_claims_mark_devices_in_use_and_release_them() -> None:
    snapshot = Snapshot.build([slice_with(*devices(2))], [gpu_class()])
    holder = allocated(claim_with(name="holder"), ("gpu", "gpu-0"))
    snapshot.upsert_claim(holder)
    assert snapshot.in_use(gpu("gpu-0"))
    snapshot.upsert_claim(holder)  # idempotent
    assert dict(snapshot.devices_in_use) == {gpu("gpu-0"): 1}
    snapshot.upsert_claim(claim_with(name="holder"))  # deallocated
    assert not snapshot.devices_in_use
    snapshot.upsert_claim(holder)
    snapshot.remove_claim(holder.key)
    assert not snapshot.devices_in_use


def test_assumed_allocations_count_until_forgotten() -> None:
    snapshot = Snapshot.build([slice_with(*devices(1))], [gpu_class()])
    claim = claim_with(name="pending")
    [result] = allocate([claim], snapshot, node()) or []
    snapshot.assume(claim, result)
    assert allocate([claim_with(name="next")], snapshot, node()) is None
    # the write is observed: claim and assumption both hold the device, counted twice
    written = claim.model_copy(update={"status": claim.status.model_copy(
        update={"allocation": result})})
    snapshot.upsert_claim(written)
    assert snapshot.devices_in_use[gpu("gpu-0")] == 2
    snapshot.forget(claim.key)
    assert snapshot.devices_in_use[gpu("gpu-0")] == 1
    snapshot.remove_claim(claim.key)
    assert not snapshot.devices_in_use


def test_devices_in_use_skips_admin_access_results() -> None:
    claim = allocated(claim_with(request("watch", admin=True), request("use")),
                      ("watch", "gpu-0"), ("use", "gpu-1"))
    assert devices_in_use(claim) == {gpu("gpu-1")}
    assert devices_in_use(claim_with()) == frozenset()


def test_classes_can_change() -> None:
    snapshot = Snapshot.build([slice_with(*devices(1))], [gpu_class()])
    snapshot.remove_class("gpu.kdra.dev")
    assert snapshot.get_class("gpu.kdra.dev") is None
    snapshot.upsert_class(gpu_class(f"{GPU}.index == 7"))
    assert allocate([claim_with()], snapshot, node()) is None


def test_version_moves_on_every_change() -> None:
    snapshot = Snapshot()
    seen = [snapshot.version]
    snapshot.upsert_slice(slice_with(*devices(1)))
    seen.append(snapshot.version)
    snapshot.upsert_class(gpu_class())
    seen.append(snapshot.version)
    snapshot.upsert_claim(allocated(claim_with(), ("gpu", "gpu-0")))
    seen.append(snapshot.version)
    assert seen == sorted(set(seen))


# --------------------------------------------------------------------------- memoisation


def test_second_identical_placement_evaluates_no_selector() -> None:
    expression = f'{GPU}.productName == "H100"'
    snapshot = Snapshot.build(
        [slice_with(*[device(f"gpu-{i}", productName="H100") for i in range(4)])],
        [gpu_class()],
    )
    claim = claim_with(request("gpu", expression, count=2))
    first = allocate([claim], snapshot, node())
    warm = snapshot.stats.copy()
    second = allocate([claim], snapshot, node())
    assert first == second
    done = snapshot.stats.since(warm)
    assert done.cel_evaluations == 0
    assert done.pool_gathers == 0
    assert done.match_lists_built == 0


def test_memo_is_shared_by_requests_with_the_same_expression() -> None:
    snapshot = Snapshot.build([slice_with(*devices(4))], [gpu_class()])
    allocate([claim_with(name="a")], snapshot, node())
    warm = snapshot.stats.copy()
    # another claim, another request name: same class selector, nothing to evaluate
    allocate([claim_with(request("other"), name="b")], snapshot, node())
    assert snapshot.stats.since(warm).cel_evaluations == 0


def test_each_device_and_expression_is_evaluated_once() -> None:
    snapshot = Snapshot.build([slice_with(*devices(4))], [gpu_class()])
    claim = claim_with(request("gpu", f"{GPU}.index >= 0", count=4))
    allocate([claim], snapshot, node())
    # class selector + request selector, on four devices
    assert snapshot.stats.cel_evaluations == 8


def _result_devices(result: AllocationResult) -> list[str]:
    return [r.device for r in result.devices.results]


def test_placements_marked_in_use_fill_the_node() -> None:
    snapshot = Snapshot.build([slice_with(*devices(3))], [gpu_class()])
    taken = []
    for i in range(4):
        claim = claim_with(name=f"c{i}")
        results = allocate([claim], snapshot, node())
        if results is None:
            break
        snapshot.assume(claim, results[0])
        taken += _result_devices(results[0])
    assert taken == ["gpu-0", "gpu-1", "gpu-2"]


def test_one_off_selectors_do_not_grow_caches_without_bound() -> None:
    snapshot = Snapshot.build([slice_with(*devices(2))], [gpu_class()])
    for i in range(CACHE_LIMIT + 20):
        allocate([claim_with(request("gpu", f"{GPU}.index != {1000 + i}"))], snapshot, node())
    pools = snapshot.node_pools(node())
    entry = pools.pools[0].entries[0]
    assert len(entry._memo) <= CACHE_LIMIT
    assert len(pools._matching) <= CACHE_LIMIT
    # still correct after starting over
    assert allocate([claim_with(request("gpu", f"{GPU}.index == 1"))], snapshot, node())
