"""The closed health loop on the real node (issue 25): kdra deployed as pods, containers
really running, a GPU marked lost from inside the agent's pod as an administrator would
(``kubectl exec <agent pod> -- kdra agent health mark <gpu> lost``).

- The Deployment's pod on the lost GPU is evicted (Eviction API) once the agent's debounce
  has passed (the node overlay sets ``KDRA_HEALTH_DEBOUNCE=2``, ``KDRA_HEALTH_SETTLE=10``);
  its replacement runs on a healthy GPU and sees that GPU, not the lost one, from inside.
- A pod tolerating ``gpu.kdra.dev/unhealthy`` keeps running on its lost GPU, never restarted.
- Marked healthy again, the taint goes after the settled period and a new pod asking for that
  very GPU (by UUID) runs on it: nothing was restarted.
- A maintenance ``DeviceTaintRule`` (NoExecute) on the node's A100s drains them while a
  PodDisruptionBudget keeps one replica up: one pod is evicted, the other stays (its eviction
  refused by the budget, an event says so) because its replacement has no A100 to go to;
  deleting the rule lets the replacement run.
"""

from __future__ import annotations

import json
from typing import Any

from kdra_devenv.node import NODE_NAME
from kdra_devenv.realcluster import NAMESPACE, RealCluster
from tests.node.deployed.devices import GPU, Device, container_devices, device_facts, logs

UNHEALTHY = "gpu.kdra.dev/unhealthy"
PRINT_AND_WAIT = ("env | grep -E '^(KDRA_|NVIDIA_VISIBLE_DEVICES=)' | sort; "
                  "ls -d /dev/kdra/* 2>/dev/null; exec sleep 3600")
RULE = "a100-maintenance"
A100 = 'device.attributes["gpu.kdra.dev"].productName.startsWith("NVIDIA A100")'


def _template(name: str, **exactly: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": GPU, **exactly}}]}}}}


def _pod_template(template: str, labels: dict[str, str]) -> dict[str, Any]:
    claims = f"- name: gpu\n  resourceClaimTemplateName: {template}\n"
    return {"metadata": {"labels": {"kdra-test": "health", **labels},
                         "annotations": {"resource.kdra.dev/claims": claims}},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": [
                {"name": "main", "image": "localhost/busybox:static",
                 "command": ["sh", "-c", PRINT_AND_WAIT]}]}}


def _deployment(name: str, template: str, replicas: int) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default", "labels": {"kdra-test": "health"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": _pod_template(template, {"app": name})}}


