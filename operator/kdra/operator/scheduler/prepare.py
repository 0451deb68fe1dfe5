"""Prepare before bind: the binder's wait until an attempt's devices let the pod bind —
upstream's binding conditions and kdra's node agent reporting ``Ready``, one mechanism
(:mod:`kdra.dra.binding_conditions`).

:class:`PrepareWait` follows the attempt's claims in the shared claim store, woken by the
binder on every event of a claim it waits for (:meth:`PrepareWait.claim_changed`), and says
why not when the devices will not let the pod bind. :func:`prepared` reads one claim's state.

Invariants:
- The wait succeeds only when every claim of the attempt still has exactly the allocation
  the attempt expects, still has the pod in ``reservedFor``, and every allocated device has
  its binding conditions ``True`` — a device without any: kdra's ``Ready=True`` — never on
  another writer's allocation (two binders may be active).
- Where kdra's agent does not prepare before bind (the native flavour: the kubelet calls
  the driver after binding), a device without binding conditions waits for nothing; one with
  them waits as below.
- A device waiting on kdra's ``Ready`` is given ``prepare_timeout`` from the attempt's
  start; one waiting on binding conditions of its own ``binding_timeout`` (upstream's 600 s)
  from its allocation (``allocationTimestamp``, else the attempt's start). A timeout is the
  node's fault, as is a device that reports failure (a binding failure condition ``True``,
  or ``Ready=False``), except ``DeviceBusy`` (another claim got the device first) and a
  claim deleted, released or allocated anew meanwhile, which are races.
- Between two looks at a claim it sleeps on the claim's event, at most 5 s (a missed wake-up
  costs seconds, never the pod).
- It writes nothing: undoing the attempt is the caller's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import NamedTuple

from kdra.dra.binding_conditions import pending, readiness
from kdra.dra.timestamps import now, parse_time
from kdra.kube.store import JSON, Key, Store
from kdra.operator.scheduler.pending import Attempt
from kdra.operator.scheduler.settings import BinderSettings

__all__ = ["Failure", "PrepareWait", "prepared"]


class Failure(NamedTuple):
    """Why an attempt's devices were not prepared; ``node_fault``: the node is to blame (so
    the pod avoids it for a while), not a race with another writer."""

    message: str
    node_fault: bool


class PrepareWait:
    """Waits for attempts' devices to let their pods bind (see the module doc)."""

    def __init__(self, claims: Store, settings: BinderSettings, *,
                 implicit: bool = True) -> None:
        self.claims = claims
        self.settings = settings
        self.implicit = implicit
        """A device without binding conditions waits for kdra's ``Ready`` (prepare before
        bind: the flavour's ``agent_prepares``); else it is ready once allocated."""
        self._claim_changed: dict[Key, asyncio.Event] = {}

    def claim_changed(self, key: Key) -> None:
        """Called after every event of claim ``key``: a wait on it looks again."""
        event = self._claim_changed.pop(key, None)
        if event is not None:
            event.set()

    async def wait(self, namespace: str, attempt: Attempt) -> Failure | None:
        """None once every allocated device may let the pod bind; else why not (failure or
        timeout)."""
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
                state = prepared(raw, self.implicit)
                if state is True:
                    break
                if isinstance(state, str):
                    return Failure(state, node_fault="DeviceBusy" not in state)
                remaining, failure = self._remaining(name, raw, attempt)
                if failure is not None:
                    return failure
                event = self._claim_changed.setdefault(key, asyncio.Event())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=min(remaining, 5.0))
        return None

    def _remaining(self, name: str, raw: JSON, attempt: Attempt) -> tuple[float, Failure | None]:
        """Seconds until the first deadline of what the claim still waits for, or the timeout
        that has passed."""
        settings = self.settings
        ready, binding = pending(raw, self.implicit)
        elapsed = time.monotonic() - attempt.started
        left = float("inf")
        if ready:
            left = settings.prepare_timeout - elapsed
            if left <= 0:
                return 0.0, Failure(
                    f"timed out after {settings.prepare_timeout:.0f}s waiting for the node "
                    f"agent to report the devices of claim {name!r} Ready", node_fault=True)
        if binding:
            allocated = parse_time(((raw.get("status") or {}).get("allocation") or {}).get(
                "allocationTimestamp"))
            since = (now() - allocated).total_seconds() if allocated is not None else elapsed
            left = min(left, settings.binding_timeout - max(0.0, since))
            if settings.binding_timeout - max(0.0, since) <= 0:
                return 0.0, Failure(
                    f"device binding timeout: the binding conditions of claim {name!r} were not "
                    f"all True within {settings.binding_timeout:.0f}s", node_fault=True)
        return max(left, 0.0), None


def prepared(raw: JSON, implicit: bool = True) -> bool | str | None:
    """True: every allocated device lets the pod bind (its binding conditions True, or, with
    ``implicit``, kdra's Ready); a string: a device reported failure; None: still waiting."""
    return readiness(raw, implicit)
