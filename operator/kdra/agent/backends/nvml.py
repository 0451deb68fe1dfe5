"""The ``nvml`` backend: real NVIDIA GPUs through NVML (nvidia-ml-py) — discovery, MIG and
health.

Its devices have the shape the ``fake-gpu`` backend gives its profiles (names ``gpu-<index>``,
NVIDIA's attribute names, capacity ``memory``), so nothing downstream knows which one ran; what
both do with a prepared GPU (data, CDI edits, ``NVIDIA_VISIBLE_DEVICES``) is
:class:`~kdra.agent.core.gpu_backend.GpuBackend`'s. A GPU in MIG mode is published as its
existing MIG devices (:mod:`kdra.agent.backends.nvml_mig`); health is
:mod:`kdra.agent.backends.nvml_health`'s (XIDs, ECC, lost GPUs), asked from a worker thread.

Invariants:
- NVML is reached only through the module object handed in (``pynvml`` by default, imported
  lazily): tests inject a fake, and a machine without GPUs never imports it unless asked.
- One failing GPU never fails discovery: a GPU whose handle or UUID cannot be read is skipped
  (logged); a GPU whose other queries fail is reported *unhealthy* with the error as its
  reason (the agent's health loop then taints it in the slices). Only a failure of NVML
  itself (init, device count, driver version) raises :class:`DiscoveryError`.
- The GPU driver's pool is published even when no GPU is found (``drivers``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kdra.agent.backends.nvml_health import NvmlHealth, load_pynvml
from kdra.agent.backends.nvml_mig import mig_partitions
from kdra.agent.core.backend import DeviceKey, DiscoveryError
from kdra.agent.core.gpu_backend import GpuBackend
from kdra.agent.core.gpu_profiles import (
    GPU_DEVICE_TYPE,
    GPU_DRIVER,
    compute_capability,
    cuda_version_from_int,
    gpu_attributes,
    to_semver,
)
from kdra.agent.core.health import Observation
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice, int_attr, string_attr
from kdra.dra.quantity import Format, Quantity

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- NVML

_BRANDS = {
    "NVIDIA": "Nvidia", "TESLA": "Tesla", "QUADRO": "Quadro", "GEFORCE": "GeForce",
    "TITAN": "Titan", "NVS": "NVS", "GRID": "Grid", "NVIDIA_RTX": "NvidiaRTX",
    "QUADRO_RTX": "QuadroRTX", "GEFORCE_RTX": "GeForceRTX", "TITAN_RTX": "TitanRTX",
}
_ARCHITECTURES = {
    "KEPLER": "Kepler", "MAXWELL": "Maxwell", "PASCAL": "Pascal", "VOLTA": "Volta",
    "TURING": "Turing", "AMPERE": "Ampere", "ADA": "Ada Lovelace", "HOPPER": "Hopper",
    "BLACKWELL": "Blackwell",
}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _enum_names(nvml: Any, prefix: str, pretty: dict[str, str]) -> dict[int, str]:
    """NVML's integer enum values → names, from the module's ``<prefix><NAME>`` constants."""
    names: dict[int, str] = {}
    for attr in dir(nvml):
        if not attr.startswith(prefix) or attr.endswith("_COUNT"):
            continue
        value = getattr(nvml, attr)
        if isinstance(value, int) and not isinstance(value, bool):
            suffix = attr[len(prefix):]
            names.setdefault(value, pretty.get(suffix) or
                             "".join(part.capitalize() for part in suffix.split("_")))
    return names


def _optional(nvml: Any, query: Any, handle: Any) -> int:
    """An enum query older GPUs may not support: -1 when NVML refuses."""
    try:
        return int(query(handle))
    except getattr(nvml, "NVMLError", Exception):
        return -1


def normalise_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:1A:00.0`` → sysfs's ``0000:1a:00.0``."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id.lower()


class NvmlBackend(GpuBackend):
    """Real GPUs through NVML (nvidia-ml-py), published under ``driver``. ``nvml`` is the
    module to use (a fake in tests); ``sysfs`` is where the PCI topology (``pcieRoot``,
    ``numaNode``) is read from; ``xid_hold``: how long an XID keeps its GPU degraded."""

    name = "nvml"
    description = "NVML"
    health_blocks = True  # NVML calls: asked from a worker thread

    def __init__(self, driver: str = GPU_DRIVER, nvml: Any = None,
                 sysfs: Path = Path("/sys"), xid_hold: float = 300.0) -> None:
        self.driver = driver
        self.drivers = (driver,)
        self.sysfs = sysfs
        self._nvml = nvml
        self._initialised = False
        self._health: NvmlHealth | None = None
        self._xid_hold = xid_hold

    def signature(self) -> object | None:
        return None  # health can change at any time: ask NVML on every poll

    def _module(self) -> Any:
        if self._nvml is None:
            self._nvml = load_pynvml()
        return self._nvml

    def observe_health(self, node: str, devices: Inventory) -> Mapping[DeviceKey, Observation]:
        if self._health is None:
            self._health = NvmlHealth(nvml=self._module(), driver=self.driver,
                                      xid_hold=self._xid_hold)
        return self._health.observe(node, devices)

    def close(self) -> None:
        if self._health is not None:
            self._health.close()
        if self._initialised:
            try:
                self._module().nvmlShutdown()
            except Exception as exc:  # shutting down anyway
                log.debug("nvmlShutdown failed: %s", exc)
            self._initialised = False

    def discover(self, node: str) -> Inventory:
        nvml = self._module()
        error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
        try:
            if not self._initialised:
                nvml.nvmlInit()
                self._initialised = True
            driver_version = to_semver(_text(nvml.nvmlSystemGetDriverVersion()))
            cuda_version = cuda_version_from_int(int(nvml.nvmlSystemGetCudaDriverVersion()))
            count = int(nvml.nvmlDeviceGetCount())
        except (error, OSError, ValueError) as exc:
            raise DiscoveryError(f"NVML is not usable: {exc}") from exc
        brands = _enum_names(nvml, "NVML_BRAND_", _BRANDS)
        architectures = _enum_names(nvml, "NVML_DEVICE_ARCH_", _ARCHITECTURES)
        devices: list[InventoryDevice] = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except error as exc:
                log.warning("GPU %d skipped: NVML cannot identify it: %s", index, exc)
                continue
            try:
                gpu = self._device(nvml, handle, index, uuid, driver_version, cuda_version,
                                   brands, architectures)
                migs = mig_partitions(nvml, handle, gpu)  # MIG mode on: what exists
                devices.extend([gpu] if migs is None else migs)
            except (error, ValueError) as exc:
                log.warning("GPU %d (%s) is unhealthy: %s", index, uuid, exc)
                devices.append(InventoryDevice(
                    driver=self.driver, name=f"gpu-{index}",
                    attributes={"type": string_attr(GPU_DEVICE_TYPE),
                                "uuid": string_attr(uuid), "index": int_attr(index)},
                    healthy=False, health_reason=f"NVML query failed: {exc}"))
        return Inventory(tuple(devices))

    def _device(self, nvml: Any, handle: Any, index: int, uuid: str, driver_version: str,
                cuda_version: str, brands: dict[int, str],
                architectures: dict[int, str]) -> InventoryDevice:
        major, minor_cc = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        bus_id = normalise_bus_id(_text(nvml.nvmlDeviceGetPciInfo(handle).busId))
        minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
        memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
        pcie_root, numa_node = self._topology(bus_id)
        attributes = gpu_attributes(
            uuid=uuid,
            product_name=_text(nvml.nvmlDeviceGetName(handle)),
            brand=brands.get(_optional(nvml, nvml.nvmlDeviceGetBrand, handle), "Unknown"),
            architecture=architectures.get(
                _optional(nvml, nvml.nvmlDeviceGetArchitecture, handle), "Unknown"),
            cuda_compute_capability=compute_capability(int(major), int(minor_cc)),
            driver_version=driver_version, cuda_driver_version=cuda_version,
            pci_bus_id=bus_id, index=index, minor=minor,
            pcie_root=pcie_root, numa_node=numa_node,
        )
        return InventoryDevice(
            driver=self.driver, name=f"gpu-{index}", attributes=attributes,
            capacity={"memory": str(Quantity(memory, Format.BINARY_SI))},
            device_nodes=(f"/dev/nvidia{minor}",),
        )

    def _topology(self, bus_id: str) -> tuple[str | None, int | None]:
        """(PCIe root complex, NUMA node) of a PCI device from sysfs, when known."""
        device = self.sysfs / "bus" / "pci" / "devices" / bus_id
        root: str | None = None
        numa: int | None = None
        try:
            target = os.readlink(device)
            root = next((part for part in Path(target).parts if part.startswith("pci")), None)
        except OSError:
            pass
        try:
            value = int((device / "numa_node").read_text().strip())
            numa = value if value >= 0 else None
        except (OSError, ValueError):
            pass
        return root, numa
