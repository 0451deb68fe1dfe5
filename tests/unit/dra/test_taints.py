"""Device taints and tolerations: upstream's matching table, the may-allocate and must-evict
decision tables, DeviceTaintRule parsing and matching."""

from __future__ import annotations

import datetime as dt

import pytest

from kdra.dra.errors import InvalidObject
from kdra.dra.models import DeviceTaint, DeviceToleration
from kdra.dra.taint_rules import parse_rule, rule_taints
from kdra.dra.taints import (
    Taint,
    describe,
    eviction,
    label_value,
    may_allocate,
    tolerates,
    untolerated,
)

NOW = dt.datetime(2026, 12, 2, 8, 0, 7, tzinfo=dt.UTC)


def taint(key: str = "k", value: str = "v", effect: str = "NoSchedule",
          added: str | None = None) -> DeviceTaint:
    return DeviceTaint(key=key, value=value, effect=effect, time_added=added)


def tol(key: str = "", operator: str = "Equal", value: str = "", effect: str = "",
        seconds: int | None = None) -> DeviceToleration:
    return DeviceToleration.model_validate({
        "key": key, "operator": operator, "value": value, "effect": effect,
        "tolerationSeconds": seconds})


# ----------------------------------------------------------------------- matching (upstream's)

@pytest.mark.parametrize(("toleration", "the_taint", "expected"), [
    # key + Equal + value
    (tol("k", "Equal", "v"), taint("k", "v"), True),
    (tol("k", "Equal", "w"), taint("k", "v"), False),
    (tol("k", "Equal", ""), taint("k", "v"), False),
    (tol("k", "Equal", ""), taint("k", ""), True),
    (tol("other", "Equal", "v"), taint("k", "v"), False),
    # Exists: any value of the key
    (tol("k", "Exists"), taint("k", "v"), True),
    (tol("k", "Exists"), taint("k", ""), True),
    (tol("other", "Exists"), taint("k", "v"), False),
    # empty key + Exists: everything
    (tol("", "Exists"), taint("any", "thing", "NoExecute"), True),
    # effect: empty matches all, otherwise equal
    (tol("k", "Exists", effect="NoSchedule"), taint("k", "v", "NoSchedule"), True),
    (tol("k", "Exists", effect="NoSchedule"), taint("k", "v", "NoExecute"), False),
    (tol("k", "Exists", effect="NoExecute"), taint("k", "v", "NoExecute"), True),
    (tol("k", "Exists"), taint("k", "v", "None"), True),
])
def test_tolerates_follows_upstream(toleration: DeviceToleration, the_taint: DeviceTaint,
                                    expected: bool) -> None:
    assert tolerates(toleration, the_taint) is expected


def test_unknown_operator_matches_nothing() -> None:
    weird = Taint("k", "v", "NoSchedule")

    class Odd:
        key, operator, value, effect, toleration_seconds = "k", "Lt", "v", "", None

    assert tolerates(Odd(), weird) is False


# ----------------------------------------------------------------------- may allocate

UNHEALTHY = "gpu.kdra.dev/unhealthy"


@pytest.mark.parametrize(("effect", "tolerations", "expected"), [
    # effect None / unknown: informational, always allocatable
    ("None", [], True),
    ("PreferNoSchedule", [], True),
    ("SomethingNew", [], True),
    # NoSchedule / NoExecute: only when tolerated
    ("NoSchedule", [], False),
    ("NoExecute", [], False),
    ("NoSchedule", [tol(UNHEALTHY, "Exists")], True),
    ("NoExecute", [tol(UNHEALTHY, "Exists")], True),
    ("NoExecute", [tol(UNHEALTHY, "Exists", effect="NoSchedule")], False),
    ("NoSchedule", [tol(UNHEALTHY, "Equal", "XID-79")], True),
    ("NoSchedule", [tol(UNHEALTHY, "Equal", "ECC")], False),
    ("NoExecute", [tol("", "Exists")], True),
    ("NoExecute", [tol(UNHEALTHY, "Exists", seconds=30)], True),
])
def test_may_allocate_table(effect: str, tolerations: list[DeviceToleration],
                            expected: bool) -> None:
    taints = [taint(UNHEALTHY, "XID-79", effect)]
    assert may_allocate(taints, tolerations) is expected
    assert (untolerated(taints, tolerations) == []) is expected


def test_every_acting_taint_must_be_tolerated() -> None:
    taints = [taint("a", "1"), taint("b", "2", "NoExecute"), taint("c", "3", "None")]
    assert not may_allocate(taints, [tol("a", "Exists")])
    assert [t.key for t in untolerated(taints, [tol("a", "Exists")])] == ["b"]
    assert may_allocate(taints, [tol("a", "Exists"), tol("b", "Equal", "2")])
    assert describe(taints) == "a=1:NoSchedule, b=2:NoExecute"


# ----------------------------------------------------------------------- must evict at T

