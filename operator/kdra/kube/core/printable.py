"""Strings from the cluster made safe to show: on a terminal, in an Event, in a condition, in
a log line.

Anything a user or a node agent writes can reach a person's terminal through kdra: a
tenant's CEL literal in ``kubectl kdra why``, an agent's ``productName`` in ``kdra
describe``, a claim name in a ``PodScheduled`` message that ``kubectl describe pod`` prints,
an API error in the operator's log. A terminal obeys the control sequences in what it prints:
``ESC ] 0 ;`` retitles the window, ``ESC [ 2 J`` clears it, ``ESC ] 52`` writes the
clipboard, ``ESC [ 8 m`` hides the text that follows, a carriage return overprints a line,
and Unicode's bidirectional overrides make text read differently from what it is. So every
string from the cluster goes through :func:`printable` at the edge where kdra shows it (the
command-line views' tables and lines, ``kdra check``, the Event recorder, the binder's
conditions, the log formatter): each such character is replaced by its visible escape
(``\\x1b``, ``\\r``, ``\\u202e``), so what is shown also says what is there, and the result is
cut to a bounded length.

Escaped: the C0 and C1 control characters and DEL (category Cc: ESC, BEL, CR, BS, NUL ...),
format characters (Cf: bidirectional embeddings, overrides and isolates, zero-width
characters, tag characters), lone surrogates (Cs: they cannot even be encoded for output) and
the line and paragraph separators (Zl, Zp). Kept: every other character, including non-ASCII
letters, private-use and not-yet-assigned code points, and (with ``lines=True``, for text
kdra composed of whole lines) newlines and tabs.

Invariants:
- ``printable(text)`` holds no character of the escaped categories (with ``lines=True``: none
  but ``\\n`` and ``\\t``) and at most ``limit`` characters; an escape is never cut in half.
- Idempotent: what :func:`printable` returns passes through it unchanged (escapes are
  printable ASCII, and a cut result already fits its limit).
- Total and cheap: any object is shown through ``str()``; a string with nothing to escape
  costs one ``str.isprintable`` scan.
"""

from __future__ import annotations

import logging
import unicodedata

__all__ = ["MAX_LINE", "MAX_VALUE", "PrintableFormatter", "printable"]

MAX_VALUE = 1024
"""Characters of one value (a table cell, a name, a selector) as shown."""
MAX_LINE = 4096
"""Characters of one composed line or message (a condition, a ``kdra check`` violation)."""
ELLIPSIS = "..."
_ESCAPED = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    code = ord(char)
    if char in _SHORT:
        return _SHORT[char]
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: object, limit: int | None = MAX_VALUE, *, lines: bool = False) -> str:
    """``text`` (``str()`` of it) with every control, format, surrogate and separator
    character replaced by its visible escape, cut to ``limit`` characters (None: no cut)
    and then ending in ``...``. ``lines``: keep newlines and tabs (text that kdra laid out
    in lines itself, whose values were made printable already)."""
    value = text if isinstance(text, str) else str(text)
    over = limit is not None and len(value) > limit
    head = value[: limit + 1] if over and limit is not None else value  # enough to fill it
    if head.isprintable():
        pieces: list[str] | str = head
    else:
        pieces = [char if char.isprintable() or (lines and char in "\n\t")
                  or unicodedata.category(char) not in _ESCAPED else _escape(char)
                  for char in head]
    if limit is not None and (over or sum(map(len, pieces)) > limit):
        return _cut(pieces, limit)
    return pieces if isinstance(pieces, str) else "".join(pieces)


def _cut(pieces: list[str] | str, limit: int) -> str:
    """The leading whole pieces that fit ``limit`` with the ellipsis after them."""
    room = max(limit - len(ELLIPSIS), 0)
    kept: list[str] = []
    used = 0
    for piece in pieces:
        if used + len(piece) > room:
            break
        kept.append(piece)
        used += len(piece)
    return "".join(kept) + ELLIPSIS[: limit - used]


class PrintableFormatter(logging.Formatter):
    """A log formatter whose lines hold no control sequences: the formatted record
    (message and traceback) through :func:`printable`, newlines and tabs kept."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record), None, lines=True)
