"""Hypothesis strategies for kdra's objects in both API versions (schema-valid shapes).

``v1_objects()`` draws ResourceClaims, ResourceClaimTemplates, DeviceClasses and
ResourceSlices as ``resource.kdra.dev/v1`` writes them, including every field v1alpha3 cannot
express; ``v1alpha3_objects()`` draws the seed's 1.31 shape.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

LABEL = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
DOMAIN = st.sampled_from(["gpu.kdra.dev", "example.com", "nic.example.org"])
IDENT = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True)
QUALIFIED = st.builds(lambda d, i: f"{d}/{i}", DOMAIN, IDENT)
QUANTITY = st.sampled_from(["1", "8", "80Gi", "500m", "1k", "2Mi"])
SHORT_TEXT = st.text(alphabet="abcdefgh XYZ-_.", max_size=12)
EXPRESSION = st.sampled_from([
    'device.driver == "gpu.kdra.dev"',
    'device.attributes["gpu.kdra.dev"].index >= 0',
    "true",
])
UID = st.uuids().map(str)


def _maybe(draw: st.DrawFn, value: st.SearchStrategy[Any], key: str,
           into: dict[str, Any]) -> None:
    if draw(st.booleans()):
        into[key] = draw(value)


def selectors() -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(EXPRESSION.map(lambda e: {"cel": {"expression": e}}), max_size=2)


@st.composite
def tolerations(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(1, 2))):
        toleration: dict[str, Any] = {"key": draw(LABEL)}
        operator = draw(st.sampled_from(["Equal", "Exists"]))
        toleration["operator"] = operator
        if operator == "Equal":
            toleration["value"] = draw(LABEL)
        _maybe(draw, st.sampled_from(["NoSchedule", "NoExecute"]), "effect", toleration)
        out.append(toleration)
    return out


@st.composite
def counted(draw: st.DrawFn, *, v1: bool, sub: bool = False) -> dict[str, Any]:
    """The fields ``exactly`` and sub-requests (and v1alpha3 requests) share."""
    body: dict[str, Any] = {"deviceClassName": draw(st.sampled_from(["gpu.kdra.dev", "nic"]))}
    _maybe(draw, selectors(), "selectors", body)
    mode = draw(st.sampled_from([None, "ExactCount", "All"]))
    if mode is not None:
        body["allocationMode"] = mode
    if mode != "All" and draw(st.booleans()):
        body["count"] = draw(st.integers(1, 4))
    if not sub:
        _maybe(draw, st.booleans(), "adminAccess", body)
    if v1:
        _maybe(draw, tolerations(), "tolerations", body)
        _maybe(draw, st.dictionaries(QUALIFIED, QUANTITY, min_size=1, max_size=2)
               .map(lambda r: {"requests": r}), "capacity", body)
    return body


@st.composite
def v1_requests(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(LABEL, min_size=1, max_size=3, unique=True))
    out = []
    for name in names:
        if draw(st.booleans()):
            out.append({"name": name, "exactly": draw(counted(v1=True))})
        else:
            subs = draw(st.lists(LABEL, min_size=1, max_size=3, unique=True))
            out.append({"name": name, "firstAvailable": [
                {"name": s, **draw(counted(v1=True, sub=True))} for s in subs]})
    return out


def _references(requests: list[dict[str, Any]]) -> list[str]:
    names = [r["name"] for r in requests]
    names += [f"{r['name']}/{s['name']}" for r in requests for s in r.get("firstAvailable", ())]
    return names


@st.composite
def constraints(draw: st.DrawFn, requests: list[dict[str, Any]], *, v1: bool) -> list[Any]:
    out = []
    for _ in range(draw(st.integers(0, 3))):
        constraint: dict[str, Any] = {}
        if draw(st.booleans()):
            constraint["requests"] = draw(st.lists(st.sampled_from(_references(requests)),
                                                   min_size=1, max_size=2, unique=True))
        kind = "distinctAttribute" if v1 and draw(st.booleans()) else "matchAttribute"
        constraint[kind] = draw(QUALIFIED)
        out.append(constraint)
    return out


@st.composite
def configs(draw: st.DrawFn, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(0, 2))):
        config: dict[str, Any] = {"opaque": {"driver": draw(DOMAIN), "parameters": draw(
            st.dictionaries(LABEL, st.integers(0, 9) | SHORT_TEXT, max_size=2))}}
        if draw(st.booleans()):
            config["requests"] = draw(st.lists(st.sampled_from(_references(requests)),
                                               min_size=1, max_size=2, unique=True))
        out.append(config)
    return out


@st.composite
def claim_spec(draw: st.DrawFn, *, v1: bool) -> dict[str, Any]:
    if v1:
        requests = draw(v1_requests())
    else:
        names = draw(st.lists(LABEL, min_size=1, max_size=3, unique=True))
        requests = [{"name": n, **draw(counted(v1=False))} for n in names]
    devices: dict[str, Any] = {"requests": requests}
    _maybe(draw, constraints(requests, v1=v1), "constraints", devices)
    _maybe(draw, configs(requests), "config", devices)
    return {"devices": devices}


@st.composite
def metadata(draw: st.DrawFn, *, namespaced: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": draw(LABEL), "uid": draw(UID), "resourceVersion": "7"}
    if namespaced:
        meta["namespace"] = draw(LABEL)
    # The API server never stores empty maps here (omitempty), so neither do the objects.
    _maybe(draw, st.dictionaries(LABEL.map(lambda k: f"example.com/{k}"), SHORT_TEXT,
                                 min_size=1, max_size=2), "annotations", meta)
    _maybe(draw, st.dictionaries(LABEL, LABEL, min_size=1, max_size=2), "labels", meta)
    return meta


@st.composite
def node_selector(draw: st.DrawFn) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": draw(LABEL), "operator": "In", "values": draw(st.lists(LABEL, min_size=1,
                                                                       max_size=2))}]}]}


@st.composite
def allocation(draw: st.DrawFn, requests: list[dict[str, Any]], *, v1: bool) -> dict[str, Any]:
    results = []
    for _ in range(draw(st.integers(1, 3))):
        result: dict[str, Any] = {"request": draw(st.sampled_from(_references(requests))),
                                  "driver": draw(DOMAIN), "pool": draw(LABEL),
                                  "device": draw(LABEL)}
        if v1:
            _maybe(draw, st.booleans(), "adminAccess", result)
            _maybe(draw, tolerations(), "tolerations", result)
            if draw(st.booleans()):
                result["bindingConditions"] = ["Attached"]
                result["bindingFailureConditions"] = ["Failed"]
            _maybe(draw, UID, "shareID", result)
            _maybe(draw, st.dictionaries(QUALIFIED, QUANTITY, min_size=1, max_size=2),
                   "consumedCapacity", result)
        results.append(result)
    out: dict[str, Any] = {"devices": {"results": results}}
    if draw(st.booleans()):
        out["devices"]["config"] = [{"source": "FromClass", "opaque": {
            "driver": "gpu.kdra.dev", "parameters": {"a": 1}}}]
    _maybe(draw, node_selector(), "nodeSelector", out)
    if v1:
        _maybe(draw, st.just("2026-01-02T03:04:05Z"), "allocationTimestamp", out)
    return out


@st.composite
def device_statuses(draw: st.DrawFn, *, v1: bool) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(1, 2))):
        status: dict[str, Any] = {"driver": draw(DOMAIN), "pool": draw(LABEL),
                                  "device": draw(LABEL)}
        if draw(st.booleans()):
            status["conditions"] = [{"type": "Ready", "status": "True", "reason": "Prepared",
                                     "message": "", "lastTransitionTime":
                                     "2026-01-02T03:04:05Z"}]
        _maybe(draw, st.dictionaries(LABEL, LABEL, max_size=2), "data", status)
        if v1:
            _maybe(draw, UID, "shareID", status)
        out.append(status)
    return out


@st.composite
def claims(draw: st.DrawFn, *, v1: bool) -> dict[str, Any]:
    spec = draw(claim_spec(v1=v1))
    obj: dict[str, Any] = {"apiVersion": f"resource.kdra.dev/{'v1' if v1 else 'v1alpha3'}",
                           "kind": "ResourceClaim", "metadata": draw(metadata(namespaced=True)),
                           "spec": spec}
    if draw(st.booleans()):
        status: dict[str, Any] = {}
        if draw(st.booleans()):
            status["allocation"] = draw(allocation(spec["devices"]["requests"], v1=v1))
            status["allocatedDevices"] = ",".join(
                r["device"] for r in status["allocation"]["devices"]["results"])
            if draw(st.booleans()):
                status["reservedFor"] = [{"resource": "pods", "name": draw(LABEL),
                                          "uid": draw(UID)}]
            _maybe(draw, device_statuses(v1=v1), "devices", status)
        obj["status"] = status
    return obj


@st.composite
def templates(draw: st.DrawFn, *, v1: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"spec": draw(claim_spec(v1=v1))}
    if draw(st.booleans()):
        spec["metadata"] = {"labels": draw(st.dictionaries(LABEL, LABEL, max_size=2))}
    return {"apiVersion": f"resource.kdra.dev/{'v1' if v1 else 'v1alpha3'}",
            "kind": "ResourceClaimTemplate", "metadata": draw(metadata(namespaced=True)),
            "spec": spec}


@st.composite
def classes(draw: st.DrawFn, *, v1: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    _maybe(draw, selectors(), "selectors", spec)
    if draw(st.booleans()):
        spec["config"] = [{"opaque": {"driver": draw(DOMAIN), "parameters": {"x": "y"}}}]
    if v1:
        _maybe(draw, LABEL.map(lambda n: f"example.com/{n}"), "extendedResourceName", spec)
    return {"apiVersion": f"resource.kdra.dev/{'v1' if v1 else 'v1alpha3'}",
            "kind": "DeviceClass", "metadata": draw(metadata(namespaced=False)), "spec": spec}


SCALAR = st.one_of(
    st.integers(-5, 5).map(lambda v: {"int": v}),
    st.booleans().map(lambda v: {"bool": v}),
    LABEL.map(lambda v: {"string": v}),
    st.sampled_from(["1.2.3", "550.54.15"]).map(lambda v: {"version": v}),
)
LIST_ATTRIBUTE = st.one_of(
    st.lists(st.integers(0, 9), min_size=1, max_size=3).map(lambda v: {"ints": v}),
    st.lists(LABEL, min_size=1, max_size=3).map(lambda v: {"strings": v}),
)


@st.composite
def v1_device(draw: st.DrawFn, name: str) -> dict[str, Any]:
    device: dict[str, Any] = {"name": name}
    attributes = draw(st.dictionaries(IDENT, SCALAR, max_size=3))
    if draw(st.booleans()):
        attributes.update(draw(st.dictionaries(QUALIFIED, LIST_ATTRIBUTE, max_size=2)))
    if attributes or draw(st.booleans()):
        device["attributes"] = attributes
    capacity = {}
    for key in draw(st.lists(IDENT, max_size=2, unique=True)):
        entry: dict[str, Any] = {"value": draw(QUANTITY)}
        if draw(st.booleans()):
            entry["requestPolicy"] = {"default": "1", "validValues": ["1", "2"]}
        capacity[key] = entry
    if capacity:
        device["capacity"] = capacity
    if draw(st.booleans()):
        device["taints"] = [{"key": draw(LABEL), "value": draw(LABEL),
                             "effect": draw(st.sampled_from(["NoSchedule", "NoExecute",
                                                             "None"]))}]
    if draw(st.booleans()):
        device["consumesCounters"] = [{"counterSet": "mem", "counters": {
            "memory": {"value": draw(QUANTITY)}}}]
    _maybe(draw, st.booleans(), "allowMultipleAllocations", device)
    _maybe(draw, st.booleans(), "bindsToNode", device)
    return device


@st.composite
def slices(draw: st.DrawFn, *, v1: bool) -> dict[str, Any]:
    names = draw(st.lists(LABEL, max_size=4, unique=True))
    spec: dict[str, Any] = {"driver": draw(DOMAIN), "pool": {
        "name": draw(LABEL), "generation": draw(st.integers(0, 3)),
        "resourceSliceCount": draw(st.integers(1, 2))}}
    scope = draw(st.sampled_from(["nodeName", "allNodes", "nodeSelector"]
                                 + (["perDeviceNodeSelection"] if v1 else [])))
    if scope == "nodeName":
        spec["nodeName"] = draw(LABEL)
    elif scope == "nodeSelector":
        spec["nodeSelector"] = draw(node_selector())
    else:
        spec[scope] = True
    if v1 and not names and draw(st.booleans()):
        spec["sharedCounters"] = [{"name": "mem", "counters": {"memory": {"value": "80Gi"}}}]
    elif v1:
        spec["devices"] = [draw(v1_device(n)) for n in names]
    else:
        spec["devices"] = []
        for name in names:
            basic: dict[str, Any] = {}
            _maybe(draw, st.dictionaries(IDENT, SCALAR, max_size=3), "attributes", basic)
            _maybe(draw, st.dictionaries(IDENT, QUANTITY | st.integers(1, 9), max_size=2),
                   "capacity", basic)
            spec["devices"].append({"name": name, "basic": basic})
    return {"apiVersion": f"resource.kdra.dev/{'v1' if v1 else 'v1alpha3'}",
            "kind": "ResourceSlice", "metadata": draw(metadata(namespaced=False)),
            "spec": spec}


def v1_objects() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(claims(v1=True), templates(v1=True), classes(v1=True), slices(v1=True))


def v1alpha3_objects() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(claims(v1=False), templates(v1=False), classes(v1=False),
                     slices(v1=False))
