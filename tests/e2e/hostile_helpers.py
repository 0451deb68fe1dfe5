"""A harness for attacking kdra as deployed, and for checking it survived each attack.

:func:`hostile` (a module fixture) installs what a real install has — the manifests' RBAC,
ServiceAccounts and ValidatingAdmissionPolicies, the admission webhook configurations, the
GPU DeviceClass — and runs, as real processes:

* the operator, authenticated as its ServiceAccount (a TokenRequest token: the manifests'
  RBAC applies to it), with its webhooks on loopback (``--webhook-url``) and managing the
  webhook configurations' CA bundle;
* one node agent, authenticated as the agent ServiceAccount with a token bound to a pod on
  its node (so the API server reports ``authentication.kubernetes.io/node-name``, which the
  agent VAPs check), serving a node with a few fake GPUs.

Attackers are namespace users: :meth:`Hostile.as_user` runs kubectl impersonating
``mallory`` (``edit`` in the attack namespace, plus a role for kdra's claims and templates:
what a namespace user has). :meth:`Hostile.after_attack` is the "after each attack" of issue
22: the operator and the agent are still serving other pods (a fresh pod with a generated
claim binds, which needs the agent's prepare), a **restart of the operator succeeds**, and
``kdra check`` is clean. Other attack modules (``test_hostile_privilege_*.py``) reuse it.

Module-scoped: the configurations are removed afterwards (they fail closed), the Node is
deleted; other test modules run with webhooks off, as before.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.operator.core.webhook_configs import (
    MUTATING_CONFIG,
    TLS_SECRET,
    VALIDATING_CONFIG,
    Endpoint,
    mutating_configuration,
    validating_configuration,
)
from kdra_devenv.controlplane import WEBHOOK_CLIENT, ControlPlane, free_port
from tests.e2e.conftest import ROOT, get_json
from tests.e2e.conversion import ConversionServer
from tests.e2e.procs import KdraProcess, wait_for

SYSTEM = "kdra-system"
MANIFESTS = ROOT / "manifests"
OPERATOR_SA = f"system:serviceaccount:{SYSTEM}:kdra-operator"
AGENT_SA = f"system:serviceaccount:{SYSTEM}:kdra-agent"
REAL_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
              "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
USER = "mallory"
API = "resource.kdra.dev/v1"
CLAIMS = "resourceclaims.resource.kdra.dev"
GPU_CLASS = "gpu.kdra.dev"
PAUSE = "registry.k8s.io/pause:3.10"
INVENTORY = "gpus:\n- 4 x H100-80GB\n"

# What a namespace user may do with kdra's objects (until an aggregated kdra-user role
# ships: then `edit` alone is what such a user has).
USER_KDRA_ROLE = {
    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
    "metadata": {"name": "kdra-hostile-test-user"},
    "rules": [{"apiGroups": ["resource.kdra.dev"],
               "resources": ["resourceclaims", "resourceclaimtemplates"],
               "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
              {"apiGroups": ["resource.kdra.dev"], "resources": ["deviceclasses"],
               "verbs": ["get", "list", "watch"]}],
}


# `edit` is an aggregated role, filled in by a controller the test control plane does not run:
# its parts are bound instead, plus kdra's objects.
USER_ROLES = ("system:aggregate-to-edit", "system:aggregate-to-view",
              USER_KDRA_ROLE["metadata"]["name"])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


def pod_body(name: str, namespace: str, claims: Any = None, *,
             annotations: dict[str, str] | None = None, env: list[dict[str, Any]] | None = None,
             node: str | None = None, scheduler: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace,
                            "annotations": dict(annotations or {})}
    if claims is not None:
        meta["annotations"][CLAIMS_ANNOTATION] = (claims if isinstance(claims, str)
                                                  else json.dumps(claims))
    container: dict[str, Any] = {"name": "main", "image": PAUSE}
    if env:
        container["env"] = env
    spec: dict[str, Any] = {"containers": [container], "terminationGracePeriodSeconds": 0}
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def template_body(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS}}]}}}}


def register_node(plane: ControlPlane, name: str) -> None:
    """A Ready node, as its kubelet registers it."""
    plane.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}))
    plane.kubectl("patch", "node", name, "--subresource=status", "--type=merge",
                  "-p", json.dumps({"status": {
                      "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                      "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                      "conditions": [{"type": "Ready", "status": "True",
                                      "reason": "KubeletReady",
                                      "message": "kubelet is posting ready status"}]}}))
    # The API server taints a new Node not-ready; the node lifecycle controller (not run
    # here) lifts it once the kubelet reports Ready.
    plane.kubectl("taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-")


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set size so far (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/<pid>/status")


class Hostile:
    """The installed system under attack; see the module docstring."""

    def __init__(self, plane: ControlPlane, work: Path) -> None:
        self.plane = plane
        self.work = work
        self.node = unique("hostile-node")
        self.namespace = unique("hostile")  # the attacker's namespace
        self.probes = unique("hostile-probe")  # where after_attack's fresh pods run
        self.webhook_port = free_port()
        self.operator: KdraProcess | None = None
        self.agent: KdraProcess | None = None
        self.installed: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ set-up

    def install(self) -> None:
        plane = self.plane
        out = plane.kubectl("kustomize", str(MANIFESTS / "base")).stdout
        self.installed = [d for d in yaml.safe_load_all(out)
                          if d and d["kind"] in REAL_KINDS]
        plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                      input=yaml.safe_dump_all([*self.installed, USER_KDRA_ROLE]))
        plane.kubectl("apply", "-f", str(MANIFESTS / "examples/gpu/deviceclass.yaml"))
        for namespace in (self.namespace, self.probes):
            plane.kubectl("create", "namespace", namespace)
            for role in USER_ROLES:
                plane.kubectl("create", "rolebinding", f"{USER}-{role}", "-n", namespace,
                              f"--clusterrole={role}", f"--user={USER}")
            wait_for(lambda ns=namespace: plane.kubectl(  # type: ignore[misc]
                "get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0,
                what=f"default ServiceAccount of {namespace}")
            self.as_user("create", "-f", "-", namespace=namespace, check=True,
                         input=json.dumps(template_body("gpu", namespace)))
        # A node as its kubelet registers it (the agent's RBAC cannot create Nodes).
        register_node(plane, self.node)
        # The webhook configurations as an install creates them; the operator may only
        # update these two (its RBAC), which it does at start with its URL and CA bundle.
        endpoint = Endpoint(namespace=SYSTEM, url=f"https://127.0.0.1:{self.webhook_port}")
        for config in (mutating_configuration(endpoint, None),
                       validating_configuration(endpoint, None)):
            plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                          input=json.dumps(config))

    def _kubeconfig(self, name: str, token: str) -> Path:
        config = yaml.safe_load(self.plane.kubeconfig.read_text())
        config["users"] = [{"name": name, "user": {"token": token}}]
        for context in config["contexts"]:
            context["context"]["user"] = name
        path = self.work / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def _token(self, account: str, bound_pod: dict[str, Any] | None = None) -> str:
        request: dict[str, Any] = {"apiVersion": "authentication.k8s.io/v1",
                                   "kind": "TokenRequest",
                                   "spec": {"expirationSeconds": 86400}}
        if bound_pod is not None:
            request["spec"]["boundObjectRef"] = {
                "apiVersion": "v1", "kind": "Pod", "name": bound_pod["metadata"]["name"],
                "uid": bound_pod["metadata"]["uid"]}
        answer = self.plane.kubectl("create", "--raw",
                                    f"/api/v1/namespaces/{SYSTEM}/serviceaccounts/{account}"
                                    "/token", "-f", "-", input=json.dumps(request)).stdout
        return str(json.loads(answer)["status"]["token"])

    def start(self) -> None:
        operator_config = self._kubeconfig("kdra-operator", self._token("kdra-operator"))
        port = str(self.webhook_port)
        self.operator = KdraProcess(
            ["operator", "--health-port", "0", "--webhook-port", port,
             "--webhook-host", "127.0.0.1", "--webhook-url", f"https://127.0.0.1:{port}",
             "--webhook-manage-config", "true",
             # Only the API server's webhook client certificate may call admission.
             "--webhook-client-ca", str(self.plane.webhook_client_ca),
             "--webhook-client-names", WEBHOOK_CLIENT],
            self.work / "operator.log", operator_config, ready_line="kdra operator started")
        self.operator.start(timeout=120)
        # The agent's token is bound to a pod on its node, as the DaemonSet's would be.
        agent_pod = json.loads(self.plane.kubectl("create", "-o", "json", "-f", "-", input=(
            json.dumps(pod_body(unique("kdra-agent"), SYSTEM, node=self.node) | {
                "spec": {"serviceAccountName": "kdra-agent", "nodeName": self.node,
                         "containers": [{"name": "agent", "image": PAUSE}]}}))).stdout)
        agent_config = self._kubeconfig("kdra-agent", self._token("kdra-agent", agent_pod))
        home = self.work / "agent"
        home.mkdir(exist_ok=True)
        (home / "inventory.yaml").write_text(INVENTORY)
        self.agent = KdraProcess(
            ["agent", "--node-name", self.node, "--inventory", str(home / "inventory.yaml"),
             "--cdi-dir", str(home / "cdi"), "--state-dir", str(home / "state"),
             "--lease-duration", "10", "--renew-interval", "2"],
            home / "agent.log", agent_config, ready_line="kdra agent started")
        self.agent.start(timeout=120)

    def stop(self) -> None:
        for proc in (self.agent, self.operator):
            if proc is not None:
                proc.stop()
        plane = self.plane
        for kind, name in (("mutatingwebhookconfiguration", MUTATING_CONFIG),
                           ("validatingwebhookconfiguration", VALIDATING_CONFIG)):
            plane.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        plane.kubectl("delete", "secret", TLS_SECRET, "-n", SYSTEM, "--ignore-not-found",
                      check=False)
        for namespace in (self.namespace, self.probes):
            plane.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0",
                          "--force", "--wait=false", check=False)
            plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        plane.kubectl("delete", "pods", "-n", SYSTEM, "--all", "--grace-period=0", "--force",
                      "--wait=false", check=False)
        plane.kubectl("delete", "node", self.node, "--ignore-not-found", "--wait=false",
                      check=False)
        for doc in reversed(self.installed):
            if doc["kind"] in ("Namespace", "ServiceAccount"):
                continue  # other tests use kdra-system
            args = [doc["kind"].lower(), doc["metadata"]["name"]]
            if doc["metadata"].get("namespace"):
                args += ["-n", doc["metadata"]["namespace"]]
            plane.kubectl("delete", *args, "--ignore-not-found", "--wait=false", check=False)
        plane.kubectl("delete", "clusterrole", USER_KDRA_ROLE["metadata"]["name"],
                      "--ignore-not-found", check=False)

    # ------------------------------------------------------------------ attacking

    def as_user(self, *args: str, namespace: str | None = None, input: str | None = None,
                check: bool = False, user: str = USER) -> subprocess.CompletedProcess[str]:
        """kubectl as the namespace user (in the attack namespace unless told otherwise)."""
        return self.plane.kubectl("-n", namespace or self.namespace, *args, input=input,
                                  check=check, as_user=user)

    def create_as_user(self, obj: dict[str, Any],
                       namespace: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.as_user("create", "-f", "-", "-o", "json", namespace=namespace,
                            input=json.dumps(obj))

    def denied(self, result: subprocess.CompletedProcess[str], *words: str) -> str:
        """Assert that a request was refused with a message holding ``words``; return it."""
        assert result.returncode != 0, f"admitted: {result.stdout[:400]}"
        message = result.stderr.strip()
        for word in words:
            assert word in message, message
        assert len(message) < 4096, f"{len(message)} characters of error text"
        print(f"\n[denied] {message[:600]}")
        return message

    def delete_pods(self, *names: str, namespace: str | None = None) -> None:
        """Force-delete pods (of the attack namespace unless told otherwise)."""
        if names:
            self.plane.kubectl("delete", "pod", *names, "-n", namespace or self.namespace,
                               "--grace-period=0", "--force", "--ignore-not-found")

    def pod(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        return dict(get_json(self.plane, "pod", name, "-n", namespace or self.namespace))

    def bound_pod(self, name: str, namespace: str | None = None,
                  timeout: float = 90.0) -> dict[str, Any]:
        """Wait until kdra-scheduler bound the pod; return it."""
        def bound() -> dict[str, Any] | None:
            obj = self.pod(name, namespace)
            return obj if obj["spec"].get("nodeName") else None

        found: dict[str, Any] = wait_for(bound, timeout=timeout, what=f"pod {name} bound")
        return found

    def without_webhook(self, *names: str) -> WebhookOff:
        """A context in which the validating webhooks ``names`` are gone (an outage, an old
        object from before the rule): for storing what the webhooks would deny."""
        return WebhookOff(self, names)

    # ------------------------------------------------------------------ after each attack

    def after_attack(self, what: str) -> None:
        """The operator and the agent still serve other pods, the operator restarts, and
        ``kdra check`` is clean."""
        assert self.operator is not None and self.agent is not None
        assert self.operator.alive, f"after {what}: the operator died: {self.operator.tail()}"
        assert self.agent.alive, f"after {what}: the agent died: {self.agent.tail()}"
        self.fresh_pod_binds(what)
        self.operator.stop()
        self.operator.start(timeout=120)  # the restart must succeed (attack 1)
        self.fresh_pod_binds(f"{what}, after a restart")
        self.check_clean(what)

    def fresh_pod_binds(self, what: str) -> None:
        name = unique("probe")
        self.as_user("create", "-f", "-", namespace=self.probes, check=True, input=json.dumps(
            pod_body(name, self.probes, [{"name": "gpu", "resourceClaimTemplateName": "gpu"}])))
        try:
            obj = self.bound_pod(name, self.probes)
        except AssertionError as exc:
            raise AssertionError(f"after {what}: a fresh pod was not bound: {exc}\n"
                                 f"{self.operator.tail(80) if self.operator else ''}") from exc
        assert obj["spec"]["nodeName"] == self.node
        assert any(k.startswith("devices.resource.kdra.dev/") and v
                   for k, v in obj["metadata"]["annotations"].items())
        self.plane.kubectl("delete", "pod", name, "-n", self.probes, "--grace-period=0",
                           "--force", "--wait=false")

    def check(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kdra", "check", "--kubeconfig", str(self.plane.kubeconfig),
             "--namespace", SYSTEM], capture_output=True, text=True)

    def check_clean(self, what: str, timeout: float = 60.0) -> None:
        """``kdra check`` exits 0 (allowing the probes' releases to settle)."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.check()
            if result.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert result.returncode == 0, (f"after {what}: kdra check exited "
                                        f"{result.returncode}:\n{result.stdout}{result.stderr}")


class WebhookOff:
    """Remove webhooks of kdra-validating for the duration of a ``with`` block."""

    def __init__(self, hostile: Hostile, names: tuple[str, ...]) -> None:
        self.hostile = hostile
        self.names = names
        self.saved: dict[str, Any] | None = None

    def __enter__(self) -> WebhookOff:
        plane = self.hostile.plane
        config = get_json(plane, "validatingwebhookconfiguration", VALIDATING_CONFIG)
        self.saved = config
        kept = [w for w in config["webhooks"] if w["name"] not in self.names]
        assert len(kept) == len(config["webhooks"]) - len(self.names), f"no {self.names}"
        plane.kubectl("patch", "validatingwebhookconfiguration", VALIDATING_CONFIG,
                      "--type=json", "-p", json.dumps([
                          {"op": "replace", "path": "/webhooks", "value": kept}]))
        time.sleep(2)  # the API server picks configuration changes up asynchronously
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.saved is not None
        plane = self.hostile.plane
        plane.kubectl("patch", "validatingwebhookconfiguration", VALIDATING_CONFIG,
                      "--type=json", "-p", json.dumps([
                          {"op": "replace", "path": "/webhooks",
                           "value": self.saved["webhooks"]}]))
        time.sleep(2)


@pytest.fixture(autouse=True)
def logs_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    """In a module that imports it: a failed test's report ends with the operator's and the
    agent's logs."""
    yield
    rep = getattr(request.node, "rep_call", None)
    harness = request.node.funcargs.get("hostile") if hasattr(request.node, "funcargs") else None
    if rep is not None and rep.failed and isinstance(harness, Hostile):
        for proc in (harness.operator, harness.agent):
            if proc is not None:
                print(f"===== {proc.args[0]} log =====\n{proc.tail(150)}")


@pytest.fixture(scope="module")
def hostile(control_plane: ControlPlane, conversion_server: ConversionServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    """kdra installed as deployed, under attack (see :class:`Hostile`)."""
    harness = Hostile(control_plane, tmp_path_factory.mktemp("hostile"))
    try:
        harness.install()
        harness.start()
        yield harness
    finally:
        harness.stop()
        conversion_server.point(control_plane)  # the operator pointed the CRDs at itself
