"""The agent's health sources: the marks file (``kdra agent health mark``), the inventory's
verdict, and NVML health through a fake NVML module (XID events, ECC, retired pages, row
remapping, lost GPUs) — plus the real nvidia-ml-py with no NVML library on this machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdra.agent.backends.nvml_health import NvmlHealth, classify_xid
from kdra.agent.core.backend import DiscoveryError
from kdra.agent.core.health import Health, Observation
from kdra.agent.core.inventory import parse_inventory
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice
from kdra.agent.health import (
    InventoryHealth,
    Mark,
    MarksError,
    MarksFile,
    observe_all,
    parse_marks,
    worst,
    write_mark,
)

GPU = "gpu.kdra.dev"

# --------------------------------------------------------------------------- marks file


def test_mark_round_trip_and_healthy_removes(tmp_path: Path) -> None:
    path = tmp_path / "marks.json"
    write_mark(path, Mark("n1", GPU, "gpu-0", Health.DEGRADED, "MarkedUnhealthy"))
    write_mark(path, Mark("*", GPU, "gpu-1", Health.LOST, "MarkedLost"))
    marks = MarksFile(path)
    assert marks.observe("n1", Inventory()) == {
        (GPU, "gpu-0"): Observation(Health.DEGRADED, "MarkedUnhealthy"),
        (GPU, "gpu-1"): Observation(Health.LOST, "MarkedLost")}
    assert marks.observe("n2", Inventory()) == {
        (GPU, "gpu-1"): Observation(Health.LOST, "MarkedLost")}
    left = write_mark(path, Mark("n1", GPU, "gpu-0", Health.HEALTHY, ""))
    assert [m.device for m in left] == ["gpu-1"]
    assert (GPU, "gpu-0") not in marks.observe("n1", Inventory())


def test_marking_twice_replaces(tmp_path: Path) -> None:
    path = tmp_path / "marks.json"
    write_mark(path, Mark("n1", GPU, "gpu-0", Health.DEGRADED, "A"))
    write_mark(path, Mark("n1", GPU, "gpu-0", Health.LOST, "B"))
    assert [(m.health, m.reason) for m in parse_marks(path.read_bytes())] == [
        (Health.LOST, "B")]


def test_missing_file_is_no_marks(tmp_path: Path) -> None:
    assert MarksFile(tmp_path / "absent.json").observe("n1", Inventory()) == {}


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not JSON"),
    ("[]", "version"),
    ('{"version": 2}', "version"),
    ('{"version": 1, "marks": {}}', "marks: expected a list"),
    ('{"version": 1, "marks": [1]}', "marks[0]: expected an object"),
    ('{"version": 1, "marks": [{"node": "n", "driver": "d", "device": ""}]}',
     "marks[0].device"),
    ('{"version": 1, "marks": [{"node": "n", "driver": "d", "device": "x", '
     '"health": "sick"}]}', "marks[0].health"),
    ('{"version": 1, "marks": [{"node": "n", "driver": "d", "device": "x", '
     '"health": "lost", "reason": 5}]}', "marks[0].reason"),
])
def test_malformed_marks_name_the_field(text: str, message: str) -> None:
    with pytest.raises(MarksError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_marks(text)


def test_a_malformed_file_counts_as_no_marks_and_recovers(tmp_path: Path) -> None:
    path = tmp_path / "marks.json"
    write_mark(path, Mark("n1", GPU, "gpu-0", Health.LOST, "X"))
    marks = MarksFile(path)
    assert marks.observe("n1", Inventory())
    path.write_text("garbage that is longer than before")
    assert marks.observe("n1", Inventory()) == {}
    with pytest.raises(MarksError):
        write_mark(path, Mark("n1", GPU, "gpu-0", Health.LOST, "X"))
    path.unlink()
    write_mark(path, Mark("n1", GPU, "gpu-0", Health.LOST, "X"))
    assert marks.observe("n1", Inventory())


def test_reasons_become_label_values(tmp_path: Path) -> None:
    path = tmp_path / "marks.json"
    path.write_text(json.dumps({"version": 1, "marks": [
        {"node": "n", "driver": GPU, "device": "gpu-0", "health": "unhealthy",
         "reason": "fan broken!"}]}))
    assert MarksFile(path).observe("n", Inventory())[(GPU, "gpu-0")].reason == "fan-broken"


# --------------------------------------------------------------------------- combining


def test_inventory_health_and_worst() -> None:
    inventory = parse_inventory("gpus: [{profile: L4-24GB, count: 2, unhealthy: [1]}]", "n")
    seen = InventoryHealth().observe("n", inventory)
    assert seen == {(GPU, "gpu-1"): Observation(Health.DEGRADED,
                                                "marked-unhealthy-in-the-inventory")}
    lost = {(GPU, "gpu-1"): Observation(Health.LOST, "X")}
    assert worst(seen, lost) == lost
    assert worst(lost, seen) == lost


def test_a_failing_source_does_not_hide_the_others() -> None:
    class Broken:
        description = "broken"

        def observe(self, node: str, inventory: Inventory) -> dict[Any, Observation]:
            raise RuntimeError("boom")

    inventory = Inventory((InventoryDevice(GPU, "gpu-0", healthy=False, health_reason="x"),))
    assert observe_all([Broken(), InventoryHealth()], "n", inventory) == {
        (GPU, "gpu-0"): Observation(Health.DEGRADED, "x")}


# --------------------------------------------------------------------------- NVML


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class Event:
    def __init__(self, device: str, kind: int, data: int) -> None:
        self.device, self.eventType, self.eventData = device, kind, data


class FakeNvml:
    """nvidia-ml-py's documented health calls, for GPUs given as dicts."""

    NVMLError = FakeNVMLError
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    nvmlEventTypeDoubleBitEccError = 0x2
    nvmlEventTypeXidCriticalError = 0x8
    nvmlEventTypeGpuUnavailableError = 0x4000

    def __init__(self, gpus: dict[str, dict[str, Any]], *, events: bool = True) -> None:
        self.gpus = gpus
        self.events_supported = events
        self.queue: list[Event] = []
        self.registered: dict[str, int] = {}
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        pass

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlEventSetFree(self, event_set: str) -> None:
        pass

    def _gpu(self, uuid: str) -> dict[str, Any]:
        gpu = self.gpus.get(uuid)
        if gpu is None:
            raise FakeNVMLError(self.NVML_ERROR_NOT_FOUND)
        if gpu.get("lost"):
            raise FakeNVMLError(self.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self._gpu(uuid)
        return uuid

    def nvmlDeviceGetUUID(self, handle: str) -> bytes:
        return handle.encode()

    def nvmlDeviceGetSupportedEventTypes(self, handle: str) -> int:
        if not self.events_supported:
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return 0xFFFF

    def nvmlDeviceRegisterEvents(self, handle: str, kinds: int, event_set: str) -> None:
        self.registered[handle] = kinds

    def nvmlEventSetWait_v2(self, event_set: str, timeout_ms: int) -> Event:
        assert timeout_ms == 0  # never blocks the poll
        if not self.queue:
            raise FakeNVMLError(self.NVML_ERROR_TIMEOUT)
        return self.queue.pop(0)

    def _query(self, handle: str, name: str, default: Any) -> Any:
        gpu = self._gpu(handle)
        value = gpu.get(name, default)
        if value == "unsupported":
            raise FakeNVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        return value

    def nvmlDeviceGetTotalEccErrors(self, handle: str, kind: int, counter: int) -> int:
        assert (kind, counter) == (1, 0)
        return int(self._query(handle, "ecc", 0))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: str) -> int:
        return int(self._query(handle, "pending", 0))

    def nvmlDeviceGetRemappedRows(self, handle: str) -> tuple[int, int, int, int]:
        rows: tuple[int, int, int, int] = self._query(handle, "rows", (0, 0, 0, 0))
        return rows


