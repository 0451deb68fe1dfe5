"""Compiled device selectors and their cache.

Invariants:

* :func:`compile_selector` returns the *same* :class:`DeviceSelector` for the same text
  while it stays in the LRU cache (:data:`_CACHE_SIZE` entries); compile failures are
  cached too, as their message, and a fresh :class:`CelCompileError` is raised each time.
* A :class:`DeviceSelector` holds no per-device state: :meth:`DeviceSelector.matches` may
  be called concurrently and in any order. It returns only ``True`` or ``False``; every
  other outcome is a :class:`CelRuntimeError` naming the expression and the device.
* :meth:`DeviceSelector.evaluate` reports what the evaluation was charged at run time, in
  the budget's units (0..:data:`~._cost.COST_LIMIT`), also on failure (``cost``; the
  limit itself for an evaluation stopped at the limit).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

from kdra.dra.errors import CelCompileError, CelRuntimeError

from . import _check, _codegen, _cost, _parse
from ._cost import COST_LIMIT
from ._runtime import CEL_ERRORS, BudgetExceeded, describe
from ._values import CelDevice, type_name

__all__ = ["MAX_EXPRESSION_LENGTH", "DeviceSelector", "compile_selector"]

MAX_EXPRESSION_LENGTH: Final = 10 * 1024
_CACHE_SIZE: Final = 1024


class DeviceSelector:
    """One compiled CEL selector. Immutable; share it freely."""

    __slots__ = ("_function", "charged", "cost_estimate", "expression", "source")

    expression: str
    cost_estimate: int
    source: str  # the generated Python, for debugging
    charged: bool
    """It is charged at run time (a comprehension, or a metered call); if not, every
    evaluation costs 0."""
    _function: Callable[[CelDevice, list[int] | None], Any]

    def __init__(
        self, expression: str, function: Callable[[CelDevice, list[int] | None], Any],
        cost: int, source: str, charged: bool = True,
    ) -> None:
        self.expression = expression
        self._function = function
        self.cost_estimate = cost
        self.source = source
        self.charged = charged

    def matches(self, device: CelDevice, device_ref: str = "") -> bool:
        """Evaluate against one device: ``True``/``False`` for a bool result.

        Raises :class:`CelRuntimeError` naming the expression and ``device_ref`` when the
        evaluation fails (missing attribute in a known domain, type error, non-bool result,
        cost budget exhausted).
        """
        return self.evaluate(device, device_ref)[0]

    def evaluate(self, device: CelDevice, device_ref: str = "") -> tuple[bool, int]:
        """:meth:`matches`, with the cost the evaluation was charged at run time (the units
        its comprehension steps and metered calls took from the budget; 0 for a selector
        without either). A :class:`CelRuntimeError` carries the cost charged until it failed
        as ``cost``; one stopped at the limit carries the limit, :data:`~._cost.COST_LIMIT`
        (the call the budget could not pay may have worked through all that was left before
        it gave up: ``format`` and ``flatten`` build within it, ``==`` walks it)."""
        spent = [COST_LIMIT] if self.charged else None
        try:
            value = self._function(device, spent)
        except CEL_ERRORS as exc:
            raise CelRuntimeError(self.expression, describe(exc), device_ref,
                                  cost=_charged(spent)) from exc
        except BudgetExceeded:
            raise CelRuntimeError(
                self.expression,
                "operation cancelled: actual cost limit exceeded (the evaluation would "
                f"cost more than {COST_LIMIT})",
                device_ref,
                cost=COST_LIMIT,
            ) from None
        except RecursionError as exc:
            raise CelRuntimeError(self.expression, "value nested too deeply", device_ref,
                                  cost=_charged(spent)) from exc
        if value is True or value is False:
            return value, (0 if spent is None else COST_LIMIT - spent[0])
        raise CelRuntimeError(
            self.expression,
            f"expression must evaluate to bool, not {type_name(value)}",
            device_ref,
            cost=_charged(spent),
        )

    def __repr__(self) -> str:
        return f"DeviceSelector({self.expression!r})"


def _charged(spent: list[int] | None) -> int:
    """What a failed evaluation was charged, from the budget it left."""
    return 0 if spent is None else COST_LIMIT - spent[0]


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
        source, function, charged = _codegen.generate(
            tree, _check.proven_bools(tree, checked), analysis.metered
        )
    except CelCompileError as exc:
        return _Failure(exc.message)
    except (_codegen.TooComplex, RecursionError):
        return _Failure("expression is too complex")
    return DeviceSelector(expression, function, cost, source, charged)


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
