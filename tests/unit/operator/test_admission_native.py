"""Admission in the native flavour (issue 38): the mutating webhook gives pods with
``spec.resourceClaims`` kdra-scheduler where configured (no env: the kubelet gives
containers their devices), a pod being created may not name another pod's generated claim,
the operator evicts only pods with claims, and the webhook configurations say so."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kdra.kube.core.flavours import KDRA, NATIVE
from kdra.operator.core.admission import mutate_pod, validate
from kdra.operator.core.bindings import binding_decision
from kdra.operator.core.pod_notices import RESOURCE_CLAIMS_REASON, UNKNOWN_KEY_REASON, pod_notices
from kdra.operator.core.webhook_configs import (
    ADVISE_WEBHOOK,
    NATIVE_SCHEDULER_CONDITION,
    SCHEDULER_LABEL,
    Endpoint,
    mutating_configuration,
    validating_configuration,
)
from tests.unit.operator.admission_helpers import request_for


def native_pod(scheduler: str | None = None, *, claims: list[dict[str, str]] | None = None
               ) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": claims if claims is not None else [
            {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def patch_of(answer: Any) -> list[dict[str, Any]]:
    review = answer.to_review()["response"]
    return json.loads(base64.b64decode(review["patch"])) if "patch" in review else []


@pytest.mark.parametrize(("scheduler", "expected"), [
    (None, [{"op": "add", "path": "/spec/schedulerName", "value": "kdra-scheduler"}]),
    ("default-scheduler", [{"op": "replace", "path": "/spec/schedulerName",
                            "value": "kdra-scheduler"}]),
    ("kdra-scheduler", []),
    ("volcano", []),  # a scheduler of the pod's own: kept, and no warning (upstream's own)
])
def test_a_native_pod_with_claims_gets_kdra_scheduler_and_nothing_else(
        scheduler: str | None, expected: list[dict[str, Any]]) -> None:
    answer = mutate_pod(request_for(native_pod(scheduler)), flavour=NATIVE)
    assert answer.allowed and not answer.warnings
    assert patch_of(answer) == expected  # no env: the kubelet and CDI give the devices
    no_claims = native_pod(claims=[])
    assert patch_of(mutate_pod(request_for(no_claims), flavour=NATIVE)) == []


FOREIGN = {"gpu": ("victim-gpu-abcde", "victim")}


def test_a_pod_naming_another_pods_generated_claim_is_denied() -> None:
    thief = native_pod(claims=[{"name": "gpu", "resourceClaimName": "victim-gpu-abcde"}])
    for answer in (mutate_pod(request_for(thief), foreign_claims=FOREIGN, flavour=NATIVE),
                   validate(request_for(thief), flavour=NATIVE, foreign_claims=FOREIGN)):
        assert not answer.allowed
        assert answer.message == (
            "spec.resourceClaims[0].resourceClaimName: claim 'victim-gpu-abcde' was "
            "generated for pod 'victim' and serves only that pod; name a claim of this pod's "
            "own, or a resourceClaimTemplateName")
    # Only at creation, and only the entry that names it.
    other = native_pod(claims=[{"name": "gpu", "resourceClaimName": "mine"}])
    assert validate(request_for(other), flavour=NATIVE, foreign_claims=FOREIGN).allowed
    assert validate(request_for(thief, "UPDATE", thief), flavour=NATIVE,
                    foreign_claims=FOREIGN).allowed


def test_the_operator_evicts_only_pods_with_claims_of_its_flavour() -> None:
    eviction = {"uid": "u", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
                "subResource": "eviction"}
    assert binding_decision(eviction, native_pod(), NATIVE).allowed
    assert not binding_decision(eviction, native_pod(), KDRA).allowed
    plain = native_pod(claims=[])
    denied = binding_decision(eviction, plain, NATIVE)
    assert denied.message == ("spec.resourceClaims: kdra's operator evicts only pods that ask "
                              "for claims (spec.resourceClaims), not pod ns/p")


def hooks(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in config["webhooks"]}


def test_the_native_webhook_configurations() -> None:
    endpoint = Endpoint(namespace="kdra-system")
    labelled = hooks(mutating_configuration(endpoint, None, NATIVE, "namespaces"))
    (mutate,) = labelled.values()
    assert mutate["matchConditions"] == [{"name": "claims-without-scheduler",
                                          "expression": NATIVE_SCHEDULER_CONDITION}]
    assert mutate["namespaceSelector"]["matchLabels"] == {SCHEDULER_LABEL: "kdra-scheduler"}
    everywhere = hooks(mutating_configuration(endpoint, None, NATIVE, "all"))
    assert "matchLabels" not in next(iter(everywhere.values()))["namespaceSelector"]
    assert mutating_configuration(endpoint, None, NATIVE, "none")["webhooks"] == []
    with pytest.raises(ValueError, match="not one of all, namespaces, none"):
        mutating_configuration(endpoint, None, NATIVE, "some")
    native = hooks(validating_configuration(endpoint, None, flavour=NATIVE))
    kdra = hooks(validating_configuration(endpoint, None))
    assert set(native) == {"validate-pods.resource.kdra.dev", "protect-pods.resource.kdra.dev",
                           "validate-claim-pods.resource.kdra.dev",
                           "validate-bindings.resource.kdra.dev",
                           "advise-dra-objects.resource.kdra.dev"}
    # kdra's kinds are checked in the kdra flavour only (upstream's API server validates its own).
    assert "validate.resource.kdra.dev" in kdra and "validate.resource.kdra.dev" not in native
    claim_pods = native["validate-claim-pods.resource.kdra.dev"]
    assert claim_pods["rules"][0]["operations"] == ["CREATE"]
    assert "resourceClaimName" in claim_pods["matchConditions"][0]["expression"]


def test_spec_resource_claims_are_no_notice_where_the_flavour_reads_them() -> None:
    """Issue 41's notice (claims kdra would not see) is for the kdra flavour: the native one
    reads spec.resourceClaims; a mistyped kdra annotation is still said in both."""
    pod = native_pod()
    assert [n.reason for n in pod_notices(pod, KDRA)] == [RESOURCE_CLAIMS_REASON]
    assert pod_notices(pod, NATIVE) == []
    pod["metadata"]["annotations"] = {"resource.kdra.dev/placement-polcy": "spread"}
    native = pod_notices(pod, NATIVE)
    assert [n.reason for n in native] == [UNKNOWN_KEY_REASON]
    assert "only for pods with" not in native[0].message  # its claims are in the spec


def native_claim(expression: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.example.com",
                "selectors": [{"cel": {"expression": expression}}]}}]}}}


def test_built_in_objects_kdra_scheduler_cannot_serve_get_warnings_never_a_denial() -> None:
    fine = native_claim('device.driver == "gpu.example.com"')
    answer = validate(request_for(fine), flavour=NATIVE)
    assert answer.allowed and not answer.warnings
    broken = native_claim("device.driver.nosuchfunction()")
    answer = validate(request_for(broken), flavour=NATIVE)
    assert answer.allowed
    (warning,) = answer.warnings
    assert warning.startswith("kdra-scheduler cannot serve this ResourceClaim as written: "
                              "spec.devices.requests[0].exactly.selectors[0].cel.expression")
    # The same object in kdra's group is kdra's own kind: refused there.
    own = {**broken, "apiVersion": "resource.kdra.dev/v1"}
    assert not validate(request_for(own), flavour=KDRA).allowed
    # In the kdra flavour the built-in kinds are none of kdra's business; nor is an update
    # that leaves the spec alone, nor a status write.
    assert validate(request_for(broken), flavour=KDRA).to_review()["response"] == {
        "uid": "u-1", "allowed": True}
    assert not validate(request_for(broken, "UPDATE", broken), flavour=NATIVE).warnings
    status = {**request_for(broken), "subResource": "status"}
    assert not validate(status, flavour=NATIVE).warnings


def test_the_advice_webhook_fails_open_and_skips_kdras_own_writes() -> None:
    config = validating_configuration(Endpoint(), None, flavour=NATIVE)
    (advise,) = [w for w in config["webhooks"] if w["name"] == ADVISE_WEBHOOK]
    assert advise["failurePolicy"] == "Ignore"
    assert {g for r in advise["rules"] for g in r["apiGroups"]} == {"resource.k8s.io"}
    assert [c["name"] for c in advise["matchConditions"]] == ["spec-changed", "not-kdra"]
    kdra = validating_configuration(Endpoint(), None, flavour=KDRA)
    assert ADVISE_WEBHOOK not in [w["name"] for w in kdra["webhooks"]]
