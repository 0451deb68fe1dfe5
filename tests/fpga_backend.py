"""A test device vendor: FPGAs, added to kdra's node agent the way a vendor would — this one
module, named in the agent's ``--backends`` as ``tests.fpga_backend:FpgaBackend``. No other
agent module knows it (tests/unit/agent/test_backends.py, tests/e2e/test_vendor_backend.py).

Per node, :data:`COUNT` FPGAs ``fpga-0``... of driver :data:`DRIVER`:

- **devices**: attributes ``type`` (``fpga``), ``family``, ``logicCells`` (int),
  ``shellVersion`` (version), ``uuid`` (``FPGA-…``, a function of node and index); capacity
  ``memory``;
- **health**: the devices named in ``<state-dir>/fpga/<node>/overheated`` (one per line) are
  degraded, reason ``OverTemperature``;
- **prepare** "loads a bitstream": writes ``<state-dir>/fpga/<node>/<device>.bitstream``
  naming the claim (unprepare removes it); the recorded data names the file;
- **CDI**: per device ``<PREFIX>_FAMILY``, a fake device node ``/dev/fpga/<device>`` (char
  1:3, created by the runtime in the container) and the bitstream mounted read-only at
  ``/run/fpga/<device>.bitstream``;
- **env convention**: ``FPGA_VISIBLE_DEVICES`` = the container's FPGA UUIDs, ``none`` where
  the container set it itself but has no FPGA.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence, Set
from pathlib import Path
from typing import Any

from kdra.agent.core.backend import BackendBase, ContainerEdits, DeviceKey, DeviceNode, Mount
from kdra.agent.core.checkpoint import ClaimRef, PreparedDevice
from kdra.agent.core.health import Health, Observation
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice
from kdra.agent.settings import AgentSettings

DRIVER = "fpga.example.com"
COUNT = 4
FAMILY = "agilex7"
VISIBLE_ENV = "FPGA_VISIBLE_DEVICES"


def fpga_uuid(node: str, index: int) -> str:
    digest = hashlib.sha256(f"fpga/{node}/{index}".encode()).hexdigest()
    return f"FPGA-{digest[:8]}-{digest[8:12]}-{digest[12:24]}"


class FpgaBackend(BackendBase):
    """FPGAs of the test vendor (see the module's docstring)."""

    name = "fpga"
    description = "test vendor FPGAs"
    health_blocks = True  # reads a file: asked from the agent's worker thread

    def __init__(self, settings: AgentSettings) -> None:
        self.home = Path(settings.state_dir) / "fpga"

    def _dir(self, node: str) -> Path:
        return self.home / node

    def discover(self, node: str) -> Inventory:
        return Inventory(tuple(InventoryDevice(
            driver=DRIVER, name=f"fpga-{index}",
            attributes={"type": {"string": "fpga"}, "family": {"string": FAMILY},
                        "logicCells": {"int": 2_500_000 + index},
                        "shellVersion": {"version": "2.1.0"},
                        "uuid": {"string": fpga_uuid(node, index)}},
            capacity={"memory": "16Gi"}) for index in range(COUNT)))

    def signature(self) -> object | None:
        return ("fpga", COUNT)  # the devices never change

    def observe_health(self, node: str, devices: Inventory) -> Mapping[DeviceKey, Observation]:
        try:
            hot = set((self._dir(node) / "overheated").read_text().split())
        except FileNotFoundError:
            return {}
        return {(d.driver, d.name): Observation(Health.DEGRADED, "OverTemperature")
                for d in devices.devices if d.name in hot}

    def device_data(self, device: InventoryDevice, node: str) -> Mapping[str, Any]:
        return {"family": device.attribute("family"),
                "bitstream": str(self._dir(node) / f"{device.name}.bitstream")}

    def prepare(self, node: str, claim: ClaimRef, devices: Sequence[PreparedDevice]) -> None:
        self._dir(node).mkdir(parents=True, exist_ok=True)
        for device in devices:
            Path(str(device.data["bitstream"])).write_text(f"{claim.uid} {claim.key}\n")

    def unprepare(self, node: str, claim: ClaimRef, devices: Sequence[PreparedDevice]) -> None:
        for device in devices:
            Path(str(device.data["bitstream"])).unlink(missing_ok=True)

    def container_edits(self, device: InventoryDevice, record: PreparedDevice | None,
                        prefix: str) -> ContainerEdits:
        data = record.data if record is not None else {}
        mounts = (Mount(str(data["bitstream"]), f"/run/fpga/{device.name}.bitstream"),) \
            if "bitstream" in data else ()
        return ContainerEdits(
            env=(f"{prefix}_FAMILY={device.attribute('family')}",),
            device_nodes=(DeviceNode(f"/dev/fpga/{device.name}", type="c", major=1, minor=3,
                                     file_mode=0o666),),
            mounts=mounts)

    def container_env(self, devices: Sequence[PreparedDevice],
                      present: Set[str]) -> Mapping[str, str]:
        uuids = [str(d.data["uuid"]) for d in devices if "uuid" in d.data]
        if uuids or VISIBLE_ENV in present:
            return {VISIBLE_ENV: ",".join(uuids) or "none"}
        return {}
