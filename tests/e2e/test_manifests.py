"""kdra's install on a real API server: every kustomization applies (server-side dry-run), the
RBAC is least-privilege (``kubectl auth can-i`` as the service accounts), the
ValidatingAdmissionPolicy confines an agent to its own node, and the image's install steps
work (``hack/check-image-install.sh``, slow).

The CRDs kdra's manifests need and the RBAC objects and admission
policies are applied *for real* (they only affect kdra's service accounts); the workloads and
the webhook configurations are only dry-run, so other tests in the session are unaffected.

An agent is impersonated with a kubeconfig carrying ``as`` and ``as-user-extra``
(``authentication.kubernetes.io/node-name``): what the API server derives from a token bound
to a pod on that node. (kubectl has no ``--as-extra`` flag; its kubeconfig does.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.devenv.controlplane import ControlPlane
from tests.e2e.conftest import ROOT
from tests.e2e.conversion import ConversionServer

MANIFESTS = ROOT / "manifests"
SYSTEM = "kdra-system"
AGENT = f"system:serviceaccount:{SYSTEM}:kdra-agent"
OPERATOR = f"system:serviceaccount:{SYSTEM}:kdra-operator"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
REAL_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
              "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
KUSTOMIZATIONS = ("base", "base/crds", "overlays/kind", "overlays/nvidia", "overlays/node",
                  "overlays/node/examples", "overlays/servicemonitor", "webhooks",
                  "examples/gpu", "examples/extended", "examples/seed",
                  "examples/seed-static-slice", "examples/v1", "examples/quota",
                  "examples/partitions", "examples/sharing", "simulation")
DRY_RUN = ("base", "overlays/kind", "overlays/nvidia", "overlays/node", "examples/gpu",
           "examples/extended", "examples/quota")
SIMULATION = f"system:serviceaccount:{SYSTEM}:kdra-agent-simulation"


def build(plane: ControlPlane, directory: str) -> list[dict[str, Any]]:
    out = plane.kubectl("kustomize", str(MANIFESTS / directory)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane,
              conversion_server: ConversionServer) -> Iterator[list[dict[str, Any]]]:
    """CRDs (kdra's and kopf's) and the base's RBAC + admission policies, for real (the CRDs'
    conversion pointed at the session's webhook server, see tests/e2e/conversion.py)."""
    conversion_server.install_crds(control_plane, MANIFESTS / "base/crds")
    control_plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "crd",
                          "-l", "app.kubernetes.io/part-of=kdra")
    docs = build(control_plane, "base")
    real = [doc for doc in docs if doc["kind"] in REAL_KINDS]
    control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                          input=yaml.safe_dump_all(real))
    yield docs
    for doc in reversed(real):
        if doc["kind"] in ("Namespace", "ServiceAccount"):
            continue  # other tests use kdra-system
        args = [doc["kind"].lower(), doc["metadata"]["name"]]
        if doc["metadata"].get("namespace"):
            args += ["-n", doc["metadata"]["namespace"]]
        control_plane.kubectl("delete", *args, "--ignore-not-found", "--wait=false",
                              check=False)


