"""kdra as deployed, on a real kubelet node: its image built from the Dockerfile, its manifests
applied as a user would, the operator and the agent running as pods, and user pods that run
with exactly their devices - seen from inside the container.

The tests run in file order on one cluster (package fixture ``cluster``): the examples first,
then a pod that asks for every H100 (only possible once the examples freed theirs), then a
pod that tries to widen its GPUs through env. The burst with killed kdra pods is in
test_faults.py.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kdra.agent.core.cdi import env_name
from kdra_devenv.images import busybox_files, oci_archive
from kdra_devenv.node import CDI_DIR, NODE_NAME
from kdra_devenv.realcluster import NAMESPACE, RealCluster, busybox_applets
from tests.node.deployed.devices import (
    GPU,
    as_sets,
    container_devices,
    device_facts,
    expected,
    logs,
    wait_running,
)

EXAMPLE_PODS = {
    "pod-with-cats": ("container0", "container1"),
    "single-gpu-pod": ("main",),
    "gpu-pair-pod": ("main",),
    "shared-gpu-pod-a": ("main",),
    "shared-gpu-pod-b": ("main",),
    "all-a100-pod": ("main",),
}
ONE_GPU = """
apiVersion: resource.kdra.dev/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.kdra.dev
"""
PRINT_DEVICES = ("env | grep -E '^(KDRA_|NVIDIA_VISIBLE_DEVICES=)' | sort; "
                 "ls -d /dev/kdra/* 2>/dev/null; exec sleep 3600")


def _pods(cluster: RealCluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    return list(json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", selector,
                                           "-o", "json").stdout)["items"])


def test_kdra_runs_as_pods_from_the_dockerfile_image(cluster: RealCluster) -> None:
    """Operator (two replicas, one leader) and agent are Ready pods of the image built from
    the Dockerfile, and the agent is registered as the runtime's NRI plugin."""
    operators = _pods(cluster, NAMESPACE, "app.kubernetes.io/component=operator")
    agents = _pods(cluster, NAMESPACE, "app.kubernetes.io/component=agent")
    assert len(operators) == 2 and len(agents) == 1, (operators, agents)
    for pod in operators + agents:
        assert pod["spec"]["nodeName"] == NODE_NAME
        statuses = pod["status"]["containerStatuses"]
        assert all(s["ready"] for s in statuses), pod["metadata"]["name"]
        assert statuses[0]["image"].endswith("localhost/kdra:node"), statuses[0]["image"]
    lease = json.loads(cluster.kubectl("get", "lease", "-n", NAMESPACE, "kdra-operator", "-o",
                                       "json").stdout)
    assert lease["spec"]["holderIdentity"] in {p["metadata"]["name"] for p in operators}

    assert cluster.node is not None and cluster.node.containerd is not None
    image = json.loads(cluster.node.containerd.crictl("inspecti", "localhost/kdra:node").stdout)
    labels = image["info"]["imageSpec"]["config"]["Labels"]
    assert labels["org.opencontainers.image.title"] == "kdra"  # the Dockerfile's LABEL

    agent_ip = agents[0]["status"]["podIP"]
    with urllib.request.urlopen(f"http://{agent_ip}:8082/metrics", timeout=10) as response:
        metrics = response.read().decode()
    assert re.search(r"^kdra_agent_nri_connected 1\.0$", metrics, re.M), \
        "the agent is not registered as NRI plugin"


