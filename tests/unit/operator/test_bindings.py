"""Which pods kdra's operator may bind (kdra.operator.core.bindings): the webhook's decision."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.operator.core.bindings import binding_decision, is_binding, is_eviction

REQUEST = {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Binding"},
           "resource": {"group": "", "version": "v1", "resource": "pods"},
           "subResource": "binding", "namespace": "kube-system", "name": "victim",
           "operation": "CREATE",
           "object": {"apiVersion": "v1", "kind": "Binding",
                      "metadata": {"name": "victim", "namespace": "kube-system"},
                      "target": {"kind": "Node", "name": "attacker-node"}}}


def pod(scheduler: str | None) -> dict[str, Any]:
    spec = {"containers": [{"name": "c"}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"metadata": {"name": "victim", "namespace": "kube-system"}, "spec": spec}


@pytest.mark.parametrize(("scheduler", "allowed", "says"), [
    ("kdra-scheduler", True, ""),
    (None, False, "has 'default-scheduler'"),
    ("default-scheduler", False, "has 'default-scheduler'"),
    ("my-scheduler", False, "has 'my-scheduler'"),
])
def test_only_kdra_scheduler_pods(scheduler: str | None, allowed: bool, says: str) -> None:
    answer = binding_decision(REQUEST, pod(scheduler))
    assert answer.allowed is allowed
    assert answer.uid == "u1"
    if not allowed:
        assert answer.message == (
            "spec.schedulerName: kdra's operator binds only pods with schedulerName "
            f"kdra-scheduler; pod kube-system/victim {says}")
        review = answer.to_review()["response"]
        assert review["allowed"] is False and review["status"]["code"] == 422


def test_a_pod_that_does_not_exist_is_left_to_the_api_server() -> None:
    assert binding_decision(REQUEST, None).allowed


@pytest.mark.parametrize(("request_", "expected"), [
    (REQUEST, True),
    ({**REQUEST, "subResource": ""}, False),
    ({**REQUEST, "kind": {"group": "", "kind": "Pod"}}, False),
    ({**REQUEST, "kind": "Binding"}, False),
])
def test_is_binding(request_: dict[str, Any], expected: bool) -> None:
    assert is_binding(request_) is expected


EVICTION = {"uid": "u2", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction", "namespace": "kube-system", "name": "victim",
            "operation": "CREATE",
            "object": {"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": "victim", "namespace": "kube-system"}}}


@pytest.mark.parametrize(("annotations", "allowed"), [
    ({"resource.kdra.dev/claims": "[]"}, True),
    ({}, False),
    (None, False),
    ({"resource.kdra.dev/claim-statuses": "{}"}, False),
])
def test_only_pods_with_claims_are_evicted(annotations: dict[str, str] | None,
                                           allowed: bool) -> None:
    """Issue 36: the operator's token evicted any pod, kube-system's too. Taint eviction and
    preemption evict only pods that hold kdra's devices: pods that ask for claims."""
    victim = pod(None)
    if annotations is not None:
        victim["metadata"]["annotations"] = annotations
    answer = binding_decision(EVICTION, victim)
    assert answer.allowed is allowed and answer.uid == "u2"
    if not allowed:
        assert answer.message == (
            "metadata.annotations[resource.kdra.dev/claims]: kdra's operator evicts only pods "
            "that ask for claims (resource.kdra.dev/claims), not pod kube-system/victim")
    assert binding_decision(EVICTION, None).allowed  # gone: the API server answers 404


@pytest.mark.parametrize(("request_", "expected"), [
    (EVICTION, True),
    ({**EVICTION, "subResource": "status"}, False),
    ({**EVICTION, "kind": {"group": "", "kind": "Eviction"}}, False),
    (REQUEST, False),
])
def test_is_eviction(request_: dict[str, Any], expected: bool) -> None:
    assert is_eviction(request_) is expected
