"""Standard CEL functions: size, string tests, regular expressions, type conversions.

Invariants:

* Each function checks its arguments' run-time types (attribute values are only typed at
  run time) and raises a CEL error (``_rt_core``) for an overload that does not exist.
* Regular expressions are RE2 (google-re2), as in cel-go; compiled patterns are cached,
  and a bad pattern is a CEL error naming it.
* ``string(double)`` prints like Go's ``strconv.FormatFloat(v, 'g', -1, 64)``.
"""

from __future__ import annotations

import math
from typing import Any, Final

from ._regex import Regex, RegexError, compile_regex
from ._rt_core import EvalError, check_int, check_uint, no_overload
from ._values import (
    MAP_TYPES,
    CelType,
    CIDRValue,
    IPAddress,
    Uint,
    type_name,
)

__all__ = ["FUNCTIONS", "format_double", "regex", "strings"]


def g_size(value: Any) -> int:
    kind = type(value)
    if kind is str or kind is bytes or kind is list or kind in MAP_TYPES:
        return len(value)
    raise no_overload("size", value)


def strings(op: str, a: Any, b: Any) -> tuple[str, str]:
    if type(a) is str and type(b) is str:
        return a, b
    raise no_overload(op, a, b)


def m_contains(a: Any, b: Any) -> bool:
    text, part = strings("contains", a, b)
    return part in text


def m_startsWith(a: Any, b: Any) -> bool:
    text, part = strings("startsWith", a, b)
    return text.startswith(part)


def m_endsWith(a: Any, b: Any) -> bool:
    text, part = strings("endsWith", a, b)
    return text.endswith(part)


def regex(pattern: str) -> Regex:
    """The compiled pattern; a CEL error naming it when RE2 refuses it."""
    try:
        return compile_regex(pattern)
    except RegexError as exc:
        raise EvalError(f"invalid regular expression {pattern!r}: {exc}") from None


def g_matches(a: Any, b: Any) -> bool:
    text, pattern = strings("matches", a, b)
    return regex(pattern).search(text)


def g_int(value: Any) -> int:
    kind = type(value)
    if kind is int:
        return value  # type: ignore[no-any-return]
    if kind is Uint:
        return check_int(int(value))
    if kind is float:
        if math.isfinite(value) and -(2.0**63) <= value < 2.0**63:
            return int(value)
        raise EvalError("double is out of int range")
    if kind is str:
        return check_int(_parse_integer(value, signed=True))
    raise no_overload("int", value)


def g_uint(value: Any) -> Uint:
    kind = type(value)
    if kind is Uint:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return check_uint(value)
    if kind is float:
        if math.isfinite(value) and 0.0 <= value < 2.0**64:
            return Uint(int(value))
        raise EvalError("double is out of uint range")
    if kind is str:
        return check_uint(_parse_integer(value, signed=False))
    raise no_overload("uint", value)


def _parse_integer(text: str, signed: bool) -> int:
    body = text[1:] if signed and text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        raise EvalError(f"cannot parse {text!r} as an integer")
    return int(text)


def g_double(value: Any) -> float:
    kind = type(value)
    if kind is float:
        return value  # type: ignore[no-any-return]
    if kind is int or kind is Uint:
        return float(value)
    if kind is str:
        if value.strip() != value or "_" in value:
            raise EvalError(f"cannot parse {value!r} as a double")
        try:
            return float(value)
        except ValueError:
            raise EvalError(f"cannot parse {value!r} as a double") from None
    raise no_overload("double", value)


def g_string(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return value  # type: ignore[no-any-return]
    if kind is int or kind is Uint:
        return str(int(value))
    if kind is float:
        return format_double(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is bytes:
        try:
            return value.decode("utf-8")  # type: ignore[no-any-return]
        except UnicodeDecodeError:
            raise EvalError("invalid UTF-8 in bytes") from None
    if kind is IPAddress:
        return str(value.address)
    if kind is CIDRValue:
        return f"{value.address}/{value.bits}"
    raise no_overload("string", value)


def format_double(value: float) -> str:
    """Like Go's ``strconv.FormatFloat(value, 'g', -1, 64)``, which cel-go's string() uses."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if value == 0.0:
        return sign + "0"
    # repr() gives the shortest digits that read back to the same float, as Go's -1 does.
    digits, exponent = _digits_of(repr(abs(value)))
    decimal_exponent = exponent + len(digits) - 1
    if decimal_exponent < -4 or decimal_exponent >= 6:  # Go's 'g' rule for shortest output
        tail = digits[1:]
        body = digits[0] + ("." + tail if tail else "")
        exp_sign = "-" if decimal_exponent < 0 else "+"
        return f"{sign}{body}e{exp_sign}{abs(decimal_exponent):02d}"
    point = len(digits) + exponent  # digits before the decimal point
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _digits_of(text: str) -> tuple[str, int]:
    """Significant digits and exponent of a positive float's repr: '1.5e-07' -> ('15', -8)."""
    mantissa, _, exp_text = text.partition("e")
    exponent = int(exp_text) if exp_text else 0
    whole, _, fraction = mantissa.partition(".")
    exponent -= len(fraction)
    digits = (whole + fraction).lstrip("0")
    stripped = digits.rstrip("0")
    exponent += len(digits) - len(stripped)
    return stripped, exponent


def g_bool(value: Any) -> bool:
    kind = type(value)
    if kind is bool:
        return value  # type: ignore[no-any-return]
    if kind is str:
        if value in ("true", "True", "TRUE", "t", "T", "1"):
            return True
        if value in ("false", "False", "FALSE", "f", "F", "0"):
            return False
        raise EvalError(f"cannot parse {value!r} as a bool")
    raise no_overload("bool", value)


def g_bytes(value: Any) -> bytes:
    kind = type(value)
    if kind is bytes:
        return value  # type: ignore[no-any-return]
    if kind is str:
        return value.encode("utf-8")  # type: ignore[no-any-return]
    raise no_overload("bytes", value)


def g_dyn(value: Any) -> Any:
    return value


def g_type(value: Any) -> CelType:
    kind = type(value)
    if kind in MAP_TYPES:
        return CelType("map")
    return CelType(type_name(value))


m_size = g_size
m_matches = g_matches

FUNCTIONS: Final[dict[str, object]] = {
    name: value for name, value in globals().items() if name.startswith(("g_", "m_"))
}
