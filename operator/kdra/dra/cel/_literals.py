"""The values of CEL literals: string and bytes escapes, integer bases.

Invariants:

* Decoding is total: a literal the grammar accepted either yields its value or raises
  ``ValueError`` with a message for the user (bad escape, invalid code point).
* In strings, ``\\xHH`` and octal escapes are code points; in bytes, byte values (as in
  cel-go).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["decode_literal", "int_literal"]

# One piece of a quoted literal: a run of plain characters, an escape, or a stray backslash.
_PIECE: Final = re.compile(
    r"""[^\\]+|\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2}|[abfnrtv?`"'\\])|\\""",
    re.DOTALL,
)
_SIMPLE_ESCAPES: Final = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "?": "?", "`": "`", '"': '"', "'": "'", "\\": "\\",
}  # fmt: skip


def decode_literal(text: str) -> str | bytes:
    """The value of a string or bytes literal (CEL escapes; ``r`` raw, ``b`` bytes prefixes).

    In strings, ``\\xHH`` and octal escapes are code points; in bytes, byte values.
    """
    prefix_end = min(i for i in (text.find('"'), text.find("'")) if i >= 0)
    prefix, quoted = text[:prefix_end].lower(), text[prefix_end:]
    quote = 3 if quoted[:3] in ('"""', "'''") else 1
    body = quoted[quote:-quote]
    is_bytes, raw = "b" in prefix, "r" in prefix
    if raw:
        return body.encode("utf-8") if is_bytes else body
    chunks: list[bytes] = []
    for match in _PIECE.finditer(body):
        piece, escape = match.group(0), match.group(1)
        if escape is None:
            if piece == "\\":
                raise ValueError("invalid escape sequence in literal")
            chunks.append(piece.encode("utf-8"))
        elif escape[0] in "xuU" or escape[0].isdigit():
            number = int(escape, 8) if escape[0].isdigit() else int(escape[1:], 16)
            if is_bytes and escape[0] in "x01234567":
                chunks.append(bytes((number,)))
            elif number > 0x10FFFF or 0xD800 <= number <= 0xDFFF:
                raise ValueError(f"invalid code point \\{escape} in literal")
            else:
                chunks.append(chr(number).encode("utf-8"))
        else:
            chunks.append(_SIMPLE_ESCAPES[escape].encode("utf-8"))
    data = b"".join(chunks)
    if is_bytes:
        return data
    return data.decode("utf-8")  # code points were encoded as UTF-8 above


def int_literal(text: str) -> int:
    negative = text.startswith("-")
    body = text[1:] if negative else text
    value = int(body[2:], 16) if body[:2].lower() == "0x" else int(body, 10)
    return -value if negative else value
