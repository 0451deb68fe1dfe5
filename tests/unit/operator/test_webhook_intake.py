"""The webhook server's intake (kdra.kube.webhook_intake) over real TLS on loopback: who
may call the admission paths, how much a request may send and for how long, and that the
server keeps answering while it reads and decodes.

The attacker talks raw HTTP(S) to the port, as anyone who reaches it would.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kdra.kube import webhook_intake
from kdra.kube.webhook_intake import ADMISSION, CONVERSION, client_names
from kdra.operator.webhooks import certs, pki
from kdra.operator.webhooks import server as webhook
from kdra.operator.webhooks.server import WebhookServer
from tests.unit.operator.test_webhook import BAD_CLAIM, review, settings

NOW = dt.datetime.now(dt.UTC)
API_SERVER = "kube-apiserver-webhook-client"


class Pki:
    """The serving certificate, and a client CA with certificates for callers."""

    def __init__(self, directory: Path) -> None:
        bundle = certs.generate(["127.0.0.1"], NOW)
        for name, data in (("tls.crt", bundle.cert_pem), ("tls.key", bundle.key_pem),
                           ("ca.crt", bundle.ca_pem)):
            (directory / name).write_bytes(data)
        self.directory = directory
        self.trust = bundle.ca_pem.decode()
        self.ca_cert, self.ca_key = pki.new_ca(pki.name("clients"), NOW,
                                               dt.timedelta(days=1), path_length=0)
        self.client_ca = directory / "clients.crt"
        self.client_ca.write_bytes(pki.cert_pem(self.ca_cert))

    def client(self, common_name: str, ca: tuple[Any, Any] | None = None) -> ssl.SSLContext:
        """A TLS context presenting a client certificate (of the client CA, or ``ca``)."""
        ca_cert, ca_key = ca or (self.ca_cert, self.ca_key)
        cert, key = pki.issue(ca_cert, ca_key, pki.name(common_name), NOW,
                              dt.timedelta(days=1), client=True)
        cert_file = self.directory / f"{common_name}.crt"
        key_file = self.directory / f"{common_name}.key"
        cert_file.write_bytes(pki.cert_pem(cert))
        key_file.write_bytes(pki.key_pem(key))
        context = self.anonymous()
        context.load_cert_chain(cert_file, key_file)
        return context

    def anonymous(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.trust)


def serve(directory: Path, scenario: Callable[[WebhookServer, str], Awaitable[None]],
          **overrides: Any) -> None:
    async def main() -> None:
        server = WebhookServer(settings(webhook_cert_dir=str(directory),
                                        webhook_manage_config=False, **overrides), None)
        await server.start()
        try:
            await scenario(server, f"https://127.0.0.1:{server.port}")
        finally:
            await server.stop()

    asyncio.run(main())


CLAIM_REVIEW = json.dumps(review(BAD_CLAIM, ("resource.kdra.dev", "v1", "ResourceClaim")))


async def post(base: str, path: str, context: ssl.SSLContext, data: Any,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.post(
            f"{base}{path}", ssl=context, data=data, headers=headers) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text


def test_admission_paths_take_only_the_api_servers_certificate(tmp_path: Path) -> None:
    keys = Pki(tmp_path)
    other_ca = pki.new_ca(pki.name("someone-else"), NOW, dt.timedelta(days=1), path_length=0)

    async def scenario(server: WebhookServer, base: str) -> None:
        for path in ("/validate", "/mutate-pods"):
            status, body = await post(base, path, keys.anonymous(), CLAIM_REVIEW)
            assert (status, body["error"]) == (403, "a client certificate is required "
                                                    "(the API server's)")
            status, body = await post(base, path, keys.client("mallory"), CLAIM_REVIEW)
            assert status == 403 and "mallory is not allowed" in body["error"]
        with pytest.raises(aiohttp.ClientError):  # a certificate of another CA: no handshake
            await post(base, "/validate", keys.client("kube-apiserver-webhook-client",
                                                      other_ca), CLAIM_REVIEW)
        status, body = await post(base, "/validate", keys.client(API_SERVER), CLAIM_REVIEW)
        assert status == 200 and body["response"]["allowed"] is False
        # Conversion and health need no certificate (the API server and the kubelet send none).
        status, body = await post(base, "/convert", keys.anonymous(), json.dumps(
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
             "request": {"uid": "u", "desiredAPIVersion": "resource.kdra.dev/v1",
                         "objects": []}}))
        assert status == 200 and body["response"]["result"]["status"] == "Success"
        async with aiohttp.ClientSession() as http, http.get(
                f"{base}/healthz", ssl=keys.anonymous()) as response:
            assert response.status == 200

    serve(tmp_path, scenario, webhook_client_ca=str(keys.client_ca),
          webhook_client_names=f"{API_SERVER}, other")


def test_without_a_client_ca_anyone_may_call(tmp_path: Path) -> None:
    keys = Pki(tmp_path)

    async def scenario(server: WebhookServer, base: str) -> None:
        status, body = await post(base, "/validate", keys.anonymous(), CLAIM_REVIEW)
        assert status == 200 and body["response"]["allowed"] is False

    serve(tmp_path, scenario)


def _flood(total: int) -> bytes:
    """``[{},{},...]`` of about ``total`` bytes."""
    return b"[" + b"{}," * (total // 3) + b"{}]"


async def _streamed(data: bytes) -> AsyncIterator[bytes]:
    yield data  # an async body: sent chunked, without a Content-Length


def test_bodies_are_capped_per_path(tmp_path: Path) -> None:
    keys = Pki(tmp_path)

    async def scenario(server: WebhookServer, base: str) -> None:
        context = keys.anonymous()
        # Declared too large: refused before a byte of the body is read.
        status, body = await post(base, "/validate", context, b"x" * 16,
                                  headers={"Content-Length": str(ADMISSION.body + 1)})
        assert status == 413
        status, body = await post(base, "/validate", context, _flood(ADMISSION.body + 1))
        assert status == 413 and body["error"] == f"the body is larger than {ADMISSION.body} bytes"
        # Without a Content-Length (the API server always sends one): refused unread.
        status, body = await post(base, "/validate", context, _streamed(b"{}"))
        assert status == 411
        # Within the size but too many values: refused before decoding.
        status, body = await post(base, "/validate", context, _flood(2 * 1024 * 1024))
        assert status == 400
        assert f"more than {ADMISSION.values} JSON values" in body["error"]
        # The same for a review whose uid can be read: a denial naming the reason.
        flood = ('{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{'
                 '"uid":"u1","object":[' + "{}," * 300_000 + "{}]}}")
        status, body = await post(base, "/validate", context, flood)
        assert status == 200 and body["response"]["uid"] == "u1"
        assert not body["response"]["allowed"]
        assert "JSON values" in body["response"]["status"]["message"]
        # A conversion review may be larger (a whole list), to its own limit.
        status, body = await post(base, "/convert", context, _flood(9 * 1024 * 1024))
        assert status == 400 and f"more than {CONVERSION.values}" in body["error"]

    serve(tmp_path, scenario)


def test_a_trickling_body_is_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = Pki(tmp_path)
    monkeypatch.setattr(webhook, "ADMISSION",
                        webhook_intake.Limits(body=ADMISSION.body, values=ADMISSION.values,
                                              seconds=0.5))

    async def scenario(server: WebhookServer, base: str) -> None:
        # 20 bytes declared, one sent every 0.1 s.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port,
                                                       ssl=keys.anonymous(),
                                                       server_hostname="127.0.0.1")
        writer.write(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 20\r\n\r\n")
        try:
            for _ in range(20):
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(0.1)
        except ConnectionError:
            pass  # the server answered and closed the connection
        head = await reader.read(4096)
        writer.close()
        assert head.startswith(b"HTTP/1.1 408") and b"did not arrive within" in head

    serve(tmp_path, scenario)


def test_the_server_answers_while_large_bodies_are_read_and_decoded(tmp_path: Path,
                                                                     capsys: Any) -> None:
    keys = Pki(tmp_path)
    # A valid conversion review of 20,000 small objects: decoded in a worker thread.
    objects = [{"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
                "metadata": {"name": f"c{i}"}, "spec": {}} for i in range(20_000)]
    big = json.dumps({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                      "request": {"uid": "u", "desiredAPIVersion": "resource.kdra.dev/v1",
                                  "objects": objects}})

    async def scenario(server: WebhookServer, base: str) -> None:
        context = keys.anonymous()
        latencies: list[float] = []

        async def probe() -> None:
            async with aiohttp.ClientSession() as http:
                while True:
                    started = time.perf_counter()
                    async with http.get(f"{base}/healthz", ssl=context) as response:
                        assert response.status == 200
                    latencies.append(time.perf_counter() - started)
                    await asyncio.sleep(0.01)

        prober = asyncio.create_task(probe())
        results = await asyncio.gather(*(post(base, "/convert", context, big)
                                         for _ in range(4)))
        prober.cancel()
        assert all(status == 200 for status, _ in results)
        assert latencies  # answered meanwhile
        with capsys.disabled():
            print(f"\n[intake] /healthz during 4 x {len(big) // 1024} KiB conversions: "
                  f"{len(latencies)} answers, max {max(latencies) * 1000:.0f} ms")

    serve(tmp_path, scenario)


def test_client_names_reads_common_and_dns_names() -> None:
    cert = {"subject": ((("organizationName", "o"),), (("commonName", "api"),)),
            "subjectAltName": (("DNS", "api.example"), ("IP Address", "10.0.0.1"))}
    assert client_names(cert) == {"api", "api.example"}
    assert client_names(None) == set()
