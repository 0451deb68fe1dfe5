"""NVML discovery through a fake NVML module: two GPU models, a failing GPU, a lost GPU (the
nvml backend); the fake-gpu backend's file signature."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from kdra.agent.backends.fake_gpu import FakeGpuBackend
from kdra.agent.backends.inventory_file import InventoryFile
from kdra.agent.backends.nvml import NvmlBackend
from kdra.agent.core.backend import DiscoveryError
from kdra.agent.core.health import Health
from kdra.agent.core.publication import build_slices
from kdra.agent.health import InventoryHealth
from kdra.dra.models import parse_slice


class FakeNVMLError(Exception):
    pass


class PciInfo:
    def __init__(self, bus_id: bytes) -> None:
        self.busId = bus_id


class Memory:
    def __init__(self, total: int) -> None:
        self.total = total


H100 = {"name": b"NVIDIA H100 80GB HBM3", "uuid": "GPU-11111111-2222-3333-4444-555555555555",
        "brand": 14, "arch": 9, "cc": (9, 0), "bus": b"00000000:1A:00.0", "minor": 0,
        "memory": 85520809984}
A100 = {"name": "NVIDIA A100-SXM4-40GB", "uuid": "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
        "brand": 2, "arch": 7, "cc": (8, 0), "bus": b"00000000:3B:00.0", "minor": 4,
        "memory": 42949672960}


class FakeNvml:
    """The subset of pynvml the agent calls. ``fail`` names calls that raise for one GPU."""

    NVMLError = FakeNVMLError
    NVML_BRAND_UNKNOWN = 0
    NVML_BRAND_TESLA = 2
    NVML_BRAND_NVIDIA = 14
    NVML_BRAND_COUNT = 18
    NVML_DEVICE_ARCH_AMPERE = 7
    NVML_DEVICE_ARCH_HOPPER = 9

    def __init__(self, gpus: list[dict[str, Any]], *, init_fails: bool = False) -> None:
        self.gpus = gpus
        self.init_fails = init_fails
        self.inits = 0
        self.shutdowns = 0

    def _gpu(self, handle: int, call: str) -> dict[str, Any]:
        gpu = self.gpus[handle]
        if call in gpu.get("fail", ()):
            raise FakeNVMLError(f"{call}: GPU is lost")
        return gpu

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise FakeNVMLError("Driver Not Loaded")
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "535.104.05"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._gpu(index, "handle")
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return str(self._gpu(handle, "uuid")["uuid"])

    def nvmlDeviceGetName(self, handle: int) -> Any:
        return self._gpu(handle, "name")["name"]

    def nvmlDeviceGetBrand(self, handle: int) -> int:
        return int(self._gpu(handle, "brand")["brand"])

    def nvmlDeviceGetArchitecture(self, handle: int) -> int:
        return int(self._gpu(handle, "arch")["arch"])

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        cc: tuple[int, int] = self._gpu(handle, "cc")["cc"]
        return cc

    def nvmlDeviceGetPciInfo(self, handle: int) -> PciInfo:
        return PciInfo(self._gpu(handle, "pci")["bus"])

    def nvmlDeviceGetMinorNumber(self, handle: int) -> int:
        return int(self._gpu(handle, "minor")["minor"])

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Memory:
        return Memory(self._gpu(handle, "memory")["memory"])


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A sysfs with the H100 behind root complex pci0000:17 on NUMA node 1."""
    device = tmp_path / "devices" / "pci0000:17" / "0000:17:01.0" / "0000:1a:00.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    links = tmp_path / "bus" / "pci" / "devices"
    links.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:17/0000:17:01.0/0000:1a:00.0", links / "0000:1a:00.0")
    return tmp_path


