"""The static type checker: what upstream's cel-go checker rejects, kdra rejects at compile time.

Every node of the tree gets a type; every call, operator and index is resolved against the
overloads in ``_decls`` with cel-go's algorithm (``checker/checker.go``): arguments are
matched left to right, type parameters bound as they go, and the result is the overloads'
common result type (``dyn`` when they differ). Then the validators of Kubernetes' base
environment run (homogeneous aggregate literals, constant regular expressions), and the DRA
rule: a selector must evaluate to ``bool`` or to the unknown type (an attribute value).

Invariants:

* Attribute values have the unknown type ``any``: anything may be done with them at compile
  time, and the run time checks what they really are, as upstream does.
* A failed check raises :class:`CelCompileError` with the first error, positioned and
  worded as cel-go words it ("found no matching overload for 'isSemver' applied to
  '(int)'").
* :class:`Checked` holds the final types (type parameters left unbound become ``dyn``) and
  the overloads each call matched, keyed by ``id(node)``, for the cost estimator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, NoReturn

from kdra.dra.errors import CelCompileError

from . import _ast as a
from . import _types as t
from ._decls import FUNCTIONS, TYPE_NAMES, Overload
from ._parse import DEVICE_SLOT
from ._regex import RegexError, compile_regex
from ._values import Uint

__all__ = ["DEVICE_FIELD_TYPES", "Checked", "check", "operator_name", "proven_bools"]

ATTRIBUTES: Final = t.map_of(t.STRING, t.map_of(t.STRING, t.ANY))
CAPACITY: Final = t.map_of(t.STRING, t.map_of(t.STRING, t.QUANTITY))
DEVICE_FIELD_TYPES: Final = {"driver": t.STRING, "allowMultipleAllocations": t.BOOL,
                             "attributes": ATTRIBUTES, "capacity": CAPACITY}
_OPERATORS: Final = {
    "+": "_+_", "-": "_-_", "*": "_*_", "/": "_/_", "%": "_%_", "==": "_==_", "!=": "_!=_",
    "<": "_<_", "<=": "_<=_", ">": "_>_", ">=": "_>=_", "in": "@in",
}  # fmt: skip


def operator_name(node: a.Binary | a.Unary) -> str:
    """cel-go's function name for an operator node."""
    if isinstance(node, a.Unary):
        return "!_" if node.op == "!" else "-_"
    return _OPERATORS[node.op]


@dataclass(slots=True)
class Checked:
    types: dict[int, t.Type] = field(default_factory=dict)
    overloads: dict[int, tuple[str, ...]] = field(default_factory=dict)

    def type(self, node: a.Node) -> t.Type:
        return self.types[id(node)]


def check(expression: str, root: a.Node) -> Checked:
    """Type-check ``root``; raise :class:`CelCompileError` on the first error."""
    checker = _Checker(expression)
    checker.visit(root)
    result = Checked(
        {key: t.substitute(checker.mapping, typ, True) for key, typ in checker.types.items()},
        checker.overloads,
    )
    _Homogeneous(checker, result).walk(root, in_format=False)
    output = result.type(root)
    if output not in (t.BOOL, t.ANY):
        shown = "null_type" if output.kind == "null" else t.format_type(output)
        checker.fail(root, f"must evaluate to bool or the unknown type, not {shown}")
    return result


def _regex_error(pattern: str) -> str | None:
    try:
        compile_regex(pattern)
    except RegexError as exc:
        return str(exc)
    return None


