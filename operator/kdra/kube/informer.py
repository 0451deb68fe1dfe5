"""Informers: one watch per kind, every change handed to the services in order.

The operator's kinds (pods, ResourceClaims, ResourceSlices, Nodes, agent Leases, and the rare
ones, DeviceClasses and ResourceClaimTemplates) are watched here with
:meth:`kdra.kube.client.KubeClient.watch` rather than through kopf: kopf runs every event
through its per-object worker machinery (measured at ~35% of the operator's CPU in the scale
benchmark; with kopf tuned for event handlers, 1.36-1.52x the informers' CPU per pod: see
bench/RESULTS.md and ``--watch=kopf``), kdra's routes only update caches and enqueue keys, and
kdra's watch skips an object it cannot decode where kopf's would replay it forever. kopf keeps
the operator's lifecycle.

Invariants:
- Handlers see events in the order of the watch stream, one at a time, on the event loop;
  a handler must not block (they update caches and enqueue work).
- A (re)list is delivered as ``(None, obj)`` for every listed object — as kopf delivers its
  initial listing — followed by ``("DELETED", last seen)`` for every object seen before that
  the list no longer holds, so the services' caches converge to the list even when deletions
  happened while the watch was down.
- The first list is compared with what the services already hold (``known``: the objects
  the operator primed its caches with, from its own start-up LIST): an object primed but no
  longer listed is delivered as deleted. A slow or stalled start-up (seconds between the two
  LISTs) thus never leaves a deleted object cached for ever — a deleted pod the claim
  controller kept creating claims for (issue 36, the claim-creation storm).
- A handler that raises is logged and skipped; the informer keeps running (one bad object
  never stops the operator serving the others).
- An object the client could not decode (:class:`kdra.kube.codec.Skipped`) is neither
  delivered nor taken for deleted by a relist: what was known of it stays as it was.
- Fed by another machinery (kopf's watches, ``--watch=kopf``): :meth:`deliver` is called for
  each of its events and :meth:`reconcile` with a LIST of kdra's own, taken at any time
  beside that watch: an object known at a resourceVersion no newer than the LIST's and not
  listed was deleted, and is delivered as such; an object known at a newer version than the
  LIST (written after it) is kept, so a LIST racing the watch never deletes a live object.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from kdra.kube.client import KubeClient
from kdra.kube.resources import Resource
from kdra.kube.store import JSON, Key, is_not_newer, key_of

log = logging.getLogger(__name__)

Handler = Callable[[str | None, JSON], None]


class Informer:
    """Watches one kind (optionally one namespace / label selector) and calls ``handler``."""

    def __init__(self, client: KubeClient, resource: Resource, handler: Handler, *,
                 namespace: str | None = None, label_selector: str | None = None,
                 known: Iterable[JSON] = ()) -> None:
        self.client = client
        self.resource = resource
        self.handler = handler
        self.namespace = namespace
        self.label_selector = label_selector
        self.known: dict[Key, JSON] = {key_of(obj): obj for obj in known}
        """The objects the services hold, as last delivered (or primed: ``known``)."""
        self.synced = asyncio.Event()  # set after the first list was delivered
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"informer-{self.resource.plural}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        async for event, obj in self.client.watch(self.resource, self.namespace,
                                                  label_selector=self.label_selector):
            if event == "LIST":
                self.relist(obj["items"], obj.get("skipped", ()))
            else:
                self.deliver(event, obj)

    def relist(self, items: Iterable[JSON], skipped: Iterable[JSON] = ()) -> None:
        """A complete list: deliver every object, then the deletions the list implies.
        ``skipped`` objects (undecodable) are in the list but unknown: kept as they were."""
        before = self.known
        self.known = {}
        for obj in items:
            self.deliver(None, obj)
        for stub in skipped:
            key = key_of(stub)
            if key in before and key not in self.known:
                self.known[key] = before[key]
        for key, obj in before.items():
            if key not in self.known:
                self.deliver("DELETED", obj)
        self.synced.set()

    def reconcile(self, items: Iterable[JSON], version: str,
                  skipped: Iterable[JSON] = ()) -> int:
        """A LIST (at resourceVersion ``version``) taken beside another machinery's watch:
        deliver the deletions it proves — objects known at a version no newer than the
        LIST's that it does not hold (``skipped``: listed but undecodable, so not deleted).
        Listed objects are not delivered (the watch delivers them). Returns the deletions."""
        listed = {key_of(obj) for obj in items} | {key_of(stub) for stub in skipped}
        at = {"metadata": {"resourceVersion": version}}
        gone = [obj for key, obj in self.known.items()
                if key not in listed and is_not_newer(obj, at)]
        for obj in gone:
            self.deliver("DELETED", obj)
        self.synced.set()
        return len(gone)

    def deliver(self, event: str | None, obj: JSON) -> None:
        key = key_of(obj)
        if event == "DELETED":
            self.known.pop(key, None)
        else:
            self.known[key] = obj
        try:
            self.handler(event, obj)
        except Exception:  # one bad object must not stop the watch
            log.exception("%s %s/%s: handling a %s event failed", self.resource.kind,
                          key[0], key[1], event or "LIST")
