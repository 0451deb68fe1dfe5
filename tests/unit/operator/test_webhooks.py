"""The webhook configurations (kdra.operator.core.webhook_configs) and their static copies in
manifests/."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.operator.core.pod_notices import NOTICE_POD_CONDITION
from kdra.operator.core.webhook_configs import (
    CRD_NAMES,
    MUTATE_POD_CONDITION,
    POD_MATCH_CONDITION,
    Endpoint,
    conversion,
    conversion_patch,
    mutating_configuration,
    service_dns_names,
    trusted_usernames,
    validating_configuration,
)

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests" / "webhooks"
PLACEHOLDER = b"\n"  # caBundle: Cg== in the static files


@pytest.mark.parametrize(("name", "build"), [
    ("mutating.yaml", mutating_configuration),
    ("validating.yaml", validating_configuration),
])
def test_static_manifests_match_what_the_operator_writes(name: str, build: Any) -> None:
    static = yaml.safe_load((MANIFESTS / name).read_text())
    assert static == build(Endpoint(), PLACEHOLDER)


def test_url_endpoint_and_ca_bundle() -> None:
    config = validating_configuration(Endpoint(url="https://127.0.0.1:9443/"), b"PEM")
    for webhook in config["webhooks"]:
        assert webhook["clientConfig"] == {"url": "https://127.0.0.1:9443/validate",
                                           "caBundle": base64.b64encode(b"PEM").decode()}
    mutating = mutating_configuration(Endpoint(url="https://h:1"), None)
    assert mutating["webhooks"][0]["clientConfig"] == {"url": "https://h:1/mutate-pods"}


def test_service_endpoint_follows_the_namespace() -> None:
    config = mutating_configuration(Endpoint(namespace="ops"), b"x")
    assert config["webhooks"][0]["clientConfig"]["service"] == {
        "namespace": "ops", "name": "kdra-webhook", "path": "/mutate-pods", "port": 443}
    assert service_dns_names("ops") == ("kdra-webhook", "kdra-webhook.ops",
                                        "kdra-webhook.ops.svc",
                                        "kdra-webhook.ops.svc.cluster.local")


def test_policies() -> None:
    webhooks = (mutating_configuration(Endpoint(), None)["webhooks"]
                + validating_configuration(Endpoint(), None)["webhooks"])
    assert {w["name"] for w in webhooks} == {"mutate-pods.resource.kdra.dev",
                                             "notice-pods.resource.kdra.dev",
                                             "validate-pods.resource.kdra.dev",
                                             "protect-pods.resource.kdra.dev",
                                             "validate.resource.kdra.dev",
                                             "validate-bindings.resource.kdra.dev",
                                             "validate-claim-status.resource.kdra.dev"}
    for webhook in webhooks:
        if webhook["name"] == "notice-pods.resource.kdra.dev":
            # Warnings only (issue 41): fails open, for pods no other kdra webhook gets.
            assert webhook["failurePolicy"] == "Ignore"
            assert webhook["matchConditions"] == [
                {"name": "not-served-by-mutate-pods",
                 "expression": f"!({MUTATE_POD_CONDITION})"},
                {"name": "claims-kdra-would-not-see", "expression": NOTICE_POD_CONDITION}]
            assert webhook["rules"][0]["operations"] == ["CREATE"]
            continue
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["sideEffects"] == "None"
        assert webhook["timeoutSeconds"] == 5
        assert webhook["admissionReviewVersions"] == ["v1"]
        if webhook["name"] == "mutate-pods.resource.kdra.dev":
            # Only pods with the annotation or an extended resource reach the webhook: an
            # outage never blocks others (the expression is evaluated by the real API server
            # in tests/e2e/test_extended.py).
            assert webhook["matchConditions"] == [{"name": "claims-or-extended-resources",
                                                   "expression": MUTATE_POD_CONDITION}]
            assert POD_MATCH_CONDITION in MUTATE_POD_CONDITION
            assert webhook["rules"][0]["operations"] == ["CREATE"]
        elif webhook["rules"][0]["resources"] == ["pods"]:
            # Creations and updates, but only those that write kdra's keys (matchConditions,
            # checked against the real API server in tests/e2e/test_hostile.py).
            assert webhook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
            assert webhook["matchConditions"]
            assert webhook["namespaceSelector"]["matchExpressions"][0]["values"] == [
                "kube-system"]


def test_kdra_own_identities_skip_the_protection_webhook() -> None:
    """The protect-pods webhook is not sent kdra's own writes (its claim-statuses patches),
    so they never wait for (or fail on) a webhook; the usernames follow the namespace."""
    def conditions(config: dict[str, Any]) -> dict[str, str]:
        (hook,) = [w for w in config["webhooks"] if w["name"].startswith("protect-pods")]
        return {c["name"]: c["expression"] for c in hook["matchConditions"]}

    default = conditions(validating_configuration(Endpoint(namespace="ops"), None))
    assert default["not-kdra"] == (
        '!(request.userInfo.username in ["system:serviceaccount:ops:kdra-operator"])')
    assert trusted_usernames("ops", ["admin", 'we"ird']) == (
        "admin", "system:serviceaccount:ops:kdra-operator", 'we"ird')
    custom = conditions(validating_configuration(Endpoint(), None, ["a", 'we"ird']))
    assert custom["not-kdra"] == '!(request.userInfo.username in ["a", "we\\"ird"])'


def test_only_the_operators_own_bindings_go_to_the_binding_webhook() -> None:
    webhook = next(w for w in validating_configuration(Endpoint(namespace="ops"), None)["webhooks"]
                   if w["name"] == "validate-bindings.resource.kdra.dev")
    assert webhook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"],
                                 "operations": ["CREATE"],
                                 "resources": ["pods/binding", "pods/eviction"],
                                 "scope": "Namespaced"}]
    assert webhook["matchConditions"] == [{
        "name": "is-kdra-operator",
        "expression": "request.userInfo.username == 'system:serviceaccount:ops:kdra-operator'"}]


def test_drivers_device_statuses_go_to_the_claim_status_webhook() -> None:
    """Issue 36: a node agent's device data is bounded by the webhook (no schema or policy
    can measure a free-form value); only changes of status.devices by anyone but kdra."""
    webhook = next(w for w in validating_configuration(Endpoint(namespace="ops"), None)["webhooks"]
                   if w["name"] == "validate-claim-status.resource.kdra.dev")
    assert webhook["rules"] == [{"apiGroups": ["resource.kdra.dev"], "apiVersions": ["v1"],
                                 "operations": ["UPDATE"],
                                 "resources": ["resourceclaims/status"],
                                 "scope": "Namespaced"}]
    assert webhook["matchConditions"] == [
        {"name": "not-kdra", "expression":
         '!(request.userInfo.username in ["system:serviceaccount:ops:kdra-operator"])'},
        {"name": "device-statuses-changed",
         "expression": "object.?status.?devices != oldObject.?status.?devices"}]


def test_the_crds_convert_through_the_operators_webhook() -> None:
    """crds/*.yaml point their conversion at the Service the operator serves /convert on
    (the operator fills in caBundle); the patch it writes clears the other kind of target."""
    crds = Path(__file__).resolve().parents[3] / "crds"
    names = set()
    for path in sorted(crds.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text().split("---\n", 1)[1])
        single = {"DeviceTaintRule": "v1", "DeviceQuota": "v1alpha1"}.get(
            crd["spec"]["names"]["kind"])
        if single:  # one version: nothing to convert
            assert "conversion" not in crd["spec"]
            assert [v["name"] for v in crd["spec"]["versions"]] == [single]
            continue
        names.add(crd["metadata"]["name"])
        assert crd["spec"]["conversion"] == conversion(Endpoint(), None), path.name
        # v1alpha3 is served on request only (manifests/components/v1alpha3): a served version
        # costs a conversion webhook call per write (docs/api-versions.md, issue 42).
        assert [(v["name"], v["served"], v["storage"]) for v in crd["spec"]["versions"]] == [
            ("v1", True, True), ("v1alpha3", False, False)], path.name
    assert names == set(CRD_NAMES)
    patch = conversion_patch(Endpoint(url="https://127.0.0.1:9443"), b"PEM")
    assert patch["spec"]["conversion"]["webhook"]["clientConfig"] == {
        "url": "https://127.0.0.1:9443/convert", "service": None,
        "caBundle": base64.b64encode(b"PEM").decode()}
