"""The CDI side of preparing a claim on a node, without the I/O: names and the spec.

- :func:`build_cdi_spec`: the CDI spec (``cdiVersion 0.6.0``) of one claim and driver: one
  CDI device per claim+device named ``<claim-uid>-<device>`` (``-<shareID>`` added for a
  share of a device several claims hold), with kdra's env named after the device
  (``KDRA_DEVICE_GPU_0_UUID``) and what the device's backend adds
  (:mod:`kdra.agent.core.backend`: env, device nodes, mounts).
- :func:`cdi_file_name` / :func:`cdi_device_id`: the spec file of a claim and driver, and the
  fully qualified CDI name a runtime is asked for.

Invariants:
- Pure and deterministic: the same claim, devices and records give the same spec and names,
  so a restarted agent rewrites identical files.
- One spec file per claim and driver (a CDI spec has exactly one kind); each spec's
  annotations name its node, claim, claim UID and driver, so a file can be traced to its
  claim (and found to be an orphan, :mod:`kdra.agent.core.nodeprep`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from kdra.agent.core.backend import NO_BACKENDS, Backends, ContainerEdits
from kdra.agent.core.checkpoint import ClaimRef, PreparedDevice
from kdra.agent.core.gpu_profiles import GPU_DRIVER
from kdra.agent.core.inventory_devices import InventoryDevice

CDI_VERSION = "0.6.0"
CDI_VENDOR = "kdra.dev"
CDI_FILE_PREFIX = f"{CDI_VENDOR}-"
NODE_ANNOTATION = f"{CDI_VENDOR}/node"
CLAIM_ANNOTATION = f"{CDI_VENDOR}/claim"
CLAIM_UID_ANNOTATION = f"{CDI_VENDOR}/claim-uid"
DRIVER_ANNOTATION = f"{CDI_VENDOR}/driver"

JSON = dict[str, Any]


def cdi_class(driver: str) -> str:
    """CDI class of a driver's devices: ``gpu`` for kdra's GPUs, else the driver's name with
    every character CDI does not allow in a class turned into ``-``."""
    return "gpu" if driver == GPU_DRIVER else re.sub(r"[^A-Za-z0-9_-]", "-", driver)


def cdi_kind(driver: str) -> str:
    """``kdra.dev/gpu`` (or ``kdra.dev/<driver-ish>`` for other drivers)."""
    return f"{CDI_VENDOR}/{cdi_class(driver)}"


def cdi_device_name(claim_uid: str, device: str, share_id: str = "") -> str:
    """``<claim-uid>-<device>``, and ``-<shareID>`` for a share (one claim may hold two
    shares of one device)."""
    return f"{claim_uid}-{device}-{share_id}" if share_id else f"{claim_uid}-{device}"


def cdi_device_id(driver: str, claim_uid: str, device: str, share_id: str = "") -> str:
    """The fully qualified CDI device name a runtime is asked for: ``kdra.dev/gpu=<uid>-gpu-0``."""
    return f"{cdi_kind(driver)}={cdi_device_name(claim_uid, device, share_id)}"


def cdi_file_name(driver: str, claim_uid: str) -> str:
    """One spec file per claim and driver (a CDI spec has exactly one kind):
    ``kdra.dev-<claim-uid>.json`` for GPUs, ``kdra.dev-<class>-<claim-uid>.json`` otherwise."""
    if driver == GPU_DRIVER:
        return f"{CDI_FILE_PREFIX}{claim_uid}.json"
    return f"{CDI_FILE_PREFIX}{cdi_class(driver)}-{claim_uid}.json"


def env_name(device: str) -> str:
    """``KDRA_DEVICE_<NAME>``: the device name upper-cased, every other character ``_``."""
    return "KDRA_DEVICE_" + re.sub(r"[^A-Z0-9]", "_", device.upper())


def build_cdi_spec(*, node: str, claim: ClaimRef, driver: str,
                   devices: Sequence[InventoryDevice],
                   prepared: Sequence[PreparedDevice] = (),
                   backends: Backends = NO_BACKENDS) -> JSON:
    """The CDI spec of ``claim``'s ``devices`` of ``driver`` on ``node``: the single
    description of what each device gives a container (containerd injects it when the
    agent's NRI plugin names the device at container creation).

    Each device (``NAME`` = :func:`env_name`) gives kdra's env —
    ``KDRA_DEVICE_NAME=driver/pool/device``, ``KDRA_DEVICE_NAME_CLAIM=<namespace>/<name>``,
    ``KDRA_DEVICE_NAME_UUID`` when it has a ``uuid`` (recorded, else its attribute) — then what
    its backend adds (:meth:`~kdra.agent.core.backend.DeviceBackend.container_edits`, the
    backend named by ``device.backend`` in ``backends``): env, device nodes, mounts. Every
    variable is named after its device, so a container with several claims' devices gets
    them all (CDI env edits replace a variable of the same name). The lists over a
    container's devices (``KDRA_DEVICES``, a backend's such as the GPUs' UUID list) are
    set by the NRI plugin (:mod:`kdra.agent.core.exposure`), never by a spec. Spec-wide:
    ``KDRA_NODE_NAME``.

    ``prepared`` (the recorded results of ``devices``, in claim order): one CDI device per
    result — a share gets its own (named with its ``shareID``) — whose backend reads the
    recorded data (a partition's or share's env)."""
    by_name = {device.name: device for device in devices}
    pairs: list[tuple[InventoryDevice, PreparedDevice | None]] = (
        [(by_name[p.device], p) for p in prepared
         if p.driver == driver and p.device in by_name] if prepared
        else [(device, None) for device in devices])
    cdi_devices: list[JSON] = []
    for device, record in pairs:
        name = env_name(device.name)
        env = [f"{name}={driver}/{node}/{device.name}", f"{name}_CLAIM={claim.key}"]
        data: Mapping[str, Any] = record.data if record is not None else {}
        uuid = data.get("uuid", device.attribute("uuid"))
        if isinstance(uuid, str):
            env.append(f"{name}_UUID={uuid}")
        edits = ContainerEdits(tuple(env)) + backends.named(device.backend).container_edits(
            device, record, name)
        share = record.share_id if record is not None else ""
        cdi_devices.append({"name": cdi_device_name(claim.uid, device.name, share),
                            "containerEdits": edits.to_cdi()})
    return {
        "cdiVersion": CDI_VERSION,
        "kind": cdi_kind(driver),
        "annotations": {NODE_ANNOTATION: node, CLAIM_ANNOTATION: claim.key,
                        CLAIM_UID_ANNOTATION: claim.uid, DRIVER_ANNOTATION: driver},
        "devices": cdi_devices,
        "containerEdits": {"env": [f"KDRA_NODE_NAME={node}"]},
    }