class _Checker:
    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.mapping: t.Mapping = {}
        self.types: dict[int, t.Type] = {}
        self.overloads: dict[int, tuple[str, ...]] = {}
        self.vars: dict[str, t.Type] = {DEVICE_SLOT: t.DEVICE}
        self.fresh = 0

    def fail(self, node: a.Node, message: str) -> NoReturn:
        line, column = node.pos
        raise CelCompileError(self.expression, f"{line}:{column}: {message}")

    def new_var(self) -> t.Type:
        self.fresh += 1
        return t.param(f"_var{self.fresh}")

    def resolved(self, typ: t.Type) -> t.Type:
        return t.substitute(self.mapping, typ)

    def assignable(self, t1: t.Type, t2: t.Type) -> bool:
        extended = t.is_assignable(self.mapping, t1, t2)
        if extended is None:
            return False
        self.mapping = extended
        return True

    def mismatch(self, node: a.Node, expected: t.Type, actual: t.Type) -> NoReturn:
        self.fail(
            node,
            f"expected type '{t.format_type(expected)}' but found "
            f"'{t.format_type(t.substitute(self.mapping, actual, True))}'",
        )

    def visit(self, node: a.Node) -> t.Type:
        typ = self._visit(node)
        self.types[id(node)] = typ
        return typ

    def _visit(self, node: a.Node) -> t.Type:
        if isinstance(node, a.Const):
            return _const_type(node.value)
        if isinstance(node, a.TypeLit):
            return t.type_of(TYPE_NAMES[node.name])
        if isinstance(node, a.Var):
            return self.vars[node.slot]
        if isinstance(node, a.DeviceField):
            return DEVICE_FIELD_TYPES[node.field]
        if isinstance(node, (a.Select, a.Has)):
            result = self.select(node, node.operand, node.field)
            return t.BOOL if isinstance(node, a.Has) else result
        if isinstance(node, a.Index):
            return self.call(node, "_[_]", None, [node.operand, node.index])
        if isinstance(node, a.Call):
            if node.member:
                return self.call(node, node.function, node.args[0], list(node.args[1:]))
            return self.call(node, node.function, None, list(node.args))
        if isinstance(node, (a.Unary, a.Binary)):
            operands = [node.operand] if isinstance(node, a.Unary) else [node.left, node.right]
            return self.call(node, operator_name(node), None, operands)
        if isinstance(node, a.Logic):
            for operand in node.operands:
                self.expect_bool(operand)
            return t.BOOL
        if isinstance(node, a.Cond):
            return self.call(node, "_?_:_", None, [node.cond, node.then, node.other])
        if isinstance(node, a.ListLit):
            elem: t.Type | None = None
            for item in node.items:
                elem = self.join(item, elem, self.visit(item))
            return t.list_of(elem if elem is not None else self.new_var())
        if isinstance(node, a.MapLit):
            return self.map_literal(node)
        if isinstance(node, a.Comprehension):
            return self.comprehension(node)
        if isinstance(node, a.Bind):
            self.vars[node.slot] = self.resolved(self.visit(node.init))
            return self.visit(node.body)
        raise TypeError(f"unknown node {node!r}")

    def expect_bool(self, node: a.Node) -> None:
        actual = self.visit(node)
        if not self.assignable(t.BOOL, actual):
            self.mismatch(node, t.BOOL, actual)

    def join(self, node: a.Node, previous: t.Type | None, current: t.Type) -> t.Type:
        """The element type of a literal (``dyn`` when they differ: the homogeneity
        validator, which runs after checking, then decides whether that is allowed)."""
        if previous is None:
            return current
        if self.assignable(previous, current):
            return t.most_general(previous, current)
        return t.DYN

    def map_literal(self, node: a.MapLit) -> t.Type:
        key: t.Type | None = None
        value: t.Type | None = None
        for k, v in node.entries:
            key = self.join(k, key, self.visit(k))
            value = self.join(v, value, self.visit(v))
        if key is None or value is None:
            return t.map_of(self.new_var(), self.new_var())
        return t.map_of(key, value)

    def select(self, node: a.Node, operand: a.Node, name: str) -> t.Type:
        target = self.resolved(self.visit(operand))
        optional = target.kind == "opaque" and target.name == "optional_type"
        if optional:
            target = target.params[0]
        if target.kind == "map":
            result = target.params[1]
        elif target == t.DEVICE:
            if name not in DEVICE_FIELD_TYPES:
                self.fail(node, f"undefined field '{name}'")
            result = DEVICE_FIELD_TYPES[name]
        elif target.kind == "struct":
            self.fail(node, f"undefined field '{name}'")
        elif target.kind == "param":
            self.assignable(t.DYN, target)
            result = t.DYN
        elif target.kind in ("dyn", "any", "error"):
            result = t.DYN
        else:
            self.fail(node, f"type '{t.format_type(target)}' does not support field selection")
        return t.optional_of(result) if optional else result

    def call(self, node: a.Node, name: str, target: a.Node | None, args: list[a.Node]) -> t.Type:
        arg_types = [self.visit(arg) for arg in args]
        if target is not None:
            arg_types.insert(0, self.visit(target))
        result = self.resolve(node, name, target is not None, arg_types)
        self.validate_literals(node, name, target, args)
        return result

    def resolve(self, node: a.Node, name: str, member: bool, arg_types: list[t.Type]) -> t.Type:
        """cel-go's resolveOverload: the result type of ``name`` applied to ``arg_types``."""
        result: t.Type | None = None
        matched: list[str] = []
        for overload in FUNCTIONS[name]:
            if overload.member != member:
                continue
            params, overload_result = self.instantiate(overload)
            extended = t.is_assignable_list(self.mapping, params, arg_types)
            if extended is None:
                continue
            self.mapping = extended
            matched.append(overload.id)
            found = self.resolved(overload_result)
            if result is None:
                result = found
            elif not t.is_dyn(result) and found != result:
                result = t.DYN
        if result is None:
            shown = [t.format_type(t.substitute(self.mapping, x, True)) for x in arg_types]
            receiver = shown.pop(0) + "." if member else ""
            self.fail(
                node,
                f"found no matching overload for '{name}' applied to "
                f"'{receiver}({', '.join(shown)})'",
            )
        self.overloads[id(node)] = tuple(matched)
        return result

    def instantiate(self, overload: Overload) -> tuple[list[t.Type], t.Type]:
        names = sorted({p.name for p in _params_in(overload)})
        if not names:
            return list(overload.params), overload.result
        fresh: t.Mapping = {n: self.new_var() for n in names}
        return (
            [t.substitute(fresh, p) for p in overload.params],
            t.substitute(fresh, overload.result),
        )

    def validate_literals(
        self, node: a.Node, name: str, target: a.Node | None, args: list[a.Node]
    ) -> None:
        """Constant regular expressions must compile, as upstream's validators require."""
        if name == "matches" and args:
            literal = args[0]  # cel-go's validator looks at the first non-receiver argument
            if (
                isinstance(literal, a.Const)
                and type(literal.value) is str
                and _regex_error(literal.value) is not None
            ):
                self.fail(literal, "invalid matches argument")
        if name in ("find", "findAll") and target is not None and args:
            pattern = args[0]
            if isinstance(pattern, a.Const) and type(pattern.value) is str:
                error = _regex_error(pattern.value)
                if error is not None:
                    self.fail(
                        pattern, f"program instantiation failed: error parsing regexp: {error}"
                    )

    def comprehension(self, node: a.Comprehension) -> t.Type:
        source = self.resolved(self.visit(node.source))
        kind = node.kind
        if kind in ("optMap", "optFlatMap"):
            return self.optional_macro(node, source)
        var1, var2 = self.range_vars(node, source)
        self.vars[node.slot] = var1
        if node.slot2 is not None:
            self.vars[node.slot2] = var2
        if node.pred is not None:
            self.expect_bool(node.pred)
        if kind in ("all", "exists", "exists_one"):
            return t.BOOL
        if kind == "filter":
            return t.list_of(var1)
        assert node.xform is not None
        value = self.visit(node.xform)
        if kind in ("map", "transformList"):
            return t.list_of(value)
        if kind == "transformMap":
            return t.map_of(var1, value)
        if kind == "transformMapEntry":
            empty = t.map_of(self.new_var(), self.new_var())
            return self.resolve(node, "cel.@mapInsert", False, [empty, value])
        # sortBy: the keys must be comparable
        return self.resolve(node, "@sortByAssociatedKeys", True, [source, t.list_of(value)])

    def range_vars(self, node: a.Comprehension, source: t.Type) -> tuple[t.Type, t.Type]:
        two = node.slot2 is not None
        if source.kind == "list":
            return (t.INT, source.params[0]) if two else (source.params[0], t.DYN)
        if source.kind == "map":
            return source.params[0], source.params[1]
        if source.kind in ("dyn", "any", "error", "param"):
            self.assignable(t.DYN, source)
            return t.DYN, t.DYN
        self.fail(
            node.source,
            f"expression of type '{t.format_type(source)}' cannot be range of a comprehension "
            "(must be list, map, or dynamic)",
        )

    def optional_macro(self, node: a.Comprehension, source: t.Type) -> t.Type:
        inner = self.new_var()
        if not self.assignable(t.optional_of(inner), source):
            shown = t.format_type(t.substitute(self.mapping, source, True))
            self.fail(node, f"found no matching overload for 'hasValue' applied to '{shown}.()'")
        self.vars[node.slot] = self.resolved(inner)
        assert node.xform is not None
        value = self.visit(node.xform)
        if node.kind == "optMap":
            return t.optional_of(value)
        result = self.new_var()
        if not self.assignable(t.optional_of(result), value):
            self.mismatch(node.xform, t.optional_of(t.DYN), value)
        return t.optional_of(result)


