"""The Helm chart (charts/kdra): ``helm lint``, its values schema, no drift from the kustomize
manifests, and its rendered manifests applied server-side (dry-run) to a real API server.

Drift: the chart and manifests/ must describe the same install. With equivalent settings
each pair renders the same objects (same kinds, names, namespaces, and contents apart from
Helm's own bookkeeping labels):

| kustomize                          | helm values                                          |
|------------------------------------|------------------------------------------------------|
| manifests/overlays/nvidia-native   | defaults (flavour=auto: native, as helm template     |
|                                    | assumes resource.k8s.io/v1; agent.discovery=nvml),   |
|                                    | namespace.create                                     |
| manifests/overlays/nvidia          | flavour=kdra, namespace.create                       |
| manifests/overlays/kind            | flavour=kdra, agent.discovery=inventory, image       |
|                                    | kdra:dev, the kind overlay's inventory files,        |
|                                    | namespace.create                                     |
| manifests/overlays/native          | the kind overlay's settings, flavour=native and the  |
|                                    | cats' driver in agent.kubelet.drivers                |
| manifests/overlays/servicemonitor  | serviceMonitor.enabled, dashboard.enabled (those)     |
| manifests/simulation               | simulation.enabled (those objects)                   |

A difference fails with a unified diff per object. Fix it where it comes from: the CRDs with
``python -m hack.crdgen`` (they come from the models), the copied parts (RBAC, admission
policies, Services, webhook configurations, the simulation agent's objects, the dashboard)
with ``hack/sync-chart.py``; the templated workloads in ``charts/kdra/templates/``.

helm is built from Go modules by ``hack/build-helm.sh`` (cached in ~/.cache/kdra/bin).
"""

from __future__ import annotations

import copy
import difflib
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import ROOT
from tests.e2e.manifests_helpers import SERVICEMONITOR_CRD

CHART = ROOT / "charts" / "kdra"
MANIFESTS = ROOT / "manifests"
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")
KIND_INVENTORY = sorted((MANIFESTS / "overlays" / "kind" / "inventory").glob("*.yaml"))


