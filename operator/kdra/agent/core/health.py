"""Device health as the node agent publishes it: three states, a debounce, and the taint each
state puts on the device.

The agent's health sources (NVML, the fake inventory, the admin command) report an
:class:`Observation` per device at every poll. :class:`HealthDebouncer` turns that noisy
stream into the *applied* state, the one written into the slices:

- **worse** (healthy → degraded → lost) is applied once the device was seen at least that bad
  without interruption for ``debounce`` seconds — or at once when it went bad ``flaps`` times
  within ``settle`` seconds (a flapping device is degraded, reason ``Flapping``);
- **better** is applied only after the device was seen that good without interruption for
  ``settle`` seconds (the settled period), so a device that recovers and fails again keeps
  its taint, and the slice does not thrash.

Applied state → taint (key ``gpu.kdra.dev/unhealthy``, value = the reason as a label value,
``timeAdded`` = when the state was applied): healthy → none; degraded → ``NoSchedule`` (no new
claims; running pods stay); lost → ``NoExecute`` (pods are evicted unless they tolerate it).

Invariants:
- Pure: time comes in as ``now`` (monotonic seconds for the debounce, a wall-clock datetime
  only for ``timeAdded``); the same observations at the same times give the same states.
- Every applied change is returned exactly once as a :class:`Transition` (what the agent
  counts in ``kdra_device_health_transitions_total{to}`` and logs).
- A device with no observation in a poll is treated as observed healthy (it disappeared or
  its source reports nothing wrong); the debounce still applies to its recovery.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Generic, TypeVar

from kdra.dra.taints import NO_EXECUTE, NO_SCHEDULE, UNHEALTHY_KEY, Taint, label_value
from kdra.dra.timestamps import api_time


class Health(IntEnum):
    """Ordered from good to bad (comparisons say "worse")."""

    HEALTHY = 0
    DEGRADED = 1
    LOST = 2

    @property
    def word(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Health:
        """``healthy`` | ``degraded`` (or ``unhealthy``) | ``lost``; ValueError otherwise."""
        word = text.strip().lower()
        if word == "unhealthy":
            return cls.DEGRADED
        for member in cls:
            if member.word == word:
                return member
        raise ValueError(f"unknown health {text!r}: use healthy, unhealthy (degraded) or lost")


HEALTH_WORDS = tuple(h.word for h in Health)


K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Observation:
    """What a source sees now: a state and, when not healthy, a short reason
    (``XID-79``, ``ECC-uncorrectable``, ``MarkedUnhealthy``)."""

    health: Health
    reason: str = ""


HEALTHY = Observation(Health.HEALTHY)


@dataclass(frozen=True, slots=True)
class Transition(Generic[K]):
    device: K
    before: Health
    after: Health
    reason: str


@dataclass(slots=True)
class _Track:
    applied: Health = Health.HEALTHY
    applied_reason: str = ""
    applied_at: str | None = None  # the taint's timeAdded
    seen: Health = Health.HEALTHY
    seen_reason: str = ""
    seen_since: float = 0.0
    went_bad: list[float] = field(default_factory=list)  # times the device went from healthy


@dataclass(frozen=True, slots=True)
class Applied:
    """The state written into the slice for one device."""

    health: Health
    reason: str
    since: str | None

    def taint(self) -> Taint | None:
        if self.health is Health.HEALTHY:
            return None
        effect = NO_EXECUTE if self.health is Health.LOST else NO_SCHEDULE
        fallback = "DeviceLost" if self.health is Health.LOST else "Unhealthy"
        return Taint(UNHEALTHY_KEY, label_value(self.reason, fallback), effect, self.since)


APPLIED_HEALTHY = Applied(Health.HEALTHY, "", None)


class HealthDebouncer(Generic[K]):
    """Applied health per device key, from repeated full observations."""

    def __init__(self, *, debounce: float, settle: float, flaps: int = 3) -> None:
        if debounce < 0 or settle < 0 or flaps < 2:
            raise ValueError("debounce and settle must be ≥ 0, flaps ≥ 2")
        self.debounce = debounce
        self.settle = settle
        self.flaps = flaps
        self._tracks: dict[K, _Track] = {}

    def applied(self, device: K) -> Applied:
        track = self._tracks.get(device)
        if track is None:
            return APPLIED_HEALTHY
        return Applied(track.applied, track.applied_reason, track.applied_at)

    def update(self, observations: Mapping[K, Observation], *, now: float,
               wall: dt.datetime) -> list[Transition[K]]:
        """Feed one poll's observations (devices missing from it count as healthy); returns
        the transitions applied now."""
        transitions: list[Transition[K]] = []
        for device in set(self._tracks) | set(observations):
            seen = observations.get(device, HEALTHY)
            track = self._tracks.get(device)
            if track is None:
                if seen.health is Health.HEALTHY:
                    continue  # nothing to remember about a device that was always fine
                track = self._tracks[device] = _Track(seen_since=now)
            change = self._step(track, seen, now, wall)
            if change is not None:
                transitions.append(Transition(device, change[0], track.applied,
                                              track.applied_reason))
            if track.applied is Health.HEALTHY and track.seen is Health.HEALTHY and \
                    not track.went_bad:
                del self._tracks[device]
        return transitions

    def _step(self, track: _Track, seen: Observation, now: float,
              wall: dt.datetime) -> tuple[Health, Health] | None:
        if seen.health != track.seen:
            if track.seen is Health.HEALTHY:
                track.went_bad.append(now)
            track.seen, track.seen_since = seen.health, now
        track.seen_reason = seen.reason
        track.went_bad = [t for t in track.went_bad if now - t <= self.settle]
        held = now - track.seen_since
        wait = self.debounce if track.seen > track.applied else self.settle
        target, reason = track.applied, track.applied_reason
        if track.seen != track.applied and held >= wait:
            target, reason = track.seen, track.seen_reason
        elif track.applied is Health.HEALTHY and len(track.went_bad) >= self.flaps:
            target, reason = Health.DEGRADED, "Flapping"
        if target == track.applied:  # same state: the taint (and its time) stay
            return None
        before = track.applied
        track.applied = target
        track.applied_reason = reason if target is not Health.HEALTHY else ""
        track.applied_at = api_time(wall) if target is not Health.HEALTHY else None
        return before, target


__all__ = [
    "APPLIED_HEALTHY",
    "HEALTHY",
    "HEALTH_WORDS",
    "Applied",
    "Health",
    "HealthDebouncer",
    "Observation",
    "Transition",
]
