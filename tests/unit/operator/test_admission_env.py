"""Issue 36, point 7: only kdra sets KDRA_DEVICES / NVIDIA_VISIBLE_DEVICES in the pods it
serves — in every container (regular, init, ephemeral), with or without claims — and a pod may
not name another pod's generated claim (kdra.operator.core.admission_env,
kdra.operator.core.admission)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kdra.operator.core.admission import mutate_pod, validate
from kdra.operator.core.admission_env import device_env_errors, device_env_warnings
from tests.unit.operator.admission_helpers import request_for
from tests.unit.operator.test_admission_pods import apply_patch, pod

ALL = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
TEMPLATE = [{"name": "gpu", "resourceClaimTemplateName": "t", "containers": ["main"]}]


def admitted(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the validating webhook sees it: after kdra's mutation."""
    return apply_patch(obj, list(mutate_pod(request_for(obj)).patch))


@pytest.mark.parametrize(("what", "obj", "field"), [
    ("an init container", pod(TEMPLATE, init=("setup",), env={"setup": ALL}),
     "spec.initContainers[0].env[0]"),
    ("a sidecar the claims do not name", pod(TEMPLATE, containers=("main", "side"),
                                             env={"side": ALL}),
     "spec.containers[1].env[0]"),
    ("a pod without claims that asks for kdra-scheduler",
     pod(None, scheduler="kdra-scheduler", env={"main": ALL}), "spec.containers[0].env[0]"),
    ("a consuming container", pod(TEMPLATE, env={"main": ALL}), "spec.containers[0].env[0]"),
    ("a GPU named by UUID", pod(TEMPLATE, containers=("main", "side"), env={"side": [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-1234"}]}),
     "spec.containers[1].env[0]"),
    ("from a ConfigMap key", pod(None, scheduler="kdra-scheduler", env={"main": [
        {"name": "NVIDIA_VISIBLE_DEVICES",
         "valueFrom": {"configMapKeyRef": {"name": "gpus", "key": "all"}}}]}),
     "spec.containers[0].env[0]"),
    ("KDRA_DEVICES", pod(TEMPLATE, init=("setup",), env={"setup": [
        {"name": "KDRA_DEVICES", "value": "gpu.kdra.dev/node/gpu-0"}]}),
     "spec.initContainers[0].env[0]"),
])
def test_device_variables_are_kdras_in_every_container(what: str, obj: dict[str, Any],
                                                       field: str) -> None:
    response = validate(request_for(admitted(obj)))
    assert not response.allowed, what
    assert [e.field for e in response.errors] == [field], response.message
    assert "is set by kdra" in response.message and "all" not in response.errors[0].field


@pytest.mark.parametrize("value", ["", "void", "none", " none "])
def test_values_that_grant_nothing_are_allowed_where_kdra_sets_nothing(value: str) -> None:
    obj = pod(TEMPLATE, containers=("main", "side"), init=("setup",),
              env={"side": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}],
                   "setup": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": value}]})
    assert validate(request_for(admitted(obj))).allowed


def test_ordinary_pods_are_none_of_kdras_business() -> None:
    # kube-scheduler's pod, no claims: the webhook's condition does not even send it.
    assert device_env_errors(pod(None, env={"main": ALL})) == []


def test_an_ephemeral_container_added_later_is_checked_and_old_ones_are_not() -> None:
    running = admitted(pod(TEMPLATE))
    debugged = copy.deepcopy(running)
    debugged["spec"]["ephemeralContainers"] = [
        {"name": "debugger", "image": "busybox", "env": ALL}]
    response = validate(request_for(debugged, "UPDATE", running))
    assert [e.field for e in response.errors] == ["spec.ephemeralContainers[0].env[0]"]
    # Another ephemeral container later: the first one (stored before the rule) is left alone.
    again = copy.deepcopy(debugged)
    again["spec"]["ephemeralContainers"].append({"name": "second", "image": "busybox"})
    assert validate(request_for(again, "UPDATE", debugged)).allowed
    # An ephemeral container never gets kdra's entry: it is no consumer.
    stolen = copy.deepcopy(running)
    stolen["spec"]["ephemeralContainers"] = [{"name": "main-copy", "image": "busybox",
                                              "env": running["spec"]["containers"][0]["env"]}]
    assert not validate(request_for(stolen, "UPDATE", running)).allowed


def test_env_from_that_could_set_them_is_warned_about() -> None:
    source = {"configMapRef": {"name": "gpu-settings"}}
    obj = admitted(pod(TEMPLATE, containers=("main", "side")))
    obj["spec"]["containers"][1]["envFrom"] = [source, {**source, "prefix": "APP_"},
                                              {**source, "prefix": "NVIDIA_"}]
    obj["spec"]["containers"][0]["envFrom"] = [source]  # kdra's env entry wins there
    response = validate(request_for(obj))
    assert response.allowed
    assert [w.split(":")[0] for w in response.warnings] == [
        "spec.containers[1].envFrom[0]", "spec.containers[1].envFrom[2]"]
    assert device_env_warnings(pod(None, env={"main": ALL})) == []


def test_a_generated_claim_of_another_pod_cannot_be_named() -> None:
    """resourceClaimName naming the claim generated for pod "victim": denied at creation
    (the webhook's claim lookup says whose claim it is)."""
    obj = pod([{"name": "gpu", "resourceClaimName": "victim-gpu-x7k2q"}])
    response = mutate_pod(request_for(obj),
                          foreign_claims={"gpu": ("victim-gpu-x7k2q", "victim")})
    assert not response.allowed
    assert response.errors[0].field == \
        "metadata.annotations[resource.kdra.dev/claims][0].resourceClaimName"
    assert "claim 'victim-gpu-x7k2q' was generated for pod 'victim' and serves only that pod" \
        in response.message
    assert mutate_pod(request_for(obj), foreign_claims={}).allowed