@pytest.fixture(scope="session")
def helm() -> str:
    result = subprocess.run(["bash", str(ROOT / "hack" / "build-helm.sh")], capture_output=True,
                            text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


def render(helm: str, *args: str, namespace: str = "kdra-system") -> list[dict[str, Any]]:
    result = subprocess.run([helm, "template", "kdra", str(CHART), "--namespace", namespace,
                             "--include-crds", *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def kustomize(plane: ControlPlane, directory: str) -> list[dict[str, Any]]:
    out = plane.kubectl("kustomize", str(MANIFESTS / directory)).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def inventory_values() -> list[str]:
    args = ["--set", "agent.discovery=inventory", "--set", "image.repository=kdra",
            "--set", "image.tag=dev"]
    for path in KIND_INVENTORY:
        key = path.name.replace(".", "\\.")
        args += ["--set-file", f"agent.inventory.files.{key}={path}"]
    return args


def normalised(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    labels = doc.get("metadata", {}).get("labels") or {}
    for key in HELM_ONLY_LABELS:
        labels.pop(key, None)
    return doc


def key(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata", {})
    return f"{doc['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")


def drift(chart: Sequence[dict[str, Any]], manifests: Sequence[dict[str, Any]],
          what: str) -> str:
    """Empty when both render the same objects, else a readable report with diffs."""
    ours = {key(doc): normalised(doc) for doc in chart}
    theirs = {key(doc): normalised(doc) for doc in manifests}
    report = []
    for name in sorted(set(theirs) - set(ours)):
        report.append(f"only in {what}: {name}")
    for name in sorted(set(ours) - set(theirs)):
        report.append(f"only in the chart: {name}")
    for name in sorted(set(ours) & set(theirs)):
        if ours[name] != theirs[name]:
            a = yaml.safe_dump(theirs[name], sort_keys=True).splitlines(True)
            b = yaml.safe_dump(ours[name], sort_keys=True).splitlines(True)
            report.append("".join(difflib.unified_diff(a, b, f"{name} ({what})",
                                                       f"{name} (chart)")))
    if not report:
        return ""
    return (f"charts/kdra and {what} have drifted apart:\n" + "\n".join(report) +
            "\n\nRun .venv/bin/python -m hack.crdgen for the CRDs, .venv/bin/python "
            "hack/sync-chart.py for the copied parts (RBAC, policies, Services, webhooks, "
            "dashboard); edit charts/kdra/templates/ for the workloads.")


def test_helm_lint(helm: str) -> None:
    everything = [*inventory_values(), "--set", "serviceMonitor.enabled=true",
                  "--set", "dashboard.enabled=true", "--set", "simulation.enabled=true"]
    for args in ([], everything, ["--set", "flavour=native"], ["--set", "flavour=kdra"]):
        result = subprocess.run([helm, "lint", "--strict", str(CHART), *args],
                                capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(("args", "said"), [
    (["--set", "operator.replicas=two"], "at '/operator/replicas': got string, want integer"),
    (["--set", "serviceMonitor.enabled=yes"],
     "at '/serviceMonitor/enabled': got string, want boolean"),
    (["--set-json", 'agent.podAnnotations={"checksum": 1}'],
     "at '/agent/podAnnotations/checksum': got number, want string"),
    (["--set", "imagePullSecrets=registry"], "at '/imagePullSecrets': got string, want array"),
    (["--set", "operator.replica=3"], "at '/operator': additional properties 'replica' not"),
    (["--set", "agent.discovery=nvidia"],
     "at '/agent/discovery': value must be one of 'nvml', 'inventory'"),
    (["--set", "flavour=upstream"],
     "at '/flavour': value must be one of 'auto', 'kdra', 'native'"),
])
def test_the_schema_rejects_a_wrong_value(helm: str, args: list[str], said: str) -> None:
    """values.schema.json: a wrong type or an unknown key fails lint --strict and template,
    naming the value, instead of rendering a manifest the API server or kdra refuses later."""
    for command in (["lint", "--strict"], ["template", "kdra"]):
        result = subprocess.run([helm, *command, str(CHART), *args], capture_output=True,
                                text=True)
        assert result.returncode != 0, (command, args)
        assert said in result.stdout + result.stderr, result.stdout + result.stderr


def test_pull_secrets_priority_classes_and_pod_annotations_reach_the_pods(helm: str) -> None:
    docs = render(helm, "--set-json", 'imagePullSecrets=[{"name": "my-registry"}]',
                  "--set", "operator.priorityClassName=system-cluster-critical",
                  "--set", "agent.priorityClassName=system-node-critical",
                  "--set-json", 'operator.podAnnotations={"team": "gpu-platform"}',
                  "--set-json", 'agent.podAnnotations={"scrape": "true"}')
    pods = {d["kind"]: d["spec"]["template"] for d in docs
            if d["kind"] in ("Deployment", "DaemonSet")}
    assert pods["Deployment"]["spec"]["priorityClassName"] == "system-cluster-critical"
    assert pods["DaemonSet"]["spec"]["priorityClassName"] == "system-node-critical"
    assert pods["Deployment"]["metadata"]["annotations"] == {"team": "gpu-platform"}
    assert pods["DaemonSet"]["metadata"]["annotations"] == {"scrape": "true"}
    for pod in pods.values():
        assert pod["spec"]["imagePullSecrets"] == [{"name": "my-registry"}]
    defaults = {d["kind"]: d["spec"]["template"] for d in render(helm)
                if d["kind"] in ("Deployment", "DaemonSet")}
    for pod in defaults.values():  # unset: nothing rendered (the kustomize manifests agree)
        assert "annotations" not in pod["metadata"]
        assert not {"priorityClassName", "imagePullSecrets"} & set(pod["spec"])


def test_the_copied_parts_are_up_to_date() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "hack" / "sync-chart.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr


def test_the_chart_defaults_render_what_the_nvidia_native_overlay_renders(
        helm: str, control_plane: ControlPlane) -> None:
    """The defaults: flavour=auto, native where resource.k8s.io/v1 is served (helm template
    without a cluster assumes it is): the operator and agent on the built-in kinds, the agent
    the kubelet's DRA plugin — as overlays/nvidia with components/native and native-agent."""
    chart = render(helm, "--set", "namespace.create=true")
    report = drift(chart, kustomize(control_plane, "overlays/nvidia-native"),
                   "overlays/nvidia-native")
    assert not report, report
    assert chart == render(helm, "--set", "namespace.create=true", "--set", "flavour=native")


def test_the_chart_renders_what_the_nvidia_overlay_renders(helm: str,
                                                           control_plane: ControlPlane) -> None:
    chart = render(helm, "--set", "namespace.create=true", "--set", "flavour=kdra")
    report = drift(chart, kustomize(control_plane, "overlays/nvidia"), "overlays/nvidia")
    assert not report, report


def test_the_chart_renders_what_the_kind_overlay_renders(helm: str,
                                                         control_plane: ControlPlane) -> None:
    chart = render(helm, "--set", "namespace.create=true", "--set", "flavour=kdra",
                   *inventory_values())
    report = drift(chart, kustomize(control_plane, "overlays/kind"), "overlays/kind")
    assert not report, report


def test_the_chart_renders_what_the_native_overlay_renders(helm: str,
                                                           control_plane: ControlPlane) -> None:
    chart = render(helm, "--set", "namespace.create=true", "--set", "flavour=native",
                   "--set", "agent.kubelet.drivers={gpu.kdra.dev,resource-driver.example.com}",
                   *inventory_values())
    report = drift(chart, kustomize(control_plane, "overlays/native"), "overlays/native")
    assert not report, report
    result = subprocess.run([helm, "template", "kdra", str(CHART), "--set", "flavour=v1"],
                            capture_output=True, text=True)
    # values.schema.json refuses it before the templates' own check can (issue 41, item 9).
    assert result.returncode != 0 and \
        "at '/flavour': value must be one of 'auto', 'kdra', 'native'" in result.stderr, \
        result.stderr


def flavours(docs: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Each workload's KDRA_FLAVOUR (the agent's default, kdra, where it has none)."""
    found = {}
    for doc in docs:
        if doc["kind"] in ("Deployment", "DaemonSet"):
            env = {e["name"]: e.get("value")
                   for e in doc["spec"]["template"]["spec"]["containers"][0]["env"]}
            found[doc["kind"]] = env.get("KDRA_FLAVOUR", "kdra")
    return found


def test_auto_keeps_the_running_operators_flavour_on_an_upgrade(
        helm: str, control_plane: ControlPlane, tmp_path: Path) -> None:
    """flavour=auto against a cluster (helm's server-side dry run, as install and upgrade
    render): native where resource.k8s.io/v1 is served and nothing runs yet; where an operator
    already runs in the kdra flavour (an installation from before the cluster's upgrade to
    1.34), the upgrade keeps kdra — claims never move from kdra's CRDs to the built-in kinds
    under a running installation (an operator without KDRA_FLAVOUR predates the flavours:
    kdra). An explicit flavour always wins."""
    namespace = "kdra-chart-upgrade"
    control_plane.kubectl("create", "namespace", namespace, check=False)

    def server_render(*args: str) -> dict[str, str]:
        result = subprocess.run([helm, "template", "kdra", str(CHART), "--namespace", namespace,
                                 "--kubeconfig", str(control_plane.kubeconfig),
                                 "--dry-run=server", *args], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        return flavours([d for d in yaml.safe_load_all(result.stdout) if d])

    try:
        assert server_render() == {"Deployment": "native", "DaemonSet": "native"}
        kdra = render(helm, "--set", "flavour=kdra", namespace=namespace)
        (operator,) = [d for d in kdra if d["kind"] == "Deployment"]
        (tmp_path / "operator.yaml").write_text(yaml.safe_dump(operator))
        control_plane.kubectl("apply", "--server-side", "-f", str(tmp_path / "operator.yaml"))
        assert server_render() == {"Deployment": "kdra", "DaemonSet": "kdra"}
        assert server_render("--set", "flavour=native") == {"Deployment": "native",
                                                            "DaemonSet": "native"}
        # An operator without KDRA_FLAVOUR predates the flavours (it ran kdra's CRDs); one
        # with auto ran what the cluster serves.
        deployment = ("-n", namespace, "deployment/kdra-operator")
        control_plane.kubectl("set", "env", *deployment, "KDRA_FLAVOUR-")
        assert server_render() == {"Deployment": "kdra", "DaemonSet": "kdra"}
        control_plane.kubectl("set", "env", *deployment, "KDRA_FLAVOUR=auto")
        assert server_render() == {"Deployment": "native", "DaemonSet": "native"}
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_the_chart_renders_what_the_servicemonitor_overlay_renders(
        helm: str, control_plane: ControlPlane) -> None:
    chart = [doc for doc in render(helm, "--set", "serviceMonitor.enabled=true",
                                   "--set", "dashboard.enabled=true")
             if doc["kind"] == "ServiceMonitor" or doc["metadata"]["name"] == "kdra-dashboard"]
    report = drift(chart, kustomize(control_plane, "overlays/servicemonitor"),
                   "overlays/servicemonitor")
    assert not report, report


def test_the_chart_renders_what_the_simulation_kustomization_renders(
        helm: str, control_plane: ControlPlane) -> None:
    plain = {key(doc) for doc in render(helm)}
    chart = [doc for doc in render(helm, "--set", "simulation.enabled=true")
             if key(doc) not in plain]
    assert chart, "simulation.enabled adds nothing"
    report = drift(chart, kustomize(control_plane, "simulation"), "manifests/simulation")
    assert not report, report


def test_a_drift_is_reported_with_a_diff() -> None:
    deployment = {"kind": "Deployment", "metadata": {"name": "kdra-operator",
                                                     "namespace": "kdra-system"},
                  "spec": {"replicas": 2}}
    changed = copy.deepcopy(deployment)
    changed["spec"]["replicas"] = 3
    report = drift([changed], [deployment], "overlays/x")
    assert "-  replicas: 2\n+  replicas: 3" in report
    assert "only in the chart: ConfigMap x" in drift(
        [{"kind": "ConfigMap", "metadata": {"name": "x"}}], [], "overlays/x")


def test_another_namespace_is_used_throughout(helm: str) -> None:
    """Everything but the CRDs' conversion Service: crds/ is not templated (Helm's rule), so
    it names kdra-system, and the operator points it at its own namespace when it starts
    (--webhook-manage-config; tests/unit/operator/test_webhook.py)."""
    docs = render(helm, "--set", "serviceMonitor.enabled=true", "--set", "dashboard.enabled=true",
                  "--set", "simulation.enabled=true", namespace="gpu-system")
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == 6
    # The four kinds served in two versions convert through the webhook; DeviceTaintRule and
    # DeviceQuota have one version and no conversion.
    converted = [c for c in crds if c["spec"].get("conversion", {}).get("strategy") == "Webhook"]
    assert sorted(c["spec"]["names"]["kind"] for c in crds if c not in converted) == [
        "DeviceQuota", "DeviceTaintRule"]
    assert len(converted) == 4
    for crd in converted:
        service = crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]
        assert service["namespace"] == "kdra-system"
        service["namespace"] = "<the operator's>"
    text = yaml.safe_dump_all(docs)
    assert "kdra-system" not in text
    namespaced = [d for d in docs if d["metadata"].get("namespace")]
    assert namespaced and {d["metadata"]["namespace"] for d in namespaced} == {"gpu-system"}
    assert "system:serviceaccount:gpu-system:kdra-agent" in text
    assert "system:serviceaccount:gpu-system:kdra-agent-simulation" in text
    webhooks = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
    assert webhooks and all(w["clientConfig"]["service"]["namespace"] == "gpu-system"
                            for d in webhooks for w in d["webhooks"])


def test_rendered_manifests_apply_server_side(helm: str, control_plane: ControlPlane,
                                              tmp_path: Path) -> None:
    """`helm template | kubectl apply --server-side --dry-run=server`, every option on. (The
    namespace exists, as after `kubectl create namespace` or a first install: a dry-run
    creates nothing, so objects in a namespace the same dry-run would create are refused.)"""
    control_plane.kubectl("create", "namespace", "kdra-system", check=False)
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=SERVICEMONITOR_CRD)
    control_plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s",
                          "crd/servicemonitors.monitoring.coreos.com")
    try:
        for args in (["--set", "namespace.create=true"],
                     ["--set", "namespace.create=true", "--set", "flavour=kdra"],
                     ["--set", "namespace.create=true", "--set", "serviceMonitor.enabled=true",
                      "--set", "dashboard.enabled=true", "--set", "simulation.enabled=true",
                      *inventory_values()]):
            rendered = tmp_path / "rendered.yaml"
            result = subprocess.run([helm, "template", "kdra", str(CHART), "--namespace",
                                     "kdra-system", "--include-crds", *args],
                                    capture_output=True, text=True)
            assert result.returncode == 0, result.stderr
            rendered.write_text(result.stdout)
            applied = control_plane.kubectl("apply", "--server-side", "--dry-run=server",
                                            "--force-conflicts", "-f", str(rendered),
                                            check=False)
            assert applied.returncode == 0, applied.stderr
            lines = [line for line in applied.stdout.splitlines() if line.strip()]
            assert lines and all(line.endswith("(server dry run)") for line in lines), lines
            assert len(lines) == len([d for d in yaml.safe_load_all(result.stdout) if d])
    finally:
        control_plane.kubectl("delete", "crd", "servicemonitors.monitoring.coreos.com",
                              "--ignore-not-found", "--wait=false", check=False)