def test_examples_run_and_see_exactly_their_devices(cluster: RealCluster) -> None:
    """The GPU examples and the seed's pod-with-cats, applied as the README says, run; each
    container prints exactly the devices allocated to it: the CDI env of each device, the two
    list variables and a fake GPU's device file - nothing else."""
    cluster.apply_examples()
    pods = wait_running(cluster, list(EXAMPLE_PODS))
    seen_devices: dict[str, set[str]] = {}
    for name, containers in EXAMPLE_PODS.items():
        for container in containers:
            devices = container_devices(cluster, pods[name], container)
            assert devices, f"{name}/{container} has no devices allocated"
            seen = logs(cluster, name, container)
            want = expected(cluster, pods[name], container)
            if name == "pod-with-cats":  # it prints KDRA_* only (no device files)
                want.env.pop("NVIDIA_VISIBLE_DEVICES", None)
                want.files = set()
            assert as_sets(seen) == as_sets(want), f"{name}/{container}"
            assert not seen.other, seen.other
            # The CDI specs say the truth about the devices (the slice's attributes).
            for device in devices:
                facts = device_facts(cluster, device)
                prefix = env_name(device.name)
                if device.driver == GPU:
                    assert seen.env[f"{prefix}_UUID"] == facts["uuid"]
                    assert facts["uuid"] in seen.env["NVIDIA_VISIBLE_DEVICES"].split(",")
                    assert f"/dev/kdra/{device.name}" in seen.files
                else:
                    assert seen.env[f"{prefix}_COLOR"] == facts["color"]
                    assert seen.env[f"{prefix}_SIZE"] == facts["size"]
            seen_devices[f"{name}/{container}"] = {d.listed for d in devices}
    # The seed's pod: container0 the shared small white cat, container1 a large black one.
    cats = {k: v for k, v in seen_devices.items() if k.startswith("pod-with-cats/")}
    assert len(cats) == 2 and all(len(v) == 1 for v in cats.values())
    # The two pods of the shared claim see the same GPU; the others one each.
    assert seen_devices["shared-gpu-pod-a/main"] == seen_devices["shared-gpu-pod-b/main"]
    assert len(seen_devices["gpu-pair-pod/main"]) == 2
    assert len(seen_devices["all-a100-pod/main"]) == 3  # three A100s (the sick GPU is an H200)


def test_deleted_pods_free_their_devices(cluster: RealCluster, gpu_class: None) -> None:
    """Deleting the examples frees every device (claims deallocated, CDI specs gone); a pod
    that needs all eight H100s then runs with them."""
    cluster.kubectl("delete", "pods", "-n", "default", "--all", "--wait=true",
                    "--timeout=120s")

    def released() -> bool:
        claims = json.loads(cluster.kubectl("get", "resourceclaims.resource.kdra.dev", "-A",
                                            "-o", "json").stdout)["items"]
        allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
        return not allocated and not list(CDI_DIR.glob("kdra.dev-*.json"))

    cluster.wait_for(released, "every claim deallocated and every CDI spec removed", 120)
    cluster.kubectl("apply", "-f", "-", input=_all_h100_pod())
    pods = wait_running(cluster, ["all-h100"])
    seen = logs(cluster, "all-h100", "main")
    devices = container_devices(cluster, pods["all-h100"], "main")
    assert len(devices) == 8
    assert as_sets(seen) == as_sets(expected(cluster, pods["all-h100"], "main"))
    assert seen.files == {f"/dev/kdra/{d.name}" for d in devices}
    cluster.kubectl("delete", "pod", "all-h100", "--wait=true", "--timeout=120s")


def _all_h100_pod() -> str:
    return f"""
apiVersion: resource.kdra.dev/v1
kind: ResourceClaimTemplate
metadata: {{name: all-h100, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.kdra.dev
          allocationMode: All
          selectors:
          - cel: {{expression: 'device.attributes["gpu.kdra.dev"].productName.contains("H100")'}}
---
apiVersion: v1
kind: Pod
metadata:
  name: all-h100
  namespace: default
  annotations:
    resource.kdra.dev/claims: |
      - name: gpus
        resourceClaimTemplateName: all-h100
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: localhost/busybox:static
    command: ["sh", "-c", {json.dumps(PRINT_DEVICES)}]
"""


