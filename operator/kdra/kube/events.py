"""Kubernetes Events for what a user must see (``kubectl describe`` / ``kubectl get events``).

Invariants:
- Repeats of the same (object, type, reason, message) within ``window`` seconds update one
  Event's ``count`` instead of creating new ones, like kubelet's correlator: a pod retried
  every second does not flood etcd.
- Memory is bounded by time, not by how many objects ever had events: an entry older than
  ``window`` can no longer be counted into, so it is dropped (oldest first, as entries are
  kept in the order they were first seen); at most ``MAX_TRACKED`` are kept in any case.
- An Event holds no control sequences: its reason and message (which name what users and
  agents wrote: claims, selectors, devices) pass through
  :func:`kdra.kube.core.printable.printable`, the message cut to :data:`MAX_MESSAGE`
  characters (``kubectl describe`` and ``kubectl get events`` print them to terminals).
- Emitting never raises: an event is best effort and must not fail the reconcile that sent it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from typing import Any

from kdra.dra.timestamps import api_time
from kdra.kube.client import KubeClient
from kdra.kube.core.printable import printable
from kdra.kube.errors import ApiError
from kdra.kube.resources import Resource

log = logging.getLogger(__name__)
CORE_EVENTS = Resource("", "v1", "events", True, "Event")
MAX_TRACKED = 10_000  # Events whose count this recorder can still raise
MAX_MESSAGE = 1024
MAX_REASON = 128


class EventRecorder:
    def __init__(self, client: KubeClient, component: str = "kdra-operator",
                 window: float = 600.0) -> None:
        self._client = client
        self._component = component
        self._window = window
        self._seen: OrderedDict[str, tuple[float, int]] = OrderedDict()  # by first seen

    async def warn(self, obj: dict[str, Any], reason: str, message: str) -> None:
        await self.emit(obj, "Warning", reason, message)

    async def normal(self, obj: dict[str, Any], reason: str, message: str) -> None:
        await self.emit(obj, "Normal", reason, message)

    async def emit(self, obj: dict[str, Any], type_: str, reason: str, message: str) -> None:
        reason, message = printable(reason, MAX_REASON), printable(message, MAX_MESSAGE)
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        digest = hashlib.sha1(
            f"{meta.get('uid')}/{type_}/{reason}/{message}".encode(), usedforsecurity=False
        ).hexdigest()[:12]
        name = f"{meta.get('name', 'object')[:200]}.{digest}"
        now = time.monotonic()
        first, count = self._seen.get(name, (0.0, 0))
        try:
            if count and now - first < self._window:
                self._seen[name] = (first, count + 1)
                await self._client.patch(CORE_EVENTS, name, {
                    "count": count + 1, "lastTimestamp": api_time()}, namespace)
                return
            self._seen.pop(name, None)
            self._seen[name] = (now, 1)
            self._expire(now)
            await self._client.create(CORE_EVENTS, {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": name, "namespace": namespace},
                "involvedObject": {
                    "apiVersion": obj.get("apiVersion", "v1"), "kind": obj.get("kind", ""),
                    "name": meta.get("name"), "namespace": meta.get("namespace"),
                    "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion"),
                },
                "type": type_, "reason": reason, "message": message,
                "source": {"component": self._component},
                "reportingComponent": self._component, "reportingInstance": self._component,
                "firstTimestamp": api_time(), "lastTimestamp": api_time(), "count": 1,
            }, namespace)
        except ApiError as exc:
            if exc.status in (404, 409):  # gone, or recreated concurrently: start over
                self._seen.pop(name, None)
            log.debug("event %s on %s not recorded: %s", reason, meta.get("name"), exc)
        except OSError as exc:
            log.debug("event %s not recorded: %s", reason, exc)

    def _expire(self, now: float) -> None:
        """Forget Events past the window (they get a new Event next time), oldest first."""
        while self._seen:
            name, (first, _) = next(iter(self._seen.items()))
            if now - first < self._window and len(self._seen) <= MAX_TRACKED:
                return
            del self._seen[name]
