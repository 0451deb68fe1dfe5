"""Claim names decided but not yet written on the pod: in kdra's flavour the record (the
``claim-statuses`` annotation) rides on the pod's Binding (issue 42: one pod write fewer per
pod, and no admission-policy pass over the pod for it).

The claim controller finds or creates a pod's claims and, for a pod kdra's scheduler will
bind, puts their names here instead of patching the pod (:meth:`ClaimRecords.put`); the
scheduler resolves the pod's claims from here where the pod has no record yet, and the
Binding carries the record with the pod's resourceVersion as its precondition (the pod it
decided on is the pod it binds). Where no Binding comes soon, the claim controller writes the
record as before: once the scheduler reports the pod unschedulable (:meth:`request`), or
``grace`` seconds after the names were first put here — so a pending pod still shows its
claims' names, and nothing waits on the scheduler to record them.

Invariants:
- Pure: no I/O; the clock is injected (tests) and ``wake`` is the claim controller's queue.
- An entry is the claim controller's decision for one pod UID: a different UID under the same
  key (the pod replaced) reads as no entry, and ``put`` for it starts afresh.
- ``since`` is the first ``put`` for the pod (a later change of names does not postpone the
  written record); :meth:`due` is true once the grace is over or the record was requested,
  and for a pod with no entry.
- Bounded by the pending pods: the claim controller drops an entry once the pod's record is
  written, bound, done or deleted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["RECORD_GRACE", "ClaimRecords"]

Key = tuple[str, str]
"""A pod's (namespace, name)."""

RECORD_GRACE = 10.0
"""Seconds a pod kdra binds may go without a written record of its claims' names before the
claim controller writes it apart from the Binding (a busy queue; a scheduler that is not
running). A pod reported unschedulable gets its record at once."""


@dataclass
class _Entry:
    uid: str
    names: dict[str, str]
    since: float
    requested: bool = False


class ClaimRecords:
    """Pod key → the claim names decided for it and not yet on the pod (see the module doc)."""

    def __init__(self, grace: float = RECORD_GRACE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace
        self.clock = clock
        self.wake: Callable[[Key], None] | None = None
        """Queues the pod for the claim controller (set by the operator's composition)."""
        self._entries: dict[Key, _Entry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, key: Key, uid: str, names: Mapping[str, str]) -> bool:
        """Hold ``names`` for the pod; whether they are new (the scheduler should look)."""
        entry = self._entries.get(key)
        if entry is None or entry.uid != uid:
            self._entries[key] = _Entry(uid, dict(names), self.clock())
            return True
        if entry.names == names:
            return False
        entry.names = dict(names)
        return True

    def names(self, key: Key, uid: str) -> dict[str, str] | None:
        """The names held for this pod (this UID), or None."""
        entry = self._entries.get(key)
        return entry.names if entry is not None and entry.uid == uid else None

    def due(self, key: Key, uid: str) -> bool:
        """Whether the record must be written apart from a Binding now."""
        entry = self._entries.get(key)
        return entry is None or entry.uid != uid or entry.requested or \
            self.clock() - entry.since >= self.grace

    def remaining(self, key: Key) -> float:
        """Seconds until the held entry is due (0 when there is none)."""
        entry = self._entries.get(key)
        return 0.0 if entry is None else max(0.0, entry.since + self.grace - self.clock())

    def request(self, key: Key) -> None:
        """The pod will not be bound soon (reported unschedulable): write its record now."""
        entry = self._entries.get(key)
        if entry is None or entry.requested:
            return
        entry.requested = True
        if self.wake is not None:
            self.wake(key)

    def drop(self, key: Key) -> None:
        self._entries.pop(key, None)
