"""``<string>.format(<list>)``: printf-style formatting of cel-go's strings extension (v1-3).

Clauses: ``%s`` (any value; lists and maps in CEL syntax, map keys sorted), ``%d``
(integers), ``%f`` and ``%e`` (doubles, or the strings ``"NaN"``, ``"Infinity"``,
``"-Infinity"``; ``%.3f`` sets a precision), ``%b`` (integers, bools), ``%x``/``%X``
(integers, strings, bytes), ``%o`` (integers) and ``%%``.

Invariants:

* Errors are cel-go's: "index 1 out of range" when arguments run out, "could not parse
  formatting clause: unrecognized formatting clause \\"q\\"", "error during formatting:
  decimal clause can only be used on integers, was given string".
* ``%f`` prints as version 2 of the library does in its en-US locale: thousands grouped
  with commas ("1,234.500000"), infinities as the infinity sign; ``%e`` prints the locale's
  notation (mantissa, a multiplication sign, 10 with a superscript exponent; the precision
  is ignored, as upstream ignores it).
"""

from __future__ import annotations

import math
from typing import Any, Final

from ._lib_strings import go_quote
from ._rt_core import EvalError, no_overload
from ._rt_std import g_string
from ._values import MAP_TYPES, CelType, Uint, type_name

__all__ = ["FUNCTIONS"]

_DEFAULT_PRECISION: Final = 6
_SUPERSCRIPTS: Final = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_SPECIAL_DOUBLES: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


class _FormatError(Exception):
    pass


def _kind(value: Any) -> str:
    kind = type(value)
    if kind in MAP_TYPES:
        return "map"
    return type_name(value)


def _string_clause(value: Any) -> str:
    kind = type(value)
    if kind is list:
        return "[" + ", ".join(_quoted(item, _element_clause(item)) for item in value) + "]"
    if kind in MAP_TYPES:
        pairs = []
        for key, item in value.items():
            if type(key) not in (str, bool, int, Uint):
                raise _FormatError(f"no formatting function for map key of type {_kind(key)}")
            key_text = _quoted(key, _string_clause(key) if type(key) in (str, bool) else str(key))
            pairs.append((key_text, _quoted(item, _element_clause(item))))
        pairs.sort(key=lambda pair: pair[0])
        return "{" + ", ".join(f"{k}:{v}" for k, v in pairs) + "}"
    if value is None:
        return "null"
    if kind is CelType:
        return str(value.name)
    if kind in (int, Uint, float, bool, str, bytes):
        return g_string(value)
    raise _FormatError(
        "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, "
        f"types, durations, and timestamps, was given {_kind(value)}"
    )


def _element_clause(value: Any) -> str:
    """How list and map elements print (cel-go's clauseForType)."""
    kind = type(value)
    if kind is float:
        return f"{value:.{_DEFAULT_PRECISION}f}"
    if kind is CelType:
        return f"type({value.name})"
    if kind in (int, Uint):
        return str(int(value))
    return _string_clause(value)


def _quoted(value: Any, text: str) -> str:
    kind = type(value)
    if kind is str:
        return go_quote(text)
    if kind is bytes:
        return "b" + go_quote(text)
    if kind is float and not math.isfinite(value):
        return go_quote(text)
    return text


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


def _radix(value: Any, clause: str) -> str:
    kind = type(value)
    if clause == "b" and kind is bool:
        return "1" if value else "0"
    if clause in "xX" and kind in (str, bytes):
        data = value.encode("utf-8") if kind is str else value
        text: str = data.hex()
        return text.upper() if clause == "X" else text
    if kind not in (int, Uint):
        what = {
            "b": "only integers and bools can be formatted as binary",
            "o": "octal clause can only be used on integers",
        }.get(clause, "only integers, byte buffers, and strings can be formatted as hex")
        raise _FormatError(f"{what}, was given {_kind(value)}")
    number = int(value)
    spec = {"b": "b", "o": "o", "x": "x", "X": "X"}[clause]
    return ("-" if number < 0 else "") + format(abs(number), spec)


def _clause(text: str, value: Any) -> tuple[int, str]:
    """Format one clause (``text`` starts after the ``%``); returns (characters read, result)."""
    i = 0
    precision: int | None = None
    if text[:1] == ".":
        i = 1
        while i < len(text) and text[i].isascii() and text[i].isdigit():
            i += 1
        if i >= len(text):
            raise EvalError(
                "could not parse formatting clause: error while parsing precision: "
                "could not find end of precision specifier"
            )
        precision = int(text[1:i]) if i > 1 else None
        if precision is None:
            raise EvalError(
                "could not parse formatting clause: error while parsing precision: error while "
                'converting precision to integer: strconv.Atoi: parsing "": invalid syntax'
            )
    verb = text[i]
    try:
        if verb == "s":
            result = _string_clause(value)
        elif verb == "d":
            result = str(_integer(value, "decimal clause"))
        elif verb == "f":
            result = _fixed(value, precision)
        elif verb == "e":
            result = _scientific(value)
        elif verb in "bxXo":
            result = _radix(value, verb)
        else:
            raise EvalError(
                f'could not parse formatting clause: unrecognized formatting clause "{verb}"'
            )
    except _FormatError as exc:
        raise EvalError(f"error during formatting: {exc}") from None
    return i + 1, result


def m_format(template: Any, args: Any) -> str:
    if type(template) is not str or type(args) is not list:
        raise no_overload("format", template, args)
    out: list[str] = []
    i = used = 0
    while i < len(template):
        char = template[i]
        if char != "%":
            out.append(char)
            i += 1
            continue
        if template[i + 1 : i + 2] == "%":
            out.append("%")
            i += 2
            continue
        if used >= len(args):
            raise EvalError(f"index {used} out of range")
        if i + 1 >= len(template):
            raise EvalError("unexpected end of string")
        read, text = _clause(template[i + 1 :], args[used])
        out.append(text)
        i += 1 + read
        used += 1
    return "".join(out)


FUNCTIONS: Final[dict[str, object]] = {"m_format": m_format}
