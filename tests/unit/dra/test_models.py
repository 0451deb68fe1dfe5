"""Typed API models: valid objects parse, malformed ones raise InvalidObject naming the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kdra.dra.errors import InvalidObject
from kdra.dra.models import (
    AllocationResult,
    dump,
    field_path,
    parse,
    parse_claim,
    parse_class,
    parse_slice,
    parse_template,
)


def claim(**devices: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.kdra.dev/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpu",
                                           "exactly": {"deviceClassName": "gpu.kdra.dev"}}],
                             **devices}},
    }


def slice_(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "driver": "gpu.kdra.dev",
        "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
        "nodeName": "node-1",
        "devices": [{"name": "gpu-0",
                     "attributes": {"index": {"int": 0}, "productName": {"string": "H100"},
                                    "driverVersion": {"version": "550.54.15"}},
                     "capacity": {"memory": {"value": "80Gi"}}}],
    }
    base.update(spec)
    return {"kind": "ResourceSlice", "metadata": {"name": "node-1-gpu"}, "spec": base}


def test_claim_defaults() -> None:
    parsed = parse_claim(claim())
    request = parsed.spec.devices.requests[0]
    assert request.exactly is not None
    assert request.exactly.allocation_mode == "ExactCount"
    assert request.exactly.exact_count == 1
    assert request.admin_access is False
    assert [name for name, _ in request.alternatives()] == ["gpu"]
    assert parsed.key == "default/c"
    assert not parsed.allocated


def test_claim_round_trips_to_camel_case() -> None:
    obj = claim(constraints=[{"requests": ["gpu"], "matchAttribute": "gpu.kdra.dev/pcieRoot"}])
    out = dump(parse_claim(obj))
    assert out["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "gpu.kdra.dev"
    assert out["spec"]["devices"]["constraints"][0]["matchAttribute"] == "gpu.kdra.dev/pcieRoot"
    assert "allocation" not in out["status"]


def test_dump_omits_empty_lists_as_upstream_omitempty() -> None:
    result = parse(AllocationResult, {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.kdra.dev", "pool": "n1",
                                 "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}})
    assert dump(result) == {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.kdra.dev", "pool": "n1",
                                 "device": "gpu-0"}]},  # no "config": []
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [  # no "matchExpressions": []
            {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}


def test_slice_attribute_kinds() -> None:
    device = parse_slice(slice_()).spec.devices[0]
    kinds = {name: a.scalar() for name, a in device.attributes.items()}
    assert kinds == {"index": ("int", 0), "productName": ("string", "H100"),
                     "driverVersion": ("version", "550.54.15")}
    assert device.capacity["memory"].value == "80Gi"
    assert device.unsupported() == []


def test_first_available_names_its_alternatives() -> None:
    parsed = parse_claim(claim(requests=[{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "h100"},
        {"name": "small", "deviceClassName": "a100", "count": 2}]}],
        constraints=[{"requests": ["gpu/small"], "distinctAttribute": "gpu.kdra.dev/uuid"}]))
    request = parsed.spec.devices.requests[0]
    assert [(n, a.device_class_name, a.exact_count) for n, a in request.alternatives()] == [
        ("gpu/big", "h100", 1), ("gpu/small", "a100", 2)]
    constraint = parsed.spec.devices.constraints[0]
    assert constraint.distinct and constraint.attribute == "gpu.kdra.dev/uuid"


def test_fields_kdra_does_not_act_on_are_kept_and_named() -> None:
    parsed = parse_claim(claim(requests=[{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.kdra.dev", "tolerations": [{"key": "k", "operator": "Exists"}],
        "capacity": {"requests": {"memory": "10Gi"}}}}]))
    # Issue 25: tolerations (and taints, below) are acted upon now, so they are not named;
    # issue 26: capacity requests, counters and multiple allocations too.
    assert parsed.unsupported() == []
    device = parse_slice(slice_(devices=[{
        "name": "gpu-0", "taints": [{"key": "k", "effect": "NoSchedule"}],
        "consumesCounters": [{"counterSet": "s", "counters": {"mem": {"value": "1"}}}],
        "attributes": {"cores": {"ints": [1, 2]}}}])).spec.devices[0]
    assert device.unsupported() == ["list-typed attributes"]
    informational = parse_slice(slice_(devices=[{
        "name": "gpu-0", "taints": [{"key": "k", "effect": "None"}]}])).spec.devices[0]
    assert informational.unsupported() == []


def test_allocated_claim_status() -> None:
    obj = claim()
    obj["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "gpu.kdra.dev",
                                     "pool": "node-1", "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]},
        },
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}],
        "devices": [{"driver": "gpu.kdra.dev", "pool": "node-1", "device": "gpu-0",
                     "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared"}]}],
    }
    parsed = parse_claim(obj)
    assert parsed.allocated
    assert parsed.status.reserved_for[0].api_group == ""
    ready = parsed.status.devices[0].condition("Ready")
    assert ready is not None and ready.status == "True"


def test_template_and_class_parse() -> None:
    template = parse_template({
        "metadata": {"name": "t", "namespace": "default"},
        "spec": {"metadata": {"labels": {"a": "b"}}, "spec": claim()["spec"]},
    })
    assert template.spec.metadata.labels == {"a": "b"}
    cls = parse_class({"metadata": {"name": "gpu.kdra.dev"}, "spec": {"selectors": [
        {"cel": {"expression": 'device.driver == "gpu.kdra.dev"'}}]}})
    assert cls.spec.selectors[0].cel.expression == 'device.driver == "gpu.kdra.dev"'


def _set(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    target = obj
    parts = path.split(".")
    for part in parts[:-1]:
        target = target[int(part)] if part.isdigit() else target[part]
    last = parts[-1]
    if value is _DELETE:
        del target[last]
    elif last.isdigit():
        target[int(last)] = value
    else:
        target[last] = value
    return obj


_DELETE = object()

REQ = "spec.devices.requests.0.exactly"
X = {"exactly": {"deviceClassName": "x"}}

INVALID_CLAIMS = [
    ("count zero", f"{REQ}.count", 0, "spec.devices.requests[0].exactly", "greater than zero"),
    ("count with All", f"{REQ}.allocationMode", "All", None, None),
    ("unknown mode", f"{REQ}.allocationMode", "Some",
     "spec.devices.requests[0].exactly.allocationMode", "ExactCount"),
    ("uppercase request name", "spec.devices.requests.0.name", "GPU",
     "spec.devices.requests[0].name", "pattern"),
    ("no class", f"{REQ}.deviceClassName", _DELETE,
     "spec.devices.requests[0].exactly.deviceClassName", "required"),
    ("neither exactly nor firstAvailable", "spec.devices.requests.0.exactly", _DELETE,
     "spec.devices.requests[0]", "exactly one of `exactly` or `firstAvailable`"),
    ("both exactly and firstAvailable", "spec.devices.requests.0.firstAvailable",
     [{"name": "a", "deviceClassName": "x"}], "spec.devices.requests[0]",
     "exactly one of `exactly` or `firstAvailable`"),
    ("9 alternatives", "spec.devices.requests.0",
     {"name": "gpu", "firstAvailable": [{"name": f"s{i}", "deviceClassName": "x"}
                                        for i in range(9)]},
     "spec.devices.requests[0].firstAvailable", "at most 8"),
    ("duplicate alternatives", "spec.devices.requests.0",
     {"name": "gpu", "firstAvailable": [{"name": "s", "deviceClassName": "x"}] * 2},
     "spec.devices.requests[0]", "duplicate sub-request names: s"),
    ("duplicate request names", "spec.devices.requests",
     [{"name": "a", **X}, {"name": "a", **X}],
     "spec.devices", "duplicate request names: a"),
    ("both constraint kinds", "spec.devices.constraints",
     [{"matchAttribute": "gpu.kdra.dev/x", "distinctAttribute": "gpu.kdra.dev/y"}],
     "spec.devices.constraints[0]", "exactly one of matchAttribute or distinctAttribute"),
    ("constraint names unknown alternative", "spec.devices.constraints",
     [{"requests": ["gpu/nope"], "distinctAttribute": "gpu.kdra.dev/x"}],
     "spec.devices", "constraints[0].requests names unknown request(s) gpu/nope"),
    ("constraint names unknown request", "spec.devices.constraints",
     [{"requests": ["nope"], "matchAttribute": "gpu.kdra.dev/x"}],
     "spec.devices", "constraints[0].requests names unknown request(s) nope"),
    ("config names unknown request", "spec.devices.config",
     [{"requests": ["nope"], "opaque": {"driver": "gpu.kdra.dev", "parameters": {}}}],
     "spec.devices", "config[0].requests names unknown request(s) nope"),
    ("bare matchAttribute", "spec.devices.constraints", [{"matchAttribute": "pcieRoot"}],
     "spec.devices.constraints[0]", "must be fully qualified"),
    ("33 requests", "spec.devices.requests",
     [{"name": f"r{i}", **X} for i in range(33)],
     "spec.devices.requests", "at most 32"),
    ("reservedFor without allocation", "status",
     {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]},
     "status", "reservedFor must be empty"),
]


@pytest.mark.parametrize(("case", "path", "value", "field", "text"), INVALID_CLAIMS,
                         ids=[c[0] for c in INVALID_CLAIMS])
def test_invalid_claims(case: str, path: str, value: Any, field: str | None,
                        text: str | None) -> None:
    obj = claim()
    if case == "count with All":
        obj = _set(obj, f"{REQ}.count", 2)
        field, text = "spec.devices.requests[0].exactly", "count must not be set"
    with pytest.raises(InvalidObject) as info:
        parse_claim(_set(obj, path, value))
    assert info.value.field == field
    assert text is not None and text in info.value.message
    assert str(info.value).startswith("ResourceClaim default/c: ")


DEV = "spec.devices.0"

INVALID_SLICES = [
    ("nodeName and allNodes", "spec.allNodes", True, "spec", "exactly one of nodeName"),
    ("no node scope", "spec.nodeName", _DELETE, "spec", "got none"),
    ("perDeviceNodeSelection and nodeName", "spec.perDeviceNodeSelection", True, "spec",
     "exactly one of nodeName"),
    ("devices and sharedCounters", "spec.sharedCounters",
     [{"name": "s", "counters": {"mem": {"value": "1"}}}], "spec",
     "only one of devices and sharedCounters"),
    ("two value types", f"{DEV}.attributes.index", {"int": 1, "string": "1"},
     "spec.devices[0].attributes.index", "got int, string"),
    ("no value type", f"{DEV}.attributes.index", {}, "spec.devices[0].attributes.index",
     "got none"),
    ("int given as string", f"{DEV}.attributes.index", {"int": "1"},
     "spec.devices[0].attributes.index.int", "valid integer"),
    ("65-char string", f"{DEV}.attributes.productName", {"string": "x" * 65},
     "spec.devices[0].attributes.productName.string", "at most 64"),
    ("empty list attribute", f"{DEV}.attributes.cores", {"ints": []},
     "spec.devices[0].attributes.cores.ints", "at least 1"),
    ("65 devices with taints", "spec.devices",
     [{"name": f"d{i}", "taints": [{"key": "k", "effect": "NoSchedule"}]} for i in range(65)],
     "spec", "at most 64 devices"),
    ("129 devices", "spec.devices", [{"name": f"d{i}"} for i in range(129)],
     "spec.devices", "at most 128"),
    ("negative generation", "spec.pool.generation", -1, "spec.pool.generation",
     "greater than or equal to 0"),
    ("zero slice count", "spec.pool.resourceSliceCount", 0, "spec.pool.resourceSliceCount",
     "greater than or equal to 1"),
    ("bad device name", "spec.devices.0.name", "GPU_0", "spec.devices[0].name", "pattern"),
    ("33 attributes", f"{DEV}.attributes", {f"a{i}": {"int": i} for i in range(33)},
     "spec.devices[0]", "at most 32 attributes"),
    ("49 attribute values", f"{DEV}.attributes", {f"a{i}": {"ints": list(range(7))}
                                                  for i in range(7)},
     "spec.devices[0]", "at most 48 attribute values"),
]


@pytest.mark.parametrize(("case", "path", "value", "field", "text"), INVALID_SLICES,
                         ids=[c[0] for c in INVALID_SLICES])
def test_invalid_slices(case: str, path: str, value: Any, field: str, text: str) -> None:
    with pytest.raises(InvalidObject) as info:
        parse_slice(_set(slice_(), path, value))
    assert info.value.field == field
    assert text in info.value.message
    assert info.value.obj == "ResourceSlice node-1-gpu"


@pytest.mark.parametrize(("loc", "path"), [
    (("spec", "devices", "requests", 0, "count"), "spec.devices.requests[0].count"),
    ((), "<root>"),
    (("spec", "function-after[_x(), DeviceClaim]", "requests"), "spec.requests"),
])
def test_field_path(loc: tuple[int | str, ...], path: str) -> None:
    assert field_path(loc) == path


def test_capacity_requests_are_bounded() -> None:
    """Issue 26: at most 32 capacity requests per request (the CRD's limit, kept by the model
    for objects that bypassed admission)."""
    many = {f"m{i}": "1" for i in range(33)}
    with pytest.raises(InvalidObject, match=r"capacity.requests: .*at most 32"):
        parse_claim(claim(requests=[{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.kdra.dev", "capacity": {"requests": many}}}]))
    del many["m32"]
    assert parse_claim(claim(requests=[{"name": "gpu", "exactly": {
        "deviceClassName": "gpu.kdra.dev", "capacity": {"requests": many}}}]))
