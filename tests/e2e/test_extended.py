"""Extended resources backed by kdra (issue 27) against a real kube-apiserver with the Deployment
and ReplicaSet controllers: a DeviceClass with ``extendedResourceName: gpu.kdra.dev/gpu``, the
operator serving its webhooks on loopback (``--webhook-url``), a node agent with fake GPUs.

- A Deployment whose container asks for ``resources.limits: {gpu.kdra.dev/gpu: 2}`` (no claims
  annotation): its ReplicaSet's template keeps the limit; the pod is mutated at creation (the
  limit gone, one ``extended-resources`` entry), gets a claim ``<pod>-extended-resources-*``
  owned by it with one request for two devices, is bound with two GPUs prepared by the agent,
  and its container's device annotations list exactly those two.
- What a user gets wrong is denied by the API server with kdra's message: a request without
  a limit, a request unequal to the limit, 10^9 GPUs; a name no class serves is left alone.

No kubelet runs here (tests/node/deployed/test_extended.py runs the same on a real node).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    DEVICES_ANNOTATION_PREFIX,
    GPU_UUIDS_ANNOTATION_PREFIX,
)
from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import CLAIMS, AgentFactory, unique
from tests.e2e.conftest import ROOT, get_json, operator_with_webhooks
from tests.e2e.conversion import ConversionServer
from tests.e2e.procs import KdraProcess, wait_for

agents = agent_helpers.agents
GPU = "gpu.kdra.dev"
RESOURCE = "gpu.kdra.dev/gpu"
CLASS = "extended-gpu.kdra.dev"  # its own class: the session's gpu.kdra.dev stays as it is
EXAMPLE = ROOT / "manifests" / "examples" / "extended"
APP = "app=train-gpus"


@pytest.fixture(scope="module")
def operator(control_plane: ControlPlane, conversion_server: ConversionServer,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[KdraProcess]:
    """The operator with its webhooks on (managing their configurations), for this module;
    what it leaves behind is removed afterwards, and the CRDs' conversion goes back to the
    session's webhook server (as tests/e2e/test_webhooks.py)."""
    log = tmp_path_factory.mktemp("extended") / "operator.log"
    with operator_with_webhooks(control_plane, conversion_server, log,
                                "--prepare-timeout", "30") as (proc, _port):
        apply(control_plane, {
            "apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{GPU}"'}}],
                     "extendedResourceName": RESOURCE}})
        try:
            yield proc
        finally:
            control_plane.kubectl("delete", "deviceclasses.resource.kdra.dev", CLASS,
                                  "--ignore-not-found", check=False)


@pytest.fixture(autouse=True)
def _operator_log_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    rep = getattr(request.node, "rep_call", None)
    proc = request.node.funcargs.get("operator") if hasattr(request.node, "funcargs") else None
    if rep is not None and rep.failed and isinstance(proc, KdraProcess):
        print(f"===== operator log =====\n{proc.tail(200)}")


def apply(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    plane.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


def container(limits: dict[str, str], requests: dict[str, str] | None = None,
              name: str = "main") -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": limits}
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": resources}


def example_deployment(namespace: str) -> dict[str, Any]:
    """manifests/examples/extended's Deployment, in ``namespace``, with a cpu limit too."""
    obj: dict[str, Any] = yaml.safe_load((EXAMPLE / "deployment.yaml").read_text())
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "100m"
    return obj


def bare_pod(name: str, namespace: str, *containers: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"containers": list(containers)}}


def live_pods(plane: ControlPlane, namespace: str, selector: str) -> list[dict[str, Any]]:
    return [p for p in get_json(plane, "pods", "-n", namespace, "-l", selector)["items"]
            if not p["metadata"].get("deletionTimestamp")]


