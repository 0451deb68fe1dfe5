"""Compiled device selectors and their cache.

Invariants:

* :func:`compile_selector` returns the *same* :class:`DeviceSelector` for the same text
  while it stays in the LRU cache (:data:`_CACHE_SIZE` entries); compile failures are
  cached too, as their message, and a fresh :class:`CelCompileError` is raised each time.
* A :class:`DeviceSelector` holds no per-device state: :meth:`DeviceSelector.matches` may
  be called concurrently and in any order. It returns only ``True`` or ``False``; every
  other outcome is a :class:`CelRuntimeError` naming the expression and the device.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

from kdra.dra.errors import CelCompileError, CelRuntimeError

from . import _check, _codegen, _cost, _parse
from ._runtime import CEL_ERRORS, BudgetExceeded, describe
from ._values import CelDevice, type_name

__all__ = ["MAX_EXPRESSION_LENGTH", "DeviceSelector", "compile_selector"]

MAX_EXPRESSION_LENGTH: Final = 10 * 1024
_CACHE_SIZE: Final = 1024


class DeviceSelector:
    """One compiled CEL selector. Immutable; share it freely."""

    __slots__ = ("_function", "cost_estimate", "expression", "source")

    expression: str
    cost_estimate: int
    source: str  # the generated Python, for debugging
    _function: Callable[[CelDevice], Any]

    def __init__(
        self, expression: str, function: Callable[[CelDevice], Any], cost: int, source: str
    ) -> None:
        self.expression = expression
        self._function = function
        self.cost_estimate = cost
        self.source = source

    def matches(self, device: CelDevice, device_ref: str = "") -> bool:
        """Evaluate against one device: ``True``/``False`` for a bool result.

        Raises :class:`CelRuntimeError` naming the expression and ``device_ref`` when the
        evaluation fails (missing attribute in a known domain, type error, non-bool result,
        cost budget exhausted).
        """
        try:
            value = self._function(device)
        except CEL_ERRORS as exc:
            raise CelRuntimeError(self.expression, describe(exc), device=device_ref) from exc
        except BudgetExceeded:
            raise CelRuntimeError(
                self.expression,
                "operation cancelled: actual cost limit exceeded (the evaluation would "
                f"cost more than {_cost.COST_LIMIT})",
                device=device_ref,
            ) from None
        except RecursionError as exc:
            raise CelRuntimeError(self.expression, "value nested too deeply", device_ref) from exc
        if value is True or value is False:
            return value  # type: ignore[no-any-return]
        raise CelRuntimeError(
            self.expression,
            f"expression must evaluate to bool, not {type_name(value)}",
            device=device_ref,
        )

    def __repr__(self) -> str:
        return f"DeviceSelector({self.expression!r})"


class _Failure:
    """A cached compile error (exceptions are re-created, never re-raised twice)."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile(expression: str) -> DeviceSelector | _Failure:
    try:
        tree = _parse.parse(expression)
        checked = _check.check(expression, tree)
        analysis = _cost.analyse(checked, tree)
        cost = analysis.cost.hi
        if cost > _cost.COST_LIMIT:
            return _Failure(
                f"estimated cost {cost} exceeds the limit of {_cost.COST_LIMIT}; "
                "reduce nested iteration or the size of the lists and strings it builds"
            )
        source, function = _codegen.generate(
            tree, _check.proven_bools(tree, checked), analysis.metered
        )
    except CelCompileError as exc:
        return _Failure(exc.message)
    except (_codegen.TooComplex, RecursionError):
        return _Failure("expression is too complex")
    return DeviceSelector(expression, function, cost, source)


def compile_selector(expression: str) -> DeviceSelector:
    """Compile a CEL device selector, once per distinct text (cached).

    Raises :class:`CelCompileError` for syntax errors, unknown variables, functions or
    fields, calls with no matching overload, a result that is not bool, an estimated cost
    above 1,000,000, and expressions longer than :data:`MAX_EXPRESSION_LENGTH` bytes
    (UTF-8, as upstream counts).
    """
    # A character takes at most 4 bytes: only long texts need encoding to be measured.
    if len(expression) * 4 > MAX_EXPRESSION_LENGTH and (
        len(expression.encode("utf-8", "surrogatepass")) > MAX_EXPRESSION_LENGTH
    ):
        raise CelCompileError(
            expression,
            f"expression is longer than {MAX_EXPRESSION_LENGTH} bytes",
        )
    result = _compile(expression)
    if isinstance(result, _Failure):
        raise CelCompileError(expression, result.message)
    return result
