"""One node's agent for the prepare tests (test_agent_prepare_lifecycle,
test_agent_prepare_checkpoint, test_agent_prepare_shares): an in-memory claims API
(:class:`FakeClient`), claim objects allocated on ``node-1``, and :class:`Node`, whose state on
disk survives "restarts" and whose preparer can crash (raise :class:`Crash`) at a pause point.
"""

from __future__ import annotations

import asyncio
import copy
import json
import tempfile
from pathlib import Path
from typing import Any

from kdra.agent.backends.registry import make_backends
from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.core.backend import Backends
from kdra.agent.core.checkpoint import ClaimRef
from kdra.agent.core.inventory_devices import Inventory
from kdra.agent.prepare import Preparer
from kdra.agent.settings import AgentSettings
from kdra.kube.errors import Conflict, NotFound
from kdra.kube.resources import CLAIMS, Resource

NODE = "node-1"
GPU = "gpu.kdra.dev"
UID = "3d9f7a10-1111-2222-3333-444455556666"


def discovered(inventory: str, node: str = NODE) -> tuple[Backends, Inventory]:
    """The backends an agent runs for an inventory file holding ``inventory`` (fake-gpu,
    generic) and ``node``'s devices as they found them (each tagged with its backend)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inventory.yaml"
        path.write_text(inventory)
        backends = make_backends(AgentSettings(inventory=str(path)), [node])
        return backends, backends.discover(node)


class FakeClient:
    """Claims only: GET and PUT status with resourceVersion preconditions."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 100
        self.status_writes = 0
        self.conflict_next = 0

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.version)
        meta = stored["metadata"]
        self.objects[(meta["namespace"], meta["name"])] = stored
        return copy.deepcopy(stored)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        assert res is CLAIMS
        try:
            return copy.deepcopy(self.objects[(namespace or "", name)])
        except KeyError:
            raise NotFound(404, "NotFound", name) from None

    async def replace_status(self, res: Resource, body: dict[str, Any]) -> Any:
        meta = body["metadata"]
        current = self.objects.get((meta["namespace"], meta["name"]))
        if current is None:
            raise NotFound(404, "NotFound", meta["name"])
        if self.conflict_next:
            self.conflict_next -= 1
            self.put(current)  # someone else wrote meanwhile
            current = self.objects[(meta["namespace"], meta["name"])]
        if current["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise Conflict(409, "Conflict", "the object has been modified")
        self.status_writes += 1
        updated = copy.deepcopy(current)
        updated["status"] = copy.deepcopy(body.get("status") or {})
        return self.put(updated)


def claim_obj(devices: list[str], *, reserved: bool = True, driver: str = GPU,
              extra_status: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if devices:
        status["allocation"] = {"devices": {"results": [
            {"request": "gpu", "driver": driver, "pool": NODE, "device": d} for d in devices]}}
        if reserved:
            status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "pod-1"}]
    if extra_status:
        status["devices"] = extra_status
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": UID, "generation": 1},
            "spec": {}, "status": status}


class Crash(Exception):
    """Stands for kill -9 at a pause point."""


class CrashingPreparer(Preparer):
    crash_at = ""

    async def _pause(self, point: str, ref: ClaimRef) -> None:
        if point == self.crash_at:
            raise Crash(point)


class Node:
    """One node's agent state on disk (survives 'restarts') and in the fake API."""

    def __init__(self, tmp: Path, inventory: str = "gpus: ['4 x H100-80GB']",
                 backends: Backends | None = None) -> None:
        """``backends``: the agent's (their devices); else those of ``inventory``."""
        self.tmp = tmp
        self.client = FakeClient()
        if backends is None:
            self.backends, self.inventory = discovered(inventory)
        else:
            self.backends, self.inventory = backends, backends.discover(NODE)

    def preparer(self, crash_at: str = "") -> CrashingPreparer:
        preparer = CrashingPreparer(
            self.client, NODE, cdi=CdiDir(self.tmp / "cdi"),  # type: ignore[arg-type]
            checkpoint_file=CheckpointFile(self.tmp / "state", NODE),
            inventory=lambda: self.inventory, drivers=lambda: self.inventory.drivers,
            backends=self.backends)
        preparer.crash_at = crash_at
        # A pause point set: the disk steps are taken one worker-thread visit each, with the
        # point between them (as under KDRA_AGENT_PAUSE_AFTER), where the crash comes.
        preparer.pause_after = crash_at
        preparer.load()
        return preparer

    def cdi_files(self) -> list[str]:
        directory = self.tmp / "cdi"
        return sorted(p.name for p in directory.iterdir()) if directory.exists() else []

    def claim(self) -> dict[str, Any] | None:
        return self.client.objects.get(("ns", "c"))

    def checkpoint(self) -> dict[str, Any]:
        path = self.tmp / "state" / f"checkpoint-{NODE}.json"
        return json.loads(path.read_text())["claims"] if path.exists() else {}


def sync(preparer: Preparer, node: Node) -> None:
    asyncio.run(preparer.sync("ns", "c", node.claim()))


def ready(node: Node) -> list[tuple[str, str]]:
    claim = node.claim() or {}
    return [(e["device"], e["conditions"][0]["status"])
            for e in (claim.get("status") or {}).get("devices") or ()]
