"""Prepare before bind: the binder's wait for the node agent to report an attempt's devices
Ready.

:class:`PrepareWait` follows the attempt's claims in the shared claim store, woken by the
binder on every event of a claim it waits for (:meth:`PrepareWait.claim_changed`), and says
why not when the devices will not be Ready. :func:`prepared` reads one claim's state.

Invariants:
- The wait succeeds only when every claim of the attempt still has exactly the allocation
  the attempt expects, still has the pod in ``reservedFor``, and every allocated device
  reports ``Ready=True`` — never on another writer's allocation (two binders may be active).
- It never waits past ``prepare_timeout`` from the attempt's start: a timeout is the node's
  fault, as is a device that reports failure, except ``DeviceBusy`` (another claim got the
  device first) and a claim deleted, released or allocated anew meanwhile, which are races.
- Between two looks at a claim it sleeps on the claim's event, at most 5 s (a missed wake-up
  costs seconds, never the pod).
- It writes nothing: undoing the attempt is the caller's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import NamedTuple

from kdra.services.binder.pending import Attempt
from kdra.services.binder.settings import BinderSettings
from kdra.services.store import JSON, Key, Store


class Failure(NamedTuple):
    """Why an attempt's devices were not prepared; ``node_fault``: the node is to blame (so
    the pod avoids it for a while), not a race with another writer."""

    message: str
    node_fault: bool


class PrepareWait:
    """Waits for attempts' devices to be Ready (see the module doc)."""

    def __init__(self, claims: Store, settings: BinderSettings) -> None:
        self.claims = claims
        self.settings = settings
        self._claim_changed: dict[Key, asyncio.Event] = {}

    def claim_changed(self, key: Key) -> None:
        """Called after every event of claim ``key``: a wait on it looks again."""
        event = self._claim_changed.pop(key, None)
        if event is not None:
            event.set()

    async def wait(self, namespace: str, attempt: Attempt) -> Failure | None:
        """None once every allocated device is Ready; else why not (failure or timeout)."""
        deadline = attempt.started + self.settings.prepare_timeout
        uid = attempt.pod["metadata"]["uid"]
        for _, name in attempt.claims:
            key = (namespace, name)
            while True:
                raw = self.claims.get(key)
                if raw is None:
                    return Failure(f"claim {name!r} was deleted", node_fault=False)
                status = raw.get("status") or {}
                if status.get("allocation") != attempt.expected.get(name) or not any(
                        r.get("uid") == uid for r in status.get("reservedFor") or []):
                    return Failure(f"claim {name!r} was released or allocated anew by another "
                                   "writer meanwhile", node_fault=False)
                state = prepared(raw)
                if state is True:
                    break
                if isinstance(state, str):
                    return Failure(state, node_fault="DeviceBusy" not in state)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return Failure(f"timed out after {self.settings.prepare_timeout:.0f}s "
                                   "waiting for the node agent to report the devices of claim "
                                   f"{name!r} Ready", node_fault=True)
                event = self._claim_changed.setdefault(key, asyncio.Event())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=min(remaining, 5.0))
        return None


def prepared(raw: JSON) -> bool | str | None:
    """True: every allocated device has Ready=True; a string: a device reported failure;
    None: still waiting."""
    status = raw.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        return "the claim was deallocated"
    devices = {(d.get("driver"), d.get("pool"), d.get("device")): d
               for d in status.get("devices") or []}
    for result in (allocation.get("devices") or {}).get("results") or []:
        entry = devices.get((result["driver"], result["pool"], result["device"]))
        if entry is None:
            return None
        ready = next((c for c in entry.get("conditions") or [] if c.get("type") == "Ready"),
                     None)
        if ready is None:
            return None
        if ready.get("status") == "False":
            return (f"device {result['pool']}/{result['device']}: {ready.get('reason', '')} "
                    f"{ready.get('message', '')}").strip()
        if ready.get("status") != "True":
            return None
    return True
