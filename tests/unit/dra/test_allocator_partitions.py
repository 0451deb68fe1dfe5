"""Issue 26: partitionable devices (shared counters) and consumable capacity (shares) in the
allocator — counters never exceeded, capacity never over-committed, in-flight allocations
counted, request policies applied, explanations that name what ran out, and the
fragmentation-aware order compared with first-fit."""

from __future__ import annotations

import re
import uuid
from decimal import Decimal
from typing import Any

import pytest

from kdra.dra.allocator import Placing, Snapshot, allocate, place
from kdra.dra.allocator.capacity import CapacitySpec, demand, parse_requests, round_up
from kdra.dra.allocator.fragmentation import stranded
from kdra.dra.allocator.ledger import Ledger
from kdra.dra.allocator.search import busy_view
from kdra.dra.errors import AllocationError
from kdra.dra.models import AllocationResult, ResourceClaim, ResourceSlice, parse_slice
from kdra.dra.quantity import Format, parse_quantity
from tests.unit.builders import (
    DRIVER,
    DRIVER_SELECTOR,
    NODE,
    claim_with,
    class_with,
    device,
    first_available,
    node,
    request,
    slice_with,
    sub,
)
from tests.unit.partition_slices import node_slices

MIG = "mig.gpu.kdra.dev"
WHOLE = "gpu.kdra.dev"
SHARED = "shared.gpu.kdra.dev"


def kind(value: str) -> str:
    return f'device.attributes["gpu.kdra.dev"].type == "{value}"'


def profile(name: str) -> str:
    return f'device.attributes["gpu.kdra.dev"].profile == "{name}"'


CLASSES = [class_with(MIG, DRIVER_SELECTOR, kind("mig")),
           class_with(WHOLE, DRIVER_SELECTOR, kind("gpu")),
           class_with(SHARED, DRIVER_SELECTOR, kind("shared"))]


def h100s(count: int, node_name: str = NODE) -> list[ResourceSlice]:
    return [parse_slice(s) for s in node_slices(node_name, f"{count} x H100-80GB")]


def ask(name: str, wanted: str) -> ResourceClaim:
    if wanted == "whole":
        return claim_with(request("gpu", cls=WHOLE), name=name)
    return claim_with(request("gpu", profile(wanted), cls=MIG), name=name)


def with_allocation(claim: ResourceClaim, result: AllocationResult) -> ResourceClaim:
    return claim.model_copy(update={"status": claim.status.model_copy(
        update={"allocation": result})})


def take(snapshot: Snapshot, claim: ResourceClaim, *, scoring: bool = True) -> str | None:
    """Allocate ``claim`` alone on the node and record it as allocated: its device, or None."""
    results = allocate([claim], snapshot, node(), scoring=scoring)
    if results is None:
        return None
    snapshot.upsert_claim(with_allocation(claim, results[0]))
    return ",".join(r.device for r in results[0].devices.results)


def counters_used(snapshot: Snapshot) -> dict[tuple[str, str], Decimal]:
    """Literal recount: (set, counter) → what the allocated devices consume, each device once."""
    pools = snapshot.node_pools(node())
    held = set(snapshot.devices_in_use) | set(snapshot.shares)
    used: dict[tuple[str, str], Decimal] = {}
    for pool in pools.pools:
        for entry in pool.entries:
            if entry.id in held:
                for set_name, counter, amount in entry.consumes:
                    key = (set_name, counter)
                    used[key] = used.get(key, Decimal(0)) + amount
    return used


def assert_within_totals(snapshot: Snapshot) -> None:
    pools = snapshot.node_pools(node())
    totals = {(s, c): v for pool in pools.pools for s, cs in pool.counter_sets.items()
              for c, v in cs.items()}
    for key, value in counters_used(snapshot).items():
        assert value <= totals[key], (key, value, totals[key])


# --------------------------------------------------------------------------- counters

SEQUENCES = [
    ("seven 1g then no eighth", ["1g.10gb"] * 8, [True] * 7 + [False]),
    ("two 3g fill the memory", ["3g.40gb", "3g.40gb", "1g.10gb"], [True, True, False]),
    ("4g next to a 3g", ["4g.40gb", "3g.40gb", "1g.10gb"], [True, True, False]),
    ("7g takes it all", ["7g.80gb", "1g.10gb", "whole"], [True, False, False]),
    ("whole GPU excludes partitions", ["whole", "1g.10gb", "7g.80gb"], [True, False, False]),
    ("three 2g and one 1g", ["2g.20gb"] * 3 + ["1g.10gb"] * 2, [True] * 4 + [False]),
    ("a 1g then no 7g", ["1g.10gb", "7g.80gb", "whole"], [True, False, False]),
]


