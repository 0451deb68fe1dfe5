"""cel-go's strings extension (version 2) and Kubernetes' regex library.

``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``,
``split``, ``substring``, ``trim``, ``join``, ``strings.quote`` (``format`` is in
``_lib_strfmt``), and ``find``/``findAll``. ``indexOf``/``lastIndexOf`` on a list (Kubernetes'
lists library) share their names with the string functions, so they are dispatched here.

Invariants:

* Positions count Unicode code points, as cel-go counts runes; errors are cel-go's ("index
  out of range: 5", "invalid substring range. start: 2, end: 1").
* ``replace`` and ``split`` follow Go's ``strings.Replace``/``strings.SplitN`` (an empty
  separator splits between characters, a limit of 0 gives nothing, a negative limit
  everything); ``trim`` removes what Go's ``unicode.IsSpace`` calls space.
* ``find``/``findAll`` use RE2 like Go's ``regexp`` (leftmost-first, non-overlapping).
"""

from __future__ import annotations

from typing import Any, Final

from ._rt_core import EvalError, equal, no_overload
from ._rt_std import regex

__all__ = ["FUNCTIONS", "go_quote"]

# Go's unicode.IsSpace.
_GO_SPACE: Final = (
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _string(op: str, value: Any, *rest: Any) -> str:
    if type(value) is not str:
        raise no_overload(op, value, *rest)
    return value  # type: ignore[no-any-return]


def _int_arg(op: str, value: Any, *others: Any) -> int:
    if type(value) is not int:
        raise no_overload(op, *others, value)
    return value  # type: ignore[no-any-return]


def m_charAt(text: Any, position: Any) -> str:
    s = _string("charAt", text, position)
    i = _int_arg("charAt", position, text)
    if i < 0 or i > len(s):
        raise EvalError(f"index out of range: {i}")
    return s[i] if i < len(s) else ""


def _list_index(items: list[Any], item: Any, last: bool) -> int:
    positions = range(len(items) - 1, -1, -1) if last else range(len(items))
    for i in positions:
        if equal(items[i], item):
            return i
    return -1


def m_indexOf(target: Any, part: Any, offset: Any = 0) -> int:
    if type(target) is list:
        return _list_index(target, part, last=False)
    s = _string("indexOf", target, part)
    sub = _string("indexOf", part, target)
    start = _int_arg("indexOf", offset, target, part)
    if sub == "":
        return start
    if start < 0:
        raise EvalError(f"index out of range: {start}")
    if start >= len(s):
        return -1
    return s.find(sub, start)


def m_lastIndexOf(target: Any, part: Any, *offset: Any) -> int:
    if type(target) is list:
        return _list_index(target, part, last=True)
    s = _string("lastIndexOf", target, part)
    sub = _string("lastIndexOf", part, target)
    if not offset:
        if sub == "":
            return len(s)
        if len(s.encode("utf-8", "surrogatepass")) < len(sub.encode("utf-8", "surrogatepass")):
            return -1
        return m_lastIndexOf(s, sub, len(s) - 1)
    end = _int_arg("lastIndexOf", offset[0], target, part)
    if sub == "":
        return end
    if end < 0:
        raise EvalError(f"index out of range: {end}")
    if end >= len(s):
        return -1
    end = min(end, len(s) - len(sub))
    if end < 0:
        return -1
    return s.rfind(sub, 0, end + len(sub))


def _ascii_case(text: str, upper: bool) -> str:
    table = _UPPER if upper else _LOWER
    return text.translate(table)


_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UPPER: Final = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def m_lowerAscii(text: Any) -> str:
    return _ascii_case(_string("lowerAscii", text), upper=False)


def m_upperAscii(text: Any) -> str:
    return _ascii_case(_string("upperAscii", text), upper=True)


def m_trim(text: Any) -> str:
    return _string("trim", text).strip(_GO_SPACE)


def m_replace(text: Any, old: Any, new: Any, limit: Any = -1) -> str:
    s = _string("replace", text, old, new)
    o = _string("replace", old, text, new)
    n = _string("replace", new, text, old)
    count = _int_arg("replace", limit, text, old, new)
    return s.replace(o, n, count if count >= 0 else -1)


def m_split(text: Any, separator: Any, limit: Any = -1) -> list[str]:
    s = _string("split", text, separator)
    sep = _string("split", separator, text)
    n = _int_arg("split", limit, text, separator)
    if n == 0:
        return []
    if sep == "":
        chars = list(s)
        if n < 0 or n >= len(chars):
            return chars
        return [*chars[: n - 1], "".join(chars[n - 1 :])]
    return s.split(sep) if n < 0 else s.split(sep, n - 1)


def m_substring(text: Any, start: Any, *end: Any) -> str:
    s = _string("substring", text, start)
    first = _int_arg("substring", start, text)
    last = _int_arg("substring", end[0], text, start) if end else len(s)
    if first > last:
        raise EvalError(f"invalid substring range. start: {first}, end: {last}")
    if first < 0 or first > len(s):
        raise EvalError(f"index out of range: {first}")
    if last < 0 or last > len(s):
        raise EvalError(f"index out of range: {last}")
    return s[first:last]


def m_join(items: Any, separator: Any = "") -> str:
    if type(items) is not list:
        raise no_overload("join", items)
    sep = _string("join", separator, items)
    for item in items:
        if type(item) is not str:
            raise EvalError(f"join: invalid input: {item!r}")
    return sep.join(items)


_QUOTE_ESCAPES: Final = {
    "\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
    "\v": "\\v", "\\": "\\\\", '"': '\\"',
}  # fmt: skip


def g_strings_quote(text: Any) -> str:
    s = _string("strings.quote", text)
    out = []
    for char in s:
        if 0xD800 <= ord(char) <= 0xDFFF:
            char = "\ufffd"  # an invalid rune becomes utf8.RuneError
        out.append(_QUOTE_ESCAPES.get(char, char))
    return '"' + "".join(out) + '"'


def go_quote(text: str) -> str:
    """Go's ``%q`` (``strconv.Quote``) of a string."""
    out = []
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif char in _QUOTE_ESCAPES:
            out.append(_QUOTE_ESCAPES[char])
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def m_find(text: Any, pattern: Any) -> str:
    s = _string("find", text, pattern)
    p = _string("find", pattern, text)
    return regex(p).find(s)


def m_findAll(text: Any, pattern: Any, limit: Any = -1) -> list[str]:
    s = _string("findAll", text, pattern)
    p = _string("findAll", pattern, text)
    return regex(p).find_all(s, _int_arg("findAll", limit, text, pattern))


FUNCTIONS: Final[dict[str, object]] = {
    name: value for name, value in globals().items() if name.startswith(("g_", "m_"))
}
