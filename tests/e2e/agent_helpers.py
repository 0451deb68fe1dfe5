"""Helpers for end-to-end tests of the node agent (and the slice GC that watches it)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kdra.kube.core.agent_leases import lease_pools
from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import get_json
from tests.e2e.procs import KdraProcess

GPU = "gpu.kdra.dev"
SYSTEM_NAMESPACE = "kdra-system"
SLICES = "resourceslices.resource.kdra.dev"
CLAIMS = "resourceclaims.resource.kdra.dev"
EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "inventory"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@dataclass
class Agent:
    proc: KdraProcess
    node: str
    inventory: Path
    cdi: Path
    state: Path
    args: list[str] = field(default_factory=list)

    def cdi_files(self) -> list[str]:
        return sorted(p.name for p in self.cdi.glob("*.json")) if self.cdi.exists() else []

    def checkpoint(self) -> dict[str, Any]:
        path = self.state / f"checkpoint-{self.node}.json"
        return dict(json.loads(path.read_text())["claims"]) if path.exists() else {}

    def metric(self, name: str) -> float | None:
        """The value of one sample line (``name`` includes its labels), if present."""
        for line in self.proc.metrics().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None


AgentFactory = Callable[..., Agent]


@pytest.fixture
def agents(control_plane: ControlPlane, tmp_path: Path,
           request: pytest.FixtureRequest) -> Iterator[AgentFactory]:
    """Start node agents as real processes; stop them, print their logs on failure and
    delete the Nodes they created (the API server's GC then deletes their slices)."""
    control_plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    started: list[Agent] = []

    def start(node: str, inventory: str, *extra: str, env: dict[str, str] | None = None,
              lease_duration: int = 10, create_nodes: bool = True) -> Agent:
        home = tmp_path / node
        home.mkdir(exist_ok=True)
        path = home / "inventory.yaml"
        path.write_text(inventory)
        args = ["agent", "--node-name", node, "--inventory", str(path),
                "--cdi-dir", str(home / "cdi"), "--state-dir", str(home / "state"),
                "--lease-duration", str(lease_duration), "--renew-interval", "1",
                "--inventory-poll", "0.5", *(["--create-nodes"] if create_nodes else []),
                *extra]
        proc = KdraProcess(args, home / "agent.log", control_plane.kubeconfig,
                           ready_line="kdra agent started", env=env)
        agent = Agent(proc, node, path, home / "cdi", home / "state", args)
        started.append(agent)
        proc.start(timeout=90)
        return agent

    yield start
    for agent in started:
        agent.proc.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for agent in started:
            print(f"===== agent {agent.node} log =====\n{agent.proc.tail(150)}")
    for agent in started:
        nodes = [agent.node]
        if "--simulate-nodes" in agent.args:
            nodes = agent.args[agent.args.index("--simulate-nodes") + 1].split(",")
        control_plane.kubectl("delete", "node", *nodes, "--ignore-not-found",
                              "--wait=false", check=False)


def slices_of(plane: ControlPlane, node: str) -> list[dict[str, Any]]:
    items = get_json(plane, SLICES, "--field-selector", f"spec.nodeName={node}")["items"]
    return sorted(items, key=lambda s: s["metadata"]["name"])


def generations(plane: ControlPlane, node: str) -> list[int]:
    return [s["spec"]["pool"]["generation"] for s in slices_of(plane, node)]


def lease(plane: ControlPlane, node: str, driver: str = GPU) -> dict[str, Any] | None:
    """The heartbeat Lease vouching for ``node``'s ``driver`` pool: the node's own, or the
    shared Lease of an agent process serving many simulated nodes."""
    result = plane.kubectl("get", "lease", f"kdra-agent-{node}-{driver.replace('.', '-')}",
                           "-n", SYSTEM_NAMESPACE, "-o", "json", check=False)
    if result.returncode == 0:
        found: dict[str, Any] = json.loads(result.stdout)
        return found
    for item in get_json(plane, "lease", "-n", SYSTEM_NAMESPACE, "-l",
                         "resource.kdra.dev/agent-lease=true")["items"]:
        named_driver, nodes = lease_pools(item)
        if named_driver == driver and node in nodes:
            return item
    return None


def create_claim(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    body = {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": GPU}]}}}
    plane.kubectl("create", "-f", "-", input=json.dumps(body))
    return dict(get_json(plane, CLAIMS, name, "-n", namespace))


def allocate(plane: ControlPlane, namespace: str, name: str, node: str, devices: list[str],
             driver: str = GPU, reserved: bool = True) -> None:
    """Write what the binder would: status.allocation and reservedFor."""
    status: dict[str, Any] = {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": driver, "pool": node, "device": device}
        for device in devices]}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "consumer",
                                  "uid": str(uuid.uuid4())}]
    plane.kubectl("patch", CLAIMS, name, "-n", namespace, "--subresource=status",
                  "--type=merge", "-p", json.dumps({"status": status}))


def deallocate(plane: ControlPlane, namespace: str, name: str) -> None:
    """As kdra's claim controller deallocates: the devices' status goes with the allocation
    (the CRD refuses entries of devices the claim is not allocated; upstream's API server
    drops them itself)."""
    plane.kubectl("patch", CLAIMS, name, "-n", namespace, "--subresource=status",
                  "--type=merge", "-p", json.dumps({"status": {
                      "allocation": None, "reservedFor": None, "devices": None}}))


def device_status(plane: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    claim = get_json(plane, CLAIMS, name, "-n", namespace)
    return list((claim.get("status") or {}).get("devices") or [])


def ready_devices(plane: ControlPlane, namespace: str, name: str) -> dict[str, str]:
    return {entry["device"]: entry["conditions"][0]["status"]
            for entry in device_status(plane, namespace, name) if entry.get("conditions")}
