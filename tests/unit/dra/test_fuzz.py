"""Bad input through the models and the allocator (hypothesis): whatever a user or a broken
driver writes into a claim, a class or a slice, parsing raises only InvalidObject (naming a
field), and allocating over what parsed raises only AllocationError — never anything else, and
never an allocation that hands out a device twice or one already in use."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kdra.dra.allocator import NodeInfo, Snapshot, allocate, place
from kdra.dra.errors import AllocationError, InvalidObject
from kdra.dra.models import (
    ResourceClaim,
    parse_claim,
    parse_class,
    parse_slice,
    parse_template,
)

FUZZ = settings(max_examples=300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --------------------------------------------------------------------------- raw JSON

scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64),
                    st.floats(allow_nan=True), st.text(max_size=20))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=25)
KEYS = ["metadata", "spec", "status", "devices", "requests", "name", "deviceClassName",
        "count", "allocationMode", "selectors", "cel", "expression", "constraints",
        "matchAttribute", "config", "opaque", "driver", "parameters", "pool", "generation",
        "resourceSliceCount", "nodeName", "allNodes", "nodeSelector", "basic", "attributes",
        "capacity", "int", "bool", "string", "version", "allocation", "results",
        "reservedFor", "adminAccess", "nodeSelectorTerms", "matchExpressions", "uid",
        "exactly", "firstAvailable", "distinctAttribute", "value", "taints", "ints",
        "consumesCounters", "perDeviceNodeSelection", "sharedCounters", "tolerations"]
# Dicts built from the API's own keys reach much deeper into the models than random keys.
api_like = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)),
    max_leaves=40)

PARSERS: list[Callable[[Mapping[str, Any]], object]] = [
    parse_claim, parse_class, parse_slice, parse_template]


@FUZZ
@given(st.sampled_from(PARSERS), st.one_of(json_values, api_like))
def test_parsing_anything_raises_only_invalid_object(parser: Callable[..., object],
                                                     obj: Any) -> None:
    try:
        parser(obj)
    except InvalidObject as exc:
        assert exc.field, exc  # names a field (``<root>`` for the object itself)


# --------------------------------------------------------------------------- shaped objects

DRIVERS = ["gpu.kdra.dev", "cats.example.com", "Bad_Driver", ""]
CLASSES = ["gpu.kdra.dev", "cats", "missing", "BAD CLASS"]
ATTRS = ["index", "model", "gpu.kdra.dev/pcieRoot", "cats.example.com/color", "Bad Name"]
CEL = [
    "true", "false", "1", "device.driver == 'gpu.kdra.dev'",
    'device.attributes["gpu.kdra.dev"].index > 2',
    'device.attributes["gpu.kdra.dev"].model.startsWith("H")',
    'device.attributes["gpu.kdra.dev"].noSuch == 1',
    'device.capacity["gpu.kdra.dev"].memory.compareTo(quantity("40Gi")) >= 0',
    "device.attributes['cats.example.com'].color == 'black'",
    '"a" + 1 == "b"', "device.", "(((", "1/0 == 1", "size([1,2,3]) == 3", "",
    'device.attributes["gpu.kdra.dev"].v.isGreaterThan(semver("1.0.0"))',
]
# Mostly well-formed values, so that many objects parse and reach the allocator.
names = st.one_of(st.sampled_from(["gpu", "a", "b"]), st.sampled_from(["gpu", "x-1"]),
                  st.sampled_from(["", "UPPER", "a" * 70, "gpu-0"]))
counts = st.one_of(st.none(), st.integers(1, 4), st.integers(-2, 40),
                   st.sampled_from(["2", 1.5]))
cel_selectors = st.lists(st.builds(lambda e: {"cel": {"expression": e}}, st.sampled_from(CEL)),
                         max_size=3)
attribute_values = st.one_of(
    st.builds(lambda v: {"int": v}, st.integers(-5, 10)),
    st.builds(lambda v: {"string": v}, st.sampled_from(["H100", "black", "x" * 70, ""])),
    st.builds(lambda v: {"bool": v}, st.booleans()),
    st.builds(lambda v: {"version": v}, st.sampled_from(["1.2.3", "not-a-version"])),
    st.just({"int": 1, "string": "two"}), st.just({}), st.integers())
devices = st.builds(
    lambda name, attrs, capacity: {"name": name, "attributes": attrs,
                                   "capacity": {k: {"value": v} for k, v in capacity.items()}},
    st.sampled_from(["gpu-0", "gpu-1", "gpu-2", "gpu-3", "Bad_Name", ""]),
    st.dictionaries(st.sampled_from(ATTRS), attribute_values, max_size=3),
    st.dictionaries(st.sampled_from(["memory", "gpu.kdra.dev/memory"]),
                    st.sampled_from(["80Gi", "40Gi", "lots", "1e3", ""]), max_size=1))


def asked() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {"deviceClassName": st.sampled_from(CLASSES)},
        optional={"count": counts, "selectors": cel_selectors,
                  "allocationMode": st.sampled_from(["ExactCount", "All", "Some"]),
                  "adminAccess": st.one_of(st.booleans(), st.just("yes"))})


def requests() -> st.SearchStrategy[dict[str, Any]]:
    """v1 requests: ``exactly`` one kind, or ``firstAvailable`` alternatives."""
    exactly = st.builds(lambda name, body: {"name": name, "exactly": body}, names, asked())
    first = st.builds(lambda name, subs: {"name": name, "firstAvailable": subs}, names,
                      st.lists(st.builds(lambda n, body: {"name": n, **body}, names, asked()),
                               max_size=3))
    return st.one_of(exactly, first)


def claim_dicts(index: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda reqs, constraints, config: {
            "metadata": {"name": f"c{index}", "namespace": "ns", "uid": f"u{index}"},
            "spec": {"devices": {"requests": reqs, "constraints": constraints,
                                 "config": config}}},
        st.lists(requests(), max_size=3),
        st.just([]) | st.lists(st.one_of(*(st.fixed_dictionaries(
            {kind: st.sampled_from(ATTRS)},
            optional={"requests": st.lists(names, max_size=2)})
            for kind in ("matchAttribute", "distinctAttribute"))), max_size=2),
        st.just([]) | st.lists(st.fixed_dictionaries(
            {"opaque": st.fixed_dictionaries({"driver": st.sampled_from(DRIVERS),
                                              "parameters": st.dictionaries(
                                                  st.text(max_size=3), scalars, max_size=2)})},
            optional={"requests": st.lists(names, max_size=2)}), max_size=2))


def slice_dicts(index: int) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(
        lambda driver, pool, generation, count, scope, devs: {
            "metadata": {"name": f"s{index}"},
            "spec": {"driver": driver, "pool": {"name": pool, "generation": generation,
                                                "resourceSliceCount": count},
                     **scope, "devices": devs}},
        st.sampled_from(DRIVERS), st.sampled_from(["n1", "n2", "shared", ""]),
        st.integers(-1, 2), st.integers(0, 3),
        st.sampled_from([{"nodeName": "n1"}, {"nodeName": "n2"}, {"allNodes": True}, {},
                         {"nodeName": "n1", "allNodes": True},
                         {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                             {"key": "zone", "operator": "In", "values": ["a"]}]}]}},
                         {"nodeSelector": {"nodeSelectorTerms": []}}]),
        st.lists(devices, max_size=5))


def class_dicts(name: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda selectors: {"metadata": {"name": name},
                                        "spec": {"selectors": selectors}}, cel_selectors)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[Any], list[Any], list[Any], list[Any]]:
    claims = [draw(st.one_of(claim_dicts(i), claim_dicts(i), claim_dicts(i), api_like))
              for i in range(draw(st.integers(1, 3)))]
    slices = [draw(slice_dicts(i)) for i in range(draw(st.integers(0, 4)))]
    classes = [draw(class_dicts(n)) for n in ("gpu.kdra.dev", "cats")
               if draw(st.booleans())]
    # Some claims already allocated (devices in use), maybe to devices that do not exist.
    allocated = [{"metadata": {"name": f"held{i}", "namespace": "ns", "uid": f"h{i}"},
                  "spec": {"devices": {"requests": [{"name": "gpu",
                                                     "deviceClassName": "gpu.kdra.dev"}]}},
                  "status": {"allocation": {"devices": {"results": [
                      {"request": "gpu", "driver": "gpu.kdra.dev", "pool": pool,
                       "device": device}]}},
                      "reservedFor": [{"resource": "pods", "name": "p", "uid": "p"}]}}
                 for i, (pool, device) in enumerate(draw(st.lists(st.tuples(
                     st.sampled_from(["n1", "n2", "shared"]),
                     st.sampled_from(["gpu-0", "gpu-1", "gpu-9"])), max_size=3)))]
    return claims, slices, classes, allocated


NODES = [NodeInfo("n1", {"zone": "a"}), NodeInfo("n2", {"zone": "b"})]


def _parsed(parser: Callable[[Any], Any], objects: list[Any]) -> list[Any]:
    out = []
    for obj in objects:
        try:
            out.append(parser(obj))
        except InvalidObject as exc:
            assert exc.field
    return out


@FUZZ
@given(clusters())
def test_allocating_over_bad_input_raises_only_allocation_error(
        cluster: tuple[list[Any], list[Any], list[Any], list[Any]]) -> None:
    raw_claims, raw_slices, raw_classes, raw_allocated = cluster
    claims: list[ResourceClaim] = _parsed(parse_claim, raw_claims)
    snapshot = Snapshot()
    for slice_ in _parsed(parse_slice, raw_slices):
        snapshot.upsert_slice(slice_)
    for device_class in _parsed(parse_class, raw_classes):
        snapshot.upsert_class(device_class)
    for held in _parsed(parse_claim, raw_allocated):
        snapshot.upsert_claim(held)
    in_use = set(snapshot.devices_in_use)
    pending = [c for c in claims if not c.allocated]
    if not pending:
        event("no claim parsed")
        return
    try:
        outcome = place(snapshot, pending, NODES)
    except AllocationError:
        event("place: AllocationError")
        return
    event("place: fatal" if outcome.fatal else
          f"place: {len(outcome.placements)} placement(s)")
    assert outcome.fatal is not None or set(outcome.placements) | set(outcome.reasons) == \
        {n.name for n in NODES}
    for placement in outcome.placements.values():
        assert not placement.devices & in_use, placement
        taken = Counter((r.driver, r.pool, r.device) for result in placement.results
                        for r in result.devices.results)
        admin = {(c.key, r.name) for c in pending for r in c.spec.devices.requests
                 if r.admin_access}
        shared = [d for d, n in taken.items() if n > 1]
        assert not shared or admin, (shared, placement)
    for node in NODES:
        with contextlib.suppress(AllocationError):
            allocate(pending, snapshot, node)