@pytest.fixture(scope="module")
def as_agent(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``as_agent(node, *kubectl_args)``: kubectl as the agent of ``node`` (None: a token
    bound to no node)."""
    directory = tmp_path_factory.mktemp("agent-kubeconfigs")
    admin = yaml.safe_load(control_plane.kubeconfig.read_text())

    def run(node: str | None, *args: str, input: str | None = None) -> Any:
        path = directory / f"{node or 'no-node'}.kubeconfig"
        if not path.exists():
            config = yaml.safe_load(yaml.safe_dump(admin))
            user = config["users"][0]["user"]
            user["as"] = AGENT
            if node:
                user["as-user-extra"] = {NODE_NAME_EXTRA: [node]}
            path.write_text(yaml.safe_dump(config))
        return subprocess.run(
            [str(control_plane.bin_dir / "kubectl"), "--kubeconfig", str(path), *args],
            input=input, capture_output=True, text=True)

    return run


def slice_yaml(name: str, node: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": "gpu.kdra.dev", "nodeName": node,
                 "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0", "basic": {}}]}})


def lease_yaml(name: str, node: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": SYSTEM,
                     "annotations": {"resource.kdra.dev/node": node}},
        "spec": {"holderIdentity": "test", "leaseDurationSeconds": 40}})


# --------------------------------------------------------------------------- building, dry-run


@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_kustomization_builds(control_plane: ControlPlane, directory: str) -> None:
    assert build(control_plane, directory)


@pytest.mark.parametrize("directory", DRY_RUN)
def test_server_side_dry_run(control_plane: ControlPlane, installed: Any,
                             directory: str) -> None:
    result = control_plane.kubectl("apply", "--dry-run=server", "--server-side",
                                   "--force-conflicts", "-k", str(MANIFESTS / directory),
                                   check=False)
    assert result.returncode == 0, result.stderr
    assert "(server dry run)" in result.stdout


# A prometheus-operator ServiceMonitor CRD reduced to the fields the overlay uses, with the
# same types and patterns as upstream's (v0.84): strict field validation rejects anything else,
# so a typo or a field upstream does not have fails here.
DURATION = ("^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?"
            "(([0-9]+)ms)?)$")
SERVICEMONITOR_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors,
          singular: servicemonitor}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [endpoints, selector]
            properties:
              jobLabel: {type: string}
              endpoints:
                type: array
                items:
                  type: object
                  properties:
                    port: {type: string}
                    path: {type: string}
                    scheme: {type: string, enum: [http, https]}
                    interval:
                      type: string
                      pattern: DURATION
              namespaceSelector:
                type: object
                properties:
                  any: {type: boolean}
                  matchNames: {type: array, items: {type: string}}
              selector:
                type: object
                x-kubernetes-map-type: atomic
                properties:
                  matchLabels: {type: object, additionalProperties: {type: string}}
                  matchExpressions:
                    type: array
                    items:
                      type: object
                      required: [key, operator]
                      properties:
                        key: {type: string}
                        operator: {type: string}
                        values: {type: array, items: {type: string}}
""".replace("DURATION", f"'{DURATION}'")


def test_servicemonitor_overlay_dry_run(control_plane: ControlPlane, installed: Any) -> None:
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=SERVICEMONITOR_CRD)
    try:
        control_plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s",
                              "crd/servicemonitors.monitoring.coreos.com")
        result = control_plane.kubectl(
            "apply", "--dry-run=server", "--server-side", "--validate=strict",
            "-k", str(MANIFESTS / "overlays/servicemonitor"), check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("servicemonitor.monitoring.coreos.com/") == 2
        services = {(d["metadata"]["name"], p["name"]) for d in build(control_plane, "base")
                    if d["kind"] == "Service" for p in d["spec"]["ports"]}
        docs = build(control_plane, "overlays/servicemonitor")
        for monitor in (d for d in docs if d["kind"] == "ServiceMonitor"):
            name = monitor["metadata"]["name"]
            assert (name, monitor["spec"]["endpoints"][0]["port"]) in services, name
        # The Grafana dashboard, for the sidecar convention (label grafana_dashboard: "1").
        dashboard = find(docs, "ConfigMap", "kdra-dashboard")
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(dashboard["data"]["kdra.json"])["uid"] == "kdra"
        assert "configmap/kdra-dashboard" in result.stdout
    finally:
        control_plane.kubectl("delete", "crd", "servicemonitors.monitoring.coreos.com",
                              "--ignore-not-found", "--wait=false", check=False)


# --------------------------------------------------------------------------- RBAC


def can_i(plane: ControlPlane, user: str, *args: str) -> bool:
    result = plane.kubectl("auth", "can-i", *args, as_user=user, check=False)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), (result.stdout, result.stderr)
    return answer == "yes"


