"""The informer store: newest version wins, indexes follow, deleted objects stay deleted."""

from __future__ import annotations

from typing import Any

from kdra.kube import store as store_module
from kdra.kube.store import Store, is_not_newer, is_older


def obj(name: str, uid: str, rv: int, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid,
                         "resourceVersion": str(rv), **meta}}


def by_uid() -> Store:
    return Store("Thing", {"uid": lambda o: [o["metadata"]["uid"]]})


def test_an_older_version_never_replaces_a_newer_one() -> None:
    store = by_uid()
    store.upsert(obj("a", "u1", 5))
    store.upsert(obj("a", "u1", 4))
    assert store.get(("ns", "a")) == obj("a", "u1", 5)


def test_a_write_response_after_the_deleted_event_does_not_resurrect() -> None:
    # Removing the last finalizer returns the object; its DELETED event may come first.
    store = by_uid()
    store.upsert(obj("a", "u1", 5, finalizers=["f"]))
    store.apply("DELETED", obj("a", "u1", 7))
    store.upsert(obj("a", "u1", 6, deletionTimestamp="2026-11-30T00:00:00Z"))
    assert store.get(("ns", "a")) is None
    assert store.index("uid", "u1") == []


def test_a_deleted_event_for_an_uncached_object_is_remembered_too() -> None:
    store = by_uid()
    store.apply("DELETED", obj("a", "u1", 7))
    store.upsert(obj("a", "u1", 6))
    assert store.get(("ns", "a")) is None


def test_a_new_object_with_the_same_name_is_stored() -> None:
    store = by_uid()
    store.upsert(obj("a", "u1", 5))
    store.apply("DELETED", obj("a", "u1", 7))
    store.upsert(obj("a", "u2", 8))
    assert store.get(("ns", "a")) == obj("a", "u2", 8)
    # ... and a late response for the old one does not displace it.
    store.upsert(obj("a", "u1", 9))
    assert store.get(("ns", "a")) == obj("a", "u2", 8)


def test_tombstones_are_bounded(monkeypatch: Any) -> None:
    monkeypatch.setattr(store_module, "TOMBSTONES", 3)
    store = by_uid()
    for n in range(5):
        store.apply("DELETED", obj(f"o{n}", f"u{n}", n + 1))
    assert len(store._deleted) == 3
    store.upsert(obj("o0", "u0", 9))  # forgotten: stored again (bounded memory over strict)
    assert store.get(("ns", "o0")) is not None


def test_is_older_compares_resource_versions_only_when_both_are_numeric() -> None:
    def rv(value: str | None) -> dict[str, Any]:
        return {"metadata": {"name": "x", "uid": "u", "resourceVersion": value}}
    assert is_older(rv("5"), rv("7"))
    assert not is_older(rv("7"), rv("7"))
    assert not is_older(rv("9"), rv("7"))
    assert not is_older(rv("5"), None)
    assert not is_older(rv(None), rv("7"))
    assert not is_older(rv("5"), rv("abc"))


def test_is_not_newer_holds_for_the_same_or_an_older_numeric_version() -> None:
    def rv(value: str | None) -> dict[str, Any]:
        return {"metadata": {"name": "x", "uid": "u", "resourceVersion": value}}
    assert is_not_newer(rv("7"), rv("7"))
    assert is_not_newer(rv("5"), rv("7"))
    assert not is_not_newer(rv("9"), rv("7"))
    assert not is_not_newer(rv("5"), None)
    assert not is_not_newer(rv(None), rv("7"))  # cannot tell: news
    assert not is_not_newer(rv("5"), rv("abc"))


def test_newest_is_what_upsert_would_keep() -> None:
    store = by_uid()
    held = obj("a", "u1", 5)
    store.upsert(held)
    assert store.newest(obj("a", "u1", 4)) is held  # an older event: the cached one
    newer = obj("a", "u1", 6)
    assert store.newest(newer) is newer
    unseen = obj("b", "u2", 1)
    assert store.newest(unseen) is unseen
    store.apply("DELETED", obj("a", "u1", 7))
    assert store.newest(obj("a", "u1", 6)) is None  # a late write response of a deleted one
