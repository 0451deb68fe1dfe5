"""Kubernetes API timestamps: ``Time`` (``2026-01-02T03:04:05Z``) and ``MicroTime``
(``2026-01-02T03:04:05.000000Z``, Leases), written and read in one place.

Invariants: written timestamps are UTC; :func:`parse_time` never raises — anything that is not
a timestamp reads as ``None``, a timestamp without a zone reads as UTC.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def api_time(moment: dt.datetime | None = None) -> str:
    """A ``Time`` (second precision), by default now."""
    return (moment or now()).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(moment: dt.datetime | None = None) -> str:
    """A Lease ``MicroTime``, by default now."""
    return (moment or now()).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: Any) -> dt.datetime | None:
    """A ``Time`` or ``MicroTime`` as an aware datetime; ``None`` for anything else."""
    if not isinstance(text, str) or not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


def transition_time(conditions: Any, kind: str, status: str, moment: str) -> str:
    """``lastTransitionTime`` for a condition ``kind`` with ``status``, given the object's
    current ``conditions``: the current one's while its status stays the same, else
    ``moment``."""
    for condition in conditions or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            since = condition.get("lastTransitionTime")
            return str(since) if condition.get("status") == status and since else moment
    return moment


def status_update(current: Mapping[str, Any], status: dict[str, Any],
                  moment: str | None = None) -> dict[str, Any] | None:
    """``status`` to write over ``current`` (an object's status), or None when it says
    nothing ``current`` does not (conditions' ``lastTransitionTime`` aside). Each condition
    of ``status`` gets ``lastTransitionTime``: the current one's while its ``status`` stays
    the same, else ``moment`` (default now)."""
    old = {c.get("type"): c for c in current.get("conditions") or () if isinstance(c, Mapping)}
    changed = any(
        any(any(old.get(c["type"], {}).get(k) != v for k, v in c.items()) for c in value)
        if key == "conditions" else current.get(key) != value
        for key, value in status.items())
    if not changed:
        return None
    moment = moment or api_time()
    for condition in status.get("conditions") or ():
        condition["lastTransitionTime"] = transition_time(
            current.get("conditions"), condition["type"], condition["status"], moment)
    return status

