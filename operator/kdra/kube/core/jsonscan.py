"""Reading parts of a JSON document that cannot be decoded whole: where its members and
elements are, without decoding (or recursing into) their values.

A JSON decoder has a depth limit (orjson's is 1,024, the standard library's the interpreter's
recursion limit), and the API server stores objects nested up to 10,000 levels deep. One such
object must not make a watch, a list or an admission review unreadable: the caller decodes
the document, and when that fails, uses these functions to find the parts it needs (an
event's ``type``, an object's ``metadata.name`` and ``resourceVersion``, a review's
``request.uid``, every item of a list) and decodes only those. Where a free-form field may
hold such a value (a claim's ``status.devices[].data``, written by a node agent after any
webhook could look), :func:`decode_pruned` reads the object without it: the rest of the
object (its allocation, its reservations) must still count.

Invariants:
- Pure functions over ``bytes``; nothing recurses, so any depth is scanned in a loop, in time
  linear in the bytes scanned (regular expressions find the next bracket or quote).
- Malformed input raises :class:`ScanError` (a ``ValueError``), never anything else.
- Spans are half-open ``(start, end)`` offsets into the document.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import orjson

__all__ = ["UNDECODABLE_KEY", "Deep", "ScanError", "Undecoded", "decode_list", "decode_pruned",
           "decode_replacing", "deep_values", "element_spans", "member_spans", "path_value"]

_WS = re.compile(rb"[ \t\r\n]*")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_STRUCTURE = re.compile(rb'["\[\]{}]')
_SCALAR_END = re.compile(rb"[,\]} \t\r\n]|\Z")


class ScanError(ValueError):
    """The document is not well-formed JSON where it was scanned."""


def _skip_ws(raw: bytes, pos: int) -> int:
    match = _WS.match(raw, pos)
    return match.end() if match else pos


def _string_end(raw: bytes, pos: int) -> int:
    match = _STRING.match(raw, pos)
    if match is None:
        raise ScanError(f"unterminated string at offset {pos}")
    return match.end()


def _value_end(raw: bytes, pos: int) -> int:
    """The end of the JSON value starting at ``pos`` (no leading whitespace)."""
    if pos >= len(raw):
        raise ScanError("unexpected end of the document")
    first = raw[pos:pos + 1]
    if first == b'"':
        return _string_end(raw, pos)
    if first in (b"{", b"["):
        depth = 0
        cursor = pos
        while True:
            match = _STRUCTURE.search(raw, cursor)
            if match is None:
                raise ScanError(f"unbalanced brackets from offset {pos}")
            char = match.group()
            if char == b'"':
                cursor = _string_end(raw, match.start())
                continue
            depth += 1 if char in (b"{", b"[") else -1
            cursor = match.end()
            if depth == 0:
                return cursor
    match = _SCALAR_END.search(raw, pos)
    end = match.start() if match else len(raw)
    if end == pos:
        raise ScanError(f"no value at offset {pos}")
    return end


def _expect(raw: bytes, pos: int, char: bytes) -> int:
    pos = _skip_ws(raw, pos)
    if raw[pos:pos + 1] != char:
        raise ScanError(f"expected {char.decode()!r} at offset {pos}")
    return pos + 1


def member_spans(raw: bytes, span: tuple[int, int] | None = None) -> dict[str, tuple[int, int]]:
    """The members of the JSON object at ``span`` (default: the whole document): key → span
    of its value. Keys are decoded; values are not."""
    start = 0 if span is None else span[0]
    pos = _expect(raw, start, b"{")
    members: dict[str, tuple[int, int]] = {}
    pos = _skip_ws(raw, pos)
    if raw[pos:pos + 1] == b"}":
        return members
    while True:
        pos = _skip_ws(raw, pos)
        key_end = _string_end(raw, pos)
        try:
            key = orjson.loads(raw[pos:key_end])
        except orjson.JSONDecodeError as exc:
            raise ScanError(f"bad key at offset {pos}") from exc
        pos = _skip_ws(raw, _expect(raw, key_end, b":"))
        end = _value_end(raw, pos)
        members[str(key)] = (pos, end)
        pos = _skip_ws(raw, end)
        char = raw[pos:pos + 1]
        if char == b"}":
            return members
        if char != b",":
            raise ScanError(f"expected ',' or '}}' at offset {pos}")
        pos += 1


def element_spans(raw: bytes, span: tuple[int, int]) -> Iterator[tuple[int, int]]:
    """The spans of the elements of the JSON array at ``span``."""
    pos = _skip_ws(raw, _expect(raw, span[0], b"["))
    if raw[pos:pos + 1] == b"]":
        return
    while True:
        pos = _skip_ws(raw, pos)
        end = _value_end(raw, pos)
        yield pos, end
        pos = _skip_ws(raw, end)
        char = raw[pos:pos + 1]
        if char == b"]":
            return
        if char != b",":
            raise ScanError(f"expected ',' or ']' at offset {pos}")
        pos += 1


def path_value(raw: bytes, path: Sequence[str],
               span: tuple[int, int] | None = None) -> Any:
    """The decoded value at ``path`` (member names) inside the object at ``span``; None when
    a member is missing, a step is not an object, or the value itself cannot be decoded."""
    current = (0, len(raw)) if span is None else span
    try:
        for name in path:
            found = member_spans(raw, current).get(name)
            if found is None:
                return None
            current = found
        return orjson.loads(raw[current[0]:current[1]])
    except (ScanError, orjson.JSONDecodeError):
        return None


class Undecoded:
    """An item of a list that could not be decoded: what its metadata says, and why."""

    __slots__ = ("name", "namespace", "raw", "reason", "resource_version", "uid")

    def __init__(self, raw: bytes, reason: str) -> None:
        self.raw = raw  # the item's own bytes
        def text(name: str) -> str:
            value = path_value(raw, ("metadata", name))
            return value if isinstance(value, str) else ""

        self.namespace = text("namespace")
        self.name = text("name")
        self.uid = text("uid")
        self.resource_version = text("resourceVersion")
        self.reason = reason

    def __repr__(self) -> str:
        return (f"Undecoded({self.namespace!r}, {self.name!r}, {self.uid!r}, "
                f"{self.resource_version!r}, {self.reason!r})")


def decode_list(raw: bytes) -> tuple[dict[str, Any], list[Any], list[Undecoded]]:
    """A list document (``{"metadata": ..., "items": [...]}``) decoded item by item: its
    metadata, the items that decode, and what is known of those that do not. Raises
    ScanError when the document itself is malformed (or its metadata undecodable)."""
    try:
        return _decode_whole(raw)
    except orjson.JSONDecodeError:
        pass
    members = member_spans(raw)
    meta: Any = {}
    if "metadata" in members:
        start, end = members["metadata"]
        try:
            meta = orjson.loads(raw[start:end])
        except orjson.JSONDecodeError as exc:
            raise ScanError(f"the list's metadata cannot be decoded: {exc}") from exc
    items: list[Any] = []
    bad: list[Undecoded] = []
    if "items" in members:
        for start, end in element_spans(raw, members["items"]):
            try:
                items.append(orjson.loads(raw[start:end]))
            except orjson.JSONDecodeError as exc:
                bad.append(Undecoded(raw[start:end], " ".join(str(exc).split())[:200]))
    return (meta if isinstance(meta, dict) else {}), items, bad


def _decode_whole(raw: bytes) -> tuple[dict[str, Any], list[Any], list[Undecoded]]:
    data = orjson.loads(raw)
    if not isinstance(data, dict):
        raise ScanError("a list must be a JSON object")
    meta = data.get("metadata")
    items = data.get("items")
    return (meta if isinstance(meta, dict) else {}), (items if isinstance(items, list) else []), []


UNDECODABLE_KEY = "kdra.dev/undecodable"
"""The only key of the object that stands in for a value that cannot be decoded
(:func:`decode_pruned`)."""

Pattern = Sequence[str]
"""A path of member names from an object; ``*`` stands for every element of an array."""


class Deep(NamedTuple):
    """A value that cannot be decoded: where it is, and its JSON text."""

    path: str
    raw: bytes


def _nests_deeper(raw: bytes, span: tuple[int, int], limit: int) -> bool:
    """Whether the value at ``span`` nests more than ``limit`` levels (``{}`` is one)."""
    depth = 0
    cursor, end = span
    while cursor < end:
        match = _STRUCTURE.search(raw, cursor, end)
        if match is None:
            return False
        char = match.group()
        if char == b'"':
            cursor = _string_end(raw, match.start())
            continue
        depth += 1 if char in (b"{", b"[") else -1
        if depth > limit:
            return True
        cursor = match.end()
    return False


def deep_values(raw: bytes, patterns: Sequence[Pattern],
                span: tuple[int, int] | None = None,
                max_depth: int | None = None) -> list[tuple[str, tuple[int, int]]]:
    """The values at ``patterns`` inside the object at ``span`` (default: the whole
    document) that orjson cannot decode (or, with ``max_depth``, that nest deeper than
    that), as ``(path, span)`` in document order (path like ``status.devices[0].data``).
    Steps that are missing or of another shape are skipped; the walk never goes deeper than a
    pattern is long."""
    found: list[tuple[str, tuple[int, int]]] = []
    start = (0, len(raw)) if span is None else span
    for pattern in patterns:
        stack: list[tuple[str, tuple[int, int], int]] = [("", start, 0)]
        while stack:
            path, current, step = stack.pop()
            if step == len(pattern):
                if max_depth is not None and _nests_deeper(raw, current, max_depth):
                    found.append((path, current))
                    continue
                try:
                    orjson.loads(raw[current[0]:current[1]])
                except orjson.JSONDecodeError:
                    found.append((path, current))
                continue
            name = pattern[step]
            try:
                if name == "*":
                    if raw[current[0]:current[0] + 1] != b"[":
                        continue
                    children = [(f"{path}[{i}]", element)
                                for i, element in enumerate(element_spans(raw, current))]
                else:
                    if raw[current[0]:current[0] + 1] != b"{":
                        continue
                    member = member_spans(raw, current).get(name)
                    children = [] if member is None else [
                        (f"{path}.{name}" if path else name, member)]
            except ScanError:
                continue
            stack.extend((p, s, step + 1) for p, s in reversed(children))
    return sorted(found, key=lambda item: item[1])


def decode_replacing(raw: bytes, patterns: Sequence[Pattern],
                     stand_in: Callable[[int], Any],
                     span: tuple[int, int] | None = None,
                     max_depth: int | None = None) -> tuple[Any, list[Deep]]:
    """The object at ``span`` (default: the whole document), decoded with the ``i``-th value
    at ``patterns`` that cannot be decoded (or nests deeper than ``max_depth``) replaced by
    ``stand_in(i)`` (any JSON value); and those values as :class:`Deep` (path, raw bytes), in
    order. Raises ScanError when the result still cannot be decoded (the object is
    undecodable elsewhere, or malformed)."""
    start, end = (0, len(raw)) if span is None else span
    replaced = deep_values(raw, patterns, (start, end), max_depth)
    pieces: list[bytes] = []
    cursor = start
    for index, (_, (value_start, value_end)) in enumerate(replaced):
        pieces += [raw[cursor:value_start], orjson.dumps(stand_in(index))]
        cursor = value_end
    pieces.append(raw[cursor:end])
    try:
        decoded = orjson.loads(b"".join(pieces))
    except orjson.JSONDecodeError as exc:
        raise ScanError(" ".join(str(exc).split())[:200]) from exc
    return decoded, [Deep(path, raw[a:b]) for path, (a, b) in replaced]


def decode_pruned(raw: bytes, patterns: Sequence[Pattern], reason: str,
                  span: tuple[int, int] | None = None) -> tuple[Any, list[str]]:
    """The object at ``span`` (default: the whole document), decoded with every value at
    ``patterns`` that cannot be decoded replaced by ``{UNDECODABLE_KEY: reason}``; and the
    paths replaced. Raises ScanError as :func:`decode_replacing`."""
    decoded, deep = decode_replacing(raw, patterns, lambda _: {UNDECODABLE_KEY: reason}, span)
    return decoded, [value.path for value in deep]
