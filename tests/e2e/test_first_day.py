"""A user's first day (issue 41), end to end: real API server, operator (binder, claim
controller, webhooks) and a node agent with two H100s — the answers that used to be wrong or
missing.

- Silent misses: a typo'd claims key and ``spec.resourceClaims`` get an admission warning
  (kubectl prints it) and a Warning event; a pod naming a claim that does not exist gets
  ``PodScheduled=False`` with a reason, a transition time and an event.
- A CEL selector that fails at run time names the missing key, what the device has and what
  was meant; the message is worded as kube-scheduler's (``0/N nodes are available: ...``).
- ``kubectl kdra why`` agrees with the binder under a DeviceQuota, and names a template missing
  from the pod's namespace as missing.

The cluster's other tests' nodes count in ``N``; messages are matched on their own parts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import AgentFactory, unique
from tests.e2e.conftest import get_json
from tests.e2e.procs import wait_for
from tests.e2e.test_binder import apply, events, gpu_class, gpu_pod, kdra, template

agents = agent_helpers.agents  # the node-agent fixture
__all__ = ["agents", "kdra"]  # fixtures used by name
GPU = "gpu.kdra.dev"
PLUGIN = Path(sys.executable).parent / "kubectl-kdra"


def scheduled(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    pod = get_json(plane, "pod", name, "-n", namespace)
    return next((c for c in pod.get("status", {}).get("conditions") or ()
                 if c.get("type") == "PodScheduled"), {})


def create(plane: ControlPlane, obj: dict[str, Any]) -> str:
    """``kubectl create`` as a user does; returns what kubectl printed on stderr (warnings)."""
    return str(plane.kubectl("create", "-f", "-", input=json.dumps(obj)).stderr)


def event(plane: ControlPlane, namespace: str, name: str, reason: str) -> str:
    return str(wait_for(lambda: events(plane, namespace, name, reason), timeout=60,
                        what=f"a {reason} event on {namespace}/{name}")[-1])


def why(plane: ControlPlane, namespace: str, pod: str) -> dict[str, Any]:
    result = subprocess.run([str(PLUGIN), "why", pod, "-n", namespace, "-o", "json",
                             "--kubeconfig", str(plane.kubeconfig)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "NO_COLOR": "1"})
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


def plain_pod(name: str, namespace: str, annotations: dict[str, str] | None = None,
              resource_claims: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main",
                                            "image": "registry.k8s.io/pause:3.10"}]}
    if resource_claims:
        spec["resourceClaims"] = resource_claims
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "annotations": annotations or {}}, "spec": spec}


def test_silent_misses_are_said(control_plane: ControlPlane, agents: AgentFactory, kdra: Any,
                                namespace: str) -> None:
    node = unique("first-day")
    agents(node, "gpus: ['2 x H100-80GB']\n")
    kdra(webhooks=True)
    apply(control_plane, gpu_class())

    # A typo in the claims key: a warning at admission, and an event (a Deployment's pods are
    # created by its controller, which drops warnings).
    typo = plain_pod("typo", namespace, {"resource.kdra.dev/claim": yaml.safe_dump(
        [{"name": "gpu", "resourceClaimName": "x"}])})
    said = create(control_plane, typo)
    print(f"\n[typo'd key, kubectl] {said.strip()}")
    assert ("Warning: metadata.annotations['resource.kdra.dev/claim'] is not an annotation "
            "kdra reads: did you mean 'resource.kdra.dev/claims'?") in said
    message = event(control_plane, namespace, "typo", "UnknownKdraAnnotation")
    assert "did you mean 'resource.kdra.dev/claims'?" in message

    # spec.resourceClaims in the resource.kdra.dev flavour: the same.
    native = plain_pod("native", namespace,
                       resource_claims=[{"name": "gpu", "resourceClaimName": "x"}])
    said = create(control_plane, native)
    print(f"[spec.resourceClaims, kubectl] {said.strip()}")
    assert "Warning: spec.resourceClaims ('gpu') is not served by kdra's resource.kdra.dev " \
           "flavour" in said
    assert "resource.kdra.dev/claims" in event(control_plane, namespace, "native",
                                               "ResourceClaimsNotServed")

    # A pod naming a claim that does not exist: PodScheduled=False with a reason, a transition
    # time and an event — then it binds once the claim is created.
    create(control_plane, gpu_pod("early", namespace,
                                  [{"name": "gpu", "resourceClaimName": "later"}]))
    condition = wait_for(lambda: scheduled(control_plane, namespace, "early"), timeout=60,
                         what="PodScheduled on the pod naming a missing claim")
    print(f"[missing claim] {condition}")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["lastTransitionTime"]  # was null before issue 41
    assert condition["message"].endswith(
        ' nodes are available: resourceclaim.resource.kdra.dev "later" not found (entry '
        '"gpu"): the pod waits until it is created.')
    assert condition["message"].startswith("0/")
    assert condition["message"] in event(control_plane, namespace, "early", "FailedScheduling")
    apply(control_plane, {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
                          "metadata": {"name": "later", "namespace": namespace},
                          "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                              "deviceClassName": GPU}}]}}})
    wait_for(lambda: get_json(control_plane, "pod", "early", "-n", namespace)["spec"].get(
        "nodeName"), timeout=60, what="the pod bound once its claim exists")

    # A selector naming an attribute the devices do not have: the message says which, what
    # they have and what was meant, worded as kube-scheduler's.
    apply(control_plane, template("typo-attr", namespace, [{
        "name": "gpu", "deviceClassName": GPU, "selectors": [{"cel": {
            "expression": f'device.attributes["{GPU}"].prodName == "H100"'}}]}]))
    apply(control_plane, gpu_pod("cel", namespace,
                                 [{"name": "gpu", "resourceClaimTemplateName": "typo-attr"}]))
    message = event(control_plane, namespace, "cel", "FailedScheduling")
    print(f"[CEL at run time] {message}")
    assert message.startswith("0/") and " nodes are available: " in message
    assert message.endswith(".")
    assert "fails at run time: no such key: 'prodName' (the map has " in message
    assert "did you mean 'productName'?" in message


def test_why_agrees_with_the_binder(control_plane: ControlPlane, agents: AgentFactory,
                                    kdra: Any, namespace: str) -> None:
    node = unique("first-day-why")
    agents(node, "gpus: ['2 x H100-80GB']\n")
    kdra()
    one_gpu = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    apply(control_plane, gpu_class(), template("one-gpu", namespace, [
        {"name": "gpu", "deviceClassName": GPU}]),
          {"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
           "metadata": {"name": "gpus", "namespace": namespace},
           "spec": {"limits": [{"deviceClassName": GPU, "devices": 1}]}})
    apply(control_plane, gpu_pod("first", namespace, one_gpu))
    wait_for(lambda: get_json(control_plane, "pod", "first", "-n", namespace)["spec"].get(
        "nodeName"), timeout=60, what="the first pod bound")
    apply(control_plane, gpu_pod("second", namespace, one_gpu))
    condition = wait_for(lambda: (c := scheduled(control_plane, namespace, "second")).get(
        "reason") == "DeviceQuotaExceeded" and c, timeout=60,
                         what="the second pod held back by the quota")

    # The second GPU is free (the pod fits on the node), but the quota refuses it: why says
    # what the binder says, not "Fits now on 1 node(s)".
    answer = why(control_plane, namespace, "second")
    print(f"\n[why under a quota] {answer['summary']}")
    assert answer["verdict"] == "over-quota", answer
    assert answer["summary"] == f"{condition['message']} (DeviceQuotaExceeded)"
    assert answer["fits"] == []
    assert any(h.startswith("DeviceQuotaExceeded: ") for h in answer["hints"])

    # A template that is not in the pod's namespace: named missing, not "not created yet".
    apply(control_plane, gpu_pod("lost", namespace,
                                 [{"name": "gpu", "resourceClaimTemplateName": "nowhere"}]))
    answer = why(control_plane, namespace, "lost")
    print(f"[why, missing template] {answer['summary']}")
    assert answer["verdict"] == "waiting"
    assert answer["claims"][0]["problem"] == (
        f"template 'nowhere' does not exist in namespace {namespace}: create it there (the "
        "claim controller then creates the pod's claim from it)")
