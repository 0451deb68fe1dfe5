"""From selector text to a checked tree (``_ast``): parse, resolve names, check calls.

cel-python's Lark grammar does the parsing; this module walks its parse tree once and
enforces what upstream's type-checker would reject at compile time:

* the only variable is ``device`` (plus the variables that macros and ``cel.bind`` introduce,
  with lexical scoping); ``device`` has exactly the fields ``driver``, ``attributes`` and
  ``capacity``;
* every function and method is one kdra provides, with the right number of arguments
  (see :data:`FUNCTIONS` / :data:`METHODS`); macros have a plain identifier as variable;
* literals are in range (int64, uint64);
* the parse tree is not nested deeper than :data:`MAX_DEPTH` (cel-go also limits parser
  recursion), which keeps every later pass well inside Python's recursion limit. Long
  ``a || b || c ...`` chains do not count as nesting.

Type errors that need values (``"a" < 1``) are left to run time, as upstream does for
``dyn`` attribute values. Every error names the line and column.
"""

from __future__ import annotations

import re
from typing import Any, Final, NoReturn

import lark
from celpy.celparser import CELParseError, CELParser

from kdra.domain.errors import CelCompileError

from . import _ast as a
from ._values import Uint

__all__ = ["FUNCTIONS", "MACROS", "MAX_DEPTH", "METHODS", "parse"]

MAX_DEPTH: Final = 250