_BOOL_OPERATORS: Final = frozenset(("==", "!=", "<", "<=", ">", ">=", "in"))


def proven_bools(root: a.Node, checked: Checked) -> frozenset[int]:
    """Ids of the nodes whose *run-time* value is certainly a bool: comparisons, ``!``,
    ``&&``/``||``, ``has``, quantifiers, bool constants and calls whose every matched
    overload returns bool. (A static type of bool is not enough: ``c ? true : attr`` is typed
    bool but may yield an attribute of another type, which must fail at run time.)"""
    found: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(a.children(node))
        if isinstance(node, a.Binary):
            proven = node.op in _BOOL_OPERATORS
        elif isinstance(node, a.Unary):
            proven = node.op == "!"
        elif isinstance(node, (a.Logic, a.Has)):
            proven = True
        elif isinstance(node, a.Const):
            proven = node.value is True or node.value is False
        elif isinstance(node, a.Comprehension):
            proven = node.kind in ("all", "exists", "exists_one")
        elif isinstance(node, a.Call):
            matched = set(checked.overloads.get(id(node), ()))
            results = [o.result for o in FUNCTIONS[node.function] if o.id in matched]
            proven = bool(results) and all(result == t.BOOL for result in results)
        else:
            proven = False
        if proven:
            found.add(id(node))
    return frozenset(found)


