"""Two pods share one GPU by memory on the real node: each container's env shows its own share.

The node's fake inventory (ConfigMap kdra-inventory) gets one more GPU for this test, an L4
shared by memory (``sharing: memory``: allowMultipleAllocations, capacity ``memory`` 24Gi with
a request policy of whole GiB), appended after the node's other GPUs so none of theirs is
renamed; the agent re-reads its file and publishes it. Two pods then ask for 8Gi and 12Gi of
it. Both land on that one device; each claim's result carries its own ``shareID`` and
``consumedCapacity``, and each container prints ``KDRA_GPU_MEMORY_LIMIT`` and
``KDRA_SHARE_ID`` of its own share (the agent's CDI edits, injected through NRI) beside the
GPU's UUID in ``NVIDIA_VISIBLE_DEVICES``. The ConfigMap is restored afterwards.

kdra does not enforce the limit inside the container (docs/partitions.md): the test checks
what the container is told, not what it could allocate.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kdra_devenv.controlplane import repo_root
from kdra_devenv.realcluster import NAMESPACE, RealCluster
from tests.node.deployed.devices import (
    as_sets,
    container_devices,
    device_facts,
    expected,
    logs,
    wait_running,
)

CONFIGMAP = "kdra-inventory"
SHARED_GPU = {"profile": "L4-24GB", "count": 1, "sharing": "memory"}
PRINT_ENV = ("env | grep -E '^(KDRA_|NVIDIA_VISIBLE_DEVICES=)' | sort; "
             "ls -d /dev/kdra/* 2>/dev/null; exec sleep 3600")
SHARES = {"share-8gi": "8Gi", "share-12gi": "12Gi"}


def _slices(cluster: RealCluster) -> list[dict[str, Any]]:
    return list(cluster.get_json("resourceslices.resource.kdra.dev")["items"])


def _shared_device(cluster: RealCluster) -> str | None:
    for item in _slices(cluster):
        for device in item["spec"].get("devices", ()):
            if device.get("allowMultipleAllocations"):
                return str(device["name"])
    return None


@pytest.fixture
def shared_gpu(cluster: RealCluster, gpu_class: None) -> Iterator[str]:
    """The node's inventory with one shared L4 more, and the class of shareable GPUs
    (manifests/examples/sharing: gpu.kdra.dev selects whole GPUs one claim holds); restored
    afterwards."""
    cluster.kubectl("apply", "-f", str(repo_root() / "manifests" / "examples" / "sharing" /
                                       "deviceclass.yaml"))
    original = cluster.get_json("configmap", "-n", NAMESPACE, CONFIGMAP)
    (key,) = [k for k in original["data"] if k.endswith(".yaml")][:1]
    inventory = yaml.safe_load(original["data"][key]) or {}
    inventory["gpus"] = [*inventory.get("gpus", []), SHARED_GPU]
    patched = {"data": {key: yaml.safe_dump(inventory, sort_keys=False)}}
    cluster.kubectl("patch", "configmap", "-n", NAMESPACE, CONFIGMAP, "--type=merge", "-p",
                    json.dumps(patched))
    try:
        # kubelet refreshes a ConfigMap volume within its sync period (about a minute),
        # then the agent's inventory poll publishes the new device.
        cluster.wait_for(lambda: _shared_device(cluster) is not None,
                         "the shared L4 published by the agent", 240)
        device = _shared_device(cluster)
        assert device is not None
        yield device
    finally:
        cluster.kubectl("delete", "pods", "-n", "default", *SHARES, "--ignore-not-found",
                        "--wait=true", "--timeout=120s", check=False)
        restore = {"data": {key: original["data"][key]}}
        cluster.kubectl("patch", "configmap", "-n", NAMESPACE, CONFIGMAP, "--type=merge",
                        "-p", json.dumps(restore))
        cluster.wait_for(lambda: _shared_device(cluster) is None,
                         "the shared L4 unpublished after the inventory was restored", 240)


def _manifests(name: str, memory: str) -> str:
    return f"""
apiVersion: resource.kdra.dev/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: shared-gpu.kdra.dev
          selectors:
          - cel: {{expression: 'device.attributes["gpu.kdra.dev"].productName == "NVIDIA L4"'}}
          capacity:
            requests:
              memory: {memory}
---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  annotations:
    resource.kdra.dev/claims: |
      - name: gpu
        resourceClaimTemplateName: {name}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: localhost/busybox:static
    command: ["sh", "-c", {json.dumps(PRINT_ENV)}]
"""


def test_two_pods_share_one_gpu_and_each_sees_its_share(cluster: RealCluster,
                                                        shared_gpu: str) -> None:
    for name, memory in SHARES.items():
        cluster.kubectl("apply", "-f", "-", input=_manifests(name, memory))
    pods = wait_running(cluster, list(SHARES))
    share_ids = set()
    for name, memory in SHARES.items():
        (device,) = container_devices(cluster, pods[name], "main")
        assert device.name == shared_gpu and device.share_id
        share_ids.add(device.share_id)
        (result,) = device.claim["status"]["allocation"]["devices"]["results"]
        assert result["consumedCapacity"] == {"memory": memory}
        seen = logs(cluster, name, "main")
        assert seen.env["KDRA_GPU_MEMORY_LIMIT"] == memory
        assert seen.env["KDRA_SHARE_ID"] == device.share_id
        assert seen.env["NVIDIA_VISIBLE_DEVICES"] == device_facts(cluster, device)["uuid"]
        # Exactly what the agent's CDI spec for this share says, nothing else.
        assert as_sets(seen) == as_sets(expected(cluster, pods[name], "main"))
        assert not seen.other, seen.other
    assert len(share_ids) == 2  # two shares of one device
