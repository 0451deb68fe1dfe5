"""The event recorder: repeats are counted into one Event; what it remembers is bounded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kdra.kube import events as events_module
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def create(self, res: Resource, body: dict[str, Any], namespace: str
                     ) -> dict[str, Any]:
        self.calls.append(("create", body["count"]))
        return body

    async def patch(self, res: Resource, name: str, body: dict[str, Any], namespace: str
                    ) -> dict[str, Any]:
        self.calls.append(("patch", body["count"]))
        return body


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(events_module.time, "monotonic", fake)
    return fake


async def scheduled(recorder: EventRecorder, pods: int, clock: Clock, step: float) -> None:
    """One Scheduled event for each of ``pods`` different pods, ``step`` seconds apart."""
    for n in range(pods):
        other = {**POD, "metadata": {**POD["metadata"], "uid": f"u{n}"}}
        await recorder.normal(other, "Scheduled", "assigned")
        clock.now += step


def test_repeats_within_the_window_count_into_one_event(clock: Clock) -> None:
    client = Recording()
    recorder = EventRecorder(client, window=600)  # type: ignore[arg-type]

    async def three() -> None:
        for _ in range(3):
            await recorder.warn(POD, "FailedScheduling", "no devices")
            clock.now += 10

    asyncio.run(three())
    assert client.calls == [("create", 1), ("patch", 2), ("patch", 3)]


def test_entries_past_the_window_are_forgotten(clock: Clock) -> None:
    client = Recording()
    recorder = EventRecorder(client, window=600)  # type: ignore[arg-type]

    asyncio.run(scheduled(recorder, 50, clock, step=60))  # ten of these make a window
    assert len(recorder._seen) == 10  # the last window's worth, not all 50


def test_at_most_max_tracked_are_kept(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_module, "MAX_TRACKED", 5)
    client = Recording()
    recorder = EventRecorder(client, window=600)  # type: ignore[arg-type]

    asyncio.run(scheduled(recorder, 20, clock, step=0))
    assert len(recorder._seen) == 5
    assert [c for c, _ in client.calls] == ["create"] * 20
