"""What a partition or a share of a GPU tells its container: the recorded data and the env
(for the GPU backends, :mod:`kdra.agent.core.gpu_backend`).

When the node agent prepares a device it records ``data`` (kept in its checkpoint and
reported in ``status.devices[].data``; a share's ``shareID`` and ``consumedCapacity`` are
recorded by kdra for any device, :func:`kdra.agent.core.nodeprep.prepared_devices`) and writes
the device's CDI env from it:

=====================  ===========================================  ===========================
device                 data                                         env (``NAME`` =
                                                                    ``KDRA_DEVICE_<DEVICE>``)
=====================  ===========================================  ===========================
partition (``type:     ``uuid`` (the partition's: ``MIG-…``),        ``NAME_UUID``,
mig``)                 ``profile``, ``parentUUID``, ``placement``    ``NAME_PROFILE``,
                                                                    ``NAME_PARENT_UUID``,
                                                                    ``KDRA_GPU_PROFILE``
share (result with a   ``shareID``, ``consumedCapacity``            ``NAME_SHARE_ID``,
``shareID``)                                                        ``NAME_MEMORY_LIMIT`` (and
                                                                    ``NAME_CAPACITY_<CAP>`` per
                                                                    other capacity),
                                                                    ``KDRA_SHARE_ID``,
                                                                    ``KDRA_GPU_MEMORY_LIMIT``
=====================  ===========================================  ===========================

The unprefixed variables are for the common case of one partition or share per container;
with several, each CDI device sets them and one wins — read the ``NAME_`` ones.

A partition is *created on demand*: the fake backend has no MIG instance until a claim is
prepared, so its UUID is minted then (:func:`fake_partition_uuid`, a function of node and
device, so preparing again gives the same one) and forgotten at unprepare. A partition NVML
found already exists and has its real UUID as the device's ``uuid`` attribute.

Nothing here *enforces* a share: a container told ``KDRA_GPU_MEMORY_LIMIT=20Gi`` can still
allocate more GPU memory. Enforcement (MPS limits, HAMi-like interception, MIG itself) is
out of kdra's scope; docs/partitions.md says so.

Invariants:
- Pure: the same device and result give the same data and env.
- Env values are built only from what the agent published and the allocation result says,
  never from anything a pod wrote; names are upper-case ``[A-Z0-9_]``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from kdra.agent.core.gpu_partitions import PARTITION_DEVICE_TYPE
from kdra.agent.core.inventory_devices import InventoryDevice

SHARE_ID_ENV = "KDRA_SHARE_ID"
MEMORY_LIMIT_ENV = "KDRA_GPU_MEMORY_LIMIT"
PROFILE_ENV = "KDRA_GPU_PROFILE"


def fake_partition_uuid(node: str, device: str) -> str:
    """A stable, NVML-shaped MIG UUID for a fake partition (``MIG-1b3f…``)."""
    digest = hashlib.sha256(f"kdra-fake-mig/{node}/{device}".encode()).hexdigest()
    return f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def is_partition(device: InventoryDevice) -> bool:
    return device.attribute("type") == PARTITION_DEVICE_TYPE


def partition_data(device: InventoryDevice, node: str) -> dict[str, Any]:
    """The data to record for ``device`` prepared on ``node`` as a partition (empty for any
    other device): a fake partition is created here, its UUID minted."""
    if not is_partition(device):
        return {}
    uuid = device.attribute("uuid")
    data: dict[str, Any] = {
        "uuid": uuid if isinstance(uuid, str) else fake_partition_uuid(node, device.name)}
    for name in ("profile", "parentUUID", "placement"):
        value = device.attribute(name)
        if value is not None:
            data[name] = value
    return data


def _suffix(name: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", name.rsplit("/", 1)[-1].upper())


def share_env(prefix: str, data: Mapping[str, Any]) -> list[str]:
    """The env of a partition or share whose recorded ``data`` is given; ``prefix`` is the
    device's ``KDRA_DEVICE_<DEVICE>`` (the ``_UUID`` variable is the caller's)."""
    env: list[str] = []
    profile = data.get("profile")
    if isinstance(profile, str):
        env += [f"{prefix}_PROFILE={profile}", f"{PROFILE_ENV}={profile}"]
        parent = data.get("parentUUID")
        if isinstance(parent, str):
            env.append(f"{prefix}_PARENT_UUID={parent}")
    share_id = data.get("shareID")
    if isinstance(share_id, str) and share_id:
        env += [f"{prefix}_SHARE_ID={share_id}", f"{SHARE_ID_ENV}={share_id}"]
        consumed = data.get("consumedCapacity")
        for name, value in sorted((consumed if isinstance(consumed, Mapping) else {}).items()):
            if _suffix(str(name)) == "MEMORY":
                env += [f"{prefix}_MEMORY_LIMIT={value}", f"{MEMORY_LIMIT_ENV}={value}"]
            else:
                env.append(f"{prefix}_CAPACITY_{_suffix(str(name))}={value}")
    return env


__all__ = [
    "MEMORY_LIMIT_ENV",
    "PROFILE_ENV",
    "SHARE_ID_ENV",
    "fake_partition_uuid",
    "is_partition",
    "partition_data",
    "share_env",
]
