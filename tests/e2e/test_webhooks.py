"""kdra's admission webhooks against a real kube-apiserver, with the operator as a real process
serving them on loopback (``--webhook-url https://127.0.0.1:<port>``: the test control plane
has no Service network) and managing the webhook configurations itself.

The exact messages the API server returns are printed (``pytest -s``) for the docs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.operator.core.webhook_configs import (
    MUTATE_POD_CONDITION,
    MUTATING_CONFIG,
    TLS_SECRET,
    VALIDATING_CONFIG,
)
from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import ROOT, get_json, operator_with_webhooks
from tests.e2e.conversion import ConversionServer
from tests.e2e.procs import KdraProcess, wait_for

SYSTEM_NAMESPACE = "kdra-system"
API = "resource.kdra.dev/v1alpha3"  # the webhook sees v1 (converted); errors name v1alpha3 paths
ANNOTATION_FIELD = f"metadata.annotations[{CLAIMS_ANNOTATION}]"


class Webhooks:
    def __init__(self, proc: KdraProcess, port: int) -> None:
        self.proc = proc
        self.port = port
        self.url = f"https://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def webhooks(control_plane: ControlPlane, conversion_server: ConversionServer,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhooks]:
    """The operator with its webhooks on, for this module; the configurations and the Secret
    it leaves behind (on purpose: failing closed) are removed afterwards, and the CRDs'
    conversion (which it points at itself) goes back to the session's webhook server."""
    log = tmp_path_factory.mktemp("webhooks") / "operator.log"
    with operator_with_webhooks(control_plane, conversion_server, log) as (proc, port):
        yield Webhooks(proc, port)


@pytest.fixture(autouse=True)
def _operator_log_on_failure(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    rep = getattr(request.node, "rep_call", None)
    hooks = request.node.funcargs.get("webhooks") if hasattr(request.node, "funcargs") else None
    if rep is not None and rep.failed and isinstance(hooks, Webhooks):
        print(f"===== operator log =====\n{hooks.proc.tail(200)}")


# --------------------------------------------------------------------------- helpers


def create(plane: ControlPlane, obj: dict[str, Any]) -> Any:
    return plane.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj), check=False)


def rejected(plane: ControlPlane, obj: dict[str, Any], what: str) -> str:
    result = create(plane, obj)
    assert result.returncode != 0, f"{what} was admitted: {result.stdout[:500]}"
    message = result.stderr.strip()
    print(f"\n[{what}] {message}")
    return str(message)


