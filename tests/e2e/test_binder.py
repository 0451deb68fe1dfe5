"""The binder end to end: real API server, operator and node agents as real processes."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION
from kdra_devenv.controlplane import ControlPlane, free_port
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import SYSTEM_NAMESPACE, AgentFactory
from tests.e2e.conftest import ROOT, get_json
from tests.e2e.conversion import ConversionServer
from tests.e2e.procs import KdraProcess, wait_for

agents = agent_helpers.agents  # the node-agent fixture
CLAIMS = "resourceclaims.resource.kdra.dev"
CATS = "resource-driver.example.com"
GPU = "gpu.kdra.dev"


def apply(plane: ControlPlane, *objects: dict[str, Any]) -> str:
    return plane.kubectl("apply", "-f", "-",
                         input="\n---\n".join(json.dumps(o) for o in objects)).stdout


def gpu_class(name: str = GPU, selector: str | None = None) -> dict[str, Any]:
    expression = selector or f'device.driver == "{GPU}"'
    return {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]}}


def template(name: str, namespace: str, requests: list[dict[str, Any]],
             constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": devices}}}


def gpu_pod(name: str, namespace: str, claims: list[dict[str, Any]],
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {
                CLAIMS_ANNOTATION: yaml.safe_dump(claims), **(annotations or {})}},
            "spec": {"schedulerName": "kdra-scheduler",
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}}


def pods(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return list(get_json(plane, "pods", "-n", namespace)["items"])


def claims(plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return list(get_json(plane, CLAIMS, "-n", namespace)["items"])


def allocated_devices(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(r["driver"], r["pool"], r["device"])
            for c in items for r in ((c.get("status") or {}).get("allocation") or {})
            .get("devices", {}).get("results", [])]


def events(plane: ControlPlane, namespace: str, name: str, reason: str) -> list[str]:
    items = get_json(plane, "events", "-n", namespace,
                     "--field-selector", f"involvedObject.name={name}")["items"]
    return [e["message"] for e in items if e["reason"] == reason]


@pytest.fixture
def kdra(control_plane: ControlPlane, conversion_server: ConversionServer, tmp_path: Path,
         request: pytest.FixtureRequest) -> Any:
    """Start the operator with the binder (and webhooks) — a factory for custom flags. An
    operator with webhooks points the CRDs' conversion at itself: it goes back to the
    session's webhook server before the operator stops."""
    control_plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    started: list[KdraProcess] = []

    def start(*extra: str, webhooks: bool = False) -> KdraProcess:
        args = ["operator", "--health-port", "0", "--prepare-timeout", "20", *extra]
        if webhooks:
            port = free_port()
            args += ["--webhook-port", str(port), "--webhook-host", "127.0.0.1",
                     "--webhook-url", f"https://127.0.0.1:{port}",
                     "--webhook-manage-config", "true"]
        proc = KdraProcess(args, tmp_path / f"operator-{len(started)}.log",
                           control_plane.kubeconfig, ready_line="kdra operator started")
        started.append(proc)
        return proc.start()

    yield start
    conversion_server.point(control_plane)
    for proc in started:
        proc.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for proc in started:
            print(f"===== operator log =====\n{proc.tail(200)}")
    control_plane.kubectl("delete", "mutatingwebhookconfiguration", "kdra-mutating",
                          "--ignore-not-found", check=False)
    control_plane.kubectl("delete", "validatingwebhookconfiguration", "kdra-validating",
                          "--ignore-not-found", check=False)


def cats_inventory(*cats: tuple[str, str, str]) -> str:
    return yaml.safe_dump({"driver": CATS, "devices": [
        {"name": name, "attributes": {"color": color, "size": size}}
        for name, color, size in cats]})


