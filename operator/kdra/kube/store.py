"""In-memory caches of API objects, fed by watch events (an informer's store).

Invariants:
- A store holds the newest version it has seen of each object: an event carrying an older
  ``resourceVersion`` than the cached one is ignored (watch streams may be re-listed).
- Secondary indexes (``index(name, key)``) always agree with the stored objects: they are
  recomputed from the object on every add, update and delete. An index function that raises
  on an object (a bug, or a shape nobody foresaw) indexes it under nothing, logged: no
  stored object can make ``upsert``, ``delete`` or ``prime`` raise.
- ``prime(items)`` fills the store from a LIST before workers start, so a controller never
  mistakes "not seen yet" for "does not exist" right after a restart.
- A deleted object never comes back: controllers also upsert the responses of their own
  writes, which may arrive after the object's DELETED event (removing the last finalizer
  returns the object, then the API server deletes it). An upsert of a UID the store saw
  deleted (the last ``TOMBSTONES`` deletions are remembered) is ignored.
- Objects are raw API dicts and must be treated as read-only.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

JSON = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
IndexFn = Callable[[JSON], Iterable[str]]

TOMBSTONES = 4096  # deleted UIDs remembered, so a late write response cannot resurrect one


def key_of(obj: JSON) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta.get("name", ""))


class RecentSet:
    """The most recently added strings, at most ``limit`` of them (given on each add, so a
    caller's cap is read where it is used); re-adding one makes it the newest."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, None] = OrderedDict()  # oldest first

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: str, limit: int) -> None:
        self._items[item] = None
        self._items.move_to_end(item)
        while len(self._items) > limit:
            self._items.popitem(last=False)

    def discard(self, item: str) -> None:
        self._items.pop(item, None)


def _rv(obj: JSON | None) -> int | None:
    if obj is None:
        return None
    value = obj.get("metadata", {}).get("resourceVersion")
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _versions(obj: JSON, than: JSON | None) -> tuple[int, int] | None:
    """The resourceVersions of ``obj`` and ``than`` when both are numeric, else None."""
    new_rv, held_rv = _rv(obj), _rv(than)
    return None if new_rv is None or held_rv is None else (new_rv, held_rv)


def is_older(obj: JSON, than: JSON | None) -> bool:
    """``obj`` was written before ``than`` (a smaller resourceVersion; one etcd revision
    orders every object of a kind): e.g. a watch event that arrives after a write's response
    was applied. False when either has no numeric resourceVersion."""
    versions = _versions(obj, than)
    return versions is not None and versions[0] < versions[1]


def is_not_newer(obj: JSON, than: JSON | None) -> bool:
    """``obj`` is the version ``than`` holds or an older one, so it carries nothing ``than``
    lacks: e.g. the watch event of a write whose response was cached already. False when
    either has no numeric resourceVersion (then ``obj`` counts as news)."""
    versions = _versions(obj, than)
    return versions is not None and versions[0] <= versions[1]


class Store:
    def __init__(self, kind: str, indexes: dict[str, IndexFn] | None = None) -> None:
        self.kind = kind
        self._objects: dict[Key, JSON] = {}
        self._index_fns = indexes or {}
        self._indexes: dict[str, defaultdict[str, set[Key]]] = {
            name: defaultdict(set) for name in self._index_fns
        }
        self._deleted = RecentSet()  # UIDs of deleted objects

    def __len__(self) -> int:
        return len(self._objects)

    def __iter__(self) -> Iterator[JSON]:
        return iter(list(self._objects.values()))

    def get(self, key: Key) -> JSON | None:
        return self._objects.get(key)

    def was_deleted(self, uid: str) -> bool:
        """A DELETED event (or a delete) was seen for the object with ``uid`` — among the
        last :data:`TOMBSTONES` deleted; False says nothing."""
        return uid in self._deleted

    def newest(self, obj: JSON) -> JSON | None:
        """The newest known version of ``obj``: the cached one when ``obj`` is older than it
        (e.g. a watch event arriving after a write response was cached), None when the
        object's UID was deleted, else ``obj`` itself — what :meth:`upsert` would keep."""
        if obj.get("metadata", {}).get("uid") in self._deleted:
            return None
        held = self._objects.get(key_of(obj))
        return held if is_older(obj, held) else obj

    def index(self, name: str, value: str) -> list[JSON]:
        return [self._objects[k] for k in self._indexes[name].get(value, ()) if k in self._objects]

    def prime(self, items: Iterable[JSON]) -> None:
        for item in items:
            self.upsert(item)

    def apply(self, event_type: str | None, obj: JSON) -> JSON | None:
        """Apply one watch event; returns the previously cached version (or None)."""
        if event_type == "DELETED":
            old = self.delete(key_of(obj))  # buries the cached version's UID
            if old is None:  # never cached: remember the deleted UID all the same
                self._bury(obj.get("metadata", {}).get("uid"))
            return old
        return self.upsert(obj)

    def upsert(self, obj: JSON) -> JSON | None:
        key = key_of(obj)
        old = self._objects.get(key)
        if self.newest(obj) is not obj:
            return old  # a deleted object's late version, or older than the one held
        if old is not None:
            self._unindex(key, old)
        self._objects[key] = obj
        for name in self._index_fns:
            for value in self._values(name, obj):
                self._indexes[name][value].add(key)
        return old

    def drop(self, key: Key) -> JSON | None:
        """Remove an object without burying it: a later version may be cached again (an
        object a reader ignores for what this version says, not because it is gone)."""
        old = self._objects.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def delete(self, key: Key) -> JSON | None:
        old = self._objects.pop(key, None)
        if old is not None:
            self._unindex(key, old)
            self._bury(old.get("metadata", {}).get("uid"))
        return old

    def _bury(self, uid: str | None) -> None:
        if uid:
            self._deleted.add(uid, TOMBSTONES)

    def _values(self, index: str, obj: JSON) -> list[str]:
        """The values ``obj`` is indexed under in ``index`` (none if the function fails)."""
        try:
            return [value for value in self._index_fns[index](obj) if isinstance(value, str)]
        except Exception as exc:
            namespace, name = key_of(obj)
            log.warning("%s %s/%s: not indexed by %s (%s: %s)", self.kind, namespace, name,
                        index, type(exc).__name__, str(exc)[:200])
            return []

    def _unindex(self, key: Key, obj: JSON) -> None:
        for name in self._index_fns:
            for value in self._values(name, obj):
                bucket = self._indexes[name].get(value)
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del self._indexes[name][value]