class _Homogeneous:
    """cel-go's homogeneous aggregate literal validator: the elements (keys, values) of a
    list (map) literal have equivalent types, except inside ``format``'s arguments."""

    def __init__(self, checker: _Checker, checked: Checked) -> None:
        self.checker = checker
        self.checked = checked

    def walk(self, root: a.Node, in_format: bool) -> None:
        stack = [(root, in_format)]
        while stack:
            node, exempt = stack.pop()
            if isinstance(node, a.Call) and node.function == "format":
                exempt = True
            if not exempt and isinstance(node, a.ListLit):
                self.same(node.items)
            if not exempt and isinstance(node, a.MapLit):
                self.same(tuple(k for k, _ in node.entries))
                self.same(tuple(v for _, v in node.entries))
            stack.extend((child, exempt) for child in a.children(node))

    def same(self, items: tuple[a.Node, ...]) -> None:
        if not items:
            return
        first = self.checked.type(items[0])
        for item in items[1:]:
            found = self.checked.type(item)
            if not _equivalent(first, found):
                self.checker.fail(
                    item,
                    f"expected type '{t.format_type(first)}' but found '{t.format_type(found)}'",
                )


def _params_in(overload: Overload) -> set[t.Type]:
    found: set[t.Type] = set()
    stack = [*overload.params, overload.result]
    while stack:
        typ = stack.pop()
        if typ.kind == "param":
            found.add(typ)
        stack.extend(typ.params)
    return found


def _equivalent(x: t.Type, y: t.Type) -> bool:
    """cel-go's IsEquivalentType: same kind and name, parameters equivalent (unbound type
    parameters match anything)."""
    if x.kind == "param" or y.kind == "param":
        return True
    if x.kind != y.kind or x.name != y.name or len(x.params) != len(y.params):
        return False
    return all(_equivalent(p, q) for p, q in zip(x.params, y.params, strict=True))


def _const_type(value: object) -> t.Type:
    kind = type(value)
    if kind is bool:
        return t.BOOL
    if kind is int:
        return t.INT
    if kind is Uint:
        return t.UINT
    if kind is float:
        return t.DOUBLE
    if kind is str:
        return t.STRING
    if kind is bytes:
        return t.BYTES
    if value is None:
        return t.NULL
    raise TypeError(f"unexpected constant {value!r}")
