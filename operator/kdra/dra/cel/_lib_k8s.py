"""Kubernetes' semver and quantity CEL libraries.

Invariants:

* ``semver(s)`` parses strict semantic versions (blang/semver's rules, see
  ``kdra.dra.semver``); ``semver(s, true)`` first normalises as upstream's version 1 of
  the library does: drops a leading ``v``, leading zeros, and fills in a missing minor or
  patch (a short version may not carry pre-release or build data).
* Quantities are ``kdra.dra.quantity`` values; ``sign`` is a global function
  (``sign(q)``), as upstream declares it.
* Failures are CEL errors (``_rt_core``) carrying the parser's message.
"""

from __future__ import annotations

from typing import Any, Final

from kdra.dra.quantity import InvalidQuantity, Quantity, parse_quantity
from kdra.dra.semver import InvalidVersion, Version, parse_version

from ._rt_core import EvalError, check_int, no_overload

__all__ = ["FUNCTIONS", "normalize_version"]
# -- Kubernetes semver library -------------------------------------------------------------


def normalize_version(text: str) -> Version:
    """upstream's normalizeAndParse: ``v1.0`` -> 1.0.0, ``01.02.03`` -> 1.2.3."""
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, part in enumerate(parts):
        if len(part) > 1:
            part = part.lstrip("0")
            if not part or part[0] not in "0123456789":
                part = "0" + part
            parts[i] = part
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise InvalidVersion("short version cannot contain PreRelease/Build meta data")
        parts.extend("0" * (3 - len(parts)))
    return parse_version(".".join(parts))


def _parse(op: str, text: Any, normalize: Any) -> Version:
    if type(text) is not str or type(normalize) is not bool:
        raise no_overload(op, text, normalize)
    return normalize_version(text) if normalize else parse_version(text)


def g_semver(text: Any, normalize: Any = False) -> Version:
    try:
        return _parse("semver", text, normalize)
    except InvalidVersion as exc:
        raise EvalError(str(exc)) from None


def g_isSemver(text: Any, normalize: Any = False) -> bool:
    try:
        _parse("isSemver", text, normalize)
    except InvalidVersion:
        return False
    return True


def _version(op: str, value: Any) -> Version:
    if type(value) is Version:
        return value  # type: ignore[no-any-return]
    raise no_overload(op, value)


def m_major(value: Any) -> int:
    return check_int(_version("major", value).major)


def m_minor(value: Any) -> int:
    return check_int(_version("minor", value).minor)


def m_patch(value: Any) -> int:
    return check_int(_version("patch", value).patch)


def _compare(op: str, a: Any, b: Any) -> int:
    kind = type(a)
    if kind is type(b) and (kind is Version or kind is Quantity):
        return a.compare(b)  # type: ignore[no-any-return]
    raise no_overload(op, a, b)


def m_compareTo(a: Any, b: Any) -> int:
    return _compare("compareTo", a, b)


def m_isGreaterThan(a: Any, b: Any) -> bool:
    return _compare("isGreaterThan", a, b) > 0


def m_isLessThan(a: Any, b: Any) -> bool:
    return _compare("isLessThan", a, b) < 0


# -- Kubernetes quantity library -----------------------------------------------------------


def g_quantity(text: Any) -> Quantity:
    if type(text) is not str:
        raise no_overload("quantity", text)
    try:
        return parse_quantity(text)
    except InvalidQuantity as exc:
        raise EvalError(str(exc)) from None


def g_isQuantity(text: Any) -> bool:
    if type(text) is not str:
        raise no_overload("isQuantity", text)
    try:
        parse_quantity(text)
    except InvalidQuantity:
        return False
    return True


def _quantity(op: str, value: Any) -> Quantity:
    if type(value) is Quantity:
        return value  # type: ignore[no-any-return]
    raise no_overload(op, value)


def g_sign(value: Any) -> int:
    return _quantity("sign", value).sign()


def m_asInteger(value: Any) -> int:
    number = _quantity("asInteger", value).as_int64()
    if number is None:
        raise EvalError("cannot convert value to integer")
    return number


def m_isInteger(value: Any) -> bool:
    return _quantity("isInteger", value).as_int64() is not None


def m_asApproximateFloat(value: Any) -> float:
    return _quantity("asApproximateFloat", value).as_approximate_float()


def _arith(op: str, q: Any, other: Any) -> Quantity:
    receiver = _quantity(op, q)
    if type(other) is not Quantity and type(other) is not int:
        raise no_overload(op, q, other)
    try:
        return receiver.add(other) if op == "add" else receiver.sub(other)
    except InvalidQuantity as exc:
        raise EvalError(str(exc)) from None


def m_add(q: Any, other: Any) -> Quantity:
    return _arith("add", q, other)


def m_sub(q: Any, other: Any) -> Quantity:
    return _arith("sub", q, other)


FUNCTIONS: Final[dict[str, object]] = {
    name: value for name, value in globals().items() if name.startswith(("g_", "m_"))
}
