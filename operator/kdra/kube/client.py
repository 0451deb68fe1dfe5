"""The API client every kdra service uses: async, raw JSON, typed errors.

On aiohttp, with kdra's own credentials (:mod:`kdra.kube.kubeconfig`,
:mod:`kdra.kube.credentials`: kubeconfig contexts,
client certificates, tokens, token files, exec plugins, the in-cluster service account with
its rotating token), talking JSON dicts instead of generated models: the hot path parses each
object once, into kdra's own models, and never pays for a second model layer.

This module sends the requests, pages the lists and runs the watches; where each kind lives is
:mod:`kdra.kube.resources`, the errors a call raises are :mod:`kdra.kube.errors`, and the JSON
in and out (and the skip of undecodable objects) is :mod:`kdra.kube.codec`.

Invariants:
- This package is the only one that talks to the API server: import-linter keeps aiohttp,
  pykube and requests out of every other (pyproject.toml, "Only kdra.kube talks to the API
  server"; kopf, in the operator's handlers, aside), and the official Kubernetes clients out
  of kdra altogether.
- A failed call raises :class:`ApiError` or one of its subclasses — :class:`NotFound`,
  :class:`Conflict` (409: a resourceVersion precondition failed, or the object exists),
  :class:`Invalid` (422: the server's validation rejected the object; ``message`` names the
  field), :class:`Undecodable` (an answer, or a body, too deep or malformed for JSON) — or
  :class:`Unreachable` (an ``OSError``) when the server cannot be reached, the connection
  breaks mid-request or the server stops answering (``REQUEST_TIMEOUT``); callers treat that
  as "retry later". Never a transport-specific (aiohttp) or a decoder's exception.
- One object never stops a list or a watch: an item or event that cannot be decoded is
  skipped (logged once, counted in ``kdra_watch_decode_errors_total``), the watch's
  resourceVersion moves past it, and a list reports it in ``skipped`` (see :data:`WatchEvent`).
- Names are URL path segments, percent-quoted (:meth:`Resource.path`).
- Objects come back without ``metadata.managedFields`` (from reads, lists, watches and write
  responses alike): kdra never reads them, they were half the bytes of an allocated claim,
  and client-go's informers strip them too (``TransformStripManagedFields``). A PUT built
  from such an object leaves the server's managedFields as they are (the API server keeps
  the live ones when a request carries none), so no field ownership is lost.
- Writes that decide ownership of a device carry ``metadata.resourceVersion`` (``replace_status``
  sends the whole object; the server rejects a stale one with :class:`Conflict`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from kdra import __version__
from kdra.kube import metrics
from kdra.kube.codec import (
    JSON,
    Items,
    Skipped,
    Skips,
    decode_answer,
    decode_event,
    decode_page,
    encode,
    strip_managed_fields,
)
from kdra.kube.core.backoff import backoff_delay
from kdra.kube.credentials import Authorizer, ssl_context
from kdra.kube.errors import ApiError, Gone, Undecodable, Unreachable, api_error, unreachable
from kdra.kube.kubeconfig import ConfigError, Credentials, load
from kdra.kube.resources import PODS, Resource

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=120, sock_connect=30)
"""A request (not a watch) not answered in full within 120 s is abandoned: the API server ends
its own requests after 60 s (``--request-timeout``) and kdra's LISTs come in pages of 500, so
a longer wait means a dead connection, which would otherwise hold the caller forever. One
timer per request (a ``sock_read`` limit would re-arm a timer for every chunk received)."""

WatchEvent = tuple[str, JSON]
"""``("LIST", {"items": [...], "skipped": [...]})`` — the complete current state, after every
(re)list; ``skipped`` holds :meth:`Skipped.stub` of each listed object that could not be
decoded, which the caller must neither add nor take for deleted — or
``("ADDED" | "MODIFIED" | "DELETED", object)``."""

MAX_REPORTED_SKIPS = 1024
"""Undecodable objects (UID and resourceVersion) whose skip was logged already: each is
logged once, not on every list or replay."""


class KubeClient:
    """Async access to the API server with raw JSON bodies.

    Create with :func:`connect`; close with :meth:`close` (or ``async with``).
    """

    def __init__(self, creds: Credentials, session: aiohttp.ClientSession, *,
                 user_agent: str) -> None:
        self._session = session
        self._host = creds.server
        self._auth = Authorizer(creds)
        self._headers = {"User-Agent": user_agent, "Accept": "application/json"}
        self._extra: dict[str, Any] = {}
        if creds.proxy_url:
            self._extra["proxy"] = creds.proxy_url
        if creds.tls_server_name:
            self._extra["server_hostname"] = creds.tls_server_name
        self._reported: OrderedDict[tuple[str, str, str], None] = OrderedDict()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._session.close()

    async def request(self, method: str, path: str, *, body: Any = None,
                      query: dict[str, Any] | None = None,
                      content_type: str = "application/json") -> JSON:
        """One request; the body is sent as JSON (orjson) and the answer parsed from JSON.

        No generated-client layer: one, kubernetes_asyncio's, walked every body to
        "sanitize" it and re-encoded it with the standard library, measured at ~8% of the
        operator's CPU in the steady-state benchmark."""
        status, raw = await self._call(method, path, query, body, content_type)
        return decode_answer(raw, status, f"{method} {path}")

    async def _call(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
                    content_type: str = "application/json") -> tuple[int, bytes]:
        """Send one request; the status and body of a 2xx answer, else its ApiError."""
        with unreachable(f"{method} {path}"):
            async with await self._send(method, path, query, body, content_type) as response:
                raw = await response.read()
                status, reason = response.status, str(response.reason)
        if 200 <= status < 300:
            return status, raw
        raise api_error(status, reason, raw)

    def skipped(self, skip: Skipped) -> None:
        """Count an undecodable object (skipped, or read without its undecodable free-form
        values), and log it the first time it is seen."""
        metrics.record_watch_decode_error(skip.kind)
        key = (skip.kind, skip.uid or f"{skip.namespace}/{skip.name}", skip.resource_version)
        if key in self._reported:
            return
        self._reported[key] = None
        while len(self._reported) > MAX_REPORTED_SKIPS:
            self._reported.popitem(last=False)
        if skip.pruned:
            log.warning("reading %s without %s: it cannot be decoded (%s); read as "
                        "{\"kdra.dev/undecodable\": ...}", skip, ", ".join(skip.pruned),
                        skip.reason)
            return
        log.warning("skipping %s: it cannot be decoded (%s); it is ignored until it changes",
                    skip, skip.reason)

    async def _send(self, method: str, path: str, query: dict[str, Any] | None, body: Any,
                    content_type: str = "application/json",
                    limits: aiohttp.ClientTimeout | None = None) -> aiohttp.ClientResponse:
        try:
            headers = {**self._headers, **await self._auth.headers()}
        except ConfigError as exc:  # a token file or exec plugin failing now: retry later
            raise Unreachable(f"{method} {path}: credentials: {exc}") from exc
        params = [(k, v if isinstance(v, str) else str(v))
                  for k, v in (query or {}).items() if v is not None]
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = encode(body, f"{method} {path}")
        return await self._session.request(
            method, self._host + path, params=params or None, data=data, headers=headers,
            timeout=limits or REQUEST_TIMEOUT, **self._extra)

    # ------------------------------------------------------------------ verbs

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        return await self.request("GET", res.path(namespace, name))

    async def list(self, res: Resource, namespace: str | None = None, *,
                   label_selector: str | None = None,
                   field_selector: str | None = None) -> list[JSON]:
        items, _ = await self.list_with_version(res, namespace, label_selector=label_selector,
                                                field_selector=field_selector)
        return items

    async def list_with_version(self, res: Resource, namespace: str | None = None, *,
                                label_selector: str | None = None,
                                field_selector: str | None = None) -> tuple[Items, str]:
        """Every object (all pages) and the list's resourceVersion, to watch from. Objects
        that cannot be decoded are left out (logged once, counted)."""
        items, version, _ = await self.list_all(res, namespace, label_selector=label_selector,
                                                field_selector=field_selector)
        return items, version

    async def list_all(self, res: Resource, namespace: str | None = None, *,
                       label_selector: str | None = None, field_selector: str | None = None,
                       ) -> tuple[Items, str, Skips]:
        """Every object (all pages), the list's resourceVersion, and the objects that could
        not be decoded (logged once, counted in ``kdra_watch_decode_errors_total``)."""
        items: Items = []
        skipped: Skips = []
        token: str | None = None
        version = ""
        while True:
            page, bad = await self._list_page(res, res.path(namespace), {
                "labelSelector": label_selector, "fieldSelector": field_selector,
                "limit": 500, "continue": token})
            items.extend(page.get("items") or [])
            skipped.extend(bad)
            meta = page.get("metadata") or {}
            version = version or str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                return items, version, skipped

    async def _list_page(self, res: Resource, path: str,
                         query: dict[str, Any]) -> tuple[JSON, Skips]:
        """One page of a LIST (:func:`kdra.kube.codec.decode_page`): a page that does not
        decode whole is decoded item by item, and the items that still fail are skipped."""
        status, raw = await self._call("GET", path, query, None)
        return decode_page(raw, status, path, res, self.skipped)

    async def watch(self, res: Resource, namespace: str | None = None, *,
                    label_selector: str | None = None, field_selector: str | None = None,
                    timeout_seconds: int = 290, retry_delay: float = 1.0,
                    max_retry_delay: float = 30.0) -> AsyncIterator[WatchEvent]:
        """List, then stream changes, forever (until the caller stops iterating).

        Yields ``("LIST", {"items": [...]})`` first and again after every re-list — after
        ``410 Gone`` (the version was compacted) — so the caller replaces its state there;
        then ``("ADDED" | "MODIFIED" | "DELETED", obj)``. Bookmarks only advance the version.
        A watch the server ends (``timeout_seconds``) resumes from the last version seen;
        connection and server errors are retried with jittered exponential backoff
        (:func:`kdra.kube.core.backoff.backoff_delay`: between ``retry_delay / 2`` and
        ``retry_delay`` after the first failure, doubling, at most ``max_retry_delay``);
        any event from the server resets it.
        """
        version: str | None = None
        failures = 0
        selectors = {"labelSelector": label_selector, "fieldSelector": field_selector}
        report = self.skipped  # bound once, not per event
        while True:
            try:
                if version is None:
                    items, version, skipped = await self.list_all(
                        res, namespace, label_selector=label_selector,
                        field_selector=field_selector)
                    yield "LIST", {"items": items, "skipped": [s.stub() for s in skipped]}
                query = {**selectors, "watch": "1", "resourceVersion": version,
                         "allowWatchBookmarks": "true", "timeoutSeconds": timeout_seconds}
                async for line in self._stream(res.path(namespace), query, timeout_seconds):
                    kind, obj = decode_event(line, res, report)
                    if kind == "ERROR":
                        raise api_error(int(obj.get("code") or 500),
                                        str(obj.get("reason", "")), json.dumps(obj).encode())
                    meta = obj.get("metadata")
                    if isinstance(meta, dict):
                        version = str(meta.get("resourceVersion") or version)
                    failures = 0
                    if kind in ("ADDED", "MODIFIED", "DELETED") and obj:
                        strip_managed_fields(obj)
                        yield kind, obj
            except Gone:
                log.info("watch of %s: version %s is gone; listing again", res.plural, version)
                version = None
            except (ApiError, OSError, ValueError) as exc:
                failures += 1
                delay = backoff_delay(failures, base=retry_delay, cap=max_retry_delay,
                                      rand=random.random)
                log.warning("watch of %s failed (%s; %d in a row); retrying in %.2fs",
                            res.plural, exc, failures, delay)
                await asyncio.sleep(delay)

    async def _stream(self, path: str, query: dict[str, Any],
                      seconds: int) -> AsyncIterator[bytes]:
        """The lines of one watch request (lines may be of any length)."""
        timeout = aiohttp.ClientTimeout(sock_connect=30, sock_read=seconds + 30)
        with unreachable(f"watch {path}"):
            async with await self._send("GET", path, query, None, limits=timeout) as response:
                if response.status != 200:
                    raise api_error(response.status, str(response.reason), await response.read())
                buffer = b""
                async for chunk in response.content.iter_any():
                    buffer += chunk
                    while b"\n" in buffer:
                        line, buffer = buffer.split(b"\n", 1)
                        if line.strip():
                            yield line
                if buffer.strip():
                    yield buffer

    async def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        return await self.request("POST", res.path(namespace), body=body)

    async def patch(self, res: Resource, name: str, patch: Any, namespace: str | None = None,
                    *, subresource: str | None = None,
                    content_type: str = MERGE_PATCH) -> JSON:
        return await self.request("PATCH", res.path(namespace, name, subresource), body=patch,
                                  content_type=content_type)

    async def replace(self, res: Resource, body: JSON, *, subresource: str | None = None) -> JSON:
        """PUT the whole object; its ``metadata.resourceVersion`` is the precondition."""
        meta = body["metadata"]
        return await self.request(
            "PUT", res.path(meta.get("namespace"), meta["name"], subresource), body=body)

    async def replace_status(self, res: Resource, body: JSON) -> JSON:
        return await self.replace(res, body, subresource="status")

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, resource_version: str | None = None,
                     propagation: str | None = None) -> JSON:
        options: JSON = {"kind": "DeleteOptions", "apiVersion": "v1"}
        preconditions = {k: v for k, v in (("uid", uid), ("resourceVersion", resource_version))
                         if v}
        if preconditions:
            options["preconditions"] = preconditions
        if propagation:
            options["propagationPolicy"] = propagation
        return await self.request("DELETE", res.path(namespace, name), body=options)

    async def whoami(self) -> str:
        """The username the API server knows this client by (a SelfSubjectReview)."""
        answer = await self.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                    body={"apiVersion": "authentication.k8s.io/v1",
                                          "kind": "SelfSubjectReview"})
        user = ((answer.get("status") or {}).get("userInfo") or {}).get("username")
        if not isinstance(user, str) or not user:
            raise Undecodable(200, "Undecodable", "the SelfSubjectReview names no username")
        return user

    async def bind(self, namespace: str, pod: str, uid: str, node: str, *,
                   annotations: dict[str, str] | None = None,
                   resource_version: str | None = None) -> JSON:
        """Bind a pod to a node through the ``pods/binding`` subresource. ``annotations`` are
        set on the pod by the API server in the same update as ``spec.nodeName``; the pod's
        UID and, if given, ``resource_version`` are preconditions (Conflict otherwise)."""
        meta: JSON = {"name": pod, "namespace": namespace, "uid": uid}
        if resource_version:
            meta["resourceVersion"] = resource_version
        if annotations:
            meta["annotations"] = annotations
        return await self.request("POST", PODS.path(namespace, pod, "binding"), body={
            "apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        })


async def connect(kubeconfig: str | None = None, *, component: str = "",
                  context: str | None = None) -> KubeClient:
    """A client from ``kubeconfig`` (path), else ``$KUBECONFIG``/``~/.kube/config``, else the
    in-cluster service account (:func:`kdra.kube.kubeconfig.load`; a :class:`ConfigError`
    when none can be used). ``component`` (e.g. ``"operator"``) names the client in its
    User-Agent, ``kdra-<component>/<version>``, which the API server's audit log and
    request logs show."""
    creds = load(kubeconfig, context)
    tls = ssl_context(creds)
    # trust_env only with proxy settings: it makes every request look up ~/.netrc and the
    # proxy variables in a worker thread (two thread hops per API call, measured at ~5% of
    # the operator's CPU when kubernetes_asyncio's session always did it).
    trust_env = any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "NETRC"))
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=64, ssl=tls if tls is not None else False),
        trust_env=trust_env)
    return KubeClient(creds, session, user_agent=f"kdra-{component or 'client'}/{__version__}")