ADDED = "2026-12-02T07:59:00Z"
ADDED_AT = dt.datetime(2026, 12, 2, 7, 59, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(("effect", "tolerations", "expected_at"), [
    # NoSchedule / None never evict, tolerated or not
    ("NoSchedule", [], None),
    ("None", [], None),
    ("Unknown", [], None),
    # NoExecute, not tolerated: now
    ("NoExecute", [], NOW),
    ("NoExecute", [tol("other", "Exists")], NOW),
    ("NoExecute", [tol(UNHEALTHY, "Exists", effect="NoSchedule", seconds=600)], NOW),
    # tolerated without seconds: never
    ("NoExecute", [tol(UNHEALTHY, "Exists")], None),
    # tolerated with seconds: timeAdded + seconds
    ("NoExecute", [tol(UNHEALTHY, "Exists", seconds=30)], ADDED_AT + dt.timedelta(seconds=30)),
    ("NoExecute", [tol(UNHEALTHY, "Exists", seconds=0)], ADDED_AT),
    ("NoExecute", [tol(UNHEALTHY, "Exists", seconds=-5)], ADDED_AT),
    # several matching tolerations: the smallest seconds; one without seconds does not win
    ("NoExecute", [tol(UNHEALTHY, "Exists", seconds=300), tol("", "Exists", seconds=60)],
     ADDED_AT + dt.timedelta(seconds=60)),
    ("NoExecute", [tol(UNHEALTHY, "Exists"), tol("", "Exists", seconds=60)],
     ADDED_AT + dt.timedelta(seconds=60)),
])
def test_eviction_table(effect: str, tolerations: list[DeviceToleration],
                        expected_at: dt.datetime | None) -> None:
    decision = eviction([taint(UNHEALTHY, "DeviceLost", effect, ADDED)], tolerations, NOW)
    if expected_at is None:
        assert decision is None
    else:
        assert decision is not None
        assert decision.at == expected_at
        assert decision.tolerated == bool(tolerations and expected_at != NOW)


def test_eviction_without_time_added_counts_from_now() -> None:
    decision = eviction([taint(UNHEALTHY, "x", "NoExecute")],
                        [tol(UNHEALTHY, "Exists", seconds=10)], NOW)
    assert decision is not None and decision.at == NOW + dt.timedelta(seconds=10)


def test_eviction_earliest_over_taints() -> None:
    taints = [taint("slow", "", "NoExecute", ADDED), taint("fast", "", "NoExecute", ADDED)]
    tolerations = [tol("slow", "Exists", seconds=100), tol("fast", "Exists", seconds=5)]
    decision = eviction(taints, tolerations, NOW)
    assert decision is not None and decision.taint.key == "fast"
    assert decision.at == ADDED_AT + dt.timedelta(seconds=5)
    # one untolerated taint among tolerated ones (added now): now
    fresh = [taint("slow", "", "NoExecute"), taint("fast", "", "NoExecute")]
    decision = eviction(fresh, tolerations, NOW)
    assert decision is not None and decision.at == NOW + dt.timedelta(seconds=5)
    decision = eviction([*fresh, taint("bad", "", "NoExecute")], tolerations, NOW)
    assert decision is not None and decision.at == NOW and decision.taint.key == "bad"


@pytest.mark.parametrize(("text", "expected"), [
    ("XID-79", "XID-79"),
    ("NVML query failed: GPU is lost", "NVML-query-failed-GPU-is-lost"),
    ("  ", "Unknown"),
    ("-._", "Unknown"),
    ("x" * 100, "x" * 63),
])
def test_label_value(text: str, expected: str) -> None:
    assert label_value(text) == expected


# ----------------------------------------------------------------------- DeviceTaintRule


def rule(selector: dict[str, str] | None, **taint_fields: str) -> dict[str, object]:
    spec: dict[str, object] = {"taint": {"key": "example.com/maintenance",
                                         "effect": "NoExecute", **taint_fields}}
    if selector is not None:
        spec["deviceSelector"] = selector
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": "r", "creationTimestamp": "2026-12-01T00:00:00Z"},
            "spec": spec}


@pytest.mark.parametrize(("selector", "device", "expected"), [
    (None, ("gpu.kdra.dev", "n1", "gpu-0"), False),
    ({}, ("gpu.kdra.dev", "n1", "gpu-0"), True),
    ({"pool": "n1"}, ("gpu.kdra.dev", "n1", "gpu-0"), True),
    ({"pool": "n1"}, ("gpu.kdra.dev", "n2", "gpu-0"), False),
    ({"driver": "gpu.kdra.dev", "pool": "n1", "device": "gpu-1"},
     ("gpu.kdra.dev", "n1", "gpu-0"), False),
    ({"driver": "gpu.kdra.dev", "pool": "n1", "device": "gpu-0"},
     ("gpu.kdra.dev", "n1", "gpu-0"), True),
    ({"driver": "other.example.com"}, ("gpu.kdra.dev", "n1", "gpu-0"), False),
])
def test_rule_selector(selector: dict[str, str] | None, device: tuple[str, str, str],
                       expected: bool) -> None:
    parsed = parse_rule(rule(selector))
    assert parsed.matches(*device) is expected
    assert bool(rule_taints([parsed], *device)) is expected


def test_rule_time_added_defaults_to_creation() -> None:
    assert parse_rule(rule({})).taint.time_added == "2026-12-01T00:00:00Z"
    assert parse_rule(rule({}, timeAdded="2026-12-02T00:00:00Z")).taint.time_added == \
        "2026-12-02T00:00:00Z"


@pytest.mark.parametrize(("obj", "field"), [
    ({"spec": {}}, "spec.taint"),
    ({"spec": {"taint": {"effect": "NoExecute"}}}, "spec.taint.key"),
    ({"spec": {"taint": {"key": "k", "effect": "NoExecute", "value": "not a label!"}}},
     "spec.taint.value"),
    ({"spec": {"taint": {"key": "k", "effect": "NoExecute"},
               "deviceSelector": {"device": "Not_DNS"}}}, "spec.deviceSelector.device"),
    ({"spec": "nope"}, "spec"),
])
def test_rule_parse_errors_name_the_field(obj: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidObject) as caught:
        parse_rule(obj)
    assert field in str(caught.value)
