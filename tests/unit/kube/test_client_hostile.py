"""The client against hostile objects: one object nested deeper than the JSON decoder's limit
(1,100 levels of ``status.devices[0].data``, issue 22's attack 4) is skipped — logged once,
counted — by lists and watches, whose resourceVersion still moves past it; a GET of it is an
ApiError; names are quoted as one path segment; a deep body is still encoded."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import REGISTRY

from kdra.kube.errors import Undecodable
from kdra.kube.resources import CLAIMS, PODS
from tests.unit.kube.test_client_wire import _client, _serve

DEPTH = 1100


def deep(depth: int = DEPTH) -> str:
    return "[" * depth + "]" * depth


def claim_json(name: str, version: str, data: str = "{}") -> str:
    """A claim as the API server sends it, with ``data`` spliced in raw."""
    return ('{"metadata":{"name":"NAME","namespace":"ns","uid":"u-NAME","resourceVersion":'
            '"VERSION","managedFields":[{"manager":"x"}]},"status":{"devices":[{"data":DATA}]}}'
            ).replace("NAME", name).replace("VERSION", version).replace("DATA", data)


def event(kind: str, obj: str) -> str:
    return '{"type":"' + kind + '","object":' + obj + "}"


def listing(version: str, *items: str) -> str:
    return ('{"kind":"List","metadata":{"resourceVersion":"' + version + '"},"items":['
            + ",".join(items) + "]}")


def skips() -> float:
    return REGISTRY.get_sample_value("kdra_watch_decode_errors_total",
                                     {"kind": "ResourceClaim"}) or 0.0


def test_a_deep_object_is_skipped_by_list_and_watch_and_the_version_moves_past_it(
        caplog: pytest.LogCaptureFixture) -> None:
    requests: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        requests.append(dict(request.query))
        if "watch" not in request.query:
            body = listing("10", claim_json("good", "8"), claim_json("bad", "9", deep()))
            return web.Response(body=body.encode(), content_type="application/json")
        response = web.StreamResponse()
        await response.prepare(request)
        if len(requests) == 2:
            lines = [event("MODIFIED", claim_json("bad", "11", deep())),
                     event("ADDED", claim_json("new", "12")),
                     event("DELETED", claim_json("bad", "13", deep()))]
        else:
            lines = [event("ADDED", claim_json("last", "14"))]
        for line in lines:
            await response.write(line.encode() + b"\n")
        await response.write_eof()
        return response

    async def main() -> list[tuple[str, Any]]:
        runner, host = await _serve(handler)
        events: list[tuple[str, Any]] = []
        try:
            async with _client(host) as client:
                async for event in client.watch(CLAIMS, timeout_seconds=5):
                    events.append(event)
                    if len(events) == 4:
                        break
        finally:
            await runner.cleanup()
        return events

    before = skips()
    with caplog.at_level(logging.WARNING, logger="kdra.kube.client"):
        events = asyncio.run(main())
    listed, added, deleted, last = events
    assert listed[0] == "LIST"
    assert [c["metadata"]["name"] for c in listed[1]["items"]] == ["good"]
    assert "managedFields" not in listed[1]["items"][0]["metadata"]
    assert listed[1]["skipped"] == [{"metadata": {"name": "bad", "namespace": "ns",
                                                  "uid": "u-bad", "resourceVersion": "9"}}]
    assert added == ("ADDED", json.loads(claim_json("new", "12")) | {
        "metadata": {"name": "new", "namespace": "ns", "uid": "u-new",
                     "resourceVersion": "12"}})
    # A deletion is delivered with what is known of the object, so caches drop it.
    assert deleted == ("DELETED", {"metadata": {"name": "bad", "namespace": "ns",
                                                "uid": "u-bad", "resourceVersion": "13"}})
    assert last[1]["metadata"]["name"] == "last"
    # The next watch resumes after the skipped and deleted events: nothing is replayed.
    assert requests[2]["resourceVersion"] == "13"
    assert skips() - before == 3  # listed, modified, deleted
    logged = [r.getMessage() for r in caplog.records if "cannot be decoded" in r.getMessage()]
    assert len(logged) == 3 and all("ResourceClaim ns/bad" in m for m in logged)


def test_the_same_undecodable_version_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    async def handler(request: web.Request) -> web.Response:
        body = listing("10", claim_json("bad", "9", deep()))
        return web.Response(body=body.encode(), content_type="application/json")

    async def main() -> None:
        runner, host = await _serve(handler)
        try:
            async with _client(host) as client:
                for _ in range(3):
                    items, version = await client.list_with_version(CLAIMS)
                    assert items == [] and version == "10"
        finally:
            await runner.cleanup()

    before = skips()
    with caplog.at_level(logging.WARNING, logger="kdra.kube.client"):
        asyncio.run(main())
    assert skips() - before == 3
    assert sum("cannot be decoded" in r.getMessage() for r in caplog.records) == 1


def test_a_get_of_an_undecodable_object_is_an_api_error() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=claim_json("bad", "9", deep()).encode(),
                            content_type="application/json")

    async def main() -> BaseException:
        runner, host = await _serve(handler)
        try:
            async with _client(host) as client:
                try:
                    await client.get(CLAIMS, "bad", "ns")
                except BaseException as exc:
                    return exc
                raise AssertionError("no error")
        finally:
            await runner.cleanup()

    error = asyncio.run(main())
    assert isinstance(error, Undecodable)
    assert "cannot be decoded" in error.message


@pytest.mark.parametrize(("name", "path"), [
    ("../../../api/v1/namespaces/kdra-system/secrets/kdra-webhook-tls",
     "/api/v1/namespaces/ns/pods/..%2F..%2F..%2Fapi%2Fv1%2Fnamespaces%2Fkdra-system%2Fsecrets"
     "%2Fkdra-webhook-tls"),
    ("..", "/api/v1/namespaces/ns/pods/%2E%2E"),
    (".", "/api/v1/namespaces/ns/pods/%2E"),
    ("a?watch=1#x", "/api/v1/namespaces/ns/pods/a%3Fwatch%3D1%23x"),
    ("plain-name.v2", "/api/v1/namespaces/ns/pods/plain-name.v2"),
])
def test_names_are_one_quoted_path_segment(name: str, path: str) -> None:
    assert PODS.path("ns", name) == path


def test_a_deep_body_is_encoded_and_a_too_deep_one_is_an_api_error() -> None:
    bodies: list[bytes] = []

    async def handler(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.json_response({"metadata": {"name": "c"}})

    async def main() -> BaseException | None:
        runner, host = await _serve(handler)
        try:
            async with _client(host) as client:
                await client.replace_status(CLAIMS, {"metadata": {"name": "c", "namespace": "n"},
                                                     "status": json.loads(deep(300))})
                try:
                    await client.replace_status(CLAIMS, {
                        "metadata": {"name": "c", "namespace": "n"},
                        "status": {"d": _nested(5000)}})
                except Undecodable as exc:
                    return exc
                return None
        finally:
            await runner.cleanup()

    error = asyncio.run(main())
    assert len(bodies) == 1 and bodies[0].count(b"[") == 300  # orjson stops at 254 levels
    assert isinstance(error, Undecodable) and "cannot be encoded" in error.message


def _nested(depth: int) -> list[Any]:
    root: list[Any] = []
    node = root
    for _ in range(depth):
        child: list[Any] = []
        node.append(child)
        node = child
    return root