A, B = "GPU-aaaa", "GPU-bbbb"


def gpu_inventory(*uuids: str) -> Inventory:
    return Inventory(tuple(
        InventoryDevice(GPU, f"gpu-{i}", attributes={"uuid": {"string": uuid}})
        for i, uuid in enumerate(uuids)))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("gpu", "expected"), [
    ({}, None),
    ({"ecc": 2}, Observation(Health.DEGRADED, "ECC-uncorrectable")),
    ({"pending": 1}, Observation(Health.DEGRADED, "RetiredPagesPending")),
    ({"rows": (0, 0, 1, 0)}, Observation(Health.DEGRADED, "RowRemapPending")),
    ({"rows": (0, 0, 0, 1)}, Observation(Health.DEGRADED, "RowRemapFailure")),
    ({"ecc": "unsupported", "pending": "unsupported", "rows": "unsupported"}, None),
    ({"lost": True}, Observation(Health.LOST, "DeviceLost")),
])
def test_polled_health(gpu: dict[str, Any], expected: Observation | None) -> None:
    nvml = FakeNvml({A: gpu, B: {}})
    seen = NvmlHealth(nvml=nvml).observe("n", gpu_inventory(A, B))
    assert seen.get((GPU, "gpu-0")) == expected
    assert (GPU, "gpu-1") not in seen


