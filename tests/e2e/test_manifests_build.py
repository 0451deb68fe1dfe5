"""kdra's install on a real API server, apart from its access control: every kustomization
builds and applies (server-side dry-run), the ServiceMonitor overlay validates strictly, the
workloads are as deployed (restricted pod security, leader election, the agent's privileges,
the inventories), and the image's install steps work (``hack/check-image-install.sh``, slow).

The CRDs kdra's manifests need and the RBAC objects and admission policies are applied *for
real* by :func:`installed` (tests/e2e/manifests_helpers.py; they only affect kdra's service
accounts); the workloads and the webhook configurations are only dry-run, so other tests in
the session are unaffected. RBAC and admission policies: test_manifests_rbac.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.operator.core.webhook_configs import CRD_NAMES
from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import ROOT
from tests.e2e.manifests_helpers import MANIFESTS, SERVICEMONITOR_CRD, build, installed

__all__ = ["installed"]  # the module fixture

KUSTOMIZATIONS = ("base", "base/crds", "overlays/kind", "overlays/nvidia", "overlays/node",
                  "overlays/node/examples", "overlays/node-native", "overlays/servicemonitor",
                  "webhooks",
                  "examples/gpu", "examples/extended", "examples/seed",
                  "examples/seed-static-slice", "examples/v1", "examples/quota",
                  "examples/partitions", "examples/sharing", "examples/priority",
                  "simulation", "overlays/native", "overlays/nvidia-native", "webhooks/native",
                  "examples/native", "examples/native-static-slice")
DRY_RUN = ("base", "overlays/kind", "overlays/nvidia", "overlays/node", "overlays/node-native",
           "examples/gpu", "examples/extended", "examples/quota", "examples/priority",
           "overlays/native", "overlays/nvidia-native", "examples/native-static-slice")


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


# --------------------------------------------------------------------------- building, dry-run


@pytest.mark.parametrize("directory", KUSTOMIZATIONS)
def test_kustomization_builds(control_plane: ControlPlane, directory: str) -> None:
    assert build(control_plane, directory)


def test_the_v1alpha3_component_serves_the_seeds_version(control_plane: ControlPlane,
                                                        tmp_path: Path) -> None:
    """crds/ serve v1 alone (a served version costs a conversion webhook call per write,
    docs/api-versions.md); manifests/components/v1alpha3 serves v1alpha3 too, for the four
    kinds that have it."""
    served = {(d["metadata"]["name"], v["name"]): v["served"]
              for d in build(control_plane, "base/crds") for v in d["spec"]["versions"]}
    assert not any(ok for (_, version), ok in served.items() if version == "v1alpha3")
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({  # kustomize: relative paths
        "resources": [os.path.relpath(MANIFESTS / "base/crds", tmp_path)],
        "components": [os.path.relpath(MANIFESTS / "components/v1alpha3", tmp_path)]}))
    out = control_plane.kubectl("kustomize", "--load-restrictor", "LoadRestrictionsNone",
                                str(tmp_path)).stdout
    with_component = {(d["metadata"]["name"], v["name"]): v["served"]
                      for d in yaml.safe_load_all(out) if d for v in d["spec"]["versions"]}
    assert {name for (name, version), ok in with_component.items()
            if version == "v1alpha3" and ok} == set(CRD_NAMES)
    assert all(ok for (_, version), ok in with_component.items() if version == "v1")


@pytest.mark.parametrize("directory", DRY_RUN)
def test_server_side_dry_run(control_plane: ControlPlane, installed: Any,
                             directory: str) -> None:
    result = control_plane.kubectl("apply", "--dry-run=server", "--server-side",
                                   "--force-conflicts", "-k", str(MANIFESTS / directory),
                                   check=False)
    assert result.returncode == 0, result.stderr
    assert "(server dry run)" in result.stdout


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


def test_the_native_overlay_is_the_kind_overlay_in_the_native_flavour(
        control_plane: ControlPlane) -> None:
    """components/native changes exactly the operator's flavour, adds the rights on
    resource.k8s.io, and swaps the webhooks for the native ones; components/native-agent makes
    the agent the kubelet's DRA plugin; the rest is overlays/kind."""
    kind = {(d["kind"], d["metadata"]["name"]): d for d in build(control_plane, "overlays/kind")}
    native = {(d["kind"], d["metadata"]["name"]): d
              for d in build(control_plane, "overlays/native")}
    added = sorted(set(native) - set(kind))
    assert added == [("ClusterRole", "kdra-agent-native"), ("ClusterRole", "kdra-operator-native"),
                     ("ClusterRoleBinding", "kdra-agent-native"),
                     ("ClusterRoleBinding", "kdra-operator-native")]
    assert set(kind) <= set(native)
    changed = sorted(k for k in kind if kind[k] != native[k])
    assert changed == [("DaemonSet", "kdra-agent"), ("Deployment", "kdra-operator"),
                       ("MutatingWebhookConfiguration", "kdra-mutating"),
                       ("ValidatingWebhookConfiguration", "kdra-validating")]
    for key in (("DaemonSet", "kdra-agent"), ("Deployment", "kdra-operator")):
        envs = [{e["name"]: e.get("value") for e in c.get("env") or ()}
                for c in native[key]["spec"]["template"]["spec"]["containers"]]
        assert [e.get("KDRA_FLAVOUR") for e in envs] == ["native"], key
    before = copy.deepcopy(native[("Deployment", "kdra-operator")])
    for container in before["spec"]["template"]["spec"]["containers"]:
        for env in container.get("env") or ():
            if env["name"] == "KDRA_FLAVOUR":
                env["value"] = "kdra"
    assert before == kind[("Deployment", "kdra-operator")]  # nothing else differs
    (agent,) = native[("DaemonSet", "kdra-agent")]["spec"]["template"]["spec"]["containers"]
    assert "KDRA_NRI_SOCKET" not in {e["name"] for e in agent["env"]}
    mounts = {m["mountPath"] for m in agent["volumeMounts"]}
    # The kubelet's plugin watcher, and a DRA socket directory for each driver the kind
    # inventories publish (the GPUs, and the seed's cats on kdra-worker3).
    assert {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins/gpu.kdra.dev",
            "/var/lib/kubelet/plugins/resource-driver.example.com"} <= mounts
    drivers = {yaml.safe_load(path.read_text()).get("driver", "gpu.kdra.dev")
               for path in (MANIFESTS / "overlays/kind/inventory").glob("*.yaml")}
    assert {f"/var/lib/kubelet/plugins/{driver}" for driver in drivers} <= mounts
    webhooks = {w["name"] for w in native[("ValidatingWebhookConfiguration",
                                           "kdra-validating")]["webhooks"]}
    assert "validate-claim-pods.resource.kdra.dev" in webhooks


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
    from kdra.agent.core.inventory import parse_inventory

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
    from kdra.agent.core.inventory import parse_inventory

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
