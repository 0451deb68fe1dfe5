"""Estimates for the strings extension: charged by the size of arguments *and results*.

Kubernetes 1.36 estimates the strings extension's functions by the size of their receiver
alone (``library.CostEstimator``: ``replace`` and ``split`` cost a fifth of a unit per
character of the receiver, whatever they build). That is how a 1 KiB selector could be
admitted whose second ``replace`` builds a billion characters. cel-go's strings extension,
version 5 (``ext/strings.go``, ``ext/costs.go``), registers overload estimators that charge
what is searched and what is *built*, and cel-go consults them before the environment's
estimator; kdra applies them:

* ``charAt``: a tenth per character scanned, 1 for the call and 1 for the result;
* ``indexOf``/``lastIndexOf`` on strings: a tenth of receiver size x needle size, plus 1;
* ``lowerAscii``/``upperAscii``: the scan, 1, and 1 per character of the result;
* ``trim``: the same, the result being anywhere from empty to the receiver's size;
* ``substring``: the scan, 1, and the result's size (``end - start`` when both are
  constants; cel-go subtracts as uint64, so a constant start past the end would cost
  2^64 - 1: kdra prices it as an empty result, leaving the run-time error to say what is
  wrong);
* ``replace``: a tenth of receiver x needle (each at least 1), 1, and the result's size:
  up to (receiver + 1) x (replacement + 1) characters;
* ``split``: a tenth of (receiver + 1), a new list (10), 1, and 1 per element: up to one
  per character.

``join`` is version 5's charge (a tenth of (elements + 1), 1, and the result's size) with
Kubernetes' *size* of the result (elements x their declared size, plus separators):
version 5 counts every element as one character, which would admit ``[s, s, s].join()``
for a long ``s`` as three characters. A list whose elements have no declared size (a
literal, ``split``'s result) is priced out, as Kubernetes 1.36 prices it out.

Invariants:

* Every estimate is (min, max) and saturates at :data:`~._estimates.U64`, as cel-go's.
* The run-time charges (``_rt_meter``) are the same formulas applied to the actual sizes,
  so an admitted selector's actual cost stays within its estimate.
"""

from __future__ import annotations

from typing import Final

from . import _ast as a
from ._ranges import Est, Range, Sizes, exact, mul_factor, sat_add, sat_mul

__all__ = ["strings_v5"]

_TENTH: Final = 0.1  # common.StringTraversalCostFactor
_CALL: Final = exact(1)
_LIST_CREATE: Final = 10


def _scan(size: Range) -> Range:
    return mul_factor(size, _TENTH)


def _at_least_one(size: Range) -> Range:
    return Range(max(size.lo, 1), max(size.hi, 1))


def _uint_literal(node: a.Node, default: int) -> int:
    """cel-go's ``nodeAsUintValue``: an int literal (negative ones as 0), else ``default``."""
    if isinstance(node, a.Const) and type(node.value) is int:
        return max(node.value, 0)
    return default


def _transform(target_size: Range, result: Range) -> Est:
    return Est(_scan(target_size) + _CALL + result, result)


def _replace(est: Sizes, target: a.Node, args: list[a.Node]) -> Est:
    size = est.size_or_unknown(target)
    needle = _at_least_one(est.size_or_unknown(args[0]))
    search = mul_factor(_at_least_one(size).times(needle), _TENTH)
    replacement = est.size_or_unknown(args[1]) + exact(1)
    longest = sat_mul(sat_add(size.hi, 1), replacement.hi)
    result = Range(min(size.lo, replacement.lo), longest)
    return Est(search + result + _CALL, result)


def _split(size: Range) -> Est:
    result = Range(0, size.hi)
    traversal = mul_factor(size + exact(1), _TENTH)
    return Est(traversal + result + exact(_LIST_CREATE) + _CALL, result)


def _join(est: Sizes, target: a.Node, args: list[a.Node], element: Range) -> Est:
    count = est.size_or_unknown(target)
    result = count.times(element)
    if args:
        separators = Range(max(count.lo - 1, 0), max(count.hi - 1, 0))
        result = result + est.size_or_unknown(args[0]).times(separators)
    traversal = mul_factor(count + exact(1), _TENTH)
    return Est(traversal + result + _CALL, result)


def strings_v5(
    est: Sizes, overload: str, target: a.Node | None, args: list[a.Node], element: Range
) -> Est | None:
    """The estimate for ``overload`` when it is one of the strings extension's (version 5,
    ``join`` as above: ``element`` is the declared size of the list's elements), else None."""
    if target is None:
        return None
    size = est.size_or_unknown(target)
    if overload == "string_char_at_int":
        return Est(_scan(size) + _CALL + _CALL, Range(0, 1))
    if overload.startswith(("string_index_of_string", "string_last_index_of_string")):
        return Est(_scan(size.times(est.size_or_unknown(args[0]))) + _CALL)
    if overload in ("string_lower_ascii", "string_upper_ascii"):
        return _transform(size, size)
    if overload == "string_trim":
        return _transform(size, Range(0, size.hi))
    if overload.startswith("string_substring_int"):
        start = _uint_literal(args[0], 0)
        end = _uint_literal(args[1], size.hi) if len(args) > 1 else size.hi
        return _transform(size, exact(max(end - start, 0)))
    if overload.startswith("string_replace_string_string") and len(args) >= 2:
        return _replace(est, target, args)
    if overload.startswith("string_split_string"):
        return _split(size)
    if overload in ("list_join", "list_join_string"):
        return _join(est, target, args, element)
    return None

