"""What :class:`KubeClient` puts on the wire: it builds requests itself, on its own aiohttp
session and kdra's credentials (:mod:`kdra.kube.kubeconfig`), so the credentials, the
User-Agent, the query and the JSON body are checked here against a local HTTP server (no API
server needed for the wire format)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from kdra import __version__
from kdra.kube.client import REQUEST_TIMEOUT, KubeClient
from kdra.kube.errors import Conflict, Unreachable
from kdra.kube.kubeconfig import Credentials
from kdra.kube.resources import CLAIMS, PODS


async def _serve(handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}"


async def _raised(handler: Any,
                  call: Callable[[KubeClient], Awaitable[Any]]) -> BaseException:
    """What ``call`` raises against a server answering with ``handler``."""
    runner, host = await _serve(handler)
    try:
        async with _client(host) as client:
            try:
                await call(client)
            except BaseException as exc:
                return exc
            raise AssertionError("no error")
    finally:
        await runner.cleanup()


def _client(host: str, token: str | None = None) -> KubeClient:
    creds = Credentials(server=host, source="test", token=token)
    return KubeClient(creds, aiohttp.ClientSession(), user_agent=f"kdra-test/{__version__}")


def test_a_write_carries_token_user_agent_content_type_and_json_body() -> None:
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append({"method": request.method, "path": request.path,
                     "query": dict(request.query), "headers": dict(request.headers),
                     "body": await request.read()})
        return web.json_response({"kind": "ResourceClaim", "metadata": {"name": "c"}})

    async def main() -> Any:
        runner, host = await _serve(handler)
        try:
            async with _client(host, token="s3cret") as client:
                answer = await client.patch(CLAIMS, "c", {"metadata": {"labels": {"a": "é"}},
                                                          "counts": {1: 2}}, "ns")
                await client.list(PODS, "ns", label_selector="app=x")
            return answer
        finally:
            await runner.cleanup()

    answer = asyncio.run(main())
    assert answer == {"kind": "ResourceClaim", "metadata": {"name": "c"}}
    patch, listing = seen
    assert patch["method"] == "PATCH"
    assert patch["path"] == "/apis/resource.kdra.dev/v1/namespaces/ns/resourceclaims/c"
    assert patch["headers"]["Authorization"] == "Bearer s3cret"
    assert patch["headers"]["User-Agent"] == f"kdra-test/{__version__}"
    assert patch["headers"]["Content-Type"] == "application/merge-patch+json"
    assert json.loads(patch["body"]) == {"metadata": {"labels": {"a": "é"}},
                                         "counts": {"1": 2}}  # keys as json.dumps makes them
    assert listing["method"] == "GET" and listing["path"] == "/api/v1/namespaces/ns/pods"
    assert listing["query"] == {"labelSelector": "app=x", "limit": "500"}  # None dropped


def test_an_error_answer_raises_the_typed_error_with_the_servers_message() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "reason": "Conflict",
                                  "message": "the object has been modified"}, status=409)

    async def main() -> None:
        runner, host = await _serve(handler)
        try:
            async with _client(host) as client:
                await client.replace_status(CLAIMS, {"metadata": {"name": "c",
                                                                  "namespace": "ns"}})
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except Conflict as exc:
        assert exc.message == "the object has been modified"
    else:
        raise AssertionError("a 409 answer must raise Conflict")


def test_a_watch_yields_the_list_then_each_event_and_resumes_from_the_last_version() -> None:
    requests: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        requests.append(dict(request.query))
        if "watch" not in request.query:
            return web.json_response({"metadata": {"resourceVersion": "10"}, "items": [
                {"metadata": {"name": "a", "resourceVersion": "9"}}]})
        response = web.StreamResponse()
        await response.prepare(request)
        name, version = ("b", "11") if len(requests) == 2 else ("c", "12")
        line = json.dumps({"type": "ADDED", "object": {
            "metadata": {"name": name, "resourceVersion": version}}}).encode() + b"\n"
        await response.write(line[:7])  # one event split over two chunks
        await response.write(line[7:])
        await response.write_eof()  # the server ends the watch
        return response

    async def main() -> list[tuple[str, Any]]:
        runner, host = await _serve(handler)
        events: list[tuple[str, Any]] = []
        try:
            async with _client(host) as client:
                async for event in client.watch(PODS, timeout_seconds=5):
                    events.append(event)
                    if len(events) == 3:
                        break
        finally:
            await runner.cleanup()
        return events

    events = asyncio.run(main())
    assert events[0] == ("LIST", {"items": [{"metadata": {"name": "a",
                                                           "resourceVersion": "9"}}],
                                  "skipped": []})
    assert events[1] == ("ADDED", {"metadata": {"name": "b", "resourceVersion": "11"}})
    assert events[2] == ("ADDED", {"metadata": {"name": "c", "resourceVersion": "12"}})
    assert requests[1]["resourceVersion"] == "10" and requests[1]["watch"] == "1"
    assert requests[2]["resourceVersion"] == "11"  # resumed after the event, no re-list


def test_a_connection_broken_mid_request_raises_unreachable_an_oserror() -> None:
    # The API server dies with the request in flight (a restart): the connection closes
    # without an answer. aiohttp says ServerDisconnectedError, which is not an OSError; the
    # client's contract is one exception for "no answer", and callers catch it as OSError.
    async def handler(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()
        await asyncio.sleep(1)
        return web.json_response({})

    error = asyncio.run(_raised(handler, lambda client: client.replace_status(CLAIMS, {
        "metadata": {"name": "c", "namespace": "ns", "resourceVersion": "1"}})))
    assert isinstance(error, Unreachable) and isinstance(error, OSError), repr(error)
    assert isinstance(error.__cause__, aiohttp.ServerDisconnectedError), repr(error.__cause__)
    assert "PUT /apis/resource.kdra.dev/v1/namespaces/ns/resourceclaims/c/status" in \
        str(error)


def test_a_request_the_server_never_answers_times_out(monkeypatch: Any) -> None:
    # Without a timeout a request on a dead connection holds its caller forever. (The real
    # limit is 120 s, past the API server's own 60 s request timeout.)
    assert REQUEST_TIMEOUT.total is not None and REQUEST_TIMEOUT.total > 60
    monkeypatch.setattr("kdra.kube.client.REQUEST_TIMEOUT",
                        aiohttp.ClientTimeout(total=0.3, sock_connect=30))

    async def handler(request: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.json_response({})

    error = asyncio.run(_raised(handler, lambda client: client.get(CLAIMS, "c", "ns")))
    assert isinstance(error, Unreachable), repr(error)
    assert isinstance(error.__cause__, TimeoutError), repr(error.__cause__)


def test_objects_come_back_without_managed_fields() -> None:
    managed = [{"manager": "kdra-operator", "operation": "Update", "fieldsV1": {"f:spec": {}}}]

    def obj(name: str) -> dict[str, Any]:
        return {"kind": "ResourceClaim", "metadata": {"name": name, "resourceVersion": "5",
                                                      "managedFields": managed}}

    async def handler(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch"):
            response = web.StreamResponse()
            await response.prepare(request)
            await response.write(json.dumps({"type": "ADDED", "object": obj("w")}).encode()
                                 + b"\n")
            await asyncio.sleep(1)
            return response
        if request.path.endswith("/resourceclaims"):
            return web.json_response({"kind": "List", "metadata": {"resourceVersion": "5"},
                                      "items": [obj("a"), obj("b")]})
        return web.json_response(obj("c"))

    async def main() -> list[Any]:
        runner, host = await _serve(handler)
        try:
            async with _client(host) as client:
                got = await client.get(CLAIMS, "c", "ns")
                written = await client.replace_status(CLAIMS, obj("c") | {"metadata": {
                    "name": "c", "namespace": "ns", "resourceVersion": "5"}})
                listed = await client.list(CLAIMS, "ns")
                stream = client.watch(CLAIMS, "ns")
                first = await anext(stream)
                second = await anext(stream)
                await stream.aclose()
            return [got, written, *listed, first[1]["items"][0], second[1]]
        finally:
            await runner.cleanup()

    objects = asyncio.run(main())
    assert [o["metadata"] for o in objects] == [
        {"name": n, "resourceVersion": "5"} for n in ("c", "c", "a", "b", "a", "w")]
