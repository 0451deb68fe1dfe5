"""The ``fake-gpu`` backend: the inventory file's GPU profiles (``gpus: ['8 x H100-80GB']``).

Its GPUs look like the ones the ``nvml`` backend finds on real hardware (attributes,
partitions, shares: :mod:`kdra.agent.core.inventory`, :mod:`kdra.agent.core.gpu_modes`), and
what happens to a prepared one is :class:`~kdra.agent.core.gpu_backend.GpuBackend`'s — the
recorded data (a partition is created at prepare: its UUID minted), the partition and share
env, ``NVIDIA_VISIBLE_DEVICES``. One difference: a fake GPU has no host device node, so its
container gets :func:`~kdra.agent.core.gpu_backend.fake_device_node` (``/dev/kdra/gpu-3``).

Invariants:
- Reads only its section of the file (:class:`InventorySection`); the ``generic`` backend
  the other; the file is re-read only when it changed.
"""

from __future__ import annotations

from kdra.agent.backends.inventory_file import InventorySection
from kdra.agent.core.backend import ContainerEdits
from kdra.agent.core.checkpoint import PreparedDevice
from kdra.agent.core.gpu_backend import GpuBackend, fake_device_node
from kdra.agent.core.inventory_devices import InventoryDevice


class FakeGpuBackend(InventorySection, GpuBackend):
    """The GPUs of an inventory file."""

    name = "fake-gpu"
    section = "gpus"

    def container_edits(self, device: InventoryDevice, record: PreparedDevice | None,
                        prefix: str) -> ContainerEdits:
        edits = super().container_edits(device, record, prefix)
        if device.device_nodes:
            return edits
        return ContainerEdits(device_nodes=(fake_device_node(device.name),)) + edits


__all__ = ["FakeGpuBackend"]