def test_two_gpu_models(sysfs: Path) -> None:
    nvml = FakeNvml([H100, A100])
    inventory = NvmlBackend(nvml=nvml, sysfs=sysfs).discover("node-1")
    h100, a100 = inventory.devices
    assert (h100.name, a100.name) == ("gpu-0", "gpu-1")
    assert {k: h100.attribute(k) for k in h100.attributes} == {
        "type": "gpu", "uuid": H100["uuid"], "productName": "NVIDIA H100 80GB HBM3",
        "brand": "Nvidia", "architecture": "Hopper", "cudaComputeCapability": "9.0.0",
        "driverVersion": "535.104.5", "cudaDriverVersion": "12.2.0",
        "pciBusID": "0000:1a:00.0", "index": 0, "minor": 0,
        "pcieRoot": "pci0000:17", "numaNode": 1,
    }
    assert h100.attributes["driverVersion"] == {"version": "535.104.5"}
    assert h100.capacity == {"memory": "81559Mi"}
    assert h100.device_nodes == ("/dev/nvidia0",)
    assert a100.attribute("brand") == "Tesla" and a100.attribute("architecture") == "Ampere"
    assert a100.attribute("minor") == 4 and a100.device_nodes == ("/dev/nvidia4",)
    assert a100.capacity == {"memory": "40Gi"}
    assert "pcieRoot" not in a100.attributes and "numaNode" not in a100.attributes  # no sysfs
    assert all(device.healthy for device in inventory.devices)
    for obj in build_slices(node="node-1", driver="gpu.kdra.dev", devices=inventory.devices,
                            generation=0):
        parse_slice(obj)


def test_a_failing_gpu_is_marked_unhealthy_not_a_crash(tmp_path: Path) -> None:
    broken = {**A100, "fail": {"memory"}}
    inventory = NvmlBackend(nvml=FakeNvml([H100, broken]), sysfs=tmp_path).discover("n")
    assert [d.healthy for d in inventory.devices] == [True, False]
    bad = inventory.devices[1]
    assert bad.name == "gpu-1" and bad.attribute("uuid") == A100["uuid"]
    assert "GPU is lost" in bad.health_reason
    # Issue 25: published, and the agent's health loop sees it degraded (it gets the taint).
    slices = build_slices(node="n", driver="gpu.kdra.dev", devices=inventory.devices,
                          generation=0)
    assert [d["name"] for d in slices[0]["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    seen = InventoryHealth().observe("n", inventory)
    assert list(seen) == [("gpu.kdra.dev", "gpu-1")]
    assert seen[("gpu.kdra.dev", "gpu-1")].health is Health.DEGRADED


def test_a_gpu_nvml_cannot_identify_is_skipped(tmp_path: Path) -> None:
    lost = {**H100, "fail": {"handle"}}
    inventory = NvmlBackend(nvml=FakeNvml([lost, A100]), sysfs=tmp_path).discover("n")
    assert [d.name for d in inventory.devices] == ["gpu-1"]


def test_unsupported_enum_queries_are_unknown_not_unhealthy(tmp_path: Path) -> None:
    old = {**A100, "fail": {"arch", "brand"}}
    device = NvmlBackend(nvml=FakeNvml([old]), sysfs=tmp_path).discover("n").devices[0]
    assert device.healthy
    assert device.attribute("architecture") == "Unknown" and device.attribute("brand") == "Unknown"


def test_nvml_unusable_is_a_discovery_error(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="Driver Not Loaded"):
        NvmlBackend(nvml=FakeNvml([], init_fails=True), sysfs=tmp_path).discover("n")


def test_init_once_and_shutdown(tmp_path: Path) -> None:
    nvml = FakeNvml([H100])
    discovery = NvmlBackend(nvml=nvml, sysfs=tmp_path)
    discovery.discover("n")
    discovery.discover("n")
    discovery.close()
    assert (nvml.inits, nvml.shutdowns) == (1, 1)
    assert discovery.signature() is None  # health can change: always ask again


def test_fake_discovery_signature_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text("gpus: ['1 x T4-16GB']\n")
    discovery = FakeGpuBackend(InventoryFile(path))
    first = discovery.signature()
    assert len(discovery.discover("n").devices) == 1
    path.write_text("gpus: ['2 x T4-16GB']\n")
    assert discovery.signature() != first
    assert len(discovery.discover("n").devices) == 2


# --------------------------------------------------------------------------- MIG


class Placement:
    def __init__(self, start: int, size: int) -> None:
        self.start = start
        self.size = size


class Info:
    def __init__(self, placement: Placement) -> None:
        self.placement = placement


class Attributes:
    def __init__(self, slices: int) -> None:
        self.gpuInstanceSliceCount = slices


class FakeMigNvml(FakeNvml):
    """GPUs with ``mig``: a list of (uuid, compute slices, first memory slice, memory slices)
    in NVML's MIG device slots (None: an empty slot); ``mig_mode`` per GPU (absent: the call
    is not supported, as on GPUs without MIG)."""

    NVML_DEVICE_MIG_ENABLE = 1

    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]:
        gpu = self.gpus[handle]
        if "mig_mode" not in gpu:
            raise FakeNVMLError("Not Supported")
        return gpu["mig_mode"], gpu["mig_mode"]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        return len(self.gpus[handle].get("mig", ()))

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, slot: int) -> tuple[int, int]:
        if self.gpus[handle]["mig"][slot] is None:
            raise FakeNVMLError("Not Found")
        return (handle, slot)

    def _mig(self, mig: tuple[int, int]) -> tuple[str, int, int, int]:
        entry: tuple[str, int, int, int] = self.gpus[mig[0]]["mig"][mig[1]]
        return entry

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        if isinstance(handle, tuple):
            return self._mig(handle)[0]
        return super().nvmlDeviceGetUUID(handle)

    def nvmlDeviceGetAttributes(self, mig: tuple[int, int]) -> Attributes:
        return Attributes(self._mig(mig)[1])

    def nvmlDeviceGetGpuInstanceId(self, mig: tuple[int, int]) -> int:
        return mig[1]

    def nvmlDeviceGetGpuInstanceById(self, handle: int, instance: int) -> tuple[int, int]:
        return (handle, instance)

    def nvmlGpuInstanceGetInfo(self, instance: tuple[int, int]) -> Info:
        _, _, start, size = self._mig(instance)
        return Info(Placement(start, size))


