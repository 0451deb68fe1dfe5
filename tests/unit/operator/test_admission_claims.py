"""Admission decisions for kdra's own objects (kdra.operator.core.admission), table-driven, without
a cluster: ResourceClaims, ResourceClaimTemplates and DeviceClasses, the review wire form and its
dispatch, the v1 specifics and hostile claim input. Pods: test_admission_pods.py."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from kdra.dra.errors import InvalidObject
from kdra.operator.core.admission import (
    MAX_OPAQUE_PARAMETERS_BYTES,
    FieldError,
    claim_errors,
    class_errors,
    review,
    template_errors,
    validate,
)
from tests.unit.operator.admission_helpers import API, request_for

GOOD_CEL = 'device.driver == "gpu.kdra.dev"'


# --------------------------------------------------------------------------- builders


def req(name: str = "gpu", cel: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": "gpu.kdra.dev", **extra}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in cel]
    return {"name": name, "exactly": exactly}


def claim(*requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "default"},
            "spec": {"devices": {"requests": list(requests) or [req()], **devices}}}


def template(*requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaimTemplate",
            "metadata": {"name": "t", "namespace": "default"},
            "spec": {"spec": claim(*requests, **devices)["spec"]}}


def device_class(*cel: str, config: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in cel]}
    if config is not None:
        spec["config"] = config
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": "gpu.kdra.dev"},
            "spec": spec}


def opaque(size: int) -> dict[str, Any]:
    """An opaque config whose parameters' JSON is exactly ``size`` bytes."""
    overhead = len(json.dumps({"x": ""}, separators=(",", ":")))
    return {"opaque": {"driver": "gpu.kdra.dev", "parameters": {"x": "a" * (size - overhead)}}}


# --------------------------------------------------------------------------- kdra objects

Check = Callable[..., list[FieldError]]

# (id, check, object, expected field or None when valid, words in the message)
OBJECT_CASES: list[tuple[str, Check, dict[str, Any], str | None, str]] = [
    ("claim-valid", claim_errors, claim(req(cel=(GOOD_CEL,))), None, ""),
    ("claim-no-selectors", claim_errors, claim(), None, ""),
    ("claim-cel-syntax", claim_errors, claim(req(cel=("device.driver ==",))),
     "spec.devices.requests[0].exactly.selectors[0].cel.expression", "syntax error"),
    ("claim-cel-second-selector-of-second-request", claim_errors,
     claim(req("a"), req("b", cel=(GOOD_CEL, "device.nope"))),
     "spec.devices.requests[1].exactly.selectors[1].cel.expression", "undefined field 'nope'"),
    ("claim-cel-unknown-function", claim_errors, claim(req(cel=("nosuch(1)",))),
     "spec.devices.requests[0].exactly.selectors[0].cel.expression", "undeclared reference"),
    ("claim-cel-names-expression", claim_errors, claim(req(cel=("device.driver ==",))),
     "spec.devices.requests[0].exactly.selectors[0].cel.expression",
     "(expression: device.driver ==)"),
    ("claim-cel-too-long", claim_errors, claim(req(cel=("true || " * 1500 + "true",))),
     "spec.devices.requests[0].exactly.selectors[0].cel.expression", "longer than 10240 bytes"),
    ("claim-constraint-unknown-request", claim_errors,
     claim(req(), constraints=[{"requests": ["nope"], "matchAttribute": "gpu.kdra.dev/x"}]),
     "spec.devices", "constraints[0].requests names unknown request(s) nope"),
    ("claim-config-unknown-request", claim_errors,
     claim(req(), config=[{"requests": ["nope"], **opaque(20)}]),
     "spec.devices", "config[0].requests names unknown request(s) nope"),
    ("claim-count-zero", claim_errors, claim(req(count=0)), "spec.devices.requests[0].exactly",
     "count must be greater than zero"),
    ("claim-first-available-cel", claim_errors, claim({"name": "gpu", "firstAvailable": [
        {"name": "a", "deviceClassName": "gpu.kdra.dev"},
        {"name": "b", "deviceClassName": "gpu.kdra.dev", "selectors": [
            {"cel": {"expression": "device.nope"}}]}]}),
     "spec.devices.requests[0].firstAvailable[1].selectors[0].cel.expression",
     "undefined field 'nope'"),
    ("claim-too-many-devices-smallest-alternative", claim_errors, claim(
        req("a", count=30), {"name": "b", "firstAvailable": [
            {"name": "x", "deviceClassName": "gpu.kdra.dev", "count": 5},
            {"name": "y", "deviceClassName": "gpu.kdra.dev", "count": 3}]}),
     "spec.devices.requests", "ask for 33 devices in total"),
    ("claim-33-requests", claim_errors, claim(*(req(f"r{i}") for i in range(33))),
     "spec.devices.requests", "at most 32"),
    ("claim-too-many-devices", claim_errors, claim(req("a", count=20), req("b", count=13)),
     "spec.devices.requests", "ask for 33 devices in total"),
    ("claim-32-devices-is-fine", claim_errors, claim(req("a", count=20), req("b", count=12)),
     None, ""),
    ("claim-parameters-too-big", claim_errors,
     claim(req(), config=[opaque(MAX_OPAQUE_PARAMETERS_BYTES + 1)]),
     "spec.devices.config[0].opaque.parameters", "at most 10240 bytes"),
    ("claim-parameters-at-limit", claim_errors,
     claim(req(), config=[opaque(MAX_OPAQUE_PARAMETERS_BYTES)]), None, ""),
    ("template-valid", template_errors, template(req(cel=(GOOD_CEL,))), None, ""),
    ("template-cel-syntax", template_errors, template(req(cel=("(",))),
     "spec.spec.devices.requests[0].exactly.selectors[0].cel.expression", "syntax error"),
    ("template-duplicate-requests", template_errors, template(req("a"), req("a")),
     "spec.spec.devices", "duplicate request names: a"),
    ("class-valid", class_errors, device_class(GOOD_CEL), None, ""),
    ("class-empty", class_errors, device_class(), None, ""),
    ("class-cel-syntax", class_errors, device_class(GOOD_CEL, "device.attributes[",),
     "spec.selectors[1].cel.expression", "syntax error"),
    ("class-parameters-too-big", class_errors,
     device_class(config=[opaque(MAX_OPAQUE_PARAMETERS_BYTES + 1)]),
     "spec.config[0].opaque.parameters", "at most 10240 bytes"),
    ("class-33-selectors", class_errors, device_class(*[GOOD_CEL] * 33), "spec.selectors",
     "at most 32"),
]


