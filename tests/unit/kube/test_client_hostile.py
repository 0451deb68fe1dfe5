"""The client against hostile objects: one object nested deeper than the JSON decoder's limit
(1,100 levels in its spec) is skipped — logged once, counted — by lists and watches, whose
resourceVersion still moves past it; a GET of it is an ApiError. Nested that deep only in
``status.devices[].data`` (issue 22's attack 4, issue 36: a node agent writes it after every
webhook), the claim is read all the same, that value replaced by a marker, so its allocation
still counts. Names are quoted as one path segment; a deep body is still encoded."""

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


def claim_json(name: str, version: str, data: str = "{}", spec: str = "{}") -> str:
    """A claim as the API server sends it, with ``data`` (its device data) and ``spec`` (its
    opaque parameters) spliced in raw; its managedFields trace a deep value as deep."""
    fields = deep() if len(data) > 1000 or len(spec) > 1000 else "{}"
    return ('{"metadata":{"name":"NAME","namespace":"ns","uid":"u-NAME","resourceVersion":'
            '"VERSION","managedFields":[{"manager":"x","fieldsV1":' + fields + '}]},'
            '"spec":{"devices":{"config":[{"opaque":{"driver":"d","parameters":SPEC}}]}},'
            '"status":{"allocation":{"devices":{"results":'
            '[{"request":"r","driver":"d","pool":"p","device":"x"}]}},"devices":[{"driver":"d",'
            '"pool":"p","device":"x","data":{"ok":1}},{"driver":"d","pool":"p","device":"y",'
            '"data":DATA}]}}').replace("NAME", name).replace("VERSION", version).replace(
                "DATA", data).replace("SPEC", spec)


MARKER = {"kdra.dev/undecodable": ""}  # the reason is orjson's words: compared by key


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
            body = listing("10", claim_json("good", "8"), claim_json("bad", "9", spec=deep()))
            return web.Response(body=body.encode(), content_type="application/json")
        response = web.StreamResponse()
        await response.prepare(request)
        if len(requests) == 2:
            lines = [event("MODIFIED", claim_json("bad", "11", spec=deep())),
                     event("ADDED", claim_json("new", "12")),
                     event("DELETED", claim_json("bad", "13", spec=deep()))]
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
        body = listing("10", claim_json("bad", "9", spec=deep()))
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
        return web.Response(body=claim_json("bad", "9", spec=deep()).encode(),
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


def _marked(obj: Any) -> Any:
    """``obj`` with each marker's reason blanked (orjson's words), for comparison."""
    for entry in obj["status"]["devices"]:
        if "kdra.dev/undecodable" in entry["data"]:
            assert "depth" in entry["data"]["kdra.dev/undecodable"].lower() or \
                "recursion" in entry["data"]["kdra.dev/undecodable"].lower(), entry
            entry["data"] = dict(MARKER)
    return obj


def pruned_claim(name: str, version: str) -> dict[str, Any]:
    """What the client reads of ``claim_json(name, version, deep())``: no managedFields."""
    obj = json.loads(claim_json(name, version, json.dumps(MARKER)))
    del obj["metadata"]["managedFields"]
    return dict(obj)


def test_a_claim_deep_only_in_its_device_data_is_read_without_it(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36: a node agent's 1,100-deep device data made the claim unreadable, so its
    allocation counted for nothing (its device was handed out again after a restart) and it
    was never released. Listed, watched and read, the claim comes whole but for that value;
    it is counted and logged once per version."""
    requests: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        requests.append(dict(request.query))
        if request.path.endswith("/deep"):
            return web.Response(body=claim_json("deep", "9", deep()).encode(),
                                content_type="application/json")
        if "watch" not in request.query:
            body = listing("10", claim_json("deep", "9", deep()), claim_json("good", "8"))
            return web.Response(body=body.encode(), content_type="application/json")
        response = web.StreamResponse()
        await response.prepare(request)
        for line in [event("MODIFIED", claim_json("deep", "11", deep())),
                     event("DELETED", claim_json("deep", "12", deep()))]:
            await response.write(line.encode() + b"\n")
        await response.write_eof()
        return response

    async def main() -> tuple[list[tuple[str, Any]], Any]:
        runner, host = await _serve(handler)
        events: list[tuple[str, Any]] = []
        try:
            async with _client(host) as client:
                got = await client.get(CLAIMS, "deep", "ns")
                async for item in client.watch(CLAIMS, timeout_seconds=5):
                    events.append(item)
                    if len(events) == 3:
                        break
        finally:
            await runner.cleanup()
        return events, got

    before = skips()
    with caplog.at_level(logging.WARNING, logger="kdra.kube.client"):
        (listed, modified, deleted), got = asyncio.run(main())
    assert _marked(got) == pruned_claim("deep", "9")
    assert listed[0] == "LIST" and listed[1]["skipped"] == []
    items = sorted(listed[1]["items"], key=lambda c: c["metadata"]["name"])
    assert [_marked(c) for c in items] == [
        pruned_claim("deep", "9"), {**json.loads(claim_json("good", "8")), "metadata": {
            "name": "good", "namespace": "ns", "uid": "u-good", "resourceVersion": "8"}}]
    assert modified[0] == "MODIFIED" and _marked(modified[1]) == pruned_claim("deep", "11")
    assert deleted[0] == "DELETED" and _marked(deleted[1]) == pruned_claim("deep", "12")
    assert skips() - before == 3  # listed, modified, deleted (the GET is not a watch)
    logged = [r.getMessage() for r in caplog.records if "cannot be decoded" in r.getMessage()]
    assert len(logged) == 3, logged
    assert all("reading ResourceClaim ns/deep" in m and "without metadata.managedFields, "
               "status.devices[1].data" in m for m in logged), logged