def _pod(name: str, template: str) -> dict[str, Any]:
    spec = _pod_template(template, {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", **spec["metadata"]},
            "spec": {"restartPolicy": "Never", **spec["spec"]}}


def _apply(cluster: RealCluster, *objects: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def _running(cluster: RealCluster, selector: str) -> dict[str, dict[str, Any]]:
    """Running, ready, not terminating pods matching ``selector``, by name."""
    items = cluster.get_json("pods", "-n", "default", "-l", selector)["items"]
    return {p["metadata"]["name"]: p for p in items
            if not p["metadata"].get("deletionTimestamp")
            and p.get("status", {}).get("phase") == "Running"
            and all(c.get("ready") for c in p["status"].get("containerStatuses", []))}


def _device(cluster: RealCluster, pod: dict[str, Any]) -> str:
    (device,) = container_devices(cluster, pod, "main")
    assert (device.driver, device.pool) == (GPU, NODE_NAME), device
    return device.name


def _mark(cluster: RealCluster, device: str, health: str) -> None:
    """What an administrator types: the mark is written inside the agent's pod."""
    (agent,) = [p["metadata"]["name"] for p in cluster.get_json(
        "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=agent")["items"]
        if not p["metadata"].get("deletionTimestamp")]
    cluster.kubectl("exec", "-n", NAMESPACE, agent, "-c", "agent", "--",
                    "kdra", "agent", "health", "mark", device, health)


def _taints(cluster: RealCluster, device: str) -> list[dict[str, Any]]:
    for item in cluster.get_json("resourceslices.resource.kdra.dev")["items"]:
        spec = item["spec"]
        if spec["driver"] == GPU and spec["pool"]["name"] == NODE_NAME:
            for entry in spec.get("devices") or ():
                if entry["name"] == device:
                    return list(entry.get("taints") or [])
    raise AssertionError(f"{device} is in no slice of {NODE_NAME}")


def _events(cluster: RealCluster, reason: str) -> list[str]:
    return [e["message"] for e in cluster.get_json("events", "-n", "default")["items"]
            if e["reason"] == reason]


def _uuid(cluster: RealCluster, device: str) -> str:
    return str(device_facts(cluster, Device(GPU, NODE_NAME, device, {}))["uuid"])


def _clean_up(cluster: RealCluster) -> None:
    cluster.kubectl("delete", "deployments,pods,pdb", "-n", "default", "-l", "kdra-test=health",
                    "--wait=true", "--timeout=120s", check=False)
    cluster.kubectl("delete", "resourceclaimtemplates.resource.kdra.dev", "-n", "default",
                    "health-gpu", "patient-gpu", "that-gpu", "a100", "--ignore-not-found",
                    check=False)

    def released() -> bool:
        claims = cluster.get_json("resourceclaims.resource.kdra.dev", "-n", "default")["items"]
        return not [c for c in claims if (c.get("status") or {}).get("allocation")]

    cluster.wait_for(released, "the health tests' claims released", 120)


def test_lost_gpu_evicts_the_pod_replaces_it_keeps_the_tolerating_one_and_recovers(
        cluster: RealCluster, gpu_class: None) -> None:
    _apply(cluster, _template("health-gpu"),
           _template("patient-gpu", tolerations=[{"key": UNHEALTHY, "operator": "Exists"}]))
    _apply(cluster, _deployment("train", "health-gpu", 1), _pod("patient", "patient-gpu"))
    marked: list[str] = []
    try:
        cluster.wait_for(lambda: len(_running(cluster, "app=train")) == 1
                         and "patient" in _running(cluster, "kdra-test=health"),
                         "the Deployment's pod and the patient pod Running", 180)
        ((old_name, old_pod),) = _running(cluster, "app=train").items()
        lost = _device(cluster, old_pod)
        patient_pod = _running(cluster, "kdra-test=health")["patient"]
        kept = _device(cluster, patient_pod)
        assert logs(cluster, old_name, "main").env["NVIDIA_VISIBLE_DEVICES"] == \
            _uuid(cluster, lost)

        marked += [lost, kept]
        _mark(cluster, lost, "lost")
        _mark(cluster, kept, "lost")
        cluster.wait_for(lambda: [(t["key"], t["effect"]) for t in _taints(cluster, lost)]
                         == [(UNHEALTHY, "NoExecute")], "the lost GPU tainted NoExecute", 60)

        # Evicted and replaced: the replacement runs on another, healthy GPU and sees it.
        cluster.wait_for(lambda: bool(_running(cluster, "app=train"))
                         and old_name not in _running(cluster, "app=train"),
                         "the Deployment's replacement pod Running", 180)
        ((new_name, new_pod),) = _running(cluster, "app=train").items()
        device = _device(cluster, new_pod)
        assert device not in (lost, kept)
        seen = logs(cluster, new_name, "main")
        assert seen.env["NVIDIA_VISIBLE_DEVICES"] == _uuid(cluster, device), seen
        assert seen.files == {f"/dev/kdra/{device}"}, seen
        why = f"device {GPU}/{NODE_NAME}/{lost} has taint {UNHEALTHY}=MarkedLost:NoExecute"
        evictions = _events(cluster, "DeviceTaintEviction")
        assert any(m.startswith(f"pod {old_name} evicted: {why}") for m in evictions), evictions
        assert any(m.startswith("evicted: claim ") and why in m for m in evictions), evictions

        # The tolerating pod still runs on its lost GPU: same pod, never restarted.
        still = cluster.get_json("pod", "patient", "-n", "default")
        assert still["metadata"]["uid"] == patient_pod["metadata"]["uid"]
        assert still["status"]["phase"] == "Running"
        assert still["status"]["containerStatuses"][0]["restartCount"] == 0
        assert _device(cluster, still) == kept

        # Healthy again: after the settled period the GPU is allocatable, nothing restarted.
        _mark(cluster, lost, "healthy")
        _mark(cluster, kept, "healthy")
        cluster.wait_for(lambda: _taints(cluster, lost) == [],
                         "the taint removed after the settled period", 60)
        uuid = _uuid(cluster, lost)
        _apply(cluster, _template("that-gpu", selectors=[{"cel": {"expression":
               f'device.attributes["{GPU}"].uuid == "{uuid}"'}}]),
               _pod("again", "that-gpu"))
        cluster.wait_for(lambda: "again" in _running(cluster, "kdra-test=health"),
                         "a pod on the recovered GPU Running", 120)
        assert logs(cluster, "again", "main").env["NVIDIA_VISIBLE_DEVICES"] == uuid
    finally:
        for device in marked:
            _mark(cluster, device, "healthy")
        _clean_up(cluster)


def test_maintenance_rule_drains_the_a100s_respecting_the_pdb(
        cluster: RealCluster, gpu_class: None) -> None:
    serve = _deployment("serve", "a100", 2)
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "serve", "namespace": "default",
                        "labels": {"kdra-test": "health"}},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}}}
    _apply(cluster, _template("a100", selectors=[{"cel": {"expression": A100}}]), serve, pdb)
    try:
        cluster.wait_for(lambda: len(_running(cluster, "app=serve")) == 2,
                         "both replicas Running on A100s", 180)
        before = set(_running(cluster, "app=serve"))
        cluster.wait_for(lambda: (cluster.get_json("pdb", "serve", "-n", "default")
                                  .get("status") or {}).get("disruptionsAllowed") == 1,
                         "the PDB allowing one disruption", 60)
        a100s = sorted(name for name, value in _a100_devices(cluster).items() if value)
        assert len(a100s) == 3, a100s  # the node's unhealthy GPU is an H200
        # The rule's selector is driver/pool/device (upstream's since 1.35): one per A100.
        _apply(cluster, *({
            "apiVersion": "resource.kdra.dev/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": f"{RULE}-{device}", "labels": {"kdra-test": "health"}},
            "spec": {"deviceSelector": {"driver": GPU, "pool": NODE_NAME, "device": device},
                     "taint": {"key": "example.com/maintenance", "value": "bios-update",
                               "effect": "NoExecute"}}} for device in a100s))

        # One replica goes; the budget keeps the other, whose replacement could not run.
        cluster.wait_for(lambda: len(_events(cluster, "DeviceTaintEvictionBlocked")) >= 1,
                         "the second eviction refused by the disruption budget", 120)
        blocked = _events(cluster, "DeviceTaintEvictionBlocked")
        assert all("disruption budget" in m for m in blocked), blocked
        left = set(_running(cluster, "app=serve"))
        assert len(left) == 1 and left <= before, (before, left)
        pending = [p for p in cluster.get_json("pods", "-n", "default", "-l", "app=serve")["items"]
                   if p["metadata"]["name"] not in before]
        assert len(pending) == 1 and pending[0]["status"].get("phase") == "Pending", pending

        # Maintenance over: the replacement runs, on an A100.
        cluster.kubectl("delete", "devicetaintrule.resource.kdra.dev", "-l", "kdra-test=health")
        cluster.wait_for(lambda: len(_running(cluster, "app=serve")) == 2,
                         "the replacement Running once the rule is gone", 180)
        for name, pod in _running(cluster, "app=serve").items():
            device = _device(cluster, pod)
            assert _a100_devices(cluster)[device], (name, device)
    finally:
        cluster.kubectl("delete", "devicetaintrule.resource.kdra.dev", "-l", "kdra-test=health",
                        check=False)
        _clean_up(cluster)


def _a100_devices(cluster: RealCluster) -> dict[str, bool]:
    """The node's GPUs → whether it is an A100."""
    found = {}
    for item in cluster.get_json("resourceslices.resource.kdra.dev")["items"]:
        spec = item["spec"]
        if spec["driver"] == GPU and spec["pool"]["name"] == NODE_NAME:
            for entry in spec.get("devices") or ():
                product = entry["attributes"]["productName"]["string"]
                found[entry["name"]] = product.startswith("NVIDIA A100")
    return found

