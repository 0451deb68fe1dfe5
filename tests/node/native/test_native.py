"""kdra's agent as the kubelet's DRA plugin, on the real node (native flavour): pods with
``spec.resourceClaims`` (``resource.k8s.io/v1``, allocated by kube-scheduler, their claims
made by kube-controller-manager's resourceclaim-controller) run on the real kubelet, which
calls the agent to prepare each claim and has containerd inject the CDI devices — not NRI: the
agent is not an NRI plugin in this flavour.

The tests run in file order on one cluster (package fixture ``cluster``): registration, a pod
that sees exactly its devices, a device marked unhealthy (the pod's
``allocatedResourcesStatus``, the slice's taint), a kubelet restart (the plugin registers
again, the wiped slices come back), and a burst of pods while the agent is killed.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from typing import Any

from kdra.agent.core.cdi import env_name
from kdra_devenv.node import AGENT_STATE_DIR, CDI_DIR, NODE_NAME
from kdra_devenv.realcluster import NAMESPACE, RealCluster
from tests.node.deployed.devices import Device, Seen, logs, spec_device, wait_running
from tests.node.native.conftest import (
    CATS,
    GPU,
    NATIVE_CLAIMS,
    NATIVE_SLICES,
    agent_pod,
    get_json,
)

PRINT = ("env | grep -E '^(KDRA_|NVIDIA_VISIBLE_DEVICES=)' | sort; "
         "ls -d /dev/kdra/* 2>/dev/null; ")
UNHEALTHY = "gpu.kdra.dev/unhealthy"


def metrics(cluster: RealCluster) -> dict[str, float]:
    """The agent's metrics (unlabelled and labelled samples, by their full name)."""
    ip = agent_pod(cluster)["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:8082/metrics", timeout=10) as response:
        text = response.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def native_pod(name: str, containers: list[dict[str, Any]],
               claims: dict[str, str], **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "resourceClaims": [{"name": claim, "resourceClaimTemplateName": template}
                                        for claim, template in claims.items()],
                     "containers": containers}}


def container(name: str, *claims: str, then: str = "exec sleep 3600") -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "image": "localhost/busybox:static",
                            "command": ["sh", "-c", PRINT + then]}
    if claims:
        spec["resources"] = {"claims": [{"name": claim} for claim in claims]}
    return spec


def apply(cluster: RealCluster, *objects: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))


def claim_of(cluster: RealCluster, pod: dict[str, Any], pod_claim: str) -> dict[str, Any]:
    """The pod's claim (``status.resourceClaimStatuses``: kube-controller-manager's)."""
    (name,) = [s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"]
               if s["name"] == pod_claim]
    claim: dict[str, Any] = get_json(cluster, NATIVE_CLAIMS, "-n", "default", name)
    return claim


def devices_of(claim: dict[str, Any]) -> list[Device]:
    return [Device(r["driver"], r["pool"], r["device"], claim)
            for r in claim["status"]["allocation"]["devices"]["results"]]


def expected(devices: list[Device]) -> Seen:
    """Exactly what a container with ``devices`` prints: their CDI specs' env and device
    nodes (as the agent wrote them on the host), nothing else."""
    seen = Seen()
    for device in devices:
        spec, entry = spec_device(device)
        for item in [*spec["containerEdits"].get("env", []),
                     *entry["containerEdits"].get("env", [])]:
            key, _, value = item.partition("=")
            seen.env[key] = value
        seen.files |= {n["path"] for n in entry["containerEdits"].get("deviceNodes", [])}
    return seen


def slice_device(cluster: RealCluster, driver: str, name: str) -> dict[str, Any]:
    for item in get_json(cluster, NATIVE_SLICES)["items"]:
        if item["spec"]["driver"] == driver and item["spec"]["pool"]["name"] == NODE_NAME:
            for device in item["spec"].get("devices") or ():
                if device["name"] == name:
                    found: dict[str, Any] = device
                    return found
    raise AssertionError(f"{driver}/{NODE_NAME}/{name} is in no native slice")


def generations(cluster: RealCluster) -> dict[str, int]:
    return {s["spec"]["driver"]: s["spec"]["pool"]["generation"]
            for s in get_json(cluster, NATIVE_SLICES, "--field-selector",
                              f"spec.nodeName={NODE_NAME}")["items"]}


# --------------------------------------------------------------------------- registration


def test_the_agent_is_the_kubelets_dra_plugin_for_both_drivers(cluster: RealCluster) -> None:
    pod = agent_pod(cluster)
    assert all(s["ready"] for s in pod["status"]["containerStatuses"])

    def registered() -> bool:
        return metrics(cluster).get("kdra_agent_kubelet_registrations_total", 0) >= 2

    cluster.wait_for(registered, "the kubelet confirming both plugins' registration", 60)
    seen = metrics(cluster)
    assert seen["kdra_agent_nri_connected"] == 0  # not an NRI plugin in this flavour
    slices = get_json(cluster, NATIVE_SLICES, "--field-selector",
                      f"spec.nodeName={NODE_NAME}")["items"]
    assert {s["spec"]["driver"] for s in slices} == {GPU, CATS}
    assert get_json(cluster, "resourceslices.resource.kdra.dev")["items"] == []
    # The sockets the kubelet found: mode 0600, in the kubelet's directories.
    assert cluster.node is not None
    for path in (cluster.node.plugins_registry / f"{GPU}-reg.sock",
                 cluster.node.plugins_dir / GPU / "dra.sock",
                 cluster.node.plugins_registry / f"{CATS}-reg.sock"):
        assert oct(os.stat(path).st_mode & 0o777) == "0o600", path
    assert oct(os.stat(cluster.node.plugins_dir / GPU).st_mode & 0o777) == "0o700"