AGENT_ALLOWED = [
    ("create", "resourceslices.resource.kdra.dev"),
    ("update", "resourceslices.resource.kdra.dev"),
    ("delete", "resourceslices.resource.kdra.dev"),
    ("list", "resourceslices.resource.kdra.dev"),
    ("watch", "resourceclaims.resource.kdra.dev", "-A"),
    ("update", "resourceclaims.resource.kdra.dev", "--subresource=status", "-n", "default"),
    ("create", "leases.coordination.k8s.io", "-n", SYSTEM),
    ("patch", "leases.coordination.k8s.io", "-n", SYSTEM),
    ("get", "nodes"),
]
AGENT_DENIED = [
    ("create", "pods", "--subresource=binding", "-n", "default"),
    ("get", "secrets", "-n", SYSTEM),
    ("list", "secrets", "-A"),
    ("get", "configmaps", "-n", "default"),
    ("create", "leases.coordination.k8s.io", "-n", "default"),
    ("get", "leases.coordination.k8s.io", "-n", "kube-node-lease"),
    ("delete", "leases.coordination.k8s.io", "-n", SYSTEM),
    ("update", "resourceclaims.resource.kdra.dev", "-n", "default"),
    ("create", "resourceclaims.resource.kdra.dev", "-n", "default"),
    ("delete", "resourceclaims.resource.kdra.dev", "-n", "default"),
    ("deletecollection", "resourceslices.resource.kdra.dev"),
    ("create", "deviceclasses.resource.kdra.dev"),
    ("create", "nodes"),
    ("update", "nodes"),
    ("patch", "pods", "-n", "default"),
    ("create", "events", "-n", "default"),
    ("update", "validatingadmissionpolicies.admissionregistration.k8s.io"),
]
OPERATOR_ALLOWED = [
    ("create", "pods", "--subresource=binding", "-n", "team-a"),
    ("patch", "pods", "-n", "team-a"),
    ("patch", "pods", "--subresource=status", "-n", "team-a"),
    ("watch", "pods", "-A"),
    ("create", "resourceclaims.resource.kdra.dev", "-n", "team-a"),
    ("delete", "resourceclaims.resource.kdra.dev", "-n", "team-a"),
    ("update", "resourceclaims.resource.kdra.dev", "--subresource=status", "-n", "team-a"),
    ("list", "resourceclaimtemplates.resource.kdra.dev", "-A"),
    ("list", "deviceclasses.resource.kdra.dev"),
    ("delete", "resourceslices.resource.kdra.dev"),
    ("watch", "nodes"),
    ("watch", "leases.coordination.k8s.io", "-A"),
    ("get", "leases.coordination.k8s.io", "-n", SYSTEM),
    ("create", "events", "-n", "team-a"),
    ("get", "secrets/kdra-webhook-tls", "-n", SYSTEM),
    ("update", "secrets/kdra-webhook-tls", "-n", SYSTEM),
    ("create", "secrets", "-n", SYSTEM),
    ("update", "validatingwebhookconfigurations/kdra-validating"),
    ("update", "mutatingwebhookconfigurations/kdra-mutating"),
    ("create", "leases.coordination.k8s.io", "-n", SYSTEM),
    ("update", "leases.coordination.k8s.io/kdra-operator", "-n", SYSTEM),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io/resourceclaims.resource.kdra.dev"),
    ("get", "namespaces/team-a"),
    # issue 25: the taint eviction controller
    ("create", "pods", "--subresource=eviction", "-n", "team-a"),
    ("watch", "devicetaintrules.resource.kdra.dev"),
    ("patch", "devicetaintrules.resource.kdra.dev", "--subresource=status"),
    # issue 27: priority preemption reads PodDisruptionBudgets
    ("list", "poddisruptionbudgets.policy", "-A"),
    # issue 27: device quotas
    ("watch", "devicequotas.resource.kdra.dev", "-A"),
    ("patch", "devicequotas.resource.kdra.dev", "--subresource=status", "-n", "team-a"),
]
OPERATOR_DENIED = [
    ("create", "poddisruptionbudgets.policy", "-n", "team-a"),
    ("create", "devicequotas.resource.kdra.dev", "-n", "team-a"),
    ("update", "devicequotas.resource.kdra.dev", "-n", "team-a"),
    ("update", "devicetaintrules.resource.kdra.dev"),
    ("create", "devicetaintrules.resource.kdra.dev"),
    ("patch", "customresourcedefinitions.apiextensions.k8s.io/other.example.com"),
    ("update", "namespaces/team-a"),
    ("delete", "pods", "-n", "team-a"),
    ("create", "pods", "-n", "team-a"),
    ("get", "secrets", "-n", "team-a"),
    ("get", "secrets/other", "-n", SYSTEM),
    ("create", "resourceslices.resource.kdra.dev"),
    ("update", "resourceslices.resource.kdra.dev"),
    ("create", "deviceclasses.resource.kdra.dev"),
    ("create", "validatingwebhookconfigurations"),
    ("update", "validatingwebhookconfigurations/someone-else"),
    ("update", "leases.coordination.k8s.io/kdra-agent-node-a-gpu-kdra-dev", "-n", SYSTEM),
    ("get", "leases.coordination.k8s.io", "-n", "kube-node-lease"),
    ("update", "nodes"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
]


SIMULATION_ALLOWED = [
    ("create", "resourceslices.resource.kdra.dev"),
    ("update", "resourceclaims.resource.kdra.dev", "--subresource=status", "-n", "default"),
    ("create", "nodes"),
    ("patch", "nodes", "--subresource=status"),
    ("create", "leases.coordination.k8s.io", "-n", SYSTEM),
]
SIMULATION_DENIED = [
    ("get", "secrets", "-n", SYSTEM),
    ("create", "pods", "--subresource=binding", "-n", "default"),
    ("update", "resourceclaims.resource.kdra.dev", "-n", "default"),
    ("delete", "nodes"),
    ("create", "leases.coordination.k8s.io", "-n", "default"),
]


@pytest.fixture(scope="module")
def simulation(control_plane: ControlPlane, installed: Any) -> Iterator[None]:
    """manifests/simulation, for real (it concerns only the kdra-agent-simulation account)."""
    control_plane.kubectl("apply", "-k", str(MANIFESTS / "simulation"))
    yield
    control_plane.kubectl("delete", "-k", str(MANIFESTS / "simulation"), "--ignore-not-found",
                          "--wait=false", check=False)


@pytest.mark.parametrize("args", SIMULATION_ALLOWED, ids=" ".join)
def test_simulation_agent_may(control_plane: ControlPlane, simulation: None,
                              args: tuple[str, ...]) -> None:
    assert can_i(control_plane, SIMULATION, *args)


@pytest.mark.parametrize("args", SIMULATION_DENIED, ids=" ".join)
def test_simulation_agent_may_not(control_plane: ControlPlane, simulation: None,
                                  args: tuple[str, ...]) -> None:
    assert not can_i(control_plane, SIMULATION, *args)


def test_the_daemonset_agent_is_not_the_simulation_agent(control_plane: ControlPlane,
                                                         installed: Any) -> None:
    """A simulation agent's rights are granted to its own account, never the DaemonSet's."""
    assert not can_i(control_plane, AGENT, "create", "nodes")
    subjects = [s for doc in build(control_plane, "simulation")
                if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
                for s in doc["subjects"]]
    assert {s["name"] for s in subjects} == {"kdra-agent-simulation"}


@pytest.mark.parametrize("args", AGENT_ALLOWED, ids=" ".join)
def test_agent_may(control_plane: ControlPlane, installed: Any, args: tuple[str, ...]) -> None:
    assert can_i(control_plane, AGENT, *args)


@pytest.mark.parametrize("args", AGENT_DENIED, ids=" ".join)
def test_agent_may_not(control_plane: ControlPlane, installed: Any,
                       args: tuple[str, ...]) -> None:
    assert not can_i(control_plane, AGENT, *args)


@pytest.mark.parametrize("args", OPERATOR_ALLOWED, ids=" ".join)
def test_operator_may(control_plane: ControlPlane, installed: Any,
                      args: tuple[str, ...]) -> None:
    assert can_i(control_plane, OPERATOR, *args)


@pytest.mark.parametrize("args", OPERATOR_DENIED, ids=" ".join)
def test_operator_may_not(control_plane: ControlPlane, installed: Any,
                          args: tuple[str, ...]) -> None:
    assert not can_i(control_plane, OPERATOR, *args)


def test_base_leaves_every_webhooks_ca_bundle_to_the_operator(
        control_plane: ControlPlane) -> None:
    """Re-applying the base never overwrites the CA bundle the operator keeps current."""
    for doc in build(control_plane, "base"):
        if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for webhook in doc["webhooks"]:
                assert "caBundle" not in webhook["clientConfig"], webhook["name"]


def test_roles_use_no_wildcards(control_plane: ControlPlane) -> None:
    for directory in ("overlays/kind", "overlays/nvidia", "overlays/node", "simulation"):
        for doc in build(control_plane, directory):
            if doc["kind"] not in ("Role", "ClusterRole"):
                continue
            for rule in doc["rules"]:
                for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                    assert "*" not in rule.get(key, []), (doc["metadata"]["name"], rule)
                    assert not any("*" in value for value in rule.get(key, [])), rule


# --------------------------------------------------------------------------- admission policy


def test_admin_access_policy_needs_the_namespace_label(control_plane: ControlPlane,
                                                       installed: Any, namespace: str) -> None:
    """With no kdra webhook running, the API server itself enforces upstream's admin-access
    rule (manifests/base's ValidatingAdmissionPolicy). Written in v1alpha3: the policy
    matches v1, and the API server converts first (matchPolicy Equivalent)."""
    claim = {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaim",
             "metadata": {"name": "watch-all", "namespace": namespace},
             "spec": {"devices": {"requests": [{"name": "gpus", "deviceClassName": "gpu",
                                                "allocationMode": "All",
                                                "adminAccess": True}]}}}
    template = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "watch-all", "namespace": namespace},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                    "deviceClassName": "gpu", "adminAccess": True}}]}}}}
    for obj in (claim, template):
        refused = control_plane.kubectl("create", "-f", "-", input=json.dumps(obj),
                                        check=False)
        print(f"\n[{obj['kind']}, adminAccess, unlabelled] {refused.stderr.strip()}")
        assert refused.returncode != 0
        assert "admin access is only allowed in namespaces labelled " \
            "resource.kdra.dev/admin-access=true" in refused.stderr
        assert "kdra-admin-access" in refused.stderr
    plain = json.loads(json.dumps(claim))
    plain["metadata"]["name"] = "plain"
    del plain["spec"]["devices"]["requests"][0]["adminAccess"]
    control_plane.kubectl("create", "-f", "-", input=json.dumps(plain))
    control_plane.kubectl("label", "namespace", namespace,
                          "resource.kdra.dev/admin-access=true")
    for obj in (claim, template):
        control_plane.kubectl("create", "-f", "-", input=json.dumps(obj))


