"""Which drivers a selector can match at all: a static reading of ``device.driver`` tests.

A DeviceClass usually pins its driver (``device.driver == "gpu.kdra.dev"``). Reading that from
the expression, without any device, answers "can a device of driver D ever pass this
selector?" — the admission webhook uses it to leave GPU-only environment variables out of
containers whose claims cannot get a GPU.

Invariants:
- Sound, not complete: :func:`selector_drivers` returns a set only when *every* device that
  passes the expression has a driver in it; for anything it does not understand it returns
  None ("any driver"). Recognised: ``device.driver == "x"`` (either side), ``device.driver in
  ["x", ...]``, and those combined with ``&&`` (intersection) and ``||`` (union). A negation or
  any other test of ``device.driver`` reads as "any driver".
- An expression that does not compile reads as "any driver" (the webhook's validation reports
  it; this never raises).
"""

from __future__ import annotations

from functools import lru_cache

from kdra.dra.errors import CelCompileError

from . import _ast as a
from ._parse import parse


@lru_cache(maxsize=256)
def selector_drivers(expression: str) -> frozenset[str] | None:
    """The drivers a device must have to pass ``expression``; None: it may have any."""
    try:
        tree = parse(expression)
    except CelCompileError:
        return None
    return _drivers(tree)


def _drivers(node: a.Node) -> frozenset[str] | None:
    if isinstance(node, a.Logic):
        parts = [_drivers(operand) for operand in node.operands]
        if node.op == "&&":
            known = [part for part in parts if part is not None]
            if not known:
                return None
            result = known[0]
            for part in known[1:]:
                result &= part
            return result
        if any(part is None for part in parts):
            return None
        return frozenset().union(*(part for part in parts if part is not None))
    if isinstance(node, a.Binary) and node.op == "==":
        for this, other in ((node.left, node.right), (node.right, node.left)):
            if _is_driver(this) and isinstance(other, a.Const) and isinstance(other.value, str):
                return frozenset({str(other.value)})
        return None
    if isinstance(node, a.Binary) and node.op == "in" and _is_driver(node.left):
        if isinstance(node.right, a.ListLit) and all(
                isinstance(item, a.Const) and isinstance(item.value, str)
                for item in node.right.items):
            return frozenset(str(item.value) for item in node.right.items
                             if isinstance(item, a.Const))
        return _constant_list(node.right)
    return None


def _is_driver(node: a.Node) -> bool:
    return isinstance(node, a.DeviceField) and node.field == "driver"


def _constant_list(node: a.Node) -> frozenset[str] | None:
    """A folded constant list of strings (``_parse`` may fold literal lists)."""
    if isinstance(node, a.Const) and isinstance(node.value, list | tuple) and all(
            isinstance(item, str) for item in node.value):
        return frozenset(str(item) for item in node.value)
    return None
