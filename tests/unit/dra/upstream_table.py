"""Builders for the transcription of upstream's shared allocator test table (issue 39).

Upstream's table (``k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting/
allocator_testing.go``, v0.36.2) builds its objects with small Go helpers (``class``,
``claimWithRequests``, ``sliceWithDevices``, ``device(...).withDeviceCounterConsumption``...).
The functions here have the same names in snake case and build the same objects as plain
``resource.k8s.io/v1``-shaped dicts, so that each case in
:mod:`tests.unit.dra.upstream_cases` reads like its upstream original; the test
(``test_allocator_upstream_table.py``) parses them with kdra's models and runs kdra's
allocator on them.

Conventions of the original kept here: nodes carry the labels ``region`` and
``planet=earth``; a pool given by name has one slice and generation 1; quantities are
Kubernetes quantity strings (``one`` is ``"1"``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.dra.allocator import NodeInfo

Obj = dict[str, Any]

REGION1, REGION2 = "region-1", "region-2"
NODE1, NODE2 = "node-1", "node-2"
CLASS_A, CLASS_B = "class-a", "class-b"
DRIVER_A, DRIVER_B = "driver-a", "driver-b"
POOL1, POOL2, POOL3, POOL4 = "pool-1", "pool-2", "pool-3", "pool-4"
REQ0, REQ1, REQ2, REQ3 = "req-0", "req-1", "req-2", "req-3"
# Upstream names them subReq-0 and subReq-1, which its API validation (a DNS label) and
# kdra's models refuse; the allocator does not care.
SUB_REQ0, SUB_REQ1 = "subreq-0", "subreq-1"
CLAIM0, CLAIM1 = "claim-0", "claim-1"
SLICE1, SLICE2, SLICE3, SLICE4 = "slice-1", "slice-2", "slice-3", "slice-4"
DEVICE0, DEVICE1, DEVICE2, DEVICE3, DEVICE4 = (f"device-{i}" for i in range(5))
COUNTER_SET1, COUNTER_SET2 = "counter-set-1", "counter-set-2"
CAPACITY0, CAPACITY1 = "capacity-0", "capacity-1"
ZERO, ONE, TWO, THREE, FOUR = "0", "1", "2", "3", "4"
MAX_RESULTS = 32

REGION_KEY, PLANET_KEY, EARTH = "region", "planet", "earth"
ALL_NODES, PER_DEVICE = "nodeSelectionAll", "nodeSelectionPerDevice"
FROM_COUNTERS = "fromCounters"

INT_ATTRIBUTE = f"{DRIVER_A}/numa"
VERSION_ATTRIBUTE = f"{DRIVER_A}/driverVersion"
STRING_ATTRIBUTE = f"{DRIVER_A}/stringAttribute"
BOOL_ATTRIBUTE = f"{DRIVER_A}/boolAttribute"
NON_EXISTENT_ATTRIBUTE = f"{DRIVER_A}/NonExistentAttribute"

TAINT_KEY, TAINT_VALUE, TAINT_VALUE2 = "taint-key", "taint-value", "taint-value-2"
TAINT_NONE = {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "None"}
TAINT_NO_SCHEDULE = {"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "NoSchedule"}
TAINT_NO_EXECUTE = {"key": TAINT_KEY, "value": TAINT_VALUE2, "effect": "NoExecute"}
TOLERATION_NO_SCHEDULE = {"operator": "Exists", "key": TAINT_KEY, "effect": "NoSchedule"}
TOLERATION_NO_EXECUTE = {"operator": "Equal", "key": TAINT_KEY, "value": TAINT_VALUE2,
                         "effect": "NoExecute"}
TOLERATION_NO_SCHEDULE_KEY1 = {"operator": "Exists", "key": "key1", "effect": "NoSchedule"}


# --------------------------------------------------------------------------- the case


@dataclass(frozen=True)
class Err:
    """An expected error: upstream's substring, and kdra's wording (a regex)."""

    upstream: str
    kdra: str


@dataclass(frozen=True)
class Case:
    """One transcribed case. ``expect``: the AllocationResults (order of claims; devices in any
    order, as upstream's ``ConsistOf``), ``[]`` for "no allocation"; ``error``: the error
    instead; ``invalid``: kdra's models refuse an object of the case (a regex of the message)
    where upstream's allocator errs — upstream's API validation would refuse it too."""

    name: str
    features: tuple[str, ...] = ()
    claims: Sequence[Obj] = ()
    classes: Sequence[Obj] = ()
    slices: Sequence[Obj] = ()
    allocated: Sequence[str] = ()
    """``driver/pool/device`` of devices held by allocated claims."""
    shared: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """``driver/pool/device`` → consumed capacity held by an allocated share."""
    node: NodeInfo | None = None
    expect: Sequence[Obj] = ()
    error: Err | None = None
    invalid: str | None = None
    note: str = ""
    """Where the transcription departs from the original, and why."""


# --------------------------------------------------------------------------- objects


def node(name: str, region: str) -> NodeInfo:
    return NodeInfo(name, {REGION_KEY: region, PLANET_KEY: EARTH})


def cel(expression: str) -> Obj:
    return {"cel": {"expression": expression}}


def device_class(name: str, driver: str) -> Obj:
    return {"metadata": {"name": name},
            "spec": {"selectors": [cel(f'device.driver == "{driver}"')]}}


def class_with_allow_multiple_allocations(name: str, driver: str, multi: bool) -> Obj:
    value = "true" if multi else "false"
    return {"metadata": {"name": name}, "spec": {"selectors": [cel(
        f'device.driver == "{driver}" && device.allowMultipleAllocations == {value}')]}}


def device_configuration(driver: str, attribute: str) -> Obj:
    return {"opaque": {"driver": driver, "parameters": {attribute: attribute + "Value"}}}


def class_with_config(name: str, driver: str, attribute: str) -> Obj:
    out = device_class(name, driver)
    out["spec"]["config"] = [device_configuration(driver, attribute)]
    return out


def request(name: str, cls: str, count: int, *selectors: Obj) -> Obj:
    exactly: Obj = {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}
    if selectors:
        exactly["selectors"] = list(selectors)
    return {"name": name, "exactly": exactly}


device_request = request


def all_device_request(name: str, cls: str) -> Obj:
    return {"name": name, "exactly": {"deviceClassName": cls, "allocationMode": "All"}}


def sub_request(name: str, cls: str, count: int, *fields: Obj) -> Obj:
    out: Obj = {"name": name, "deviceClassName": cls, "allocationMode": "ExactCount",
                "count": count}
    for item in fields:
        key = "selectors" if "cel" in item else "tolerations"
        out.setdefault(key, []).append(item)
    return out


def request_with_prioritized_list(name: str, *subs: Obj) -> Obj:
    return {"name": name, "firstAvailable": list(subs)}


def claim_with_requests(name: str, constraints: Sequence[Obj] | None, *requests: Obj) -> Obj:
    devices: Obj = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = list(constraints)
    return {"metadata": {"name": name}, "spec": {"devices": devices}}


def claim_with_request(name: str, req: str, cls: str, *constraints: Obj) -> Obj:
    return claim_with_requests(name, list(constraints), request(req, cls, 1))


def claim(name: str) -> Obj:
    return {"metadata": {"name": name}, "spec": {"devices": {}}}


def claim_with_device_config(name: str, req: str, cls: str, driver: str, attribute: str
                             ) -> Obj:
    out = claim_with_request(name, req, cls)
    out["spec"]["devices"]["config"] = [device_configuration(driver, attribute)]
    return out


def device_claim_config(requests: Sequence[str], config: Obj) -> Obj:
    return {"requests": list(requests), **config}


def match_attribute(name: str, *requests: str) -> Obj:
    out: Obj = {"matchAttribute": name}
    if requests:
        out["requests"] = list(requests)
    return out


def distinct_attribute(name: str, *requests: str) -> Obj:
    out: Obj = {"distinctAttribute": name}
    if requests:
        out["requests"] = list(requests)
    return out


# The wrappers' methods (``claim.withRequests(...)``), as functions returning copies.

def _with_devices(obj: Obj, field: str, values: tuple[Obj, ...]) -> Obj:
    out = copy.deepcopy(obj)
    out["spec"]["devices"][field] = list(values)
    return out


def with_requests(obj: Obj, *requests: Obj) -> Obj:
    return _with_devices(obj, "requests", requests)


def with_constraints(obj: Obj, *constraints: Obj) -> Obj:
    return _with_devices(obj, "constraints", constraints)


def with_configs(obj: Obj, *configs: Obj) -> Obj:
    return _with_devices(obj, "config", configs)


def with_tolerations(obj: Obj, *tolerations: Obj) -> Obj:
    out = copy.deepcopy(obj)
    for req in out["spec"]["devices"]["requests"]:
        req["exactly"].setdefault("tolerations", []).extend(tolerations)
    return out


def with_selectors(req: Obj, *selectors: Obj) -> Obj:
    out = copy.deepcopy(req)
    out["exactly"]["selectors"] = list(selectors)
    return out


def with_capacity_request(req: Obj, quantity: str | None) -> Obj:
    out = copy.deepcopy(req)
    target = out.get("exactly", out)
    target["capacity"] = {"requests": {CAPACITY0: quantity} if quantity is not None else {}}
    return out


def with_allocation_mode(sub: Obj, mode: str) -> Obj:
    out = copy.deepcopy(sub)
    out["allocationMode"] = mode
    if mode == "All":
        out.pop("count", None)
    return out


def set_exactly(obj: Obj, index: int, **fields: Any) -> Obj:
    """``c.Spec.Devices.Requests[index].Exactly.<Field> = value`` (count 0 unsets it)."""
    out = copy.deepcopy(obj)
    exactly = out["spec"]["devices"]["requests"][index]["exactly"]
    for key, value in fields.items():
        exactly[key] = value
    if exactly.get("allocationMode") == "All" and not exactly.get("count"):
        exactly.pop("count", None)
    return out


def set_first_available(obj: Obj, index: int, sub: int, **fields: Any) -> Obj:
    """``claim.Spec.Devices.Requests[index].FirstAvailable[sub].<Field> = value``."""
    out = copy.deepcopy(obj)
    target = out["spec"]["devices"]["requests"][index]["firstAvailable"][sub]
    target.update(fields)
    if target.get("allocationMode") == "All" and not target.get("count"):
        target.pop("count", None)
    return out


# --------------------------------------------------------------------------- devices, slices


def attrs(**values: Any) -> dict[str, Obj]:
    """Attributes from ``name=("kind", value)`` pairs: ``attrs(numa=("int", 1))``."""
    return {name: {kind: value} for name, (kind, value) in values.items()}


def device(name: str, capacity: Mapping[str, str] | str | None = None,
           attributes: Mapping[str, Obj] | None = None) -> Obj:
    out: Obj = {"name": name}
    if attributes:
        out["attributes"] = dict(attributes)
    if isinstance(capacity, str):
        assert capacity == FROM_COUNTERS
        out["\x00fromCounters"] = True
    elif capacity:
        out["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    return out


def with_device_counter_consumption(dev: Obj, *consumptions: Obj) -> Obj:
    out = copy.deepcopy(dev)
    out.setdefault("consumesCounters", []).extend(consumptions)
    if out.pop("\x00fromCounters", False):
        out["capacity"] = {name: {"value": counter["value"]}
                           for use in out["consumesCounters"]
                           for name, counter in use["counters"].items()}
    return out


def device_counter_consumption(counter_set: str, counters: Mapping[str, str] | None) -> Obj:
    return {"counterSet": counter_set,
            "counters": {k: {"value": v} for k, v in (counters or {}).items()}}


def counter_set(name: str, counters: Mapping[str, str] | None) -> Obj:
    return {"name": name, "counters": {k: {"value": v} for k, v in (counters or {}).items()}}


def with_taints(dev: Obj, *taints: Obj) -> Obj:
    out = copy.deepcopy(dev)
    out.setdefault("taints", []).extend(taints)
    return out


def with_node_selection(dev: Obj, selection: str | Obj) -> Obj:
    out = copy.deepcopy(dev)
    if isinstance(selection, dict):
        out["nodeSelector"] = selection
    elif selection == ALL_NODES:
        out["allNodes"] = True
    else:
        out["nodeName"] = selection
    return out


def with_binding_conditions(dev: Obj, conditions: Sequence[str], failures: Sequence[str]
                            ) -> Obj:
    out = copy.deepcopy(dev)
    out["bindingConditions"] = list(conditions)
    out["bindingFailureConditions"] = list(failures)
    return out


def with_binds_to_node(dev: Obj, binds: bool) -> Obj:
    out = copy.deepcopy(dev)
    out["bindsToNode"] = binds
    return out


def with_allow_multiple_allocations(dev: Obj) -> Obj:
    out = copy.deepcopy(dev)
    out["allowMultipleAllocations"] = True
    return out


def with_capacity_request_policy_range(dev: Obj, capacity: Mapping[str, str]) -> Obj:
    """Each capacity with upstream's default policy: default 2, range 2..4 step 2."""
    out = copy.deepcopy(dev)
    for name, value in capacity.items():
        out.setdefault("capacity", {})[name] = {"value": value, "requestPolicy": {
            "default": TWO, "validRange": {"min": TWO, "step": TWO, "max": FOUR}}}
    return out


def with_capacity_request_policy_valid_values(dev: Obj, default: str,
                                              capacity: Mapping[str, str],
                                              more: Sequence[str] = ()) -> Obj:
    out = copy.deepcopy(dev)
    for name, value in capacity.items():
        out.setdefault("capacity", {})[name] = {"value": value, "requestPolicy": {
            "default": default, "validValues": [default, *more]}}
    return out


def resource_pool(name: str, count: int, generation: int = 1) -> Obj:
    return {"name": name, "resourceSliceCount": count, "generation": generation}


def _slice(name: str, selection: str | Obj, pool: str | Obj, driver: str) -> Obj:
    spec: Obj = {"driver": driver,
                 "pool": resource_pool(pool, 1) if isinstance(pool, str) else dict(pool)}
    if isinstance(selection, dict):
        spec["nodeSelector"] = selection
    elif selection == ALL_NODES:
        spec["allNodes"] = True
    elif selection == PER_DEVICE:
        spec["perDeviceNodeSelection"] = True
    else:
        spec["nodeName"] = selection
    return {"metadata": {"name": name}, "spec": spec}


def slice_with_devices(name: str, selection: str | Obj, pool: str | Obj, driver: str,
                       *devices: Obj) -> Obj:
    out = _slice(name, selection, pool, driver)
    out["spec"]["devices"] = [{k: v for k, v in d.items() if not k.startswith("\x00")}
                              for d in devices]
    return out


def slice_with_one_device(name: str, selection: str | Obj, pool: str | Obj, driver: str
                          ) -> Obj:
    return slice_with_devices(name, selection, pool, driver, device(DEVICE1))


def slice_with_no_devices(name: str, selection: str | Obj, pool: str | Obj, driver: str
                          ) -> Obj:
    return slice_with_devices(name, selection, pool, driver)


def slice_with_multiple_devices(name: str, selection: str | Obj, pool: str | Obj,
                                driver: str, count: int) -> Obj:
    return slice_with_devices(name, selection, pool, driver,
                              *(device(f"device-{i}") for i in range(count)))


def slice_with_counter_sets(name: str, selection: str | Obj, pool: str | Obj, driver: str,
                            *sets: Obj) -> Obj:
    out = _slice(name, selection, pool, driver)
    out["spec"]["sharedCounters"] = list(sets)
    return out


def with_pool(slice_: Obj, **fields: Any) -> Obj:
    """``s.Spec.Pool.<Field> = value`` (``generation``, ``resourceSliceCount``)."""
    out = copy.deepcopy(slice_)
    out["spec"]["pool"].update(fields)
    return out


def node_label_selector(key: str, *values: str) -> Obj:
    return {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": key, "operator": "In", "values": list(values)}]}]}


def local_node_selector(name: str) -> Obj:
    return {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [name]}]}]}


