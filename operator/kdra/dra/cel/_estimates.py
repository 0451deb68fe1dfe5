"""What one function call costs in cel-go's estimator, with Kubernetes' library estimates.

cel-go asks, in this order, for the cost of a call: the overload estimators that an
extension registers (lists and sets; the strings extension's, version 5, in
``_estimates_strings``), the environment's estimator (Kubernetes' ``library.CostEstimator``:
regex, lists, quantity, semver, IP/CIDR/URL, format, and ``==`` on Kubernetes types), then
its own rules for standard functions by overload (``in`` on a list, string comparison,
``matches``, ``contains``, ``+``); anything else costs 1. Every estimate includes the cost of
the arguments (not the receiver's).

Where Python does more work than Go, kdra charges it (documented in docs/cel.md): ``+``
also costs the size of what it builds (cel-go: a tenth per character for strings, 1 for
lists, which Go concatenates lazily), and ``findAll`` the number of matches it returns.

Invariants:

* Arithmetic saturates at :data:`U64` (2^64 - 1) exactly as cel-go's does.
* Fractional costs round up (``multiplyByCostFactor``).
"""

from __future__ import annotations

from typing import Final

from . import _ast as a
from . import _types as t
from ._estimates_strings import strings_v5
from ._parse import DEVICE_SLOT
from ._ranges import U64, Est, Range, Sizes, exact, mul_factor, sat_add, sat_mul
from ._rt_core import MATCH_COST

__all__ = [
    "U64",
    "Est",
    "Range",
    "Sizes",
    "declared_size",
    "exact",
    "function_cost",
    "mul_factor",
]

_STRING_FACTOR: Final = 0.1  # common.StringTraversalCostFactor
_REGEX_FACTOR: Final = 0.25  # common.RegexStringLengthCostFactor
_LIST_CREATE: Final = 10
_FORMAT_REGEX: Final = 128  # MaxNameFormatRegexSize
_FORMAT_SIZE: Final = 64  # MaxFormatSize


_UNKNOWN: Final = Range(0, U64)


# Declared sizes of what a path through ``device`` reaches (upstream's sizeEstimator).
_ATTR_VALUE: Final = 64
_DEVICE_SIZES: Final[dict[tuple[str, ...], int]] = {
    ("driver",): 63,
    ("attributes",): 32,
    ("capacity",): 32,
    ("attributes", "@keys"): 63,
    ("capacity", "@keys"): 63,
    ("attributes", "@values"): 32,
    ("capacity", "@values"): 32,
    ("attributes", "@values", "@keys"): 32,
    ("capacity", "@values", "@keys"): 32,
    ("attributes", "@values", "@values"): _ATTR_VALUE,
}


def declared_size(path: tuple[str, ...] | None) -> Range | None:
    if not path or path[0] != DEVICE_SLOT:
        return None
    rest = path[1:]
    # Any name selected in an inner attribute map is an attribute value.
    if len(rest) >= 3 and rest[:2] == ("attributes", "@values") and rest[2] != "@keys":
        if len(rest) == 3:
            return Range(0, _ATTR_VALUE)
        return None
    found = _DEVICE_SIZES.get(rest)
    return Range(0, found) if found is not None else None


def _int_literal(node: a.Node, default: int) -> int:
    if isinstance(node, a.Const) and type(node.value) is int:
        return max(node.value, 0)
    return default


def _element_size(est: Sizes, target: a.Node) -> Range:
    """The size of a list's elements, from the list's path (upstream's itemsNode)."""
    base = est.path(target)
    found = declared_size((*base, "@items")) if base is not None else None
    return found if found is not None else _UNKNOWN


