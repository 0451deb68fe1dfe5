"""The informer's delivery rules: lists, deletions implied by a re-list, handler failures."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kdra.kube.informer import Informer
from kdra.kube.resources import PODS

JSON = dict[str, Any]


def pod(name: str, rv: int = 1) -> JSON:
    return {"metadata": {"namespace": "ns", "name": name, "resourceVersion": str(rv)}}


class Recorder:
    def __init__(self, fail_on: str = "") -> None:
        self.seen: list[tuple[str | None, str, str]] = []
        self.fail_on = fail_on

    def __call__(self, event: str | None, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        if name == self.fail_on:
            raise ValueError(f"cannot handle {name}")
        self.seen.append((event, name, obj["metadata"]["resourceVersion"]))


class ScriptedWatch:
    """Stands in for KubeClient.watch: yields a fixed script of events, then waits."""

    def __init__(self, script: list[tuple[str, JSON]]) -> None:
        self.script = script

    async def watch(self, *_: Any, **__: Any) -> AsyncIterator[tuple[str, JSON]]:
        for event in self.script:
            yield event
        await asyncio.Event().wait()


def informer(handler: Recorder, script: list[tuple[str, JSON]] | None = None) -> Informer:
    client: Any = ScriptedWatch(script or [])
    return Informer(client, PODS, handler)


def test_a_list_is_delivered_like_kopfs_initial_listing() -> None:
    seen = Recorder()
    inf = informer(seen)
    inf.relist([pod("a"), pod("b")])
    assert seen.seen == [(None, "a", "1"), (None, "b", "1")]
    assert set(inf.known) == {("ns", "a"), ("ns", "b")}


def test_a_relist_deletes_what_disappeared_while_the_watch_was_down() -> None:
    seen = Recorder()
    inf = informer(seen)
    inf.relist([pod("a"), pod("b"), pod("c")])
    inf.deliver("MODIFIED", pod("b", 5))
    seen.seen.clear()
    inf.relist([pod("a", 7)])
    # the listed object first, then the two that are gone, each with its last seen version
    assert seen.seen == [(None, "a", "7"), ("DELETED", "b", "5"), ("DELETED", "c", "1")]
    assert set(inf.known) == {("ns", "a")}


def test_a_deleted_object_is_not_deleted_again_by_a_relist() -> None:
    seen = Recorder()
    inf = informer(seen)
    inf.relist([pod("a"), pod("b")])
    inf.deliver("DELETED", pod("b", 2))
    seen.seen.clear()
    inf.relist([pod("a")])
    assert seen.seen == [(None, "a", "1")]


def test_a_failing_handler_is_logged_and_the_rest_still_delivered(
        caplog: pytest.LogCaptureFixture) -> None:
    seen = Recorder(fail_on="bad")
    inf = informer(seen)
    with caplog.at_level(logging.ERROR):
        inf.relist([pod("a"), pod("bad"), pod("c")])
        inf.deliver("ADDED", pod("d"))
    assert [name for _, name, _ in seen.seen] == ["a", "c", "d"]
    assert "Pod ns/bad: handling a LIST event failed" in caplog.text
    assert ("ns", "bad") in inf.known  # still known: a later deletion reaches the handler


def test_the_watch_stream_drives_the_handler_in_order() -> None:
    seen = Recorder()

    async def run() -> Informer:
        inf = informer(seen, [("LIST", {"items": [pod("a")]}), ("ADDED", pod("b", 2)),
                              ("MODIFIED", pod("a", 3)), ("DELETED", pod("b", 4))])
        last = asyncio.Event()
        inf.handler = lambda event, obj: (seen(event, obj), event == "DELETED" and last.set())
        inf.start()
        await asyncio.wait_for(last.wait(), 5)
        assert inf.synced.is_set()
        await inf.stop()
        return inf

    inf = asyncio.run(run())
    assert seen.seen == [(None, "a", "1"), ("ADDED", "b", "2"), ("MODIFIED", "a", "3"),
                         ("DELETED", "b", "4")]
    assert set(inf.known) == {("ns", "a")}


# --------------------------------------------------------------------------- --watch=kopf


def test_a_reconciling_list_delivers_only_the_deletions_it_proves() -> None:
    """kopf's watch feeds the informer; a LIST of kdra's own, taken beside that watch at
    resourceVersion 10, proves the deletion of what was known at 10 or before and is not
    listed — never of an object known at a newer version (created or changed after the
    LIST: the watch was ahead of it), and never of one listed but undecodable."""
    seen = Recorder()
    inf = Informer(ScriptedWatch([]), PODS, seen,  # type: ignore[arg-type]
                   known=[pod("primed-gone", 3), pod("primed-kept", 4)])
    inf.deliver(None, pod("listed-by-kopf", 5))
    inf.deliver("ADDED", pod("after-the-list", 11))
    inf.deliver("MODIFIED", pod("undecodable", 9))
    assert not inf.synced.is_set()
    gone = inf.reconcile([pod("primed-kept", 4), pod("listed-by-kopf", 5)], "10",
                         skipped=[pod("undecodable", 12)])
    assert gone == 1
    assert seen.seen[-1] == ("DELETED", "primed-gone", "3")
    assert set(inf.known) == {("ns", "primed-kept"), ("ns", "listed-by-kopf"),
                              ("ns", "after-the-list"), ("ns", "undecodable")}
    assert inf.synced.is_set()  # the pod cache speaks for the API server from now on
    # The next period's LIST, at 12: whatever it lacks was deleted by then.
    assert inf.reconcile([pod("primed-kept", 4)], "12") == 3
    assert {name for event, name, _ in seen.seen if event == "DELETED"} == {
        "primed-gone", "listed-by-kopf", "after-the-list", "undecodable"}
    assert set(inf.known) == {("ns", "primed-kept")}
