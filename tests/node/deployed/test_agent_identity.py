"""The agent's own token, as the kubelet projected it into the DaemonSet's pod, reaches only
its own node.

The admission policies of manifests/base/agent/admission-policy.yaml know an agent's node
from the request's ``authentication.kubernetes.io/node-name`` extra, which the API server
derives from a service-account token bound to a pod on a node. The e2e tier impersonates that
extra; here the token is the real one, read from inside the agent's container. The agent's
real writes for its node (slices, heartbeat Lease renewals, a claim's prepared status) go
through; the same token is refused every such write for another node. The refused and the
allowed probes are server-side dry runs: admission decides, nothing is stored.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from kdra_devenv.node import NODE_NAME
from kdra_devenv.realcluster import NAMESPACE, RealCluster
from tests.node.deployed.devices import GPU, wait_running

AGENT = f"system:serviceaccount:{NAMESPACE}:kdra-agent"
TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
OTHER = "other-node"
POD = """
apiVersion: resource.kdra.dev/v1
kind: ResourceClaim
metadata: {name: identity-gpu, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpu.kdra.dev
---
apiVersion: v1
kind: Pod
metadata:
  name: identity
  namespace: default
  annotations:
    resource.kdra.dev/claims: |
      - name: gpu
        resourceClaimName: identity-gpu
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: localhost/busybox:static
    command: ["sh", "-c", "exec sleep 3600"]
"""


class AgentToken:
    """kubectl with the agent pod's own token (no client certificate: the token decides)."""

    def __init__(self, cluster: RealCluster, work: Path) -> None:
        assert cluster.plane is not None
        self.cluster = cluster
        pod = cluster.get_json("pods", "-n", NAMESPACE,
                               "-l", "app.kubernetes.io/component=agent")["items"][0]
        token = cluster.kubectl("exec", "-n", NAMESPACE, pod["metadata"]["name"], "-c", "agent",
                                "--", "cat", TOKEN).stdout.strip()
        config = yaml.safe_load(cluster.plane.kubeconfig.read_text())
        config["users"] = [{"name": "kdra-agent", "user": {"token": token}}]
        for context in config["contexts"]:
            context["context"]["user"] = "kdra-agent"
        self.kubeconfig = work / "agent.kubeconfig"
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)

    def run(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        assert self.cluster.plane is not None
        kubectl = self.cluster.plane.bin_dir / "kubectl"
        return subprocess.run([str(kubectl), "--kubeconfig", str(self.kubeconfig), *args],
                              input=input, capture_output=True, text=True, timeout=60)

    def allowed(self, *args: str, input: str | None = None) -> None:
        result = self.run(*args, "--dry-run=server", input=input)
        assert result.returncode == 0, result.stderr

    def denied(self, *args: str, input: str | None = None, says: str) -> None:
        result = self.run(*args, "--dry-run=server", input=input)
        assert result.returncode != 0, f"admitted: {result.stdout[:400]}"
        assert says in result.stderr, result.stderr
        print(f"\n[denied] {result.stderr.strip()[:400]}")


def _lease(name: str, node: str) -> str:
    return json.dumps({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "annotations": {"resource.kdra.dev/node": node,
                                     "resource.kdra.dev/driver": GPU}},
        "spec": {"holderIdentity": "probe", "leaseDurationSeconds": 40}})


def _agent_leases(cluster: RealCluster) -> dict[str, dict[str, Any]]:
    items = cluster.get_json("leases", "-n", NAMESPACE)["items"]
    return {lease["metadata"]["name"]: lease for lease in items
            if (lease["metadata"].get("annotations") or {}).get("resource.kdra.dev/node")}


