"""The estimated cost of a selector, by cel-go's estimator and upstream DRA's declared sizes.

Upstream (1.32+) rejects a selector whose *estimated* cost exceeds 1,000,000 and stops an
evaluation whose *actual* cost passes that limit. This module reproduces the estimate:
cel-go's ``checker/cost.go`` applied to the macro expansions cel-go's parser produces, with
the function estimates of cel-go's extensions (strings version 5, lists version 3, sets) and
of Kubernetes' ``library.CostEstimator``, and the sizes
``k8s.io/dynamic-resource-allocation/cel`` declares for ``device``: driver ≤ 63 characters,
at most 32 domains of at most 32 attributes (or capacities), domains ≤ 63, names ≤ 32 and
attribute values ≤ 64 characters.

Costs and sizes are (min, max) ranges; the limit applies to the max. In cel-go's units:

* a constant costs 0, a variable or a field selection on a map or object 1, an operator
  or function call 1 plus its arguments, a list literal 10 plus its items, a map literal 30;
* string work costs a tenth of a unit per character (rounded up), ``"x" in list`` the list's
  size, ``"x" in map`` 1 (so ``"x" in device.attributes["d"]`` costs 4);
* what a call builds costs its size: a character of ``replace``'s, ``lowerAscii``'s or
  ``join``'s result 1, an element of ``split``'s 1 (``_estimates_strings``), and the result
  of ``+`` its size (``_estimates``);
* sizes flow: a ``cel.bind`` variable, a ``?:`` and a call's result have the size the
  estimate found for what they hold, so ``cel.bind(s, t.replace("a", t), s.replace("a",
  t))`` is priced by how long ``s`` may be;
* a comprehension costs its range, plus its size times the cost of one step of its
  expansion (``l.all(x, p)`` is 3 + p per element, ``exists`` 4 + p, ``map`` 12 + f ...);
* unknown sizes are 2^64 - 1 and every sum or product saturates there, as in cel-go: an
  expression whose cost depends on the size of something unbounded is never accepted.

Invariants:

* :func:`analyse` needs the checked types (``_check``) and never evaluates anything.
* ``_codegen`` enforces the same limit at run time: it charges every comprehension step,
  and every call :func:`analyse` lists as metered is charged by what it actually does
  (``_rt_meter``) before it builds its result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from . import _ast as a
from . import _types as t
from ._check import Checked, operator_name
from ._estimates import U64, Range, declared_size, exact, function_cost, mul_factor
from ._parse import DEVICE_SLOT
from ._rt_core import COST_LIMIT

__all__ = ["COST_LIMIT", "METER_ABOVE", "U64", "Analysis", "Range", "analyse", "estimate"]

_UNKNOWN: Final = Range(0, U64)
_LIST_CREATE: Final = 10

METER_ABOVE: Final = 100
"""A call whose estimated cost (its own, arguments aside) is above this is charged at run
time by what it actually does; one at or below it is covered by its estimate alone (typical
selectors never reach the meter: it costs a function call per operation)."""

# Calls whose estimate does not bound their work: upstream estimates format by its template
# and flatten by its receiver's length, whatever they build.
_UNSEEN_WORK: Final = frozenset(("format", "flatten"))
# Calls that compare the elements of lists: lists and maps among them are compared element
# by element (also ==, !=, in, indexOf: see needs_meter).
_SELF_COMPARING: Final = frozenset(
    ("distinct", "sets.contains", "sets.equivalent", "sets.intersects")
)
_MAP_CREATE: Final = 30


@dataclass(frozen=True, slots=True)
class Entry:
    """Sizes of a container's keys (or indices) and values, when known."""

    kind: str  # list | map
    key: Range
    val: Range


@dataclass(frozen=True, slots=True)
class Local:
    path: tuple[str, ...] | None
    size: Range | None
    entry: Entry | None


def _union_entry(x: Entry | None, y: Entry | None) -> Entry | None:
    if x is None or y is None:
        return None
    return Entry(x.kind, x.key.union(y.key), x.val.union(y.val))