def _ext_lists(est: Sizes, overload: str, target: a.Node | None, args: list[a.Node]) -> Est | None:
    """cel-go's lists and sets extensions (``estimateListCall`` and friends)."""

    def allocating(factor: float, size: Range) -> Est:
        return Est(mul_factor(size, factor) + exact(1 + _LIST_CREATE), size)

    if overload.startswith("list_sets_") and len(args) == 2:
        factor = 2.0 if "equivalent" in overload else 1.0
        product = est.size_or_unknown(args[0]).times(est.size_or_unknown(args[1]))
        return Est(mul_factor(product, factor) + exact(1))
    if overload == "lists_range" and target is None:
        return allocating(1, exact(_int_literal(args[0], U64)))
    if target is None:
        return None
    size = est.size_or_unknown(target)
    if overload == "list_slice" and len(args) == 2:
        start, end = _int_literal(args[0], 0), _int_literal(args[1], size.hi)
        return allocating(1, exact(end - start if end >= start else U64))
    if overload == "list_reverse":
        return allocating(1, size)
    if overload in ("list_flatten", "list_flatten_int"):
        depth = _int_literal(args[0], U64) if args else 1
        return allocating(depth, size)
    if overload == "list_distinct":
        return allocating(2.0, size.times(size))
    if overload.endswith("_sort"):
        string = overload in ("list_string_sort", "list_bytes_sort")
        return allocating(2.1 if string else 2.0, size.times(size))
    return None


def _kubernetes(
    est: Sizes, name: str, overload: str, target: a.Node | None, args: list[a.Node]
) -> Est | None:
    """Kubernetes' ``library.CostEstimator.EstimateCallCost``, by function name."""
    if name in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf") and target:
        target_type = est.type(target)
        if target_type.params:  # a list: one comparison per element
            elem_cost = exact(1)
            if target_type.params[0].kind in ("string", "bytes"):
                elem_cost = elem_cost + mul_factor(_element_size(est, target), _STRING_FACTOR)
            return Est(est.size_or_unknown(target).times(elem_cost))
        return Est(mul_factor(est.size_or_unknown(target), _STRING_FACTOR))
    if name == "url" and len(args) == 1:
        size = est.size_or_unknown(args[0])
        return Est(mul_factor(size, _STRING_FACTOR), size)
    if name in ("find", "findAll") and target and args:
        size = est.size_or_unknown(target)
        text = mul_factor(size + exact(1), _STRING_FACTOR)
        regex = mul_factor(est.size_or_unknown(args[0]), _REGEX_FACTOR)
        result = Range(0, size.hi)
        if name == "findAll":  # kdra: and the matches it makes, a Python object each
            return Est(text.times(regex) + mul_factor(result, MATCH_COST), result)
        return Est(text.times(regex), result)
    if name in ("cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver") and args:
        return Est(mul_factor(est.size_or_unknown(args[0]), _STRING_FACTOR))
    if name == "ip":
        if overload == "cidr_ip":
            return Est(exact(1))
        if args:
            return Est(mul_factor(est.size_or_unknown(args[0]), _STRING_FACTOR))
    if name == "ip.isCanonical" and args:
        return Est(mul_factor(est.size_or_unknown(args[0]), 2 * _STRING_FACTOR))
    if name in ("containsIP", "containsCIDR") and args:
        bytes_ = Range(4, 16)
        cost = mul_factor(bytes_ + bytes_, _STRING_FACTOR)
        if name == "containsCIDR":
            cost = cost + mul_factor(bytes_, _STRING_FACTOR) + exact(1)
        if overload.endswith("_string"):
            cost = cost + mul_factor(est.size_or_unknown(args[0]), _STRING_FACTOR)
        return Est(cost)
    if name == "validate" and args:
        size = mul_factor(est.size_or_unknown(args[0]), _STRING_FACTOR)
        return Est(mul_factor(size, _FORMAT_REGEX * _REGEX_FACTOR))
    if name in _NOMINAL:
        return Est(exact(1))
    if name == "_==_" and len(args) == 2:
        return _k8s_equals(est, args)
    return None


_NOMINAL: Final = frozenset(
    (
        "masked", "prefixLength", "family", "isUnspecified", "isLoopback",
        "isLinkLocalMulticast", "isLinkLocalUnicast", "isGlobalUnicast", "format.named",
        "sign", "asInteger", "isInteger", "asApproximateFloat", "isGreaterThan", "isLessThan",
        "compareTo", "add", "sub", "major", "minor", "patch", "getScheme", "getHostname",
        "getHost", "getPort", "getEscapedPath", "getQuery",
    )
)  # fmt: skip


