"""Partitions and shared GPUs end to end: manifests/examples/partitions and
manifests/examples/sharing applied as a user would, against the operator (binder) and a node
agent publishing the matching fake inventory (manifests/examples/inventory).

- A pod asking ``firstAvailable: [3g.40gb, whole GPU]`` gets a 3g.40gb partition while one
  is free (two fit on the partitioned H100), the whole other GPU once none is, and a
  partition again once one is released; the agent created each partition at prepare
  (status.devices data: MIG UUID and profile; its CDI env) and freed it at unprepare.
- Two pods sharing one GPU by memory: each claim's result has its shareID and
  consumedCapacity, each pod's CDI spec on the agent carries its own memory limit and share
  ID, and a third share that does not fit waits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION
from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers, test_binder
from tests.e2e.agent_helpers import Agent, AgentFactory, unique
from tests.e2e.conftest import ROOT, get_json
from tests.e2e.procs import wait_for
from tests.e2e.test_binder import CLAIMS, apply, gpu_pod

agents = agent_helpers.agents  # fixtures shared with other modules
kdra = test_binder.kdra
EXAMPLES = ROOT / "manifests" / "examples"
INVENTORIES = EXAMPLES / "inventory"
CLASSES = ("whole-gpu.kdra.dev", "mig.gpu.kdra.dev", "shared-gpu.kdra.dev")


@pytest.fixture
def cleanup(control_plane: ControlPlane) -> Any:
    yield
    for namespace in ("gpu-part1", "gpu-share1"):
        control_plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0",
                              "--force", "--wait=false", check=False)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    control_plane.kubectl("delete", "deviceclass.resource.kdra.dev", *CLASSES,
                          "--ignore-not-found", "--wait=false", check=False)


def bound(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return dict(wait_for(
        lambda: (p := get_json(plane, "pod", name, "-n", namespace))["spec"].get("nodeName")
        and p, timeout=120, what=f"pod {namespace}/{name} bound"))


def claim_of(plane: ControlPlane, namespace: str, pod: dict[str, Any]) -> dict[str, Any]:
    (name,) = json.loads(pod["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION]).values()
    return dict(get_json(plane, CLAIMS, name, "-n", namespace))


def only_result(claim: dict[str, Any]) -> dict[str, Any]:
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return dict(result)


def cdi_env(agent: Agent, claim: dict[str, Any]) -> dict[str, str]:
    """The env the agent's CDI spec for ``claim`` gives a container (every device)."""
    spec = json.loads((agent.cdi / f"kdra.dev-{claim['metadata']['uid']}.json").read_text())
    env: dict[str, str] = {}
    for device in spec["devices"]:
        env.update(item.split("=", 1) for item in device["containerEdits"]["env"])
    return env


def kdra_describe(plane: ControlPlane, *args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "kdra", "describe", "--kubeconfig",
                             str(plane.kubeconfig), *args], capture_output=True, text=True,
                            timeout=60, check=True)
    return result.stdout


def test_a_3g_partition_while_one_is_free_else_the_whole_gpu(
        control_plane: ControlPlane, agents: AgentFactory, kdra: Any, cleanup: Any) -> None:
    node = unique("mig")
    agent = agents(node, (INVENTORIES / "partitioned-gpus.yaml").read_text())
    kdra(webhooks=True)
    control_plane.kubectl("apply", "-k", str(EXAMPLES / "partitions"))

    claims = {pod: claim_of(control_plane, "gpu-part1", bound(control_plane, "gpu-part1", pod))
              for pod in ("pod0", "pod1", "pod2")}
    results = {pod: only_result(claim) for pod, claim in claims.items()}
    partitions = sorted(results[p]["device"] for p in ("pod0", "pod1"))
    # Which pod came first is the binder's business; what they got is not.
    requests = sorted(r["request"] for r in results.values())
    assert requests == ["gpu/3g", "gpu/3g", "gpu/whole"], results
    whole = next(r for r in results.values() if r["request"] == "gpu/whole")
    halves = sorted(r["device"] for r in results.values() if r["request"] == "gpu/3g")
    assert halves == ["gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"], partitions
    assert whole["device"] == "gpu-1"  # gpu-0 whole would overlap both halves

    # The agent created each partition at prepare: Ready, with a MIG UUID and the profile
    # in status.devices and in the container's CDI env.
    pod_of = {r["device"]: pod for pod, r in results.items()}
    claim = wait_for(lambda: (c := get_json(control_plane, CLAIMS, claims[pod_of[halves[0]]]
                                            ["metadata"]["name"], "-n", "gpu-part1"))
                     ["status"].get("devices") and c, timeout=60, what="device status")
    (status,) = claim["status"]["devices"]
    assert status["conditions"][0]["status"] == "True"
    assert status["data"]["profile"] == "3g.40gb" and status["data"]["uuid"].startswith("MIG-")
    env = cdi_env(agent, claim)
    assert env["KDRA_GPU_PROFILE"] == "3g.40gb"
    assert env["KDRA_DEVICE_GPU_0_MIG_3G_40GB_0_UUID"] == status["data"]["uuid"]

    gpu0 = json.loads(kdra_describe(control_plane, "-o", "json", "--node", node))[
        "partitionedGPUs"][0]
    assert gpu0["gpu"] == "gpu-0" and len(gpu0["allocated"]) == 2
    assert gpu0["counters"]["memory-slices"] == {"used": "8", "total": "8"}

    # Released, the partition is freed (its CDI spec gone) and the next pod gets one again.
    control_plane.kubectl("delete", "pod", pod_of[halves[0]], "-n", "gpu-part1",
                          "--grace-period=0", "--force")
    wait_for(lambda: not (agent.cdi / f"kdra.dev-{claim['metadata']['uid']}.json").exists(),
             timeout=60, what="the partition's CDI spec removed at unprepare")
    apply(control_plane, gpu_pod("pod3", "gpu-part1",
                                 [{"name": "gpu", "resourceClaimTemplateName":
                                   "3g-or-whole-gpu"}]))
    again = only_result(claim_of(control_plane, "gpu-part1",
                                 bound(control_plane, "gpu-part1", "pod3")))
    assert (again["request"], again["device"]) == ("gpu/3g", halves[0])


