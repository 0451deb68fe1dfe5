"""GPU models the fake inventory can simulate, and the naming rules kdra's GPU devices follow.

A fake inventory says ``8 x H100-80GB`` and gets eight devices that look exactly like the ones
the NVML backend publishes for real H100s: the same attribute names (after NVIDIA's DRA
driver: ``type``, ``uuid``, ``productName``, ``brand``, ``architecture``,
``cudaComputeCapability``, ``driverVersion``, ``cudaDriverVersion``, ``pciBusID``, ``index``,
``minor``, plus ``pcieRoot``/``numaNode`` for topology constraints) and capacity ``memory``.
So selectors, classes and matchAttribute constraints written against kind or a test cluster
work unchanged on real GPUs.

Invariants:
- Pure data and functions: no I/O, no clock, no randomness. A fake GPU's UUID is a function of
  (node name, index) only, so a restarted agent publishes the same devices again.
- Every version this module produces is strict semver (``12.4.0``, never ``12.4`` or
  ``535.104.05``): :func:`to_semver` is the one place that normalises what NVML reports.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from kdra.agent.core.inventory_devices import (
    AttributeValue,
    int_attr,
    string_attr,
    version_attr,
)
from kdra.dra.models import MAX_ATTRIBUTE_STRING_LENGTH
from kdra.dra.semver import is_valid_version

GPU_DRIVER = "gpu.kdra.dev"
"""Driver name of kdra's GPUs (docs/user-guide.md)."""

GPU_DEVICE_TYPE = "gpu"

DEFAULT_DRIVER_VERSION = "550.54.15"
"""NVIDIA kernel driver version the fake GPUs report unless the inventory says otherwise."""

DEFAULT_CUDA_DRIVER_VERSION = "12.4.0"
"""CUDA driver API version the fake GPUs report unless the inventory says otherwise."""


@dataclass(frozen=True)
class GpuProfile:
    """One GPU model: what NVML would report for every GPU of that model."""

    name: str
    """Short name used in inventories: ``H100-80GB``."""

    product_name: str
    """``nvmlDeviceGetName``: ``NVIDIA H100 80GB HBM3``."""

    brand: str
    """``nvmlDeviceGetBrand`` as NVIDIA's driver spells it: ``Nvidia``, ``Tesla``..."""

    architecture: str
    """``Hopper``, ``Ampere``, ``Ada Lovelace``..."""

    cuda_compute_capability: str
    """Strict semver: ``9.0.0``."""

    memory: str
    """Total memory as a Kubernetes quantity: ``80Gi``."""


def _profiles(*items: GpuProfile) -> Mapping[str, GpuProfile]:
    return MappingProxyType({item.name: item for item in items})


GPU_PROFILES: Mapping[str, GpuProfile] = _profiles(
    GpuProfile("H200-141GB", "NVIDIA H200", "Nvidia", "Hopper", "9.0.0", "141Gi"),
    GpuProfile("H100-80GB", "NVIDIA H100 80GB HBM3", "Nvidia", "Hopper", "9.0.0", "80Gi"),
    GpuProfile("H100-94GB", "NVIDIA H100 NVL", "Nvidia", "Hopper", "9.0.0", "94Gi"),
    GpuProfile("B200-180GB", "NVIDIA B200", "Nvidia", "Blackwell", "10.0.0", "180Gi"),
    GpuProfile("A100-40GB", "NVIDIA A100-SXM4-40GB", "Nvidia", "Ampere", "8.0.0", "40Gi"),
    GpuProfile("A100-80GB", "NVIDIA A100-SXM4-80GB", "Nvidia", "Ampere", "8.0.0", "80Gi"),
    GpuProfile("A10-24GB", "NVIDIA A10", "Nvidia", "Ampere", "8.6.0", "24Gi"),
    GpuProfile("L40S-48GB", "NVIDIA L40S", "Nvidia", "Ada Lovelace", "8.9.0", "48Gi"),
    GpuProfile("L4-24GB", "NVIDIA L4", "Nvidia", "Ada Lovelace", "8.9.0", "24Gi"),
    GpuProfile("V100-32GB", "Tesla V100-SXM2-32GB", "Tesla", "Volta", "7.0.0", "32Gi"),
    GpuProfile("T4-16GB", "Tesla T4", "Tesla", "Turing", "7.5.0", "16Gi"),
)
"""Every profile a fake inventory may name, by short name."""

