"""The closed health loop end to end (issue 25): real API server with the Deployment,
ReplicaSet and disruption controllers, kdra's operator and node agents as real processes.

- A fake GPU marked lost while a Deployment's pod uses it: the agent taints it NoExecute after
  its debounce, the operator evicts the pod (Eviction API), the ReplicaSet's replacement gets
  a healthy GPU; a pod tolerating the taint stays; marked healthy again, the GPU is
  allocatable after the settled period, nothing restarted.
- A maintenance DeviceTaintRule (NoExecute, one node's pool) drains that node's devices while
  a PodDisruptionBudget keeps one replica up: the second eviction waits for the first
  replacement.

There is no kubelet on the simulated nodes, so :class:`FakeKubelet` plays its part for the
test's namespace: it reports bound pods Running and Ready (the disruption controller counts
only Ready pods) and finishes the graceful deletion of pods being deleted, as a kubelet would
once their containers stopped.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra_devenv.controlplane import CONTROLLERS, ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import SYSTEM_NAMESPACE, AgentFactory, slices_of, unique
from tests.e2e.conftest import ROOT, Cluster, get_json, running_cluster
from tests.e2e.procs import KdraProcess, wait_for

agents = agent_helpers.agents  # the node-agent fixture (on this module's control plane)
CLAIMS = "resourceclaims.resource.kdra.dev"
GPU = "gpu.kdra.dev"
UNHEALTHY = "gpu.kdra.dev/unhealthy"
HEALTH_FLAGS = ("--health-poll", "0.5", "--health-debounce", "1", "--health-settle", "4")


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def health_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A control plane of its own: the session's runs no disruption controller."""
    with running_cluster(tmp_path_factory.mktemp("health-plane"), controllers=(
            *CONTROLLERS, "deployment-controller", "replicaset-controller",
            "disruption-controller")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def control_plane(health_cluster: Cluster) -> ControlPlane:
    return health_cluster.plane


@pytest.fixture
def operator(control_plane: ControlPlane, tmp_path: Path,
             request: pytest.FixtureRequest) -> Iterator[KdraProcess]:
    control_plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    proc = KdraProcess(["operator", "--health-port", "0", "--prepare-timeout", "20"],
                       tmp_path / "operator.log", control_plane.kubeconfig,
                       ready_line="kdra operator started")
    proc.start()
    yield proc
    proc.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"===== operator log =====\n{proc.tail(200)}")