def test_a_gpu_that_vanished_is_lost() -> None:
    seen = NvmlHealth(nvml=FakeNvml({})).observe("n", gpu_inventory(A))
    assert seen == {(GPU, "gpu-0"): Observation(Health.LOST, "DeviceLost")}


def test_xid_events_are_held_then_expire() -> None:
    nvml = FakeNvml({A: {}, B: {}})
    clock = Clock()
    health = NvmlHealth(nvml=nvml, xid_hold=60, clock=clock)
    inventory = gpu_inventory(A, B)
    assert health.observe("n", inventory) == {}
    assert nvml.registered == {A: 0x4000 | 0x8 | 0x2, B: 0x4000 | 0x8 | 0x2}
    nvml.queue = [Event(A, 0x8, 48), Event(B, 0x8, 13)]  # 13: the application's fault
    assert health.observe("n", inventory) == {
        (GPU, "gpu-0"): Observation(Health.DEGRADED, "XID-48")}
    clock.now = 59
    assert (GPU, "gpu-0") in health.observe("n", inventory)
    clock.now = 61
    assert health.observe("n", inventory) == {}


def test_xid_79_and_unavailable_mean_lost() -> None:
    nvml = FakeNvml({A: {}, B: {}})
    health = NvmlHealth(nvml=nvml)
    inventory = gpu_inventory(A, B)
    health.observe("n", inventory)
    nvml.queue = [Event(A, 0x8, 79), Event(B, 0x4000, 0)]
    seen = health.observe("n", inventory)
    assert seen[(GPU, "gpu-0")] == Observation(Health.LOST, "XID-79")
    assert seen[(GPU, "gpu-1")] == Observation(Health.LOST, "GPU-unavailable")


def test_gpus_without_events_are_polled() -> None:
    nvml = FakeNvml({A: {"ecc": 1}}, events=False)
    seen = NvmlHealth(nvml=nvml).observe("n", gpu_inventory(A))
    assert nvml.registered == {}
    assert seen == {(GPU, "gpu-0"): Observation(Health.DEGRADED, "ECC-uncorrectable")}


@pytest.mark.parametrize(("xid", "expected"), [
    (13, None), (31, None), (43, None), (45, None), (68, None), (109, None),
    (48, Health.DEGRADED), (63, Health.DEGRADED), (64, Health.DEGRADED),
    (74, Health.DEGRADED), (94, Health.DEGRADED), (95, Health.DEGRADED),
    (79, Health.LOST),
])
def test_xid_table(xid: int, expected: Health | None) -> None:
    seen = classify_xid(xid)
    assert (seen.health if seen else None) == expected


