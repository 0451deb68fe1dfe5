"""kdra's install on a real API server, its access control: the RBAC is least-privilege
(``kubectl auth can-i`` as the service accounts, the simulation agent's included), the
ValidatingAdmissionPolicies confine an agent to its own node's slices and Leases, and admin
access needs the namespace label.

The CRDs kdra's manifests need and the RBAC objects and admission policies are applied *for
real* by :func:`installed` (tests/e2e/manifests_helpers.py; they only affect kdra's service
accounts). Building, dry-runs, workloads and the image: test_manifests_build.py.

An agent is impersonated with a kubeconfig carrying ``as`` and ``as-user-extra``
(``authentication.kubernetes.io/node-name``): what the API server derives from a token bound
to a pod on that node. (kubectl has no ``--as-extra`` flag; its kubeconfig does.)
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kdra_devenv.controlplane import ControlPlane
from tests.e2e.manifests_helpers import MANIFESTS, build, installed

__all__ = ["installed"]  # the module fixture

SYSTEM = "kdra-system"
AGENT = f"system:serviceaccount:{SYSTEM}:kdra-agent"
OPERATOR = f"system:serviceaccount:{SYSTEM}:kdra-operator"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
SIMULATION = f"system:serviceaccount:{SYSTEM}:kdra-agent-simulation"


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
    for directory in ("overlays/kind", "overlays/nvidia", "overlays/node", "simulation",
                      "overlays/native", "overlays/nvidia-native", "overlays/node-native"):
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