@pytest.mark.parametrize(("check", "obj", "field", "words"),
                         [c[1:] for c in OBJECT_CASES], ids=[c[0] for c in OBJECT_CASES])
def test_object_validation(check: Check, obj: dict[str, Any], field: str | None,
                           words: str) -> None:
    errors = check(obj)
    if field is None:
        assert errors == []
        return
    assert errors, "expected a rejection"
    assert errors[0].field == field, errors
    assert words in errors[0].message, errors


def test_every_bad_selector_is_reported_at_once() -> None:
    errors = claim_errors(claim(req("a", cel=("(",)), req("b", cel=(GOOD_CEL, "x.y"))))
    assert [e.field for e in errors] == [
        "spec.devices.requests[0].exactly.selectors[0].cel.expression",
        "spec.devices.requests[1].exactly.selectors[1].cel.expression",
    ]
    response = validate(request_for(claim(req("a", cel=("(",)), req("b", cel=("x.y",)))))
    assert response.message.count("; ") == 1


# --------------------------------------------------------------------------- dispatch


def test_validate_denies_with_the_field_and_status() -> None:
    response = validate(request_for(claim(req(cel=("device.driver ==",)))))
    assert not response.allowed
    wire = response.to_review()
    assert wire["apiVersion"] == "admission.k8s.io/v1"
    assert wire["kind"] == "AdmissionReview"
    body = wire["response"]
    assert body["uid"] == "u-1" and body["allowed"] is False
    assert body["status"]["code"] == 422 and body["status"]["reason"] == "Invalid"
    assert body["status"]["message"].startswith(
        "spec.devices.requests[0].exactly.selectors[0].cel.expression: 1:15: syntax error")
    assert body["status"]["details"]["causes"][0]["field"] == \
        "spec.devices.requests[0].exactly.selectors[0].cel.expression"
    assert "patch" not in body


@pytest.mark.parametrize(("obj", "operation", "old", "allowed"), [
    (claim(req(cel=("(",))), "DELETE", None, True),
    (claim(req(cel=("(",))), "CONNECT", None, True),
    ({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}, "CREATE",
     None, True),
    (claim(req(cel=("(",))), "UPDATE", claim(req(cel=("(",))), True),  # spec unchanged
    # A class stored before a rule tightened: unchanged selectors are not re-checked ...
    (device_class("(", GOOD_CEL), "UPDATE", device_class("("), True),
    # ... but a new bad one is.
    (device_class("(", "x.y"), "UPDATE", device_class("("), False),
    (device_class("("), "CREATE", None, False),
], ids=["delete", "connect", "other-kind", "unchanged-spec", "ratchet-kept-selector",
        "ratchet-new-selector", "class-create"])
