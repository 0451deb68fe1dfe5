"""From selector text to a syntax tree (``_ast``): parse, resolve names, expand macros.

cel-python's Lark grammar does the parsing; this module walks its parse tree once and does
what cel-go's parser and the name-resolution part of its checker do:

* the only variable is ``device`` (plus the variables that macros and ``cel.bind``
  introduce, with lexical scoping); ``device`` has exactly the fields ``driver``,
  ``allowMultipleAllocations``, ``attributes`` and ``capacity``; type names (``int``,
  ``string``, ...) are values;
* a call names a declared function (``_decls.FUNCTIONS``): ``strings.quote(s)``,
  ``sets.contains(a, b)``, ``lists.range(n)``, ``optional.of(x)`` and ``format.named(n)``
  are qualified global names, as in cel-go; which overload applies is ``_check``'s job;
* macros are recognised by name *and* number of arguments, as in cel-go (``l.all(x, p)``
  and ``m.all(k, v, p)`` are macros, ``l.all(x)`` is a call to an undeclared function);
* literals are in range (int64, uint64);
* the parse tree is not nested deeper than :data:`MAX_DEPTH` (cel-go also limits parser
  recursion), which keeps every later pass well inside Python's recursion limit. Long
  ``a || b || c ...`` chains do not count as nesting.

Invariants:

* Every error is a :class:`CelCompileError` whose message starts with the line and column.
* Nothing here evaluates the expression.
"""

from __future__ import annotations

from typing import Any, Final, NoReturn

import lark
from celpy.celparser import CELParseError, CELParser

from kdra.dra.errors import CelCompileError

from . import _ast as a
from ._decls import FUNCTIONS, NOT_PROVIDED, TYPE_NAMES
from ._literals import decode_literal, int_literal
from ._values import Uint

__all__ = ["DEVICE_SLOT", "MACROS", "MAX_DEPTH", "parse", "warm_up"]

MAX_DEPTH: Final = 250

# receiver macros: name -> accepted numbers of arguments
MACROS: Final[dict[str, tuple[int, ...]]] = {
    "all": (2, 3),
    "exists": (2, 3),
    "exists_one": (2, 3),
    "existsOne": (3,),
    "map": (2, 3),
    "filter": (2,),
    "transformList": (3, 4),
    "transformMap": (3, 4),
    "transformMapEntry": (3, 4),
    "sortBy": (2,),
    "optMap": (2,),
    "optFlatMap": (2,),
}
DEVICE: Final = "device"
DEVICE_SLOT: Final = "v_device"
DEVICE_FIELDS: Final = frozenset(("driver", "allowMultipleAllocations", "attributes",
                                  "capacity"))
_ACCUMULATORS: Final = frozenset(("__result__", "@result"))

# Rules that only wrap their single child.
_WRAPPERS: Final = frozenset(
    (
        "expr", "conditionalor", "conditionaland", "relation", "addition",
        "multiplication", "unary", "member", "primary", "paren_expr",
    )
)  # fmt: skip
_RELATIONS: Final = {
    "relation_lt": "<", "relation_le": "<=", "relation_gt": ">", "relation_ge": ">=",
    "relation_eq": "==", "relation_ne": "!=", "relation_in": "in",
}  # fmt: skip
_ARITHMETIC: Final = {
    "addition_add": "+", "addition_sub": "-",
    "multiplication_mul": "*", "multiplication_div": "/", "multiplication_mod": "%",
}  # fmt: skip
_INT64: Final = range(-(2**63), 2**63)
_UINT64: Final = range(0, 2**64)

Tree = lark.Tree[Any]
Token = lark.Token

_PARSER: CELParser | None = None


def _parser() -> CELParser:
    global _PARSER
    if _PARSER is None:
        _PARSER = CELParser()
    return _PARSER


def warm_up() -> None:
    """Build the parser (its LALR tables take ~0.3 s) now, not in the first compile."""
    _parser()


def parse(expression: str) -> a.Node:
    """Parse ``expression`` and resolve its names; raise :class:`CelCompileError`."""
    try:
        tree = _parser().parse(expression)
    except CELParseError as exc:
        raise CelCompileError(expression, _syntax_message(exc)) from None
    _check_depth(expression, tree)
    return _Lowering(expression).lower(tree)


