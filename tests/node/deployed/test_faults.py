"""A burst of GPU pods on the real node while kdra's own pods die: the agent's process is
killed (SIGKILL: its container restarts, its NRI plugin registers again) and the leader
operator's pod is deleted without grace (the standby takes over). Nothing is lost: every pod
of the burst runs to completion with exactly one GPU of its own, seen from inside; then no
claim stays allocated, no CDI spec or checkpoint entry is left, and ``kdra check`` finds every
invariant intact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from kdra_devenv.node import AGENT_STATE_DIR, CDI_DIR
from kdra_devenv.realcluster import NAMESPACE, RealCluster
from tests.node.deployed.devices import Device, device_facts, logs

PODS = 24  # twice the node's 11 healthy GPUs: they take turns
TEMPLATE = """
apiVersion: resource.kdra.dev/v1
kind: ResourceClaimTemplate
metadata: {name: burst-gpu, namespace: default}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.kdra.dev
"""
PRINT_AND_HOLD = ("env | grep -E '^(KDRA_|NVIDIA_VISIBLE_DEVICES=)' | sort; "
                  "ls -d /dev/kdra/* 2>/dev/null; sleep 3")


def _burst_pod(index: int) -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"burst-{index:02d}", "namespace": "default",
                     "labels": {"kdra-test": "burst"},
                     "annotations": {"resource.kdra.dev/claims":
                                     "- name: gpu\n  resourceClaimTemplateName: burst-gpu\n"}},
        "spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "localhost/busybox:static",
             "command": ["sh", "-c", PRINT_AND_HOLD]}]},
    }


def _phases(cluster: RealCluster) -> dict[str, str]:
    items = json.loads(cluster.kubectl("get", "pods", "-n", "default", "-l", "kdra-test=burst",
                                       "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p.get("status", {}).get("phase", "") for p in items}


def _kill_agent_process(cluster: RealCluster) -> None:
    assert cluster.node is not None and cluster.node.containerd is not None
    crictl = cluster.node.containerd.crictl
    container = crictl("ps", "--name", "^agent$", "-q").stdout.split()[0]
    pid = json.loads(crictl("inspect", container).stdout)["info"]["pid"]
    os.kill(pid, signal.SIGKILL)


def _delete_leader(cluster: RealCluster) -> str:
    lease = json.loads(cluster.kubectl("get", "lease", "-n", NAMESPACE, "kdra-operator", "-o",
                                       "json").stdout)
    leader = str(lease["spec"]["holderIdentity"])
    cluster.kubectl("delete", "pod", "-n", NAMESPACE, leader, "--grace-period=0", "--force",
                    "--wait=false")
    return leader


def test_killing_the_agent_and_the_operator_mid_burst_loses_nothing(
        cluster: RealCluster, gpu_class: None) -> None:
    cluster.kubectl("apply", "-f", "-", input=TEMPLATE)
    pods = {"apiVersion": "v1", "kind": "List", "items": [_burst_pod(i) for i in range(PODS)]}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pods))

    # Mid-burst: some pods done or running, others still waiting for a GPU.
    cluster.wait_for(lambda: sum(p in ("Running", "Succeeded")
                                 for p in _phases(cluster).values()) >= 4,
                     "the burst's first pods", 180)
    _kill_agent_process(cluster)
    leader = _delete_leader(cluster)

    def finished() -> bool:
        phases = _phases(cluster)
        assert "Failed" not in phases.values(), phases
        return len(phases) == PODS and set(phases.values()) == {"Succeeded"}

    cluster.wait_for(finished, f"all {PODS} burst pods Succeeded (leader {leader} deleted, "
                               "agent killed)", 600)

    # Each pod ran with exactly one GPU, which its env, its UUID and its device file agree on.
    for index in range(PODS):
        name = f"burst-{index:02d}"
        seen = logs(cluster, name, "main")
        listed = seen.env.get("KDRA_DEVICES", "")
        assert listed.count(",") == 0 and listed.startswith("gpu.kdra.dev/"), (name, seen)
        driver, pool, device = listed.split("/")
        uuid = device_facts(cluster, Device(driver, pool, device, {}))["uuid"]
        assert seen.env["NVIDIA_VISIBLE_DEVICES"] == uuid, (name, seen)
        assert seen.files == {f"/dev/kdra/{device}"}, (name, seen)

    # Done pods release everything: no allocation, CDI spec or checkpoint entry is left.
    def released() -> bool:
        claims = json.loads(cluster.kubectl("get", "resourceclaims.resource.kdra.dev", "-n",
                                            "default", "-o", "json").stdout)["items"]
        return not [c for c in claims if (c.get("status") or {}).get("allocation")] \
            and not list(CDI_DIR.glob("kdra.dev-*.json"))

    cluster.wait_for(released, "every burst claim released and unprepared", 180)
    assert cluster.plane is not None
    check = subprocess.run(
        [sys.executable, "-m", "kdra", "check", "--kubeconfig", str(cluster.plane.kubeconfig),
         "--cdi-dir", str(CDI_DIR), "--state-dir", str(AGENT_STATE_DIR)],
        capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    cluster.kubectl("delete", "pods", "-n", "default", "-l", "kdra-test=burst", "--wait=true")
