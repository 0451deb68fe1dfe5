"""List functions: Kubernetes' lists library, cel-go's lists (v3) and sets extensions, the
optional-value functions, and the map insertion that two-variable transforms use.

Kubernetes: ``isSorted``, ``sum``, ``min``, ``max`` (``indexOf``/``lastIndexOf`` live with the
string functions of the same names). cel-go lists: ``slice``, ``flatten``, ``sort``,
``sortBy`` (via ``@sortByAssociatedKeys``), ``lists.range``, ``reverse``, ``distinct``. Sets:
``sets.contains``, ``sets.equivalent``, ``sets.intersects``. Optional: ``optional.of``,
``optional.ofNonZeroValue``, ``optional.none``, ``value``, ``hasValue``, ``or``,
``orValue``, ``first``, ``last``, ``optional.unwrap``, ``unwrapOpt``.

Invariants:

* Membership and ``distinct`` use CEL equality (``1 == 1.0``); ordering is CEL's (numbers
  across int, uint and double compare numerically; other kinds only with their own kind).
* Errors are upstream's ("min called on empty list", "cannot slice(3, 1), start index must
  be less than or equal to end index", "list elements must have the same type").
* Nothing mutates its arguments: every result is a new list or map.
* ``flatten`` visits at most :data:`COST_LIMIT` elements (:func:`flatten_within` takes a
  smaller limit from the meter), however often its argument holds the same list.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Final

from ._rt_core import (
    COST_LIMIT,
    BudgetExceeded,
    EvalError,
    check_int,
    check_uint,
    equal,
    lt,
    no_overload,
)
from ._values import MAP_TYPES, NONE, Optional, Uint, type_name

__all__ = ["FUNCTIONS", "flatten_within"]

_COMPARABLE: Final = frozenset((int, Uint, float, bool, str, bytes))
_NUMBERS: Final = frozenset((int, Uint, float))


def _list(op: str, value: Any, *rest: Any) -> list[Any]:
    if type(value) is not list:
        raise no_overload(op, value, *rest)
    return value  # type: ignore[no-any-return]


def _comparable(op: str, value: Any) -> Any:
    if type(value) not in _COMPARABLE:
        raise no_overload(op, value)
    return value


def m_isSorted(items: Any) -> bool:
    values = _list("isSorted", items)
    for prev, nxt in itertools.pairwise(values):
        if lt(_comparable("isSorted", nxt), _comparable("isSorted", prev)):
            return False
    return True


def m_sum(items: Any) -> Any:
    values = _list("sum", items)
    if not values:
        return 0
    kind = type(values[0])
    if kind not in _NUMBERS or any(type(v) is not kind for v in values):
        raise no_overload("sum", *values[:2])
    total: Any = sum(values, 0.0 if kind is float else 0)
    if kind is int:
        return check_int(int(total))
    if kind is Uint:
        return check_uint(int(total))
    return total


def _extreme(op: str, items: Any, prefer_greater: bool) -> Any:
    values = _list(op, items)
    if not values:
        raise EvalError(f"{op} called on empty list")
    best = _comparable(op, values[0])
    for value in values[1:]:
        _comparable(op, value)
        if lt(best, value) if prefer_greater else lt(value, best):
            best = value
    return best


def m_max(items: Any) -> Any:
    return _extreme("max", items, prefer_greater=True)


def m_min(items: Any) -> Any:
    return _extreme("min", items, prefer_greater=False)


def m_slice(items: Any, start: Any, end: Any) -> list[Any]:
    values = _list("slice", items, start, end)
    if type(start) is not int or type(end) is not int:
        raise no_overload("slice", items, start, end)
    if start < 0 or end < 0:
        raise EvalError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise EvalError(
            f"cannot slice({start}, {end}), start index must be less than or equal to end index"
        )
    if len(values) < end:
        raise EvalError(f"cannot slice({start}, {end}), list is length {len(values)}")
    return values[start:end]


def flatten_within(items: Any, depth: Any, limit: int) -> tuple[list[Any], int]:
    """``items.flatten(depth)`` and the elements visited (at every level) to build it;
    refused with :class:`BudgetExceeded` once more than ``limit`` would be visited (a list
    that holds the same list many times, nested, flattens to far more than it holds).
    Flattens a level at a time: ``flatten(d)`` is ``flatten(1)`` done ``d`` times."""
    values = _list("flatten", items)
    if type(depth) is not int:
        raise no_overload("flatten", items, depth)
    if depth < 0:
        raise EvalError("level must be non-negative")
    visited = len(values)
    if visited > limit:
        raise BudgetExceeded
    level = values
    for _ in range(depth):
        if not any(type(value) is list for value in level):
            break
        size = sum(len(value) if type(value) is list else 1 for value in level)
        visited += size
        if visited > limit:
            raise BudgetExceeded
        flat: list[Any] = []
        for value in level:
            if type(value) is list:
                flat.extend(value)
            else:
                flat.append(value)
        level = flat
    return list(level) if level is values else level, visited


def m_flatten(items: Any, depth: Any = 1) -> list[Any]:
    return flatten_within(items, depth, COST_LIMIT)[0]


def _sorted(values: list[Any], keys: list[Any]) -> list[Any]:
    if len(values) != len(keys):
        raise EvalError(
            "@sortByAssociatedKeys() expected a list of the same size as the associated keys "
            f"list, but got {len(values)} and {len(keys)} elements respectively"
        )
    if not values:
        return []
    kind = type(keys[0])
    if kind not in _COMPARABLE:
        raise EvalError("list elements must be comparable")
    if any(type(key) is not kind for key in keys):
        raise EvalError("list elements must have the same type")

    def compare(i: int, j: int) -> int:
        return -1 if lt(keys[i], keys[j]) else (1 if lt(keys[j], keys[i]) else 0)

    order = sorted(range(len(values)), key=functools.cmp_to_key(compare))
    return [values[i] for i in order]


def m_sort(items: Any) -> list[Any]:
    values = _list("sort", items)
    return _sorted(values, values)


def m_sortByAssociatedKeys(items: Any, keys: Any) -> list[Any]:
    return _sorted(_list("sortBy", items), _list("sortBy", keys))


def g_lists_range(count: Any) -> list[int]:
    if type(count) is not int:
        raise no_overload("lists.range", count)
    if count > COST_LIMIT:
        raise BudgetExceeded
    return list(range(count))


def m_reverse(items: Any) -> list[Any]:
    return _list("reverse", items)[::-1]


def m_distinct(items: Any) -> list[Any]:
    unique: list[Any] = []
    for value in _list("distinct", items):
        if not any(equal(value, seen) for seen in unique):
            unique.append(value)
    return unique


def _contains(values: list[Any], item: Any) -> bool:
    return any(equal(value, item) for value in values)


def g_sets_contains(items: Any, sub: Any) -> bool:
    values = _list("sets.contains", items, sub)
    return all(_contains(values, item) for item in _list("sets.contains", sub, items))


def g_sets_equivalent(a: Any, b: Any) -> bool:
    return g_sets_contains(a, b) and g_sets_contains(b, a)


def g_sets_intersects(a: Any, b: Any) -> bool:
    values = _list("sets.intersects", b, a)
    return any(_contains(values, item) for item in _list("sets.intersects", a, b))


def g_cel_mapInsert(target: Any, key: Any, *value: Any) -> dict[Any, Any]:
    if type(target) not in MAP_TYPES:
        raise no_overload("cel.@mapInsert", target, key)
    updates = list(key.items()) if not value and type(key) in MAP_TYPES else [(key, value[0])]
    result = dict(target)
    for k, v in updates:
        if any(equal(k, existing) for existing in result):
            raise EvalError(f"insert failed: key {k!r} already exists")
        result[k] = v
    return result


# -- optional values -----------------------------------------------------------------------


def g_optional_of(value: Any) -> Optional:
    return Optional(value)


def g_optional_ofNonZeroValue(value: Any) -> Optional:
    kind = type(value)
    zero = value is None or (
        (kind in (bool, int, Uint, float, str, bytes, list) or kind in MAP_TYPES) and not value
    )
    return NONE if zero else Optional(value)


def g_optional_none() -> Optional:
    return NONE


def _optional(op: str, value: Any) -> Optional:
    if type(value) is not Optional:
        raise no_overload(op, value)
    return value  # type: ignore[no-any-return]


def m_value(opt: Any) -> Any:
    if _optional("value", opt) is NONE:
        raise EvalError("optional.none() dereference")
    return opt.value


def m_hasValue(opt: Any) -> bool:
    return _optional("hasValue", opt) is not NONE


def m_or(opt: Any, other: Any) -> Optional:
    _optional("or", other)
    return other if _optional("or", opt) is NONE else opt  # type: ignore[no-any-return]


def m_orValue(opt: Any, other: Any) -> Any:
    return other if _optional("orValue", opt) is NONE else opt.value


def m_first(items: Any) -> Optional:
    values = _list("first", items)
    return Optional(values[0]) if values else NONE


def m_last(items: Any) -> Optional:
    values = _list("last", items)
    return Optional(values[-1]) if values else NONE


def g_optional_unwrap(items: Any) -> list[Any]:
    out = []
    for value in _list("optional.unwrap", items):
        if type(value) is not Optional:
            raise EvalError(f"value of type {type_name(value)} is not optional")
        if value is not NONE:
            out.append(value.value)
    return out


m_unwrapOpt = g_optional_unwrap

FUNCTIONS: Final[dict[str, object]] = {
    name: value for name, value in globals().items() if name.startswith(("g_", "m_"))
}
