"""Warning events for pods whose claims kdra would not see (issue 41): ``spec.resourceClaims``
in kdra's flavour, an annotation key mentioning kdra that is none of kdra's
(:mod:`kdra.operator.core.pod_notices` decides; the mutating webhook says the same at
admission, but the pods of a Deployment are created by its controller, which drops warnings).

Invariants:
- Each pod is noticed once per operator process, when it is first seen (listed or ADDED), and
  only while it is not finished; the event recorder names an event after the pod's uid and its
  message, so a restarted operator re-creating one meets a conflict and adds nothing.
- The route stays cheap and never blocks: a pod whose annotation keys do not mention kdra and
  that has no ``spec.resourceClaims`` costs a dictionary scan; events are written by tasks of
  their own, best effort (:class:`kdra.kube.events.EventRecorder` never raises).
- Memory is bounded: the uids noticed are a :class:`kdra.kube.store.RecentSet` of at most
  :data:`REMEMBERED`.
"""

from __future__ import annotations

import asyncio
import logging

from kdra.kube.events import EventRecorder
from kdra.kube.store import JSON, RecentSet
from kdra.operator.core.pod_notices import Notice, pod_notices

__all__ = ["REMEMBERED", "PodNotices"]

log = logging.getLogger(__name__)
REMEMBERED = 4096
"""Pods whose notices this process remembers having written (older ones: the event's name
makes a repeat a no-op)."""


class PodNotices:
    """See the module doc; :meth:`on_pod` is the pod route's."""

    def __init__(self, events: EventRecorder) -> None:
        self.events = events
        self.noticed = RecentSet()
        self._tasks: set[asyncio.Task[None]] = set()

    def on_pod(self, event_type: str | None, pod: JSON) -> None:
        if event_type not in (None, "ADDED") or not _worth_a_look(pod):
            return
        uid = str(pod["metadata"].get("uid") or "")
        if not uid or uid in self.noticed:
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        notices = pod_notices(pod)
        if not notices:
            return
        self.noticed.add(uid, REMEMBERED)
        task = asyncio.get_running_loop().create_task(self._emit(pod, notices))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _emit(self, pod: JSON, notices: list[Notice]) -> None:
        target = {**pod, "apiVersion": "v1", "kind": "Pod"}  # a listed pod carries neither
        for notice in notices:
            log.info("pod %s/%s: %s", pod["metadata"].get("namespace"),
                     pod["metadata"].get("name"), notice.message)
            await self.events.warn(target, notice.reason, notice.message)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _worth_a_look(pod: JSON) -> bool:
    """The cheap test before :func:`pod_notices`: ``spec.resourceClaims``, or a key
    mentioning kdra."""
    if (pod.get("spec") or {}).get("resourceClaims"):
        return True
    return any("kdra" in key for key in pod["metadata"].get("annotations") or ())