def _syntax_message(exc: CELParseError) -> str:
    cause = exc.__context__
    line, column = exc.line, exc.column
    if isinstance(cause, lark.exceptions.UnexpectedToken):
        token = cause.token
        what = "end of expression" if token.type == "$END" else f"token {str(token)!r}"
        detail = f"unexpected {what}"
        if str(token) == "?":
            detail += " (optional field selection and indexing are not supported)"
    elif isinstance(cause, lark.exceptions.UnexpectedCharacters):
        detail = f"unexpected character {cause.char!r}"
        if cause.char == "?":
            detail += " (optional field selection and indexing are not supported)"
    elif isinstance(cause, lark.exceptions.UnexpectedEOF):
        detail = "unexpected end of expression"
    else:
        detail = str(exc).splitlines()[0] if str(exc) else "invalid syntax"
    where = f"{line}:{column}: " if line is not None and column is not None else ""
    return f"{where}syntax error: {detail}"


def _check_depth(expression: str, tree: Tree) -> None:
    stack: list[tuple[Tree, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            line, column = _pos(node)
            raise CelCompileError(
                expression,
                f"{line}:{column}: expression nested too deeply (more than {MAX_DEPTH} levels)",
            )
        for child in node.children:
            if isinstance(child, lark.Tree):
                chained = child.data == node.data and node.data in (
                    "conditionalor",
                    "conditionaland",
                )
                stack.append((child, depth if chained else depth + 1))


def _pos(item: Tree | Token) -> a.Pos:
    if isinstance(item, lark.Token):
        return (item.line or 1, item.column or 1)
    meta = item.meta
    return (getattr(meta, "line", 1), getattr(meta, "column", 1))


def _unwrap(tree: Tree) -> Tree:
    while tree.data in _WRAPPERS and len(tree.children) == 1:
        child = tree.children[0]
        if not isinstance(child, lark.Tree):
            break
        tree = child
    return tree


def _trees(tree: Tree) -> list[Tree]:
    return [c for c in tree.children if isinstance(c, lark.Tree)]


class _Lowering:
    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.scopes: list[dict[str, str]] = []
        self.slots = 0

    def fail(self, item: Tree | Token, message: str) -> NoReturn:
        line, column = _pos(item)
        raise CelCompileError(self.expression, f"{line}:{column}: {message}")

    def undeclared(self, item: Tree | Token, name: str) -> NoReturn:
        reason = NOT_PROVIDED.get(name)
        if reason is not None:
            self.fail(item, f"undeclared reference to '{name}': {reason}")
        self.fail(item, f"undeclared reference to '{name}' (in container '')")

    # -- entry ---------------------------------------------------------------------

    def lower(self, tree: Tree) -> a.Node:
        tree = _unwrap(tree)
        kind = tree.data
        pos = _pos(tree)
        if kind == "expr":
            cond, then, other = _trees(tree)
            return a.Cond(pos, self.lower(cond), self.lower(then), self.lower(other))
        if kind in ("conditionalor", "conditionaland"):
            return a.Logic(pos, "||" if kind == "conditionalor" else "&&", self._chain(tree))
        if kind == "relation":
            op_tree, right = _trees(tree)
            left = _trees(op_tree)[0]
            return a.Binary(pos, _RELATIONS[op_tree.data], self.lower(left), self.lower(right))
        if kind in ("addition", "multiplication"):
            op_tree, right = _trees(tree)
            left = _trees(op_tree)[0]
            return a.Binary(pos, _ARITHMETIC[op_tree.data], self.lower(left), self.lower(right))
        if kind == "unary":
            op_tree, operand = _trees(tree)
            return a.Unary(pos, "!" if op_tree.data == "unary_not" else "-", self.lower(operand))
        handler = getattr(self, "lower_" + kind, None)
        if handler is None:
            self.fail(tree, f"unsupported syntax ({kind})")
        result: a.Node = handler(tree, pos, tree.children)
        return result

    def _chain(self, tree: Tree) -> tuple[a.Node, ...]:
        rule = tree.data
        operands: list[Tree] = []
        node = tree
        while node.data == rule and len(node.children) == 2:
            left, right = _trees(node)
            operands.append(right)
            node = left
        operands.append(node)
        return tuple(self.lower(t) for t in reversed(operands))

    # -- members -------------------------------------------------------------------

    def _check_device_field(self, name: Any, field: str) -> None:
        """``device`` has exactly four fields; anything else is a compile error."""
        if field not in DEVICE_FIELDS:
            self.fail(name, f"undefined field '{field}' (device has driver, "
                      "allowMultipleAllocations, attributes, capacity)")

    def lower_member_dot(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        operand_tree, name = kids
        operand = self.lower(operand_tree)
        field = str(name)
        if isinstance(operand, a.Var) and operand.slot == DEVICE_SLOT:
            self._check_device_field(name, field)
            return a.DeviceField(pos, field)
        return a.Select(pos, operand, field)

    def lower_member_index(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        operand_tree, index_tree = kids
        return a.Index(pos, self.lower(operand_tree), self.lower(index_tree))

    def lower_member_object(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        self.fail(tree, "message construction is not supported in device selectors")

    def lower_member_dot_arg(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        receiver_tree, name_token = kids[0], kids[1]
        args = _trees(kids[2]) if len(kids) > 2 and kids[2] is not None else []
        name = str(name_token)
        qualifier = self._qualifier(receiver_tree)
        if qualifier == "cel" and name == "bind" and len(args) == 3:
            return self._bind(tree, pos, args)
        if name in MACROS and len(args) in MACROS[name]:
            return self._macro(tree, pos, name, receiver_tree, args)
        if qualifier is not None and f"{qualifier}.{name}" in FUNCTIONS:
            qualified = f"{qualifier}.{name}"
            return a.Call(pos, qualified, False, tuple(self.lower(t) for t in args))
        if name not in FUNCTIONS:
            self.undeclared(name_token, name)
        receiver = self.lower(receiver_tree)
        return a.Call(pos, name, True, (receiver, *(self.lower(t) for t in args)))

    def _qualifier(self, tree: Tree) -> str | None:
        """``a.b`` when ``tree`` is a chain of identifiers that are not variables."""
        parts: list[str] = []
        tree = _unwrap(tree)
        while tree.data == "member_dot":
            operand, name = tree.children
            parts.append(str(name))
            tree = _unwrap(operand)
        if tree.data != "ident":
            return None
        root = str(tree.children[0])
        if self._lookup(root) is not None or root == DEVICE:
            return None
        return ".".join([root, *reversed(parts)])

    # -- primaries -----------------------------------------------------------------

    def lower_ident(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        name = str(kids[0])
        slot = self._lookup(name)
        if slot is not None:
            return a.Var(pos, name, slot)
        if name == DEVICE:
            return a.Var(pos, name, DEVICE_SLOT)
        if name in TYPE_NAMES:
            return a.TypeLit(pos, name)
        self.undeclared(kids[0], name)

    def lower_dot_ident(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        name = str(kids[0])
        if name == DEVICE:  # ".device" is the root variable even where a macro shadows it
            return a.Var(pos, name, DEVICE_SLOT)
        if name in TYPE_NAMES:
            return a.TypeLit(pos, name)
        self.undeclared(kids[0], name)

    def lower_ident_arg(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        name_token = kids[0]
        name = str(name_token)
        args = _trees(kids[1]) if len(kids) > 1 and kids[1] is not None else []
        if name == "has" and len(args) == 1:
            return self._has(tree, pos, args[0])
        if name not in FUNCTIONS:
            self.undeclared(name_token, name)
        return a.Call(pos, name, False, tuple(self.lower(t) for t in args))

    lower_dot_ident_arg = lower_ident_arg

    def lower_list_lit(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        items = tuple(self.lower(t) for t in _trees(kids[0])) if kids and kids[0] else ()
        return a.ListLit(pos, items)

    def lower_map_lit(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        parts = [self.lower(t) for t in _trees(kids[0])] if kids and kids[0] else []
        entries = tuple(zip(parts[::2], parts[1::2], strict=True))
        return a.MapLit(pos, entries)

    def lower_literal(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        token: lark.Token = kids[0]
        kind, text = token.type, str(token)
        value: object
        if kind == "INT_LIT":
            number = int_literal(text)
            if number not in _INT64:
                self.fail(token, f"integer literal {text} is out of range")
            value = number
        elif kind == "UINT_LIT":
            number = int_literal(text[:-1])
            if number not in _UINT64:
                self.fail(token, f"unsigned literal {text} is out of range")
            value = Uint(number)
        elif kind == "FLOAT_LIT":
            value = float(text)
        elif kind in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
            try:
                value = decode_literal(text)
            except ValueError as exc:
                self.fail(token, str(exc))
        elif kind == "BOOL_LIT":
            value = text == "true"
        elif kind == "NULL_LIT":
            value = None
        else:
            self.fail(token, f"unsupported literal {text!r}")
        return a.Const(pos, value)

    # -- macros --------------------------------------------------------------------

    def _macro_var(self, tree: Tree, message: str) -> tuple[str, str]:
        inner = _unwrap(tree)
        if inner.data != "ident":
            self.fail(tree, message)
        name = str(inner.children[0])
        if name in _ACCUMULATORS:
            self.fail(tree, "iteration variable overwrites accumulator variable")
        self.slots += 1
        return name, f"v{self.slots}_{name}"

    def _has(self, tree: Tree, pos: a.Pos, arg: Tree) -> a.Node:
        target = _unwrap(arg)
        if target.data != "member_dot":
            self.fail(tree, "invalid argument to has() macro")
        operand_tree, name = target.children
        operand = self.lower(operand_tree)
        field = str(name)
        if isinstance(operand, a.Var) and operand.slot == DEVICE_SLOT:
            self._check_device_field(name, field)  # (the device always has its three fields)
        return a.Has(pos, operand, field)

    def _macro(self, tree: Tree, pos: a.Pos, name: str, receiver: Tree, args: list[Tree]) -> a.Node:
        source = self.lower(receiver)
        two_vars = name in ("transformList", "transformMap", "transformMapEntry") or (
            name in ("all", "exists", "exists_one", "existsOne") and len(args) == 3
        )
        if name in ("map", "filter", "sortBy"):
            message = "argument is not an identifier"
        elif name in ("optMap", "optFlatMap"):
            message = f"{name}() variable name must be a simple identifier"
        else:
            message = "argument must be a simple name"
        var, slot = self._macro_var(args[0], message)
        scope = {var: slot}
        var2 = slot2 = None
        if two_vars:
            var2, slot2 = self._macro_var(args[1], message)
            if var2 == var:
                self.fail(args[1], f"duplicate variable name: {var}")
            scope[var2] = slot2
        if name == "sortBy" and isinstance(source, (a.Const, a.MapLit)):
            self.fail(
                receiver,
                "sortBy can only be applied to a list, identifier, comprehension, call or "
                "select expression",
            )
        self.scopes.append(scope)
        try:
            bodies = [self.lower(t) for t in args[2 if two_vars else 1 :]]
        finally:
            self.scopes.pop()
        kind = "exists_one" if name == "existsOne" else name
        pred: a.Node | None
        xform: a.Node | None
        if kind in ("all", "exists", "exists_one", "filter"):
            pred, xform = bodies[0], None
        else:  # map, transform*, sortBy, optMap, optFlatMap: [filter,] transform
            pred = bodies[0] if len(bodies) == 2 else None
            xform = bodies[-1]
        return a.Comprehension(pos, kind, var, slot, source, pred, xform, var2, slot2)

    def _bind(self, tree: Tree, pos: a.Pos, args: list[Tree]) -> a.Node:
        var, slot = self._macro_var(args[0], "cel.bind() variable names must be simple identifiers")
        init = self.lower(args[1])
        self.scopes.append({var: slot})
        try:
            body = self.lower(args[2])
        finally:
            self.scopes.pop()
        return a.Bind(pos, var, slot, init, body)

    def _lookup(self, name: str) -> str | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None
