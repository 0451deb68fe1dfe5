"""Device taints and tolerations (upstream KEP-5055, ``resource.k8s.io/v1`` as of 1.36): which
devices a request may be given, and when a pod using a tainted device must be evicted.

A taint ``{key, value, effect, timeAdded}`` sits on a device (in its ResourceSlice, written by
the driver — kdra's agent for health — or added by a :class:`DeviceTaintRule`). A request's
tolerations ``{key, operator, value, effect, tolerationSeconds}`` say which taints it accepts;
the allocation result keeps the tolerations, so the decision can be taken again later (for
eviction) without the claim's spec.

Decision tables (tests/unit/dra/test_taints.py holds them row by row):

======================  =================  ======================  ==========================
effect                  not tolerated      tolerated, no seconds   tolerated, seconds = s
======================  =================  ======================  ==========================
``None`` / unknown      allocate, keep     allocate, keep          allocate, keep
``NoSchedule``          never allocate;    allocate, keep          allocate, keep
                        running pods keep
``NoExecute``           never allocate;    allocate, keep          allocate; evict at
                        evict now                                  ``timeAdded + s``
======================  =================  ======================  ==========================

Invariants:
- Matching is upstream's ``ToleratesTaint``: an empty toleration effect matches every effect;
  an empty key (operator ``Exists``) every key; ``Exists`` every value; ``Equal`` (the
  default, also for an empty operator) the exact value; any other operator nothing.
- Only ``NoSchedule`` and ``NoExecute`` act; ``None`` and effects kdra does not know are
  informational (upstream: "consumers must treat unknown effects like None").
- Eviction time per NoExecute taint follows the node taint manager: among the tolerations
  that match it, the smallest ``tolerationSeconds`` counts (negative = 0); tolerations
  without seconds tolerate forever only when no matching toleration has seconds. A taint
  without ``timeAdded`` counts from ``now``. The pod's time is the earliest over its taints.
- Pure: no clocks (``now`` is passed in), no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from kdra.dra.timestamps import parse_time

NONE = "None"
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
EFFECTS = (NONE, NO_SCHEDULE, NO_EXECUTE)
"""The effects upstream defines (a taint with another effect is informational)."""
ACTING_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})
EXISTS = "Exists"
EQUAL = "Equal"

UNHEALTHY_KEY = "gpu.kdra.dev/unhealthy"
"""The key of the taints kdra's agent puts on unhealthy devices (value: the reason)."""

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


class TaintLike(Protocol):
    """A device taint: :class:`~kdra.dra.models.DeviceTaint` or :class:`Taint`."""

    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...
    @property
    def time_added(self) -> str | None: ...


class TolerationLike(Protocol):
    """A request's toleration: :class:`~kdra.dra.models.DeviceToleration` (unset fields
    are None or empty)."""

    @property
    def key(self) -> str | None: ...
    @property
    def operator(self) -> str: ...
    @property
    def value(self) -> str | None: ...
    @property
    def effect(self) -> str | None: ...
    @property
    def toleration_seconds(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class Taint:
    """A taint kdra computes (health, rules) before it is written as API JSON."""

    key: str
    value: str
    effect: str
    time_added: str | None = None

    def to_api(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        if self.time_added:
            out["timeAdded"] = self.time_added
        return out

    def label(self) -> str:
        """``key=value:Effect`` (kubectl's notation for node taints)."""
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


def label_value(text: str, fallback: str = "Unknown") -> str:
    """``text`` made a valid label value (a taint value must be one): characters outside
    ``[A-Za-z0-9-_.]`` become ``-``, at most 63, alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63].strip("-_.")
    return cleaned if cleaned and _LABEL_VALUE.match(cleaned) else fallback


def tolerates(toleration: TolerationLike, taint: TaintLike) -> bool:
    """Whether ``toleration`` matches ``taint`` (upstream's ToleratesTaint)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", EQUAL):
        return (toleration.value or "") == (taint.value or "")
    return toleration.operator == EXISTS


def acts(taint: TaintLike) -> bool:
    """NoSchedule or NoExecute: the taint keeps untolerating requests off the device."""
    return taint.effect in ACTING_EFFECTS


def untolerated(taints: Iterable[TaintLike],
                tolerations: Sequence[TolerationLike]) -> list[TaintLike]:
    """The acting taints no toleration matches (empty: the device may be allocated)."""
    return [taint for taint in taints
            if acts(taint) and not any(tolerates(t, taint) for t in tolerations)]


def may_allocate(taints: Iterable[TaintLike], tolerations: Sequence[TolerationLike]) -> bool:
    """Whether a request with ``tolerations`` may be given a device with ``taints``."""
    return not untolerated(taints, tolerations)


@dataclass(frozen=True, slots=True)
class Eviction:
    """When a pod must go because of one taint: ``at`` (``now`` when not tolerated)."""

    at: dt.datetime
    taint: TaintLike
    tolerated: bool
    """False: no toleration matches (evict now); True: tolerated for a while."""


def eviction(taints: Iterable[TaintLike], tolerations: Sequence[TolerationLike],
             now: dt.datetime) -> Eviction | None:
    """The earliest eviction the NoExecute ``taints`` call for (None: the pod may stay)."""
    earliest: Eviction | None = None
    for taint in taints:
        if taint.effect != NO_EXECUTE:
            continue
        matching = [t for t in tolerations if tolerates(t, taint)]
        if not matching:
            candidate = Eviction(now, taint, tolerated=False)
        else:
            seconds = [max(0, t.toleration_seconds) for t in matching
                       if t.toleration_seconds is not None]
            if not seconds:
                continue  # tolerated forever
            start = parse_time(taint.time_added) or now
            candidate = Eviction(start + dt.timedelta(seconds=min(seconds)), taint,
                                 tolerated=True)
        if earliest is None or candidate.at < earliest.at:
            earliest = candidate
    return earliest


def describe(taints: Iterable[TaintLike]) -> str:
    """``k=v:Effect, ...`` of the acting taints (for explanations and events)."""
    return ", ".join(Taint(t.key, t.value, t.effect).label() for t in taints if acts(t))


__all__ = [
    "ACTING_EFFECTS",
    "EFFECTS",
    "EQUAL",
    "EXISTS",
    "NONE",
    "NO_EXECUTE",
    "NO_SCHEDULE",
    "UNHEALTHY_KEY",
    "Eviction",
    "Taint",
    "TaintLike",
    "TolerationLike",
    "acts",
    "describe",
    "eviction",
    "label_value",
    "may_allocate",
    "tolerates",
    "untolerated",
]
