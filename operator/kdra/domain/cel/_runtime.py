"""The operators, functions and methods that compiled selectors call.

Generated code (see ``_codegen``) looks every name up in :data:`NAMESPACE`, never in a
module's globals, so nothing is registered anywhere else. Values are the plain Python
values described in ``_values``.

Invariants:

* A CEL *error* is a raised exception from :data:`CEL_ERRORS`. Only the constructs that CEL
  lets absorb errors (``&&``, ``||``, ``all``, ``exists``) catch them; everything else lets
  them propagate to :meth:`DeviceSelector.matches`, which reports a
  :class:`~kdra.domain.errors.CelRuntimeError`.
* :class:`BudgetExceeded` is deliberately *not* in :data:`CEL_ERRORS`: running out of
  budget stops the evaluation even inside ``x || true``.
* Types are strict, as in CEL: no implicit conversions, ``1 + 1.0`` and ``"a" < 1`` are
  errors, ``true == 1`` is false, int arithmetic is checked against int64 (uint64).
* Equality follows upstream, quirks included: values of different types are unequal,
  except that int/uint/double compare numerically; a semver compared with anything but a
  semver is an error (upstream's ``Semver.Equal``), a quantity compared with a non-quantity
  is false (upstream's ``Quantity.Equal``). ``in`` on a list asks each *element*, like
  cel-go.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any, Final, NoReturn

import re2  # type: ignore[import-untyped]

from kdra.domain.quantity import InvalidQuantity, Quantity, parse_quantity
from kdra.domain.semver import InvalidVersion, Version, parse_version

from ._values import EMPTY_MAP, MAP_TYPES, CelDevice, DomainMap, Uint, type_name

__all__ = ["CEL_ERRORS", "NAMESPACE", "BudgetExceeded", "EvalError", "describe"]


class EvalError(Exception):
    """A CEL evaluation error ("no such key", "no such overload", ...)."""


class BudgetExceeded(Exception):
    """The evaluation used up its cost budget."""


CEL_ERRORS: Final = (EvalError, TypeError, ValueError, ZeroDivisionError, OverflowError)

_MISSING: Final = object()
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1
_NUMBERS: Final = frozenset((int, Uint, float))
_ORDERED: Final = frozenset((int, Uint, float, str, bytes, bool))
_SIMPLE: Final = frozenset((int, Uint, float, str, bytes, bool, type(None), Version, Quantity))
_KEYS: Final = frozenset((str, int, Uint, bool))
_DEVICE_FIELDS: Final = frozenset(("driver", "attributes", "capacity"))


def describe(exc: BaseException) -> str:
    """A CEL-style message for an error raised during evaluation."""
    if isinstance(exc, EvalError):
        return str(exc)
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    if isinstance(exc, TypeError):
        return f"no such overload: {exc}"
    return str(exc) or type(exc).__name__


def _no_overload(op: str, *args: object) -> EvalError:
    kinds = ", ".join(type_name(a) for a in args)
    return EvalError(f"found no matching overload for '{op}' applied to ({kinds})")


def over_budget() -> NoReturn:
    raise BudgetExceeded


def truth(value: object) -> bool:
    """The Python truth of a CEL bool; anything else is an error."""
    if value is True or value is False:
        return value  # type: ignore[return-value]
    raise EvalError(f"no such overload: expected bool, got {type_name(value)}")


def _int(value: int) -> int:
    if _INT64_MIN <= value <= _INT64_MAX:
        return value
    raise EvalError("integer overflow")


def _uint(value: int) -> Uint:
    if 0 <= value <= _UINT64_MAX:
        return Uint(value)
    raise EvalError("unsigned integer overflow")


# -- access --------------------------------------------------------------------------------


def select(obj: Any, name: str) -> object:
    """``obj.name``: a map entry, or a field of the device."""
    kind = type(obj)
    if kind is DomainMap:
        return dict.get(obj, name, EMPTY_MAP)
    if kind in MAP_TYPES:
        found = dict.get(obj, name, _MISSING)
        if found is _MISSING:
            raise EvalError(f"no such key: {name!r}")
        return found
    if kind is CelDevice and name in _DEVICE_FIELDS:
        return getattr(obj, name)
    raise EvalError(f"type {type_name(obj)} does not support field selection")


def has(obj: Any, name: str) -> bool:
    """``has(obj.name)``."""
    kind = type(obj)
    if kind in MAP_TYPES:
        return name in obj
    if kind is CelDevice:
        return name in _DEVICE_FIELDS
    raise EvalError(f"invalid type for has(): {type_name(obj)}")


def index(obj: Any, key: Any) -> object:
    """``obj[key]``."""
    kind = type(obj)
    if kind is DomainMap:
        if type(key) is str:
            return dict.get(obj, key, EMPTY_MAP)
        raise _no_overload("_[_]", obj, key)
    if kind in MAP_TYPES:
        return _map_lookup(obj, key)
    if kind is list:
        key_kind = type(key)
        if key_kind is int or key_kind is Uint:
            if 0 <= key < len(obj):
                return obj[key]
            raise EvalError(f"index out of range: {key}")
    raise _no_overload("_[_]", obj, key)


def _map_lookup(mapping: dict[Any, Any], key: Any) -> object:
    kind = type(key)
    if kind is str:
        found = dict.get(mapping, key, _MISSING)
        if found is not _MISSING:
            return found
    elif kind in _NUMBERS or kind is bool:
        for candidate, value in mapping.items():
            if _equal(candidate, key):
                return value
    else:
        raise _no_overload("_[_]", mapping, key)
    raise EvalError(f"no such key: {key!r}")


def iterate(source: Any) -> Iterable[Any]:
    """What a comprehension walks over: list elements, or map keys."""
    kind = type(source)
    if kind is list or kind in MAP_TYPES:
        return source  # type: ignore[no-any-return]
    raise EvalError(f"no such overload: cannot iterate over {type_name(source)}")


def make_list(items: list[Any]) -> list[Any]:
    return items


def make_map(entries: list[tuple[Any, Any]]) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for key, value in entries:
        if type(key) not in _KEYS:
            raise EvalError(f"unsupported map key type: {type_name(key)}")
        if any(_equal(key, existing) for existing in result):
            raise EvalError(f"repeated key in map literal: {key!r}")
        result[key] = value
    return result


# -- equality and ordering -----------------------------------------------------------------


def _equal(a: Any, b: Any) -> bool:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta in _SIMPLE:
            return bool(a == b)
        if ta is list:
            return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
        if ta in MAP_TYPES:
            return _map_equal(a, b)
        return a is b  # the device object
    if a is None or b is None:
        return False
    if ta in _NUMBERS and tb in _NUMBERS:
        return bool(a == b)  # int/float comparisons are exact in Python
    if ta in MAP_TYPES and tb in MAP_TYPES:
        return _map_equal(a, b)
    if ta is Version:
        raise _no_overload("_==_", a, b)
    return False


def _map_equal(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    if len(a) != len(b):
        return False
    for key, value in a.items():
        found = dict.get(b, key, _MISSING)
        if found is _MISSING or not _equal(value, found):
            return False
    return True


def eq(a: Any, b: Any) -> bool:
    if type(a) is str and type(b) is str:  # the common case: attribute == "literal"
        return a == b  # type: ignore[no-any-return]
    return _equal(a, b)


def ne(a: Any, b: Any) -> bool:
    return not eq(a, b)


def _check_ordered(op: str, a: Any, b: Any) -> None:
    ta, tb = type(a), type(b)
    if not ((ta is tb and ta in _ORDERED) or (ta in _NUMBERS and tb in _NUMBERS)):
        raise _no_overload(op, a, b)


def lt(a: Any, b: Any) -> bool:
    _check_ordered("_<_", a, b)
    return a < b  # type: ignore[no-any-return]


def le(a: Any, b: Any) -> bool:
    _check_ordered("_<=_", a, b)
    return a <= b  # type: ignore[no-any-return]


def gt(a: Any, b: Any) -> bool:
    _check_ordered("_>_", a, b)
    return a > b  # type: ignore[no-any-return]


def ge(a: Any, b: Any) -> bool:
    _check_ordered("_>=_", a, b)
    return a >= b  # type: ignore[no-any-return]


def in_(item: Any, container: Any) -> bool:
    kind = type(container)
    if kind is list:
        # cel-go asks each *element* whether it equals the item; an element that cannot be
        # compared is an error unless another element matches.
        error: EvalError | None = None
        for element in container:
            try:
                if _equal(element, item):
                    return True
            except EvalError as exc:
                error = error or exc
        if error is not None:
            raise error
        return False
    if kind in MAP_TYPES:
        if type(item) is str:
            return item in container
        if type(item) in _NUMBERS or type(item) is bool:
            return any(_equal(item, key) for key in container)
    raise _no_overload("@in", item, container)


# -- arithmetic ----------------------------------------------------------------------------


def add(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b):
        if kind is int:
            return _int(a + b)
        if kind is Uint:
            return _uint(a + b)
        if kind is float or kind is str or kind is bytes or kind is list:
            return a + b
    raise _no_overload("_+_", a, b)


def sub(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b):
        if kind is int:
            return _int(a - b)
        if kind is Uint:
            return _uint(a - b)
        if kind is float:
            return a - b
    raise _no_overload("_-_", a, b)


def mul(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b):
        if kind is int:
            return _int(a * b)
        if kind is Uint:
            return _uint(a * b)
        if kind is float:
            return a * b
    raise _no_overload("_*_", a, b)


def div(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b):
        if kind is int or kind is Uint:
            if b == 0:
                raise EvalError("division by zero")
            quotient = abs(a) // abs(b)
            if (a < 0) != (b < 0):
                quotient = -quotient  # CEL, like Go, truncates towards zero
            return _int(quotient) if kind is int else _uint(quotient)
        if kind is float:
            if b == 0.0:  # IEEE 754, as in CEL: no error
                if a == 0.0 or math.isnan(a):
                    return math.nan
                return math.copysign(math.inf, a) * math.copysign(1.0, b)
            return a / b  # type: ignore[no-any-return]
    raise _no_overload("_/_", a, b)


def mod(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b) and (kind is int or kind is Uint):
        if b == 0:
            raise EvalError("modulus by zero")
        remainder = abs(a) % abs(b)
        if a < 0:
            remainder = -remainder  # the sign follows the dividend, as in Go
        return remainder if kind is int else Uint(remainder)
    raise _no_overload("_%_", a, b)


def neg(a: Any) -> object:
    kind = type(a)
    if kind is int:
        return _int(-a)
    if kind is float:
        return -a  # type: ignore[no-any-return]
    raise _no_overload("-_", a)


def not_(a: Any) -> bool:
    return not truth(a)


# -- standard functions --------------------------------------------------------------------


def f_size(value: Any) -> int:
    kind = type(value)
    if kind is str or kind is bytes or kind is list or kind in MAP_TYPES:
        return len(value)
    raise _no_overload("size", value)


def _strings(op: str, a: Any, b: Any) -> tuple[str, str]:
    if type(a) is str and type(b) is str:
        return a, b
    raise _no_overload(op, a, b)


def f_contains(a: Any, b: Any) -> bool:
    text, part = _strings("contains", a, b)
    return part in text


def f_startswith(a: Any, b: Any) -> bool:
    text, part = _strings("startsWith", a, b)
    return text.startswith(part)


def f_endswith(a: Any, b: Any) -> bool:
    text, part = _strings("endsWith", a, b)
    return text.endswith(part)


_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False


@functools.lru_cache(maxsize=256)
def _regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern, options=_RE2_OPTIONS)
    except re2.error as exc:
        raise EvalError(f"invalid regular expression {pattern!r}: {exc}") from None


def f_matches(a: Any, b: Any) -> bool:
    text, pattern = _strings("matches", a, b)
    return _regex(pattern).search(text) is not None


def f_int(value: Any) -> int:
    kind = type(value)
    if kind is int:
        return value  # type: ignore[no-any-return]
    if kind is Uint:
        return _int(int(value))
    if kind is float:
        if math.isfinite(value) and -(2.0**63) <= value < 2.0**63:
            return int(value)
        raise EvalError("double is out of int range")
    if kind is str:
        return _int(_parse_integer(value, signed=True))
    raise _no_overload("int", value)


def f_uint(value: Any) -> Uint:
    kind = type(value)
    if kind is Uint:
        return value  # type: ignore[no-any-return]
    if kind is int:
        return _uint(value)
    if kind is float:
        if math.isfinite(value) and 0.0 <= value < 2.0**64:
            return Uint(int(value))
        raise EvalError("double is out of uint range")
    if kind is str:
        return _uint(_parse_integer(value, signed=False))
    raise _no_overload("uint", value)


def _parse_integer(text: str, signed: bool) -> int:
    body = text[1:] if signed and text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        raise EvalError(f"cannot parse {text!r} as an integer")
    return int(text)


def f_double(value: Any) -> float:
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
    raise _no_overload("double", value)


def f_string(value: Any) -> str:
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
    raise _no_overload("string", value)


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


def f_bool(value: Any) -> bool:
    kind = type(value)
    if kind is bool:
        return value  # type: ignore[no-any-return]
    if kind is str:
        if value in ("true", "True", "TRUE", "t", "T", "1"):
            return True
        if value in ("false", "False", "FALSE", "f", "F", "0"):
            return False
        raise EvalError(f"cannot parse {value!r} as a bool")
    raise _no_overload("bool", value)


def f_bytes(value: Any) -> bytes:
    kind = type(value)
    if kind is bytes:
        return value  # type: ignore[no-any-return]
    if kind is str:
        return value.encode("utf-8")  # type: ignore[no-any-return]
    raise _no_overload("bytes", value)


# -- Kubernetes semver library -------------------------------------------------------------


def f_semver(text: Any) -> Version:
    if type(text) is not str:
        raise _no_overload("semver", text)
    try:
        return parse_version(text)
    except InvalidVersion as exc:
        raise EvalError(str(exc)) from None


def f_is_semver(text: Any) -> bool:
    if type(text) is not str:
        raise _no_overload("isSemver", text)
    try:
        parse_version(text)
    except InvalidVersion:
        return False
    return True


def _version(op: str, value: Any) -> Version:
    if type(value) is Version:
        return value  # type: ignore[no-any-return]
    raise _no_overload(op, value)


def m_major(value: Any) -> int:
    return _int(_version("major", value).major)


def m_minor(value: Any) -> int:
    return _int(_version("minor", value).minor)


def m_patch(value: Any) -> int:
    return _int(_version("patch", value).patch)


def _compare(op: str, a: Any, b: Any) -> int:
    kind = type(a)
    if kind is type(b) and (kind is Version or kind is Quantity):
        return a.compare(b)  # type: ignore[no-any-return]
    raise _no_overload(op, a, b)


def m_compare_to(a: Any, b: Any) -> int:
    return _compare("compareTo", a, b)


def m_is_greater_than(a: Any, b: Any) -> bool:
    return _compare("isGreaterThan", a, b) > 0


def m_is_less_than(a: Any, b: Any) -> bool:
    return _compare("isLessThan", a, b) < 0


# -- Kubernetes quantity library -----------------------------------------------------------


def f_quantity(text: Any) -> Quantity:
    if type(text) is not str:
        raise _no_overload("quantity", text)
    try:
        return parse_quantity(text)
    except InvalidQuantity as exc:
        raise EvalError(str(exc)) from None


def f_is_quantity(text: Any) -> bool:
    if type(text) is not str:
        raise _no_overload("isQuantity", text)
    try:
        parse_quantity(text)
    except InvalidQuantity:
        return False
    return True


def _quantity(op: str, value: Any) -> Quantity:
    if type(value) is Quantity:
        return value  # type: ignore[no-any-return]
    raise _no_overload(op, value)


def m_sign(value: Any) -> int:
    return _quantity("sign", value).sign()


def m_as_integer(value: Any) -> int:
    number = _quantity("asInteger", value).as_int64()
    if number is None:
        raise EvalError("cannot convert value to integer")
    return number


def m_is_integer(value: Any) -> bool:
    return _quantity("isInteger", value).as_int64() is not None


def m_as_approximate_float(value: Any) -> float:
    return _quantity("asApproximateFloat", value).as_approximate_float()


def _arith(op: str, q: Any, other: Any) -> Quantity:
    receiver = _quantity(op, q)
    if type(other) is not Quantity and type(other) is not int:
        raise _no_overload(op, q, other)
    try:
        return receiver.add(other) if op == "add" else receiver.sub(other)
    except InvalidQuantity as exc:
        raise EvalError(str(exc)) from None


def m_add(q: Any, other: Any) -> Quantity:
    return _arith("add", q, other)


def m_sub(q: Any, other: Any) -> Quantity:
    return _arith("sub", q, other)


# Functions whose result depends only on their arguments: calls with constant arguments
# are evaluated once, when compiling (unless they fail: errors stay run-time errors).
PURE: Final = frozenset(
    (
        "f_size", "f_contains", "f_startswith", "f_endswith", "f_matches", "f_int",
        "f_uint", "f_double", "f_string", "f_bool", "f_bytes", "f_semver", "f_is_semver",
        "f_quantity", "f_is_quantity", "m_major", "m_minor", "m_patch", "m_compare_to",
        "m_is_greater_than", "m_is_less_than", "m_sign", "m_as_integer", "m_is_integer",
        "m_as_approximate_float", "m_add", "m_sub",
    )
)  # fmt: skip

NAMESPACE: Final[dict[str, object]] = {
    "CEL_ERRORS": CEL_ERRORS,
    "EMPTY_MAP": EMPTY_MAP,
    "dict_get": dict.get,
    "over_budget": over_budget,
    "truth": truth,
    "select": select,
    "has": has,
    "index": index,
    "iterate": iterate,
    "make_list": make_list,
    "make_map": make_map,
    "eq": eq,
    "ne": ne,
    "lt": lt,
    "le": le,
    "gt": gt,
    "ge": ge,
    "in_": in_,
    "add": add,
    "sub": sub,
    "mul": mul,
    "div": div,
    "mod": mod,
    "neg": neg,
    "not_": not_,
    **{name: value for name, value in globals().items() if name.startswith(("f_", "m_"))},
}