# --------------------------------------------------------------------------- devices


def test_a_native_pod_sees_exactly_its_devices(cluster: RealCluster) -> None:
    """Each container gets the CDI devices of the claims it names (the kubelet passes the
    agent's CDI IDs to containerd): the GPU container its GPU's env and device node, the
    cat container its cat's env, a container without claims nothing."""
    apply(cluster, native_pod("native-devices", [
        container("with-gpu", "gpu"), container("with-cat", "cat"), container("bystander"),
    ], {"gpu": "one-gpu", "cat": "white-cat"}, **{"kdra-test": "native"}))
    pod = wait_running(cluster, ["native-devices"])["native-devices"]
    gpu = devices_of(claim_of(cluster, pod, "gpu"))
    cat = devices_of(claim_of(cluster, pod, "cat"))
    assert [(d.driver, d.pool) for d in gpu + cat] == [(GPU, NODE_NAME), (CATS, NODE_NAME)]

    seen = logs(cluster, "native-devices", "with-gpu")
    assert (seen.env, seen.files) == (expected(gpu).env, expected(gpu).files), seen
    (device,) = gpu
    assert seen.files == {f"/dev/kdra/{device.name}"}
    uuid = slice_device(cluster, GPU, device.name)["attributes"]["uuid"]["string"]
    assert seen.env[f"{env_name(device.name)}_UUID"] == uuid
    assert seen.env["KDRA_NODE_NAME"] == NODE_NAME

    seen = logs(cluster, "native-devices", "with-cat")
    assert (seen.env, seen.files) == (expected(cat).env, set()), seen
    assert seen.env[f"{env_name(cat[0].name)}_COLOR"] == "white"

    bystander = logs(cluster, "native-devices", "bystander")
    assert bystander.env == {} and bystander.files == set(), bystander

    # Prepared through the kubelet: checkpointed like the kdra flavour's, no NRI involved.
    checkpoint = json.loads((AGENT_STATE_DIR / f"checkpoint-{NODE_NAME}.json").read_text())
    uids = {d.claim["metadata"]["uid"] for d in gpu + cat}
    assert uids <= set(checkpoint["claims"])
    calls = metrics(cluster)
    assert calls['kdra_agent_kubelet_calls_total{method="NodePrepareResources",result="ok"}'] >= 2


def test_an_unhealthy_device_shows_in_the_pods_status_and_is_tainted(
        cluster: RealCluster) -> None:
    """``kdra agent health mark <gpu> unhealthy`` (as an administrator types it, in the
    agent's pod): after the debounce the device's native slice gets the NoSchedule taint and
    the kubelet, told by the agent's health stream, reports it Unhealthy in the pod's
    ``allocatedResourcesStatus``; marked healthy again, both recover."""
    pod = wait_running(cluster, ["native-devices"])["native-devices"]
    claim = claim_of(cluster, pod, "gpu")
    (device,) = devices_of(claim)
    cdi_id = f"kdra.dev/gpu={claim['metadata']['uid']}-{device.name}"

    def health() -> list[Any]:
        current = get_json(cluster, "pod", "-n", "default", "native-devices")
        (status,) = [c for c in current["status"]["containerStatuses"]
                     if c["name"] == "with-gpu"]
        return list(status.get("allocatedResourcesStatus") or [])

    cluster.wait_for(lambda: health() == [{"name": "claim:gpu", "resources": [
        {"resourceID": cdi_id, "health": "Healthy"}]}], "the GPU reported Healthy", 60)
    agent = agent_pod(cluster)["metadata"]["name"]
    mark = ["exec", "-n", NAMESPACE, agent, "-c", "agent", "--", "kdra", "agent", "health",
            "mark", device.name]
    cluster.kubectl(*mark, "unhealthy")
    try:
        cluster.wait_for(lambda: [t["key"] for t in slice_device(cluster, GPU, device.name)
                                  .get("taints") or ()] == [UNHEALTHY],
                         "the device's taint in its native slice", 60)
        (taint,) = slice_device(cluster, GPU, device.name)["taints"]
        assert taint["effect"] == "NoSchedule" and taint["value"] == "MarkedUnhealthy"
        cluster.wait_for(lambda: health() == [{"name": "claim:gpu", "resources": [
            {"resourceID": cdi_id, "health": "Unhealthy"}]}],
            "the GPU reported Unhealthy in the pod's allocatedResourcesStatus", 90)
    finally:
        cluster.kubectl(*mark, "healthy")
    cluster.wait_for(lambda: not slice_device(cluster, GPU, device.name).get("taints"),
                     "the taint gone after the settled period", 90)
    cluster.wait_for(lambda: health()[0]["resources"][0]["health"] == "Healthy",
                     "the GPU reported Healthy again", 90)
    cluster.kubectl("delete", "pod", "-n", "default", "native-devices", "--wait=true",
                    "--timeout=120s")


