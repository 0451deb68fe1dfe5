"""What kdra's two GPU backends share (``nvml``: real GPUs, ``fake-gpu``: the fake inventory's
GPU profiles), without the I/O: the recorded data, the CDI edits and NVIDIA's env convention.

- **data** (:meth:`GpuBackend.device_data`): the GPU's ``productName``, and a partition's
  ``uuid``/``profile``/``parentUUID``/``placement`` (:func:`~kdra.agent.core.shares.partition_data`:
  a fake partition is created at prepare, its UUID minted then);
- **CDI edits** (:meth:`GpuBackend.container_edits`): the GPU's host device nodes
  (``/dev/nvidia3``, found by NVML), a partition's and a share's env
  (:func:`~kdra.agent.core.shares.share_env`); a fake GPU has no host node: it gets
  :func:`fake_device_node` (the fake backend's choice, :mod:`kdra.agent.backends.fake_gpu`);
- **env convention** (:meth:`GpuBackend.container_env`): ``NVIDIA_VISIBLE_DEVICES`` = the UUIDs
  of the container's GPUs (NVIDIA's container toolkit reads it), ``void`` — NVIDIA's "no GPU" —
  where the container set the variable itself but has no GPU of this backend (containerd 2.2
  cannot remove a variable the pod set, containerd#13432, so kdra overrides it).

Invariants:
- Pure: the same device, node and record give the same data, edits and env.
- Env values come only from what the agent published and recorded, never from the pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Any

from kdra.agent.core.backend import BackendBase, ContainerEdits, DeviceNode
from kdra.agent.core.checkpoint import PreparedDevice
from kdra.agent.core.inventory_devices import InventoryDevice
from kdra.agent.core.shares import partition_data, share_env
from kdra.kube.core.podclaims import GPU_UUIDS_ENV

NO_GPUS = "void"
"""``NVIDIA_VISIBLE_DEVICES`` for a container without GPUs (NVIDIA's container toolkit then
exposes nothing)."""

FAKE_DEVICE_DIR = "/dev/kdra"


def fake_device_node(device: str) -> DeviceNode:
    """A fake GPU's device node in the container: ``/dev/kdra/<device>``, a character device
    with /dev/null's numbers (1:3). runc creates it inside the container (nothing is created
    on the host) and the device-cgroup rule CDI adds allows exactly it."""
    return DeviceNode(f"{FAKE_DEVICE_DIR}/{device}", type="c", major=1, minor=3,
                      file_mode=0o666)


class GpuBackend(BackendBase):
    """kdra's GPU conventions; :class:`~kdra.agent.backends.nvml.NvmlBackend` and
    :class:`~kdra.agent.backends.fake_gpu.FakeGpuBackend` add how devices are found."""

    def device_data(self, device: InventoryDevice, node: str) -> Mapping[str, Any]:
        data: dict[str, Any] = {}
        product = device.attribute("productName")
        if product is not None:
            data["productName"] = product
        data.update(partition_data(device, node))
        return data

    def container_edits(self, device: InventoryDevice, record: PreparedDevice | None,
                        prefix: str) -> ContainerEdits:
        env = share_env(prefix, record.data if record is not None else {})
        return super().container_edits(device, record, prefix) + ContainerEdits(tuple(env))

    def container_env(self, devices: Sequence[PreparedDevice],
                      present: Set[str]) -> Mapping[str, str]:
        uuids = list(dict.fromkeys(str(d.data["uuid"]) for d in devices
                                   if isinstance(d.data.get("uuid"), str)))
        if uuids or GPU_UUIDS_ENV in present:
            return {GPU_UUIDS_ENV: ",".join(uuids) or NO_GPUS}
        return {}


__all__ = ["FAKE_DEVICE_DIR", "NO_GPUS", "GpuBackend", "fake_device_node"]
