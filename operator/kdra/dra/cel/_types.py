"""CEL's static types and the assignability rules the type checker (``_check``) applies.

A :class:`Type` is a kind, a name and type parameters: ``list(int)`` is
``Type("list", "list", (INT,))``. Type parameters of overloads (``list(A)``) and the free
variables the checker invents for empty literals are kind ``"param"``; a :class:`Mapping`
records what each one has been bound to. The rules are cel-go's (``checker/types.go``),
written out here so that kdra accepts and rejects the same expressions as upstream's checker:

Invariants:

* ``dyn`` and ``any`` (the type of attribute values) are assignable to and from every type;
  so is the error type, which the checker gives to an expression it has already reported.
* :func:`is_assignable` never changes the mapping it is given: it returns an extended copy
  when the assignment holds, ``None`` otherwise.
* :func:`format_type` spells a type as cel-go's ``FormatCELType`` does ("list(int)",
  "map(string, any)", "kubernetes.Quantity", "optional_type(int)"), because error messages
  quote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "ANY",
    "BOOL",
    "BYTES",
    "CIDR",
    "DEVICE",
    "DOUBLE",
    "DURATION",
    "DYN",
    "ERROR",
    "FORMAT",
    "INT",
    "IP",
    "NULL",
    "QUANTITY",
    "SEMVER",
    "STRING",
    "TIMESTAMP",
    "UINT",
    "URL",
    "Mapping",
    "Type",
    "format_type",
    "is_assignable",
    "is_dyn",
    "list_of",
    "map_of",
    "most_general",
    "optional_of",
    "param",
    "substitute",
    "type_of",
]


@dataclass(frozen=True, slots=True)
class Type:
    """One CEL type. ``kind`` is one of bool, int, uint, double, string, bytes, null, dyn,
    any, error, timestamp, duration, list, map, type, opaque, struct, param."""

    kind: str
    name: str
    params: tuple[Type, ...] = ()


BOOL: Final = Type("bool", "bool")
INT: Final = Type("int", "int")
UINT: Final = Type("uint", "uint")
DOUBLE: Final = Type("double", "double")
STRING: Final = Type("string", "string")
BYTES: Final = Type("bytes", "bytes")
NULL: Final = Type("null", "null_type")
DYN: Final = Type("dyn", "dyn")
ANY: Final = Type("any", "google.protobuf.Any")
ERROR: Final = Type("error", "*error*")
TIMESTAMP: Final = Type("timestamp", "google.protobuf.Timestamp")
DURATION: Final = Type("duration", "google.protobuf.Duration")
QUANTITY: Final = Type("struct", "kubernetes.Quantity")
SEMVER: Final = Type("struct", "kubernetes.Semver")
URL: Final = Type("struct", "kubernetes.URL")
FORMAT: Final = Type("struct", "kubernetes.NamedFormat")
IP: Final = Type("opaque", "net.IP")
CIDR: Final = Type("opaque", "net.CIDR")
DEVICE: Final = Type("struct", "kubernetes.DRADevice")


def list_of(elem: Type) -> Type:
    return Type("list", "list", (elem,))


def map_of(key: Type, value: Type) -> Type:
    return Type("map", "map", (key, value))


def optional_of(value: Type) -> Type:
    return Type("opaque", "optional_type", (value,))


def type_of(value: Type) -> Type:
    return Type("type", "type", (value,))


def param(name: str) -> Type:
    return Type("param", name)


Mapping = dict[str, Type]  # type parameter name -> what it is bound to


def is_dyn(t: Type) -> bool:
    return t.kind in ("dyn", "any")


def _dyn_or_error(t: Type) -> bool:
    return t.kind in ("dyn", "any", "error")


def _exact(t1: Type, t2: Type) -> bool:
    return t1 == t2


def _less_specific(t1: Type, t2: Type) -> bool:
    """cel-go's isEqualOrLessSpecific: t1 is at most as specific as t2."""
    if is_dyn(t1) or t1.kind == "param":
        return True
    if is_dyn(t2) or t2.kind == "param":
        return False
    if t1.kind != t2.kind:
        return False
    if t1.kind == "opaque":
        return (
            t1.name == t2.name
            and len(t1.params) == len(t2.params)
            and all(_less_specific(p1, p2) for p1, p2 in zip(t1.params, t2.params, strict=True))
        )
    if t1.kind in ("list", "map"):
        return all(_less_specific(p1, p2) for p1, p2 in zip(t1.params, t2.params, strict=True))
    if t1.kind == "type":
        return True
    return _exact(t1, t2)


