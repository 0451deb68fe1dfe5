"""Publishing GPUs as partitions (shared counters) or as shared devices (consumable memory)."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.agent.core.gpu_modes import SHARE_POLICY, partitioned
from kdra.agent.core.inventory import parse_inventory
from kdra.agent.core.inventory_devices import CounterUse, InventoryDevice
from kdra.agent.core.pool_layout import MAX_CONSUMED_COUNTERS_PER_SLICE, counter_sets_of, layout
from kdra.agent.core.publication import build_slices, plan_publication
from kdra.dra.errors import InvalidObject
from kdra.dra.models import parse_slice

DRIVER = "gpu.kdra.dev"


def slices_of(text: str, node: str = "n1") -> list[dict[str, Any]]:
    inventory = parse_inventory(text, node)
    slices = build_slices(node=node, driver=DRIVER, devices=inventory.devices, generation=3)
    for obj in slices:
        parse_slice(obj)  # every slice passes the API's rules
    return slices


def test_a_partitioned_h100_is_the_whole_gpu_plus_fourteen_partitions() -> None:
    inventory = parse_inventory("gpus: [{profile: H100-80GB, partitions: mig}]", "n1")
    names = [d.name for d in inventory.devices]
    assert names[0] == "gpu-0" and len(names) == 15
    profiles = [d.attribute("profile") for d in inventory.devices[1:]]
    assert {p: profiles.count(p) for p in set(profiles)} == {
        "1g.10gb": 7, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}
    whole, first = inventory.devices[0], inventory.devices[1]
    assert whole.attribute("type") == "gpu" and first.attribute("type") == "mig"
    assert first.parent == "gpu-0" and whole.parent == ""
    assert first.attribute("parentUUID") == whole.attribute("uuid")
    # The whole GPU consumes every counter of its set; the set rides on it.
    assert whole.counter_sets == (CounterUse("gpu-0", whole.consumes_counters[0].counters),)
    assert [d.name for d in inventory.devices if d.counter_sets] == ["gpu-0"]


def test_counter_sets_are_published_in_slices_of_their_own() -> None:
    slices = slices_of("gpus: [{profile: H100-80GB, count: 8, partitions: mig}]")
    with_devices = [s for s in slices if s["spec"].get("devices")]
    with_counters = [s for s in slices if s["spec"].get("sharedCounters")]
    assert len(with_devices) + len(with_counters) == len(slices) == 3
    assert all("sharedCounters" not in s["spec"] for s in with_devices)
    assert [len(s["spec"]["devices"]) for s in with_devices] == [64, 56]
    sets = with_counters[0]["spec"]["sharedCounters"]
    assert [c["name"] for c in sets] == [f"gpu-{i}" for i in range(8)]
    assert sets[0]["counters"]["memory-slices"] == {"value": "8"}
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert [s["metadata"]["name"] for s in slices] == [f"n1-gpu-kdra-dev-{i}" for i in range(3)]
    consumed = {u["counterSet"] for s in with_devices for d in s["spec"]["devices"]
                for u in d.get("consumesCounters", ())}
    assert consumed == {c["name"] for c in sets}  # every set consumed is published


def test_more_than_eight_gpus_need_a_second_counter_slice() -> None:
    slices = slices_of("gpus: [{profile: A100-80GB, count: 17, partitions: mig}]")
    counter_slices = [len(s["spec"]["sharedCounters"]) for s in slices
                      if s["spec"].get("sharedCounters")]
    assert counter_slices == [8, 8, 1]
    assert sum(len(s["spec"].get("devices", ())) for s in slices) == 17 * 15


def test_partitioned_and_whole_gpus_mix_in_one_pool() -> None:
    slices = slices_of("gpus:\n- {profile: H100-80GB, partitions: mig}\n- 2 x L4-24GB\n")
    devices = [d["name"] for s in slices for d in s["spec"].get("devices", ())]
    assert devices[-2:] == ["gpu-1", "gpu-2"] and len(devices) == 17
    assert "consumesCounters" not in next(d for s in slices for d in s["spec"].get(
        "devices", ()) if d["name"] == "gpu-1")


def test_a_shared_gpu_is_one_device_with_a_memory_request_policy() -> None:
    slices = slices_of("gpus: [{profile: H100-80GB, count: 2, sharing: memory}]")
    (only,) = slices
    device = only["spec"]["devices"][0]
    assert device["allowMultipleAllocations"] is True
    assert device["capacity"]["memory"] == {"value": "80Gi", "requestPolicy": {
        "default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi", "max": "80Gi"}}}
    assert SHARE_POLICY["default"] == "1Gi"
    assert "consumesCounters" not in device


def test_partitions_inherit_their_gpus_health() -> None:
    inventory = parse_inventory("gpus: [{profile: A100-40GB, count: 2, partitions: mig, "
                                "unhealthy: [1]}]", "n1")
    sick = [d for d in inventory.devices if not d.healthy]
    assert {d.parent or d.name for d in sick} == {"gpu-1"} and len(sick) == 15
    assert {d.health_reason for d in sick} == {"marked unhealthy in the inventory"}


@pytest.mark.parametrize(("entry", "field", "needle"), [
    ("{profile: H100-80GB, partitions: mps}", "gpus[0].partitions", "not a partition mode"),
    ("{profile: H100-80GB, sharing: time}", "gpus[0].sharing", "not a sharing mode"),
    ("{profile: L4-24GB, partitions: mig}", "gpus[0].partitions", "no partition layout"),
    ("{profile: H100-80GB, partitions: mig, sharing: memory}", "gpus[0].sharing",
     "either partitioned or shared"),
])
def test_bad_modes_name_the_field(entry: str, field: str, needle: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        parse_inventory(f"gpus:\n- {entry}\n", "n1", source="inv.yaml")
    assert caught.value.field == field and needle in str(caught.value)
    assert "inv.yaml line 2" in str(caught.value)


def test_nvml_style_existing_partitions_only() -> None:
    gpu = parse_inventory("gpus: [{profile: H100-80GB}]", "n1").devices[0]
    devices = partitioned(gpu, placements=[("3g.40gb", 0), ("1g.10gb", 4)],
                          include_whole=False)
    assert [d.name for d in devices] == ["gpu-0-mig-1g-10gb-4", "gpu-0-mig-3g-40gb-0"]
    assert devices[0].counter_sets and not devices[1].counter_sets  # the set, once


def test_a_change_of_mode_republishes_the_pool() -> None:
    before = parse_inventory("gpus: [{profile: H100-80GB}]", "n1").devices
    after = parse_inventory("gpus: [{profile: H100-80GB, partitions: mig}]", "n1").devices
    published = build_slices(node="n1", driver=DRIVER, devices=before, generation=1)
    plan = plan_publication(node="n1", driver=DRIVER, devices=after, published=published,
                            owner=None)
    assert plan.changed and plan.generation == 2 and len(plan.slices) == 2
    again = plan_publication(node="n1", driver=DRIVER, devices=after,
                             published=list(plan.slices), owner=None)
    assert not again.changed


def _device(name: str, counters: int = 0, sets: tuple[CounterUse, ...] = ()) -> InventoryDevice:
    uses = (CounterUse("s", {f"c{i}": "1" for i in range(counters)}),) if counters else ()
    return InventoryDevice(driver=DRIVER, name=name, consumes_counters=uses, counter_sets=sets)


def test_layout_bounds_the_counters_consumed_per_slice() -> None:
    devices = [_device(f"d{i}", counters=30) for i in range(64)]
    parts = layout(devices)
    assert all(sum(len(u.counters) for d in p.devices for u in d.consumes_counters)
               <= MAX_CONSUMED_COUNTERS_PER_SLICE for p in parts)
    assert [len(p.devices) for p in parts] == [34, 30]


def test_a_counter_set_provided_twice_is_an_error() -> None:
    one = CounterUse("gpu-0", {"a": "1"})
    with pytest.raises(ValueError, match="provided by both a and b"):
        counter_sets_of([_device("a", sets=(one,)), _device("b", sets=(one,))])
    with pytest.raises(ValueError, match="at most 32"):
        counter_sets_of([_device("a", sets=(CounterUse("big", {f"c{i}": "1"
                                                               for i in range(33)}),))])
