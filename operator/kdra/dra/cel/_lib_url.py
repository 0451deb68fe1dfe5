"""Kubernetes' URL library: ``url(s)``, ``isURL(s)`` and the URL accessors.

A string is a URL when Go's ``url.ParseRequestURI`` accepts it (an absolute URI, or an
absolute path); its parts are then those of Go's ``url.Parse``. This module implements the
subset of Go's ``net/url`` that decides both.

Invariants:

* Rejected, as by Go: control characters, an empty string, a relative reference
  (``../x``), a scheme-less ``:x``, a bad port (``https://a:b:c/``), a host with
  characters hosts may not have, a malformed ``%`` escape.
* ``getHost`` keeps brackets and port (``[::1]:80``); ``getHostname`` drops both;
  ``getEscapedPath`` escapes what Go's ``EscapedPath`` escapes; ``getQuery`` maps each key to
  its values in order, skipping pairs Go's ``url.ParseQuery`` rejects.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Final
from urllib.parse import quote, unquote_to_bytes

from ._rt_core import EvalError, no_overload
from ._values import URLValue

__all__ = ["FUNCTIONS", "parse_url"]

_SCHEME: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*")
_HOST_OK: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~!$&'()*+,;=:[]<>\"%"
)
_USERINFO_OK: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._:~!$&'()*+,;=%@"
)
_BAD_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")
# Characters Go's EscapedPath leaves alone in a path.
_PATH_SAFE: Final = "-_.~$&+,/:;=@!'()*"


def _fail(message: str) -> EvalError:
    return EvalError(f"URL parse error during conversion from string: {message}")


def _unescape_check(text: str, raw: str) -> None:
    match = _BAD_ESCAPE.search(text)
    if match is not None:
        bad = text[match.start() : match.start() + 3]
        raise _fail(f'parse "{raw}": invalid URL escape "{bad}"')


def _valid_port(port: str) -> bool:
    return port == "" or (port[0] == ":" and all(c in "0123456789" for c in port[1:]))


def _split_host(host: str, raw: str) -> tuple[str, str]:
    """(hostname, port) of an authority's host part, validated as Go's parseHost."""
    if host.startswith("["):
        end = host.rfind("]")
        if end < 0:
            raise _fail(f"parse \"{raw}\": missing ']' in host")
        port = host[end + 1 :]
        if not _valid_port(port):
            raise _fail(f'parse "{raw}": invalid port "{port}" after host')
        hostname = host[1:end]
    else:
        colon = host.rfind(":")
        port = host[colon:] if colon >= 0 else ""
        if not _valid_port(port):
            raise _fail(f'parse "{raw}": invalid port "{port}" after host')
        hostname = host[:colon] if colon >= 0 else host
    for char in host:
        if ord(char) < 0x80 and char not in _HOST_OK:
            raise _fail(f'parse "{raw}": invalid character "{char}" in host name')
    _unescape_check(host, raw)
    return hostname, port[1:]


def _parse(raw: str, via_request: bool) -> tuple[str, str, str, str, str, str]:
    """(scheme, host, hostname, port, path, raw query) as Go's url parse() sees them."""
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise _fail(f'parse "{raw}": net/url: invalid control character in URL')
    if raw == "" and via_request:
        raise _fail('parse "": empty url')
    scheme, rest = "", raw
    match = _SCHEME.match(raw)
    if raw.startswith(":"):
        raise _fail(f'parse "{raw}": missing protocol scheme')
    if match is not None and raw[match.end() : match.end() + 1] == ":":
        scheme, rest = raw[: match.end()].lower(), raw[match.end() + 1 :]
    rest, _, query = rest.partition("?")
    if not rest.startswith("/"):
        if scheme:
            return scheme, "", "", "", "", query  # opaque: "mailto:x@example.com"
        if via_request:
            raise _fail(f'parse "{raw}": invalid URI for request')
        if ":" in rest.split("/", 1)[0]:
            raise _fail(f'parse "{raw}": first path segment in URL cannot contain colon')
    host = hostname = port = ""
    if (scheme or (not via_request and not rest.startswith("///"))) and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        userinfo, at, host = authority.rpartition("@")
        if at and any(c not in _USERINFO_OK for c in userinfo):
            raise _fail(f'parse "{raw}": net/url: invalid userinfo')
        hostname, port = _split_host(host, raw)
    _unescape_check(rest, raw)
    return scheme, host, hostname, port, rest, query


@functools.lru_cache(maxsize=1024)
def parse_url(raw: str) -> URLValue:
    """A URL value (cached: values are immutable)."""
    _parse(raw, via_request=True)  # ParseRequestURI decides validity ...
    text, _, _fragment = raw.partition("#")
    scheme, host, hostname, port, path, query = _parse(
        text, via_request=False
    )  # ... Parse the parts
    decoded = unquote_to_bytes(path).decode("utf-8", "replace")
    escaped = path if _is_escaping_of(path, decoded) else quote(decoded, safe=_PATH_SAFE)
    return URLValue(raw, scheme, host, hostname, port, escaped, query)


def _is_escaping_of(path: str, decoded: str) -> bool:
    """Go's validEncoded + unescape round trip: keep the raw path when it is a valid
    escaping of the decoded one."""
    if any(c not in _PATH_SAFE and not c.isalnum() and c != "%" for c in path if ord(c) < 0x80):
        return False
    return unquote_to_bytes(path).decode("utf-8", "replace") == decoded and "%" in path


def _text(op: str, value: Any) -> str:
    if type(value) is not str:
        raise no_overload(op, value)
    return value  # type: ignore[no-any-return]


def _url(op: str, value: Any) -> URLValue:
    if type(value) is not URLValue:
        raise no_overload(op, value)
    return value  # type: ignore[no-any-return]


def g_url(text: Any) -> URLValue:
    return parse_url(_text("url", text))


def g_isURL(text: Any) -> bool:
    try:
        _parse(_text("isURL", text), via_request=True)
    except EvalError:
        return False
    return True


def m_getScheme(url: Any) -> str:
    return _url("getScheme", url).scheme


def m_getHost(url: Any) -> str:
    return _url("getHost", url).host


def m_getHostname(url: Any) -> str:
    return _url("getHostname", url).hostname


def m_getPort(url: Any) -> str:
    return _url("getPort", url).port


def m_getEscapedPath(url: Any) -> str:
    return _url("getEscapedPath", url).escaped_path


def m_getQuery(url: Any) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for pair in _url("getQuery", url).raw_query.split("&"):
        if not pair or ";" in pair:
            continue  # Go skips empty pairs and rejects semicolons
        key, _, value = pair.partition("=")
        try:
            key, value = _query_unescape(key), _query_unescape(value)
        except ValueError:
            continue
        result.setdefault(key, []).append(value)
    return result


def _query_unescape(text: str) -> str:
    if _BAD_ESCAPE.search(text):
        raise ValueError(text)
    return unquote_to_bytes(text.replace("+", " ")).decode("utf-8", "replace")


FUNCTIONS: Final[dict[str, object]] = {
    name: value for name, value in globals().items() if name.startswith(("g_", "m_"))
}
