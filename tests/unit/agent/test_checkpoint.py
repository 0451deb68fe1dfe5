"""Atomic files, the checkpoint file and the CDI directory of the node agent."""

from __future__ import annotations

import json
from pathlib import Path

from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile, atomic_write, remove_file
from kdra.agent.core.cdi import build_cdi_spec
from kdra.agent.core.checkpoint import Checkpoint, ClaimEntry, ClaimRef
from kdra.agent.core.inventory_devices import InventoryDevice


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.json"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(p.name for p in target.parent.iterdir()) == ["file.json"]
    assert remove_file(target) and not remove_file(target)


def test_checkpoint_file_round_trip(tmp_path: Path) -> None:
    file = CheckpointFile(tmp_path, "node-1")
    assert file.load() == Checkpoint("node-1")  # no file yet
    checkpoint = Checkpoint("node-1").with_entry(
        ClaimEntry(ClaimRef("uid-1", "ns", "c"), "preparing", (), ("kdra.dev-uid-1.json",)))
    file.save(checkpoint)
    assert file.path.name == "checkpoint-node-1.json"
    assert CheckpointFile(tmp_path, "node-1").load() == checkpoint
    assert oct(file.path.stat().st_mode & 0o777) == "0o600"


def test_corrupt_checkpoint_is_moved_aside(tmp_path: Path) -> None:
    file = CheckpointFile(tmp_path, "node-1")
    file.save(Checkpoint("node-1").with_entry(
        ClaimEntry(ClaimRef("uid-1", "ns", "c"), "prepared", (), ())))
    file.path.write_bytes(file.path.read_bytes().replace(b"prepared", b"preparing"))
    assert file.load() == Checkpoint("node-1")
    assert not file.path.exists()
    aside = list(tmp_path.glob("checkpoint-node-1.json.corrupt-*"))
    assert len(aside) == 1


def test_cdi_dir_owns_only_its_nodes_files(tmp_path: Path) -> None:
    cdi = CdiDir(tmp_path)
    device = InventoryDevice("gpu.kdra.dev", "gpu-0")
    for node, uid in (("node-1", "a"), ("node-2", "b")):
        cdi.write(f"kdra.dev-{uid}.json", build_cdi_spec(
            node=node, claim=ClaimRef(uid, "ns", "c"), driver="gpu.kdra.dev", devices=[device]))
    (tmp_path / "nvidia.yaml").write_text("cdiVersion: 0.5.0\n")
    (tmp_path / "kdra.dev-broken.json").write_text("{")
    assert cdi.owned("node-1") == {"kdra.dev-a.json": "a"}
    assert json.loads((tmp_path / "kdra.dev-b.json").read_text())["kind"] == "kdra.dev/gpu"
    assert cdi.remove("kdra.dev-a.json") and cdi.owned("node-1") == {}
    assert CdiDir(tmp_path / "missing").owned("node-1") == {}