class FakeKubelet:
    """The kubelet of the simulated nodes, for one namespace (see the module doc)."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        import kubernetes

        client = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(plane.kubeconfig))
        self.api: Any = kubernetes.client.CoreV1Api(client)  # its models' fields are Optional
        self.namespace = namespace
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeKubelet:
        self.thread.start()
        return self

    def __exit__(self, kind: object, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(10)
        if kind is not None:
            print("fake kubelet errors:", *self.errors[-20:], sep="\n  ")

    def _run(self) -> None:
        import kubernetes

        while not self.stopping.wait(0.3):
            try:
                pods = self.api.list_namespaced_pod(self.namespace).items
            except Exception as exc:  # the API server restarting: try again
                self.errors.append(f"list: {exc!r}")
                continue
            for pod in pods:
                name = pod.metadata.name
                try:
                    if pod.metadata.deletion_timestamp is not None:
                        self.api.delete_namespaced_pod(name, self.namespace,
                                                       grace_period_seconds=0)
                    elif pod.spec.node_name and pod.status.phase != "Running":
                        now = "2026-01-01T00:00:00Z"
                        self.api.patch_namespaced_pod_status(name, self.namespace, {
                            "status": {"phase": "Running", "conditions": [
                                {"type": "Ready", "status": "True",
                                 "lastTransitionTime": now},
                                {"type": "ContainersReady", "status": "True",
                                 "lastTransitionTime": now}]}})
                except kubernetes.client.ApiException as exc:
                    if exc.status != 404:  # gone meanwhile: the next round sees the new state
                        self.errors.append(f"{name}: {exc.status} {exc.reason}: {exc.body}")
                except Exception as exc:  # recorded, shown by the test on failure
                    self.errors.append(f"{name}: {exc!r}")


# --------------------------------------------------------------------------- helpers

def apply(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    plane.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


def gpu_class() -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
            "metadata": {"name": GPU},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}]}}


def template(name: str, namespace: str, **exactly: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": GPU, **exactly}}]}}}}


def pod_spec() -> dict[str, Any]:
    return {"schedulerName": "kdra-scheduler", "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}


def claims_annotation(template_name: str) -> dict[str, str]:
    return {CLAIMS_ANNOTATION: yaml.safe_dump(
        [{"name": "gpu", "resourceClaimTemplateName": template_name}])}


def deployment(name: str, namespace: str, template_name: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name},
                                               "annotations": claims_annotation(template_name)},
                                  "spec": pod_spec()}}}


def pod(name: str, namespace: str, template_name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": claims_annotation(template_name)},
            "spec": pod_spec()}


def pods(plane: ControlPlane, namespace: str, selector: str | None = None
         ) -> list[dict[str, Any]]:
    args = ["pods", "-n", namespace, *(["-l", selector] if selector else [])]
    return [p for p in get_json(plane, *args)["items"]
            if not p["metadata"].get("deletionTimestamp")]


def devices_of(plane: ControlPlane, namespace: str) -> dict[str, tuple[str, str, str]]:
    """Pod name → the (driver, pool, device) its claim is allocated, for allocated claims
    reserved for a pod."""
    found = {}
    for claim in get_json(plane, CLAIMS, "-n", namespace)["items"]:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        for ref in status.get("reservedFor") or ():
            for result in results:
                found[ref["name"]] = (result["driver"], result["pool"], result["device"])
    return found


def bound(plane: ControlPlane, namespace: str, selector: str | None = None
          ) -> dict[str, tuple[str, str, str]]:
    """Bound pods (matching ``selector``) → their device."""
    devices = devices_of(plane, namespace)
    return {p["metadata"]["name"]: devices[p["metadata"]["name"]]
            for p in pods(plane, namespace, selector)
            if p["spec"].get("nodeName") and p["metadata"]["name"] in devices}


def mark(agent: agent_helpers.Agent, device: str, health: str) -> None:
    subprocess.run([sys.executable, "-m", "kdra", "agent", "health", "mark", device, health,
                    "--node", agent.node, "--state-dir", str(agent.state)],
                   cwd=ROOT, check=True, capture_output=True)


def device_taints(plane: ControlPlane, node: str, device: str) -> list[dict[str, Any]]:
    for obj in slices_of(plane, node):
        for entry in obj["spec"].get("devices") or ():
            if entry["name"] == device:
                return list(entry.get("taints") or [])
    return []


def device_uuid(plane: ControlPlane, node: str, device: str) -> str:
    for obj in slices_of(plane, node):
        for entry in obj["spec"].get("devices") or ():
            if entry["name"] == device:
                return str(entry["attributes"]["uuid"]["string"])
    raise AssertionError(f"no device {device} on {node}")


def reasons(plane: ControlPlane, namespace: str, reason: str) -> list[str]:
    return [e["message"] for e in get_json(plane, "events", "-n", namespace)["items"]
            if e["reason"] == reason]


def metric(proc: KdraProcess, name: str) -> float:
    for line in proc.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


# --------------------------------------------------------------------------- tests

def test_lost_gpu_evicts_replaces_keeps_tolerating_pods_and_recovers(
        control_plane: ControlPlane, agents: AgentFactory, operator: KdraProcess,
        namespace: str) -> None:
    node = unique("health")
    agent = agents(node, "gpus: ['3 x L4-24GB']\n", *HEALTH_FLAGS)
    apply(control_plane, gpu_class(),
          template("one-gpu", namespace),
          template("patient-gpu", namespace,
                   tolerations=[{"key": UNHEALTHY, "operator": "Exists"}]),
          deployment("train", namespace, "one-gpu", replicas=1),
          pod("patient", namespace, "patient-gpu"))
    with FakeKubelet(control_plane, namespace):
        first = wait_for(lambda: len(bound(control_plane, namespace)) == 2 and
                         bound(control_plane, namespace), timeout=90, what="both pods bound")
        (train_pod,) = [name for name in first if name != "patient"]
        lost, kept = first[train_pod], first["patient"]
        patient_uid = get_json(control_plane, "pod", "patient", "-n", namespace)[
            "metadata"]["uid"]

        mark(agent, lost[2], "lost")
        mark(agent, kept[2], "lost")
        wait_for(lambda: [t["effect"] for t in device_taints(control_plane, node, lost[2])]
                 == ["NoExecute"], timeout=30, what="the lost GPU tainted NoExecute")
        (taint,) = device_taints(control_plane, node, lost[2])
        assert (taint["key"], taint["value"]) == (UNHEALTHY, "MarkedLost")

        # The Deployment's pod is evicted and replaced on the remaining healthy GPU.
        replaced = wait_for(
            lambda: (now := bound(control_plane, namespace, "app=train")) and
            train_pod not in now and now, timeout=90, what="replacement of the evicted pod")
        ((_, device),) = replaced.items()
        assert device not in (lost, kept) and device[1] == node
        evictions = reasons(control_plane, namespace, "DeviceTaintEviction")
        why = f"device {GPU}/{node}/{lost[2]} has taint {UNHEALTHY}=MarkedLost:NoExecute " \
            "(not tolerated)"
        assert any(m.startswith(f"pod {train_pod} evicted: {why}") for m in evictions), \
            evictions  # on the claim
        assert any(m.startswith("evicted: claim ") and m.endswith(why) for m in evictions), \
            evictions  # on the pod
        assert metric(operator, "kdra_taint_evictions_total") >= 1

        # The tolerating pod stays, with its (lost) GPU.
        still = get_json(control_plane, "pod", "patient", "-n", namespace)
        assert still["metadata"]["uid"] == patient_uid
        assert not still["metadata"].get("deletionTimestamp")
        assert devices_of(control_plane, namespace)["patient"] == kept

        # Healthy again: the taint goes after the settled period, and the GPU is allocatable
        # without restarting anything.
        mark(agent, lost[2], "healthy")
        wait_for(lambda: device_taints(control_plane, node, lost[2]) == [], timeout=30,
                 what="taint removed after the settled period")
        uuid = device_uuid(control_plane, node, lost[2])
        apply(control_plane,
              template("that-gpu", namespace, selectors=[{"cel": {"expression":
                        f'device.attributes["{GPU}"].uuid == "{uuid}"'}}]),
              pod("again", namespace, "that-gpu"))
        again = wait_for(lambda: bound(control_plane, namespace).get("again"), timeout=60,
                         what="the recovered GPU allocated again")
        assert again == lost
    assert agent.metric('kdra_device_health_transitions_total{to="lost"}') == 2.0
    assert agent.metric('kdra_device_health_transitions_total{to="healthy"}') == 1.0
    assert agent.proc.alive and operator.alive


def test_maintenance_rule_drains_a_node_respecting_the_pdb(
        control_plane: ControlPlane, agents: AgentFactory, operator: KdraProcess,
        namespace: str) -> None:
    old, new = unique("maint"), unique("spare")
    agents(old, "gpus: ['2 x L4-24GB']\n", *HEALTH_FLAGS)
    apply(control_plane, gpu_class(), template("one-gpu", namespace),
          deployment("serve", namespace, "one-gpu", replicas=2),
          {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "serve", "namespace": namespace},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}}})
    with FakeKubelet(control_plane, namespace):
        wait_for(lambda: len(bound(control_plane, namespace, "app=serve")) == 2, timeout=90,
                 what="both replicas bound on the first node")
        wait_for(lambda: (get_json(control_plane, "pdb", "serve", "-n", namespace)
                          .get("status") or {}).get("disruptionsAllowed") == 1,
                 timeout=60, what="the PDB allowing one disruption")
        # No spare capacity yet: the first eviction's replacement cannot be placed, so the
        # budget stays spent and the second eviction must be refused until the spare node
        # appears (with a spare node from the start, a fast replacement may let the API
        # server admit both evictions in turn — also within the budget, but not observable).
        rule_name = unique("drain")
        apply(control_plane, {
            "apiVersion": "resource.kdra.dev/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": rule_name},
            "spec": {"deviceSelector": {"driver": GPU, "pool": old},
                     "taint": {"key": "example.com/maintenance", "value": "bios-update",
                               "effect": "NoExecute"}}})
        try:
            blocked = wait_for(
                lambda: reasons(control_plane, namespace, "DeviceTaintEvictionBlocked"),
                timeout=90, what="the second eviction refused by the disruption budget")
            assert all("disruption budget" in m for m in blocked), blocked
            agents(new, "gpus: ['2 x L4-24GB']\n", *HEALTH_FLAGS)
            moved = wait_for(
                lambda: (now := bound(control_plane, namespace, "app=serve")) and
                len(now) == 2 and all(d[1] == new for d in now.values()) and now,
                timeout=120, what="both replicas moved to the spare node")
            assert sorted(d[2] for d in moved.values()) == ["gpu-0", "gpu-1"]
            assert len(reasons(control_plane, namespace, "DeviceTaintEviction")) >= 4  # pod+claim
            listed = control_plane.kubectl("get", "kdevicetaintrule", rule_name).stdout
            assert "NoExecute" in listed and "example.com/maintenance" in listed
            status = wait_for(lambda: get_json(control_plane, "devicetaintrule.resource.kdra.dev",
                                               rule_name).get("status"),
                              timeout=30, what="rule status")
            assert status["matchedDevices"] == 2
            assert {d["pool"] for d in status["devices"]} == {old}
        finally:
            control_plane.kubectl("delete", "devicetaintrule.resource.kdra.dev", rule_name,
                                  "--wait=false", check=False)
