"""Decoding and measuring what users write: YAML/JSON text with a size cap, a depth cap and
no YAML anchors or aliases; the depth and size of values already decoded; error messages
with values cut short.

A user's annotation or opaque parameters reach kdra in every watch event and admission
request, so decoding them must be total (bad input becomes an :class:`InvalidObject` naming
the field, never another exception) and bounded (work and memory proportional to a small
cap, whatever the input). YAML needs care beyond size: an alias repeats a node without
repeating its text, so 100 KiB of anchors and aliases can stand for millions of values (a
"billion laughs"). :func:`load_yaml` refuses anchors and aliases *as the parser meets them*,
before any alias-expanded tree exists, and stops descending at ``max_depth``.

Invariants:
- :func:`load_yaml` and :func:`load_json` raise only :class:`InvalidObject`; the size check
  comes first (no parsing of oversized text), the depth check while parsing.
- :func:`too_deep` and :func:`json_size` never recurse (a value nested 100,000 deep is
  measured with a stack of at most ``limit`` frames of its own), so they cannot raise
  RecursionError.
- :func:`shorten` returns at most ``limit`` characters.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.events import AliasEvent, CollectionStartEvent, ScalarEvent

from kdra.dra.errors import InvalidObject

__all__ = ["MAX_REPORTED", "capped", "json_size", "load_json", "load_yaml", "shorten",
           "too_deep"]

MAX_REPORTED = 5
"""At most this many problems are reported for one object; the rest are counted."""


def shorten(text: object, limit: int = 80) -> str:
    """``text`` (``str()`` of it) cut to ``limit`` characters, marked with ``...``."""
    value = text if isinstance(text, str) else str(text)
    return value if len(value) <= limit else value[: max(limit - 3, 0)] + "..."


def capped(messages: list[str], limit: int = MAX_REPORTED) -> list[str]:
    """The first ``limit`` messages, and one more saying how many were left out."""
    if len(messages) <= limit:
        return messages
    return [*messages[:limit], f"... and {len(messages) - limit} more"]


class _BoundedComposer(yaml.SafeLoader):
    """PyYAML's safe loader whose composer refuses anchors and aliases and nesting deeper
    than ``max_depth``. The check runs on the parser's events, one node at a time, so a
    refused document never grows into a tree."""

    max_depth = 8

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        mark: Any = event.start_mark
        if isinstance(event, AliasEvent):
            raise ComposerError(None, None, "YAML aliases (*name) are not allowed", mark)
        if isinstance(event, ScalarEvent | CollectionStartEvent) and event.anchor is not None:
            raise ComposerError(None, None, "YAML anchors (&name) are not allowed", mark)
        self._depth += 1
        try:
            if self._depth > self.max_depth:
                raise ComposerError(None, None, f"nested deeper than {self.max_depth} levels",
                                    mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_size(text: str, field: str, max_bytes: int) -> None:
    if len(text) > max_bytes or len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        size = len(text.encode("utf-8", "surrogatepass"))
        raise InvalidObject(field, f"at most {max_bytes} bytes (has {size})")


def load_yaml(text: str, *, field: str, max_bytes: int, max_depth: int = 8) -> Any:
    """The one YAML (or JSON) document in ``text``: plain data (no anchors, aliases or
    Python tags), at most ``max_bytes`` of UTF-8 and ``max_depth`` levels of nesting.
    Raises InvalidObject for ``field``."""
    _check_size(text, field, max_bytes)
    loader: _BoundedComposer | None = None
    try:
        loader = _BoundedComposer(text)  # reads (and checks) the characters
        loader.max_depth = max_depth
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        problem = " ".join(f"{exc.problem or exc.context or 'invalid'}".split())
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise InvalidObject(field, f"not valid YAML/JSON: {shorten(problem, 120)}{where}"
                            ) from None
    except Exception as exc:  # scanner/reader errors, int() of 5,000 digits, ...
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise InvalidObject(field, f"not valid YAML/JSON: {shorten(message, 120)}") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_json(text: str, *, field: str, max_bytes: int, max_depth: int = 8) -> Any:
    """The JSON value in ``text``, at most ``max_bytes`` of UTF-8 and ``max_depth`` levels
    deep. Raises InvalidObject for ``field``."""
    _check_size(text, field, max_bytes)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidObject(field, f"not valid JSON: {shorten(exc, 120)}") from None
    if too_deep(value, max_depth):
        raise InvalidObject(field, f"nested deeper than {max_depth} levels")
    return value


def too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` (decoded JSON: dicts, lists, scalars) nests more than ``limit``
    levels (a scalar is 0 levels, ``{}`` and ``[]`` are 1)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list | tuple):
            children = node
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def json_size(value: Any, limit: int) -> int:
    """The size in bytes of ``value`` serialised as compact JSON (UTF-8), counted without
    recursion; counting stops once it exceeds ``limit`` (the result is then > ``limit``)."""
    total = 0
    stack: list[Any] = [value]
    while stack and total <= limit:
        node = stack.pop()
        if isinstance(node, dict):
            total += 2 + max(len(node) - 1, 0)  # {} and commas
            for key, child in node.items():
                total += len(json.dumps(str(key), ensure_ascii=False).encode()) + 1  # "k":
                stack.append(child)
        elif isinstance(node, list | tuple):
            total += 2 + max(len(node) - 1, 0)
            stack.extend(node)
        else:
            total += len(json.dumps(node, ensure_ascii=False, default=str).encode())
    return total
