"""The HTTPS server the API server calls kdra's webhooks on (admission, conversion): the
transport, without the decisions.

The operator's webhooks (:mod:`kdra.operator.webhooks.server`) register one handler per path,
and every request is read by an :class:`~kdra.kube.webhook_intake.Intake` before a handler
runs:

- :meth:`HttpsServer.post_json` (the admission paths): the caller's client certificate is
  checked (403 before the body is read), the body read within the path's limits and decoded
  in a worker thread; the handler gets the decoded body, or the path's ``undecodable`` answer
  is sent for JSON that cannot be decoded whole;
- :meth:`HttpsServer.post_raw` (``/convert``: the API server sends no credentials to
  conversion webhooks, so no caller check): the body read within the path's limits and its
  values counted, given undecoded to the handler (which decodes it in a worker thread), and
  held against the memory of all requests until the handler returns;
- :meth:`HttpsServer.get`: no body.

A handler returns a :class:`Reply` (a JSON document, encoded or not, or plain text, with its
status). TLS is the caller's ``ssl.SSLContext``, so a certificate reloaded into it serves new
connections at once.

Invariants:
- The only code that serves HTTP to the API server (kdra's client, :mod:`kdra.kube.client`,
  is the only code that calls it): aiohttp stays inside :mod:`kdra.kube`.
- No handler runs before the intake took the request: a refusal (caller, size, time, memory,
  value count) is the intake's HTTP status with a one-line JSON error.
- A refused body is not drained (no lingering) nor decompressed (the API server does not
  compress; a gzip bomb would).
- :meth:`HttpsServer.start` returns once the port listens, with the bound port (for port 0).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kdra.kube.webhook_intake import CONVERSION, Intake, Limits, Undecodable

__all__ = ["KEEPALIVE", "HttpsServer", "Reply"]

log = logging.getLogger(__name__)

KEEPALIVE = 90.0  # seconds an idle connection stays open (the API server reuses them)


@dataclass(frozen=True)
class Reply:
    """A handler's answer: ``data`` (a JSON document already encoded), else ``text``, else
    ``json`` (a JSON document); and the status."""

    json: Any = None
    status: int = 200
    text: str | None = None
    data: bytes | None = None


JsonHandler = Callable[[Any], Awaitable[Reply]]
"""An admission path's handler: the decoded body -> the reply."""
RawHandler = Callable[[bytearray], Awaitable[Reply]]
"""A path's handler that decodes the body itself: the body's bytes -> the reply."""
Refusal = Callable[[Undecodable], Reply]
"""A path's answer to a body that is JSON but cannot be decoded whole."""


def _response(reply: Reply) -> web.Response:
    if reply.data is not None:
        return web.Response(body=reply.data, status=reply.status,
                            content_type="application/json")
    if reply.text is not None:
        return web.Response(text=reply.text, status=reply.status)
    return web.json_response(reply.json, status=reply.status)


class HttpsServer:
    """Serve the handlers over TLS on ``host:port``, every request read by ``intake``;
    :meth:`start`, then :meth:`stop`."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext,
                 intake: Intake) -> None:
        self.host, self.port = host, port
        self.intake = intake
        self._ssl = ssl_context
        # the largest body a path takes (the intake refuses more, per path, before reading)
        self._app = web.Application(client_max_size=CONVERSION.body)
        self._runner: web.AppRunner | None = None

    def post_json(self, path: str, handler: JsonHandler, *, limits: Limits,
                  undecodable: Refusal) -> None:
        """``POST path`` from an accepted caller only, its body decoded for ``handler``."""
        async def serve(request: web.Request) -> web.Response:
            refused = self.intake.caller_refused(request)
            if refused is not None:
                log.info("refused an admission request from %s: no accepted client "
                         "certificate", request.remote)
                return refused
            try:
                body = await self.intake.read(request, limits)
            except Undecodable as exc:
                return _response(undecodable(exc))
            return _response(await handler(body))
        self._app.router.add_post(path, serve)

    def post_raw(self, path: str, handler: RawHandler, *, limits: Limits,
                 undecodable: Refusal) -> None:
        """``POST path`` from anyone the network lets through, its body undecoded."""
        async def serve(request: web.Request) -> web.Response:
            try:
                async with self.intake.raw(request, limits) as raw:
                    return _response(await handler(raw))
            except Undecodable as exc:
                return _response(undecodable(exc))
        self._app.router.add_post(path, serve)

    def get(self, path: str, handler: Callable[[], Awaitable[Reply]]) -> None:
        """``GET path``."""
        async def serve(request: web.Request) -> web.Response:
            return _response(await handler())
        self._app.router.add_get(path, serve)

    async def start(self) -> int:
        """Listen; returns the bound port."""
        self._runner = web.AppRunner(self._app, access_log=None, lingering_time=0,
                                     auto_decompress=False, keepalive_timeout=KEEPALIVE)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self._ssl)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or ()  # the bound port, for port 0
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
