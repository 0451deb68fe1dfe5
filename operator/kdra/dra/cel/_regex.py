"""Regular expressions for selectors: RE2, as cel-go and Go's ``regexp`` use.

RE2 matches in time linear in the input (no backtracking), so a hostile pattern in a claim
cannot stall the allocator. google-re2's ``re2`` module wraps the C++ engine in a pure-Python
``re``-compatible layer that costs about 30 µs per call (it re-derives character offsets in
Python); this module calls the engine object (``re2._re2.RE2``) directly, on UTF-8 bytes, for
about 1 µs, which keeps a selector with ``matches``/``find`` near the cost of the others.

Invariants:

* Compiled patterns are cached per pattern text (:func:`compile_regex`); a pattern that does
  not compile raises :class:`RegexError` with RE2's message.
* :meth:`Regex.find_all` follows Go's ``FindAllString``: successive non-overlapping leftmost
  matches, an empty match right after a previous match skipped, at most ``limit`` (all when
  negative).
"""

from __future__ import annotations

import functools
from typing import Final

import re2  # type: ignore[import-untyped]
from re2 import _re2

__all__ = ["Regex", "RegexError", "compile_regex"]

_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False
_UNANCHORED: Final = _re2.RE2.Anchor.UNANCHORED
_NO_MATCH: Final = (-1, -1)


class RegexError(ValueError):
    """A pattern RE2 does not accept."""


class Regex:
    """One compiled pattern."""

    __slots__ = ("_engine",)

    def __init__(self, pattern: str) -> None:
        engine = _re2.RE2(pattern.encode("utf-8"), _OPTIONS)
        if not engine.ok():
            raise RegexError(engine.error().decode("utf-8", "replace"))
        self._engine = engine

    def _first(self, data: bytes, start: int) -> tuple[int, int]:
        span: tuple[int, int] = self._engine.Match(_UNANCHORED, data, start, len(data))[0]
        return span

    def search(self, text: str) -> bool:
        """Whether the pattern matches anywhere in ``text``."""
        return self._first(text.encode("utf-8"), 0) != _NO_MATCH

    def find(self, text: str) -> str:
        """The leftmost match, or "" (Go's ``FindString``)."""
        data = text.encode("utf-8")
        start, end = self._first(data, 0)
        return "" if start < 0 else data[start:end].decode("utf-8")

    def find_all(self, text: str, limit: int) -> list[str]:
        """Go's ``FindAllString(text, limit)``."""
        data = text.encode("utf-8")
        found: list[str] = []
        pos, previous_end = 0, -1
        while pos <= len(data) and (limit < 0 or len(found) < limit):
            start, end = self._first(data, pos)
            if start < 0:
                break
            accept = True
            if end == pos:  # an empty match where the search started
                accept = start != previous_end  # not right after a previous match
                pos += _rune_width(data, pos)
            else:
                pos = end
            previous_end = end
            if accept:
                found.append(data[start:end].decode("utf-8"))
        return found


def _rune_width(data: bytes, pos: int) -> int:
    """Bytes in the UTF-8 sequence at ``pos`` (1 past the end, as Go steps)."""
    if pos >= len(data):
        return 1
    lead = data[pos]
    return 1 if lead < 0x80 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: str) -> Regex:
    return Regex(pattern)