class _Estimator:
    def __init__(self, checked: Checked) -> None:
        self.checked = checked
        self.paths: dict[int, tuple[str, ...]] = {}
        self.sizes: dict[int, Range] = {}
        self.entries: dict[int, Entry] = {}
        self.locals: dict[str, Local] = {DEVICE_SLOT: Local((DEVICE_SLOT,), None, None)}
        self.metered: set[int] = set()

    # -- sizes ---------------------------------------------------------------------

    def path(self, node: a.Node) -> tuple[str, ...] | None:
        return self.paths.get(id(node))

    def type(self, node: a.Node) -> t.Type:
        return self.checked.type(node)

    def size(self, node: a.Node) -> Range | None:
        """cel-go's computeSize: computed, literal, declared, scalar, or a variable's."""
        found = self.sizes.get(id(node))
        if found is not None:
            return found
        if isinstance(node, a.Const):
            value = node.value
            if isinstance(value, (str, bytes)):
                return exact(len(value))
            if isinstance(value, (bool, int, float)) or value is None:
                return exact(1)
            return None
        if isinstance(node, a.ListLit):
            return exact(len(node.items))
        if isinstance(node, a.MapLit):
            return exact(len(node.entries))
        declared = declared_size(self.path(node))
        if declared is not None:
            return declared
        typ = self.type(node)
        if _scalar(typ):
            return exact(1)
        if isinstance(node, a.Var):
            return self.locals[node.slot].size
        return None

    def size_or_unknown(self, node: a.Node) -> Range:
        found = self.size(node)
        return found if found is not None else _UNKNOWN

    def entry(self, node: a.Node) -> Entry | None:
        found = self.entries.get(id(node))
        if found is not None:
            return found
        if isinstance(node, a.Var):
            return self.locals[node.slot].entry
        return None

    def push(self, slot: str, node: a.Node) -> None:
        """A bound variable: the path, size and entry sizes of what it is bound to."""
        self.locals[slot] = Local(self.path(node), self.size(node), self.entry(node))

    def push_iter(self, slot: str, source: a.Node, part: str) -> None:
        """An iteration variable: ``part`` is "single", "key" or "value"."""
        entry = self.entry(source)
        kind = entry.kind if entry is not None else self.type(source).kind
        is_list = kind == "list"
        if part == "key":
            size, sub = (entry.key if entry else None), ("@indices" if is_list else "@keys")
        elif part == "value" or is_list:
            size, sub = (entry.val if entry else None), ("@items" if is_list else "@values")
        else:
            size, sub = (entry.key if entry else None), "@keys"
        base = self.path(source)
        path = (*base, sub) if base is not None else None
        self.locals[slot] = Local(path, size, None)

    # -- costs ---------------------------------------------------------------------

    def cost(self, node: a.Node) -> Range:
        if isinstance(node, a.Const):
            return exact(0)
        if isinstance(node, (a.Var, a.TypeLit)):
            if isinstance(node, a.Var):
                local = self.locals[node.slot]
                if local.path is not None:
                    self.paths[id(node)] = local.path
            return exact(1)
        if isinstance(node, a.DeviceField):
            self.paths[id(node)] = (DEVICE_SLOT, node.field)
            return exact(2)  # the variable, and the field of an object
        if isinstance(node, a.Select):
            cost = self.cost(node.operand)
            if self.type(node.operand).kind in ("map", "struct", "param"):
                cost = cost + exact(1)
            base = self.path(node.operand)
            if base is not None:
                self.paths[id(node)] = (*base, node.field)
            return cost
        if isinstance(node, a.Has):
            return self.cost(node.operand)  # presence tests are free (upstream's option)
        if isinstance(node, a.Index):
            return self.call(node, "_[_]", None, [node.operand, node.index])
        if isinstance(node, a.Call):
            if node.function == "dyn":
                cost = self.cost(node.args[0]) + exact(1)
                self.copy_sizes(node, node.args[0])
                return cost
            if node.member:
                return self.call(node, node.function, node.args[0], list(node.args[1:]))
            return self.call(node, node.function, None, list(node.args))
        if isinstance(node, (a.Unary, a.Binary)):
            operands = [node.operand] if isinstance(node, a.Unary) else [node.left, node.right]
            return self.call(node, operator_name(node), None, operands)
        if isinstance(node, a.Logic):
            costs = [self.cost(operand) for operand in node.operands]
            return Range(costs[0].lo, sum_max(costs))
        if isinstance(node, a.Cond):
            return self.conditional(node)
        if isinstance(node, a.ListLit):
            total = exact(_LIST_CREATE)
            item_size = Range(0 if not node.items else U64, 0)
            for item in node.items:
                total = total + self.cost(item)
                item_size = item_size.union(self.size_or_unknown(item))
            self.entries[id(node)] = Entry("list", exact(1), item_size)
            return total
        if isinstance(node, a.MapLit):
            total = exact(_MAP_CREATE)
            empty = 0 if not node.entries else U64
            key_size, val_size = Range(empty, 0), Range(empty, 0)
            for k, v in node.entries:
                total = total + self.cost(k) + self.cost(v)
                key_size = key_size.union(self.size_or_unknown(k))
                val_size = val_size.union(self.size_or_unknown(v))
            self.entries[id(node)] = Entry("map", key_size, val_size)
            return total
        if isinstance(node, a.Comprehension):
            return self.comprehension(node)
        if isinstance(node, a.Bind):
            init = self.cost(node.init)
            self.push(node.slot, node.init)
            body = self.cost(node.body)
            self.copy_sizes(node, node.body)
            return exact(_LIST_CREATE) + init + body  # the empty range cel.bind expands to
        raise TypeError(f"unknown node {node!r}")

    def copy_sizes(self, dst: a.Node, src: a.Node) -> None:
        size, entry = self.size(src), self.entry(src)
        if size is not None:
            self.sizes[id(dst)] = size
        if entry is not None:
            self.entries[id(dst)] = entry

    def conditional(self, node: a.Cond) -> Range:
        cond, then, other = self.cost(node.cond), self.cost(node.then), self.cost(node.other)
        self.sizes[id(node)] = self.size_or_unknown(node.then).union(
            self.size_or_unknown(node.other)
        )
        joined = _union_entry(self.entry(node.then), self.entry(node.other))
        if joined is not None:
            self.entries[id(node)] = joined
        return cond + then.union(other)

    def call(self, node: a.Node, name: str, target: a.Node | None, args: list[a.Node]) -> Range:
        arg_costs = [self.cost(arg) for arg in args]
        total = exact(0)
        if target is not None:
            total = self.cost(target)
        for cost in arg_costs:
            total = total + cost
        overloads = self.checked.overloads.get(id(node), ())
        own = Range(U64, 0)
        result: Range | None = None
        for overload in overloads:
            est = function_cost(self, name, overload, target, args)
            own = own.union(est.cost)
            if est.size is not None:
                result = est.size if result is None else result.union(est.size)
            if overload in ("index_list", "index_map", "optional_list_index_int",
                            "optional_map_index_value"):  # fmt: skip
                entry = self.entry(args[0])
                result = entry.val if entry is not None else None
                base = self.path(args[0])
                sub = "@items" if "list" in overload else "@values"
                if base is not None:
                    self.paths[id(node)] = (*base, sub)
            if result is None:
                result = self.size(node)
        if result is not None:
            self.sizes[id(node)] = result
        operands = [target, *args] if target is not None else args
        if self.needs_meter(name, own, operands):
            self.metered.add(id(node))
        return total + own

    def needs_meter(self, name: str, own: Range, operands: list[a.Node]) -> bool:
        """Whether the call is charged at run time (``_rt_meter``), not only estimated: when
        its estimate is not small, when the estimate does not see what it builds
        (``format``, ``flatten``), or when it compares lists or maps element by element."""
        if own.hi > METER_ABOVE or name in _UNSEEN_WORK:
            return True
        if name in ("_==_", "_!=_"):  # unless a side is scalar, or a literal, which bounds it
            return all(_may_hold_containers(self.type(n)) and not _literal(n) for n in operands)
        if name in ("@in", "indexOf", "lastIndexOf"):  # the value sought, compared with each
            sought = operands[0] if name == "@in" else operands[-1]
            return _may_hold_containers(self.type(sought))
        if name in _SELF_COMPARING:  # the elements, compared with each other
            return any(_may_hold_containers(_element(self.type(n))) for n in operands)
        return False

    def comprehension(self, node: a.Comprehension) -> Range:
        kind = node.kind
        source_cost = self.cost(node.source)
        if kind in ("optMap", "optFlatMap"):
            return self.optional_macro(node, source_cost)
        if kind == "sortBy":
            return self.sort_by(node, source_cost)
        if node.slot2 is not None:
            self.push_iter(node.slot, node.source, "key")
            self.push_iter(node.slot2, node.source, "value")
        else:
            self.push_iter(node.slot, node.source, "single")
        pred = self.cost(node.pred) if node.pred is not None else None
        xform = self.cost(node.xform) if node.xform is not None else None
        one = exact(1)
        if kind == "all":
            init, result, step = exact(0), one, exact(2) + Range(1, 1 + _max(pred))
        elif kind == "exists":
            init, result, step = exact(0), one, exact(3) + Range(1, 1 + _max(pred))
        elif kind == "exists_one":
            assert pred is not None
            init, result, step = exact(0), exact(2), pred + Range(1, 2)
        else:
            container = "map" if kind in ("transformMap", "transformMapEntry") else "list"
            init = exact(_MAP_CREATE if container == "map" else _LIST_CREATE)
            result = one
            filt: Range | None
            if kind == "filter":
                assert pred is not None
                body, filt = exact(13), pred  # pred ? accu + [x] : accu
            else:
                filt = pred  # the optional filter of map and transform*
                if kind in ("map", "transformList"):
                    body = exact(12) + _need(xform)  # accu + [f(x)]
                elif kind == "transformMap":
                    body = exact(3) + _need(xform)  # cel.@mapInsert(accu, k, f(k, v))
                else:
                    body = exact(2) + _need(xform)  # cel.@mapInsert(accu, f(k, v))
            step = body if filt is None else filt + body.union(one)
            self.set_container_sizes(node, container)
        count = self.size_or_unknown(node.source)
        return source_cost + init + result + count.times(step)

    def set_container_sizes(self, node: a.Comprehension, container: str) -> None:
        count = self.size_or_unknown(node.source)
        self.sizes[id(node)] = count
        if container == "list":
            elem = node.xform if node.kind != "filter" else None
            if elem is not None:
                val = Range(0, self.size_or_unknown(elem).hi)
            elif node.kind == "filter":
                val = Range(0, (self.locals[node.slot].size or _UNKNOWN).hi)
            else:
                return
            self.entries[id(node)] = Entry("list", exact(1), val)

    def optional_macro(self, node: a.Comprehension, source_cost: Range) -> Range:
        self.locals[node.slot] = Local(None, None, None)
        body = self.cost(_need_node(node.xform))
        bound = exact(_LIST_CREATE) + source_cost + exact(1) + body  # cel.bind(v, t.value(), e)
        if node.kind == "optMap":
            bound = bound + exact(1)  # optional.of(...)
        return source_cost + exact(1) + bound.union(exact(1))  # t.hasValue() ? ... : none()

    def sort_by(self, node: a.Comprehension, source_cost: Range) -> Range:
        self.push(node.slot, node.source)
        self.push_iter(node.slot, node.source, "single")
        key = self.cost(_need_node(node.xform))
        count = self.size_or_unknown(node.source)
        keys = exact(1 + _LIST_CREATE + 1) + count.times(exact(12) + key)  # l.map(v, key)
        factor = 2.1 if self.type(_need_node(node.xform)).kind in ("string", "bytes") else 2.0
        sort = mul_factor(count.times(count), factor) + exact(1 + _LIST_CREATE)
        self.sizes[id(node)] = count
        return exact(_LIST_CREATE) + source_cost + exact(1) + keys + sort


