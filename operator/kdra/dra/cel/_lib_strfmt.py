"""``<string>.format(<list>)``: printf-style formatting of cel-go's strings extension (v1-3).

Clauses: ``%s`` (any value; lists and maps in CEL syntax, map keys sorted), ``%d``
(integers), ``%f`` and ``%e`` (doubles, or the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"``; ``%.3f`` sets a precision), ``%b`` (integers, bools), ``%x``/``%X``
(integers, strings, bytes), ``%o`` (integers) and ``%%``.

Invariants:

* Errors are cel-go's: "index 1 out of range" when arguments run out, "could not parse
  formatting clause: unrecognized formatting clause \\"q\\"", "error during formatting:
  decimal clause can only be used on integers, was given string".
* The result is built within a limit (:func:`format_within`; :data:`COST_LIMIT` characters
  for :func:`m_format`): a clause never renders more than what is left, so a list repeated
  through shared references cannot make a huge text before being refused
  (:class:`BudgetExceeded`). Precision is at most 100 digits (cel-go's limit since version
  5 of the extension): ``%.1000000f`` is an error, not a megabyte.
* ``%f`` prints as version 2 of the library does in its en-US locale: thousands grouped
  with commas ("1,234.500000"), infinities as the infinity sign; ``%e`` prints the locale's
  notation (mantissa, a multiplication sign, 10 with a superscript exponent; the precision
  is ignored, as upstream ignores it).
"""

from __future__ import annotations

import math
from typing import Any, Final

from ._lib_strings import go_quote
from ._rt_core import COST_LIMIT, BudgetExceeded, EvalError, no_overload
from ._rt_std import g_string
from ._values import MAP_TYPES, CelType, Uint, type_name

__all__ = ["FUNCTIONS", "format_within"]

_DEFAULT_PRECISION: Final = 6
_MAX_PRECISION: Final = 100  # cel-go's strings extension, version 5
_QUOTE_CHUNK: Final = 4096
_SUPERSCRIPTS: Final = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_SPECIAL_DOUBLES: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class _FormatError(Exception):
    pass


class _Out:
    """The text being built, refused (:class:`BudgetExceeded`) once it would pass ``limit``
    characters: a clause never renders more than what is left (lists and maps are written
    element by element, long strings quoted in chunks)."""

    __slots__ = ("limit", "parts", "size")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[str] = []
        self.size = 0

    def room(self, count: int) -> None:
        """Refuse now if ``count`` more characters would not fit."""
        if self.size + count > self.limit:
            raise BudgetExceeded

    def add(self, text: str) -> None:
        self.room(len(text))
        self.size += len(text)
        self.parts.append(text)

    def grow(self, count: int) -> None:
        """Count ``count`` characters that :meth:`take`'s caller adds itself."""
        self.room(count)
        self.size += count

    def take(self, mark: int) -> str:
        """The text added since ``mark`` (a length of :attr:`parts`), removed from the
        parts but still counted in :attr:`size`."""
        text = "".join(self.parts[mark:])
        del self.parts[mark:]
        return text


def _kind(value: Any) -> str:
    kind = type(value)
    if kind in MAP_TYPES:
        return "map"
    return type_name(value)