def test_a_gpu_in_mig_mode_publishes_the_mig_devices_that_exist(tmp_path: Path) -> None:
    mig = {**H100, "mig_mode": 1, "mig": [
        ("MIG-aaaa", 3, 4, 4),   # 3g.40gb at memory slice 4
        None,                    # an empty slot
        ("MIG-bbbb", 1, 0, 1),   # 1g.10gb at 0
        ("MIG-cccc", 1, 2, 2),   # 1g.20gb: a profile kdra does not model, skipped
    ]}
    off = {**H100, "uuid": "GPU-22222222-2222-3333-4444-555555555555", "mig_mode": 0,
           "mig": [("MIG-dddd", 7, 0, 8)]}
    inventory = NvmlBackend(nvml=FakeMigNvml([mig, off, A100]),
                              sysfs=tmp_path).discover("n")
    names = [d.name for d in inventory.devices]
    assert names == ["gpu-0-mig-1g-10gb-0", "gpu-0-mig-3g-40gb-4", "gpu-1", "gpu-2"]
    small, big = inventory.devices[:2]
    assert (small.attribute("uuid"), big.attribute("uuid")) == ("MIG-bbbb", "MIG-aaaa")
    assert big.attribute("type") == "mig" and big.attribute("parentUUID") == H100["uuid"]
    assert big.parent == "gpu-0" and big.device_nodes == ("/dev/nvidia0",)
    assert [c.name for c in small.counter_sets] == ["gpu-0"]  # the GPU's set, once
    assert inventory.devices[2].consumes_counters == ()  # MIG off: the whole GPU, as before
    slices = build_slices(node="n", driver="gpu.kdra.dev", devices=inventory.devices,
                          generation=0)
    for obj in slices:
        parse_slice(obj)
    assert any(obj["spec"].get("sharedCounters") for obj in slices)


def test_a_gpu_in_mig_mode_without_a_layout_publishes_nothing(tmp_path: Path) -> None:
    other = {**H100, "name": b"NVIDIA H200", "mig_mode": 1, "mig": [("MIG-x", 1, 0, 1)]}
    inventory = NvmlBackend(nvml=FakeMigNvml([other, A100]), sysfs=tmp_path).discover("n")
    assert [d.name for d in inventory.devices] == ["gpu-1"]
