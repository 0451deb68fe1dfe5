"""The agent's health debounce: worse after ``debounce``, better after ``settle``, flapping
devices degraded, and the taint each applied state means."""

from __future__ import annotations

import datetime as dt

import pytest

from kdra.agent.core.health import (
    APPLIED_HEALTHY,
    Applied,
    Health,
    HealthDebouncer,
    Observation,
)
from kdra.dra.taints import NO_EXECUTE, NO_SCHEDULE, UNHEALTHY_KEY

WALL = dt.datetime(2026, 12, 2, 8, 0, 0, tzinfo=dt.UTC)
BAD = Observation(Health.DEGRADED, "XID-48")
LOST = Observation(Health.LOST, "XID-79")
OK = Observation(Health.HEALTHY)


def run(debouncer: HealthDebouncer[str], steps: list[tuple[float, Observation | None]],
        device: str = "gpu-0") -> list[tuple[float, str]]:
    """Feed (time, observation) steps (None: the device is not reported); returns
    (time, applied state) after each step that changed it."""
    changes = []
    for now, seen in steps:
        observations = {} if seen is None else {device: seen}
        for transition in debouncer.update(observations, now=now,
                                           wall=WALL + dt.timedelta(seconds=now)):
            assert transition.device == device
            changes.append((now, transition.after.word))
    return changes


def test_worse_applies_after_debounce() -> None:
    d: HealthDebouncer[str] = HealthDebouncer(debounce=5, settle=30)
    assert run(d, [(0, BAD), (3, BAD), (5, BAD), (6, BAD)]) == [(5, "degraded")]
    applied = d.applied("gpu-0")
    assert applied.health is Health.DEGRADED and applied.reason == "XID-48"
    assert applied.since == "2026-12-02T08:00:05Z"


def test_zero_debounce_applies_at_once() -> None:
    d: HealthDebouncer[str] = HealthDebouncer(debounce=0, settle=0)
    assert run(d, [(0, LOST), (1, OK)]) == [(0, "lost"), (1, "healthy")]


def test_short_blip_is_ignored() -> None:
    d: HealthDebouncer[str] = HealthDebouncer(debounce=5, settle=30)
    assert run(d, [(0, BAD), (2, OK), (4, OK), (40, OK)]) == []
    assert d.applied("gpu-0") == APPLIED_HEALTHY


def test_recovery_waits_for_the_settled_period() -> None:
    d: HealthDebouncer[str] = HealthDebouncer(debounce=0, settle=30)
    steps: list[tuple[float, Observation | None]] = [
        (0, BAD), (10, OK), (25, OK), (39, OK), (40, OK)]
    assert run(d, steps) == [(0, "degraded"), (40, "healthy")]


def test_relapse_during_settle_keeps_the_taint_and_its_time() -> None:
    d: HealthDebouncer[str] = HealthDebouncer(debounce=0, settle=30)
    assert run(d, [(0, BAD), (10, OK), (20, BAD), (30, OK), (55, OK)]) == [(0, "degraded")]
    assert d.applied("gpu-0").since == "2026-12-02T08:00:00Z"
    assert run(d, [(60, OK)]) == [(60, "healthy")]


def test_flapping_device_is_degraded() -> None:
    d: HealthDebouncer[str] = HealthDebouncer(debounce=5, settle=60, flaps=3)
    steps: list[tuple[float, Observation | None]] = [
        (0, BAD), (1, OK), (2, BAD), (3, OK), (4, BAD), (5, OK)]
    assert run(d, steps) == [(4, "degraded")]
    assert d.applied("gpu-0").reason == "Flapping"
    assert d.applied("gpu-0").taint() is not None


def test_escalation_and_partial_recovery() -> None:
    d: HealthDebouncer[str] = HealthDebouncer(debounce=2, settle=10)
    steps: list[tuple[float, Observation | None]] = [
        (0, BAD), (2, BAD), (3, LOST), (5, LOST), (6, BAD), (15, BAD), (16, BAD)]
    assert run(d, steps) == [(2, "degraded"), (5, "lost"), (16, "degraded")]


def test_missing_device_counts_as_healthy() -> None:
    d: HealthDebouncer[str] = HealthDebouncer(debounce=0, settle=5)
    assert run(d, [(0, BAD), (1, None), (6, None)]) == [(0, "degraded"), (6, "healthy")]


def test_many_devices_are_independent() -> None:
    d: HealthDebouncer[str] = HealthDebouncer(debounce=0, settle=5)
    changes = d.update({"a": BAD, "b": OK}, now=0, wall=WALL)
    assert [(t.device, t.before, t.after) for t in changes] == [
        ("a", Health.HEALTHY, Health.DEGRADED)]
    assert d.applied("b") == APPLIED_HEALTHY


@pytest.mark.parametrize(("applied", "effect", "value"), [
    (Applied(Health.DEGRADED, "XID-48", "t"), NO_SCHEDULE, "XID-48"),
    (Applied(Health.LOST, "GPU is lost!", "t"), NO_EXECUTE, "GPU-is-lost"),
    (Applied(Health.LOST, "", "t"), NO_EXECUTE, "DeviceLost"),
    (Applied(Health.DEGRADED, "", "t"), NO_SCHEDULE, "Unhealthy"),
])
def test_taint_of_applied_state(applied: Applied, effect: str, value: str) -> None:
    taint = applied.taint()
    assert taint is not None
    assert (taint.key, taint.value, taint.effect, taint.time_added) == (
        UNHEALTHY_KEY, value, effect, "t")


def test_healthy_has_no_taint() -> None:
    assert APPLIED_HEALTHY.taint() is None


@pytest.mark.parametrize(("word", "health"), [
    ("healthy", Health.HEALTHY), ("unhealthy", Health.DEGRADED), ("Degraded", Health.DEGRADED),
    ("lost", Health.LOST)])
def test_parse_health(word: str, health: Health) -> None:
    assert Health.parse(word) is health


def test_parse_health_rejects_unknown_words() -> None:
    with pytest.raises(ValueError, match="use healthy, unhealthy"):
        Health.parse("sick")