def test_two_pods_share_one_gpu_by_memory(
        control_plane: ControlPlane, agents: AgentFactory, kdra: Any, cleanup: Any,
        tmp_path: Path) -> None:
    node = unique("share")
    agent = agents(node, (INVENTORIES / "shared-gpus.yaml").read_text())
    kdra(webhooks=True)
    control_plane.kubectl("apply", "-k", str(EXAMPLES / "sharing"))

    seen: dict[str, str] = {}
    for pod, memory in (("pod0", "20Gi"), ("pod1", "40Gi")):
        claim = claim_of(control_plane, "gpu-share1", bound(control_plane, "gpu-share1", pod))
        result = only_result(claim)
        assert (result["device"], result["consumedCapacity"]) == ("gpu-0", {"memory": memory})
        assert result["shareID"]
        seen[pod] = result["shareID"]
        env = wait_for(lambda c=claim: (agent.cdi / f"kdra.dev-{c['metadata']['uid']}.json")
                       .exists() and cdi_env(agent, c), timeout=60, what="CDI spec")
        assert env["KDRA_GPU_MEMORY_LIMIT"] == env["KDRA_DEVICE_GPU_0_MEMORY_LIMIT"] == memory
        assert env["KDRA_SHARE_ID"] == result["shareID"]
        statuses = get_json(control_plane, CLAIMS, claim["metadata"]["name"], "-n",
                            "gpu-share1")["status"]["devices"]
        assert [(s["device"], s["shareID"]) for s in statuses] == [("gpu-0", seen[pod])]
    assert seen["pod0"] != seen["pod1"]

    # 20Gi + 40Gi + 30Gi > 80Gi: a third share does not fit and the pod waits.
    apply(control_plane, {
        "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
        "metadata": {"name": "thirty", "namespace": "gpu-share1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "shared-gpu.kdra.dev",
            "capacity": {"requests": {"memory": "30Gi"}}}}]}}})
    apply(control_plane, gpu_pod("pod2", "gpu-share1",
                                 [{"name": "gpu", "resourceClaimName": "thirty"}]))
    wait_for(lambda: any(c.get("reason") == "Unschedulable" for c in (get_json(
        control_plane, "pod", "pod2", "-n", "gpu-share1").get("status") or {}).get(
            "conditions") or ()), timeout=60, what="pod2 unschedulable")
    assert not get_json(control_plane, "pod", "pod2", "-n", "gpu-share1")["spec"].get(
        "nodeName")

    # kdra describe shows both shares and what they use of the GPU.
    data = json.loads(kdra_describe(control_plane, "-o", "json", "--node", node))
    (device,) = data["sharedDevices"]
    assert device["capacity"]["memory"] == {"used": "60Gi", "total": "80Gi"}
    assert sorted(s["shareID"] for s in device["shares"]) == sorted(seen.values())
    assert sorted(p for s in device["shares"] for p in s["pods"]) == [
        "gpu-share1/pod0", "gpu-share1/pod1"]
