"""kdra's allocator against upstream's shared allocator test table (issue 39).

The cases are upstream's (``tests/unit/dra/upstream_cases.py``: names, objects, features,
expected results and errors, transcribed from Kubernetes 1.36's
``allocatortesting/allocator_testing.go``). Each runs through :func:`kdra.dra.allocator.
allocate` in upstream's walk order (``scoring=False``) and is compared as upstream compares:
the results of each claim in any order (gomega's ``ConsistOf``), configs and node selectors
exactly (requirements and values in any order), a share's ``shareID`` as "set", quantities by
value; an error by kdra's wording of it (upstream's substring is kept next to it).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest

from kdra.dra.allocator import Snapshot, allocate
from kdra.dra.errors import AllocationError, InvalidObject
from kdra.dra.models import (
    AllocationResult,
    ResourceClaim,
    dump,
    parse_claim,
    parse_class,
    parse_slice,
)
from kdra.dra.quantity import parse_quantity
from tests.unit.dra.upstream_cases import CASES, SKIPPED
from tests.unit.dra.upstream_table import NODE1, REGION1, Case, node


def _unique_names(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upstream's table reuses slice names (its allocator takes a list); kdra's snapshot is
    keyed by name, so a repeated name gets a suffix (which keeps the order by name)."""
    seen: Counter[str] = Counter()
    out = []
    for raw in slices:
        name = raw["metadata"]["name"]
        seen[name] += 1
        if seen[name] > 1:
            raw = {**raw, "metadata": {**raw["metadata"], "name": f"{name}-{seen[name]}"}}
        out.append(raw)
    return out


def _holder(index: int, results: list[dict[str, Any]]) -> ResourceClaim:
    return parse_claim({
        "metadata": {"name": f"held-{index}", "namespace": "other", "uid": f"held-{index}"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {
            "deviceClassName": "held"}}]}},
        "status": {"allocation": {"devices": {"results": results}}}})


def _held(case: Case) -> list[ResourceClaim]:
    """Claims holding upstream's allocated devices and allocated shares (capacity)."""
    held = []
    for index, device in enumerate(case.allocated):
        driver, pool, name = device.split("/")
        held.append(_holder(index, [{"request": "r", "driver": driver, "pool": pool,
                                     "device": name}]))
    for index, (device, consumed) in enumerate(case.shared.items(), start=len(held)):
        driver, pool, name = device.split("/")
        held.append(_holder(index, [{"request": "r", "driver": driver, "pool": pool,
                                     "device": name,
                                     "shareID": "00000000-0000-4000-8000-000000000000",
                                     "consumedCapacity": dict(consumed)}]))
    return held


def _claims(case: Case) -> list[ResourceClaim]:
    return [parse_claim({**raw, "metadata": {**raw["metadata"], "namespace": "default",
                                             "uid": f"uid-{index}"}})
            for index, raw in enumerate(case.claims)]


def _quantities(consumed: dict[str, str]) -> dict[str, str]:
    return {name: str(parse_quantity(value).value) for name, value in consumed.items()}


def _result(raw: dict[str, Any]) -> str:
    out = dict(raw)
    if "shareID" in out:
        out["shareID"] = "*"  # upstream replaces every shareID with a fixed one
    if "consumedCapacity" in out:
        out["consumedCapacity"] = _quantities(out["consumedCapacity"])
    return json.dumps(out, sort_keys=True)


def _selector(raw: dict[str, Any] | None) -> Any:
    if raw is None:
        return None
    return sorted(json.dumps({key: sorted(json.dumps({**req, "values": sorted(req["values"])},
                                                     sort_keys=True)
                                          for req in term.get(key, []))
                              for key in ("matchExpressions", "matchFields")}, sort_keys=True)
                  for term in raw["nodeSelectorTerms"])


def _comparable(allocation: dict[str, Any]) -> dict[str, Any]:
    devices = allocation.get("devices", {})
    return {"results": sorted(_result(r) for r in devices.get("results", [])),
            "config": devices.get("config", []),
            "nodeSelector": _selector(allocation.get("nodeSelector"))}


def _got(results: list[AllocationResult]) -> list[dict[str, Any]]:
    return [_comparable(dump(result)) for result in results]


def _ids() -> list[str]:
    return [case.name for case in CASES]


@pytest.mark.parametrize("case", CASES, ids=_ids())
def test_upstream_case(case: Case) -> None:
    target = case.node or node(NODE1, REGION1)
    if case.invalid is not None:
        with pytest.raises(InvalidObject, match=case.invalid):
            _claims(case)
            [parse_slice(s) for s in case.slices]
            [parse_class(c) for c in case.classes]
        return
    snapshot = Snapshot.build([parse_slice(s) for s in _unique_names(list(case.slices))],
                              [parse_class(c) for c in case.classes], _held(case))
    claims = _claims(case)
    if case.error is not None:
        with pytest.raises(AllocationError) as raised:
            allocate(claims, snapshot, target, scoring=False)
        assert re.search(case.error.kdra, str(raised.value)), str(raised.value)
        return
    results = allocate(claims, snapshot, target, scoring=False)
    if not case.expect:
        # Upstream's ConsistOf() cannot tell "no fit" (nil) from "no claims" (empty).
        assert not results, results
        if claims:
            assert results is None
        return
    assert results is not None, "does not fit, upstream allocates"
    assert _got(results) == [_comparable(expected) for expected in case.expect]


def test_the_table_is_upstream_s_whole_table() -> None:
    """Every case of upstream's table is transcribed or skipped with a reason, once."""
    names = [case.name for case in CASES] + list(SKIPPED)
    assert len(names) == len(set(names))
    assert len(names) == 215
    assert all(reason for reason in SKIPPED.values())

