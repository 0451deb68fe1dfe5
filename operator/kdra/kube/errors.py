"""How a failed API call reaches kdra's code: :class:`ApiError` and its subclasses, or
:class:`Unreachable`.

Invariants:
- An answer with an error status is an :class:`ApiError`, of the subclass its status names
  (:func:`api_error`): :class:`NotFound` (404), :class:`Conflict` (409), :class:`Invalid`
  (422), :class:`Forbidden` (403), :class:`Gone` (410); ``reason`` and ``message`` come from
  the server's Status object when it sent one, else from the HTTP reason and the raw body.
- A request that got no answer is an :class:`Unreachable` (an ``OSError``), never a
  transport-specific (aiohttp) exception or a timeout (:func:`unreachable`).
- An answer or a body that cannot be turned into JSON is an :class:`Undecodable` (an
  ``ApiError``), never a decoder's exception.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import aiohttp


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str,
                 body: dict[str, Any] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body or {}
        super().__init__(f"{status} {reason}: {message}")


class NotFound(ApiError):
    """404: the object (or its namespace) does not exist."""


class Conflict(ApiError):
    """409: a resourceVersion/uid precondition failed, or the object already exists."""

    @property
    def already_exists(self) -> bool:
        return self.reason == "AlreadyExists"


class Invalid(ApiError):
    """422: the server's validation rejected the object; ``message`` names the field."""


class Forbidden(ApiError):
    """403: RBAC, an admission policy or a webhook refused the request."""


class Gone(ApiError):
    """410: a watch's resourceVersion is too old (compacted); list again."""


class Undecodable(ApiError):
    """The server answered, but its JSON could not be decoded (nested deeper than the
    decoder allows, or malformed): a problem of the object asked for, not of the server."""


class Unreachable(ConnectionError):
    """The request got no answer: the server could not be reached, the connection broke
    mid-request (e.g. the API server restarting) or the server stopped answering. An
    ``OSError``, so ``except OSError`` catches every transport failure; retry later."""


_ERRORS: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 422: Invalid, 403: Forbidden,
                                      410: Gone}


def api_error(status: int, reason: str, raw: bytes) -> ApiError:
    """The error an answer with ``status`` and body ``raw`` (a Status object, if any) means."""
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    error = _ERRORS.get(status, ApiError)
    return error(status, str(data.get("reason", reason)), str(data.get("message", raw[:500])),
                 data)


def short_reason(exc: Exception) -> str:
    """``exc`` as one line of at most 200 characters, for an error's message."""
    return " ".join(str(exc).split())[:200] or type(exc).__name__


@contextlib.contextmanager
def unreachable(what: str) -> Iterator[None]:
    """Turn a transport failure (aiohttp's errors, a timeout) into :class:`Unreachable`."""
    try:
        yield
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise Unreachable(f"{what}: {exc!r}") from exc
