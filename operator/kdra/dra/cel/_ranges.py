"""Cost and size ranges for the estimator: cel-go's ``CostEstimate``/``SizeEstimate``.

Invariants:

* Arithmetic saturates at :data:`U64` (2^64 - 1) exactly as cel-go's does.
* Fractional costs round up (``multiplyByCostFactor``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Protocol

from . import _ast as a
from . import _types as t

__all__ = ["U64", "Est", "Range", "Sizes", "exact", "mul_factor", "sat_add", "sat_mul"]

U64: Final = 2**64 - 1


def sat_add(x: int, y: int) -> int:
    return U64 if x + y > U64 else x + y


def sat_mul(x: int, y: int) -> int:
    return U64 if x * y > U64 else x * y


def _factor(x: int, factor: float) -> int:
    if x > 0 and factor > 0 and x > U64 / factor:
        return U64
    product = math.ceil(x * factor)
    return U64 if product >= 2**64 else product


@dataclass(frozen=True, slots=True)
class Range:
    """A (min, max) cost or size, saturating at :data:`U64`."""

    lo: int
    hi: int

    def __add__(self, other: Range) -> Range:
        return Range(sat_add(self.lo, other.lo), sat_add(self.hi, other.hi))

    def union(self, other: Range) -> Range:
        return Range(min(self.lo, other.lo), max(self.hi, other.hi))

    def times(self, other: Range) -> Range:
        return Range(sat_mul(self.lo, other.lo), sat_mul(self.hi, other.hi))


def exact(value: int) -> Range:
    return Range(value, value)


def mul_factor(r: Range, factor: float) -> Range:
    return Range(_factor(r.lo, factor), _factor(r.hi, factor))


@dataclass(frozen=True, slots=True)
class Est:
    """One call's estimate: its cost and, when known, the size of its result."""

    cost: Range
    size: Range | None = None


class Sizes(Protocol):
    """What the estimator knows about a node (see ``_cost``)."""

    def size(self, node: a.Node) -> Range | None: ...
    def size_or_unknown(self, node: a.Node) -> Range: ...
    def path(self, node: a.Node) -> tuple[str, ...] | None: ...
    def type(self, node: a.Node) -> t.Type: ...