# --------------------------------------------------------------------------- results


def device_allocation_result(req: str, driver: str, pool: str, dev: str, admin: bool,
                             *tolerations: Obj) -> Obj:
    out: Obj = {"request": req, "driver": driver, "pool": pool, "device": dev}
    if admin:
        out["adminAccess"] = True
    if tolerations:
        out["tolerations"] = list(tolerations)
    return out


def with_consumed_capacity(result: Obj, capacity: Mapping[str, str] | None) -> Obj:
    """``deviceRequestAllocationResult(...).withConsumedCapacity(&fixedShareID, ...)``: a share
    (any shareID) with that consumed capacity (None: unset)."""
    out = dict(result, shareID="*")
    if capacity:
        out["consumedCapacity"] = dict(capacity)
    return out


def with_binding(result: Obj, conditions: Sequence[str] | None,
                 failures: Sequence[str] | None) -> Obj:
    out = dict(result)
    if conditions:
        out["bindingConditions"] = list(conditions)
    if failures:
        out["bindingFailureConditions"] = list(failures)
    return out


def multiple_device_allocation_results(req: str, driver: str, pool: str, count: int,
                                       start: int) -> list[Obj]:
    return [device_allocation_result(req, driver, pool, f"device-{i}", False)
            for i in range(start, start + count)]


def allocation_result(selector: Obj | None, *results: Obj) -> Obj:
    out: Obj = {"devices": {"results": list(results)}}
    if selector is not None:
        out["nodeSelector"] = selector
    return out


def allocation_result_with_configs(selector: Obj | None, results: Sequence[Obj],
                                   configs: Sequence[Obj]) -> Obj:
    out = allocation_result(selector, *results)
    out["devices"]["config"] = list(configs)
    return out


def allocation_config(source: str, requests: Sequence[str], config: Obj) -> Obj:
    out: Obj = {"source": source, **config}
    if requests:
        out["requests"] = list(requests)
    return out
