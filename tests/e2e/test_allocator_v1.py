"""Issue 39 end to end: the v1 features upstream's allocator has and kdra's lacked —
per-device node selection and binding conditions — against a real API server and one
operator for the module.

The test plays the DRA driver: it publishes the ResourceSlices itself (``resource.kdra.dev/v1``)
and writes the devices' conditions into the claims' ``status.devices`` as a driver would (no
node agent: these are not kdra's GPUs). Nodes are objects with capacity, as a kubelet
registers them.

- Per-device node selection: one slice, ``perDeviceNodeSelection``, with a device on node a
  (``nodeName``), one on the rack-b nodes (``nodeSelector``) and one every node reaches
  (``allNodes``). A pod for rack b gets the rack-b device and the shared one, with the
  rack's node selector in its allocation; a pod for node a gets node a's device, its
  allocation pinned to node a. Each binds once its devices are Ready.
- Binding conditions: a device per node with ``bindingConditions: [Attached]`` and
  ``bindingFailureConditions: [AttachFailed]``. The pod's claim is allocated with the
  conditions in its result and the pod is not bound while ``Attached`` is not True
  (``BindingConditionsPending``); ``AttachFailed`` on that node's device makes the binder
  undo the allocation and try the other node; ``Attached`` there binds the pod to it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kdra.dra.timestamps import api_time
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra_devenv.controlplane import ControlPlane
from tests.e2e.agent_helpers import SYSTEM_NAMESPACE, unique
from tests.e2e.conftest import get_json
from tests.e2e.procs import KdraProcess, wait_for
from tests.e2e.test_binder import apply, events

CLAIMS = "resourceclaims.resource.kdra.dev"
SLICES = "resourceslices.resource.kdra.dev"
CLASSES = "deviceclasses.resource.kdra.dev"
FABRIC = "fabric.e2e.kdra.dev"
ATTACH = "attach.e2e.kdra.dev"


class World:
    """The module's operator, nodes and classes."""

    def __init__(self, plane: ControlPlane, suffix: str) -> None:
        self.plane = plane
        self.node_a = f"v1-a-{suffix}"
        self.node_b = f"v1-b-{suffix}"
        self.suffix = suffix


def make_node(plane: ControlPlane, name: str, rack: str) -> None:
    plane.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                              "e2e.kdra.dev/rack": rack}}}))
    plane.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p",
                  json.dumps({"status": {
                      "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                      "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                      "conditions": [{"type": "Ready", "status": "True",
                                      "reason": "KubeletReady", "message": "ready"}]}}))
    plane.kubectl("taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-",
                  check=False)


def device_class(name: str, driver: str) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


@pytest.fixture(scope="module")
def world(control_plane: ControlPlane,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    plane = control_plane
    plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    world = World(plane, unique("w")[-6:])
    make_node(plane, world.node_a, "a")
    make_node(plane, world.node_b, "b")
    apply(plane, device_class(FABRIC, FABRIC), device_class(ATTACH, ATTACH))
    log = tmp_path_factory.mktemp("allocator-v1") / "operator.log"
    proc = KdraProcess(["operator", "--health-port", "0", "--prepare-timeout", "60",
                        "--binding-timeout", "120"], log, plane.kubeconfig,
                       ready_line="kdra operator started")
    proc.start()
    try:
        yield world
    finally:
        proc.stop()
        print(f"===== operator log (tail) =====\n{proc.tail(80)}")
        plane.kubectl("delete", SLICES, "-l", f"e2e.kdra.dev/world={world.suffix}",
                      "--wait=false", check=False)
        plane.kubectl("delete", CLASSES, FABRIC, ATTACH, "--ignore-not-found", "--wait=false",
                      check=False)
        plane.kubectl("delete", "node", world.node_a, world.node_b, "--ignore-not-found",
                      "--wait=false", check=False)


def resource_slice(world: World, name: str, driver: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-{world.suffix}",
                         "labels": {"e2e.kdra.dev/world": world.suffix}},
            "spec": {"driver": driver, "pool": {"name": f"{name}-{world.suffix}",
                                                "generation": 1, "resourceSliceCount": 1},
                     **spec}}


def claim(name: str, namespace: str, device_class_: str, count: int = 1) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [{"name": "dev", "exactly": {
                "deviceClassName": device_class_, "count": count}}]}}}


def pod(name: str, namespace: str, claim_name: str,
        node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "kdra-scheduler",
                            "containers": [{"name": "main",
                                            "image": "registry.k8s.io/pause:3.10"}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "annotations": {
                CLAIMS_ANNOTATION: yaml.safe_dump([{"name": "dev",
                                                    "resourceClaimName": claim_name}])}},
            "spec": spec}


