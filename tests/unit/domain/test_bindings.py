"""Which pods kdra's operator may bind (kdra.domain.bindings): the webhook's decision."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.domain.bindings import binding_decision, is_binding

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
