"""Issue 39: properties of the allocator over generated input.

1. Counters and capacity are never exceeded across the nodes of one pool: a pool spread over
   three nodes (its counter sets in a slice of their own, devices — partitions and shareable
   devices — in a slice per node), random claims allocated on random nodes one after the
   other; after every allocation a literal recount of what the allocated claims hold stays
   within every counter set's totals and every shared device's capacity.
2. ``allocate()`` raises only kdra's errors (:class:`~kdra.dra.errors.KdraError`) on
   arbitrary slices, classes and claims — quantities from zero to far beyond int64, counters
   and capacities with request policies, per-device node selection, binding conditions,
   taints, prioritized lists, constraints —, and returns within its step budget.
3. The same on input shaped where the arithmetic is (one complete pool of partitions and
   shareable devices, claims of several requests): on the allocator before issue 39 this
   finds, within its examples, the ``KeyError`` of a counter given back twice and the
   ``decimal.InvalidOperation`` of a capacity request beyond 1e28 against a step.
"""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kdra.dra.allocator import NodeInfo, Snapshot, allocate
from kdra.dra.errors import InvalidObject, KdraError
from kdra.dra.models import (
    ResourceClaim,
    ResourceSlice,
    parse_claim,
    parse_class,
    parse_slice,
)
from kdra.dra.quantity import parse_quantity

DRIVER = "gpu.kdra.dev"
NODES = [NodeInfo(f"node-{i}", {"rack": "a" if i % 2 else "b"}) for i in range(3)]

# --------------------------------------------------------------------------- property 1

COUNTER_TOTAL = 8
SHARE_CAPACITY = 4


def pool_slices(layout: list[list[tuple[str, int, int]]]) -> list[ResourceSlice]:
    """One pool over three nodes: set ``gpu`` (memory 8) in its own slice (for all nodes);
    per node, devices
    ``(kind, memory, shares)``: a partition consuming ``memory`` of the set, or a shareable
    device (capacity 4, consuming ``memory`` of the set once for all its shares)."""
    pool = {"name": "p", "generation": 1, "resourceSliceCount": 1 + len(layout)}
    slices = [{"metadata": {"name": "p-counters"}, "spec": {
        "driver": DRIVER, "allNodes": True, "pool": pool,
        "sharedCounters": [{"name": "gpu", "counters": {
            "memory": {"value": str(COUNTER_TOTAL)}}}]}}]
    for index, devices in enumerate(layout):
        listed = []
        for position, (kind, memory, _) in enumerate(devices):
            device: dict[str, Any] = {"name": f"n{index}-d{position}", "consumesCounters": [
                {"counterSet": "gpu", "counters": {"memory": {"value": str(memory)}}}]}
            if kind == "shared":
                device["allowMultipleAllocations"] = True
                device["capacity"] = {"slots": {"value": str(SHARE_CAPACITY)}}
            listed.append(device)
        slices.append({"metadata": {"name": f"p-node-{index}"}, "spec": {
            "driver": DRIVER, "nodeName": f"node-{index}", "pool": pool, "devices": listed}})
    return [parse_slice(s) for s in slices]


