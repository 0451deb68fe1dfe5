"""One typed cache per watched kind: each object parsed once per resourceVersion into its
v1 model (:mod:`kdra.dra.models`), and the services subscribed to its changes.

A :class:`TypedCache` is a :class:`~kdra.kube.store.Store` (the raw objects as read, with
its indexes and tombstones) plus two things every service used to do on its own:

- :meth:`TypedCache.entry` — the object's :class:`Entry`: the raw JSON *and* the parsed
  model (or why it does not parse). Raw stays at hand for writes that must carry the object
  as read (a status PUT), the model for everything that reads it. Both API flavours meet
  here: the native flavour's edge hands resource.k8s.io/v1 objects, the kdra flavour's
  kdra.dev ones, and both parse into the same models.
- :meth:`TypedCache.apply` — a watch event applied once, then handed to every subscriber
  with the version the cache held before (:data:`Subscriber`), so no service depends on
  being called before another to find the cache up to date.

Invariants:
- The cache is applied before any subscriber hears of an event; each subscriber is called
  once per event, in subscription order, and one subscriber's order relative to another
  changes nothing it sees (the cache is the only shared state, and it is already updated).
- A subscriber's own write response (:meth:`~TypedCache.record`) is cached at once and
  handed to every other subscriber, never back to the writer; a write nobody else needs at
  once may be cached silently (:meth:`~kdra.kube.store.Store.upsert`: the binder's own
  allocations: their watch events then queue nothing in the claim controller).
- An object is parsed at most once per resourceVersion (per UID): the first
  :meth:`~TypedCache.entry` of a version parses it, later calls return the same
  :class:`Entry`. An object without a resourceVersion is parsed each time (nothing to key
  the result by).
- An object that does not parse is parsed once per version too: its :class:`Entry` carries
  the error, which is logged once (at warning, naming the object and the field) when that
  version is first parsed — never raised out of :meth:`~TypedCache.apply`. Services leave it
  out, as they did before the cache.
- Entries and their raw objects are shared read-only: a service never mutates either.
- A subscriber that raises does not stop the others or the watch: it is logged and the next
  subscriber is called (a bug in one service must not starve the rest of an event).
- A deleted object's parse is forgotten with it (the memo holds only objects the store or a
  caller has seen since, one version per UID).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from kdra.dra.errors import InvalidObject
from kdra.kube.store import JSON, IndexFn, Store, key_of

log = logging.getLogger(__name__)

T = TypeVar("T")

Subscriber = Callable[[str | None, JSON, JSON | None], None]
"""A service's entry point for one kind: (event type — None for a listed object —, the
object as the event carries it, the version the cache held before the event or None)."""


@dataclass(frozen=True, slots=True)
class Entry(Generic[T]):
    """One version of one object: ``raw`` as read, ``model`` parsed (None when it does not
    parse; ``error`` says why)."""

    raw: JSON
    model: T | None
    error: InvalidObject | None = None

    def parsed(self) -> T:
        """The model; raises the cached :class:`InvalidObject` of a version that does not
        parse (the same error every time, logged once)."""
        if self.model is None:
            assert self.error is not None
            raise self.error
        return self.model


class TypedCache(Store, Generic[T]):
    """A store of one kind whose objects parse into ``T`` (``parse``), with subscribers."""

    def __init__(self, kind: str, parse: Callable[[JSON], T],
                 indexes: dict[str, IndexFn] | None = None) -> None:
        super().__init__(kind, indexes)
        self._parse = parse
        self._entries: dict[str, tuple[str, Entry[T]]] = {}  # uid → (version, entry)
        self._subscribers: list[Subscriber] = []
        self.parses = 0
        """How many parses this cache ran (a count for tests and the hot-path guard)."""

    # ------------------------------------------------------------------ subscribers

    def subscribe(self, subscriber: Subscriber) -> None:
        """Hand ``subscriber`` every event :meth:`apply` applies from now on."""
        self._subscribers.append(subscriber)

    def apply(self, event_type: str | None, obj: JSON) -> JSON | None:
        """Apply one watch event to the cache, then hand it to each subscriber; returns the
        previously cached version (or None), as :meth:`Store.apply` does."""
        old = super().apply(event_type, obj)
        if event_type == "DELETED":
            self.forget(obj)
        self._notify(event_type, obj, old, None)
        return old

    def record(self, event_type: str, obj: JSON, *, by: Subscriber) -> JSON | None:
        """A subscriber's own write response (``MODIFIED``: the object as written;
        ``DELETED``: it is gone): cached at once (ignored if a newer version or the deletion
        was seen meanwhile, as :meth:`Store.upsert` does), then handed to every *other*
        subscriber — the watch event of the same version follows and changes nothing."""
        if event_type == "DELETED":
            old = self.delete(key_of(obj))
            self.forget(obj)
        else:
            old = self.upsert(obj)
        self._notify(event_type, obj, old, by)
        return old

    def _notify(self, event_type: str | None, obj: JSON, old: JSON | None,
                skip: Subscriber | None) -> None:
        for subscriber in self._subscribers:
            if skip is not None and subscriber == skip:
                continue
            try:
                subscriber(event_type, obj, old)
            except Exception:
                log.exception("%s %s/%s: a subscriber failed on a %s event", self.kind,
                              *key_of(obj), event_type or "listing")

    # ------------------------------------------------------------------ typed reads

    def entry(self, obj: JSON) -> Entry[T]:
        """``obj`` as an :class:`Entry`, parsed once per resourceVersion (``obj`` need not
        be the cached version: a write response or an older event parses as well)."""
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        version = str(meta.get("resourceVersion") or "")
        known = self._entries.get(uid)
        if known is not None and version and known[0] == version:
            return known[1]
        self.parses += 1
        try:
            made: Entry[T] = Entry(obj, self._parse(obj))
        except InvalidObject as exc:
            namespace, name = key_of(obj)
            log.warning("%s %s: left out (%s)", self.kind,
                        f"{namespace}/{name}" if namespace else name, exc)
            made = Entry(obj, None, exc)
        if uid and version:
            self._entries[uid] = (version, made)
        return made

    def model(self, obj: JSON) -> T:
        """``obj``'s model (:meth:`entry`); raises the cached :class:`InvalidObject`."""
        return self.entry(obj).parsed()

    def forget(self, obj: JSON) -> None:
        """Drop ``obj``'s parse (it is gone)."""
        self._entries.pop(str((obj.get("metadata") or {}).get("uid") or ""), None)

    def delete(self, key: tuple[str, str]) -> JSON | None:
        old = super().delete(key)
        if old is not None:
            self.forget(old)
        return old
