"""``kdra describe`` against a real API server: slices and claims (with allocations and agent
readiness written into their status, as the binder and the agents would) show up as free and
allocated devices per pool, and as each claim's devices; ``--output json`` and the filters.

The command runs as a real process (``python -m kdra describe``) with the control plane's
kubeconfig and the official ``kubernetes`` client.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import get_json

GPU = "gpu.kdra.dev"


def kdra_describe(plane: ControlPlane, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "kdra", "describe", "--kubeconfig", str(plane.kubeconfig),
         *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def gpu_slice(node: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus"},
        "spec": {"driver": GPU, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "basic": {"attributes": {
                     "productName": {"string": "NVIDIA H100 80GB HBM3"},
                     "index": {"int": i}}}} for i in range(count)]}}


def claim(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "gpus", "deviceClassName": GPU}]}}}


def allocate(plane: ControlPlane, namespace: str, name: str, node: str, devices: list[str],
             pods: list[str], ready: bool) -> None:
    """Write status as the binder (allocation, reservedFor) and the agent (Ready) do."""
    live = get_json(plane, "resourceclaims.resource.kdra.dev", name, "-n", namespace)
    live["status"] = {
        "allocation": {
            "devices": {"results": [{"request": "gpus", "driver": GPU, "pool": node,
                                     "device": device} for device in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}
                        for pod in pods],
    }
    if ready:
        live["status"]["devices"] = [
            {"driver": GPU, "pool": node, "device": device, "conditions": [
                {"type": "Ready", "status": "True", "reason": "Prepared", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]} for device in devices]
    plane.kubectl("replace", "--subresource=status", "-f", "-", input=json.dumps(live))


@pytest.fixture
def cluster(control_plane: ControlPlane, namespace: str) -> Iterator[tuple[str, str, str]]:
    """Two nodes' pools (4 and 2 GPUs) and three claims: two allocated on the first node (one
    prepared and in use by two pods, one waiting for the agent), one pending."""
    suffix = namespace[-6:].strip("-")
    node_a, node_b = f"describe-a-{suffix}", f"describe-b-{suffix}"
    slices = [gpu_slice(node_a, 4), gpu_slice(node_b, 2)]
    claims = [claim(name, namespace) for name in ("training", "inference", "waiting")]
    control_plane.kubectl("create", "-f", "-", input=yaml.safe_dump_all(slices + claims))
    allocate(control_plane, namespace, "training", node_a, ["gpu-0", "gpu-1"],
             ["trainer-0", "trainer-1"], ready=True)
    allocate(control_plane, namespace, "inference", node_a, ["gpu-3"], [], ready=False)
    yield node_a, node_b, namespace
    for obj in slices:
        control_plane.kubectl("delete", "resourceslice.resource.kdra.dev",
                              obj["metadata"]["name"], "--ignore-not-found", check=False)


def test_describe_table(control_plane: ControlPlane, cluster: tuple[str, str, str]) -> None:
    node_a, node_b, namespace = cluster
    out = kdra_describe(control_plane, "-n", namespace)
    pools = {line.split()[0]: line.split() for line in out.splitlines()
             if line.startswith("describe-") and f"{GPU}   " in line}
    # NODE DRIVER POOL GENERATION DEVICES ALLOCATED FREE
    assert pools[node_a][3:] == ["1", "4", "3", "1"]
    assert pools[node_b][3:] == ["1", "2", "0", "2"]
    rows = {line.split()[2]: line.split() for line in out.splitlines()
            if line.startswith(f"{node_a}   {GPU}/{node_a}")}
    assert rows["gpu-0"][-5:] == ["allocated", f"{namespace}/training", "gpus",
                                  f"{namespace}/trainer-0,{namespace}/trainer-1", "True"]
    assert rows["gpu-2"][-5:] == ["free", "-", "-", "-", "-"]
    assert rows["gpu-3"][-5:] == ["allocated", f"{namespace}/inference", "gpus", "-", "-"]
    claims = {line.split()[1]: line.split() for line in out.splitlines()
              if line.startswith(f"{namespace}   ")}
    assert claims["training"][2:] == ["reserved", node_a,
                                      f"{GPU}/{node_a}/gpu-0,{GPU}/{node_a}/gpu-1", "2/2",
                                      "trainer-0,trainer-1"]
    assert claims["inference"][2:5] == ["allocated", node_a, f"{GPU}/{node_a}/gpu-3"]
    assert claims["inference"][5] == "0/1"
    assert claims["waiting"][2:] == ["pending", "-", "-", "-", "-"]


def test_describe_json_and_filters(control_plane: ControlPlane,
                                   cluster: tuple[str, str, str]) -> None:
    node_a, node_b, namespace = cluster
    data = json.loads(kdra_describe(control_plane, "-o", "json", "--node", node_a))
    (pool,) = data["pools"]
    assert (pool["node"], pool["total"], pool["allocated"], pool["free"]) == (node_a, 4, 3, 1)
    held = {d["name"]: [h["claim"] for h in d["claims"]] for d in pool["devices"]}
    assert held == {"gpu-0": [f"{namespace}/training"], "gpu-1": [f"{namespace}/training"],
                    "gpu-2": [], "gpu-3": [f"{namespace}/inference"]}
    assert {(c["namespace"], c["name"]) for c in data["claims"]} == {
        (namespace, "training"), (namespace, "inference")}
    ready = {c["name"]: [d["ready"] for d in c["devices"]] for c in data["claims"]}
    assert ready == {"training": [True, True], "inference": [None]}

    other = json.loads(kdra_describe(control_plane, "-o", "json", "--node", node_b))
    assert [(p["node"], p["free"]) for p in other["pools"]] == [(node_b, 2)]
    assert other["claims"] == []

    summary = kdra_describe(control_plane, "--summary", "--node", node_a, "-n", namespace)
    assert "gpu-2" not in summary
    assert f"{GPU}/{node_a}/gpu-3" in summary


def test_describe_without_a_cluster_says_so(tmp_path: Any) -> None:
    missing = tmp_path / "no-such.kubeconfig"
    result = subprocess.run([sys.executable, "-m", "kdra", "describe", "--kubeconfig",
                             str(missing)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "kdra describe: no cluster configuration" in result.stderr
