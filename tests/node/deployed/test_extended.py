"""Extended resources on the real node (issue 27): manifests/examples/extended's Deployment,
whose container asks for ``resources.limits: {gpu.kdra.dev/gpu: 2}`` and writes no claim,
runs; its container sees exactly its two GPUs (CDI env, the two list variables, the device
files), allocated through the pod's generated ``extended-resources`` claim.

Runs after test_deployed.py (file order, one cluster): the examples are gone by then, so the
node's GPUs are free. The e2e twin without a kubelet is tests/e2e/test_extended.py.
"""

from __future__ import annotations

import json
import time
from typing import Any

import yaml

from kdra_devenv.controlplane import repo_root
from kdra_devenv.realcluster import RealCluster
from tests.node.deployed.devices import (
    GPU,
    as_sets,
    container_devices,
    expected,
    logs,
    wait_running,
)

EXAMPLE = repo_root() / "manifests" / "examples" / "extended" / "deployment.yaml"
APP = "app=train-gpus"


def _deployment() -> dict[str, Any]:
    """The example as a user applies it, with the node's local busybox image (there is no
    registry: as manifests/overlays/node/examples does for the other examples)."""
    obj: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = "localhost/busybox:static"
    return obj


def _pod_name(cluster: RealCluster, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while True:
        items = json.loads(cluster.kubectl("get", "pods", "-n", "default", "-l", APP,
                                           "-o", "json").stdout)["items"]
        live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
        if live:
            return str(live[0]["metadata"]["name"])
        assert time.monotonic() < deadline, f"no pod of {APP}:\n{cluster.diagnose()}"
        time.sleep(1)


def test_a_deployment_asking_for_two_gpus_sees_exactly_them(cluster: RealCluster,
                                                             gpu_class: None) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(_deployment()))
    try:
        name = _pod_name(cluster)
        pod = wait_running(cluster, [name])[name]
        resources = pod["spec"]["containers"][0].get("resources") or {}
        assert "gpu.kdra.dev/gpu" not in (resources.get("limits") or {})
        statuses = json.loads(pod["metadata"]["annotations"]["resource.kdra.dev/claim-statuses"])
        assert statuses["extended-resources"].startswith(f"{name}-extended-resources-")

        devices = container_devices(cluster, pod, "main")
        assert len(devices) == 2 and {d.driver for d in devices} == {GPU}
        seen = logs(cluster, name, "main")
        assert as_sets(seen) == as_sets(expected(cluster, pod, "main"))
        assert len(seen.env["NVIDIA_VISIBLE_DEVICES"].split(",")) == 2
        assert seen.files == {f"/dev/kdra/{d.name}" for d in devices}
        assert not seen.other, seen.other
    finally:
        # Foreground: returns once the pods are gone (their GPUs free for test_faults.py).
        cluster.kubectl("delete", "deployment", "train-gpus", "-n", "default",
                        "--cascade=foreground", "--wait=true", "--timeout=120s", check=False)
