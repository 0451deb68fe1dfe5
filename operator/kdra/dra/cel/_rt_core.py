"""The core of selector evaluation: CEL errors, truth, access, equality, operators.

Generated code (see ``_codegen``) calls these through ``_runtime.NAMESPACE``; the library
modules (``_rt_std``, ``_lib_*``) build on the helpers here. Values are the plain Python
values described in ``_values``.

Invariants:

* A CEL *error* is a raised exception from :data:`CEL_ERRORS`. Only the constructs that CEL
  lets absorb errors (``&&``, ``||``, ``all``, ``exists``) catch them; everything else lets
  them propagate to :meth:`DeviceSelector.matches`, which reports a
  :class:`~kdra.dra.errors.CelRuntimeError`.
* :class:`BudgetExceeded` is deliberately *not* in :data:`CEL_ERRORS`: running out of
  budget stops the evaluation even inside ``x || true``. Helpers that build values whose
  size depends on their arguments raise it before building past :data:`COST_LIMIT`
  characters or elements, even when no meter is involved.
* Types are strict, as in CEL: no implicit conversions, ``1 + 1.0`` and ``"a" < 1`` are
  errors (the type checker rejects most of them before; attribute values, whose type is
  only known at run time, are checked here), int arithmetic is checked against int64
  (uint64). Ordering across int, uint and double is numeric (upstream enables
  cross-type numeric comparisons).
* Equality follows upstream, quirks included: values of different types are unequal,
  except that int/uint/double compare numerically; a semver compared with anything but a
  semver is an error (upstream's ``Semver.Equal``), a quantity compared with a non-quantity
  is false (upstream's ``Quantity.Equal``). ``in`` on a list asks each *element*, like
  cel-go.
* Map keys are looked up by hash, never by scanning (a scan per lookup made a loop over a
  large map quadratic). The price: Python's ``True == 1`` holds for keys too, so a map
  cannot hold both ``true`` and ``1`` (a literal with both is a repeated key) and looking
  one up finds the other, where CEL keeps them apart.
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Iterable
from typing import Any, Final, NoReturn

from kdra.dra.quantity import Quantity
from kdra.dra.semver import Version

from ._values import (
    EMPTY_MAP,
    MAP_TYPES,
    NONE,
    CelDevice,
    CelType,
    CIDRValue,
    DomainMap,
    IPAddress,
    NamedFormat,
    Optional,
    Uint,
    URLValue,
    type_name,
)

__all__ = [
    "CEL_ERRORS",
    "COST_LIMIT",
    "MATCH_COST",
    "OPERATORS",
    "BudgetExceeded",
    "EvalError",
    "check_int",
    "check_uint",
    "describe",
    "equal",
    "no_overload",
    "truth",
]


COST_LIMIT: Final = 1_000_000
"""Upstream's limit on a selector's cost, estimated (``_cost``) and actual (``_rt_meter``)."""
MATCH_COST: Final = 10
"""What each match ``findAll`` returns costs, estimated and actual (kdra's: a Python object
made in a loop, about a microsecond; upstream does not charge matches)."""


class EvalError(Exception):
    """A CEL evaluation error ("no such key", "no such overload", ...)."""


class MissingKey(EvalError):
    """``no such key``: the message names the key and what the map has — at most
    :data:`KEYS_SHOWN` of its keys (sorted, each cut short and escaped with ``repr``: keys come
    from slices and users) and the closest one, "did you mean" — or says the device publishes
    nothing in that domain. Built only when asked (``str``), so an error that ``||`` or
    ``exists`` absorbs costs what it did before; the work is bounded by :data:`KEYS_LOOKED_AT`
    keys, whatever the size of the map."""

    def __init__(self, key: object, mapping: dict[Any, Any]) -> None:
        super().__init__(key)
        self.key = key
        self.mapping = mapping

    def __str__(self) -> str:
        head = f"no such key: {_shown(self.key)}"
        if self.mapping is EMPTY_MAP:
            return f"{head} (the device has nothing in that domain)"
        total = len(self.mapping)
        if not total:
            return f"{head} (the map is empty)"
        keys = sorted(_shown(k) for k in itertools.islice(self.mapping, KEYS_LOOKED_AT))
        listed = ", ".join(keys[:KEYS_SHOWN])
        more = total - min(total, KEYS_SHOWN)
        text = f"{head} (the map has {listed}{f' and {more} more' if more else ''}"
        if isinstance(self.key, str):
            names = [str(k)[:KEY_CHARS] for k in itertools.islice(self.mapping, KEYS_LOOKED_AT)
                     if isinstance(k, str)]
            close = difflib.get_close_matches(self.key[:KEY_CHARS], names, n=1)
            if close:
                text += f"; did you mean {close[0]!r}?"
        return text + ")"


KEYS_SHOWN: Final = 8
"""Keys a ``no such key`` message lists."""
KEYS_LOOKED_AT: Final = 64
"""Keys a ``no such key`` message sorts and compares the missing one with."""
KEY_CHARS: Final = 40
"""Characters of a key a ``no such key`` message shows."""


def _shown(key: object) -> str:
    text = repr(key)  # quotes a string and escapes what is not printable
    return text if len(text) <= KEY_CHARS else text[: KEY_CHARS - 3] + "..."


class BudgetExceeded(Exception):
    """The evaluation used up its cost budget."""


CEL_ERRORS: Final = (EvalError, TypeError, ValueError, ZeroDivisionError, OverflowError)

_MISSING: Final = object()
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1
_NUMBERS: Final = frozenset((int, Uint, float))
_ORDERED: Final = frozenset((int, Uint, float, str, bytes, bool))
_SIMPLE: Final = frozenset(
    (int, Uint, float, str, bytes, bool, type(None), Version, Quantity, CelType, IPAddress,
     CIDRValue, URLValue, NamedFormat)
)  # fmt: skip
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


def no_overload(op: str, *args: object) -> EvalError:
    kinds = ", ".join(type_name(a) for a in args)
    return EvalError(f"found no matching overload for '{op}' applied to ({kinds})")


def over_budget() -> NoReturn:
    raise BudgetExceeded


def truth(value: object) -> bool:
    """The Python truth of a CEL bool; anything else is an error."""
    if value is True or value is False:
        return value  # type: ignore[return-value]
    raise EvalError(f"no such overload: expected bool, got {type_name(value)}")


def check_int(value: int) -> int:
    if _INT64_MIN <= value <= _INT64_MAX:
        return value
    raise EvalError("integer overflow")


def check_uint(value: int) -> Uint:
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
            raise MissingKey(name, obj)
        return found
    if kind is CelDevice and name in _DEVICE_FIELDS:
        return getattr(obj, name)
    if kind is Optional:  # selection on an optional is optional: none when absent
        if obj is NONE or not has(obj.value, name):
            return NONE
        return Optional(select(obj.value, name))
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
        raise no_overload("_[_]", obj, key)
    if kind in MAP_TYPES:
        return _map_lookup(obj, key)
    if kind is list:
        key_kind = type(key)
        if key_kind is int or key_kind is Uint:
            if 0 <= key < len(obj):
                return obj[key]
            raise EvalError(f"index out of range: {key}")
    if kind is Optional:  # indexing an optional is optional: none when absent
        if obj is NONE:
            return NONE
        try:
            return Optional(index(obj.value, key))
        except EvalError:
            return NONE
    raise no_overload("_[_]", obj, key)


def _map_lookup(mapping: dict[Any, Any], key: Any) -> object:
    kind = type(key)
    if kind is str or kind in _NUMBERS or kind is bool:
        # A hash lookup: Python's numeric equality is CEL's across int, uint and double.
        found = dict.get(mapping, key, _MISSING)
        if found is not _MISSING:
            return found
    else:
        raise no_overload("_[_]", mapping, key)
    raise MissingKey(key, mapping)


def iterate(source: Any) -> Iterable[Any]:
    """What a comprehension walks over: list elements, or map keys."""
    kind = type(source)
    if kind is list or kind in MAP_TYPES:
        return source  # type: ignore[no-any-return]
    raise EvalError(f"no such overload: cannot iterate over {type_name(source)}")


def iterate2(source: Any) -> Iterable[tuple[Any, Any]]:
    """What a two-variable comprehension walks over: (index, element) or (key, value)."""
    kind = type(source)
    if kind is list:
        return enumerate(source)
    if kind in MAP_TYPES:
        return source.items()  # type: ignore[no-any-return]
    raise EvalError(f"no such overload: cannot iterate over {type_name(source)}")


def insert_entries(target: dict[Any, Any], entries: Any) -> None:
    """transformMapEntry's step: add ``entries`` (a map) to the result being built."""
    if type(entries) not in MAP_TYPES:
        raise no_overload("cel.@mapInsert", target, entries)
    for key, value in entries.items():
        if key in target:
            raise EvalError(f"insert failed: key {key!r} already exists")
        target[key] = value


