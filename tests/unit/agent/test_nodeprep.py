"""Which claims a node prepares, CDI spec content, the checkpoint model, status entries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kdra.agent.backends.registry import make_backends
from kdra.agent.core.cdi import build_cdi_spec, cdi_device_id, cdi_file_name, cdi_kind
from kdra.agent.core.checkpoint import Checkpoint, CheckpointCorrupt, ClaimEntry, ClaimRef
from kdra.agent.core.inventory_devices import InventoryDevice
from kdra.agent.core.nodeprep import (
    DeviceOutcome,
    Result,
    device_statuses,
    merge_device_statuses,
    our_results,
    prepared_devices,
    ready_outcomes,
    wants_prepared,
)
from kdra.agent.settings import AgentSettings
from tests.unit.agent.prepare_helpers import discovered

GPU = "gpu.kdra.dev"
CATS = "resource-driver.example.com"
UID = "0f6c3a52-5d0e-4d5b-9d7e-0123456789ab"


def claim(results: list[tuple[str, str, str]], reserved: bool = True,
          devices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if results:
        status["allocation"] = {"devices": {"results": [
            {"request": f"req-{i}", "driver": d, "pool": p, "device": dev}
            for i, (d, p, dev) in enumerate(results)]}}
    if reserved and results:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "pod-uid"}]
    if devices is not None:
        status["devices"] = devices
    return {"metadata": {"name": "c", "namespace": "ns", "uid": UID, "generation": 1},
            "status": status}


def test_our_results_filter_driver_and_pool() -> None:
    obj = claim([(GPU, "node-1", "gpu-0"), (GPU, "node-2", "gpu-0"), (CATS, "node-1", "kitten-1"),
                 ("other.example.com", "node-1", "x")])
    assert our_results(obj, "node-1", [GPU, CATS]) == [
        Result("req-0", GPU, "node-1", "gpu-0"), Result("req-2", CATS, "node-1", "kitten-1")]
    assert wants_prepared(obj, "node-1", [GPU])
    assert not wants_prepared(obj, "node-3", [GPU])
    assert not wants_prepared(claim([(GPU, "node-1", "gpu-0")], reserved=False), "node-1", [GPU])
    assert not wants_prepared(claim([]), "node-1", [GPU])
    assert not wants_prepared(None, "node-1", [GPU])


BACKENDS, _ = discovered("")  # fake-gpu, generic


def gpus(node: str = "node-1") -> dict[tuple[str, str], InventoryDevice]:
    _, inventory = discovered("gpus: ['4 x H100-80GB']", node)
    return {(d.driver, d.name): d for d in inventory.devices}


def test_gpu_cdi_spec() -> None:
    ref = ClaimRef(UID, "ns", "c")
    devices = gpus()
    chosen = [devices[(GPU, "gpu-1")], devices[(GPU, "gpu-3")]]
    spec = build_cdi_spec(node="node-1", claim=ref, driver=GPU, devices=chosen,
                          backends=BACKENDS)
    uuids = [d.attribute("uuid") for d in chosen]
    assert spec == {
        "cdiVersion": "0.6.0",
        "kind": "kdra.dev/gpu",
        "annotations": {"kdra.dev/node": "node-1", "kdra.dev/claim": "ns/c",
                        "kdra.dev/claim-uid": UID, "kdra.dev/driver": GPU},
        "devices": [
            {"name": f"{UID}-gpu-1", "containerEdits": {
                "env": [f"KDRA_DEVICE_GPU_1={GPU}/node-1/gpu-1", "KDRA_DEVICE_GPU_1_CLAIM=ns/c",
                        f"KDRA_DEVICE_GPU_1_UUID={uuids[0]}"],
                "deviceNodes": [{"path": "/dev/kdra/gpu-1", "type": "c", "major": 1,
                                 "minor": 3, "fileMode": 0o666}]}},
            {"name": f"{UID}-gpu-3", "containerEdits": {
                "env": [f"KDRA_DEVICE_GPU_3={GPU}/node-1/gpu-3", "KDRA_DEVICE_GPU_3_CLAIM=ns/c",
                        f"KDRA_DEVICE_GPU_3_UUID={uuids[1]}"],
                "deviceNodes": [{"path": "/dev/kdra/gpu-3", "type": "c", "major": 1,
                                 "minor": 3, "fileMode": 0o666}]}},
        ],
        # KDRA_DEVICES / NVIDIA_VISIBLE_DEVICES list a container's devices of every claim:
        # the NRI plugin sets them (a spec's env would replace another claim's)
        "containerEdits": {"env": ["KDRA_NODE_NAME=node-1"]},
    }
    assert cdi_file_name(GPU, UID) == f"kdra.dev-{UID}.json"
    assert cdi_device_id(GPU, UID, "gpu-1") == f"kdra.dev/gpu={UID}-gpu-1"


def test_real_gpus_get_device_nodes_and_other_drivers_their_own_kind() -> None:
    nvml = make_backends(AgentSettings(), ["n"])  # NVML is not asked: nothing is discovered
    real = InventoryDevice(GPU, "gpu-0", {"uuid": {"string": "GPU-x"}},
                           device_nodes=("/dev/nvidia0",), backend="nvml")
    spec = build_cdi_spec(node="n", claim=ClaimRef(UID, "ns", "c"), driver=GPU, devices=[real],
                          backends=nvml)
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}]
    cat = InventoryDevice(CATS, "kitten-1", {"color": {"string": "black"}}, backend="generic")
    spec = build_cdi_spec(node="n", claim=ClaimRef(UID, "ns", "c"), driver=CATS, devices=[cat],
                          backends=BACKENDS)
    assert spec["kind"] == cdi_kind(CATS) == "kdra.dev/resource-driver-example-com"
    assert spec["devices"][0]["containerEdits"] == {"env": [  # cats: env only
        f"KDRA_DEVICE_KITTEN_1={CATS}/n/kitten-1", "KDRA_DEVICE_KITTEN_1_CLAIM=ns/c",
        "KDRA_DEVICE_KITTEN_1_COLOR=black"]}
    assert spec["containerEdits"] == {"env": ["KDRA_NODE_NAME=n"]}
    assert cdi_file_name(CATS, UID) == f"kdra.dev-resource-driver-example-com-{UID}.json"


def entry(state: str = "prepared") -> ClaimEntry:
    ref = ClaimRef(UID, "ns", "c")
    devices = prepared_devices(ref, [Result("req-0", GPU, "node-1", "gpu-2")], gpus(),
                               backends=BACKENDS)
    return ClaimEntry(ref, state, devices, (cdi_file_name(GPU, UID),))  # type: ignore[arg-type]


def test_checkpoint_round_trip() -> None:
    checkpoint = Checkpoint("node-1").with_entry(entry()).with_entry(
        ClaimEntry(ClaimRef("uid-2", "ns", "d"), "preparing", (), ()))
    raw = checkpoint.encode()
    assert Checkpoint.decode(raw, "node-1") == checkpoint
    data = json.loads(raw)
    assert data["version"] == 1 and data["checksum"].startswith("sha256:")
    assert data["claims"][UID]["state"] == "prepared"
    assert data["claims"][UID]["devices"][0]["data"]["cdiDeviceIDs"] == [
        f"kdra.dev/gpu={UID}-gpu-2"]
    assert checkpoint.without(UID).by_key("ns", "c") == []
    assert checkpoint.by_key("ns", "d")[0].state == "preparing"


@pytest.mark.parametrize("damage", ["edited", "truncated", "other node", "not json", "version"])
def test_damaged_checkpoint_is_detected(damage: str) -> None:
    raw = Checkpoint("node-1").with_entry(entry()).encode()
    node = "node-1"
    if damage == "edited":
        raw = raw.replace(b'"prepared"', b'"preparing"')
    elif damage == "truncated":
        raw = raw[: len(raw) // 2]
    elif damage == "other node":
        node = "node-2"
    elif damage == "not json":
        raw = b"\x00\x01"
    else:
        raw = raw.replace(b'"version":1', b'"version":9')
        assert b'"version":9' in raw
    with pytest.raises(CheckpointCorrupt):
        Checkpoint.decode(raw, node)


def test_ready_status_entries() -> None:
    prepared = entry().devices
    entries = device_statuses(ready_outcomes(prepared), now="2024-01-01T00:00:00Z",
                              generation=1)
    assert entries == [{
        "driver": GPU, "pool": "node-1", "device": "gpu-2",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
                        "message": f"CDI devices: kdra.dev/gpu={UID}-gpu-2",
                        "lastTransitionTime": "2024-01-01T00:00:00Z", "observedGeneration": 1}],
        "data": {"uuid": gpus()[(GPU, "gpu-2")].attribute("uuid"),
                 "productName": "NVIDIA H100 80GB HBM3",
                 "cdiDeviceIDs": [f"kdra.dev/gpu={UID}-gpu-2"]},
    }]
    again = device_statuses(ready_outcomes(prepared), now="2024-02-02T00:00:00Z",
                            previous=entries, generation=1)
    assert again == entries  # no transition: same time, so re-reporting writes nothing
    failed = device_statuses([DeviceOutcome(GPU, "node-1", "gpu-2", False, "DeviceUnhealthy",
                                            "x")], now="2024-02-02T00:00:00Z", previous=entries)
    assert failed[0]["conditions"][0]["lastTransitionTime"] == "2024-02-02T00:00:00Z"


def test_healthy_is_written_once_a_problem_was_reported_and_stays_after_recovery() -> None:
    """A device nothing was reported about carries no ``Healthy`` condition (its absence says
    healthy, and keeps every write and watch event of the claim smaller); a problem writes
    ``Healthy=False``; the recovery keeps the condition, ``True`` again, with its own time."""
    def report(health: tuple[bool, str, str], now: str,
               previous: list[dict[str, Any]]) -> list[dict[str, Any]]:
        outcome = DeviceOutcome(GPU, "node-1", "gpu-2", True, "Prepared", "ok", health=health)
        return device_statuses([outcome], now=now, previous=previous)

    fine = (True, "Healthy", "no health source reports a problem")
    quiet = report(fine, "2024-01-01T00:00:00Z", [])
    assert [c["type"] for c in quiet[0]["conditions"]] == ["Ready"]
    assert report(fine, "2024-01-01T00:00:05Z", quiet) == quiet  # nothing to write
    lost = report((False, "MarkedLost", "lost"), "2024-01-02T00:00:00Z", quiet)
    assert [(c["type"], c["status"], c["reason"], c["lastTransitionTime"])
            for c in lost[0]["conditions"]] == [
        ("Ready", "True", "Prepared", "2024-01-01T00:00:00Z"),
        ("Healthy", "False", "MarkedLost", "2024-01-02T00:00:00Z")]
    back = report(fine, "2024-01-03T00:00:00Z", lost)
    assert [(c["type"], c["status"], c["lastTransitionTime"])
            for c in back[0]["conditions"]] == [
        ("Ready", "True", "2024-01-01T00:00:00Z"), ("Healthy", "True", "2024-01-03T00:00:00Z")]
    assert report(fine, "2024-01-04T00:00:00Z", back) == back


def test_merge_keeps_entries_of_other_drivers_and_nodes() -> None:
    existing = [{"driver": "net.example.com", "pool": "node-1", "device": "nic-0"},
                {"driver": GPU, "pool": "node-1", "device": "gpu-9"},
                {"driver": GPU, "pool": "node-2", "device": "gpu-0"}]
    ours = [{"driver": GPU, "pool": "node-1", "device": "gpu-2"}]
    assert merge_device_statuses(existing, ours, node="node-1", drivers=[GPU]) == [
        existing[0], existing[2], ours[0]]
    assert merge_device_statuses(existing, [], node="node-1", drivers=[GPU]) == [
        existing[0], existing[2]]


def test_busy_devices_and_admin_access() -> None:
    """A device prepared for one claim is busy for every other claim, unless prepared for an
    adminAccess request; the claim's own devices are never busy for itself."""
    from kdra.agent.core.checkpoint import Checkpoint, PreparedDevice
    from kdra.agent.core.nodeprep import admin_requests, busy_devices

    held = PreparedDevice("gpu", GPU, "n", "gpu-0")
    watched = PreparedDevice("mon", GPU, "n", "gpu-1", admin_access=True)
    checkpoint = Checkpoint("n").with_entry(
        ClaimEntry(ClaimRef("uid-1", "ns", "a"), "prepared", (held, watched), ()))
    assert busy_devices(checkpoint, "uid-2") == {(GPU, "n", "gpu-0"): ClaimRef("uid-1", "ns", "a")}
    assert busy_devices(checkpoint, "uid-1") == {}
    assert PreparedDevice.from_json(watched.to_json()).admin_access
    assert "adminAccess" not in held.to_json()
    claim = {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": GPU}},
        {"name": "mon", "exactly": {"deviceClassName": GPU, "adminAccess": True}}]}}}
    assert admin_requests(claim) == frozenset({"mon"})


def test_a_holder_still_holds_a_device_only_while_its_newest_version_allocates_it() -> None:
    from kdra.agent.core.nodeprep import still_holds

    holder = ClaimRef(UID, "ns", "c")
    device = (GPU, "node-1", "gpu-0")
    held = claim([device])
    assert still_holds(held, holder, device, "node-1", [GPU])
    assert not still_holds(None, holder, device, "node-1", [GPU])  # deleted
    replaced = {**held, "metadata": {**held["metadata"], "uid": "another-uid"}}
    assert not still_holds(replaced, holder, device, "node-1", [GPU])
    assert not still_holds(claim([]), holder, device, "node-1", [GPU])  # deallocated
    assert not still_holds(claim([device], reserved=False), holder, device, "node-1", [GPU])
    assert not still_holds(claim([(GPU, "node-1", "gpu-1")]), holder, device, "node-1", [GPU])