def _string_clause(value: Any, out: _Out) -> None:
    """``%s``: lists and maps in CEL syntax (map entries sorted by their key's text)."""
    kind = type(value)
    if kind is list:
        out.add("[")
        for i, item in enumerate(value):
            if i:
                out.add(", ")
            _element_clause(item, out)
        out.add("]")
    elif kind in MAP_TYPES:
        _map_clause(value, out)
    elif value is None:
        out.add("null")
    elif kind is CelType:
        out.add(str(value.name))
    elif kind in (int, Uint, float, bool, str, bytes):
        if kind is bytes:
            out.room(len(value) // 4)  # decoding: at least a character per 4 bytes
        out.add(g_string(value))
    else:
        raise _FormatError(
            "string clause can only be used on strings, bools, bytes, ints, doubles, maps, "
            f"lists, types, durations, and timestamps, was given {_kind(value)}"
        )


def _map_clause(value: Any, out: _Out) -> None:
    pairs = []
    for key, item in value.items():
        if type(key) not in (str, bool, int, Uint):
            raise _FormatError(f"no formatting function for map key of type {_kind(key)}")
        mark = len(out.parts)
        if type(key) is str:
            _quoted(key, out)
        elif type(key) is bool:
            out.add(g_string(key))
        else:
            out.add(str(key))
        key_text = out.take(mark)
        _element_clause(item, out)
        pairs.append((key_text, out.take(mark)))
    pairs.sort(key=lambda pair: pair[0])
    out.grow(2 + len(pairs) + 2 * max(len(pairs) - 1, 0))  # braces, colons, separators
    out.parts.append("{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}")


def _element_clause(value: Any, out: _Out) -> None:
    """How list and map elements print (cel-go's clauseForType): strings and bytes quoted,
    doubles with the default precision (quoted when not finite), types as ``type(...)``."""
    kind = type(value)
    if kind is str:
        _quoted(value, out)
    elif kind is bytes:
        out.room(len(value) // 4 + 3)
        out.add("b")
        _quoted(g_string(value), out)
    elif kind is float:
        text = f"{value:.{_DEFAULT_PRECISION}f}"
        out.add(text if math.isfinite(value) else go_quote(text))
    elif kind is CelType:
        out.add(f"type({value.name})")
    elif kind in (int, Uint):
        out.add(str(int(value)))
    else:
        _string_clause(value, out)


def _quoted(text: str, out: _Out) -> None:
    """Go's ``%q`` of ``text``, quoted a chunk at a time (escapes make it up to 10 times
    longer than ``text``; no chunk's quoting can overshoot the limit by more than that)."""
    out.room(len(text) + 2)
    out.add('"')
    for start in range(0, len(text), _QUOTE_CHUNK):
        out.add(go_quote(text[start : start + _QUOTE_CHUNK])[1:-1])
    out.add('"')


def _integer(value: Any, what: str) -> int:
    if type(value) in (int, Uint):
        return int(value)
    raise _FormatError(f"{what} can only be used on integers, was given {_kind(value)}")


def _double(value: Any, what: str) -> float:
    if type(value) is float:
        return value  # type: ignore[no-any-return]
    if type(value) is str and value in _SPECIAL_DOUBLES:
        return _SPECIAL_DOUBLES[value]
    raise _FormatError(f"{what} clause can only be used on doubles, was given {_kind(value)}")


def _fixed(value: Any, precision: int | None) -> str:
    number = _double(value, "fixed-point")
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    return f"{number:,.{_DEFAULT_PRECISION if precision is None else precision}f}"


def _scientific(value: Any) -> str:
    number = _double(value, "scientific")
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "∞" if number > 0 else "-∞"
    mantissa, _, exponent = f"{number:.{_DEFAULT_PRECISION}e}".partition("e")
    sign = "-" if exponent.startswith("-") else ""
    digits = exponent.lstrip("+-").rjust(2, "0")
    return f"{mantissa}\u202f\u00d7\u202f10{(sign + digits).translate(_SUPERSCRIPTS)}"


def _radix(value: Any, clause: str, out: _Out) -> None:
    kind = type(value)
    if clause == "b" and kind is bool:
        out.add("1" if value else "0")
        return
    if clause in "xX" and kind in (str, bytes):
        out.room(2 * len(value))  # at least two hex digits per character or byte
        data = value.encode("utf-8") if kind is str else value
        out.room(2 * len(data))
        text: str = data.hex()
        out.add(text.upper() if clause == "X" else text)
        return
    if kind not in (int, Uint):
        what = {
            "b": "only integers and bools can be formatted as binary",
            "o": "octal clause can only be used on integers",
        }.get(clause, "only integers, byte buffers, and strings can be formatted as hex")
        raise _FormatError(f"{what}, was given {_kind(value)}")
    number = int(value)
    spec = {"b": "b", "o": "o", "x": "x", "X": "X"}[clause]
    out.add(("-" if number < 0 else "") + format(abs(number), spec))


def _precision(template: str, start: int) -> tuple[int, int | None]:
    """The precision of the clause at ``start`` (after the ``%``), if any, and where the
    verb is."""
    if template[start : start + 1] != ".":
        return start, None
    i = start + 1
    while i < len(template) and template[i].isascii() and template[i].isdigit():
        i += 1
    if i >= len(template):
        raise EvalError(
            "could not parse formatting clause: error while parsing precision: "
            "could not find end of precision specifier"
        )
    if i == start + 1:
        raise EvalError(
            "could not parse formatting clause: error while parsing precision: error while "
            'converting precision to integer: strconv.Atoi: parsing "": invalid syntax'
        )
    digits = template[start + 1 : i]
    if len(digits) > 3 or int(digits) > _MAX_PRECISION:
        raise EvalError(
            "could not parse formatting clause: error while parsing precision: precision "
            f"{digits.lstrip('0') or '0'} exceeds maximum allowed precision {_MAX_PRECISION}"
        )
    return i, int(digits)


def _clause(template: str, start: int, value: Any, out: _Out) -> int:
    """Format the clause at ``start`` (after the ``%``) into ``out``; returns where the
    template goes on."""
    i, precision = _precision(template, start)
    verb = template[i]
    try:
        if verb == "s":
            _string_clause(value, out)
        elif verb == "d":
            out.add(str(_integer(value, "decimal clause")))
        elif verb == "f":
            out.add(_fixed(value, precision))
        elif verb == "e":
            out.add(_scientific(value))
        elif verb in "bxXo":
            _radix(value, verb, out)
        else:
            raise EvalError(
                f'could not parse formatting clause: unrecognized formatting clause "{verb}"'
            )
    except _FormatError as exc:
        raise EvalError(f"error during formatting: {exc}") from None
    return i + 1


def format_within(template: Any, args: Any, limit: int) -> str:
    """``template.format(args)``, refused with :class:`BudgetExceeded` before the result
    would pass ``limit`` characters."""
    if type(template) is not str or type(args) is not list:
        raise no_overload("format", template, args)
    out = _Out(limit)
    i = used = 0
    while i < len(template):
        percent = template.find("%", i)
        if percent < 0:
            out.add(template[i:])
            break
        if percent > i:
            out.add(template[i:percent])
        i = percent
        if template[i + 1 : i + 2] == "%":
            out.add("%")
            i += 2
            continue
        if used >= len(args):
            raise EvalError(f"index {used} out of range")
        if i + 1 >= len(template):
            raise EvalError("unexpected end of string")
        i = _clause(template, i + 1, args[used], out)
        used += 1
    return "".join(out.parts)


def m_format(template: Any, args: Any) -> str:
    return format_within(template, args, COST_LIMIT)


FUNCTIONS: Final[dict[str, object]] = {"m_format": m_format}