def test_without_the_nvml_library_the_message_is_clear() -> None:
    """The real nvidia-ml-py on a machine without NVIDIA's driver (this one): a clear error,
    not a crash or a ctypes trace."""
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:  # pragma: no cover - a machine with a GPU driver
        pynvml.nvmlShutdown()
        pytest.skip("NVML is present on this machine")
    with pytest.raises(DiscoveryError, match="NVML is not usable for health checks: "
                                             "NVML Shared Library Not Found"):
        NvmlHealth(nvml=pynvml).observe("n", gpu_inventory(A))


# --------------------------------------------------------------------------- one node's loop


def test_node_health_applies_at_once_first_then_debounces(tmp_path: Path) -> None:
    import datetime as dt

    from kdra.agent.core.nodeprep import DeviceOutcome, device_statuses
    from kdra.agent.node_health import NodeHealth

    marks = tmp_path / "marks.json"
    clock = Clock()
    inventory = parse_inventory("gpus: [{profile: L4-24GB, count: 3, unhealthy: [0]}]", "n")
    health = NodeHealth("n", (InventoryHealth(), MarksFile(marks)), debounce=5, settle=10,
                        clock=clock, wall=lambda: dt.datetime(2026, 12, 2, tzinfo=dt.UTC))
    first = health.check(inventory)
    assert [(t.device, t.after) for t in first] == [((GPU, "gpu-0"), Health.DEGRADED)]
    gpu0, gpu1, _ = inventory.devices
    (taint,) = health.tainted(gpu0).taints
    assert (taint.effect, taint.time_added) == ("NoSchedule", "2026-12-02T00:00:00Z")
    assert health.tainted(gpu1).taints == ()
    assert health.counts(inventory) == (2, 1)

    write_mark(marks, Mark("n", GPU, "gpu-1", Health.LOST, "MarkedLost"))
    clock.now = 1
    assert health.check(inventory) == []  # debounced
    clock.now = 6
    assert [(t.device, t.after) for t in health.check(inventory)] == [
        ((GPU, "gpu-1"), Health.LOST)]
    assert health.tainted(gpu1).taints[0].effect == "NoExecute"
    healthy, reason, message = health.condition(GPU, "gpu-1")
    assert (healthy, reason) == (False, "MarkedLost") and "NoExecute" in message
    assert health.condition(GPU, "gpu-2")[0] is True

    entry, = device_statuses([DeviceOutcome(GPU, "n", "gpu-1", True, "Prepared", "ok",
                                            health=health.condition(GPU, "gpu-1"))],
                             now="2026-12-02T00:00:06Z")
    assert [(c["type"], c["status"], c["reason"]) for c in entry["conditions"]] == [
        ("Ready", "True", "Prepared"), ("Healthy", "False", "MarkedLost")]


def test_a_mark_on_a_gpu_taints_its_partitions(tmp_path: Path) -> None:
    from kdra.agent.node_health import NodeHealth

    marks = tmp_path / "marks.json"
    inventory = parse_inventory("gpus: [{profile: A100-40GB, count: 2, partitions: mig}]", "n")
    health = NodeHealth("n", (InventoryHealth(), MarksFile(marks)), debounce=0, settle=0,
                        clock=Clock())
    write_mark(marks, Mark("n", GPU, "gpu-1", Health.LOST, "MarkedLost"))
    health.check(inventory)
    tainted = {d.name for d in map(health.tainted, inventory.devices) if d.taints}
    assert tainted == {d.name for d in inventory.devices
                       if d.name == "gpu-1" or d.parent == "gpu-1"}
    assert len(tainted) == 15
    sick = next(d for d in inventory.devices if d.parent == "gpu-1")
    healthy, reason, _ = health.condition(GPU, sick.name, sick.parent)
    assert (healthy, reason) == (False, "MarkedLost")
    assert health.condition(GPU, sick.name)[0] is True  # without its parent: its own health