@pytest.fixture
def greedy_image(cluster: RealCluster, tmp_path: Path) -> str:
    """A busybox image whose own config sets NVIDIA_VISIBLE_DEVICES=all."""
    name = "localhost/busybox:all-gpus"
    archive = oci_archive(tmp_path / "greedy.tar", name,
                          busybox_files(applets=busybox_applets()), entrypoint=["/bin/sh"],
                          env=("PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"))
    assert cluster.node is not None and cluster.node.containerd is not None
    cluster.node.containerd.import_image(archive)
    return name


GREEDY_ENV = """
apiVersion: v1
kind: ConfigMap
metadata: {name: all-gpus, namespace: default}
data: {NVIDIA_VISIBLE_DEVICES: all, KDRA_DEVICES: gpu.kdra.dev/kdra-node/gpu-99}
"""


def test_a_pod_asking_for_all_gpus_sees_only_its_own(cluster: RealCluster, gpu_class: None,
                                                      greedy_image: str) -> None:
    """NVIDIA_VISIBLE_DEVICES=all, set by the pod (from a ConfigMap: the webhook sees no
    value) or by its image, is overridden with the container's own GPU, and a container of
    the pod without devices that sets it itself (from the ConfigMap) sees no GPU: the runtime
    (NRI) decides, not the pod's author. A value written in a container's own env is refused
    at admission, in a consuming container (issue 22) and in one that uses no claim (issue
    36): the webhook names the field."""
    claims = ("- name: gpu\n  resourceClaimTemplateName: one-gpu\n"
              "  containers: [pod-env, image-env]\n")
    greedy = {"name": "pod-env", "image": "localhost/busybox:static",
              "command": ["sh", "-c", PRINT_DEVICES],
              "envFrom": [{"configMapRef": {"name": "all-gpus"}}]}
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "greedy", "namespace": "default",
                     "annotations": {"resource.kdra.dev/claims": claims}},
        "spec": {"restartPolicy": "Never", "containers": [
            greedy,
            {"name": "image-env", "image": greedy_image,
             "command": ["sh", "-c", PRINT_DEVICES]},
            {"name": "bystander", "image": "localhost/busybox:static",
             "command": ["sh", "-c", PRINT_DEVICES],
             "envFrom": [{"configMapRef": {"name": "all-gpus"}}]},
        ]},
    }
    cluster.kubectl("apply", "-f", "-", input=ONE_GPU + "---" + GREEDY_ENV)
    own_env = json.loads(json.dumps(pod))
    own_env["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                "value": "all"}]
    refused = cluster.kubectl("apply", "-f", "-", input=json.dumps(own_env), check=False)
    assert refused.returncode != 0, refused.stdout
    assert "spec.containers[0].env[" in refused.stderr, refused.stderr
    assert "NVIDIA_VISIBLE_DEVICES is set by kdra" in refused.stderr, refused.stderr

    bystander_env = json.loads(json.dumps(pod))
    bystander_env["spec"]["containers"][2]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES",
                                                      "value": "all"}]
    refused = cluster.kubectl("apply", "-f", "-", input=json.dumps(bystander_env), check=False)
    assert refused.returncode != 0, refused.stdout
    assert "spec.containers[2].env[0]" in refused.stderr, refused.stderr
    assert "this one uses none" in refused.stderr, refused.stderr

    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    pods = wait_running(cluster, ["greedy"])
    for container in ("pod-env", "image-env"):
        devices = container_devices(cluster, pods["greedy"], container)
        assert len(devices) == 1
        uuid = device_facts(cluster, devices[0])["uuid"]
        seen = logs(cluster, "greedy", container)
        assert seen.env["NVIDIA_VISIBLE_DEVICES"] == uuid, container
        assert seen.env["KDRA_DEVICES"] == devices[0].listed, container
        assert seen.files == {f"/dev/kdra/{devices[0].name}"}, container
        assert as_sets(seen) == as_sets(expected(cluster, pods["greedy"], container))
    bystander = logs(cluster, "greedy", "bystander")
    assert bystander.env.get("NVIDIA_VISIBLE_DEVICES") == "void", bystander
    assert not bystander.files, bystander
    cluster.kubectl("delete", "pod", "greedy", "--wait=true")