def test_agent_writes_only_its_own_nodes_slices(control_plane: ControlPlane, installed: Any,
                                                as_agent: Any) -> None:
    mine, theirs = "vap-node-a", "vap-node-b"
    try:
        # The policy is compiled asynchronously after it is created: wait until it bites.
        deadline = time.monotonic() + 60
        while True:
            denied = as_agent(mine, "create", "-f", "-", input=slice_yaml("vap-b", theirs))
            if denied.returncode != 0 or time.monotonic() > deadline:
                break
            control_plane.kubectl("delete", "resourceslice.resource.kdra.dev", "vap-b")
            time.sleep(1)
        assert denied.returncode != 0
        assert ("ValidatingAdmissionPolicy 'kdra-agent-resourceslices' with binding "
                "'kdra-agent-resourceslices' denied request: kdra agent on node 'vap-node-a' "
                "may only write ResourceSlices of its own node, not one of node "
                "'vap-node-b'") in denied.stderr, denied.stderr

        own = as_agent(mine, "create", "-f", "-", input=slice_yaml("vap-a", mine))
        assert own.returncode == 0, own.stderr
        replaced = as_agent(mine, "replace", "-f", "-", input=slice_yaml("vap-a", mine))
        assert replaced.returncode == 0, replaced.stderr

        # Other users are unaffected: the admin writes node b's slice...
        control_plane.kubectl("create", "-f", "-", input=slice_yaml("vap-b", theirs))
        # ... which agent a can neither update nor delete.
        update = as_agent(mine, "replace", "-f", "-", input=slice_yaml("vap-b", theirs))
        assert update.returncode != 0 and "not one of node 'vap-node-b'" in update.stderr
        delete = as_agent(mine, "delete", "resourceslice.resource.kdra.dev", "vap-b")
        assert delete.returncode != 0 and "not one of node 'vap-node-b'" in delete.stderr
        # Agent b can.
        assert as_agent(theirs, "delete", "resourceslice.resource.kdra.dev",
                        "vap-b").returncode == 0

        # A token bound to no node may write no slice at all.
        unbound = as_agent(None, "create", "-f", "-", input=slice_yaml("vap-c", mine))
        assert unbound.returncode != 0
        assert "only with a token bound to a pod on a node" in unbound.stderr, unbound.stderr

        deleted = as_agent(mine, "delete", "resourceslice.resource.kdra.dev", "vap-a")
        assert deleted.returncode == 0, deleted.stderr
    finally:
        for name in ("vap-a", "vap-b", "vap-c"):
            control_plane.kubectl("delete", "resourceslice.resource.kdra.dev", name,
                                  "--ignore-not-found", check=False)


