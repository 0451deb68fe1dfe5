"""MIG through NVML: a GPU in MIG mode is published as the MIG devices that exist on it.

A GPU whose MIG mode is on cannot be handed out whole, and kdra does not create or destroy
MIG instances on real hardware (the administrator, or NVIDIA's tools, set the layout). So
for such a GPU the agent publishes exactly its existing MIG devices, each as the partition
device of :mod:`kdra.agent.core.gpu_partitions` at the placement NVML reports, with its real
UUID (``MIG-…``) as ``uuid``, consuming the GPU's counters like the fake partitions do.

How each MIG device is read: ``nvmlDeviceGetMigDeviceHandleByIndex`` over
``nvmlDeviceGetMaxMigDeviceCount`` slots (an empty slot raises NVMLError: skipped), its UUID,
``nvmlDeviceGetAttributes`` (``gpuInstanceSliceCount``: compute slices) and its GPU
instance's placement (``nvmlDeviceGetGpuInstanceId`` → ``nvmlDeviceGetGpuInstanceById`` →
``nvmlGpuInstanceGetInfo().placement``: first memory slice and how many). The profile is the
layout's profile with those compute and memory slices.

Not run on MIG hardware: tested with a fake NVML module
(tests/unit/agent/test_discovery_nvml.py). NVML calls and field names follow nvidia-ml-py 12.x.

Invariants:
- MIG mode off, or not supported (NVMLError from ``nvmlDeviceGetMigMode``): None — the GPU
  is published whole, as before.
- A MIG device whose shape is not in the model's layout (``1g.20gb`` and other profiles
  kdra does not model) is skipped with a warning; a GPU model without a layout publishes
  nothing while in MIG mode (it cannot be used whole either), with a warning.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kdra.agent.core.gpu_modes import partitioned
from kdra.agent.core.gpu_partitions import layout_for
from kdra.agent.core.inventory_devices import InventoryDevice

log = logging.getLogger(__name__)

MIG_ENABLED = 1
"""``NVML_DEVICE_MIG_ENABLE``."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def mig_mode_on(nvml: Any, handle: Any) -> bool:
    error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except (error, AttributeError):
        return False
    return int(current) == int(getattr(nvml, "NVML_DEVICE_MIG_ENABLE", MIG_ENABLED))


def mig_partitions(nvml: Any, handle: Any, gpu: InventoryDevice) -> list[InventoryDevice] | None:
    """The existing MIG devices of ``gpu`` (its NVML ``handle``) as partition devices, or
    None when its MIG mode is off. Raises NVMLError only when the GPU's MIG slots cannot be
    listed at all (the caller marks the GPU unhealthy)."""
    if not mig_mode_on(nvml, handle):
        return None
    product = str(gpu.attribute("productName") or "")
    layout = layout_for(product)
    if layout is None:
        log.warning("GPU %s (%s) is in MIG mode but kdra has no partition layout for it: "
                    "nothing published for it", gpu.name, product)
        return []
    error: type[BaseException] = getattr(nvml, "NVMLError", Exception)
    found: dict[tuple[str, int], str] = {}
    for slot in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except error:
            continue  # an empty slot
        try:
            uuid = _text(nvml.nvmlDeviceGetUUID(mig))
            compute = int(nvml.nvmlDeviceGetAttributes(mig).gpuInstanceSliceCount)
            instance = nvml.nvmlDeviceGetGpuInstanceById(
                handle, int(nvml.nvmlDeviceGetGpuInstanceId(mig)))
            placement = nvml.nvmlGpuInstanceGetInfo(instance).placement
            start, size = int(placement.start), int(placement.size)
        except error as exc:
            log.warning("GPU %s: MIG device in slot %d skipped: NVML cannot describe it: %s",
                        gpu.name, slot, exc)
            continue
        profile = next((p for p in layout.profiles
                        if p.compute_slices == compute and p.memory_slices == size
                        and start in p.placements), None)
        if profile is None:
            log.warning("GPU %s: MIG device %s (%d compute slices, memory slices %d-%d) is "
                        "not a partition kdra models; not published", gpu.name, uuid, compute,
                        start, start + size - 1)
            continue
        found[(profile.name, start)] = uuid
    devices = partitioned(gpu, placements=found, include_whole=False)
    return [dataclasses.replace(device, attributes={
        **device.attributes, "uuid": {"string": found[(str(device.attribute("profile")),
                                                        int(device.attribute("placement")
                                                            or 0))]}})
            for device in devices]


__all__ = ["mig_mode_on", "mig_partitions"]