def test_validate_dispatch(obj: dict[str, Any], operation: str, old: dict[str, Any] | None,
                           allowed: bool) -> None:
    assert validate(request_for(obj, operation, old)).allowed is allowed


@pytest.mark.parametrize(("body", "field"), [
    ([], "<root>"),
    ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
      "request": {"uid": "x"}}, "apiVersion"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "request.uid"),
])
def test_review_rejects_malformed_reviews(body: Any, field: str) -> None:
    with pytest.raises(InvalidObject) as info:
        review(body, validate)
    assert info.value.field == field


def test_review_round_trip() -> None:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": request_for(claim())}
    assert review(body, validate) == {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": "u-1", "allowed": True}}


# --------------------------------------------------------------------------- v1 specifics


def test_admin_access_needs_the_namespace_label() -> None:
    admin = claim(req(adminAccess=True))
    denied = validate(request_for(admin), namespace_labels={"team": "a"})
    assert not denied.allowed
    assert denied.errors[0].field == "spec.devices.requests[].exactly.adminAccess"
    assert "resource.kdra.dev/admin-access=true" in denied.errors[0].message
    assert "kubectl label namespace default" in denied.errors[0].message
    unread = validate(request_for(admin), namespace_labels=None)
    assert not unread.allowed and "could not be read" in unread.message
    allowed = validate(request_for(admin),
                       namespace_labels={"resource.kdra.dev/admin-access": "true"})
    assert allowed.allowed
    plain = validate(request_for(claim(req())), namespace_labels=None)
    assert plain.allowed, "without admin access the namespace is not needed"


def test_admin_access_rule_covers_templates() -> None:
    response = validate(request_for(template(req(adminAccess=True))), namespace_labels={})
    assert response.errors[0].field == "spec.spec.devices.requests[].exactly.adminAccess"


def test_capacity_requests_are_supported_and_checked() -> None:
    """Issue 26: capacity requests are acted upon (they used to draw a "not supported yet"
    warning); an amount that is not a non-negative quantity is refused naming the entry."""
    response = validate(request_for(claim(req(capacity={"requests": {"memory": "1Gi"}}))))
    assert response.allowed and response.warnings == ()
    response = validate(request_for(claim(req(capacity={"requests": {"memory": "-1Gi"}}))))
    assert not response.allowed
    assert [(e.field, e.message) for e in response.errors] == [
        ("spec.devices.requests[0].exactly.capacity.requests[memory]",
         "-1Gi is negative; write a non-negative quantity such as 20Gi")]


def test_tolerations_are_supported_and_admitted_without_warning() -> None:
    """Issue 25: tolerations are acted upon (they used to draw the warning above)."""
    obj = claim(req(tolerations=[{"key": "k", "operator": "Exists"}]))
    response = validate(request_for(obj))
    assert response.allowed and response.warnings == ()


def test_a_user_of_v1alpha3_sees_v1alpha3_field_paths() -> None:
    request = request_for(claim(req(cel=("(",))))
    request["requestKind"] = {"group": "resource.kdra.dev", "version": "v1alpha3",
                              "kind": "ResourceClaim"}
    response = validate(request)
    assert response.errors[0].field == "spec.devices.requests[0].selectors[0].cel.expression"


# --------------------------------------------------------------------------- claims: hostile input


def test_deep_parameters_are_denied_without_recursion() -> None:
    deep: Any = {}
    for _ in range(5000):
        deep = {"x": deep}
    obj = claim(config=[{"opaque": {"driver": "gpu.kdra.dev", "parameters": deep}}])
    response = validate(request_for(obj))
    assert not response.allowed and response.errors[0].field == "spec"
    shallow: Any = {}
    for _ in range(33):
        shallow = {"x": shallow}
    obj = claim(config=[{"opaque": {"driver": "gpu.kdra.dev", "parameters": shallow}}])
    (error,) = validate(request_for(obj)).errors
    assert error.field == "spec.devices.config[0].opaque.parameters"
    assert "at most 32 levels" in error.message


def test_an_undecodable_review_is_denied_by_uid() -> None:
    from kdra.operator.core.admission import undecodable

    wire = undecodable("u-9", "depth limit exceeded").to_review()["response"]
    assert wire["uid"] == "u-9" and wire["allowed"] is False
    assert "cannot be decoded" in wire["status"]["message"]