def test_agent_writes_only_its_own_nodes_leases(control_plane: ControlPlane, installed: Any,
                                                as_agent: Any) -> None:
    lease = "kdra-agent-vap-node-a-test"
    try:
        deadline = time.monotonic() + 60
        while True:
            other = as_agent("vap-node-a", "create", "-f", "-",
                             input=lease_yaml("kdra-agent-vap-node-b-test", "vap-node-b"))
            if other.returncode != 0 or time.monotonic() > deadline:
                break
            control_plane.kubectl("delete", "lease", "-n", SYSTEM, "kdra-agent-vap-node-b-test")
            time.sleep(1)
        assert other.returncode != 0
        assert ("kdra agent on node 'vap-node-a' may only write Leases annotated "
                "resource.kdra.dev/node: 'vap-node-a'") in other.stderr, other.stderr
        own = as_agent("vap-node-a", "create", "-f", "-", input=lease_yaml(lease, "vap-node-a"))
        assert own.returncode == 0, own.stderr
        renew = as_agent("vap-node-a", "patch", "lease", lease, "-n", SYSTEM, "--type=merge",
                         "-p", '{"spec":{"holderIdentity":"renewed"}}')
        assert renew.returncode == 0, renew.stderr
        steal = as_agent("vap-node-a", "patch", "lease", lease, "-n", SYSTEM, "--type=merge",
                         "-p", '{"metadata":{"annotations":{"resource.kdra.dev/node":"x"}}}')
        assert steal.returncode != 0
    finally:
        for name in (lease, "kdra-agent-vap-node-b-test"):
            control_plane.kubectl("delete", "lease", "-n", SYSTEM, name, "--ignore-not-found",
                                  check=False)