def claim(name: str, namespace: str, *expressions: str) -> dict[str, Any]:
    request: dict[str, Any] = {"name": "gpu", "deviceClassName": "gpu.kdra.dev"}
    if expressions:
        request["selectors"] = [{"cel": {"expression": e}} for e in expressions]
    return {"apiVersion": API, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": [request]}}}


def pod(name: str, namespace: str, claims: Any = None, *, containers: tuple[str, ...] = ("main",),
        init: tuple[str, ...] = (), env: dict[str, list[dict[str, Any]]] | None = None,
        ) -> dict[str, Any]:
    env = env or {}

    def container(n: str) -> dict[str, Any]:
        c: dict[str, Any] = {"name": n, "image": "registry.k8s.io/pause:3.10"}
        if n in env:
            c["env"] = env[n]
        return c

    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if claims is not None:
        text = claims if isinstance(claims, str) else yaml.safe_dump(claims)
        meta["annotations"] = {CLAIMS_ANNOTATION: text}
    spec: dict[str, Any] = {"containers": [container(n) for n in containers]}
    if init:
        spec["initContainers"] = [container(n) for n in init]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def api_status(api: Any, obj: dict[str, Any]) -> dict[str, Any]:
    """The API server's Status for a refused create (through the official client)."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    group, version = obj["apiVersion"].split("/")
    try:
        CustomObjectsApi(api).create_namespaced_custom_object(
            group, version, obj["metadata"]["namespace"], obj["kind"].lower() + "s", obj)
    except ApiException as exc:
        return dict(json.loads(exc.body))
    raise AssertionError("the object was admitted")


def field_ref(annotation: str) -> dict[str, Any]:
    return {"fieldRef": {"apiVersion": "v1",
                         "fieldPath": f"metadata.annotations['{annotation}']"}}


# --------------------------------------------------------------------------- tests


def test_configurations_carry_the_ca_bundle(control_plane: ControlPlane,
                                            webhooks: Webhooks) -> None:
    secret = get_json(control_plane, "secret", TLS_SECRET, "-n", SYSTEM_NAMESPACE)
    assert secret["type"] == "kubernetes.io/tls"
    ca = base64.b64decode(secret["data"]["ca.crt"])
    assert ca.startswith(b"-----BEGIN CERTIFICATE-----")
    paths = {MUTATING_CONFIG: "/mutate-pods", VALIDATING_CONFIG: "/validate"}
    for kind, name in (("mutatingwebhookconfiguration", MUTATING_CONFIG),
                       ("validatingwebhookconfiguration", VALIDATING_CONFIG)):
        config = get_json(control_plane, kind, name)
        for webhook in config["webhooks"]:
            client_config = webhook["clientConfig"]
            assert base64.b64decode(client_config["caBundle"]) == ca, webhook["name"]
            assert client_config["url"] == webhooks.url + paths[name]
            # notice-pods only warns (issue 41): it fails open; every other one fails closed.
            assert webhook["failurePolicy"] == (
                "Ignore" if webhook["name"] == "notice-pods.resource.kdra.dev" else "Fail")
            assert webhook["sideEffects"] == "None"
            assert webhook["timeoutSeconds"] == 5
            if webhook["name"] == "mutate-pods.resource.kdra.dev":
                # The claims annotation, or an extended resource (test_extended.py).
                assert webhook["matchConditions"][0]["expression"] == MUTATE_POD_CONDITION
                assert MUTATE_POD_CONDITION.startswith(
                    "(has(object.metadata.annotations) && "
                    "'resource.kdra.dev/claims' in object.metadata.annotations) || ")
            elif webhook["name"] == "notice-pods.resource.kdra.dev":  # warns at creation
                assert webhook["rules"][0]["operations"] == ["CREATE"]
            elif webhook["rules"][0]["resources"] == ["pods"]:  # issue 22: updates too
                assert webhook["rules"][0]["operations"] == ["CREATE", "UPDATE"]


def test_claim_with_invalid_cel_is_rejected(control_plane: ControlPlane, webhooks: Webhooks,
                                            api: Any, namespace: str) -> None:
    message = rejected(control_plane, claim("bad-syntax", namespace,
                                            'device.attributes["gpu.kdra.dev"].memory >'),
                       "claim, CEL syntax error")
    assert message.startswith('The ResourceClaim "bad-syntax" is invalid: '
                              "spec.devices.requests[0].selectors[0].cel.expression: 1:")
    assert "syntax error: unexpected end of expression" in message
    # What API clients see: the Status names the webhook, and the cause names the field.
    status = api_status(api, claim("bad-syntax", namespace,
                                   'device.attributes["gpu.kdra.dev"].memory >'))
    print(f"\n[claim, CEL syntax error: API status] {json.dumps(status)}")
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["message"].startswith(
        'admission webhook "validate.resource.kdra.dev" denied the request: '
        "spec.devices.requests[0].selectors[0].cel.expression: 1:")
    assert status["details"]["causes"][0]["field"] == \
        "spec.devices.requests[0].selectors[0].cel.expression"

    message = rejected(control_plane, claim(
        "bad-function", namespace, 'device.driver == "gpu.kdra.dev"',
        'device.attributes["gpu.kdra.dev"].productName.lowerAscii(1) == "h100"'),
        "claim, no matching overload")
    assert "spec.devices.requests[0].selectors[1].cel.expression: " in message
    assert "found no matching overload for 'lowerAscii' applied to 'any.(int)'" in message
    assert not get_json(control_plane, "resourceclaims.resource.kdra.dev", "-n",
                        namespace)["items"]


def test_claim_with_valid_cel_is_accepted(control_plane: ControlPlane, webhooks: Webhooks,
                                          namespace: str) -> None:
    result = create(control_plane, claim(
        "good", namespace, 'device.driver == "gpu.kdra.dev"',
        'device.capacity["gpu.kdra.dev"].memory.compareTo(quantity("40Gi")) >= 0'))
    assert result.returncode == 0, result.stderr


def test_templates_and_classes_are_validated(control_plane: ControlPlane, webhooks: Webhooks,
                                             namespace: str) -> None:
    bad = claim("x", namespace, "device.nope == 1")
    template = {"apiVersion": API, "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": namespace},
                "spec": {"spec": bad["spec"]}}
    message = rejected(control_plane, template, "template, unknown field")
    assert "spec.spec.devices.requests[0].selectors[0].cel.expression: " in message
    assert "undefined field 'nope'" in message

    name = f"{namespace}.example.com"
    device_class = {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name},
                    "spec": {"selectors": [{"cel": {"expression": "device.driver = 'x'"}}]}}
    message = rejected(control_plane, device_class, "class, syntax error")
    assert "spec.selectors[0].cel.expression: " in message

    device_class["spec"]["selectors"][0]["cel"]["expression"] = "device.driver == 'x'"
    assert create(control_plane, device_class).returncode == 0
    try:
        # A metadata-only update is not even sent; a spec update with bad CEL is refused.
        control_plane.kubectl("label", "deviceclass.resource.kdra.dev", name, "tier=gold")
        result = control_plane.kubectl(
            "patch", "deviceclass.resource.kdra.dev", name, "--type=json", "-p", json.dumps(
                [{"op": "add", "path": "/spec/selectors/-",
                  "value": {"cel": {"expression": "size(device) > 1 &&"}}}]), check=False)
        assert result.returncode != 0
        print(f"\n[class update, syntax error] {result.stderr.strip()}")
        assert "spec.selectors[1].cel.expression: " in result.stderr
    finally:
        control_plane.kubectl("delete", "deviceclass.resource.kdra.dev", name, check=False)


def test_pod_with_malformed_annotation_is_rejected(control_plane: ControlPlane,
                                                   webhooks: Webhooks, ns: str) -> None:
    message = rejected(control_plane, pod("bad-yaml", ns, "[{name: gpu, resourceClaimName: c"),
                       "pod, annotation not YAML")
    assert message.startswith(f'The Pod "bad-yaml" is invalid: {ANNOTATION_FIELD}: '
                              "not valid YAML/JSON")

    message = rejected(control_plane, pod("no-ref", ns, [{"name": "gpu"}]),
                       "pod, entry without a reference")
    assert f"{ANNOTATION_FIELD}[0]: exactly one of resourceClaimName or " \
           "resourceClaimTemplateName must be set" in message

    message = rejected(control_plane, pod("ghost", ns, [
        {"name": "gpu", "resourceClaimName": "c", "containers": ["main", "ghost"]}]),
        "pod, unknown container")
    assert f"{ANNOTATION_FIELD}[0].containers[1]: the pod has no container named 'ghost'" \
        in message


def test_pod_with_annotation_is_mutated(control_plane: ControlPlane, webhooks: Webhooks,
                                        ns: str) -> None:
    # A container that uses the claim may not set the device env itself (issue 22): kdra
    # sets it from the allocation. (The mutation keeps the user's entry; validation denies.)
    user_env = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    message = rejected(control_plane, pod(
        "consumer", ns, [{"name": "gpu", "resourceClaimName": "c",
                          "containers": ["main", "setup"]}],
        containers=("main", "sidecar"), init=("setup",), env={"main": user_env}),
        "consuming container with its own NVIDIA_VISIBLE_DEVICES")
    assert ("spec.containers[0].env[0]: NVIDIA_VISIBLE_DEVICES is set by kdra in containers "
            "that use the pod's claims") in message
    created = create(control_plane, pod(
        "consumer", ns, [{"name": "gpu", "resourceClaimName": "c",
                          "containers": ["main", "setup"]}],
        containers=("main", "sidecar"), init=("setup",),
        env={"main": [{"name": "A", "value": "1"}], "sidecar": user_env}))
    assert created.returncode == 0, created.stderr
    obj = json.loads(created.stdout)
    spec = obj["spec"]
    assert spec["schedulerName"] == "kdra-scheduler"
    env = {c["name"]: c.get("env", []) for c in spec["containers"] + spec["initContainers"]}
    # main: the user's own variables are kept; kdra's are added.
    assert env["main"] == [
        {"name": "A", "value": "1"},
        {"name": "KDRA_DEVICES", "valueFrom": field_ref("devices.resource.kdra.dev/main")},
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": field_ref("gpus.resource.kdra.dev/main")},
    ]
    assert env["setup"] == [
        {"name": "KDRA_DEVICES", "valueFrom": field_ref("devices.resource.kdra.dev/setup")},
        {"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": field_ref("gpus.resource.kdra.dev/setup")},
    ]
    assert env["sidecar"] == user_env  # does not consume the claim: its own business

    # Default: every (regular) container consumes the claim.
    created = create(control_plane, pod("all", ns, [{"name": "gpu", "resourceClaimName": "c"}],
                                        containers=("a", "b")))
    assert created.returncode == 0, created.stderr
    spec = json.loads(created.stdout)["spec"]
    assert [[e["name"] for e in c["env"]] for c in spec["containers"]] == \
        [["KDRA_DEVICES", "NVIDIA_VISIBLE_DEVICES"]] * 2


def test_ordinary_pods_pass_while_the_webhook_is_down(control_plane: ControlPlane,
                                                      webhooks: Webhooks, ns: str) -> None:
    before = get_json(control_plane, "validatingwebhookconfiguration", VALIDATING_CONFIG)
    class_name = f"{ns}.example.com"
    assert create(control_plane, {
        "apiVersion": API, "kind": "DeviceClass", "metadata": {"name": class_name},
        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'x'"}}]}},
    ).returncode == 0
    webhooks.proc.stop()
    try:
        # Metadata-only edits of kdra objects are not sent to the webhook either.
        control_plane.kubectl("label", "deviceclass.resource.kdra.dev", class_name, "tier=gold")
        # The configurations stay (Fail policy), but ordinary pods never reach the webhook.
        assert get_json(control_plane, "validatingwebhookconfiguration", VALIDATING_CONFIG)
        result = create(control_plane, pod("ordinary", ns))
        assert result.returncode == 0, result.stderr
        other = create(control_plane, {**pod("annotated-other", ns),
                                       "metadata": {"name": "annotated-other", "namespace": ns,
                                                    "annotations": {"team": "a"}}})
        assert other.returncode == 0, other.stderr
        # Pods with claims and kdra objects fail closed.
        message = rejected(control_plane, pod("with-claims", ns, [
            {"name": "gpu", "resourceClaimName": "c"}]), "pod with claims, webhook down")
        assert "failed calling webhook" in message
        assert "mutate-pods.resource.kdra.dev" in message
        # A v1 claim reaches the admission webhook (v1 is stored: nothing to convert); one
        # written in v1alpha3 already fails converting (the operator serves /convert too).
        v1 = claim("while-down", ns)
        v1["apiVersion"] = "resource.kdra.dev/v1"
        v1["spec"]["devices"]["requests"] = [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.kdra.dev"}}]
        message = rejected(control_plane, v1, "v1 claim, webhook down")
        assert "failed calling webhook" in message
        assert "validate.resource.kdra.dev" in message
        message = rejected(control_plane, claim("while-down", ns), "v1alpha3 claim, webhook down")
        assert "conversion webhook for resource.kdra.dev/v1alpha3, Kind=ResourceClaim failed" \
            in message
    finally:
        webhooks.proc.start(timeout=120)
        control_plane.kubectl("delete", "deviceclass.resource.kdra.dev", class_name,
                              check=False)
    # The restarted operator reuses the Secret: the CA bundle does not change.
    after = get_json(control_plane, "validatingwebhookconfiguration", VALIDATING_CONFIG)
    assert after["webhooks"][0]["clientConfig"]["caBundle"] == \
        before["webhooks"][0]["clientConfig"]["caBundle"]
    result = wait_for(lambda: (r := create(control_plane, pod("with-claims", ns, [
        {"name": "gpu", "resourceClaimName": "c"}]))).returncode == 0 and r,
        timeout=30, what="pod with claims admitted again")
    assert json.loads(result.stdout)["spec"]["schedulerName"] == "kdra-scheduler"


def test_static_manifests_pass_server_side_dry_run(control_plane: ControlPlane,
                                                   webhooks: Webhooks) -> None:
    directory = ROOT / "manifests" / "webhooks"
    docs = [doc for path in sorted(Path(directory).glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert {d["kind"] for d in docs} == {"Service", "MutatingWebhookConfiguration",
                                         "ValidatingWebhookConfiguration"}
    for doc in docs:
        doc["metadata"]["name"] += "-dry-run"  # the operator's own objects exist already
        result = control_plane.kubectl("create", "--dry-run=server", "-f", "-",
                                       input=json.dumps(doc), check=False)
        assert result.returncode == 0, result.stderr
