"""The run-time meter: what a call costs by the size of its actual arguments and result.

Upstream stops an evaluation whose *actual* cost passes the limit (cel-go's
``interpreter/runtimecost.go``, with Kubernetes' ``library.CostEstimator.CallCost`` and the
extensions' trackers). kdra charges the same way, with one difference that matters: Go
charges a call after it returned, kdra *before it builds its result*. A helper here computes
what the call will cost from its arguments (``replace``: how often the needle occurs, so
the length of the result, without building it), takes it from the budget, and only then
does the work; a call the budget cannot pay raises :class:`BudgetExceeded` with nothing
built. Where the size of the result cannot be known beforehand (``format``, ``flatten``,
``findAll``), the result is built within what is left and refused as soon as it passes.

Charges, per call (n: receiver's length, m: the argument's; "a tenth" rounds up):

* strings (cel-go's strings extension, version 5): ``charAt`` a tenth of n + 2;
  ``indexOf``/``lastIndexOf`` a tenth of n x m + 1; ``lowerAscii``, ``upperAscii``,
  ``trim``, ``substring`` a tenth of n + 1 + the result's length; ``replace`` a tenth of
  n x m + 1 + the result's length; ``split`` a tenth of n + 1, + 11, + one per element;
  ``join`` a tenth of (elements + 1) + 1 + the result's length;
* ``+``: a tenth of the result's length for strings and bytes (cel-go), plus the length
  itself (kdra: Python copies); for lists 1 + the length (cel-go: 1, its lists are lazy);
* ``format``: a tenth of the template (cel-go) + the result's length (kdra);
* regular expressions (Kubernetes): ``matches``, ``find`` a tenth of (n + 1) x a quarter
  of the pattern; ``findAll`` the same + 10 per match (kdra: each is a Python object made
  in a loop, about a microsecond);
* comparisons: ``==``, ``!=``, ``<``... on strings or bytes a tenth of the shorter; ``==``
  and ``!=`` on lists or maps the elements walked, and ``in`` on a list its length (plus,
  for a list or map sought, the elements walked), ``contains`` a tenth of n x a tenth of m,
  ``startsWith``/``endsWith`` a tenth of m;
* lists (cel-go's lists extension, version 3): ``slice``, ``reverse``, ``lists.range`` 11 +
  the result's length; ``flatten`` 11 + every element visited at every level;
  ``distinct`` and ``sort`` 11 + 2 n² (2.1 n² for strings); ``sets.*`` 1 + n x m (x 2 for
  ``equivalent``); Kubernetes' ``isSorted``, ``sum``, ``min``, ``max`` and ``indexOf`` on
  lists their traversal; where elements are lists or maps, comparing them also costs the
  elements walked;
* parsing (``quantity``, ``semver``, ``ip``, ``cidr``, ``url``, their ``is*`` forms,
  ``validate``): a tenth of the text; ``string(bytes)``, ``bytes(string)``,
  ``strings.quote``: a tenth of n.

Every walk through nested lists and maps (equality, ``in``, ``flatten``) counts each
element it visits, so a list that holds the same list many times, nested, costs what
walking it costs and not what it holds.

Invariants:

* ``x_<helper>(budget, *args)`` returns ``(value, budget left)`` and never returns a
  negative budget: it raises :class:`BudgetExceeded` instead, before building anything
  whose charge it could not pay.
* A metered helper computes exactly what ``<helper>`` computes (it calls it, or its bounded
  twin), and raises the same CEL errors for wrong arguments; the charge of a call that
  fails is whatever could be computed before it failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from . import _lib_k8s, _lib_lists, _lib_net, _lib_strings, _lib_url, _rt_core, _rt_std
from ._lib_format import m_validate
from ._lib_lists import flatten_within
from ._lib_strfmt import format_within
from ._rt_core import MATCH_COST, BudgetExceeded
from ._rt_std import regex
from ._values import MAP_TYPES

__all__ = ["METERED", "walk"]

_LIST_CREATE: Final = 10


def _tenth(n: int) -> int:
    return -(-n // 10)


def _quarter(n: int) -> int:
    return -(-n // 4)


def _pay(budget: int, cost: int) -> int:
    left = budget - cost
    if left < 0:
        raise BudgetExceeded
    return left


def _len(value: Any) -> int:
    """The size of a string, bytes, list or map (0 for anything else: a wrong argument,
    which the helper itself rejects)."""
    kind = type(value)
    if kind is str or kind is bytes or kind is list or kind in MAP_TYPES:
        return len(value)
    return 0


def _container(value: Any) -> bool:
    return type(value) is list or type(value) in MAP_TYPES


def walk(value: Any, limit: int) -> int:
    """The elements (and map entries) visited walking ``value``'s nested lists and maps,
    plus a tenth of every string's length; stops counting once past ``limit``."""
    total = 0
    level = [value]
    while level:
        nested: list[Any] = []
        for item in level:
            kind = type(item)
            if kind is list:
                total += len(item)
                nested.extend(item)
            elif kind in MAP_TYPES:
                total += len(item)
                nested.extend(item.keys())
                nested.extend(item.values())
            elif kind is str or kind is bytes:
                total += -(-len(item) // 10)
            if total > limit:
                return total
        level = nested
    return total


def _walked(values: Any, budget: int) -> int:
    """What comparing against each of ``values``' lists and maps may cost: their walk."""
    if type(values) is list and any(_container(item) for item in values):
        return walk(values, budget)
    return 0


# -- operators -------------------------------------------------------------------------


def x_add(budget: int, a: Any, b: Any) -> tuple[Any, int]:
    kind = type(a)
    if kind is type(b):
        if kind is str or kind is bytes:
            size = len(a) + len(b)
            budget = _pay(budget, _tenth(size) + size)
        elif kind is list:
            budget = _pay(budget, 1 + len(a) + len(b))
    return _rt_core.add(a, b), budget


def _equality_cost(a: Any, b: Any, budget: int) -> int:
    if _container(a) or _container(b):
        return min(walk(a, budget), walk(b, budget))
    if type(a) is type(b) and (type(a) is str or type(a) is bytes):
        return _tenth(min(len(a), len(b)))
    return 0


def x_eq(budget: int, a: Any, b: Any) -> tuple[bool, int]:
    budget = _pay(budget, _equality_cost(a, b, budget))
    return _rt_core.eq(a, b), budget


def x_ne(budget: int, a: Any, b: Any) -> tuple[bool, int]:
    budget = _pay(budget, _equality_cost(a, b, budget))
    return _rt_core.ne(a, b), budget


def _ordering(compare: Callable[[Any, Any], bool]) -> Callable[..., tuple[bool, int]]:
    def metered(budget: int, a: Any, b: Any) -> tuple[bool, int]:
        if type(a) is type(b) and (type(a) is str or type(a) is bytes):
            budget = _pay(budget, _tenth(min(len(a), len(b))))
        return compare(a, b), budget

    return metered


def x_in_(budget: int, item: Any, container: Any) -> tuple[bool, int]:
    if type(container) is list:
        cost = len(container)
        if _container(item):
            cost += _walked(container, budget)
        budget = _pay(budget, cost)
    return _rt_core.in_(item, container), budget


# -- strings ---------------------------------------------------------------------------


def x_m_charAt(budget: int, text: Any, position: Any) -> tuple[str, int]:
    budget = _pay(budget, _tenth(_len(text)) + 2)
    return _lib_strings.m_charAt(text, position), budget


def _index(helper: Callable[..., int]) -> Callable[..., tuple[int, int]]:
    def metered(budget: int, target: Any, part: Any, *offset: Any) -> tuple[int, int]:
        if type(target) is list:  # Kubernetes' lists library: one traversal
            cost = len(target) + (_walked(target, budget) if _container(part) else 0)
        else:
            cost = _tenth(_len(target) * _len(part)) + 1
        budget = _pay(budget, cost)
        return helper(target, part, *offset), budget

    return metered


def _transform(helper: Callable[..., str]) -> Callable[..., tuple[str, int]]:
    """lowerAscii, upperAscii, trim, substring: the scan, then the result (never longer
    than the receiver, so it may be charged once built)."""

    def metered(budget: int, text: Any, *args: Any) -> tuple[str, int]:
        budget = _pay(budget, _tenth(_len(text)) + 1)
        result = helper(text, *args)
        return result, _pay(budget, len(result))

    return metered


def x_m_replace(
    budget: int, text: Any, old: Any, new: Any, limit: Any = -1
) -> tuple[str, int]:
    if type(text) is str and type(old) is str and type(new) is str and type(limit) is int:
        found = text.count(old)  # an empty needle occurs len(text) + 1 times, as in Go
        count = found if limit < 0 else min(limit, found)
        size = len(text) + count * (len(new) - len(old))
        search = _tenth(max(len(text), 1) * max(len(old), 1))
        budget = _pay(budget, search + 1 + size)
    return _lib_strings.m_replace(text, old, new, limit), budget


def x_m_split(budget: int, text: Any, separator: Any, limit: Any = -1) -> tuple[list[str], int]:
    if type(text) is str and type(separator) is str and type(limit) is int:
        pieces = len(text) if separator == "" else text.count(separator) + 1
        if limit >= 0:
            pieces = min(pieces, limit)
        budget = _pay(budget, _tenth(len(text) + 1) + pieces + _LIST_CREATE + 1)
    return _lib_strings.m_split(text, separator, limit), budget


def x_m_join(budget: int, items: Any, separator: Any = "") -> tuple[str, int]:
    if type(items) is list and type(separator) is str:
        size = sum(len(item) for item in items if type(item) is str)
        size += len(separator) * max(len(items) - 1, 0)
        budget = _pay(budget, _tenth(len(items) + 1) + 1 + size)
    return _lib_strings.m_join(items, separator), budget


def x_m_format(budget: int, template: Any, args: Any) -> tuple[str, int]:
    budget = _pay(budget, _tenth(_len(template)))
    result = format_within(template, args, budget)
    return result, _pay(budget, len(result))


def _regex_cost(text: Any, pattern: Any) -> int:
    return _tenth(_len(text) + 1) * _quarter(_len(pattern))


def x_g_matches(budget: int, text: Any, pattern: Any) -> tuple[bool, int]:
    budget = _pay(budget, _regex_cost(text, pattern))
    return _rt_std.g_matches(text, pattern), budget


def x_m_find(budget: int, text: Any, pattern: Any) -> tuple[str, int]:
    budget = _pay(budget, _regex_cost(text, pattern))
    return _lib_strings.m_find(text, pattern), budget


def x_m_findAll(budget: int, text: Any, pattern: Any, limit: Any = -1) -> tuple[list[str], int]:
    budget = _pay(budget, _regex_cost(text, pattern))
    if type(text) is str and type(pattern) is str and type(limit) is int:
        affordable = budget // MATCH_COST + 1
        cap = affordable if limit < 0 else min(limit, affordable)
        found = regex(pattern).find_all(text, cap)  # never more than the budget can pay
        return found, _pay(budget, MATCH_COST * len(found))
    return _lib_strings.m_findAll(text, pattern, limit), budget


def x_m_contains(budget: int, text: Any, part: Any) -> tuple[bool, int]:
    budget = _pay(budget, _tenth(_len(text)) * _tenth(_len(part)))
    return _rt_std.m_contains(text, part), budget


def _affix(helper: Callable[[Any, Any], bool]) -> Callable[..., tuple[bool, int]]:
    def metered(budget: int, text: Any, part: Any) -> tuple[bool, int]:
        budget = _pay(budget, _tenth(_len(part)))
        return helper(text, part), budget

    return metered


def _scan(helper: Callable[..., Any]) -> Callable[..., tuple[Any, int]]:
    """Parsers and conversions: a tenth per character (or byte) of the first argument."""

    def metered(budget: int, value: Any, *rest: Any) -> tuple[Any, int]:
        budget = _pay(budget, _tenth(_len(value)))
        return helper(value, *rest), budget

    return metered


def x_m_validate(budget: int, named: Any, value: Any) -> tuple[Any, int]:
    budget = _pay(budget, _tenth(_len(value)))
    return m_validate(named, value), budget


# -- lists -----------------------------------------------------------------------------


def _output(helper: Callable[..., list[Any]]) -> Callable[..., tuple[list[Any], int]]:
    """slice, reverse: the result is at most the receiver, charged once built."""

    def metered(budget: int, items: Any, *args: Any) -> tuple[list[Any], int]:
        result = helper(items, *args)
        return result, _pay(budget, len(result) + 1 + _LIST_CREATE)

    return metered


def x_g_lists_range(budget: int, count: Any) -> tuple[list[int], int]:
    if type(count) is int:
        budget = _pay(budget, max(count, 0) + 1 + _LIST_CREATE)
    return _lib_lists.g_lists_range(count), budget


def x_m_flatten(budget: int, items: Any, depth: Any = 1) -> tuple[list[Any], int]:
    budget = _pay(budget, 1 + _LIST_CREATE)
    result, visited = flatten_within(items, depth, budget)
    return result, _pay(budget, visited)


def _self_compare(values: Any, budget: int) -> int:
    """cel-go's charge for sorting or de-duplicating a list: 2 n² (2.1 n² for strings),
    plus, where elements are lists or maps, walking them for each comparison."""
    size = len(values) if type(values) is list else 0
    if not size:
        return 1 + _LIST_CREATE
    factor = 21 if type(values[0]) in (str, bytes) else 20
    cost = -(-factor * size * size // 10) + 1 + _LIST_CREATE
    walked = _walked(values, budget)
    return cost + (size * walked if walked else 0)


def x_m_distinct(budget: int, items: Any) -> tuple[list[Any], int]:
    budget = _pay(budget, _self_compare(items, budget))
    return _lib_lists.m_distinct(items), budget


def x_m_sort(budget: int, items: Any) -> tuple[list[Any], int]:
    budget = _pay(budget, _self_compare(items, budget))
    return _lib_lists.m_sort(items), budget


def x_m_sortByAssociatedKeys(budget: int, items: Any, keys: Any) -> tuple[list[Any], int]:
    budget = _pay(budget, _self_compare(keys, budget))
    return _lib_lists.m_sortByAssociatedKeys(items, keys), budget


def _sets(helper: Callable[[Any, Any], bool], factor: int) -> Callable[..., tuple[bool, int]]:
    def metered(budget: int, a: Any, b: Any) -> tuple[bool, int]:
        cost = 1 + factor * _len(a) * _len(b)
        walked = _walked(a, budget) + _walked(b, budget)
        if walked:
            cost += max(_len(a), _len(b)) * walked
        budget = _pay(budget, cost)
        return helper(a, b), budget

    return metered


def _traversal(helper: Callable[[Any], Any]) -> Callable[..., tuple[Any, int]]:
    """Kubernetes' isSorted, sum, min, max: one traversal of the list."""

    def metered(budget: int, items: Any) -> tuple[Any, int]:
        budget = _pay(budget, walk(items, budget) if type(items) is list else 0)
        return helper(items), budget

    return metered


METERED: Final[dict[str, Callable[..., tuple[Any, int]]]] = {
    "x_add": x_add,
    "x_eq": x_eq,
    "x_ne": x_ne,
    "x_lt": _ordering(_rt_core.lt),
    "x_le": _ordering(_rt_core.le),
    "x_gt": _ordering(_rt_core.gt),
    "x_ge": _ordering(_rt_core.ge),
    "x_in_": x_in_,
    "x_m_charAt": x_m_charAt,
    "x_m_indexOf": _index(_lib_strings.m_indexOf),
    "x_m_lastIndexOf": _index(_lib_strings.m_lastIndexOf),
    "x_m_lowerAscii": _transform(_lib_strings.m_lowerAscii),
    "x_m_upperAscii": _transform(_lib_strings.m_upperAscii),
    "x_m_trim": _transform(_lib_strings.m_trim),
    "x_m_substring": _transform(_lib_strings.m_substring),
    "x_m_replace": x_m_replace,
    "x_m_split": x_m_split,
    "x_m_join": x_m_join,
    "x_m_format": x_m_format,
    "x_g_matches": x_g_matches,
    "x_m_matches": x_g_matches,
    "x_m_find": x_m_find,
    "x_m_findAll": x_m_findAll,
    "x_m_contains": x_m_contains,
    "x_m_startsWith": _affix(_rt_std.m_startsWith),
    "x_m_endsWith": _affix(_rt_std.m_endsWith),
    "x_g_string": _scan(_rt_std.g_string),
    "x_g_bytes": _scan(_rt_std.g_bytes),
    "x_g_strings_quote": _scan(_lib_strings.g_strings_quote),
    "x_g_quantity": _scan(_lib_k8s.g_quantity),
    "x_g_isQuantity": _scan(_lib_k8s.g_isQuantity),
    "x_g_semver": _scan(_lib_k8s.g_semver),
    "x_g_isSemver": _scan(_lib_k8s.g_isSemver),
    "x_g_ip": _scan(_lib_net.g_ip),
    "x_g_isIP": _scan(_lib_net.g_isIP),
    "x_g_ip_isCanonical": _scan(_lib_net.g_ip_isCanonical),
    "x_g_cidr": _scan(_lib_net.g_cidr),
    "x_g_isCIDR": _scan(_lib_net.g_isCIDR),
    "x_g_url": _scan(_lib_url.g_url),
    "x_g_isURL": _scan(_lib_url.g_isURL),
    "x_m_validate": x_m_validate,
    "x_m_slice": _output(_lib_lists.m_slice),
    "x_m_reverse": _output(_lib_lists.m_reverse),
    "x_g_lists_range": x_g_lists_range,
    "x_m_flatten": x_m_flatten,
    "x_m_distinct": x_m_distinct,
    "x_m_sort": x_m_sort,
    "x_m_sortByAssociatedKeys": x_m_sortByAssociatedKeys,
    "x_g_sets_contains": _sets(_lib_lists.g_sets_contains, 1),
    "x_g_sets_equivalent": _sets(_lib_lists.g_sets_equivalent, 2),
    "x_g_sets_intersects": _sets(_lib_lists.g_sets_intersects, 1),
    "x_m_isSorted": _traversal(_lib_lists.m_isSorted),
    "x_m_sum": _traversal(_lib_lists.m_sum),
    "x_m_min": _traversal(_lib_lists.m_min),
    "x_m_max": _traversal(_lib_lists.m_max),
}
"""``x_<name>``: the metered twin of the helper or operator ``<name>``."""