def test_a_deployment_asking_for_two_gpus_runs_with_two(
        control_plane: ControlPlane, operator: KdraProcess, agents: AgentFactory,
        ns: str) -> None:
    node = unique("ext")
    agents(node, "gpus: ['4 x L4-24GB']\n")
    apply(control_plane, example_deployment(ns))

    # The ReplicaSet's template keeps the limit: each pod is converted when it is created.
    rs = wait_for(lambda: get_json(control_plane, "rs", "-n", ns, "-l", APP)["items"],
                  what="the Deployment's ReplicaSet")
    template = rs[0]["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert template["limits"][RESOURCE] == "2"  # the example's, as the user wrote it

    def bound_pod() -> dict[str, Any] | None:
        pods = [p for p in live_pods(control_plane, ns, APP) if p["spec"].get("nodeName")]
        return pods[0] if pods else None

    pod = wait_for(bound_pod, timeout=120, what="the Deployment's pod bound")
    name, spec = pod["metadata"]["name"], pod["spec"]
    assert spec["nodeName"] == node
    assert spec["schedulerName"] == "kdra-scheduler"
    resources = spec["containers"][0]["resources"]
    assert RESOURCE not in resources.get("limits", {})
    assert RESOURCE not in resources.get("requests", {})
    assert resources["limits"]["cpu"] == "100m"  # the rest is the user's, untouched
    annotations = pod["metadata"]["annotations"]
    (entry,) = json.loads(annotations[CLAIMS_ANNOTATION])
    assert entry == {"name": "extended-resources", "extendedResources": [
        {"request": "container-0-request-1", "container": "main", "resource": RESOURCE,
         "deviceClassName": CLASS, "count": 2}]}

    # The pod's claim-statuses name its generated claim, which it owns.
    claim_name = json.loads(annotations[CLAIM_STATUSES_ANNOTATION])["extended-resources"]
    assert claim_name.startswith(f"{name}-extended-resources-")
    claim = get_json(control_plane, CLAIMS, claim_name, "-n", ns)
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == (
        "Pod", pod["metadata"]["uid"], True)
    assert claim["metadata"]["annotations"]["resource.kdra.dev/extended-resource-claim"] \
        == "true"
    assert claim["spec"]["devices"]["requests"] == [{"name": "container-0-request-1",
                                                     "exactly": {
                                                         "deviceClassName": CLASS,
                                                         "allocationMode": "ExactCount",
                                                         "count": 2}}]

    # Two GPUs allocated, reserved for the pod, prepared Ready by the node's agent; the
    # container's env reads exactly those two.
    results = claim["status"]["allocation"]["devices"]["results"]
    gpus = sorted(f"{r['driver']}/{r['pool']}/{r['device']}" for r in results)
    assert len(gpus) == 2 and all(g.startswith(f"{GPU}/{node}/") for g in gpus)
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    ready = {d["device"]: d["conditions"][0]["status"] for d in claim["status"]["devices"]}
    assert ready == {r["device"]: "True" for r in results}
    assert sorted(annotations[f"{DEVICES_ANNOTATION_PREFIX}main"].split(",")) == gpus
    assert len(annotations[f"{GPU_UUIDS_ANNOTATION_PREFIX}main"].split(",")) == 2
    env = {e["name"] for e in spec["containers"][0]["env"]}
    assert {"KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"} <= env

    # Deleted, the pod's replacement gets a claim of its own; the old claim goes.
    control_plane.kubectl("delete", "pod", name, "-n", ns, "--grace-period=0", "--force",
                          "--wait=false")
    replacement = wait_for(lambda: (p := bound_pod()) and p["metadata"]["name"] != name and p,
                           timeout=120, what="the replacement pod bound")
    statuses = json.loads(replacement["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])
    assert statuses["extended-resources"] != claim_name
    wait_for(lambda: control_plane.kubectl("get", CLAIMS, claim_name, "-n", ns,
                                           check=False).returncode != 0,
             timeout=60, what="the first pod's claim deleted")


def _create(plane: ControlPlane, obj: dict[str, Any]) -> Any:
    return plane.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj), check=False)


@pytest.mark.parametrize(("resources", "words"), [
    (({}, {RESOURCE: "1"}), "an extended resource needs a limit"),
    (({RESOURCE: "2"}, {RESOURCE: "1"}), "cannot be overcommitted"),
    (({RESOURCE: "1G"}, None), "asks for 1000000000 devices"),
    (({RESOURCE: "1500m"}, None), "must be a whole number of devices"),
], ids=["request-only", "request-below-limit", "a-billion", "fraction"])
def test_wrong_requests_denied(
        control_plane: ControlPlane, operator: KdraProcess, ns: str,
        resources: tuple[dict[str, str], dict[str, str] | None], words: str) -> None:
    limits, requests = resources
    result = _create(control_plane, bare_pod("wrong", ns, container(limits, requests)))
    assert result.returncode != 0, result.stdout[:500]
    print(f"\n[{words}] {result.stderr.strip()}")
    assert words in result.stderr
    assert "spec.containers[0].resources" in result.stderr


def test_a_name_no_class_serves_is_left_alone(control_plane: ControlPlane,
                                              operator: KdraProcess, ns: str) -> None:
    result = _create(control_plane, bare_pod("plugin", ns,
                                             container({"example.com/fpga": "1"})))
    assert result.returncode == 0, result.stderr
    pod = json.loads(result.stdout)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"example.com/fpga": "1"}
    assert CLAIMS_ANNOTATION not in (pod["metadata"].get("annotations") or {})
    assert pod["spec"].get("schedulerName") == "default-scheduler"


def test_the_implicit_name_and_a_claims_annotation_together(
        control_plane: ControlPlane, operator: KdraProcess, ns: str) -> None:
    """``deviceclass.resource.kdra.dev/<class>`` is served by every class; the user's own
    entries stay as written, the extended entry is appended; init containers count first
    in the request names."""
    implicit = f"deviceclass.resource.kdra.dev/{CLASS}"
    obj = bare_pod("both", ns, container({implicit: "1"}))
    obj["spec"]["initContainers"] = [container({RESOURCE: "1"}, name="setup")]
    user_text = "- name: mine\n  resourceClaimName: some-claim\n"
    obj["metadata"]["annotations"] = {CLAIMS_ANNOTATION: user_text}
    result = _create(control_plane, obj)
    assert result.returncode == 0, result.stderr
    pod = json.loads(result.stdout)
    text = pod["metadata"]["annotations"][CLAIMS_ANNOTATION]
    assert text.startswith(user_text)
    entries = yaml.safe_load(text)
    assert entries[0] == {"name": "mine", "resourceClaimName": "some-claim"}
    assert entries[1]["extendedResources"] == [
        {"request": "container-0-request-0", "container": "setup", "resource": RESOURCE,
         "deviceClassName": CLASS, "count": 1},
        {"request": "container-1-request-0", "container": "main", "resource": implicit,
         "deviceClassName": CLASS, "count": 1}]
    assert pod["spec"]["initContainers"][0]["resources"].get("limits", {}) == {}
    assert pod["spec"]["containers"][0]["resources"].get("limits", {}) == {}
