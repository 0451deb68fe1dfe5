"""Prepare/unprepare on one node against an in-memory API, including crashes at every step."""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from kdra.domain.checkpoint import ClaimRef
from kdra.domain.inventory import parse_inventory
from kdra.domain.inventory_devices import Inventory
from kdra.kube.errors import Conflict, NotFound
from kdra.kube.resources import CLAIMS, Resource
from kdra.services.agent.cdi import CdiDir
from kdra.services.agent.checkpoint import CheckpointFile
from kdra.services.agent.prepare import PAUSE_POINTS, Preparer, WaitForRelease
from kdra.services.workqueue import Retry

NODE = "node-1"
GPU = "gpu.kdra.dev"
UID = "3d9f7a10-1111-2222-3333-444455556666"


class FakeClient:
    """Claims only: GET and PUT status with resourceVersion preconditions."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 100
        self.status_writes = 0
        self.conflict_next = 0

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.version)
        meta = stored["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = stored
        return copy.deepcopy(stored)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        assert res is CLAIMS
        try:
            return copy.deepcopy(self.objects[(namespace or "", name)])
        except KeyError:
            raise NotFound(404, "NotFound", name) from None

    async def replace_status(self, res: Resource, body: dict[str, Any]) -> Any:
        meta = body["metadata"]
        current = self.objects.get((meta["namespace"], meta["name"]))
        if current is None:
            raise NotFound(404, "NotFound", meta["name"])
        if self.conflict_next:
            self.conflict_next -= 1
            self.put(current)  # someone else wrote meanwhile
            current = self.objects[(meta["namespace"], meta["name"])]
        if current["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise Conflict(409, "Conflict", "the object has been modified")
        self.status_writes += 1
        updated = copy.deepcopy(current)
        updated["status"] = copy.deepcopy(body.get("status") or {})
        return self.put(updated)


def claim_obj(devices: list[str], *, reserved: bool = True, driver: str = GPU,
              extra_status: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if devices:
        status["allocation"] = {"devices": {"results": [
            {"request": "gpu", "driver": driver, "pool": NODE, "device": d} for d in devices]}}
        if reserved:
            status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "pod-1"}]
    if extra_status:
        status["devices"] = extra_status
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": UID, "generation": 1},
            "spec": {}, "status": status}


class Crash(Exception):
    """Stands for kill -9 at a pause point."""


class CrashingPreparer(Preparer):
    crash_at = ""

    async def _pause(self, point: str, ref: ClaimRef) -> None:
        if point == self.crash_at:
            raise Crash(point)


class Node:
    """One node's agent state on disk (survives 'restarts') and in the fake API."""

    def __init__(self, tmp: Path, inventory: str = "gpus: ['4 x H100-80GB']") -> None:
        self.tmp = tmp
        self.client = FakeClient()
        self.inventory: Inventory = parse_inventory(inventory, NODE)

    def preparer(self, crash_at: str = "") -> CrashingPreparer:
        preparer = CrashingPreparer(
            self.client, NODE, cdi=CdiDir(self.tmp / "cdi"),  # type: ignore[arg-type]
            checkpoint_file=CheckpointFile(self.tmp / "state", NODE),
            inventory=lambda: self.inventory, drivers=lambda: self.inventory.drivers)
        preparer.crash_at = crash_at
        preparer.load()
        return preparer

    def cdi_files(self) -> list[str]:
        directory = self.tmp / "cdi"
        return sorted(p.name for p in directory.iterdir()) if directory.exists() else []

    def claim(self) -> dict[str, Any] | None:
        return self.client.objects.get(("ns", "c"))

    def checkpoint(self) -> dict[str, Any]:
        path = self.tmp / "state" / f"checkpoint-{NODE}.json"
        return json.loads(path.read_text())["claims"] if path.exists() else {}


def sync(preparer: Preparer, node: Node) -> None:
    asyncio.run(preparer.sync("ns", "c", node.claim()))


def ready(node: Node) -> list[tuple[str, str]]:
    claim = node.claim() or {}
    return [(e["device"], e["conditions"][0]["status"])
            for e in (claim.get("status") or {}).get("devices") or ()]