_COUNT_FORM = re.compile(r"^\s*(\d+)\s*[xX*\u00d7]\s*(\S+)\s*$")


def parse_gpu_shorthand(text: str) -> tuple[int, str]:
    """``"8 x H100-80GB"`` → ``(8, "H100-80GB")``. Raises ValueError on another shape."""
    match = _COUNT_FORM.match(text)
    if not match:
        raise ValueError(f"{text!r} is not of the form '<count> x <profile>', "
                         "e.g. '8 x H100-80GB'")
    return int(match.group(1)), match.group(2)


def fake_gpu_uuid(node: str, index: int) -> str:
    """A stable, NVML-shaped UUID for fake GPU ``index`` of ``node``
    (``GPU-1b3f...-....``): the same node and index always give the same UUID, and
    different nodes never share one in practice."""
    digest = hashlib.sha256(f"kdra-fake-gpu/{node}/{index}".encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def fake_pci_bus_id(index: int) -> str:
    """A plausible, unique PCI address for fake GPU ``index``: ``0000:1b:00.0``..."""
    return f"0000:{0x1b + 0x10 * index:02x}:00.0" if index < 14 else f"0001:{index:02x}:00.0"


def to_semver(text: str) -> str:
    """Normalise a version NVML reports to strict semver.

    ``"550.54.15"`` → ``"550.54.15"``, ``"535.104.05"`` → ``"535.104.5"`` (no leading zeros),
    ``"560.35"`` → ``"560.35.0"``, ``"12.4"`` → ``"12.4.0"``, ``"9"`` → ``"9.0.0"``.
    Raises ValueError for text with no leading number.
    """
    parts = text.strip().split(".")
    numbers: list[int] = []
    for part in parts[:3]:
        digits = re.match(r"^\d+", part)
        if not digits:
            break
        numbers.append(int(digits.group(0)))
    if not numbers:
        raise ValueError(f"{text!r} is not a version")
    numbers += [0] * (3 - len(numbers))
    version = ".".join(str(n) for n in numbers)
    assert is_valid_version(version)
    return version


def cuda_version_from_int(value: int) -> str:
    """``nvmlSystemGetCudaDriverVersion`` gives ``12040`` for CUDA 12.4: → ``"12.4.0"``."""
    return f"{value // 1000}.{(value % 1000) // 10}.0"


def compute_capability(major: int, minor: int) -> str:
    """``(9, 0)`` → ``"9.0.0"``."""
    return f"{major}.{minor}.0"


def gpu_attributes(*, uuid: str, product_name: str, brand: str, architecture: str,
                   cuda_compute_capability: str, driver_version: str,
                   cuda_driver_version: str, pci_bus_id: str, index: int, minor: int,
                   pcie_root: str | None = None,
                   numa_node: int | None = None) -> dict[str, AttributeValue]:
    """The attributes of one full GPU, named after NVIDIA's DRA driver (shared by the NVML
    backend and the fake profiles, so both publish the same shape); ``productName`` is cut to
    the API's string limit."""
    attributes: dict[str, AttributeValue] = {
        "type": string_attr(GPU_DEVICE_TYPE),
        "uuid": string_attr(uuid),
        "productName": string_attr(product_name[:MAX_ATTRIBUTE_STRING_LENGTH]),
        "brand": string_attr(brand),
        "architecture": string_attr(architecture),
        "cudaComputeCapability": version_attr(cuda_compute_capability),
        "driverVersion": version_attr(driver_version),
        "cudaDriverVersion": version_attr(cuda_driver_version),
        "pciBusID": string_attr(pci_bus_id),
        "index": int_attr(index),
        "minor": int_attr(minor),
    }
    if pcie_root is not None:
        attributes["pcieRoot"] = string_attr(pcie_root)
    if numa_node is not None:
        attributes["numaNode"] = int_attr(numa_node)
    return attributes
