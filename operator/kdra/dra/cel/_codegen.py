"""Compile a checked selector tree into one plain Python function.

Each selector becomes ``def selector(v_device, spent): ...`` made of straight-line statements
on local temporaries, compiled once with :func:`compile` and run with a private namespace
(:data:`_runtime.NAMESPACE` plus the selector's folded constants). Nothing is looked up in,
or registered into, any module's globals.

Invariants:

* CEL's error rules are explicit in the generated code: ``&&``/``||`` and
  ``all``/``exists`` evaluate left to right, stop at the first deciding operand, and keep
  the first error only if no operand decides (``false && error`` is false, ``true &&
  error`` is the error); ``?:`` evaluates only the chosen branch; everything else lets an
  error propagate.
* Every comprehension iteration subtracts a fixed charge (1 + the size of its body) from a
  local budget that starts at :data:`COST_LIMIT`, and every metered call (``_cost``
  decides which) goes to its twin in ``_rt_meter``, which charges the budget by the actual
  sizes *before* building its result: ``t, budget = x_replace(budget, s, a, b)``. When the
  budget would go negative the evaluation stops with ``BudgetExceeded``, which no CEL
  construct absorbs.
* However the evaluation ends (a value, a CEL error, ``BudgetExceeded``), the budget it had
  left is stored in ``spent[0]`` (a one-element list the caller passes): what it was charged
  is :data:`COST_LIMIT` minus that (``_selector`` reports it; the allocator paces its work
  by it). A selector with nothing to charge (no comprehension, no metered call: the common
  case) has no budget and leaves ``spent`` alone, so it costs nothing more
  (:func:`generate` says which).
* Generated names cannot clash: temporaries are ``tN``/``eN``/``bN``, variables are the
  unique slots chosen by ``_parse`` (``v_device``, ``vN_name``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from . import _ast as a
from ._decls import TYPE_NAMES, helper_name
from ._parse import DEVICE_SLOT
from ._runtime import CEL_ERRORS, COST_LIMIT, METERED, NAMESPACE, PURE, BudgetExceeded
from ._values import CelType

__all__ = ["TooComplex", "generate"]

# CPython refuses more than 100 levels of indentation; stay well below.
_MAX_INDENT: Final = 80
# CPython also refuses more than 20 nested loops/try blocks in one function: a construct that
# would open a block beyond this depth moves into a nested function of its own.
_SPILL_AT: Final = 12

_BINARY: Final = {
    "+": "add", "-": "sub", "*": "mul", "/": "div", "%": "mod",
    "==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge", "in": "in_",
}  # fmt: skip


class TooComplex(Exception):
    """The generated code would nest deeper than Python allows."""


_NOT_FOLDED: Final = object()


def _fold(helper: str, args: tuple[a.Node, ...]) -> object:
    """The value of a pure call on constants (``quantity("40Gi")``), computed now; or
    ``_NOT_FOLDED`` when an argument is not constant or the call fails (the failure must
    then happen at evaluation, as upstream reports it)."""
    if helper not in PURE or not all(isinstance(arg, a.Const) for arg in args):
        return _NOT_FOLDED
    values = [arg.value for arg in args]  # type: ignore[attr-defined]
    metered = METERED.get("x_" + helper)
    try:
        if metered is not None:  # within the limit an evaluation would have
            return metered(COST_LIMIT, *values)[0]
        function: Callable[..., object] = NAMESPACE[helper]  # type: ignore[assignment]
        return function(*values)
    except (*CEL_ERRORS, BudgetExceeded):
        return _NOT_FOLDED


def _type_value(name: str) -> CelType:
    """The value of a type denotation: ``int`` is the type of ints, ``list`` of lists."""
    declared = TYPE_NAMES[name]
    return CelType(declared.kind if declared.kind in ("list", "map") else declared.name)


class _Generator:
    def __init__(self, bools: frozenset[int], metered: frozenset[int]) -> None:
        self.bools = bools  # ids of the nodes proven to yield a bool: no truth() needed
        self.metered = metered  # ids of the calls charged at run time (``_rt_meter``)
        self.lines: list[str] = []
        self.indent = 1
        self.counter = 0
        self.blocks = 0  # loops and try statements open around the current line
        self.consts: dict[str, object] = {}
        self.charged = False  # some line takes from the budget (or a nested function may)

    def emit(self, text: str) -> None:
        if self.indent > _MAX_INDENT:
            raise TooComplex
        self.lines.append("    " * self.indent + text)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: object) -> str:
        if value is None or value is True or value is False:
            return repr(value)
        name = self.fresh("k")
        self.consts[name] = value
        return name

    # -- expressions: emit statements, return an atom (a name) holding the value -------

    def expr(self, node: a.Node) -> str:
        if isinstance(node, a.Const):
            return self.const(node.value)
        if isinstance(node, a.TypeLit):
            return self.const(_type_value(node.name))
        if isinstance(node, a.Var):
            return node.slot
        if isinstance(node, a.DeviceField):
            return f"{DEVICE_SLOT}.{node.field}"
        if isinstance(node, a.Select):
            return self.assign(f"select({self.expr(node.operand)}, {node.field!r})")
        if isinstance(node, a.Index):
            return self.index(node)
        if isinstance(node, a.Has):
            return self.assign(f"has({self.expr(node.operand)}, {node.field!r})")
        if isinstance(node, a.Call):
            if node.function == "dyn":
                return self.expr(node.args[0])
            helper = helper_name(node.function, node.member)
            folded = _fold(helper, node.args)
            if folded is not _NOT_FOLDED:
                return self.const(folded)
            return self.call(node, helper, [self.expr(arg) for arg in node.args])
        if isinstance(node, a.Unary):
            helper = "not_" if node.op == "!" else "neg"
            return self.assign(f"{helper}({self.expr(node.operand)})")
        if isinstance(node, a.Binary):
            left = self.expr(node.left)
            right = self.expr(node.right)
            return self.call(node, _BINARY[node.op], [left, right])
        if isinstance(node, (a.Logic, a.Comprehension)) and self.blocks >= _SPILL_AT:
            return self.spill(node)
        if isinstance(node, a.Logic):
            return self.logic(node)
        if isinstance(node, a.Cond):
            return self.cond(node)
        if isinstance(node, a.ListLit):
            if all(isinstance(item, a.Const) for item in node.items):
                return self.const([item.value for item in node.items])  # type: ignore[attr-defined]
            items = ", ".join(self.expr(item) for item in node.items)
            return self.assign(f"make_list([{items}])")
        if isinstance(node, a.MapLit):
            entries = ", ".join(f"({self.expr(k)}, {self.expr(v)})" for k, v in node.entries)
            return self.assign(f"make_map([{entries}])")
        if isinstance(node, a.Comprehension):
            return self.comprehension(node)
        if isinstance(node, a.Bind):
            self.emit(f"{node.slot} = {self.expr(node.init)}")
            return self.expr(node.body)
        raise TypeError(f"unknown node {node!r}")

    def spill(self, node: a.Node) -> str:
        """Generate ``node`` as a nested function, which starts a fresh block count."""
        name = self.fresh("f")
        self.emit(f"def {name}():")
        self.indent += 1
        outer_blocks, self.blocks = self.blocks, 0
        self.charged = True  # the outer function keeps the budget the nested one names
        self.emit("nonlocal budget")
        self.emit(f"return {self.expr(node)}")
        self.blocks = outer_blocks
        self.indent -= 1
        return self.assign(f"{name}()")

    def open(self, line: str) -> None:
        self.emit(line)
        self.indent += 1
        self.blocks += 1

    def close(self) -> None:
        self.indent -= 1
        self.blocks -= 1

    def truth(self, node: a.Node) -> str:
        """An expression for the Python truth of a CEL bool (checked at run time unless the
        node is proven to yield a bool, see ``_check.proven_bools``)."""
        value = self.expr(node)
        return value if id(node) in self.bools else f"truth({value})"

    def assign(self, code: str) -> str:
        target = self.fresh("t")
        self.emit(f"{target} = {code}")
        return target

    def call(self, node: a.Node, helper: str, args: list[str]) -> str:
        """``helper(args)``, or its metered twin where the call is metered."""
        if id(node) in self.metered and "x_" + helper in METERED:
            self.charged = True
            target = self.fresh("t")
            self.emit(f"{target}, budget = x_{helper}(budget, {', '.join(args)})")
            return target
        return self.assign(f"{helper}({', '.join(args)})")

    def index(self, node: a.Index) -> str:
        operand = self.expr(node.operand)
        key = self.expr(node.index)
        # device.attributes["domain"]: the hot path; an unknown domain is an empty map.
        if (
            isinstance(node.operand, a.DeviceField)
            and node.operand.field != "driver"
            and isinstance(node.index, a.Const)
            and type(node.index.value) is str
        ):
            return self.assign(f"dict_get({operand}, {key}, EMPTY_MAP)")
        return self.assign(f"index({operand}, {key})")

    def logic(self, node: a.Logic) -> str:
        # && is decided by a false operand, || by a true one.
        decided, undecided = ("False", "True") if node.op == "&&" else ("True", "False")
        test = "not " if node.op == "&&" else ""
        result, error, flag = self.fresh("t"), self.fresh("e"), self.fresh("b")
        self.emit(f"{result} = {undecided}")
        self.emit(f"{error} = None")
        self.open("while True:")
        for operand in node.operands:
            self.open("try:")
            self.emit(f"{flag} = {self.truth(operand)}")
            self.close()
            self.emit("except CEL_ERRORS as exc:")
            self.emit(f"    {error} = {error} or exc")
            self.emit("else:")
            self.emit(f"    if {test}{flag}:")
            self.emit(f"        {result} = {decided}")
            self.emit("        break")
        self.emit(f"if {error} is not None:")
        self.emit(f"    raise {error}")
        self.emit("break")
        self.close()
        return result

    def cond(self, node: a.Cond) -> str:
        result = self.fresh("t")
        self.emit(f"if {self.truth(node.cond)}:")
        self.indent += 1
        self.emit(f"{result} = {self.expr(node.then)}")
        self.indent -= 1
        self.emit("else:")
        self.indent += 1
        self.emit(f"{result} = {self.expr(node.other)}")
        self.indent -= 1
        return result

    def comprehension(self, node: a.Comprehension) -> str:
        kind = node.kind
        if kind in ("optMap", "optFlatMap"):
            return self.optional_macro(node)
        two = node.slot2 is not None
        iterator = "iterate2" if two else "iterate"
        source = self.assign(f"{iterator}({self.expr(node.source)})")
        target = f"{node.slot}, {node.slot2}" if two else node.slot
        charge = 1 + sum(a.size(n) for n in (node.pred, node.xform) if n is not None)
        result = self.fresh("t")
        if kind in ("all", "exists"):
            return self.quantifier(node, source, target, charge, result)
        if kind == "exists_one":
            self.emit(f"{result} = 0")
        elif kind in ("transformMap", "transformMapEntry"):
            self.emit(f"{result} = {{}}")
        else:
            self.emit(f"{result} = []")
        self.open(f"for {target} in {source}:")
        self.charge(charge)
        if node.pred is not None and kind not in ("all", "exists"):
            self.emit(f"if {self.truth(node.pred)}:")
            self.indent += 1
        if kind == "exists_one":
            self.emit(f"{result} += 1")
        elif kind == "filter":
            self.emit(f"{result}.append({node.slot})")
        else:
            assert node.xform is not None
            value = self.expr(node.xform)
            if kind == "transformMap":
                self.emit(f"{result}[{node.slot}] = {value}")
            elif kind == "transformMapEntry":
                self.emit(f"insert_entries({result}, {value})")
            else:  # map, transformList, sortBy (the keys)
                self.emit(f"{result}.append({value})")
        if node.pred is not None:
            self.indent -= 1
        self.close()
        if kind == "exists_one":
            return self.assign(f"{result} == 1")
        if kind == "sortBy":
            return self.assign(f"m_sortByAssociatedKeys({source}, {result})")
        return result

    def optional_macro(self, node: a.Comprehension) -> str:
        """``o.optMap(v, e)``: ``e`` with ``v`` bound to o's value, as an optional;
        ``optFlatMap``: ``e`` itself, which is an optional; none when ``o`` is none."""
        source = self.expr(node.source)
        result = self.fresh("t")
        assert node.xform is not None
        self.emit(f"if m_hasValue({source}):")
        self.indent += 1
        self.emit(f"{node.slot} = m_value({source})")
        value = self.expr(node.xform)
        wrapped = f"g_optional_of({value})" if node.kind == "optMap" else value
        self.emit(f"{result} = {wrapped}")
        self.indent -= 1
        self.emit("else:")
        self.emit(f"    {result} = g_optional_none()")
        return result

    def quantifier(
        self, node: a.Comprehension, source: str, target: str, charge: int, result: str
    ) -> str:
        assert node.pred is not None
        decided, undecided = ("False", "True") if node.kind == "all" else ("True", "False")
        test = "not " if node.kind == "all" else ""
        error, flag = self.fresh("e"), self.fresh("b")
        self.emit(f"{result} = {undecided}")
        self.emit(f"{error} = None")
        self.open(f"for {target} in {source}:")
        self.charge(charge)
        self.open("try:")
        self.emit(f"{flag} = {self.truth(node.pred)}")
        self.close()
        self.emit("except CEL_ERRORS as exc:")
        self.emit(f"    {error} = {error} or exc")
        self.emit("else:")
        self.emit(f"    if {test}{flag}:")
        self.emit(f"        {result} = {decided}")
        self.emit("        break")
        self.close()
        self.emit(f"if {result} is {undecided} and {error} is not None:")
        self.emit(f"    raise {error}")
        return result

    def charge(self, amount: int) -> None:
        self.charged = True
        self.emit(f"budget -= {amount}")
        self.emit("if budget < 0:")
        self.emit("    over_budget()")


def generate(
    node: a.Node, bools: frozenset[int], metered: frozenset[int] = frozenset()
) -> tuple[str, Callable[[Any, list[int] | None], Any], bool]:
    """Python source for ``node``, the compiled function ``selector(device, spent)``
    (``spent[0]``: the budget left when it ended, see the module doc) and whether it charges
    anything (if not, ``spent`` may be None); ``bools``
    are the ids of the nodes whose static type is bool, ``metered`` those of the calls to
    charge at run time (``_cost.analyse``).

    Raises :class:`TooComplex` when the code would nest too deeply for CPython.
    """
    gen = _Generator(bools, metered)
    gen.indent, gen.blocks = 2, 1  # inside ``try:`` (counted against the spill depth)
    result = gen.expr(node)
    gen.emit(f"return {result}")
    if gen.charged:
        lines = [f"    budget = {COST_LIMIT}", "    try:", *gen.lines, "    finally:",
                 "        spent[0] = budget"]
    else:  # charges nothing: no budget, and ``spent`` is not touched (the caller knows)
        lines = [line[4:] for line in gen.lines]
    source = f"def selector({DEVICE_SLOT}, spent):\n" + "\n".join(lines) + "\n"
    namespace: dict[str, Any] = dict(NAMESPACE)
    namespace.update(gen.consts)
    try:
        code = compile(source, "<cel selector>", "exec")
    except (SyntaxError, RecursionError, MemoryError) as exc:
        raise TooComplex from exc
    exec(code, namespace)
    function: Callable[[Any, list[int] | None], Any] = namespace["selector"]
    return source, function, gen.charged