def most_general(t1: Type, t2: Type) -> Type:
    return t1 if _less_specific(t1, t2) else t2


def _nullable(t: Type) -> bool:
    return t.kind in ("opaque", "struct", "any", "duration", "timestamp", "null", "dyn")


def _plain_assignable(target: Type, source: Type) -> bool:
    """cel-go's Type.IsAssignableType for simple kinds: same kind, name and parameters."""
    if target == source or is_dyn(target):
        return True
    if target.kind != source.kind or target.name != source.name:
        return False
    return len(target.params) == len(source.params) and all(
        _plain_assignable(p, q) for p, q in zip(target.params, source.params, strict=True)
    )


def _assignable(m: Mapping, t1: Type, t2: Type) -> bool:
    if t2.kind == "param":
        valid, has_sub = _valid_substitution(m, t1, t2)
        if valid:
            return True
        if has_sub:
            return False
    if t1.kind == "param":
        return _valid_substitution(m, t2, t1)[0]
    if _dyn_or_error(t1) or _dyn_or_error(t2):
        return True
    if t1.kind == "null":
        return _nullable(t2)
    if t2.kind == "null":
        return _nullable(t1)
    if t1.kind in ("opaque", "list", "map"):
        return (
            t1.kind == t2.kind
            and t1.name == t2.name
            and len(t1.params) == len(t2.params)
            and all(_assignable(m, p, q) for p, q in zip(t1.params, t2.params, strict=True))
        )
    if t1.kind == "type":
        return t2.kind == "type"
    return _plain_assignable(t1, t2)


def _valid_substitution(m: Mapping, t1: Type, t2: Type) -> tuple[bool, bool]:
    """Can type parameter ``t2`` stand for ``t1``? Returns (valid, t2 already bound)."""
    if t1 == t2:
        return True, True
    bound = m.get(t2.name)
    if bound is not None:
        if t1 == bound:
            return True, True
        if _assignable(m, t1, bound):
            wider = most_general(t1, bound)
            if _not_referenced_in(m, t2, wider):
                m[t2.name] = wider
            return True, True
        return False, True
    if _not_referenced_in(m, t2, t1):
        m[t2.name] = t1
        return True, False
    return False, False


def _not_referenced_in(m: Mapping, t: Type, within: Type) -> bool:
    if t == within:
        return False
    if within.kind == "param":
        bound = m.get(within.name)
        return True if bound is None else _not_referenced_in(m, t, bound)
    return all(_not_referenced_in(m, t, p) for p in within.params)


def is_assignable(m: Mapping, t1: Type, t2: Type) -> Mapping | None:
    """A copy of ``m`` extended so that a ``t2`` value may be used where ``t1`` is expected,
    or ``None`` when it may not."""
    copy = dict(m)
    return copy if _assignable(copy, t1, t2) else None


def is_assignable_list(m: Mapping, l1: list[Type], l2: list[Type]) -> Mapping | None:
    if len(l1) != len(l2):
        return None
    copy = dict(m)
    ok = all(_assignable(copy, t1, t2) for t1, t2 in zip(l1, l2, strict=True))
    return copy if ok else None


def substitute(m: Mapping, t: Type, params_to_dyn: bool = False) -> Type:
    """``t`` with every bound type parameter replaced (unbound ones by dyn if asked)."""
    if t.kind == "param":
        bound = m.get(t.name)
        if bound is not None:
            return substitute(m, bound, params_to_dyn)
        return DYN if params_to_dyn else t
    if not t.params:
        return t
    return Type(t.kind, t.name, tuple(substitute(m, p, params_to_dyn) for p in t.params))


def format_type(t: Type) -> str:
    """The type as cel-go's FormatCELType prints it."""
    if t.kind == "any":
        return "any"
    if t.kind == "null":
        return "null"
    if t.kind == "error":
        return "!error!"
    if t.kind in ("timestamp", "duration"):
        return t.kind
    if not t.params:
        return t.name
    return f"{t.name}({', '.join(format_type(p) for p in t.params)})"