def sum_max(costs: list[Range]) -> int:
    total = 0
    for cost in costs:
        total = min(U64, total + cost.hi)
    return total


def _max(cost: Range | None) -> int:
    return cost.hi if cost is not None else 0


def _need(cost: Range | None) -> Range:
    assert cost is not None
    return cost


def _need_node(node: a.Node | None) -> a.Node:
    assert node is not None
    return node


def _scalar(typ: t.Type) -> bool:
    if typ.kind in ("bool", "double", "int", "uint", "duration", "timestamp"):
        return True
    if typ.kind == "opaque" and typ.name == "optional_type":
        return _scalar(typ.params[0])
    return False


def _may_hold_containers(typ: t.Type) -> bool:
    """Whether a value of this static type may be, or hold, a list or a map (attribute
    values, of type ``any``, are scalars)."""
    if typ.kind in ("list", "map", "dyn", "param", "error"):
        return True
    return typ.kind == "opaque" and any(_may_hold_containers(p) for p in typ.params)


def _element(typ: t.Type) -> t.Type:
    return typ.params[0] if typ.kind == "list" and typ.params else typ


def _literal(node: a.Node) -> bool:
    """A constant, or a list or map literal of constants: its size bounds a comparison."""
    if isinstance(node, a.Const):
        return True
    if isinstance(node, a.ListLit):
        return all(_literal(item) for item in node.items)
    if isinstance(node, a.MapLit):
        return all(_literal(k) and _literal(v) for k, v in node.entries)
    return False


@dataclass(frozen=True, slots=True)
class Analysis:
    cost: Range
    """The estimated (min, max) cost."""
    metered: frozenset[int]
    """The ids of the calls that generated code charges at run time (``_rt_meter``)."""


def analyse(checked: Checked, node: a.Node) -> Analysis:
    """The estimated cost of evaluating ``node``, and which calls need the meter."""
    estimator = _Estimator(checked)
    cost = estimator.cost(node)
    return Analysis(cost, frozenset(estimator.metered))


def estimate(checked: Checked, node: a.Node) -> Range:
    """The estimated (min, max) cost of evaluating ``node``."""
    return analyse(checked, node).cost
