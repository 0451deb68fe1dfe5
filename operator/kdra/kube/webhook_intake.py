"""Reading a webhook request: who is calling, how much it may send, how long it may take.

The webhook port is reachable from wherever the NetworkPolicy lets through (in many
clusters, every pod). Before a request's body is decoded, :class:`Intake` checks:

* **the caller**, for the admission paths (``/validate``, ``/mutate-pods``): with
  ``webhook_client_ca`` set, the TLS handshake asks for a client certificate and verifies
  any that is offered; a request without one (or whose certificate names none of
  ``webhook_client_names``) is refused with 403 before its body is read. The API server
  presents one when its ``--admission-control-config-file`` gives the webhook admission
  plugins a kubeconfig with a client certificate (docs/security.md). ``/convert`` cannot
  ask: the API server sends no credentials to conversion webhooks (kubernetes#131810).
* **the size**: an admission review holds the object and, for an update, the old object,
  each at most 3 MiB (the API server's limit on a request body), plus the review's own
  fields: 8 MiB. A conversion review holds every object of a list being read in the old
  version (a client's page, 500 objects for kubectl, or a whole list): 32 MiB, some ten
  thousand claims. The API server declares every body's length: a body without
  ``Content-Length`` is refused (411), one over the limit too (413), both without reading;
  the body is read into one buffer of the declared length (never grown or copied).
* **the time**: the whole body must arrive within 10 s for an admission review (the API
  server gives kdra's webhooks 5 s), 30 s for a conversion review (the API server's own
  limit for conversion webhooks), else 408: a caller trickling bytes holds a connection,
  never the server.
* **the memory of all requests together**: bodies being read or decoded may hold at most
  40 MiB at once, each reserved by its declared length before it is read; a request that
  would pass it is refused with 503 (the API server retries). A body is decoded only after
  its JSON *values* are counted (commas and opening brackets, a count in C): at most 256 Ki
  values for an admission review, 512 Ki for a conversion review. Decoded, a JSON value is
  a Python object of ~60 bytes, so 8 MiB of ``[{},{},...]`` (2.8 M empty objects, ~180 MiB
  in Python) is refused, not built; what is built stays near 30 MiB, one large body at a
  time.
* **the event loop**: counting and decoding run in a worker thread, bodies over 1 MiB one
  at a time, so the loop keeps answering other webhook calls, health probes and watches.

Invariants:
- Nothing of a body is decoded before the caller, the size and the value count passed.
- Every refusal is an HTTP status with a one-line JSON error (the API server reports it as
  "failed calling webhook"); a body that is JSON but not decodable whole (nesting, values)
  goes back to the caller as :class:`Undecodable`, with the review's uid when it can be
  found, so admission answers with a denial that names the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson
from aiohttp import web

from kdra.kube.core.jsonscan import path_value

__all__ = [
    "ADMISSION",
    "CONVERSION",
    "Intake",
    "Limits",
    "Undecodable",
    "client_names",
]

log = logging.getLogger(__name__)

MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """What one request on a path may send."""

    body: int
    """Bytes of the body."""
    values: int
    """JSON values in the body (commas plus opening brackets: an upper bound)."""
    seconds: float
    """Time for the whole body to arrive."""


ADMISSION: Final = Limits(body=8 * MIB, values=256 * 1024, seconds=10.0)
CONVERSION: Final = Limits(body=32 * MIB, values=512 * 1024, seconds=30.0)
IN_FLIGHT: Final = 40 * MIB
LARGE: Final = 1 * MIB  # bodies larger than this are decoded one at a time


class Undecodable(Exception):
    """The body is not decodable whole; ``uid`` is the review's uid if it could be read."""

    def __init__(self, reason: str, uid: str | None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.uid = uid


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def client_names(peercert: Mapping[str, Any] | None) -> set[str]:
    """The common names and DNS names of a verified peer certificate (``ssl``'s dict)."""
    if not peercert:
        return set()
    names = {value for rdn in peercert.get("subject", ()) for key, value in rdn
             if key == "commonName"}
    names |= {value for kind, value in peercert.get("subjectAltName", ()) if kind == "DNS"}
    return names


def _uid(raw: bytearray) -> str | None:
    """The review's ``request.uid`` in a body that cannot be decoded whole; only looked for
    in bodies up to 1 MiB (the scan walks every bracket before the member it finds: seconds
    of CPU for megabytes of ``[{},{},...]``). A larger one gets an HTTP 400 instead of a
    denial, which the API server reports as a failed webhook call (the request is denied
    all the same: the webhooks fail closed)."""
    if len(raw) > LARGE:
        return None
    uid = path_value(bytes(raw), ("request", "uid"))
    return uid if isinstance(uid, str) else None


def _count(raw: bytearray, limits: Limits) -> None:
    values = raw.count(b",") + raw.count(b"{") + raw.count(b"[")
    if values > limits.values:
        raise Undecodable(f"the body holds more than {limits.values} JSON values", _uid(raw))


def _decode(raw: bytearray, limits: Limits) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise Undecodable(str(exc), _uid(raw)) from None


class Intake:
    """Reads and decodes webhook requests within the limits above (one per server)."""

    def __init__(self, client_ca: str | None, allowed_names: frozenset[str]) -> None:
        self.client_ca = client_ca
        self.allowed_names = allowed_names
        self._in_flight = 0
        self._large = asyncio.Semaphore(1)

    def configure(self, context: ssl.SSLContext) -> None:
        """Ask callers for a client certificate, verified against ``client_ca`` (only when
        it is set: otherwise the port takes anyone the network lets through)."""
        if self.client_ca:
            context.load_verify_locations(cafile=self.client_ca)
            context.verify_mode = ssl.CERT_OPTIONAL

    def caller_refused(self, request: web.Request) -> web.Response | None:
        """A 403 for a caller the admission paths do not take, else None."""
        if not self.client_ca:
            return None
        transport = request.transport
        names = client_names(transport.get_extra_info("peercert") if transport else None)
        if not names:
            return _error(403, "a client certificate is required (the API server's)")
        if self.allowed_names and not names & self.allowed_names:
            return _error(403, f"client certificate {', '.join(sorted(names))} is not "
                               "allowed to call this webhook")
        return None

    async def read(self, request: web.Request, limits: Limits) -> Any:
        """The decoded body. Raises ``web.HTTPException`` subclasses (as responses) when it
        is refused, :class:`Undecodable` when it is JSON that cannot be decoded whole."""
        async with self.raw(request, limits) as raw:
            return await asyncio.to_thread(_decode, raw, limits)

    @contextlib.asynccontextmanager
    async def raw(self, request: web.Request, limits: Limits) -> AsyncIterator[bytearray]:
        """The body, read within ``limits`` and its JSON values counted, undecoded, for a
        caller that decodes it itself (in a worker thread): held against the memory of all
        requests, and a large one alone among large ones, until the block ends. Raises as
        :meth:`read` does (:class:`Undecodable` only for too many values)."""
        try:
            async with self._reserved(request, limits) as raw:
                large = self._large if len(raw) > LARGE else contextlib.nullcontext()
                async with large:
                    await asyncio.to_thread(_count, raw, limits)
                    yield raw
        except _Refused as refused:
            log.info("refused a webhook request from %s: %s", request.remote, refused.message)
            raise _http_error(refused.status, refused.message) from None

    @contextlib.asynccontextmanager
    async def _reserved(self, request: web.Request,
                        limits: Limits) -> AsyncIterator[bytearray]:
        """The body, read into one buffer of its declared length (no growing, no copies),
        reserved against :data:`IN_FLIGHT` before a byte is read."""
        declared = request.content_length
        if declared is None:
            raise _Refused(411, "a Content-Length is required (the API server sends one)")
        if declared > limits.body:
            raise _Refused(413, f"the body is larger than {limits.body} bytes")
        if self._in_flight + declared > IN_FLIGHT:
            raise _Refused(503, "too many webhook requests in flight; retry")
        self._in_flight += declared
        try:
            raw = bytearray(declared)
            with memoryview(raw) as view:
                filled = 0
                try:
                    async with asyncio.timeout(limits.seconds):
                        async for chunk in request.content.iter_any():
                            view[filled:filled + len(chunk)] = chunk
                            filled += len(chunk)
                except TimeoutError:
                    raise _Refused(408, f"the body did not arrive within "
                                        f"{limits.seconds:.0f}s") from None
            if filled != declared:
                raise _Refused(400, "the body is shorter than its Content-Length")
            yield raw
        finally:
            self._in_flight -= declared


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _http_error(status: int, message: str) -> web.HTTPException:
    classes: dict[int, type[web.HTTPException]] = {
        400: web.HTTPBadRequest, 403: web.HTTPForbidden, 408: web.HTTPRequestTimeout,
        411: web.HTTPLengthRequired, 413: web.HTTPRequestEntityTooLarge,
        503: web.HTTPServiceUnavailable,
    }
    body = orjson.dumps({"error": message})
    cls = classes[status]
    if cls is web.HTTPRequestEntityTooLarge:
        return web.HTTPRequestEntityTooLarge(max_size=0, actual_size=0, text=body.decode(),
                                             content_type="application/json")
    return cls(text=body.decode(), content_type="application/json")
