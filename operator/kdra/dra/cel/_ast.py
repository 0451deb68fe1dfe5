"""The selector syntax tree that the type checker, the cost estimator and the code
generator share.

``_parse`` builds it from cel-python's parse tree after every name has been resolved and
every macro expanded into its own node, so a tree that exists uses only the declared
variable, functions (by name; ``_check`` resolves their overloads) and macros.

Invariants:

* Variables carry ``slot``: the unique Python local that holds them in generated code,
  which makes shadowing (``[1].all(x, [2].all(x, x > 1))``) a non-issue downstream.
* Nodes are immutable; later passes key what they learn about a node by ``id(node)``
  while the tree is alive.
"""

from __future__ import annotations

from dataclasses import dataclass

Pos = tuple[int, int]  # (line, column), 1-based


@dataclass(frozen=True, slots=True)
class Node:
    pos: Pos


@dataclass(frozen=True, slots=True)
class Const(Node):
    value: object  # a celpy value, a folded ListType/MapType, or None for null


@dataclass(frozen=True, slots=True)
class Var(Node):
    name: str
    slot: str


@dataclass(frozen=True, slots=True)
class DeviceField(Node):
    field: str  # driver | attributes | capacity


@dataclass(frozen=True, slots=True)
class Select(Node):
    operand: Node
    field: str


@dataclass(frozen=True, slots=True)
class Index(Node):
    operand: Node
    index: Node


@dataclass(frozen=True, slots=True)
class Has(Node):
    operand: Node
    field: str


@dataclass(frozen=True, slots=True)
class TypeLit(Node):
    name: str  # a type denotation used as a value: int, string, list, map, null_type, ...


@dataclass(frozen=True, slots=True)
class Call(Node):
    function: str  # the CEL name: "size", "lowerAscii", "strings.quote", "semver", ...
    member: bool  # receiver-style (args[0] is the receiver) or global
    args: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Unary(Node):
    op: str  # "!" | "-"
    operand: Node


@dataclass(frozen=True, slots=True)
class Binary(Node):
    op: str  # + - * / % == != < <= > >= in
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Logic(Node):
    op: str  # "&&" | "||"
    operands: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Cond(Node):
    cond: Node
    then: Node
    other: Node


@dataclass(frozen=True, slots=True)
class ListLit(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class MapLit(Node):
    entries: tuple[tuple[Node, Node], ...]


@dataclass(frozen=True, slots=True)
class Comprehension(Node):
    """A macro over a collection (or, for optMap/optFlatMap, over an optional value).

    ``kind`` is all | exists | exists_one | map | filter | transformList | transformMap |
    transformMapEntry | sortBy | optMap | optFlatMap. One-variable forms bind ``var`` to
    list elements or map keys; two-variable forms (``var2`` set) bind ``var`` to the index
    or key and ``var2`` to the value.
    """

    kind: str
    var: str
    slot: str
    source: Node
    pred: Node | None  # the predicate or filter
    xform: Node | None  # the transform (map, transform*, sortBy's key, optMap's result)
    var2: str | None = None
    slot2: str | None = None


@dataclass(frozen=True, slots=True)
class Bind(Node):
    var: str
    slot: str
    init: Node
    body: Node


def children(node: Node) -> tuple[Node, ...]:
    """The direct sub-expressions of ``node``."""
    if isinstance(node, (Const, Var, DeviceField, TypeLit)):
        return ()
    if isinstance(node, (Select, Has, Unary)):
        return (node.operand,)
    if isinstance(node, Index):
        return (node.operand, node.index)
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Logic):
        return node.operands
    if isinstance(node, Cond):
        return (node.cond, node.then, node.other)
    if isinstance(node, ListLit):
        return node.items
    if isinstance(node, MapLit):
        return tuple(part for entry in node.entries for part in entry)
    if isinstance(node, Comprehension):
        return tuple(n for n in (node.source, node.pred, node.xform) if n is not None)
    if isinstance(node, Bind):
        return (node.init, node.body)
    raise TypeError(f"unknown node {node!r}")


def size(node: Node) -> int:
    """Number of nodes in the tree (iteratively: trees may be long and thin)."""
    count, stack = 0, [node]
    while stack:
        current = stack.pop()
        count += 1
        stack.extend(children(current))
    return count