# Both machineries that can deliver the operator's watch events (kdra.operator.handlers.routes):
# kdra's informers (the default) and kopf's event handlers (--watch=kopf, for the benchmark).
@pytest.mark.parametrize("watch", ["informers", "kopf"])
def test_seed_pod_with_cats_binds_where_both_cats_are(control_plane: ControlPlane,
                                                      agents: AgentFactory, kdra: Any,
                                                      namespace: str, watch: str) -> None:
    suffix = namespace[-6:]
    nodes = {f"cats-a-{suffix}": cats_inventory(("kitten-0", "white", "small")),
             f"cats-b-{suffix}": cats_inventory(("kitten-0", "white", "small"),
                                                ("kitten-1", "black", "large")),
             f"cats-c-{suffix}": cats_inventory(("kitten-1", "black", "large"))}
    for node, inventory in nodes.items():
        agents(node, inventory)
    kdra("--watch", watch, webhooks=True)
    seed = ROOT / "manifests" / "examples" / "seed"
    objects = [doc for f in ("deviceclass.yaml", "resourceclaim.yaml",
                             "resourceclaimtemplate.yaml", "pod.yaml")
               for doc in yaml.safe_load_all((seed / f).read_text()) if doc]
    for obj in objects:
        if obj["kind"] != "DeviceClass":
            obj["metadata"]["namespace"] = namespace
    apply(control_plane, *objects)

    pod = wait_for(lambda: (p := get_json(control_plane, "pod", "pod-with-cats", "-n",
                                          namespace))["spec"].get("nodeName") and p,
                   timeout=90, what="pod-with-cats bound")
    assert pod["spec"]["nodeName"] == f"cats-b-{suffix}"
    statuses = json.loads(pod["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])
    uid = pod["metadata"]["uid"]
    for claim_name in statuses.values():
        claim = get_json(control_plane, CLAIMS, claim_name, "-n", namespace,
                         "--show-managed-fields")
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [uid]
        (entry,) = claim["status"]["devices"]
        assert entry["conditions"][0]["type"] == "Ready"
        assert entry["conditions"][0]["status"] == "True"
        # kdra's client drops managedFields from what it reads, and its PUTs carry none: the
        # server kept the field ownership of every writer all the same.
        managers = {(m["manager"], m.get("subresource", "")): set(m["fieldsV1"].get("f:status",
                                                                                     {}))
                    for m in claim["metadata"]["managedFields"]}
        assert "f:allocation" in managers[("kdra-operator", "status")], managers
        assert "f:devices" in managers[("kdra-agent", "status")], managers
    annotations = pod["metadata"]["annotations"]
    assert annotations["devices.resource.kdra.dev/container0"] == \
        f"{CATS}/cats-b-{suffix}/kitten-0"
    assert annotations["devices.resource.kdra.dev/container1"] == \
        f"{CATS}/cats-b-{suffix}/kitten-1"
    # The webhook pointed each container's env at its own annotation.
    for container in pod["spec"]["containers"]:
        env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
               for e in container.get("env", [])}
        assert env["KDRA_DEVICES"] == (
            f"metadata.annotations['devices.resource.kdra.dev/{container['name']}']")
    print("scheduled:", events(control_plane, namespace, "pod-with-cats", "Scheduled"))


def test_the_seed_kustomization_applied_whole_schedules_pod_with_cats(
        control_plane: ControlPlane, agents: AgentFactory, kdra: Any) -> None:
    """What the README tells a new user: an agent serving the cats on worker-1 (as `make demo`
    runs it) and `kubectl apply -k manifests/examples/seed/`. The seed publishes no slice of
    its own, so pool worker-1 has one publisher and pod-with-cats binds at once (it used to
    wait ~60 s on "duplicate device names" until the agent deleted the seed's slice)."""
    seed = ROOT / "manifests" / "examples" / "seed"
    inventory = ROOT / "manifests" / "examples" / "inventory" / "cats.yaml"

    def clean() -> None:
        control_plane.kubectl("delete", "pod", "pod-with-cats", "-n", "default", "--force",
                              "--grace-period=0", "--ignore-not-found", check=False)
        control_plane.kubectl("delete", "-k", str(seed), "--ignore-not-found", check=False)
        control_plane.kubectl("delete", "node", "worker-1", "--ignore-not-found", check=False)

    clean()  # e.g. test_crds' static variant, in the same session
    try:
        agent = agents("worker-1", inventory.read_text())
        kdra(webhooks=True)
        control_plane.kubectl("apply", "-k", str(seed))
        pod = wait_for(lambda: (p := get_json(control_plane, "pod", "pod-with-cats", "-n",
                                              "default"))["spec"].get("nodeName") and p,
                       timeout=30, what="pod-with-cats bound")
        assert pod["spec"]["nodeName"] == "worker-1"
        annotations = pod["metadata"]["annotations"]
        assert annotations["devices.resource.kdra.dev/container0"] == f"{CATS}/worker-1/kitten-0"
        assert annotations["devices.resource.kdra.dev/container1"] == f"{CATS}/worker-1/kitten-1"
        (slice_,) = agent_helpers.slices_of(control_plane, "worker-1")  # the agent's only
        assert slice_["metadata"]["name"] == "worker-1-resource-driver-example-com-0"
        assert not events(control_plane, "default", "pod-with-cats", "FailedScheduling")
        assert agent.metric('kdra_agent_slice_deletions_total{reason="foreign"}') == 0.0
        # Cats are no GPUs: the webhook gave each container KDRA_DEVICES and nothing else.
        for container in pod["spec"]["containers"]:
            names = [e["name"] for e in container.get("env", [])]
            assert names == ["KDRA_DEVICES"], (container["name"], names)
    finally:
        clean()


def test_hundred_pods_on_eighty_gpus(control_plane: ControlPlane, agents: AgentFactory,
                                     kdra: Any, namespace: str) -> None:
    suffix = namespace[-5:]
    names = [f"g{suffix}-{i}" for i in range(10)]
    agents(names[0], "gpus: ['8 x H100-80GB']\n", "--simulate-nodes", ",".join(names))
    kdra()
    apply(control_plane, gpu_class(),
          template("one-gpu", namespace, [{"name": "gpu", "deviceClassName": GPU}]))
    started = time.monotonic()
    apply(control_plane, *[gpu_pod(f"p{i:03d}", namespace,
                                   [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
                           for i in range(100)])

    def settled() -> tuple[list[dict[str, Any]], list[dict[str, Any]]] | None:
        items = pods(control_plane, namespace)
        bound = [p for p in items if p["spec"].get("nodeName")]
        pending = [p for p in items if not p["spec"].get("nodeName") and any(
            c.get("type") == "PodScheduled" and c.get("status") == "False"
            for c in p.get("status", {}).get("conditions", []))]
        return (bound, pending) if len(bound) == 80 and len(pending) == 20 else None

    bound, pending = wait_for(settled, timeout=240, interval=1, what="80 bound, 20 pending")
    elapsed = time.monotonic() - started
    devices = allocated_devices(claims(control_plane, namespace))
    doubles = [d for d, n in Counter(devices).items() if n > 1]
    per_node = Counter(p["spec"]["nodeName"] for p in bound)
    message = next(c["message"] for c in pending[0]["status"]["conditions"]
                   if c["type"] == "PodScheduled")
    print(f"100 pods: {len(bound)} bound, {len(pending)} pending, {len(doubles)} double "
          f"allocations, settled in {elapsed:.1f}s; pending reason: {message}")
    assert not doubles
    assert len(devices) == 80
    assert set(per_node.values()) == {8}
    assert re.match(r"0/\d+ nodes are available: 10 matching devices all allocated", message), \
        message
    # kdra's flavour records a bound pod's claim names in its Binding (issue 42): no manager
    # owns the record on a bound pod (a Binding is nobody's field update), while a pending
    # pod's record was written apart, by the operator, once it was reported unschedulable.
    def recorded() -> dict[str, dict[str, Any]] | None:
        items = get_json(control_plane, "pods", "-n", namespace, "--show-managed-fields")
        found = {p["metadata"]["name"]: p for p in items["items"]}
        return found if all(CLAIM_STATUSES_ANNOTATION in p["metadata"]["annotations"]
                            for p in found.values()) else None

    listed = wait_for(recorded, timeout=30, what="every pod's claim names recorded")

    def record_writers(name: str) -> set[str]:
        pod = listed[name]
        assert json.loads(pod["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])["gpu"]
        return {m["manager"] for m in pod["metadata"].get("managedFields", [])
                if f'"f:{CLAIM_STATUSES_ANNOTATION}"' in json.dumps(m.get("fieldsV1"))}

    assert [record_writers(p["metadata"]["name"]) for p in bound] == [set()] * 80
    assert [record_writers(p["metadata"]["name"]) for p in pending] == [{"kdra-operator"}] * 20

    # No kubelet here: force the deletion, as a kubelet would finish it.
    control_plane.kubectl("delete", "pod", *[p["metadata"]["name"] for p in bound[:10]],
                          "-n", namespace, "--grace-period=0", "--force")
    wait_for(lambda: len([p for p in pods(control_plane, namespace)
                          if p["spec"].get("nodeName")]) == 80 and
             len(pods(control_plane, namespace)) == 90, timeout=180, interval=1,
             what="10 pending pods bound after 10 bound ones were deleted")
    devices = allocated_devices(claims(control_plane, namespace))
    assert len(devices) == len(set(devices)) == 80


def test_constraints_all_mode_shared_claim_and_explanations(
        control_plane: ControlPlane, agents: AgentFactory, kdra: Any, namespace: str) -> None:
    suffix = namespace[-5:]
    node = f"mix-{suffix}"
    agents(node, (ROOT / "manifests/examples/inventory/mixed-gpus.yaml").read_text())
    kdra()
    a100 = 'device.attributes["gpu.kdra.dev"].productName.startsWith("NVIDIA A100")'
    apply(control_plane,
          gpu_class(),
          gpu_class(f"a100-{suffix}", f'device.driver == "{GPU}" && {a100}'),
          template("pair", namespace, [{"name": "gpus", "deviceClassName": f"a100-{suffix}",
                                        "count": 2}],
                   constraints=[{"matchAttribute": "gpu.kdra.dev/pcieRoot"}]),
          template("every-h100", namespace, [{
              "name": "all", "deviceClassName": GPU, "allocationMode": "All",
              "selectors": [{"cel": {"expression":
                  'device.attributes["gpu.kdra.dev"].productName.contains("H100")'}}]}]),
          template("h200", namespace, [{
              "name": "gpu", "deviceClassName": GPU, "selectors": [{"cel": {"expression":
                  'device.attributes["gpu.kdra.dev"].productName == "NVIDIA H200"'}}]}]),
          template("broken", namespace, [{
              "name": "gpu", "deviceClassName": GPU, "selectors": [{"cel": {"expression":
                  'device.attributes["gpu.kdra.dev"].noSuchAttribute == 1'}}]}]),
          {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaim",
           "metadata": {"name": "shared", "namespace": namespace},
           "spec": {"devices": {"requests": [{"name": "gpu",
                                              "deviceClassName": f"a100-{suffix}"}]}}})

    # Pods that cannot fit, while every device is still free: the explanations must say why.
    apply(control_plane,
          gpu_pod("nowhere", namespace, [{"name": "g", "resourceClaimTemplateName": "h200"}]),
          gpu_pod("cel-error", namespace, [{"name": "g", "resourceClaimTemplateName": "broken"}]))
    nowhere = wait_for(lambda: events(control_plane, namespace, "nowhere", "FailedScheduling"),
                       what="explanation for the pod that fits nowhere")
    assert 'no device of class "gpu.kdra.dev" matches request "gpu"' in nowhere[-1], nowhere
    assert "NVIDIA H200" in nowhere[-1]
    broken = wait_for(lambda: [m for m in events(control_plane, namespace, "cel-error",
                                                 "FailedScheduling") if "noSuchAttribute" in m],
                      what="explanation naming the failing expression")

    def bound(name: str) -> dict[str, Any] | None:
        pod = get_json(control_plane, "pod", name, "-n", namespace)
        return pod if pod["spec"].get("nodeName") else None

    # One after the other: the allocator is first-fit per node (as upstream), so the pair
    # must come before the shared claim takes one of the two A100s on a common PCIe root.
    on_node = {"nodeSelector": {"kubernetes.io/hostname": node}}
    for name, entry in (("pair", {"resourceClaimTemplateName": "pair"}),
                        ("all", {"resourceClaimTemplateName": "every-h100"}),
                        ("share-1", {"resourceClaimName": "shared"}),
                        ("share-2", {"resourceClaimName": "shared"})):
        pod = gpu_pod(name, namespace, [{"name": "g", **entry}])
        pod["spec"].update(on_node)
        apply(control_plane, pod)
        wait_for(lambda n=name: bound(n), timeout=90, what=f"{name} bound")

    # `kubectl get kclaim` shows every device of a claim (a JSONPath column would show only
    # the first): the pair's two A100s and every H100 of the All request — in both served
    # versions (v1, kubectl's default, and v1alpha3 through the conversion webhook).
    for resource in ("kclaim", "resourceclaims.v1alpha3.resource.kdra.dev"):
        table = control_plane.kubectl("get", resource, "-n", namespace).stdout.splitlines()
        column = table[0].split().index("DEVICES")  # after NAME and CLASS (issue 41)
        rows = {line.split()[0]: line for line in table[1:]}
        shown = 0
        for claim in claims(control_plane, namespace):
            results = ((claim.get("status") or {}).get("allocation") or {}).get(
                "devices", {}).get("results", [])
            if results:
                devices = ",".join(r["device"] for r in results)
                assert rows[claim["metadata"]["name"]].split()[column] == devices, (resource,
                                                                                    rows)
                shown += len(results) > 1
        assert shown == 2, (resource, rows)  # the pair and the All claim
    print("nowhere:", nowhere[-1])
    print("cel-error:", broken[-1])


def test_binpack_and_spread_place_differently(control_plane: ControlPlane,
                                              agents: AgentFactory, kdra: Any,
                                              namespace: str) -> None:
    suffix = namespace[-5:]
    names = [f"bp{suffix}-{i}" for i in range(3)]
    agents(names[0], "gpus: ['4 x H100-80GB']\n", "--simulate-nodes", ",".join(names))
    kdra()
    apply(control_plane, gpu_class(),
          template("one", namespace, [{"name": "gpu", "deviceClassName": GPU}]))

    only_ours = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": names}]}]}}}}

    def place(prefix: str, policy: str) -> Counter[str]:
        for i in range(3):
            pod = gpu_pod(f"{prefix}-{i}", namespace,
                          [{"name": "g", "resourceClaimTemplateName": "one"}],
                          {"resource.kdra.dev/placement-policy": policy})
            pod["spec"].update(only_ours)
            apply(control_plane, pod)
            wait_for(lambda n=f"{prefix}-{i}": get_json(control_plane, "pod", n, "-n",
                                                        namespace)["spec"].get("nodeName"),
                     timeout=60, what=f"{prefix}-{i} bound")
        return Counter(get_json(control_plane, "pod", f"{prefix}-{i}", "-n",
                                namespace)["spec"]["nodeName"] for i in range(3))

    packed = place("pack", "binpack")
    assert sorted(packed.values()) == [3], packed  # all on one node
    control_plane.kubectl("delete", "pod", "pack-0", "pack-1", "pack-2", "-n", namespace,
                          "--grace-period=0", "--force")
    wait_for(lambda: not [c for c in claims(control_plane, namespace)
                          if (c.get("status") or {}).get("allocation")],
             timeout=60, what="binpack pods' devices released")
    spread = place("spread", "spread")
    assert len(spread) == 3, spread  # one per node
    print("binpack:", dict(packed), "spread:", dict(spread))


def test_prepare_timeout_moves_the_pod(control_plane: ControlPlane, agents: AgentFactory,
                                       kdra: Any, namespace: str) -> None:
    suffix = namespace[-5:]
    dead, alive = f"dead-{suffix}", f"alive-{suffix}"
    stopped = agents(dead, "gpus: ['8 x H100-80GB']\n")
    agents(alive, "gpus: ['1 x H100-80GB']\n")
    stopped.proc.kill()  # its slice stays (the GC grace has not passed): nobody prepares there
    kdra("--prepare-timeout", "5")
    apply(control_plane, gpu_class(),
          template("one", namespace, [{"name": "gpu", "deviceClassName": GPU}]))
    # binpack prefers the node with the most devices left... after placement: 'alive' (0 left)
    # would win, so force the dead node first with spread.
    apply(control_plane, gpu_pod("mover", namespace,
                                 [{"name": "g", "resourceClaimTemplateName": "one"}],
                                 {"resource.kdra.dev/placement-policy": "spread"}))
    failed = wait_for(lambda: events(control_plane, namespace, "mover", "FailedPrepare"),
                      timeout=60, what="FailedPrepare event")
    assert dead in failed[0]
    pod = wait_for(lambda: (p := get_json(control_plane, "pod", "mover", "-n", namespace))
                   ["spec"].get("nodeName") and p, timeout=90, what="pod bound elsewhere")
    assert pod["spec"]["nodeName"] == alive
    print("prepare failure:", failed[0])