def test_prepare_then_unprepare(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-1", "gpu-2"]))
    preparer = node.preparer()
    sync(preparer, node)
    assert node.cdi_files() == [f"kdra.dev-{UID}.json"]
    spec = json.loads((tmp_path / "cdi" / f"kdra.dev-{UID}.json").read_text())
    assert [d["name"] for d in spec["devices"]] == [f"{UID}-gpu-1", f"{UID}-gpu-2"]
    assert node.checkpoint()[UID]["state"] == "prepared"
    assert ready(node) == [("gpu-1", "True"), ("gpu-2", "True")]
    data = node.claim()["status"]["devices"][0]["data"]  # type: ignore[index]
    assert data["cdiDeviceIDs"] == [f"kdra.dev/gpu={UID}-gpu-1"]
    assert data["productName"] == "NVIDIA H100 80GB HBM3" and data["uuid"].startswith("GPU-")
    assert preparer.prepared_count == 1

    writes = node.client.status_writes
    sync(preparer, node)  # prepared already: the recorded result, no new write
    assert node.client.status_writes == writes

    deallocated = claim_obj([])
    deallocated["status"]["devices"] = node.claim()["status"]["devices"]  # type: ignore[index]
    node.client.put(deallocated)
    sync(preparer, node)
    assert node.cdi_files() == [] and node.checkpoint() == {}
    assert ready(node) == []
    assert preparer.prepared_count == 0


def test_each_status_write_is_handed_to_written_as_the_server_stored_it(
        tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-1"]))
    preparer = node.preparer()
    answers: list[dict[str, Any]] = []
    preparer.written = answers.append
    sync(preparer, node)  # Ready
    sync(preparer, node)  # nothing to write
    unreserved = claim_obj(["gpu-1"], reserved=False)
    unreserved["status"]["devices"] = node.claim()["status"]["devices"]  # type: ignore[index]
    node.client.put(unreserved)
    sync(preparer, node)  # unprepared: its entries removed
    assert [a["metadata"]["resourceVersion"] for a in answers] == ["102", "104"]
    assert answers[-1] == node.claim()


def test_unreserved_or_deleted_claims_are_unprepared(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-0"]))
    preparer = node.preparer()
    sync(preparer, node)
    node.client.put({**node.claim(), "status": {  # type: ignore[dict-item]
        **node.claim()["status"], "reservedFor": []}})  # type: ignore[index]
    sync(preparer, node)
    assert node.cdi_files() == [] and ready(node) == []
    sync(preparer, node)
    node.client.put(claim_obj(["gpu-0"]))
    sync(preparer, node)
    assert node.cdi_files() == [f"kdra.dev-{UID}.json"]
    del node.client.objects[("ns", "c")]
    asyncio.run(preparer.sync("ns", "c", None))
    assert node.cdi_files() == [] and node.checkpoint() == {}


def test_unprepare_of_unknown_claim_succeeds(tmp_path: Path) -> None:
    node = Node(tmp_path)
    asyncio.run(node.preparer().sync("ns", "nothing", None))
    assert node.cdi_files() == []


def test_unknown_and_unhealthy_devices_are_reported_not_prepared(tmp_path: Path) -> None:
    node = Node(tmp_path, "gpus: [{profile: H100-80GB, count: 2, unhealthy: [1]}]")
    node.client.put(claim_obj(["gpu-0", "gpu-7"]))
    preparer = node.preparer()
    sync(preparer, node)
    assert node.cdi_files() == [] and node.checkpoint() == {}
    entries = {e["device"]: e["conditions"][0]
               for e in node.claim()["status"]["devices"]}  # type: ignore[index]
    assert entries["gpu-7"]["status"] == "False"
    assert entries["gpu-7"]["reason"] == "DeviceNotFound"
    assert entries["gpu-0"]["reason"] == "ClaimNotPrepared"
    node.client.put(claim_obj(["gpu-1"]))
    sync(preparer, node)
    assert ready(node) == [("gpu-1", "False")]
    assert node.claim()["status"]["devices"][0]["conditions"][0]["reason"] == \
        "DeviceUnhealthy"  # type: ignore[index]


def test_other_drivers_entries_are_kept_and_conflicts_retried(tmp_path: Path) -> None:
    node = Node(tmp_path)
    theirs = {"driver": "net.example.com", "pool": NODE, "device": "nic-0",
              "conditions": []}
    node.client.put(claim_obj(["gpu-0"], extra_status=[theirs]))
    node.client.conflict_next = 2
    sync(node.preparer(), node)
    devices = node.claim()["status"]["devices"]  # type: ignore[index]
    assert devices[0] == theirs and devices[1]["device"] == "gpu-0"


def test_conflict_forever_is_retried_later(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-0"]))
    node.client.conflict_next = 100
    with pytest.raises(Retry):
        sync(node.preparer(), node)
    node.client.conflict_next = 0
    sync(node.preparer(), node)  # a restart (or retry) finishes the job
    assert ready(node) == [("gpu-0", "True")]


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


def test_two_drivers_two_spec_files(tmp_path: Path) -> None:
    node = Node(tmp_path, "gpus: ['1 x T4-16GB']\n"
                          "devices: [{name: kitten-0, driver: cats.example.com}]\n")
    obj = claim_obj(["gpu-0"])
    obj["status"]["allocation"]["devices"]["results"].append(
        {"request": "cat", "driver": "cats.example.com", "pool": NODE, "device": "kitten-0"})
    node.client.put(obj)
    sync(node.preparer(), node)
    assert node.cdi_files() == sorted([f"kdra.dev-cats-example-com-{UID}.json",
                                       f"kdra.dev-{UID}.json"])
    assert ready(node) == [("gpu-0", "True"), ("kitten-0", "True")]


def test_holder_index_follows_every_checkpoint_change() -> None:
    from kdra.domain.checkpoint import Checkpoint, ClaimEntry
    from kdra.services.agent.prepare import HolderIndex

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

    async def _save(self) -> None:
        wanted = set(self.checkpoint.claims)
        await super()._save()
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
        drivers=lambda: node.inventory.drivers)
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


PREPARE_SAMPLES = ("kdra_agent_prepare_errors_total",
                   "kdra_agent_prepare_duration_seconds_count")


def handover(tmp_path: Path) -> tuple[Node, Preparer, dict[str, Any]]:
    """A node whose gpu-0 is prepared for claim ``old``, and claim ``new`` allocated gpu-0
    too; the preparer sees the claims as the API holds them (the agent's watch cache)."""
    node = Node(tmp_path)
    preparer = Preparer(
        node.client, NODE, cdi=CdiDir(tmp_path / "cdi"),  # type: ignore[arg-type]
        checkpoint_file=CheckpointFile(tmp_path / "state", NODE),
        inventory=lambda: node.inventory, drivers=lambda: node.inventory.drivers,
        claims=lambda namespace, name: node.client.objects.get((namespace, name)))
    preparer.load()
    old = claim_obj(["gpu-0"])
    old["metadata"].update(name="old", uid="uid-old")
    asyncio.run(preparer.sync("ns", "old", node.client.put(old)))
    new = claim_obj(["gpu-0"])
    new["metadata"].update(name="new", uid="uid-new")
    return node, preparer, node.client.put(new)


def new_conditions(node: Node) -> list[tuple[str, str]]:
    status = node.client.objects[("ns", "new")].get("status") or {}
    return [(c["status"], c["reason"])
            for entry in status.get("devices") or () for c in entry["conditions"]]


def test_a_device_its_claim_released_is_waited_for_unreported(tmp_path: Path) -> None:
    node, preparer, new = handover(tmp_path)
    old = node.client.objects[("ns", "old")]
    released = node.client.put({**old, "status": {}})  # deallocated; unprepare not run yet
    writes = node.client.status_writes
    counted = [REGISTRY.get_sample_value(name) for name in PREPARE_SAMPLES]
    with pytest.raises(WaitForRelease, match=r"gpu-0 \(claim ns/old\)"):
        asyncio.run(preparer.sync("ns", "new", new))
    assert node.client.status_writes == writes  # no DeviceBusy for the binder to act on
    # Not a prepare attempt: neither an error nor a duration sample.
    assert [REGISTRY.get_sample_value(name) for name in PREPARE_SAMPLES] == counted
    assert set(node.checkpoint()) == {"uid-old"}

    asyncio.run(preparer.sync("ns", "old", released))  # the queued unprepare
    asyncio.run(preparer.sync("ns", "new", node.client.objects[("ns", "new")]))  # the retry
    assert set(node.checkpoint()) == {"uid-new"}
    assert new_conditions(node) == [("True", "Prepared")]


def test_a_deleted_holder_counts_as_released(tmp_path: Path) -> None:
    node, preparer, new = handover(tmp_path)
    del node.client.objects[("ns", "old")]
    with pytest.raises(WaitForRelease):
        asyncio.run(preparer.sync("ns", "new", new))


def test_a_device_its_claim_still_holds_is_reported_busy(tmp_path: Path) -> None:
    node, preparer, new = handover(tmp_path)  # "old" is still allocated and reserved
    asyncio.run(preparer.sync("ns", "new", new))
    assert new_conditions(node) == [("False", "DeviceBusy")]
    assert set(node.checkpoint()) == {"uid-old"}


def test_a_release_whose_unprepare_never_comes_is_reported_busy_after_the_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kdra.services.agent import prepare

    monkeypatch.setattr(prepare, "RELEASE_WAIT", 0.05)
    node, preparer, new = handover(tmp_path)
    old = node.client.objects[("ns", "old")]
    node.client.put({**old, "status": {}})
    with pytest.raises(WaitForRelease):
        asyncio.run(preparer.sync("ns", "new", new))
    time.sleep(0.06)
    asyncio.run(preparer.sync("ns", "new", new))
    assert new_conditions(node) == [("False", "DeviceBusy")]
    assert preparer._waiting == {}  # nothing kept for a claim no longer waiting