# name -> (number of arguments, runtime helper)
FUNCTIONS: Final[dict[str, tuple[int, str]]] = {
    "size": (1, "f_size"),
    "int": (1, "f_int"),
    "uint": (1, "f_uint"),
    "double": (1, "f_double"),
    "string": (1, "f_string"),
    "bool": (1, "f_bool"),
    "bytes": (1, "f_bytes"),
    "dyn": (1, ""),  # the identity: lowered away
    "matches": (2, "f_matches"),
    "semver": (1, "f_semver"),
    "isSemver": (1, "f_is_semver"),
    "quantity": (1, "f_quantity"),
    "isQuantity": (1, "f_is_quantity"),
    "sign": (1, "m_sign"),  # upstream declares sign() as a global function ...
}
# name -> (number of arguments besides the receiver, runtime helper)
METHODS: Final[dict[str, tuple[int, str]]] = {
    "size": (0, "f_size"),
    "contains": (1, "f_contains"),
    "startsWith": (1, "f_startswith"),
    "endsWith": (1, "f_endswith"),
    "matches": (1, "f_matches"),
    "major": (0, "m_major"),
    "minor": (0, "m_minor"),
    "patch": (0, "m_patch"),
    "isGreaterThan": (1, "m_is_greater_than"),
    "isLessThan": (1, "m_is_less_than"),
    "compareTo": (1, "m_compare_to"),
    "asInteger": (0, "m_as_integer"),
    "isInteger": (0, "m_is_integer"),
    "asApproximateFloat": (0, "m_as_approximate_float"),
    "sign": (0, "m_sign"),  # ... and documents it as a method: accept both
    "add": (1, "m_add"),
    "sub": (1, "m_sub"),
}
MACROS: Final[dict[str, tuple[int, ...]]] = {
    "all": (2,),
    "exists": (2,),
    "exists_one": (2,),
    "filter": (2,),
    "map": (2, 3),
}
DEVICE: Final = "device"
DEVICE_SLOT: Final = "v_device"
DEVICE_FIELDS: Final = frozenset(("driver", "attributes", "capacity"))

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
    """Parse and check ``expression``; raise :class:`CelCompileError` with a position."""
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
    elif isinstance(cause, lark.exceptions.UnexpectedCharacters):
        detail = f"unexpected character {cause.char!r}"
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

    # -- entry ---------------------------------------------------------------------

    def lower(self, tree: Tree) -> a.Node:
        tree = _unwrap(tree)
        kind = tree.data
        pos = _pos(tree)
        kids = tree.children
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
        result: a.Node = handler(tree, pos, kids)
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
        """``device`` has exactly three fields; anything else is a compile error."""
        if field not in DEVICE_FIELDS:
            self.fail(name, f"undefined field {field!r} (device has driver, attributes, capacity)")

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
        args = _trees(kids[2]) if len(kids) > 2 else []
        name = str(name_token)
        if name == "bind" and self._is_free_ident(receiver_tree, "cel"):
            return self._bind(tree, pos, args)
        if name in MACROS:
            return self._macro(tree, pos, name, receiver_tree, args)
        if name not in METHODS:
            self.fail(name_token, f"undeclared reference to {name!r}")
        arity, helper = METHODS[name]
        if len(args) != arity:
            self.fail(
                name_token, f"found no matching overload for {name!r} with {len(args)} argument(s)"
            )
        receiver = self.lower(receiver_tree)
        return a.Call(pos, helper, (receiver, *(self.lower(t) for t in args)))

    def _is_free_ident(self, tree: Tree, name: str) -> bool:
        tree = _unwrap(tree)
        return (
            tree.data == "ident"
            and str(tree.children[0]) == name
            and self._lookup(name) is None
            and name != DEVICE
        )

    # -- primaries -----------------------------------------------------------------

    def lower_ident(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        name = str(kids[0])
        slot = self._lookup(name)
        if slot is not None:
            return a.Var(pos, name, slot)
        if name == DEVICE:
            return a.Var(pos, name, DEVICE_SLOT)
        self.fail(kids[0], f"undeclared reference to {name!r}")

    def lower_dot_ident(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        name = str(kids[0])
        if name == DEVICE:  # ".device" is the root variable even where a macro shadows it
            return a.Var(pos, name, DEVICE_SLOT)
        self.fail(kids[0], f"undeclared reference to {name!r}")

    def lower_ident_arg(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        name_token = kids[0]
        name = str(name_token)
        args = _trees(kids[1]) if len(kids) > 1 else []
        if name == "has":
            return self._has(tree, pos, args)
        if name not in FUNCTIONS:
            self.fail(name_token, f"undeclared reference to {name!r}")
        arity, helper = FUNCTIONS[name]
        if len(args) != arity:
            self.fail(
                name_token, f"found no matching overload for {name!r} with {len(args)} argument(s)"
            )
        if name == "dyn":
            return self.lower(args[0])
        return a.Call(pos, helper, tuple(self.lower(t) for t in args))

    lower_dot_ident_arg = lower_ident_arg

    def lower_list_lit(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        items = tuple(self.lower(t) for t in _trees(kids[0])) if kids else ()
        if all(isinstance(item, a.Const) for item in items):
            return a.Const(pos, [item.value for item in items])  # type: ignore[attr-defined]
        return a.ListLit(pos, items)

    def lower_map_lit(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        parts = [self.lower(t) for t in _trees(kids[0])] if kids else []
        entries = tuple(zip(parts[::2], parts[1::2], strict=True))
        return a.MapLit(pos, entries)

    def lower_literal(self, tree: Tree, pos: a.Pos, kids: list[Any]) -> a.Node:
        token: lark.Token = kids[0]
        kind, text = token.type, str(token)
        value: object
        if kind == "INT_LIT":
            number = _int_literal(text)
            if number not in _INT64:
                self.fail(token, f"integer literal {text} is out of range")
            value = number
        elif kind == "UINT_LIT":
            number = _int_literal(text[:-1])
            if number not in _UINT64:
                self.fail(token, f"unsigned literal {text} is out of range")
            value = Uint(number)
        elif kind == "FLOAT_LIT":
            value = float(text)
        elif kind in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
            try:
                value = _decode_literal(text)
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

    def _macro_var(self, tree: Tree, what: str) -> tuple[str, str]:
        inner = _unwrap(tree)
        if inner.data != "ident":
            self.fail(tree, f"{what} variable must be a simple identifier")
        name = str(inner.children[0])
        self.slots += 1
        return name, f"v{self.slots}_{name}"

    def _has(self, tree: Tree, pos: a.Pos, args: list[Tree]) -> a.Node:
        target = _unwrap(args[0]) if len(args) == 1 else None
        if target is None or target.data != "member_dot":
            self.fail(tree, "invalid argument to has() macro: expected a field selection a.b")
        operand_tree, name = target.children
        operand = self.lower(operand_tree)
        field = str(name)
        if isinstance(operand, a.Var) and operand.slot == DEVICE_SLOT:
            self._check_device_field(name, field)
            return a.Const(pos, True)
        return a.Has(pos, operand, field)

    def _macro(self, tree: Tree, pos: a.Pos, name: str, receiver: Tree, args: list[Tree]) -> a.Node:
        if len(args) not in MACROS[name]:
            self.fail(tree, f"{name}() takes {' or '.join(map(str, MACROS[name]))} arguments")
        source = self.lower(receiver)
        var, slot = self._macro_var(args[0], f"{name}()")
        self.scopes.append({var: slot})
        try:
            bodies = [self.lower(t) for t in args[1:]]
        finally:
            self.scopes.pop()
        if name == "map":
            pred = bodies[0] if len(bodies) == 2 else None
            return a.Comprehension(pos, name, var, slot, source, pred, bodies[-1])
        return a.Comprehension(pos, name, var, slot, source, bodies[0], None)

    def _bind(self, tree: Tree, pos: a.Pos, args: list[Tree]) -> a.Node:
        if len(args) != 3:
            self.fail(tree, "cel.bind() takes 3 arguments")
        var, slot = self._macro_var(args[0], "cel.bind()")
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


# One piece of a quoted literal: a run of plain characters, an escape, or a stray backslash.
_PIECE: Final = re.compile(
    r"""[^\\]+|\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-3][0-7]{2}|[abfnrtv?`"'\\])|\\""",
    re.DOTALL,
)
_SIMPLE_ESCAPES: Final = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "?": "?", "`": "`", '"': '"', "'": "'", "\\": "\\",
}  # fmt: skip


def _decode_literal(text: str) -> str | bytes:
    """The value of a string or bytes literal (CEL escapes; ``r`` raw, ``b`` bytes prefixes).

    In strings, ``\\xHH`` and octal escapes are code points; in bytes, byte values.
    """
    prefix_end = min(i for i in (text.find('"'), text.find("'")) if i >= 0)
    prefix, quoted = text[:prefix_end].lower(), text[prefix_end:]
    quote = 3 if quoted[:3] in ('"""', "'''") else 1
    body = quoted[quote:-quote]
    is_bytes, raw = "b" in prefix, "r" in prefix
    if raw:
        return body.encode("utf-8") if is_bytes else body
    chunks: list[bytes] = []
    for match in _PIECE.finditer(body):
        piece, escape = match.group(0), match.group(1)
        if escape is None:
            if piece == "\\":
                raise ValueError("invalid escape sequence in literal")
            chunks.append(piece.encode("utf-8"))
        elif escape[0] in "xuU" or escape[0].isdigit():
            number = int(escape, 8) if escape[0].isdigit() else int(escape[1:], 16)
            if is_bytes and escape[0] in "x01234567":
                chunks.append(bytes((number,)))
            elif number > 0x10FFFF or 0xD800 <= number <= 0xDFFF:
                raise ValueError(f"invalid code point \\{escape} in literal")
            else:
                chunks.append(chr(number).encode("utf-8"))
        else:
            chunks.append(_SIMPLE_ESCAPES[escape].encode("utf-8"))
    data = b"".join(chunks)
    if is_bytes:
        return data
    return data.decode("utf-8")  # code points were encoded as UTF-8 above


def _int_literal(text: str) -> int:
    negative = text.startswith("-")
    body = text[1:] if negative else text
    value = int(body[2:], 16) if body[:2].lower() == "0x" else int(body, 10)
    return -value if negative else value
