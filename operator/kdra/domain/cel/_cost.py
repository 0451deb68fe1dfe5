"""A static upper bound on what evaluating a selector can cost.

Upstream (1.32+) rejects a selector whose *estimated* cost exceeds 1,000,000 and also stops
an evaluation at run time when its *actual* cost passes that limit. kdra does both:

* here, at compile time, an estimate in the spirit of cel-go's: every node costs 1, string
  and list work costs their size, and a comprehension costs its body times the number of
  elements it can walk. Sizes come from literals and from the API limits on a device
  (at most 32 attributes and capacities, names of at most 63 characters, string values of
  at most 64), exactly what upstream's size estimator declares;
* at run time (see ``_codegen``) every comprehension iteration is charged against a budget,
  as a backstop for devices that break those limits.

The estimate is a bound, not a prediction: it is deliberately pessimistic (a ``?:`` costs
its dearer branch, ``==`` on lists the size of the smaller side) and saturates at
:data:`_CAP` so that even absurd nesting stays cheap to estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from . import _ast as a
from ._parse import DEVICE_SLOT

__all__ = ["COST_LIMIT", "estimate"]

COST_LIMIT: Final = 1_000_000
_CAP: Final = 10**15

# API limits on one device (resource.k8s.io): upstream's estimator declares the same.
_MAX_ENTRIES: Final = 32  # attributes + capacities per device
_MAX_DOMAIN: Final = 63
_MAX_ID: Final = 32
_MAX_VALUE: Final = 64  # string/version attribute values
_MAX_DRIVER: Final = 63


@dataclass(frozen=True, slots=True)
class Shape:
    """Upper bounds for a value: ``length`` (elements, characters), ``weight`` (total size
    including nested elements), the shape of its elements and, for maps, of its keys."""

    length: int
    weight: int
    elem: Shape | None = None
    key: Shape | None = None


_SCALAR: Final = Shape(1, 1)
_ID: Final = Shape(_MAX_ID, _MAX_ID)
_DOMAIN: Final = Shape(_MAX_DOMAIN, _MAX_DOMAIN)
_VALUE: Final = Shape(_MAX_VALUE, _MAX_VALUE)
_INNER_ATTRIBUTES: Final = Shape(
    _MAX_ENTRIES, _MAX_ENTRIES * (_MAX_ID + _MAX_VALUE), elem=_VALUE, key=_ID
)
_INNER_CAPACITY: Final = Shape(_MAX_ENTRIES, _MAX_ENTRIES * (_MAX_ID + 1), elem=_SCALAR, key=_ID)
_DEVICE_FIELDS: Final = {
    "driver": Shape(_MAX_DRIVER, _MAX_DRIVER),
    "attributes": Shape(
        _MAX_ENTRIES,
        _MAX_ENTRIES * (_MAX_DOMAIN + _INNER_ATTRIBUTES.weight),
        elem=_INNER_ATTRIBUTES,
        key=_DOMAIN,
    ),
    "capacity": Shape(
        _MAX_ENTRIES,
        _MAX_ENTRIES * (_MAX_DOMAIN + _INNER_CAPACITY.weight),
        elem=_INNER_CAPACITY,
        key=_DOMAIN,
    ),
}
# The device object itself, when a selector uses it as a value ([device].all(d, ...)).
_DEVICE: Final = Shape(
    3,
    _DEVICE_FIELDS["driver"].weight
    + _DEVICE_FIELDS["attributes"].weight
    + _DEVICE_FIELDS["capacity"].weight,
)


def _sat(value: int) -> int:
    return value if value < _CAP else _CAP


def _join(x: Shape | None, y: Shape | None) -> Shape | None:
    if x is None or y is None:
        return x or y
    return Shape(
        max(x.length, y.length), max(x.weight, y.weight), _join(x.elem, y.elem), _join(x.key, y.key)
    )


def _element(shape: Shape) -> Shape:
    return shape.elem if shape.elem is not None else Shape(shape.weight, shape.weight)


def _shape_of(value: object) -> Shape:
    if isinstance(value, (str, bytes)):
        return Shape(len(value), max(len(value), 1))
    if isinstance(value, list):
        elem: Shape | None = None
        weight = len(value)
        for item in value:
            item_shape = _shape_of(item)
            elem = _join(elem, item_shape)
            weight += item_shape.weight
        return Shape(len(value), _sat(max(weight, 1)), elem)
    return _SCALAR  # numbers, bools, null, Version, Quantity


# Extra cost of functions whose work grows with their arguments' size.
_SIZED_HELPERS: Final = frozenset(
    (
        "f_contains", "f_startswith", "f_endswith", "f_matches", "f_string", "f_bytes",
        "f_int", "f_uint", "f_double", "f_bool", "f_semver", "f_is_semver", "f_quantity",
        "f_is_quantity",
    )
)  # fmt: skip


class _Estimator:
    def __init__(self) -> None:
        self.vars: dict[str, Shape] = {DEVICE_SLOT: _DEVICE}

    def run(self, node: a.Node) -> tuple[int, Shape]:
        cost, shape = self._visit(node)
        return _sat(cost), shape

    def _visit(self, node: a.Node) -> tuple[int, Shape]:
        if isinstance(node, a.Const):
            return 1, _shape_of(node.value)
        if isinstance(node, a.Var):
            return 1, self.vars[node.slot]
        if isinstance(node, a.DeviceField):
            return 1, _DEVICE_FIELDS[node.field]
        if isinstance(node, (a.Select, a.Index)):
            cost, shape = self._visit(node.operand)
            if isinstance(node, a.Index):
                cost += self._visit(node.index)[0]
            return _sat(cost + 1), _element(shape)
        if isinstance(node, a.Has):
            return _sat(self._visit(node.operand)[0] + 1), _SCALAR
        if isinstance(node, a.Call):
            return self._call(node)
        if isinstance(node, a.Unary):
            return _sat(self._visit(node.operand)[0] + 1), _SCALAR
        if isinstance(node, a.Binary):
            return self._binary(node)
        if isinstance(node, a.Logic):
            return _sat(sum(self._visit(n)[0] for n in node.operands) + 1), _SCALAR
        if isinstance(node, a.Cond):
            cond = self._visit(node.cond)[0]
            then_cost, then_shape = self._visit(node.then)
            other_cost, other_shape = self._visit(node.other)
            joined = _join(then_shape, other_shape)
            assert joined is not None
            return _sat(cond + max(then_cost, other_cost) + 1), joined
        if isinstance(node, a.ListLit):
            visited = [self._visit(item) for item in node.items]
            elem: Shape | None = None
            for _, item_shape in visited:
                elem = _join(elem, item_shape)
            weight = _sat(sum(s.weight for _, s in visited) + len(visited))
            cost = _sat(sum(c for c, _ in visited) + len(visited) + 1)
            return cost, Shape(len(visited), max(weight, 1), elem)
        if isinstance(node, a.MapLit):
            cost, weight = 1, 0
            key: Shape | None = None
            value: Shape | None = None
            for k, v in node.entries:
                k_cost, k_shape = self._visit(k)
                v_cost, v_shape = self._visit(v)
                cost += k_cost + v_cost + len(node.entries)  # duplicate-key check
                key, value = _join(key, k_shape), _join(value, v_shape)
                weight += k_shape.weight + v_shape.weight
            return _sat(cost), Shape(len(node.entries), _sat(max(weight, 1)), value, key)
        if isinstance(node, a.Comprehension):
            return self._comprehension(node)
        if isinstance(node, a.Bind):
            init_cost, init_shape = self._visit(node.init)
            self.vars[node.slot] = init_shape
            body_cost, body_shape = self._visit(node.body)
            return _sat(init_cost + body_cost + 1), body_shape
        raise TypeError(f"unknown node {node!r}")

    def _call(self, node: a.Call) -> tuple[int, Shape]:
        visited = [self._visit(arg) for arg in node.args]
        cost = sum(c for c, _ in visited) + 1
        if node.helper in _SIZED_HELPERS:
            cost += sum(s.weight for _, s in visited)
        if node.helper in ("f_string", "f_bytes") and visited:
            return _sat(cost), Shape(max(visited[0][1].length, 32), max(visited[0][1].weight, 32))
        return _sat(cost), _SCALAR

    def _binary(self, node: a.Binary) -> tuple[int, Shape]:
        left_cost, left = self._visit(node.left)
        right_cost, right = self._visit(node.right)
        cost = left_cost + right_cost + 1
        if node.op == "+":
            elem = _join(left.elem, right.elem)
            shape = Shape(
                _sat(left.length + right.length), _sat(left.weight + right.weight), elem, None
            )
            return _sat(cost + left.weight + right.weight), shape
        if node.op in ("==", "!=", "<", "<=", ">", ">="):
            return _sat(cost + min(left.weight, right.weight)), _SCALAR
        if node.op == "in":
            return _sat(cost + right.weight), _SCALAR
        return _sat(cost), _SCALAR

    def _comprehension(self, node: a.Comprehension) -> tuple[int, Shape]:
        source_cost, source = self._visit(node.source)
        var_shape = source.key if source.key is not None else _element(source)
        self.vars[node.slot] = var_shape
        body_cost, body_shape = 1, _SCALAR
        if node.pred is not None:
            body_cost += self._visit(node.pred)[0]
        if node.xform is not None:
            xform_cost, body_shape = self._visit(node.xform)
            body_cost += xform_cost
        iterations = source.length
        cost = _sat(source_cost + iterations * body_cost + 1)
        if node.kind == "map":
            return cost, Shape(
                iterations, _sat(iterations * (body_shape.weight + 1)), body_shape, None
            )
        if node.kind == "filter":
            return cost, Shape(
                iterations, _sat(iterations * (var_shape.weight + 1)), var_shape, None
            )
        return cost, _SCALAR


def estimate(node: a.Node) -> int:
    """The estimated worst-case cost of evaluating ``node``."""
    return _Estimator().run(node)[0]
