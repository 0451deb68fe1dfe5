"""Prepare/unprepare on one node against an in-memory API (agent_prepare_helpers.py): CDI
files, checkpoint entries and the claim's device conditions, status writes and conflicts,
other drivers' entries, and a device handed from one claim to the next. Crashes and the
checkpoint on disk: test_agent_prepare_checkpoint.py."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.prepare import Preparer, WaitForRelease
from kdra.kube.workqueue import Retry
from tests.unit.agent.prepare_helpers import (
    NODE,
    UID,
    Node,
    claim_obj,
    ready,
    sync,
)


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
        backends=node.backends,
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
    from kdra.agent import prepare

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


def test_a_claim_being_deleted_keeps_its_devices_and_gets_no_status_write(
        tmp_path: Path) -> None:
    # Issue 42: deleting a claim bumps its generation. The agent re-reporting each device's
    # observedGeneration was a third status write per pod in the steady workloads, and made the
    # claim controller's finalizer removal conflict. A claim being deleted stays prepared while
    # it is reserved (its pod may still run) and gets no new status; once gone, it is
    # unprepared.
    node = Node(tmp_path)
    node.client.put(claim_obj(["gpu-1"]))
    preparer = node.preparer()
    sync(preparer, node)
    assert ready(node) == [("gpu-1", "True")]
    writes = node.client.status_writes
    terminating = node.claim()
    assert terminating is not None
    terminating["metadata"] = {**terminating["metadata"], "deletionTimestamp":
                               "2026-12-05T00:00:00Z", "generation": 2}
    node.client.put(terminating)
    sync(preparer, node)
    assert node.client.status_writes == writes
    assert node.checkpoint()[UID]["state"] == "prepared"
    unreserved = {**terminating, "status": {**terminating["status"], "reservedFor": []}}
    node.client.put(unreserved)
    sync(preparer, node)
    assert node.client.status_writes == writes  # its entries are not removed either
    assert node.checkpoint() == {} and node.cdi_files() == []
