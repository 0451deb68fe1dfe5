"""Prepare/unprepare on one node against an in-memory API (agent_prepare_helpers.py),
including crashes at every step: a crash or a failed disk write converges on restart or
retry, orphaned or missing CDI files are repaired, the holder index follows every checkpoint
change, and concurrent claims share checkpoint saves. The prepare/unprepare lifecycle itself:
test_agent_prepare_lifecycle.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.core.checkpoint import ClaimRef
from kdra.agent.prepare import PAUSE_POINTS, Preparer
from tests.unit.agent.prepare_helpers import (
    NODE,
    UID,
    Crash,
    Node,
    claim_obj,
    ready,
    sync,
)


@pytest.mark.parametrize("point", [p for p in PAUSE_POINTS if p != "cdi-removed"])
@pytest.mark.parametrize("then", ["still allocated", "deallocated meanwhile"])
def test_crash_during_prepare_converges(tmp_path: Path, point: str, then: str) -> None:
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-1"]))
    with pytest.raises(Crash):
        sync(node.preparer(crash_at=point), node)
    if then == "deallocated meanwhile":
        node.client.put(claim_obj([]))
    restarted = node.preparer()
    sync(restarted, node)
    if then == "still allocated":
        assert node.cdi_files() == [f"kdra.dev-{UID}.json"]
        assert node.checkpoint()[UID]["state"] == "prepared"
        assert ready(node) == [("gpu-1", "True")]
    else:
        assert node.cdi_files() == [] and node.checkpoint() == {} and ready(node) == []


def test_a_failed_disk_step_is_undone_in_memory_and_redone_by_the_retry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The entry is recorded in memory before the files are written (so the devices are busy);
    # if writing fails, it goes again, or the retry would take the claim as prepared.
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-1"]))
    preparer = node.preparer()
    write = CdiDir.write

    def full_disk(self: CdiDir, name: str, spec: dict[str, Any]) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CdiDir, "write", full_disk)
    with pytest.raises(OSError):
        sync(preparer, node)
    assert preparer.checkpoint.claims == {} and node.checkpoint() == {} and ready(node) == []
    monkeypatch.setattr(CdiDir, "write", write)
    sync(preparer, node)  # the work queue's retry
    assert node.cdi_files() == [f"kdra.dev-{UID}.json"]
    assert node.checkpoint()[UID]["state"] == "prepared"
    assert ready(node) == [("gpu-1", "True")]


def test_crash_during_unprepare_converges(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-1"]))
    sync(node.preparer(), node)
    entries = node.claim()["status"]["devices"]  # type: ignore[index]
    node.client.put(claim_obj([], extra_status=entries))
    with pytest.raises(Crash):
        sync(node.preparer(crash_at="cdi-removed"), node)
    assert node.cdi_files() == [] and UID in node.checkpoint()
    sync(node.preparer(), node)
    assert node.checkpoint() == {} and ready(node) == []


def test_orphaned_cdi_files_are_removed_at_load(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-1"]))
    sync(node.preparer(), node)
    (tmp_path / "state" / f"checkpoint-{NODE}.json").unlink()  # lost checkpoint
    preparer = node.preparer()
    assert node.cdi_files() == []  # no entry names it: an orphan
    sync(preparer, node)  # still allocated: prepared again, one file
    assert node.cdi_files() == [f"kdra.dev-{UID}.json"]


def test_missing_cdi_file_of_prepared_claim_is_rewritten(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-1"]))
    preparer = node.preparer()
    sync(preparer, node)
    before = (tmp_path / "cdi" / f"kdra.dev-{UID}.json").read_text()
    (tmp_path / "cdi" / f"kdra.dev-{UID}.json").unlink()
    sync(preparer, node)
    assert (tmp_path / "cdi" / f"kdra.dev-{UID}.json").read_text() == before


def test_holder_index_follows_every_checkpoint_change() -> None:
    from kdra.agent.core.checkpoint import Checkpoint, ClaimEntry
    from kdra.agent.prepare import HolderIndex

    index = HolderIndex()

    def held(node: str, *claims: tuple[str, str, str]) -> Checkpoint:
        checkpoint = Checkpoint(node)
        for uid, namespace, name in claims:
            checkpoint = checkpoint.with_entry(
                ClaimEntry(ClaimRef(uid, namespace, name), "prepared", (), ()))
        return checkpoint

    a1 = held("a", ("u1", "ns", "c1"), ("u2", "ns", "c2"))
    b1 = held("b", ("u3", "ns", "c1"))
    index.update("a", Checkpoint("a"), a1)
    index.update("b", Checkpoint("b"), b1)
    assert index.nodes("ns", "c1") == {"a", "b"}
    assert index.nodes("ns", "c2") == {"a"}
    index.update("a", a1, held("a", ("u2", "ns", "c2")))  # c1 unprepared on a
    assert index.nodes("ns", "c1") == {"b"}
    index.update("b", b1, held("b"))
    assert index.nodes("ns", "c1") == set()
    assert index._nodes == {("ns", "c2"): {"a"}}  # nothing left behind for gone claims
    result = index.nodes("ns", "c2")
    result.add("z")  # a copy: callers cannot corrupt the index
    assert index.nodes("ns", "c2") == {"a"}


class SlowCheckpointFile(CheckpointFile):
    """Counts saves; each takes a while (an fsync on a busy disk). ``started`` is set when
    the first save begins."""

    saves = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started = threading.Event()

    def save(self, checkpoint: Any) -> None:
        self.started.set()
        time.sleep(0.05)
        super().save(checkpoint)
        self.saves += 1


class CheckingPreparer(Preparer):
    """Checks that the file holds the caller's change whenever a save returns."""

    async def _save(self, first: Callable[[], None] | None = None) -> None:
        wanted = set(self.checkpoint.claims)
        await super()._save(first)
        path = self.file.path
        on_disk = set(json.loads(path.read_text())["claims"]) if path.exists() else set()
        assert wanted <= on_disk, (wanted, on_disk)