def _k8s_equals(est: Sizes, args: list[a.Node]) -> Est | None:
    lhs, rhs = est.type(args[0]), est.type(args[1])
    if lhs != rhs:
        return None
    if lhs in (t.IP, t.CIDR, t.QUANTITY, t.SEMVER):
        return Est(exact(1))
    if lhs == t.FORMAT:
        return Est(mul_factor(Range(1, _FORMAT_SIZE), _STRING_FACTOR))
    if lhs == t.URL:
        found = est.size(args[1])  # upstream takes the right-hand size twice
        size = found if found is not None else exact(1)
        return Est(mul_factor(Range(1, size.hi), _STRING_FACTOR))
    return None


def _standard(est: Sizes, overload: str, target: a.Node | None, args: list[a.Node]) -> Est | None:
    """cel-go's own estimates for standard and strings-extension overloads."""
    if overload == "string_format" and target is not None:
        return Est(mul_factor(est.size_or_unknown(target), _STRING_FACTOR))
    if overload in ("string_to_bytes", "bytes_to_string", "strings_quote") and len(args) == 1:
        size = est.size_or_unknown(args[0])
        if overload == "string_to_bytes":
            result = Range(size.lo, sat_mul(size.hi, 4))
        elif overload == "bytes_to_string":
            result = Range(size.lo // 4, size.hi)
        else:
            result = Range(sat_add(size.lo, 2), sat_add(sat_mul(size.hi, 2), 2))
        return Est(mul_factor(size, _STRING_FACTOR), result)
    if overload in ("starts_with_string", "ends_with_string") and len(args) == 1:
        return Est(mul_factor(est.size_or_unknown(args[0]), _STRING_FACTOR))
    if overload == "in_list" and len(args) == 2:
        return Est(mul_factor(est.size_or_unknown(args[1]), 1))
    if overload == "matches_string" and target is not None and len(args) == 1:
        text = mul_factor(est.size_or_unknown(target) + exact(1), _STRING_FACTOR)
        regex = mul_factor(est.size_or_unknown(args[0]), _REGEX_FACTOR)
        return Est(text.times(regex))
    if overload == "contains_string" and target is not None and len(args) == 1:
        text = mul_factor(est.size_or_unknown(target), _STRING_FACTOR)
        part = mul_factor(est.size_or_unknown(args[0]), _STRING_FACTOR)
        return Est(text.times(part))
    if overload in ("add_string", "add_bytes", "add_list") and len(args) == 2:
        # cel-go charges a tenth per character of a string built, 1 for a list (its lists
        # concatenate lazily); kdra adds the result's size: Python copies both operands.
        size = est.size_or_unknown(args[0]) + est.size_or_unknown(args[1])
        if overload == "add_list":
            return Est(exact(1) + size, size)
        return Est(mul_factor(size, _STRING_FACTOR) + size, size)
    if overload in _SIZED_COMPARISONS and len(args) == 2:
        smallest = min(est.size_or_unknown(args[0]).hi, est.size_or_unknown(args[1]).hi)
        return Est(mul_factor(Range(1 if smallest > 0 else 0, smallest), _STRING_FACTOR))
    return None


_SIZED_COMPARISONS: Final = frozenset(
    [f"{op}_{kind}" for op in ("less", "greater", "less_equals", "greater_equals")
     for kind in ("string", "bytes")] + ["equals", "not_equals"]
)  # fmt: skip


def function_cost(
    est: Sizes, name: str, overload: str, target: a.Node | None, args: list[a.Node]
) -> Est:
    """cel-go's functionCost for one overload of a call, without its arguments' costs: what
    the call itself costs, and the size of its result when known."""
    found = (
        _ext_lists(est, overload, target, args)
        or (target is not None
            and strings_v5(est, overload, target, args, _element_size(est, target)))
        or _kubernetes(est, name, overload, target, args)
        or _standard(est, overload, target, args)
    )
    return found if found is not None else Est(exact(1))
