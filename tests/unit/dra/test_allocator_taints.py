"""Taint effects in the allocator (issue 25): which tainted devices a request may get, with
taints from the slice and from DeviceTaintRules; results keep the tolerations; explanations
count the devices turned away by taints."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.dra.allocator import Snapshot, allocate, place
from kdra.dra.models import dump
from kdra.dra.taint_rules import parse_rule
from tests.unit.builders import (
    CLASS,
    claim_with,
    device,
    gpu_class,
    node,
    slice_with,
)
from tests.unit.dra.test_allocator import picks

UNHEALTHY = "gpu.kdra.dev/unhealthy"


def tainted(name: str, effect: str, key: str = UNHEALTHY, value: str = "XID-48",
            ) -> dict[str, Any]:
    return {**device(name), "taints": [{"key": key, "value": value, "effect": effect}]}


def tolerating(*tolerations: dict[str, Any], count: int = 1, name: str = "gpu"
               ) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": CLASS, "count": count}
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    return {"name": name, "exactly": exactly}


@pytest.mark.parametrize(("effect", "tolerations", "gets_it"), [
    ("None", [], True),
    ("SomethingNew", [], True),
    ("NoSchedule", [], False),
    ("NoExecute", [], False),
    ("NoSchedule", [{"key": UNHEALTHY, "operator": "Exists"}], True),
    ("NoExecute", [{"key": UNHEALTHY, "operator": "Exists"}], True),
    ("NoExecute", [{"key": UNHEALTHY, "operator": "Exists", "effect": "NoSchedule"}], False),
    ("NoSchedule", [{"key": UNHEALTHY, "value": "XID-48"}], True),
    ("NoSchedule", [{"key": UNHEALTHY, "value": "XID-79"}], False),
    ("NoExecute", [{"operator": "Exists"}], True),
    ("NoExecute", [{"key": UNHEALTHY, "operator": "Exists", "tolerationSeconds": 60}], True),
])
def test_taint_effect_table(effect: str, tolerations: list[dict[str, Any]],
                            gets_it: bool) -> None:
    snapshot = Snapshot.build([slice_with(tainted("gpu-0", effect))], [gpu_class()])
    results = allocate([claim_with(tolerating(*tolerations))], snapshot, node())
    assert (results is not None) is gets_it
    if results is not None:
        assert picks(results) == [["gpu:gpu-0"]]


def test_untolerated_tainted_devices_are_skipped_for_healthy_ones() -> None:
    snapshot = Snapshot.build([slice_with(tainted("gpu-0", "NoSchedule"),
                                          tainted("gpu-1", "NoExecute"), device("gpu-2"))],
                              [gpu_class()])
    assert picks(allocate([claim_with(tolerating())], snapshot, node()) or []) == [
        ["gpu:gpu-2"]]


def test_results_keep_the_tolerations() -> None:
    toleration = {"key": UNHEALTHY, "operator": "Exists", "effect": "NoExecute",
                  "tolerationSeconds": 30}
    snapshot = Snapshot.build([slice_with(tainted("gpu-0", "NoExecute"))], [gpu_class()])
    (result,) = allocate([claim_with(tolerating(toleration))], snapshot, node()) or []
    (picked,) = result.devices.results
    assert [(t.key, t.operator, t.effect, t.toleration_seconds) for t in picked.tolerations] == [
        (UNHEALTHY, "Exists", "NoExecute", 30)]


def test_result_tolerations_dump_without_unset_fields() -> None:
    """The allocation result's schema rejects an empty effect: unset fields stay unset."""
    snapshot = Snapshot.build([slice_with(tainted("gpu-0", "NoSchedule"))], [gpu_class()])
    (result,) = allocate([claim_with(tolerating({"operator": "Exists"}))], snapshot,
                         node()) or []
    assert dump(result)["devices"]["results"][0]["tolerations"] == [{"operator": "Exists"}]


def test_two_requests_with_equal_selectors_but_different_tolerations() -> None:
    """The matching list is cached per selectors *and* tolerations."""
    snapshot = Snapshot.build([slice_with(tainted("gpu-0", "NoSchedule"), device("gpu-1"))],
                              [gpu_class()])
    claim = claim_with(tolerating(name="plain"),
                       tolerating({"key": UNHEALTHY, "operator": "Exists"}, name="brave"))
    assert picks(allocate([claim], snapshot, node()) or []) == [
        ["plain:gpu-1", "brave:gpu-0"]]


def rule(name: str, effect: str, **selector: str) -> Any:
    return parse_rule({"metadata": {"name": name, "creationTimestamp": "2026-12-02T00:00:00Z"},
                       "spec": {"deviceSelector": selector,
                                "taint": {"key": "example.com/maintenance",
                                          "effect": effect}}})


def test_device_taint_rules_taint_devices_for_the_allocator() -> None:
    snapshot = Snapshot.build([slice_with(device("gpu-0"), device("gpu-1"))], [gpu_class()])
    claim = claim_with(tolerating())
    assert picks(allocate([claim], snapshot, node()) or []) == [["gpu:gpu-0"]]
    snapshot.upsert_rule(rule("maint", "NoSchedule", device="gpu-0"))
    assert picks(allocate([claim], snapshot, node()) or []) == [["gpu:gpu-1"]]
    snapshot.upsert_rule(rule("drain", "NoExecute", pool="worker-1"))
    assert allocate([claim], snapshot, node()) is None
    maintenance = claim_with(tolerating({"key": "example.com/maintenance",
                                         "operator": "Exists"}))
    assert picks(allocate([maintenance], snapshot, node()) or []) == [["gpu:gpu-0"]]
    snapshot.upsert_rule(rule("drain", "None", pool="worker-1"))
    snapshot.remove_rule("maint")
    assert picks(allocate([claim], snapshot, node()) or []) == [["gpu:gpu-0"]]


def test_explanation_counts_tainted_devices() -> None:
    snapshot = Snapshot.build(
        [slice_with(tainted("gpu-0", "NoSchedule"), tainted("gpu-1", "NoExecute"),
                    tainted("gpu-2", "NoSchedule", value="ECC"))], [gpu_class()])
    outcome = place(snapshot, [claim_with(tolerating())], [node()])
    assert not outcome.placements
    summary = outcome.summary()
    assert "3 devices tainted gpu.kdra.dev/unhealthy (not tolerated)" in summary, summary
    # tolerating one value leaves two turned away
    partly = claim_with(tolerating({"key": UNHEALTHY, "value": "ECC"}, count=2))
    summary = place(snapshot, [partly], [node()]).summary()
    assert "2 devices tainted gpu.kdra.dev/unhealthy (not tolerated)" in summary, summary