# --------------------------------------------------------------------------- restarts


def test_a_restarted_kubelet_registers_the_plugin_again(cluster: RealCluster) -> None:
    """The kubelet restarts: it finds the agent's registration sockets and registers both
    plugins again, and the node's slices it deletes at start-up are published again (a newer
    generation); a new pod's claim is then prepared."""
    assert cluster.node is not None
    before = metrics(cluster)["kdra_agent_kubelet_registrations_total"]
    generation = generations(cluster)
    cluster.node.restart_kubelet()
    cluster.wait_for(lambda: metrics(cluster)["kdra_agent_kubelet_registrations_total"]
                     >= before + 2, "both plugins registered again", 120)
    cluster.wait_for(lambda: set(generations(cluster)) == {GPU, CATS} and all(
        generations(cluster)[d] > generation[d] for d in (GPU, CATS)),
        "the wiped slices published again", 120)
    apply(cluster, native_pod("after-restart", [container("main", "gpu", then="true")],
                              {"gpu": "one-gpu"}))

    def succeeded() -> bool:
        phase = get_json(cluster, "pod", "-n", "default", "after-restart")["status"].get(
            "phase")
        assert phase != "Failed"
        return phase == "Succeeded"

    cluster.wait_for(succeeded, "a pod with a claim after the kubelet restart", 180)
    seen = logs(cluster, "after-restart", "main")
    assert len([k for k in seen.env if k.startswith("KDRA_DEVICE_") and k.count("_") == 3]) \
        == 1, seen
    cluster.kubectl("delete", "pod", "-n", "default", "after-restart", "--wait=true")


BURST = 16  # more than the node's 11 healthy GPUs: they take turns


def _phases(cluster: RealCluster) -> dict[str, str]:
    return {p["metadata"]["name"]: p.get("status", {}).get("phase", "")
            for p in get_json(cluster, "pods", "-n", "default", "-l",
                              "kdra-test=burst")["items"]}


def _kill_agent_process(cluster: RealCluster) -> None:
    assert cluster.node is not None and cluster.node.containerd is not None
    crictl = cluster.node.containerd.crictl
    container_id = crictl("ps", "--name", "^agent$", "-q").stdout.split()[0]
    pid = json.loads(crictl("inspect", container_id).stdout)["info"]["pid"]
    os.kill(pid, signal.SIGKILL)


def test_killing_the_agent_mid_burst_loses_nothing(cluster: RealCluster) -> None:
    """A burst of one-GPU pods; mid-burst the agent's process is SIGKILLed (its container
    restarts; the kubelet's prepare and unprepare calls fail meanwhile and are retried).
    Every pod runs to completion with exactly one GPU of its own, seen from inside; then
    no claim is left, and no CDI spec or checkpoint entry."""
    apply(cluster, *[native_pod(f"burst-{i:02d}", [container("main", "gpu", then="sleep 3")],
                                {"gpu": "one-gpu"}, **{"kdra-test": "burst"})
                     for i in range(BURST)])
    cluster.wait_for(lambda: sum(p in ("Running", "Succeeded")
                                 for p in _phases(cluster).values()) >= 4,
                     "the burst's first pods", 180)
    _kill_agent_process(cluster)
    killed_at = time.monotonic()

    def finished() -> bool:
        phases = _phases(cluster)
        assert "Failed" not in phases.values(), phases
        return len(phases) == BURST and set(phases.values()) == {"Succeeded"}

    cluster.wait_for(finished, f"all {BURST} burst pods Succeeded (agent killed)", 600)
    print(f"\nburst finished {time.monotonic() - killed_at:.0f} s after the agent was killed")
    restarts = agent_pod(cluster)["status"]["containerStatuses"][0]["restartCount"]
    assert restarts >= 1, "the agent was not killed"

    for index in range(BURST):
        seen = logs(cluster, f"burst-{index:02d}", "main")
        gpus = [key for key in seen.env if key.startswith("KDRA_DEVICE_GPU_")
                and key.count("_") == 3]
        assert len(gpus) == 1, (index, seen)
        name = seen.env[gpus[0]].rsplit("/", 1)[1]
        assert seen.files == {f"/dev/kdra/{name}"}, (index, seen)

    def released() -> bool:
        claims = get_json(cluster, NATIVE_CLAIMS, "-n", "default")["items"]
        state = json.loads((AGENT_STATE_DIR / f"checkpoint-{NODE_NAME}.json").read_text())
        return not claims and not list(CDI_DIR.glob("kdra.dev-*.json")) \
            and not state["claims"]

    cluster.kubectl("delete", "pods", "-n", "default", "-l", "kdra-test=burst", "--wait=true")
    cluster.wait_for(released, "every claim gone, unprepared on the node", 240)
