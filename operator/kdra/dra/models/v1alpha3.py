"""The seed's ``v1alpha3`` shape (Kubernetes 1.31) seen from ``v1``: how each part of an
object looks in the other version, on plain JSON.

``*_down`` renders a v1 part in v1alpha3, ``*_up`` a v1alpha3 part in v1. The differences:

- a request's fields sit under ``exactly`` in v1 and on the request in v1alpha3; a
  ``firstAvailable`` request shows in v1alpha3 as its first sub-request (what v1alpha3 can
  say about it), and ``tolerations`` / ``capacity`` do not show;
- ``distinctAttribute`` constraints do not show;
- allocation results lose ``adminAccess``, ``tolerations``, binding conditions, ``shareID``
  and ``consumedCapacity``; the allocation its ``allocationTimestamp``; device statuses
  their ``shareID``;
- a DeviceClass loses ``extendedResourceName``;
- slice devices are wrapped in ``basic`` in v1alpha3, with capacities as bare quantities
  (v1: ``{value}``); taints, counters, per-device node selection, binding conditions,
  multiple allocations, node-allocatable mappings, list-typed attributes and capacity
  request policies do not show, nor do the slice's ``perDeviceNodeSelection`` and
  ``sharedCounters``.

Invariants:
- Total: any JSON goes in, JSON comes out; shapes that are not what they should be are
  passed through unchanged (the API server's schema validation reports them), never raised on.
- ``*_up(*_down(v1_part)) == v1_part`` exactly when the part is expressible in v1alpha3
  (:func:`lossy` is that test); ``*_down(*_up(v1alpha3_part)) == v1alpha3_part`` for every
  v1alpha3 part whose devices have ``basic`` (required in v1alpha3).
- Inputs are never modified; outputs share no mutable containers with inputs at the levels
  these functions rebuild (callers deep-copy whole objects first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

JSON = Any

# What v1 has and v1alpha3 does not, part by part (the conversion drops these going down and
# keeps them in the annotation; ``python -m hack.crdgen`` drops them from the v1alpha3 schema).
REQUEST_V1_ONLY = ("tolerations", "capacity")
CONSTRAINT_V1_ONLY = ("distinctAttribute",)
RESULT_V1_ONLY = ("adminAccess", "tolerations", "bindingConditions", "bindingFailureConditions",
                  "shareID", "consumedCapacity")
ALLOCATION_V1_ONLY = ("allocationTimestamp",)
DEVICE_STATUS_V1_ONLY = ("shareID",)
DEVICE_V1_ONLY = ("consumesCounters", "nodeName", "nodeSelector", "allNodes", "taints",
                  "bindsToNode", "bindingConditions", "bindingFailureConditions",
                  "allowMultipleAllocations", "nodeAllocatableResourceMappings")
ATTRIBUTE_V1_ONLY = ("ints", "bools", "strings", "versions")
"""List-typed attribute values."""
CLASS_V1_ONLY = ("extendedResourceName",)
SLICE_V1_ONLY = ("perDeviceNodeSelection", "sharedCounters")
SCALAR_KINDS = frozenset({"int", "bool", "string", "version"})


def lossy(part: JSON, down: Callable[[JSON], JSON], up: Callable[[JSON], JSON]) -> bool:
    """Whether rendering ``part`` in v1alpha3 loses something (the way back differs)."""
    return bool(up(down(part)) != part)


def _without(obj: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


# --------------------------------------------------------------------------- claims


def request_down(request: JSON) -> JSON:
    if not isinstance(request, Mapping):
        return request
    body = request.get("exactly")
    if not isinstance(body, Mapping):
        subs = request.get("firstAvailable")
        first = subs[0] if isinstance(subs, list) and subs else None
        body = _without(first, ("name",)) if isinstance(first, Mapping) else {}
    out = {k: v for k, v in request.items() if k not in ("exactly", "firstAvailable")}
    out.update(_without(body, REQUEST_V1_ONLY))
    return out


def request_up(request: JSON) -> JSON:
    if not isinstance(request, Mapping):
        return request
    out: dict[str, Any] = {"name": request["name"]} if "name" in request else {}
    out["exactly"] = _without(request, ("name",))
    return out


def constraints_down(constraints: JSON) -> JSON:
    if not isinstance(constraints, list):
        return constraints
    out = []
    for constraint in constraints:
        if isinstance(constraint, Mapping):
            constraint = _without(constraint, CONSTRAINT_V1_ONLY)
            if "matchAttribute" not in constraint:
                continue  # a distinctAttribute constraint: v1alpha3 has none
        out.append(constraint)
    return out


def constraints_up(constraints: JSON) -> JSON:
    return constraints


def allocation_down(allocation: JSON) -> JSON:
    if not isinstance(allocation, Mapping):
        return allocation
    out = _without(allocation, ALLOCATION_V1_ONLY)
    devices = out.get("devices")
    if isinstance(devices, Mapping) and isinstance(devices.get("results"), list):
        out["devices"] = {**devices, "results": [
            _without(r, RESULT_V1_ONLY) if isinstance(r, Mapping) else r
            for r in devices["results"]]}
    return out


def allocation_up(allocation: JSON) -> JSON:
    return allocation


def device_statuses_down(devices: JSON) -> JSON:
    if not isinstance(devices, list):
        return devices
    return [_without(d, DEVICE_STATUS_V1_ONLY) if isinstance(d, Mapping) else d
            for d in devices]


def device_statuses_up(devices: JSON) -> JSON:
    return devices


# --------------------------------------------------------------------------- slices


def device_down(device: JSON) -> JSON:
    if not isinstance(device, Mapping):
        return device
    basic: dict[str, Any] = {}
    attributes = device.get("attributes")
    if isinstance(attributes, Mapping):
        basic["attributes"] = {k: v for k, v in attributes.items() if _scalar_or_odd(v)}
    elif "attributes" in device:
        basic["attributes"] = attributes
    capacity = device.get("capacity")
    if isinstance(capacity, Mapping):
        basic["capacity"] = {k: (v["value"] if isinstance(v, Mapping) and "value" in v else v)
                             for k, v in capacity.items()}
    elif "capacity" in device:
        basic["capacity"] = capacity
    out = {k: v for k, v in device.items()
           if k not in ("attributes", "capacity") and k not in DEVICE_V1_ONLY}
    out["basic"] = basic
    return out


def _scalar_or_odd(attribute: JSON) -> bool:
    """Keep scalar attributes (and malformed ones, for validation to report); drop list-typed
    ones, which v1alpha3 cannot express."""
    if not isinstance(attribute, Mapping):
        return True
    kinds = set(attribute)
    return not kinds or bool(kinds & SCALAR_KINDS) or not kinds <= set(ATTRIBUTE_V1_ONLY)


def device_up(device: JSON) -> JSON:
    if not isinstance(device, Mapping):
        return device
    out = {k: v for k, v in device.items() if k != "basic"}
    basic = device.get("basic")
    if not isinstance(basic, Mapping):
        if "basic" in device:
            out["basic"] = basic  # malformed: left for validation to report
        return out
    if "attributes" in basic:
        out["attributes"] = basic["attributes"]
    if "capacity" in basic:
        capacity = basic["capacity"]
        out["capacity"] = ({k: {"value": v} for k, v in capacity.items()}
                           if isinstance(capacity, Mapping) else capacity)
    for key, value in basic.items():
        if key not in ("attributes", "capacity"):
            out.setdefault(key, value)
    return out
