"""A harness for least-privilege attacks on kdra as deployed (test_hostile_privilege_agents,
test_hostile_privilege_operator), against a real API server with the manifests' RBAC,
ValidatingAdmissionPolicies and webhooks.

- The operator runs as deployed: its ServiceAccount's token (manifests/base RBAC and
  policies), its webhooks served and registered (manifests/webhooks' objects, pointed at the
  test's port; the operator fills in the CA bundle, which is all it may change), kdra's CRDs
  converting through it (pointed at its URL by the fixture, as an installer would: the
  operator itself may point them only at kdra's own Service).
- Attackers are impersonated with kubeconfigs carrying ``as`` (and, for a node agent,
  ``as-user-extra`` authentication.kubernetes.io/node-name: what the API server derives from
  a token bound to a pod on that node): an agent, the simulation agent, the operator's
  ServiceAccount, a namespace user with the ``edit`` role.
- The node agent process itself runs with the admin's credentials (it is not under test here).

:func:`installed` and :func:`cluster` are module fixtures: a test module imports both (each
module gets its own cluster). After each attack (:meth:`Cluster.after_attack`): another pod
still gets a device and is bound, the operator restarts, and ``kdra check`` finds no violation
in this test's namespace or nodes.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION
from kdra.operator.core.webhook_configs import (
    CRD_NAMES,
    Endpoint,
    conversion_patch,
    mutating_configuration,
    validating_configuration,
)
from kdra_devenv.controlplane import ControlPlane, free_port
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
        self.node = node
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

    def request(self, method: str, path: str, body: dict[str, Any] | bytes) -> tuple[int, str]:
        """A request sent as is: kubectl patch GETs the object first (which the attacker
        may not be allowed to), kubectl replace rewrites its last-applied annotation. A
        ``bytes`` body is sent verbatim (JSON nested deeper than Python can encode)."""
        config = yaml.safe_load(self.plane.kubeconfig.read_text())
        cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
        context = ssl.create_default_context(cafile=cluster["certificate-authority"])
        context.load_cert_chain(user["client-certificate"], user["client-key"])
        content = "application/merge-patch+json" if method == "PATCH" else "application/json"
        headers = {"Content-Type": content}
        if self.user:  # else the admin, as is
            headers["Impersonate-User"] = self.user
        if self.node:
            headers[f"Impersonate-Extra-{urllib.parse.quote(NODE_NAME_EXTRA, safe='')}"] = \
                self.node
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(cluster["server"] + path, data=data, method=method,
                                         headers=headers)
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

    def run_check(self) -> subprocess.CompletedProcess[str]:
        """``kdra check -o json`` as a user runs it, with the agent's directories."""
        home = self.work / "agent"
        return subprocess.run(
            [sys.executable, "-m", "kdra", "check", "--kubeconfig", str(self.plane.kubeconfig),
             "--cdi-dir", str(home / "cdi"), "--state-dir", str(home / "state"), "-o", "json"],
            capture_output=True, text=True, timeout=120, check=False)

    def check_violations(self) -> list[dict[str, str]]:
        """``kdra check`` as a user runs it; the violations about this test's objects."""
        result = self.run_check()
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
    # The CRDs' conversion at the operator's /convert, as an installer serving it at a URL
    # points them (the operator itself may point them only at kdra's own Service; here it
    # fills in the CA bundle).
    for crd in CRD_NAMES:
        control_plane.kubectl("patch", "crd", crd, "--type=merge", "-p",
                              json.dumps(conversion_patch(Endpoint(url=url), None)))
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
