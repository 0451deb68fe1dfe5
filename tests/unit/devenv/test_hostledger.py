"""The host ledger's bookkeeping (kdra_devenv.hostledger), on temporary directories only: what
a watched directory's undo removes and keeps, undo order and idempotence, failures kept for
the next attempt, the lock, and the .dockerignore reading of kdra_devenv.imagebuild."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from kdra_devenv import hostledger
from kdra_devenv.hostledger import HostLedger, LedgerError, mounts_under
from kdra_devenv.imagebuild import _matches, context_files


def _ledger(tmp_path: Path) -> HostLedger:
    ledger = HostLedger(tmp_path / "ledger")
    ledger.acquire()
    return ledger


def test_an_owned_directory_loses_what_was_added_and_keeps_what_was_there(tmp_path: Path) -> None:
    watched = tmp_path / "cdi"
    watched.mkdir()
    (watched / "before.json").write_text("{}")
    ledger = _ledger(tmp_path)
    ledger.watch_directory(watched, owned=True)
    (watched / "new.json").write_text("{}")
    (watched / "newdir").mkdir()
    (watched / "newdir" / "x").write_text("x")
    assert ledger.undo() == []
    assert sorted(os.listdir(watched)) == ["before.json"]
    assert ledger.entries() == []


def test_a_created_directory_is_removed_only_when_empty_unless_owned(tmp_path: Path) -> None:
    shared, ours = tmp_path / "shared", tmp_path / "ours"
    ledger = _ledger(tmp_path)
    ledger.watch_directory(shared)
    ledger.watch_directory(ours, owned_if_created=True)
    for directory in (shared, ours):
        directory.mkdir()
        (directory / "someone-elses").write_text("")
    assert ledger.undo() == []
    assert (shared / "someone-elses").exists()  # not recorded as ours: kept, and its dir
    assert not ours.exists()


def test_prefix_links_and_stale_sockets(tmp_path: Path) -> None:
    results, links, sockets = tmp_path / "results", tmp_path / "links", tmp_path / "s"
    for directory in (results, links, sockets):
        directory.mkdir()
    workdir = tmp_path / "work"
    ledger = _ledger(tmp_path)
    ledger.watch_directory(results, prefix="kdra-node-", mentions="/our/netns")
    ledger.watch_directory(links, links_into=workdir)
    ledger.watch_directory(sockets, stale_sockets=True)
    (results / "kdra-node-abc-eth0").write_text("")
    (results / "other-net-abc").write_text('{"netns": "/their/netns/x"}')
    (results / "cni-loopback-abc").write_text('{"netns": "/our/netns/x"}')
    (links / "ours.log").symlink_to(workdir / "pods" / "x.log")
    (links / "theirs.log").symlink_to(tmp_path / "elsewhere.log")
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(sockets / "stale"))
    stale.close()  # the file stays, nobody listens
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(sockets / "live"))
    live.listen()
    try:
        assert ledger.undo() == []
    finally:
        live.close()
    assert sorted(os.listdir(results)) == ["other-net-abc"]
    assert sorted(os.listdir(links)) == ["theirs.log"]
    assert sorted(os.listdir(sockets)) == ["live"]


def test_undo_is_idempotent_and_keeps_what_failed(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _ledger(tmp_path)
    ledger.record({"kind": "nft-table", "name": "t"})
    ledger.record({"kind": "no-such-kind"})
    ledger.watch_directory(tmp_path / "later", owned=True)
    calls: list[str] = []

    def failing(entry: dict[str, object]) -> None:
        calls.append(str(entry["name"]))
        raise LedgerError("nft is gone")

    monkeypatch.setitem(hostledger._PHASES[4], "nft-table", failing)
    errors = ledger.undo()
    assert calls == ["t"]
    assert any("nft is gone" in e for e in errors)
    assert any("unknown ledger entry kept" in e for e in errors)
    kinds = [e["kind"] for e in ledger.entries()]
    assert kinds == ["nft-table", "no-such-kind"]  # the directory entry is done
    monkeypatch.setitem(hostledger._PHASES[4], "nft-table", lambda entry: None)
    assert len(ledger.undo()) == 1  # the unknown kind stays, reported
    assert [e["kind"] for e in ledger.entries()] == ["no-such-kind"]


def test_undo_runs_processes_before_mounts_and_network_before_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = _ledger(tmp_path)
    order: list[str] = []
    ledger.watch_directory(tmp_path / "d")
    ledger.record({"kind": "address", "device": "lo", "cidr": "10.0.0.1/32"})
    ledger.workdir(tmp_path / "w")
    for index, phase in enumerate(hostledger._PHASES):
        for kind in phase:
            monkeypatch.setitem(hostledger._PHASES[index], kind,
                                lambda entry, i=index, k=kind: order.append(f"{i}:{k}"))
    assert ledger.undo() == []
    assert order == ["0:workdir", "3:workdir", "4:address", "6:dir"]


def test_a_second_holder_is_refused_or_takes_over_a_dead_ones_ledger(tmp_path: Path) -> None:
    first = _ledger(tmp_path)
    first.watch_directory(tmp_path / "x", owned=True)
    with pytest.raises(LedgerError, match="another kdra node runs"):
        HostLedger(tmp_path / "ledger").acquire(take_over=False)
    first.release()  # as if its process died: the lock goes, the ledger stays
    (tmp_path / "x").mkdir()
    second = HostLedger(tmp_path / "ledger")
    assert second.acquire(take_over=False) == []  # undid the first one's entries
    assert not (tmp_path / "x").exists()
    assert second.owner()["pid"] == os.getpid()
    second.release()


def test_mounts_under_matches_whole_path_components(tmp_path: Path) -> None:
    assert mounts_under(tmp_path / "nothing-mounted-here") == []
    assert "/proc" in mounts_under(Path("/proc"))
    assert "/proc" not in mounts_under(Path("/pro"))


def test_the_image_context_is_what_dockerignore_lets_in() -> None:
    files = context_files()
    assert "requirements.lock" in files and "pyproject.toml" in files
    assert "operator/kdra/main.py" in files
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    assert not [f for f in files if f.startswith(("tests/", ".venv/", "manifests/"))]
    assert _matches("operator/kdra.egg-info/PKG-INFO", "**/*.egg-info")
    assert _matches("a/b/__pycache__/c.pyc", "**/__pycache__")
    assert not _matches("operator/kdra/cache.py", "**/__pycache__")