@pytest.mark.parametrize("scoring", [True, False], ids=["kdra", "first-fit"])
@pytest.mark.parametrize(("label", "wanted", "fits"), SEQUENCES, ids=[s[0] for s in SEQUENCES])
def test_counters_are_never_exceeded(label: str, wanted: list[str], fits: list[bool],
                                     scoring: bool) -> None:
    snapshot = Snapshot.build(h100s(1), CLASSES)
    got = []
    for i, size in enumerate(wanted):
        got.append(take(snapshot, ask(f"c{i}", size), scoring=scoring) is not None)
        assert_within_totals(snapshot)
    assert got == fits


def test_in_flight_allocations_count_and_forgetting_frees_them() -> None:
    snapshot = Snapshot.build(h100s(1), CLASSES)
    big = ask("big", "7g.80gb")
    results = allocate([big], snapshot, node())
    assert results is not None
    snapshot.assume(big, results[0])
    assert allocate([ask("small", "1g.10gb")], snapshot, node()) is None
    snapshot.forget(big.key)
    assert allocate([ask("small", "1g.10gb")], snapshot, node()) is not None


def test_one_pod_two_partitions_share_the_counters_in_one_search() -> None:
    snapshot = Snapshot.build(h100s(1), CLASSES)
    two = claim_with(request("a", profile("4g.40gb"), cls=MIG),
                     request("b", profile("4g.40gb"), cls=MIG), name="two")
    assert allocate([two], snapshot, node()) is None  # one 4g placement only
    pair = claim_with(request("a", profile("3g.40gb"), cls=MIG, count=2), name="pair")
    results = allocate([pair], snapshot, node())
    assert results is not None
    assert sorted(r.device for r in results[0].devices.results) == [
        "gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"]


def test_a_counter_set_missing_from_the_pool_makes_the_pool_invalid() -> None:
    """Issue 39, as upstream (partitionable-devices-device-counter-consumption-references-
    unknown-counter-set): the pool is invalid, which is the node's error."""
    slices = node_slices(NODE, "1 x H100-80GB")
    devices_only = [s for s in slices if s["spec"].get("devices")]
    devices_only[0]["spec"]["pool"]["resourceSliceCount"] = 1
    snapshot = Snapshot.build([parse_slice(s) for s in devices_only], CLASSES)
    with pytest.raises(AllocationError, match="invalid resource pools were encountered"):
        allocate([ask("c", "1g.10gb")], snapshot, node())
    summary = place(snapshot, [ask("c", "1g.10gb")], [node()]).summary()
    assert "consumes counter set gpu-0, which the pool does not publish" in summary, summary


def test_explanation_names_the_counter_that_ran_out() -> None:
    snapshot = Snapshot.build(h100s(1), CLASSES)
    assert take(snapshot, ask("a", "4g.40gb")) is not None
    assert take(snapshot, ask("b", "3g.40gb")) is not None
    outcome = place(snapshot, [ask("c", "1g.10gb")], [node()])
    assert not outcome.placements
    reason = outcome.reasons[NODE]
    assert reason.code == "counters-exhausted"
    assert "shared counters of the matching devices used up" in reason.message
    assert "gpu-0: memory-slices 8/8 used, asked 1, compute-slices 7/7 used, asked 1" in (
        reason.detail), reason.detail


def test_first_available_partition_else_whole_gpu() -> None:
    plain = device("gpu-9", type="gpu")  # a GPU that is not partitionable
    slices = [*h100s(1), slice_with(plain, name="plain", pool="plain")]
    snapshot = Snapshot.build(slices, CLASSES)
    pod = claim_with(first_available("gpu", sub("part", profile("3g.40gb"), cls=MIG),
                                     sub("whole", cls=WHOLE)), name="p")
    assert take(snapshot, pod.model_copy(update={"metadata": pod.metadata.model_copy(
        update={"name": "p1"})})) == "gpu-0-mig-3g-40gb-4"  # leaves room for a 4g at 0
    assert take(snapshot, pod.model_copy(update={"metadata": pod.metadata.model_copy(
        update={"name": "p2"})})) == "gpu-0-mig-3g-40gb-0"
    results = allocate([pod], snapshot, node())  # no 3g left; the H100 is not whole either
    assert results is not None
    assert [(r.request, r.device) for r in results[0].devices.results] == [
        ("gpu/whole", "gpu-9")]