def allocation(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return dict(wait_for(
        lambda: (get_json(plane, CLAIMS, name, "-n", namespace).get("status") or {})
        .get("allocation"), timeout=60, what=f"claim {name} allocated"))


def set_conditions(plane: ControlPlane, namespace: str, name: str,
                   conditions: dict[tuple[str, str, str], dict[str, str]]) -> None:
    """Write what a driver reports: per (driver, pool, device), conditions by type."""
    stamp = api_time()
    devices = [{"driver": driver, "pool": pool, "device": device, "conditions": [
        {"type": kind, "status": status, "reason": "E2E", "message": f"{kind} {status}",
         "lastTransitionTime": stamp} for kind, status in by_type.items()]}
        for (driver, pool, device), by_type in conditions.items()]
    plane.kubectl("patch", CLAIMS, name, "-n", namespace, "--subresource=status",
                  "--type=merge", "-p", json.dumps({"status": {"devices": devices}}))


def node_of(plane: ControlPlane, namespace: str, name: str) -> str | None:
    node = get_json(plane, "pod", name, "-n", namespace)["spec"].get("nodeName")
    return str(node) if node else None


def results(alloc: dict[str, Any]) -> list[dict[str, Any]]:
    return list(alloc["devices"]["results"])


def test_per_device_node_selection(world: World, ns: str) -> None:
    plane = world.plane
    rack_b = {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "e2e.kdra.dev/rack", "operator": "In", "values": ["b"]}]}]}
    fabric = resource_slice(world, "fabric", FABRIC, {
        "perDeviceNodeSelection": True,
        "devices": [{"name": "local-a", "nodeName": world.node_a},
                    {"name": "rack-b", "nodeSelector": rack_b},
                    {"name": "shared", "allNodes": True}]})
    apply(plane, fabric, claim("two", ns, FABRIC, count=2), claim("one", ns, FABRIC),
          pod("on-b", ns, "two", {"e2e.kdra.dev/rack": "b"}))
    first = allocation(plane, ns, "two")
    pool = fabric["spec"]["pool"]["name"]
    assert sorted(r["device"] for r in results(first)) == ["rack-b", "shared"]
    terms = first["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": rack_b["nodeSelectorTerms"][0]["matchExpressions"]}]
    assert node_of(plane, ns, "on-b") is None  # not before its devices are Ready
    set_conditions(plane, ns, "two", {(FABRIC, pool, d): {"Ready": "True"}
                                      for d in ("rack-b", "shared")})
    assert wait_for(lambda: node_of(plane, ns, "on-b"), timeout=60,
                    what="pod on-b bound") == world.node_b

    apply(plane, pod("on-a", ns, "one", {"e2e.kdra.dev/rack": "a"}))
    second = allocation(plane, ns, "one")
    assert [r["device"] for r in results(second)] == ["local-a"]  # "shared" is taken
    assert second["nodeSelector"]["nodeSelectorTerms"] == [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [world.node_a]}]}]
    set_conditions(plane, ns, "one", {(FABRIC, pool, "local-a"): {"Ready": "True"}})
    assert wait_for(lambda: node_of(plane, ns, "on-a"), timeout=60,
                    what="pod on-a bound") == world.node_a


def test_binding_conditions_hold_the_pod_and_a_failure_moves_it(world: World, ns: str) -> None:
    plane = world.plane
    slices = {node: resource_slice(world, f"attach-{rack}", ATTACH, {
        "nodeName": node, "devices": [{"name": "nic", "bindingConditions": ["Attached"],
                                       "bindingFailureConditions": ["AttachFailed"]}]})
        for node, rack in ((world.node_a, "a"), (world.node_b, "b"))}
    apply(plane, *slices.values(), claim("nic", ns, ATTACH), pod("p", ns, "nic"))

    first = allocation(plane, ns, "nic")
    (result,) = results(first)
    assert result["bindingConditions"] == ["Attached"]
    assert result["bindingFailureConditions"] == ["AttachFailed"]
    assert first.get("allocationTimestamp")
    first_node = next(n for n, s in slices.items() if s["spec"]["pool"]["name"] == result["pool"])
    wait_for(lambda: events(plane, ns, "p", "BindingConditionsPending"), timeout=30,
             what="BindingConditionsPending event")
    set_conditions(plane, ns, "nic", {(ATTACH, result["pool"], "nic"): {"Attached": "False"}})
    time.sleep(3)  # not Attached yet: the binder must not bind (nor give up)
    assert node_of(plane, ns, "p") is None
    assert (get_json(plane, CLAIMS, "nic", "-n", ns)["status"].get("allocation") or {}).get(
        "devices", {}).get("results", [{}])[0].get("pool") == result["pool"]

    # The driver reports the attachment failed: the binder undoes it and tries the other node.
    set_conditions(plane, ns, "nic", {(ATTACH, result["pool"], "nic"): {
        "Attached": "False", "AttachFailed": "True"}})
    other = next(n for n in slices if n != first_node)
    other_pool = slices[other]["spec"]["pool"]["name"]
    wait_for(lambda: [r["pool"] for r in results(allocation(plane, ns, "nic"))] == [other_pool],
             timeout=60, what="claim allocated on the other node")
    assert any("binding failed: AttachFailed" in message
               for message in events(plane, ns, "p", "FailedPrepare")), events(
        plane, ns, "p", "FailedPrepare")
    assert node_of(plane, ns, "p") is None
    set_conditions(plane, ns, "nic", {(ATTACH, other_pool, "nic"): {"Attached": "True"}})
    assert wait_for(lambda: node_of(plane, ns, "p"), timeout=60, what="pod bound") == other