def make_list(items: list[Any]) -> list[Any]:
    return items


def make_map(entries: list[tuple[Any, Any]]) -> dict[Any, Any]:
    result: dict[Any, Any] = {}
    for key, value in entries:
        if type(key) not in _KEYS:
            raise EvalError(f"unsupported map key type: {type_name(key)}")
        if key in result:
            raise EvalError(f"repeated key in map literal: {key!r}")
        result[key] = value
    return result


# -- equality and ordering -----------------------------------------------------------------


def equal(a: Any, b: Any) -> bool:
    ta, tb = type(a), type(b)
    if ta is tb:
        if ta in _SIMPLE:
            return bool(a == b)
        if ta is list:
            return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
        if ta in MAP_TYPES:
            return _mapequal(a, b)
        return a is b  # the device object
    if a is None or b is None:
        return False
    if ta in _NUMBERS and tb in _NUMBERS:
        return bool(a == b)  # int/float comparisons are exact in Python
    if ta in MAP_TYPES and tb in MAP_TYPES:
        return _mapequal(a, b)
    if ta is Version:
        raise no_overload("_==_", a, b)
    return False


def _mapequal(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    if len(a) != len(b):
        return False
    for key, value in a.items():
        found = dict.get(b, key, _MISSING)
        if found is _MISSING or not equal(value, found):
            return False
    return True


def eq(a: Any, b: Any) -> bool:
    if type(a) is str and type(b) is str:  # the common case: attribute == "literal"
        return a == b  # type: ignore[no-any-return]
    return equal(a, b)


def ne(a: Any, b: Any) -> bool:
    return not eq(a, b)


def _check_ordered(op: str, a: Any, b: Any) -> None:
    ta, tb = type(a), type(b)
    if not ((ta is tb and ta in _ORDERED) or (ta in _NUMBERS and tb in _NUMBERS)):
        raise no_overload(op, a, b)


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
                if equal(element, item):
                    return True
            except EvalError as exc:
                error = error or exc
        if error is not None:
            raise error
        return False
    if kind in MAP_TYPES and (type(item) in _KEYS or type(item) is float):
        return item in container
    raise no_overload("@in", item, container)


# -- arithmetic ----------------------------------------------------------------------------


def add(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b):
        if kind is int:
            return check_int(a + b)
        if kind is Uint:
            return check_uint(a + b)
        if kind is float or kind is str or kind is bytes or kind is list:
            return a + b
    raise no_overload("_+_", a, b)


def sub(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b):
        if kind is int:
            return check_int(a - b)
        if kind is Uint:
            return check_uint(a - b)
        if kind is float:
            return a - b
    raise no_overload("_-_", a, b)


def mul(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b):
        if kind is int:
            return check_int(a * b)
        if kind is Uint:
            return check_uint(a * b)
        if kind is float:
            return a * b
    raise no_overload("_*_", a, b)


def div(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b):
        if kind is int or kind is Uint:
            if b == 0:
                raise EvalError("division by zero")
            quotient = abs(a) // abs(b)
            if (a < 0) != (b < 0):
                quotient = -quotient  # CEL, like Go, truncates towards zero
            return check_int(quotient) if kind is int else check_uint(quotient)
        if kind is float:
            if b == 0.0:  # IEEE 754, as in CEL: no error
                if a == 0.0 or math.isnan(a):
                    return math.nan
                return math.copysign(math.inf, a) * math.copysign(1.0, b)
            return a / b  # type: ignore[no-any-return]
    raise no_overload("_/_", a, b)


def mod(a: Any, b: Any) -> object:
    kind = type(a)
    if kind is type(b) and (kind is int or kind is Uint):
        if b == 0:
            raise EvalError("modulus by zero")
        remainder = abs(a) % abs(b)
        if a < 0:
            remainder = -remainder  # the sign follows the dividend, as in Go
        return remainder if kind is int else Uint(remainder)
    raise no_overload("_%_", a, b)


def neg(a: Any) -> object:
    kind = type(a)
    if kind is int:
        return check_int(-a)
    if kind is float:
        return -a  # type: ignore[no-any-return]
    raise no_overload("-_", a)


def not_(a: Any) -> bool:
    return not truth(a)


# The operators generated code calls by these names.
OPERATORS: Final[dict[str, object]] = {
    "CEL_ERRORS": CEL_ERRORS,
    "EMPTY_MAP": EMPTY_MAP,
    "dict_get": dict.get,
    "over_budget": over_budget,
    "truth": truth,
    "select": select,
    "has": has,
    "index": index,
    "iterate": iterate,
    "iterate2": iterate2,
    "make_list": make_list,
    "insert_entries": insert_entries,
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
}