CLASS = parse_class({"metadata": {"name": "gpu"}, "spec": {"selectors": [
    {"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})

devices_per_node = st.lists(
    st.tuples(st.sampled_from(["partition", "shared"]), st.integers(0, 5), st.just(0)),
    min_size=1, max_size=3)
asks = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 2), st.integers(0, 3)),
                min_size=1, max_size=10)


def claim_for(index: int, count: int, slots: int) -> ResourceClaim:
    exactly: dict[str, Any] = {"deviceClassName": "gpu", "count": count}
    if slots:
        exactly["capacity"] = {"requests": {"slots": str(slots)}}
    return parse_claim({"metadata": {"name": f"c{index}", "namespace": "default",
                                     "uid": f"c{index}"},
                        "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}}})


def recount(slices: list[ResourceSlice], claims: list[ResourceClaim]) -> tuple[Decimal,
                                                                               dict[str, Decimal]]:
    """Counter memory held and capacity consumed per shared device, from the claims alone."""
    consumes = {d.name: sum((parse_quantity(c.value).value for use in d.consumes_counters
                             for c in use.counters.values()), Decimal(0))
                for s in slices for d in s.spec.devices}
    held: set[str] = set()
    slots: dict[str, Decimal] = {}
    for claim in claims:
        assert claim.status.allocation is not None
        for result in claim.status.allocation.devices.results:
            held.add(result.device)
            if result.share_id is not None:
                slots[result.device] = slots.get(result.device, Decimal(0)) + parse_quantity(
                    (result.consumed_capacity or {}).get("slots", "0")).value
    return sum((consumes[name] for name in held), Decimal(0)), slots


@settings(max_examples=200, deadline=None)
@given(st.lists(devices_per_node, min_size=3, max_size=3), asks, st.booleans())
def test_counters_and_capacity_hold_across_the_nodes_of_a_pool(
        layout: list[list[tuple[str, int, int]]], sequence: list[tuple[int, int, int]],
        scoring: bool) -> None:
    slices = pool_slices(layout)
    snapshot = Snapshot.build(slices, [CLASS])
    allocated: list[ResourceClaim] = []
    for index, (where, count, slots) in enumerate(sequence):
        claim = claim_for(index, count, slots)
        results = allocate([claim], snapshot, NODES[where], scoring=scoring)
        if results is None:
            continue
        held = claim.model_copy(update={"status": claim.status.model_copy(
            update={"allocation": results[0]})})
        snapshot.upsert_claim(held)
        allocated.append(held)
        memory, per_device = recount(slices, allocated)
        assert memory <= COUNTER_TOTAL, (memory, [dump_results(c) for c in allocated])
        assert all(used <= SHARE_CAPACITY for used in per_device.values()), per_device


def dump_results(claim: ResourceClaim) -> list[str]:
    assert claim.status.allocation is not None
    return [r.device for r in claim.status.allocation.devices.results]


# --------------------------------------------------------------------------- property 2

QUANTITIES = st.sampled_from(["0", "0", "0", "1", "2", "4", "1Gi", "80Gi", "1e29", "1e40",
                              "9223372036854775807", "-1"])
SMALL = st.sampled_from(["0", "1", "2", "1Gi"])
NAMES = st.sampled_from(["d0", "d1", "d2", "d3"])
COUNTERS = st.sampled_from(["c0", "c0", "c1"])

policy = st.one_of(
    st.none(),
    st.fixed_dictionaries({"default": QUANTITIES}),
    st.fixed_dictionaries({"validValues": st.lists(QUANTITIES, min_size=1, max_size=3)}),
    st.fixed_dictionaries({"validRange": st.fixed_dictionaries(
        {"min": SMALL}, optional={"max": QUANTITIES, "step": SMALL})}),
    st.fixed_dictionaries({"validRange": st.fixed_dictionaries({"min": SMALL, "step": SMALL})}),
)


@st.composite
def device_strategy(draw: st.DrawFn, name: str, per_device: bool, flavour: str
                    ) -> dict[str, Any]:
    """A device; ``flavour`` biases it towards partitions (counters) or shares (capacity with
    request policies), where the arithmetic is."""
    device: dict[str, Any] = {"name": name if draw(st.integers(0, 7)) else draw(NAMES)}
    if draw(st.booleans()):
        device["attributes"] = {"index": {"int": draw(st.integers(0, 3))}}
    shared = flavour == "shares" or draw(st.integers(0, 3)) == 0
    if shared:
        device["allowMultipleAllocations"] = True
    if flavour == "shares" or draw(st.integers(0, 3)) == 0:
        capacity: dict[str, Any] = {"value": draw(QUANTITIES)}
        chosen = draw(policy) if shared else None
        if chosen is not None:
            capacity["requestPolicy"] = chosen
        device["capacity"] = {draw(st.sampled_from(["memory", f"{DRIVER}/memory"])): capacity}
    if flavour == "partitions":  # mostly c0 of s0, often nothing of it
        device["consumesCounters"] = [{
            "counterSet": draw(st.sampled_from(["s0", "s0", "s0", "s0", "s1"])),
            "counters": {name: {"value": draw(st.sampled_from(["0", "0", "0", "1", "1e29"]))}
                         for name in draw(st.sampled_from([["c0"], ["c0"], ["c0", "c1"],
                                                           []]))}}]
    elif draw(st.integers(0, 3)) == 0:
        device["consumesCounters"] = [{
            "counterSet": draw(st.sampled_from(["s0", "s1"])),
            "counters": {name: {"value": draw(QUANTITIES)}
                         for name in draw(st.sets(COUNTERS, max_size=2))}}]
    if per_device:
        device.update(draw(st.sampled_from([{"nodeName": "node-0"}, {"nodeName": "node-1"},
                                            {"allNodes": True}, {"nodeSelector": {
                                                "nodeSelectorTerms": [{"matchExpressions": [
                                                    {"key": "rack", "operator": "In",
                                                     "values": ["a"]}]}]}}])))
    if draw(st.integers(0, 3)) == 0:
        device["bindingConditions"] = ["Ready"]
        device["bindingFailureConditions"] = ["Failed"]
        if draw(st.booleans()):
            device["bindsToNode"] = True
    if draw(st.integers(0, 5)) == 0:
        device["taints"] = [{"key": "k", "effect": draw(st.sampled_from(
            ["NoSchedule", "NoExecute", "None"]))}]
    return device


@st.composite
def pool_strategy(draw: st.DrawFn, index: int) -> list[dict[str, Any]]:
    """A pool: one or two device slices (any scope), maybe a slice of counter sets, with a
    resourceSliceCount that usually adds up."""
    flavour = draw(st.sampled_from(["plain", "partitions", "shares"]))
    device_slices = draw(st.integers(1, 2))
    counters = draw(st.integers(1 if flavour == "partitions" else 0, 3))  # 3: s0 twice
    total = device_slices + (counters > 0)
    pool = {"name": f"p{index}", "generation": draw(st.sampled_from([0, 0, 0, 1])),
            "resourceSliceCount": total if draw(st.integers(0, 4)) else draw(
                st.integers(1, 3))}
    slices: list[dict[str, Any]] = []
    if counters:
        sets = [{"name": "s0", "counters": {name: {"value": draw(QUANTITIES)}
                                            for name in draw(st.sets(COUNTERS, min_size=1))}}]
        if counters == 3:
            sets.append({"name": draw(st.sampled_from(["s0", "s1"])), "counters": {
                "c0": {"value": draw(QUANTITIES)}}})
        slices.append({"metadata": {"name": f"p{index}-counters"}, "spec": {
            "driver": DRIVER, "pool": pool, "sharedCounters": sets,
            **draw(st.sampled_from([{"nodeName": "node-0"}, {"allNodes": True}]))}})
    for position in range(device_slices):
        scope = draw(st.sampled_from(["node", "node", "node", "all", "selector",
                                      "per-device"]))
        spec: dict[str, Any] = {"driver": DRIVER, "pool": pool}
        if scope == "node":
            spec["nodeName"] = draw(st.sampled_from(["node-0", "node-0", "node-1"]))
        elif scope == "all":
            spec["allNodes"] = True
        elif scope == "selector":
            spec["nodeSelector"] = {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "rack", "operator": "In", "values": ["a"]}]}]}
        else:
            spec["perDeviceNodeSelection"] = True
        spec["devices"] = [draw(device_strategy(f"d{position}{k}", scope == "per-device",
                                                flavour))
                           for k in range(draw(st.integers(0, 4)))]
        slices.append({"metadata": {"name": f"p{index}-s{position}"}, "spec": spec})
    return slices