# --------------------------------------------------------------------------- workloads


def test_operator_pod_passes_restricted_pod_security(control_plane: ControlPlane,
                                                     namespace: str) -> None:
    control_plane.kubectl("label", "namespace", namespace,
                          "pod-security.kubernetes.io/enforce=restricted")
    deadline = time.monotonic() + 60  # the controller-manager creates the default account
    while control_plane.kubectl("get", "serviceaccount", "default", "-n", namespace,
                                check=False).returncode and time.monotonic() < deadline:
        time.sleep(0.5)
    template = find(build(control_plane, "overlays/kind"), "Deployment",
                    "kdra-operator")["spec"]["template"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "operator-pss", "namespace": namespace,
                        "labels": template["metadata"]["labels"]},
           "spec": {**template["spec"], "serviceAccountName": "default"}}
    result = control_plane.kubectl("create", "--dry-run=server", "-f", "-",
                                   input=yaml.safe_dump(pod), check=False)
    assert result.returncode == 0, result.stderr
    assert "violate" not in result.stderr, result.stderr


def test_operator_replicas_elect_a_leader(control_plane: ControlPlane) -> None:
    docs = build(control_plane, "base")
    operator = find(docs, "Deployment", "kdra-operator")
    assert operator["spec"]["replicas"] == 2
    container = operator["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:3] == ["operator", "--leader-elect", "true"]
    env = {e["name"]: e for e in container["env"]}
    assert env["KDRA_IDENTITY"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert find(docs, "PodDisruptionBudget", "kdra-operator")["spec"]["maxUnavailable"] == 1
    # Every probe asks the webhook server, which a standby replica serves too (kopf's own
    # liveness endpoint answers only on the leader: a standby probed there would be killed).
    for key in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe = container[key]["httpGet"]
        assert (probe["path"], probe["port"], probe["scheme"]) == ("/healthz", "webhook",
                                                                    "HTTPS"), key
    # No service-link env: the Service kdra-webhook would set KDRA_WEBHOOK_PORT=tcp://...
    assert operator["spec"]["template"]["spec"]["enableServiceLinks"] is False
    agent = find(docs, "DaemonSet", "kdra-agent")
    assert agent["spec"]["template"]["spec"]["enableServiceLinks"] is False


def test_agent_keeps_only_the_privileges_it_needs(control_plane: ControlPlane) -> None:
    for directory in ("base", "overlays/kind", "overlays/nvidia", "overlays/node"):
        agent = find(build(control_plane, directory), "DaemonSet", "kdra-agent")
        spec = agent["spec"]["template"]["spec"]
        assert not spec.get("hostNetwork") and not spec.get("hostPID")
        container = spec["containers"][0]
        security = container["securityContext"]
        assert security["capabilities"] == {"drop": ["ALL"]}, directory
        assert security["privileged"] is False
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        host_paths = {v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
        # CDI specs, checkpoints, and the runtime's NRI socket (the agent's NRI plugin)
        assert host_paths == {"/var/run/cdi", "/var/lib/kdra", "/var/run/nri"}, directory
        assert {m["mountPath"] for m in container["volumeMounts"]} >= host_paths
        env = {e["name"]: e for e in container["env"]}
        assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_kind_inventories_parse() -> None:
    from kdra.domain.inventory import parse_inventory

    directory = MANIFESTS / "overlays/kind/inventory"
    devices = {path.stem: parse_inventory(path.read_text(), path.stem, source=str(path)).devices
               for path in sorted(directory.glob("*.yaml"))}
    assert {name: len(found) for name, found in devices.items()} == {
        "default": 8, "kdra-worker": 8, "kdra-worker2": 12, "kdra-worker3": 6}
    assert sum(1 for d in devices["kdra-worker2"] if not d.healthy) == 1
    assert {d.driver for d in devices["kdra-worker3"]} == {"resource-driver.example.com"}
    # Every file is in the ConfigMap the agents mount.
    kustomization = yaml.safe_load((MANIFESTS / "overlays/kind/Kustomization").read_text())
    listed = kustomization["configMapGenerator"][0]["files"]
    assert sorted(listed) == sorted(f"inventory/{name}.yaml" for name in devices)


def test_node_overlay_runs_the_local_image_with_a_fake_inventory(
        control_plane: ControlPlane) -> None:
    from kdra.domain.inventory import parse_inventory

    docs = build(control_plane, "overlays/node")
    for kind, name in (("Deployment", "kdra-operator"), ("DaemonSet", "kdra-agent")):
        template = find(docs, kind, name)["spec"]["template"]
        container = template["spec"]["containers"][0]
        assert container["image"] == "localhost/kdra:node"
        assert container["imagePullPolicy"] == "Never"  # no registry: imported by the node
        # kdra's own pods start without kdra's NRI plugin (the node requires it of others)
        assert template["metadata"]["annotations"] == {
            "tolerate-missing-plugins.kdra.dev": "true"}
    inventory = find(docs, "ConfigMap", "kdra-inventory")["data"]["kdra-node.yaml"]
    devices = parse_inventory(inventory, "kdra-node").devices
    assert {d.driver for d in devices} == {"gpu.kdra.dev", "resource-driver.example.com"}
    assert sum(1 for d in devices if d.healthy and d.driver == "gpu.kdra.dev") == 11
    examples = build(control_plane, "overlays/node/examples")
    assert not [d for d in examples if d["kind"] == "ResourceSlice"]  # the agent publishes
    images = {c["image"] for d in examples if d["kind"] == "Pod"
              for c in d["spec"]["containers"]}
    assert images == {"localhost/busybox:static"}


# --------------------------------------------------------------------------- image


def test_requirements_lock_is_current() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "hack/lock-requirements.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_dockerfile_installs_the_lock_and_runs_unprivileged() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert "--no-deps --only-binary=:all: --requirement requirements.lock" in text
    assert "pip\" check" in text
    assert "USER 65532:65532" in text
    assert 'ENTRYPOINT ["kdra"]' in text
    # The build context is an allow-list: everything is ignored but what the Dockerfile copies.
    ignored = [line for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line and not line.startswith("#")]
    assert ignored[0] == "*"
    assert {"!requirements.lock", "!pyproject.toml", "!README.md", "!operator/"} <= set(ignored)


@pytest.mark.slow
def test_image_install_steps(tmp_path: Path) -> None:
    """The Dockerfile's build stage, replayed in a fresh venv (needs the package index)."""
    result = subprocess.run(["bash", str(ROOT / "hack/check-image-install.sh")],
                            capture_output=True, text=True, timeout=1200,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "== image install check passed" in result.stdout
    for usage in ("usage: kdra [-h]", "usage: kdra operator", "usage: kdra agent",
                  "usage: kdra describe"):
        assert usage in result.stdout, usage
