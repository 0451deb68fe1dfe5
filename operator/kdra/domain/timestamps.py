"""Kubernetes API timestamps: ``Time`` (``2026-01-02T03:04:05Z``) and ``MicroTime``
(``2026-01-02T03:04:05.000000Z``, Leases), written and read in one place.

Invariants: written timestamps are UTC; :func:`parse_time` never raises — anything that is not
a timestamp reads as ``None``, a timestamp without a zone reads as UTC.
"""

from __future__ import annotations

import datetime as dt
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