SELECTORS = st.sampled_from([
    f'device.driver == "{DRIVER}"', "device.allowMultipleAllocations",
    f'device.attributes["{DRIVER}"].index >= 1', "true",
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("1Gi")) >= 0',
])


@st.composite
def exactly_strategy(draw: st.DrawFn) -> dict[str, Any]:
    asked: dict[str, Any] = {"deviceClassName": "gpu"}
    if draw(st.integers(0, 3)) == 0:
        asked["allocationMode"] = "All"
    else:
        asked["count"] = draw(st.integers(1, 2))
    if draw(st.integers(0, 5)) == 0:
        asked["selectors"] = [{"cel": {"expression": draw(SELECTORS)}}]
    if draw(st.integers(0, 3)) == 0:
        asked["capacity"] = {"requests": {draw(st.sampled_from([
            "memory", "memory", f"{DRIVER}/memory", "slots"])): draw(QUANTITIES)}}
    if draw(st.integers(0, 3)) == 0:
        asked["tolerations"] = [{"key": "k", "operator": "Exists"}]
    return asked


@st.composite
def claim_strategy(draw: st.DrawFn, index: int) -> dict[str, Any]:
    requests = []
    for position in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            requests.append({"name": f"r{position}", "exactly": draw(exactly_strategy())})
        else:
            requests.append({"name": f"r{position}", "firstAvailable": [
                {"name": f"a{k}", **draw(exactly_strategy())}
                for k in range(draw(st.integers(1, 2)))]})
    devices: dict[str, Any] = {"requests": requests}
    if draw(st.booleans()):
        devices["constraints"] = [draw(st.sampled_from([
            {"matchAttribute": f"{DRIVER}/index"}, {"distinctAttribute": f"{DRIVER}/index"}]))]
    return {"metadata": {"name": f"c{index}", "namespace": "default", "uid": f"c{index}"},
            "spec": {"devices": devices}}