def slow_disk(tmp_path: Path, count: int) -> tuple[Node, SlowCheckpointFile, Preparer,
                                                  list[dict[str, Any]]]:
    """A node whose checkpoint saves are slow, and ``count`` claims c0... (uid-0...) each
    allocated one GPU of it."""
    node = Node(tmp_path)
    file = SlowCheckpointFile(tmp_path / "state", NODE)
    preparer = CheckingPreparer(
        node.client, NODE, cdi=CdiDir(tmp_path / "cdi"),  # type: ignore[arg-type]
        checkpoint_file=file, inventory=lambda: node.inventory,
        drivers=lambda: node.inventory.drivers, backends=node.backends)
    preparer.load()
    claims = []
    for i in range(count):
        claim = claim_obj([f"gpu-{i}"])
        claim["metadata"].update(name=f"c{i}", uid=f"uid-{i}")
        claims.append(node.client.put(claim))
    return node, file, preparer, claims


def test_claims_prepared_together_share_checkpoint_writes(tmp_path: Path) -> None:
    node, file, preparer, claims = slow_disk(tmp_path, 4)

    async def all_at_once() -> None:
        await asyncio.gather(*(preparer.sync("ns", c["metadata"]["name"], c) for c in claims))

    asyncio.run(all_at_once())
    assert set(node.checkpoint()) == {f"uid-{i}" for i in range(4)}
    assert all(e["state"] == "prepared" for e in node.checkpoint().values())
    for i in range(4):
        status = node.client.objects[("ns", f"c{i}")]["status"]
        assert status["devices"][0]["conditions"][0]["status"] == "True"
    # Each change was on disk when its save returned (CheckingPreparer), yet the four did not
    # take four writes: a save that finds its change already written returns at once.
    assert file.saves < len(claims), file.saves


def test_a_change_made_during_a_save_gets_a_save_of_its_own(tmp_path: Path) -> None:
    node, file, preparer, claims = slow_disk(tmp_path, 2)

    async def overlapping() -> None:
        first = asyncio.create_task(preparer.sync("ns", "c0", claims[0]))
        # c0's save is under way (it takes 50 ms): wait for it to begin, however busy the
        # machine (a fixed sleep raced with the worker thread under load).
        assert await asyncio.to_thread(file.started.wait, 10)
        await asyncio.gather(first, preparer.sync("ns", "c1", claims[1]))

    asyncio.run(overlapping())
    assert file.saves == 2
    assert set(node.checkpoint()) == {"uid-0", "uid-1"}


def test_the_files_are_on_disk_before_the_save_in_one_worker_thread_visit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: CDI file, then the checkpoint's "prepared"; unprepare: the file removed, then
    # the entry - each pair in one visit to a worker thread (issue 42: a visit costs ~70 µs).
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-1"]))
    files_at_save: list[list[str]] = []

    class Watching(CheckpointFile):
        def save(self, checkpoint: Any) -> None:
            files_at_save.append(node.cdi_files())
            super().save(checkpoint)

    visits = []
    to_thread = asyncio.to_thread

    async def counted(func: Callable[..., Any], /, *args: Any) -> Any:
        visits.append(getattr(func, "__name__", repr(func)))
        return await to_thread(func, *args)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    preparer = Preparer(
        node.client, NODE, cdi=CdiDir(tmp_path / "cdi"),  # type: ignore[arg-type]
        checkpoint_file=Watching(tmp_path / "state", NODE), inventory=lambda: node.inventory,
        drivers=lambda: node.inventory.drivers, backends=node.backends)
    preparer.load()
    sync(preparer, node)
    assert files_at_save == [[f"kdra.dev-{UID}.json"]] and visits == ["_write_then_save"]
    assert node.checkpoint()[UID]["state"] == "prepared" and ready(node) == [("gpu-1", "True")]

    node.client.put(claim_obj([]))  # deallocated
    sync(preparer, node)
    assert files_at_save[1:] == [[]] and visits[1:] == ["_write_then_save"]
    assert node.checkpoint() == {} and node.cdi_files() == []