# --------------------------------------------------------------------------- shares

RANGE = {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi", "max": "80Gi"}}


def shared_gpu(name: str = "gpu-s", memory: str = "80Gi",
               policy: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "allowMultipleAllocations": True,
            "attributes": {"type": {"string": "shared"}},
            "capacity": {"memory": {"value": memory, "requestPolicy": policy or RANGE}}}


def share(name: str, memory: str | None, count: int | None = None) -> ResourceClaim:
    asked = request("gpu", cls=SHARED, count=count)
    if memory is not None:
        asked["exactly"]["capacity"] = {"requests": {"memory": memory}}
    return claim_with(asked, name=name)


def test_capacity_is_never_over_committed_and_results_carry_shares() -> None:
    snapshot = Snapshot.build([slice_with(shared_gpu())], CLASSES)
    ids = set()
    for i in range(4):
        claim = share(f"s{i}", "20Gi")
        results = allocate([claim], snapshot, node())
        assert results is not None, i
        result = results[0].devices.results[0]
        assert result.consumed_capacity == {"memory": "20Gi"}
        assert result.share_id is not None and str(uuid.UUID(result.share_id)) == (
            result.share_id)
        ids.add(result.share_id)
        snapshot.upsert_claim(with_allocation(claim, results[0]))
    assert len(ids) == 4
    assert snapshot.shares[next(iter(snapshot.shares))].consumed == {
        "memory": parse_quantity("80Gi").value}
    assert allocate([share("s5", "1Gi")], snapshot, node()) is None
    outcome = place(snapshot, [share("s5", "20Gi")], [node()])
    reason = outcome.reasons[NODE]
    assert reason.code == "capacity-exhausted"
    assert "gpu-s: memory 80Gi of 80Gi used, asked 20Gi" in reason.detail, reason.detail
    snapshot.remove_claim("default/s0")
    assert allocate([share("s5", "20Gi")], snapshot, node()) is not None


def test_one_request_may_take_two_shares_of_one_device() -> None:
    snapshot = Snapshot.build([slice_with(shared_gpu())], CLASSES)
    results = allocate([share("two", "30Gi", count=2)], snapshot, node())
    assert results is not None
    assert [r.consumed_capacity for r in results[0].devices.results] == [
        {"memory": "30Gi"}, {"memory": "30Gi"}]
    assert allocate([share("three", "30Gi", count=3)], snapshot, node()) is None


def test_unrequested_capacity_takes_the_default_or_everything() -> None:
    snapshot = Snapshot.build([slice_with(shared_gpu())], CLASSES)
    results = allocate([share("d", None)], snapshot, node())
    assert results is not None and results[0].devices.results[0].consumed_capacity == {
        "memory": "1Gi"}
    no_default = shared_gpu(policy={"validValues": ["10Gi", "80Gi"]})
    snapshot = Snapshot.build([slice_with(no_default)], CLASSES)
    results = allocate([share("d", None)], snapshot, node())
    assert results is not None and results[0].devices.results[0].consumed_capacity == {
        "memory": "80Gi"}


def test_assumed_shares_count_until_forgotten() -> None:
    snapshot = Snapshot.build([slice_with(shared_gpu())], CLASSES)
    big = share("big", "70Gi")
    results = allocate([big], snapshot, node())
    assert results is not None
    snapshot.assume(big, results[0])
    assert allocate([share("more", "20Gi")], snapshot, node()) is None
    released = snapshot.releases
    snapshot.forget(big.key)
    assert snapshot.releases > released
    assert allocate([share("more", "20Gi")], snapshot, node()) is not None


def test_capacity_requests_filter_exclusive_devices_without_consuming() -> None:
    small, large = (device("gpu-0", type="gpu", capacity={"memory": "40Gi"}),
                    device("gpu-1", type="gpu", capacity={"memory": "80Gi"}))
    snapshot = Snapshot.build([slice_with(small, large)], CLASSES)
    asked = request("gpu", cls=WHOLE)
    asked["exactly"]["capacity"] = {"requests": {"memory": "60Gi"}}
    results = allocate([claim_with(asked)], snapshot, node())
    assert results is not None
    result = results[0].devices.results[0]
    assert (result.device, result.share_id, result.consumed_capacity) == ("gpu-1", None, None)


def test_invalid_capacity_request_is_refused_naming_the_field() -> None:
    snapshot = Snapshot.build([slice_with(shared_gpu())], CLASSES)
    with pytest.raises(AllocationError, match=re.escape("capacity.requests[memory]: -1Gi is "
                                                        "negative")):
        allocate([share("bad", "-1Gi")], snapshot, node())


def spec(value: str = "80Gi", **policy: Any) -> CapacitySpec:
    def q(text: str | None) -> Decimal | None:
        return None if text is None else parse_quantity(text).value
    return CapacitySpec("memory", parse_quantity(value).value, Format.BINARY_SI,
                        default=q(policy.get("default")),
                        valid_values=tuple(parse_quantity(v).value
                                           for v in policy.get("values", ())),
                        minimum=q(policy.get("min")), maximum=q(policy.get("max")),
                        step=q(policy.get("step")))


POLICIES = [
    # (label, spec, asked, shared, used, expected consumed or None)
    ("range rounds up to the step", spec(min="1Gi", step="1Gi"), "1536Mi", True, None, "2Gi"),
    ("range lifts to the minimum", spec(min="4Gi", step="2Gi"), "1Gi", True, None, "4Gi"),
    ("range without step keeps the amount", spec(min="1Gi"), "3500Mi", True, None, "3500Mi"),
    ("range above max is refused", spec(min="1Gi", max="40Gi"), "50Gi", True, None, None),
    ("step grid from min", spec(min="1Gi", step="4Gi"), "6Gi", True, None, "9Gi"),
    ("valid values: smallest not below", spec(values=["10Gi", "20Gi", "40Gi"]), "15Gi",
     True, None, "20Gi"),
    ("valid values: above all is refused", spec(values=["10Gi", "20Gi"]), "30Gi",
     True, None, None),
    ("default when not asked", spec(default="2Gi", min="1Gi"), None, True, None, "2Gi"),
    ("everything when not asked and no default", spec(), None, True, None, "80Gi"),
    ("no policy: the amount as asked", spec(), "30Gi", True, None, "30Gi"),
    ("used plus asked above the value is refused", spec(), "30Gi", True, "60Gi", None),
    ("used plus asked exactly the value fits", spec(), "20Gi", True, "60Gi", "20Gi"),
    ("exclusive device: must have it", spec(), "100Gi", False, None, None),
    ("exclusive device: asked is recorded", spec(), "20Gi", False, None, "20Gi"),
]


@pytest.mark.parametrize(("label", "capacity", "asked", "shared", "used", "expected"),
                         POLICIES, ids=[p[0] for p in POLICIES])
def test_request_policies(label: str, capacity: CapacitySpec, asked: str | None,
                          shared: bool, used: str | None, expected: str | None) -> None:
    requested = parse_requests({"memory": asked} if asked is not None else None)
    got = demand(requested, DRIVER, (capacity,),
                 {"memory": parse_quantity(used).value} if used else None)
    if expected is None:
        assert got is None
    else:
        assert got == {"memory": parse_quantity(expected).value}


def test_request_names_resolve_with_and_without_the_driver_domain() -> None:
    plain = spec()
    qualified = CapacitySpec(f"{DRIVER}/memory", plain.value, plain.format)
    for name in ("memory", f"{DRIVER}/memory"):
        for capacity in (plain, qualified):
            got = demand(parse_requests({name: "1Gi"}), DRIVER, (capacity,), None)
            assert got == {capacity.name: parse_quantity("1Gi").value}
    assert demand(parse_requests({"other.dev/memory": "1Gi"}), DRIVER, (plain,), None) is None
    assert demand(parse_requests({"bandwidth": "1"}), DRIVER, (plain,), None) is None
    assert round_up(parse_quantity("1").value, spec(min="0", step="3")) == 3


# --------------------------------------------------------------------------- scoring


def held(snapshot: Snapshot, name: str, device_name: str) -> None:
    """Record ``device_name`` as allocated to a claim ``name``."""
    claim = ask(name, "1g.10gb")
    results = allocate([claim], snapshot, node())
    assert results is not None
    result = results[0].model_copy(deep=True)
    first = result.devices.results[0].model_copy(update={"device": device_name})
    result = result.model_copy(update={"devices": result.devices.model_copy(
        update={"results": (first,)})})
    snapshot.upsert_claim(with_allocation(claim, result))


def test_scoring_packs_partitions_onto_the_gpu_already_in_use() -> None:
    for scoring, expected in ((True, "gpu-1-mig-1g-10gb-1"), (False, "gpu-0-mig-1g-10gb-0")):
        snapshot = Snapshot.build(h100s(2), CLASSES)
        held(snapshot, "first", "gpu-1-mig-1g-10gb-0")
        assert take(snapshot, ask("next", "1g.10gb"), scoring=scoring) == expected
        fits_7g = take(snapshot, ask("big", "7g.80gb"), scoring=scoring) is not None
        assert fits_7g is scoring


def test_scoring_does_not_strand_a_memory_slice() -> None:
    """A 1g at memory slice 4, 5 or 6 strands slice 7 (only a
    3g@4 or a 7g could use it): kdra's order never puts the first 1g there."""
    snapshot = Snapshot.build(h100s(1), CLASSES)
    assert take(snapshot, ask("one", "1g.10gb")) == "gpu-0-mig-1g-10gb-0"
    assert take(snapshot, ask("three", "3g.40gb")) == "gpu-0-mig-3g-40gb-4"
    pools = snapshot.node_pools(node())
    ledger = Ledger(pools, busy_view(snapshot, ()), snapshot.shares)
    pool = pools.pools[0]
    consumers = tuple(e for e in pool.entries if e.consumes)
    key = (DRIVER, NODE, "gpu-0")
    assert stranded(key, consumers, ledger) == 0
    held(snapshot, "six", "gpu-0-mig-1g-10gb-6")
    snapshot.remove_claim("default/three")
    ledger = Ledger(snapshot.node_pools(node()), busy_view(snapshot, ()), snapshot.shares)
    assert stranded(key, consumers, ledger) == 1  # memory slice 7: no allocatable device uses it


def test_scoring_binpacks_shares_onto_the_fullest_device() -> None:
    snapshot = Snapshot.build([slice_with(shared_gpu("gpu-a"), shared_gpu("gpu-b"))], CLASSES)
    first = share("first", "50Gi")
    results = allocate([first], snapshot, node())
    assert results is not None and results[0].devices.results[0].device == "gpu-a"
    snapshot.upsert_claim(with_allocation(first, results[0]))
    second = allocate([share("second", "20Gi")], snapshot, node())
    assert second is not None and second[0].devices.results[0].device == "gpu-a"
    third = allocate([share("third", "40Gi")], snapshot, node())
    assert third is not None and third[0].devices.results[0].device == "gpu-b"


def test_counted_placements_are_not_used_when_the_ledger_decides() -> None:
    """The cluster entry point decides one-request pods by counting free devices; with
    capacity requests, counters or shares, counting alone is wrong, so the node is searched."""
    small = device("gpu-0", type="gpu", capacity={"memory": "40Gi"})
    snapshot = Snapshot.build([slice_with(small)], CLASSES)
    asked = request("gpu", cls=WHOLE)
    asked["exactly"]["capacity"] = {"requests": {"memory": "60Gi"}}
    outcome = place(snapshot, [claim_with(asked)], [node()])
    assert not outcome.placements
    assert outcome.reasons[NODE].code == "capacity-exhausted"
    assert "gpu-0: memory 40Gi, asked 60Gi" in outcome.reasons[NODE].detail
    snapshot = Snapshot.build(h100s(1), CLASSES)
    assert take(snapshot, ask("big", "7g.80gb")) is not None
    outcome = place(snapshot, [ask("small", "1g.10gb")], [node()])
    assert not outcome.placements and outcome.reasons[NODE].code == "counters-exhausted"


def test_still_fits_replays_counters_and_shares_after_the_snapshot_changed() -> None:
    snapshot = Snapshot.build([*h100s(1), slice_with(shared_gpu(), name="shared",
                                                     pool="shared")], CLASSES)
    placing = Placing(snapshot, [ask("p", "4g.40gb")], [node()])
    outcome = placing.advance(None)
    assert outcome is not None
    partition = outcome.placements[NODE]
    sharing = Placing(snapshot, [share("s", "60Gi")], [node()])
    shared = sharing.advance(None)
    assert shared is not None
    held(snapshot, "other", "gpu-0-mig-1g-10gb-4")  # the 4g at 0 still fits
    assert placing.still_fits(partition)
    held(snapshot, "blocker", "gpu-0-mig-1g-10gb-0")
    assert not placing.still_fits(partition)  # memory slice 0 is gone
    assert sharing.still_fits(shared.placements[NODE])
    assert take(snapshot, share("s2", "30Gi")) is not None
    assert not sharing.still_fits(shared.placements[NODE])  # 30 + 60 > 80
