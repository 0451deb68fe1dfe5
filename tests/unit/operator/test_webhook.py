"""The webhook server (kdra.operator.webhooks.server) over real TLS on loopback, with an in-memory
stand-in for the API client: certificates in the Secret, rotation, configurations."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime as dt
import json
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from cryptography import x509

from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.resources import CRDS, MUTATING_WEBHOOKS, SECRETS, VALIDATING_WEBHOOKS, Resource
from kdra.operator.core.webhook_configs import (
    CRD_NAMES,
    MUTATING_CONFIG,
    TLS_SECRET,
    VALIDATING_CONFIG,
    Endpoint,
    mutating_configuration,
    validating_configuration,
)
from kdra.operator.settings import OperatorSettings
from kdra.operator.webhooks import certs
from kdra.operator.webhooks.server import WebhookServer

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
NS = "kdra-system"


class FakeClient:
    """Just enough of KubeClient: get / create / replace with resourceVersion checks."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.version = 0
        self.writes: list[tuple[str, str, str]] = []
        self.fail_next_create = False

    async def whoami(self) -> str:
        return "operator-user"

    def _key(self, res: Resource, name: str, namespace: str | None) -> tuple[str, str | None, str]:
        return (res.plural, namespace if res.namespaced else None, name)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        try:
            return copy.deepcopy(self.objects[self._key(res, name, namespace)])
        except KeyError:
            raise NotFound(404, "NotFound", f"{res.plural} {name} not found") from None

    async def create(self, res: Resource, body: dict[str, Any],
                     namespace: str | None = None) -> dict[str, Any]:
        key = self._key(res, body["metadata"]["name"], namespace)
        if self.fail_next_create:  # another replica wins the race
            self.fail_next_create = False
            other = await self._store(key, copy.deepcopy(body))
            other["data"] = certs.to_secret_data(certs.generate(["someone-else"], T0))
            raise Conflict(409, "AlreadyExists", "exists")
        if key in self.objects:
            raise Conflict(409, "AlreadyExists", "exists")
        self.writes.append(("create", res.plural, key[2]))
        return await self._store(key, copy.deepcopy(body))

    async def replace(self, res: Resource, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        meta = body["metadata"]
        key = self._key(res, meta["name"], meta.get("namespace"))
        if self.objects[key]["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            raise Conflict(409, "Conflict", "the object has been modified")
        self.writes.append(("replace", res.plural, key[2]))
        return await self._store(key, copy.deepcopy(body))

    async def patch(self, res: Resource, name: str, patch: dict[str, Any],
                    namespace: str | None = None) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386)."""
        key = self._key(res, name, namespace)
        self.writes.append(("patch", res.plural, name))
        return await self._store(key, merge(copy.deepcopy(self.objects[key]), patch))

    async def _store(self, key: tuple[str, str | None, str], body: dict[str, Any]) -> Any:
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key] = body
        return body


def merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    target = target if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge(target.get(key), value)
    return target


def settings(**overrides: Any) -> OperatorSettings:
    return OperatorSettings(**{"webhook_port": 0, "webhook_host": "127.0.0.1",
                               "webhook_url": "https://127.0.0.1:1", **overrides})


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def review(obj: dict[str, Any], kind: tuple[str, str, str]) -> dict[str, Any]:
    group, version, name = kind
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "abc", "kind": {"group": group, "version": version, "kind": name},
        "operation": "CREATE", "object": obj}}


BAD_CLAIM = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "d"},
             "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "x", "selectors": [{"cel": {"expression": "("}}]}}]}}}
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "annotations": {
           "resource.kdra.dev/claims": '[{"name": "g", "resourceClaimName": "c"}]'}},
       "spec": {"containers": [{"name": "main"}]}}


async def served_cert(port: int) -> x509.Certificate:
    pem = await asyncio.to_thread(ssl.get_server_certificate, ("127.0.0.1", port))
    return x509.load_pem_x509_certificate(pem.encode())


def test_serves_reviews_over_tls_with_supplied_certificates(tmp_path: Path) -> None:
    bundle = certs.generate(["127.0.0.1"], dt.datetime.now(dt.UTC))
    for name, data in (("tls.crt", bundle.cert_pem), ("tls.key", bundle.key_pem),
                       ("ca.crt", bundle.ca_pem)):
        (tmp_path / name).write_bytes(data)

    async def scenario() -> None:
        server = WebhookServer(settings(webhook_cert_dir=str(tmp_path),
                                        webhook_manage_config=False), None)
        await server.start()
        try:
            trust = ssl.create_default_context(cadata=bundle.ca_pem.decode())
            base = f"https://127.0.0.1:{server.port}"
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/healthz", ssl=trust) as response:
                    assert response.status == 200 and await response.text() == "ok"
                async with http.post(f"{base}/validate", ssl=trust,
                                     json=review(BAD_CLAIM, ("resource.kdra.dev", "v1",
                                                             "ResourceClaim"))) as response:
                    body = await response.json()
                assert body["response"]["allowed"] is False
                assert body["response"]["uid"] == "abc"
                assert body["response"]["status"]["message"].startswith(
                    "spec.devices.requests[0].exactly.selectors[0].cel.expression: "
                    "1:1: syntax error")
                async with http.post(f"{base}/mutate-pods", ssl=trust,
                                     json=review(POD, ("", "v1", "Pod"))) as response:
                    body = await response.json()
                patch = json.loads(base64.b64decode(body["response"]["patch"]))
                assert patch[0] == {"op": "add", "path": "/spec/schedulerName",
                                    "value": "kdra-scheduler"}
                for payload in (b"not json", json.dumps({"kind": "AdmissionReview"}).encode()):
                    async with http.post(f"{base}/validate", ssl=trust,
                                         data=payload) as response:
                        assert response.status == 400
        finally:
            await server.stop()

    run(scenario)


def test_generated_certificate_is_shared_rotated_and_published() -> None:
    client = FakeClient()
    now = [T0]

    def clock() -> dt.datetime:
        return now[0]

    async def scenario() -> None:
        first = WebhookServer(settings(), client, clock=clock)  # type: ignore[arg-type]
        await first.start()
        try:
            secret = client.objects[("secrets", NS, TLS_SECRET)]
            assert secret["type"] == "kubernetes.io/tls"
            bundle = certs.from_secret_data(secret["data"])
            assert bundle.hosts >= {"127.0.0.1", "kdra-webhook.kdra-system.svc"}
            assert await served_cert(first.port) == bundle.certificate
            for res, name in ((MUTATING_WEBHOOKS, MUTATING_CONFIG),
                              (VALIDATING_WEBHOOKS, VALIDATING_CONFIG)):
                config = await client.get(res, name)
                for webhook in config["webhooks"]:
                    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == bundle.ca_pem
                    assert webhook["clientConfig"]["url"].startswith("https://127.0.0.1:1/")

            # A second replica uses the same Secret; nothing is rewritten.
            writes = len(client.writes)
            second = WebhookServer(settings(), client, clock=clock)  # type: ignore[arg-type]
            await second.start()
            await second.stop()
            assert second.bundle == bundle and len(client.writes) == writes

            # 61 days later the serving certificate is due: rotated, same CA, configs kept.
            now[0] = T0 + dt.timedelta(days=61)
            await first.refresh()
            rotated = certs.from_secret_data(client.objects[("secrets", NS, TLS_SECRET)]["data"])
            assert rotated.cert_pem != bundle.cert_pem and rotated.ca_pem == bundle.ca_pem
            assert await served_cert(first.port) == rotated.certificate
            assert client.writes[writes:] == [("replace", "secrets", TLS_SECRET)]

            # Later still the CA is due: both CAs go into the configurations' caBundle.
            now[0] = T0 + dt.timedelta(days=250)
            await first.refresh()
            config = await client.get(VALIDATING_WEBHOOKS, VALIDATING_CONFIG)
            trusted = base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])
            assert len(x509.load_pem_x509_certificates(trusted)) == 2

            # Someone edits the caBundle away: the next check puts it back.
            config["webhooks"][0]["clientConfig"]["caBundle"] = ""
            await client.replace(VALIDATING_WEBHOOKS, config)
            await first.refresh()
            config = await client.get(VALIDATING_WEBHOOKS, VALIDATING_CONFIG)
            assert base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"]) == trusted
        finally:
            await first.stop()

    run(scenario)


def test_losing_the_creation_race_uses_the_winners_secret() -> None:
    client = FakeClient()
    client.fail_next_create = True

    async def scenario() -> None:
        server = WebhookServer(settings(webhook_manage_config=False),
                               client, clock=lambda: T0)  # type: ignore[arg-type]
        await server.start()
        await server.stop()
        # The winner's certificate lacked our names: we re-issued it from the shared CA.
        stored = certs.from_secret_data(client.objects[("secrets", NS, TLS_SECRET)]["data"])
        assert server.bundle == stored
        assert "someone-else" in stored.hosts and "127.0.0.1" in stored.hosts

    run(scenario)


def test_damaged_secret_is_replaced() -> None:
    client = FakeClient()

    async def scenario() -> None:
        await client.create(SECRETS, {"metadata": {"name": TLS_SECRET, "namespace": NS},
                                      "type": "kubernetes.io/tls",
                                      "data": {"tls.crt": "bm9wZQ==", "tls.key": "bm9wZQ=="}},
                            NS)
        server = WebhookServer(settings(webhook_manage_config=False),
                               client, clock=lambda: T0)  # type: ignore[arg-type]
        await server.start()
        await server.stop()
        stored = certs.from_secret_data(client.objects[("secrets", NS, TLS_SECRET)]["data"])
        assert server.bundle == stored

    run(scenario)


def test_conversion_of_the_crds_is_pointed_here_and_served() -> None:
    """With webhook_manage_config the CRDs' conversion webhook gets this server's URL and CA
    bundle (a CRD not installed yet is skipped), and /convert answers ConversionReviews."""
    client = FakeClient()
    installed = CRD_NAMES[:3]

    async def scenario() -> None:
        for name in installed:
            await client.create(CRDS, {"metadata": {"name": name}, "spec": {"conversion": {
                "strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {"namespace": NS, "name": "kdra-webhook",
                                             "path": "/convert", "port": 443}}}}}})
        now = dt.datetime.now(dt.UTC)  # the certificate must be valid for the request below
        server = WebhookServer(settings(), client, clock=lambda: now)  # type: ignore[arg-type]
        await server.start()
        try:
            assert server.bundle is not None
            for name in installed:
                crd = await client.get(CRDS, name)
                config = crd["spec"]["conversion"]["webhook"]["clientConfig"]
                assert config == {"url": "https://127.0.0.1:1/convert",
                                  "caBundle": base64.b64encode(server.bundle.ca_pem).decode()}
            writes = len(client.writes)
            await server.refresh()
            assert len(client.writes) == writes, "nothing to change: nothing written"

            trust = ssl.create_default_context(cadata=server.bundle.ca_pem.decode())
            body = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                    "request": {"uid": "r1", "desiredAPIVersion": "resource.kdra.dev/v1alpha3",
                                "objects": [{**BAD_CLAIM, "metadata": {"name": "c"}}]}}
            async with aiohttp.ClientSession() as http:
                async with http.post(f"https://127.0.0.1:{server.port}/convert", ssl=trust,
                                     json=body) as response:
                    answer = await response.json()
                async with http.post(f"https://127.0.0.1:{server.port}/convert", ssl=trust,
                                     data=b"{}") as response:
                    assert response.status == 400
            converted = answer["response"]["convertedObjects"][0]
            assert answer["response"]["result"] == {"status": "Success"}
            assert converted["apiVersion"] == "resource.kdra.dev/v1alpha3"
            assert converted["spec"]["devices"]["requests"][0]["deviceClassName"] == "x"
        finally:
            await server.stop()

    run(scenario)


class CaBundleOnly(FakeClient):
    """As the API server with manifests/base's policy kdra-operator-webhooks: an update of a
    webhook configuration that changes more than the CA bundles is refused (403)."""

    async def replace(self, res: Resource, body: dict[str, Any], **_: Any) -> dict[str, Any]:
        if res in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
            live = self.objects[self._key(res, body["metadata"]["name"], None)]

            def without_bundles(config: dict[str, Any]) -> Any:
                stripped = copy.deepcopy(config.get("webhooks"))
                for webhook in stripped:
                    webhook["clientConfig"].pop("caBundle", None)
                return stripped, config["metadata"].get("labels")

            if without_bundles(body) != without_bundles(live):
                raise ApiError(403, "Forbidden", "ValidatingAdmissionPolicy "
                               "'kdra-operator-webhooks' denied request: kdra's operator may "
                               "change only the caBundle")
        return await super().replace(res, body)


def test_where_only_the_ca_bundle_may_change_only_it_is_kept_current(caplog: Any) -> None:
    client = CaBundleOnly()
    # As an installer applied them: another endpoint (the Service), another timeout.
    for res, config in ((MUTATING_WEBHOOKS, mutating_configuration(Endpoint(), b"\n")),
                        (VALIDATING_WEBHOOKS, validating_configuration(Endpoint(), b"\n"))):
        for webhook in config["webhooks"]:
            webhook["timeoutSeconds"] = 7
        asyncio.run(client.create(res, config))

    async def scenario() -> None:
        server = WebhookServer(settings(), client)  # type: ignore[arg-type]
        await server.start()
        try:
            assert server.bundle is not None
            for res, name in ((MUTATING_WEBHOOKS, MUTATING_CONFIG),
                              (VALIDATING_WEBHOOKS, VALIDATING_CONFIG)):
                config = await client.get(res, name)
                for webhook in config["webhooks"]:
                    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == \
                        server.bundle.ca_pem
                    assert webhook["timeoutSeconds"] == 7  # the installer's, kept
                    assert "service" in webhook["clientConfig"]
        finally:
            await server.stop()

    with caplog.at_level("WARNING", logger="kdra.operator.webhooks.server"):
        run(scenario)
    assert "differs from this kdra version's beyond the CA bundle" in caplog.text
    assert "re-apply manifests/webhooks" in caplog.text


def test_the_operators_bindings_are_checked_against_the_pod(tmp_path: Path) -> None:
    """validate-bindings: the server reads the pod a Binding is for
    (kdra.operator.core.bindings)."""
    bundle = certs.generate(["127.0.0.1"], dt.datetime.now(dt.UTC))
    for name, data in (("tls.crt", bundle.cert_pem), ("tls.key", bundle.key_pem),
                       ("ca.crt", bundle.ca_pem)):
        (tmp_path / name).write_bytes(data)
    client = FakeClient()
    for pod, scheduler in (("ours", "kdra-scheduler"), ("theirs", "default-scheduler")):
        client.objects[("pods", "team", pod)] = {
            "metadata": {"name": pod, "namespace": "team", "resourceVersion": "1"},
            "spec": {"schedulerName": scheduler}}

    def binding(pod: str) -> dict[str, Any]:
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": pod, "kind": {"group": "", "version": "v1", "kind": "Binding"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "binding", "namespace": "team", "name": pod, "operation": "CREATE",
            "object": {"apiVersion": "v1", "kind": "Binding",
                       "metadata": {"name": pod, "namespace": "team"},
                       "target": {"kind": "Node", "name": "n"}}}}

    async def scenario() -> None:
        server = WebhookServer(settings(webhook_cert_dir=str(tmp_path),
                                        webhook_manage_config=False),
                               client)  # type: ignore[arg-type]
        await server.start()
        try:
            trust = ssl.create_default_context(cadata=bundle.ca_pem.decode())
            answers = {}
            async with aiohttp.ClientSession() as http:
                for pod in ("ours", "theirs", "gone"):
                    async with http.post(f"https://127.0.0.1:{server.port}/validate", ssl=trust,
                                         json=binding(pod)) as response:
                        answers[pod] = (await response.json())["response"]
            assert answers["ours"] == {"uid": "ours", "allowed": True}
            assert answers["gone"]["allowed"] is True  # the API server refuses it itself
            assert answers["theirs"]["allowed"] is False
            assert answers["theirs"]["status"]["message"] == (
                "spec.schedulerName: kdra's operator binds only pods with schedulerName "
                "kdra-scheduler; pod team/theirs has 'default-scheduler'")
        finally:
            await server.stop()

    run(scenario)