@st.composite
def held_strategy(draw: st.DrawFn, index: int) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "r", "driver": DRIVER,
                              "pool": draw(st.sampled_from(["p0", "p1"])), "device": draw(NAMES)}
    if draw(st.booleans()):
        result["shareID"] = f"00000000-0000-4000-8000-00000000000{index % 10}"
        result["consumedCapacity"] = {"memory": draw(QUANTITIES)}
    return {"metadata": {"name": f"h{index}", "namespace": "default", "uid": f"h{index}"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {
                "deviceClassName": "gpu"}}]}},
            "status": {"allocation": {"devices": {"results": [result]}}}}


def parsed(parse: Any, objects: list[dict[str, Any]]) -> list[Any]:
    """What kdra's models accept (a malformed object is left out, as the binder does)."""
    out = []
    for obj in objects:
        with contextlib.suppress(InvalidObject):
            out.append(parse(obj))
    return out


BUDGET = 20_000


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_allocate_raises_only_kdra_errors_and_keeps_its_budget(data: st.DataObject) -> None:
    slices = parsed(parse_slice, [raw for i in range(data.draw(st.integers(1, 2)))
                                  for raw in data.draw(pool_strategy(i))])
    held = parsed(parse_claim, [data.draw(held_strategy(i))
                                for i in range(data.draw(st.integers(0, 2)))])
    claims = parsed(parse_claim, [data.draw(claim_strategy(i))
                                  for i in range(data.draw(st.integers(1, 2)))])
    snapshot = Snapshot.build(slices, [CLASS], held)
    before = snapshot.stats.search_steps
    try:
        results = allocate(claims, snapshot, data.draw(st.sampled_from(NODES[:2])),
                           scoring=data.draw(st.booleans()), steps=BUDGET)
    except KdraError:
        pass
    else:
        assert results is None or len(results) == len(claims)
    # A pause comes between slots: the budget is overrun by at most one slot's scan.
    assert snapshot.stats.search_steps - before <= BUDGET + 128


@st.composite
def arithmetic_case(draw: st.DrawFn) -> tuple[list[ResourceSlice], list[ResourceClaim]]:
    """One complete pool on node-0 where the arithmetic is: partitions drawing on counter c0
    (amounts from nothing to beyond int64) and shareable devices whose memory capacity has a
    request policy; claims of two or three requests, some asking memory."""
    pool = {"name": "p", "generation": 0, "resourceSliceCount": 2}
    amounts = st.sampled_from(["0", "0", "1", "2", "4", "1e29"])
    devices = []
    for index in range(draw(st.integers(2, 4))):
        device: dict[str, Any] = {"name": f"d{index}"}
        if draw(st.booleans()):
            device["consumesCounters"] = [{"counterSet": "s0", "counters": {
                "c0": {"value": draw(amounts)}}}]
        if draw(st.booleans()):
            device["allowMultipleAllocations"] = True
            capacity: dict[str, Any] = {"value": draw(QUANTITIES)}
            chosen = draw(policy)
            if chosen is not None:
                capacity["requestPolicy"] = chosen
            device["capacity"] = {"memory": capacity}
        devices.append(device)
    slices = [
        {"metadata": {"name": "p-counters"}, "spec": {
            "driver": DRIVER, "nodeName": "node-0", "pool": pool, "sharedCounters": [
                {"name": "s0", "counters": {"c0": {"value": draw(amounts)}}}]}},
        {"metadata": {"name": "p-devices"}, "spec": {
            "driver": DRIVER, "nodeName": "node-0", "pool": pool, "devices": devices}}]
    requests = []
    for index in range(draw(st.integers(2, 3))):
        asked: dict[str, Any] = {"deviceClassName": "gpu", "count": draw(st.integers(1, 2))}
        if draw(st.booleans()):
            asked["capacity"] = {"requests": {"memory": draw(QUANTITIES)}}
        requests.append({"name": f"r{index}", "exactly": asked})
    claim = {"metadata": {"name": "c", "namespace": "default", "uid": "c"},
             "spec": {"devices": {"requests": requests}}}
    return parsed(parse_slice, slices), parsed(parse_claim, [claim])


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arithmetic_case(), st.booleans())
def test_counter_and_capacity_arithmetic_raises_only_kdra_errors(
        case: tuple[list[ResourceSlice], list[ResourceClaim]], scoring: bool) -> None:
    slices, claims = case
    snapshot = Snapshot.build(slices, [CLASS])
    try:
        results = allocate(claims, snapshot, NODES[0], scoring=scoring, steps=BUDGET)
    except KdraError:
        pass
    else:
        assert results is None or len(results) == len(claims)
    assert snapshot.stats.search_steps <= BUDGET + 128