def test_the_agent_pods_token_writes_for_its_node_only(cluster: RealCluster, gpu_class: None,
                                                        tmp_path: Path) -> None:
    agent = AgentToken(cluster, tmp_path)
    # The API server reads the node from the projected token itself.
    review = json.loads(agent.run("auth", "whoami", "-o", "json").stdout)
    user = review["status"]["userInfo"]
    assert user["username"] == AGENT, user
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [NODE_NAME], user

    # Its real writes for its node went through: slices, the heartbeat Lease (renewed, an
    # UPDATE, while we watch), a claim's prepared status.
    slices = [s for s in cluster.get_json("resourceslices.resource.kdra.dev")["items"]
              if s["spec"].get("nodeName") == NODE_NAME]
    assert {s["spec"]["driver"] for s in slices} >= {GPU}, slices
    leases = _agent_leases(cluster)
    assert leases and all(
        lease["metadata"]["annotations"]["resource.kdra.dev/node"] == NODE_NAME
        for lease in leases.values()), leases
    deadline = time.monotonic() + 120
    while all(_agent_leases(cluster).get(name, {}).get("spec", {}).get("renewTime")
              == lease["spec"].get("renewTime") for name, lease in leases.items()):
        assert time.monotonic() < deadline, "the agent renewed none of its Leases in 120 s"
        time.sleep(2)
    cluster.kubectl("apply", "-f", "-", input=POD)
    try:
        wait_running(cluster, ["identity"])
        claim = cluster.get_json("resourceclaims.resource.kdra.dev", "identity-gpu",
                                 "-n", "default")
        prepared = claim["status"].get("devices") or []
        assert prepared and all(d["pool"] == NODE_NAME for d in prepared), claim["status"]
        _refused_for_another_node(agent, claim, slices[0])
    finally:
        cluster.kubectl("delete", "pod", "identity", "--wait=true", "--timeout=120s")
        cluster.kubectl("delete", "resourceclaim.resource.kdra.dev", "identity-gpu",
                        "-n", "default", "--wait=true", "--timeout=120s")


def _refused_for_another_node(agent: AgentToken, claim: dict[str, Any],
                              own_slice: dict[str, Any]) -> None:
    """The same token, for another node: refused; for its own: allowed (dry runs)."""
    # ResourceSlices: a new one for another node, or its own moved there.
    foreign = {"apiVersion": own_slice["apiVersion"], "kind": "ResourceSlice",
               "metadata": {"name": f"probe-{OTHER}"},
               "spec": {**own_slice["spec"], "nodeName": OTHER,
                        "pool": {**own_slice["spec"]["pool"], "name": OTHER}}}
    agent.denied("create", "-f", "-", input=json.dumps(foreign),
                 says=f"may only write ResourceSlices of its own node, not one of node '{OTHER}'")
    moved = json.loads(json.dumps(own_slice))
    moved["spec"]["nodeName"] = OTHER
    agent.denied("replace", "-f", "-", input=json.dumps(moved),  # the CRD refuses it first
                 says="spec.nodeName is immutable")
    mine = json.loads(json.dumps(foreign))
    mine["metadata"]["name"] = f"probe-{NODE_NAME}"
    mine["spec"]["nodeName"] = NODE_NAME
    mine["spec"]["pool"]["name"] = NODE_NAME
    agent.allowed("create", "-f", "-", input=json.dumps(mine))

    # Leases: another node's heartbeat, under its name or under its own.
    agent.denied("create", "-f", "-", input=_lease(f"kdra-agent-{OTHER}-gpu-kdra-dev", OTHER),
                 says=f"may only write Leases annotated resource.kdra.dev/node: '{NODE_NAME}'")
    agent.denied("create", "-f", "-",
                 input=_lease(f"kdra-agent-{OTHER}-gpu-kdra-dev", NODE_NAME),
                 says=f"may only write Leases named kdra-agent-{NODE_NAME}-<driver>")
    agent.allowed("create", "-f", "-",
                  input=_lease(f"kdra-agent-{NODE_NAME}-gpu-kdra-dev-probe", NODE_NAME))

    # A claim's status: another pool's device entries (devices the claim is not allocated:
    # the CRD refuses them before the agents' policy is asked, issue 36), or the allocation.
    ns = ("-n", "default")
    forged = json.loads(json.dumps(claim))
    forged["status"]["devices"] = [{**d, "pool": OTHER} for d in claim["status"]["devices"]]
    agent.denied("replace", "--subresource=status", "-f", "-", *ns, input=json.dumps(forged),
                 says="every status.devices entry must be for a device in "
                      "status.allocation.devices.results")
    cleared = json.loads(json.dumps(claim))
    for key in ("allocation", "allocatedDevices", "reservedFor", "devices"):
        cleared["status"].pop(key, None)
    agent.denied("replace", "--subresource=status", "-f", "-", *ns, input=json.dumps(cleared),
                 says="kdra agents may not change status.allocation")
    agent.allowed("replace", "--subresource=status", "-f", "-", *ns, input=json.dumps(claim))
