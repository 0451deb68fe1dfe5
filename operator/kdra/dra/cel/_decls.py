"""The functions a device selector may call: upstream's DRA environment, declared.

Upstream compiles ``DeviceClass``/``ResourceClaim`` selectors in Kubernetes' base CEL
environment (``k8s.io/apiserver/pkg/cel/environment``, ``MustBaseEnvSet``) extended with the
``device`` variable and the bindings extension (``cel.bind``). As of Kubernetes 1.36 the
base environment holds, besides standard CEL: cel-go's strings extension (version 2), sets
extension, lists extension (version 3), two-variable comprehensions and optional types; and
Kubernetes' regex, lists, URL, IP, CIDR, format, quantity and semver (version 1) libraries.
This module declares their overloads, as cel-go's checker sees them; ``_check`` resolves
every call against them and ``_runtime`` implements them.

Invariants:

* Every overload here has a runtime implementation: the global form of ``name`` is the
  runtime helper :func:`helper_name` ``(name, member=False)``, the receiver form
  ``helper_name(name, member=True)`` (``tests/unit/dra/test_cel_env.py`` checks both
  ways).
* Type parameters are single capital letters (``A``, ``K``, ``V``, ``T``, ``U``); the
  checker renames them afresh for every call.
* What the base environment has and kdra does not is listed in :data:`NOT_PROVIDED`, so
  that using it says so instead of "undeclared reference".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ._types import (
    BOOL,
    BYTES,
    CIDR,
    DOUBLE,
    DYN,
    FORMAT,
    INT,
    IP,
    QUANTITY,
    SEMVER,
    STRING,
    UINT,
    URL,
    Type,
    list_of,
    map_of,
    optional_of,
    param,
    type_of,
)

__all__ = [
    "COMPARABLE",
    "FUNCTIONS",
    "NAMED_FORMATS",
    "NOT_PROVIDED",
    "TYPE_NAMES",
    "Overload",
    "helper_name",
]


@dataclass(frozen=True, slots=True)
class Overload:
    """One signature of a function: ``params`` include the receiver of a member overload."""

    id: str
    member: bool
    params: tuple[Type, ...]
    result: Type


A, K, V, T, U = param("A"), param("K"), param("V"), param("T"), param("U")
_LIST_A, _LIST_T, _LIST_V = list_of(A), list_of(T), list_of(V)
_MAP_KV = map_of(K, V)
_OPT_V = optional_of(V)

# Element types that the lists library, sort() and sortBy() accept (timestamps and
# durations have no constructor in kdra, so they cannot occur).
COMPARABLE: Final = (INT, UINT, DOUBLE, BOOL, STRING, BYTES)
_SUMMABLE: Final = (INT, UINT, DOUBLE)

# Type denotations usable as values (``type(x) == int``).
TYPE_NAMES: Final = {
    "bool": BOOL,
    "int": INT,
    "uint": UINT,
    "double": DOUBLE,
    "string": STRING,
    "bytes": BYTES,
    "null_type": Type("null", "null_type"),
    "dyn": DYN,
    "list": list_of(DYN),
    "map": map_of(DYN, DYN),
    "type": Type("type", "type"),
}

# Kubernetes' named formats (format.named(...) and format.<name>()).
NAMED_FORMATS: Final = (
    "dns1123Label",
    "dns1123Subdomain",
    "dns1035Label",
    "qualifiedName",
    "dns1123LabelPrefix",
    "dns1123SubdomainPrefix",
    "dns1035LabelPrefix",
    "labelValue",
    "uri",
    "uuid",
    "byte",
    "date",
    "datetime",
)

NOT_PROVIDED: Final = {
    "timestamp": "timestamps are not supported in device selectors",
    "duration": "durations are not supported in device selectors",
    "authorizer": "the authorizer library needs an authorizer, which selectors do not have",
}


def _g(oid: str, params: tuple[Type, ...], result: Type) -> Overload:
    return Overload(oid, False, params, result)


def _m(oid: str, params: tuple[Type, ...], result: Type) -> Overload:
    return Overload(oid, True, params, result)


_ORDERABLE: Final = (BOOL, INT, UINT, DOUBLE, STRING, BYTES)
_NUMBERS: Final = (INT, UINT, DOUBLE)


def _comparisons(op: str) -> list[Overload]:
    same = [_g(f"{op}_{t.name}", (t, t), BOOL) for t in _ORDERABLE]
    cross = [
        _g(f"{op}_{a.name}_{b.name}", (a, b), BOOL) for a in _NUMBERS for b in _NUMBERS if a != b
    ]
    return same + cross


def _standard() -> dict[str, list[Overload]]:
    arith = {
        "_+_": [_g(f"add_{t.name}", (t, t), t) for t in (INT, UINT, DOUBLE, STRING, BYTES)]
        + [_g("add_list", (_LIST_A, _LIST_A), _LIST_A)],
        "_-_": [_g(f"subtract_{t.name}", (t, t), t) for t in _NUMBERS],
        "_*_": [_g(f"multiply_{t.name}", (t, t), t) for t in _NUMBERS],
        "_/_": [_g(f"divide_{t.name}", (t, t), t) for t in _NUMBERS],
        "_%_": [_g(f"modulo_{t.name}", (t, t), t) for t in (INT, UINT)],
    }
    sized = (STRING, BYTES, _LIST_A, _MAP_KV)
    size_names = ("string", "bytes", "list", "map")
    return {
        "_?_:_": [_g("conditional", (BOOL, A, A), A)],
        "!_": [_g("logical_not", (BOOL,), BOOL)],
        "-_": [_g("negate_int64", (INT,), INT), _g("negate_double", (DOUBLE,), DOUBLE)],
        "_==_": [_g("equals", (A, A), BOOL)],
        "_!=_": [_g("not_equals", (A, A), BOOL)],
        "_<_": _comparisons("less"),
        "_<=_": _comparisons("less_equals"),
        "_>_": _comparisons("greater"),
        "_>=_": _comparisons("greater_equals"),
        **arith,
        "_[_]": [
            _g("index_list", (_LIST_A, INT), A),
            _g("index_map", (_MAP_KV, K), V),
            _g("optional_list_index_int", (optional_of(_LIST_V), INT), _OPT_V),
            _g("optional_map_index_value", (optional_of(_MAP_KV), K), _OPT_V),
        ],
        "@in": [_g("in_list", (A, _LIST_A), BOOL), _g("in_map", (K, _MAP_KV), BOOL)],
        "size": [
            o
            for t, n in zip(sized, size_names, strict=True)
            for o in (_g(f"size_{n}", (t,), INT), _m(f"{n}_size", (t,), INT))
        ],
        "int": [_g(f"{t.name}_to_int64", (t,), INT) for t in (INT, UINT, DOUBLE, STRING)],
        "uint": [_g(f"{t.name}_to_uint64", (t,), UINT) for t in (INT, UINT, DOUBLE, STRING)],
        "double": [_g(f"{t.name}_to_double", (t,), DOUBLE) for t in (INT, UINT, DOUBLE, STRING)],
        "string": [
            _g(f"{t.name}_to_string", (t,), STRING)
            for t in (INT, UINT, DOUBLE, BOOL, BYTES, STRING)
        ]
        + [_g("ip_to_string", (IP,), STRING), _g("cidr_to_string", (CIDR,), STRING)],
        "bytes": [_g("string_to_bytes", (STRING,), BYTES), _g("bytes_to_bytes", (BYTES,), BYTES)],
        "bool": [_g("bool_to_bool", (BOOL,), BOOL), _g("string_to_bool", (STRING,), BOOL)],
        "dyn": [_g("to_dyn", (A,), DYN)],
        "type": [_g("type", (A,), type_of(A))],
        "contains": [_m("contains_string", (STRING, STRING), BOOL)],
        "startsWith": [_m("starts_with_string", (STRING, STRING), BOOL)],
        "endsWith": [_m("ends_with_string", (STRING, STRING), BOOL)],
        "matches": [
            _g("matches", (STRING, STRING), BOOL),
            _m("matches_string", (STRING, STRING), BOOL),
        ],
    }


def _strings() -> dict[str, list[Overload]]:
    s, i = STRING, INT
    return {
        "charAt": [_m("string_char_at_int", (s, i), s)],
        "indexOf": [
            _m("string_index_of_string", (s, s), i),
            _m("string_index_of_string_int", (s, s, i), i),
            _m("list_a_index_of_int", (_LIST_A, A), i),
        ],
        "lastIndexOf": [
            _m("string_last_index_of_string", (s, s), i),
            _m("string_last_index_of_string_int", (s, s, i), i),
            _m("list_a_last_index_of_int", (_LIST_A, A), i),
        ],
        "lowerAscii": [_m("string_lower_ascii", (s,), s)],
        "upperAscii": [_m("string_upper_ascii", (s,), s)],
        "trim": [_m("string_trim", (s,), s)],
        "replace": [
            _m("string_replace_string_string", (s, s, s), s),
            _m("string_replace_string_string_int", (s, s, s, i), s),
        ],
        "split": [
            _m("string_split_string", (s, s), list_of(s)),
            _m("string_split_string_int", (s, s, i), list_of(s)),
        ],
        "substring": [
            _m("string_substring_int", (s, i), s),
            _m("string_substring_int_int", (s, i, i), s),
        ],
        "format": [_m("string_format", (s, list_of(DYN)), s)],
        "strings.quote": [_g("strings_quote", (s,), s)],
        "join": [
            _m("list_join", (list_of(s),), s),
            _m("list_join_string", (list_of(s), s), s),
        ],
        "find": [_m("string_find_string", (s, s), s)],
        "findAll": [
            _m("string_find_all_string", (s, s), list_of(s)),
            _m("string_find_all_string_int", (s, s, i), list_of(s)),
        ],
    }


def _lists() -> dict[str, list[Overload]]:
    def each(prefix: str, suffix: str, result: str, kinds: tuple[Type, ...]) -> list[Overload]:
        out = []
        for t in kinds:
            res = BOOL if result == "bool" else list_of(t) if result == "list" else t
            out.append(_m(f"list_{t.name}_{prefix}{suffix}", (list_of(t),), res))
        return out

    return {
        "isSorted": each("is_sorted", "_bool", "bool", COMPARABLE),
        "sum": each("sum", "", "elem", _SUMMABLE),
        "max": each("max", "", "elem", COMPARABLE),
        "min": each("min", "", "elem", COMPARABLE),
        "slice": [_m("list_slice", (_LIST_T, INT, INT), _LIST_T)],
        "flatten": [
            _m("list_flatten", (list_of(_LIST_T),), _LIST_T),
            _m("list_flatten_int", (list_of(DYN), INT), list_of(DYN)),
        ],
        "sort": [_m(f"list_{t.name}_sort", (list_of(t),), list_of(t)) for t in COMPARABLE],
        "@sortByAssociatedKeys": [
            _m(f"list_{u.name}_sortByAssociatedKeys", (_LIST_T, list_of(u)), _LIST_T)
            for u in COMPARABLE
        ],
        "lists.range": [_g("lists_range", (INT,), list_of(INT))],
        "reverse": [_m("list_reverse", (_LIST_T,), _LIST_T)],
        "distinct": [_m("list_distinct", (_LIST_T,), _LIST_T)],
        "sets.contains": [_g("list_sets_contains_list", (_LIST_T, _LIST_T), BOOL)],
        "sets.equivalent": [_g("list_sets_equivalent_list", (_LIST_T, _LIST_T), BOOL)],
        "sets.intersects": [_g("list_sets_intersects_list", (_LIST_T, _LIST_T), BOOL)],
        "cel.@mapInsert": [
            _g("@mapInsert_map_key_value", (_MAP_KV, K, V), _MAP_KV),
            _g("@mapInsert_map_map", (_MAP_KV, _MAP_KV), _MAP_KV),
        ],
    }


def _optional() -> dict[str, list[Overload]]:
    return {
        "optional.of": [_g("optional_of", (V,), _OPT_V)],
        "optional.ofNonZeroValue": [_g("optional_ofNonZeroValue", (V,), _OPT_V)],
        "optional.none": [_g("optional_none", (), _OPT_V)],
        "value": [_m("optional_value", (_OPT_V,), V)],
        "hasValue": [_m("optional_hasValue", (_OPT_V,), BOOL)],
        "or": [_m("optional_or_optional", (_OPT_V, _OPT_V), _OPT_V)],
        "orValue": [_m("optional_orValue_value", (_OPT_V, V), V)],
        "first": [_m("list_first", (_LIST_V,), _OPT_V)],
        "last": [_m("list_last", (_LIST_V,), _OPT_V)],
        "optional.unwrap": [_g("optional_unwrap", (list_of(_OPT_V),), _LIST_V)],
        "unwrapOpt": [_m("optional_unwrapOpt", (list_of(_OPT_V),), _LIST_V)],
    }


def _kubernetes() -> dict[str, list[Overload]]:
    q, sv, s, b, i = QUANTITY, SEMVER, STRING, BOOL, INT
    out: dict[str, list[Overload]] = {
        "semver": [_g("string_to_semver", (s,), sv), _g("string_bool_to_semver", (s, b), sv)],
        "isSemver": [_g("is_semver_string", (s,), b), _g("is_semver_string_bool", (s, b), b)],
        "major": [_m("semver_major", (sv,), i)],
        "minor": [_m("semver_minor", (sv,), i)],
        "patch": [_m("semver_patch", (sv,), i)],
        "isGreaterThan": [
            _m("semver_is_greater_than", (sv, sv), b),
            _m("quantity_is_greater_than", (q, q), b),
        ],
        "isLessThan": [
            _m("semver_is_less_than", (sv, sv), b),
            _m("quantity_is_less_than", (q, q), b),
        ],
        "compareTo": [
            _m("semver_compare_to", (sv, sv), i),
            _m("quantity_compare_to", (q, q), i),
        ],
        "quantity": [_g("string_to_quantity", (s,), q)],
        "isQuantity": [_g("is_quantity_string", (s,), b)],
        "sign": [_g("quantity_sign", (q,), i)],
        "asApproximateFloat": [_m("quantity_get_float", (q,), DOUBLE)],
        "asInteger": [_m("quantity_get_int", (q,), i)],
        "isInteger": [_m("quantity_is_integer", (q,), b)],
        "add": [_m("quantity_add", (q, q), q), _m("quantity_add_int", (q, i), q)],
        "sub": [_m("quantity_sub", (q, q), q), _m("quantity_sub_int", (q, i), q)],
        "ip": [_g("string_to_ip", (s,), IP), _m("cidr_ip", (CIDR,), IP)],
        "family": [_m("ip_family", (IP,), i)],
        "ip.isCanonical": [_g("ip_is_canonical", (s,), b)],
        "isIP": [_g("is_ip", (s,), b)],
        "cidr": [_g("string_to_cidr", (s,), CIDR)],
        "containsIP": [
            _m("cidr_contains_ip_string", (CIDR, s), b),
            _m("cidr_contains_ip_ip", (CIDR, IP), b),
        ],
        "containsCIDR": [
            _m("cidr_contains_cidr_string", (CIDR, s), b),
            _m("cidr_contains_cidr", (CIDR, CIDR), b),
        ],
        "prefixLength": [_m("cidr_prefix_length", (CIDR,), i)],
        "masked": [_m("cidr_masked", (CIDR,), CIDR)],
        "isCIDR": [_g("is_cidr", (s,), b)],
        "url": [_g("string_to_url", (s,), URL)],
        "isURL": [_g("is_url_string", (s,), b)],
        "getQuery": [_m("url_get_query", (URL,), map_of(s, list_of(s)))],
        "validate": [_m("format-validate", (FORMAT, s), optional_of(list_of(s)))],
        "format.named": [_g("format-named", (s,), optional_of(FORMAT))],
    }
    for flag in ("isUnspecified", "isLoopback", "isLinkLocalMulticast", "isLinkLocalUnicast"):
        out[flag] = [_m(f"ip_{flag}", (IP,), b)]
    out["isGlobalUnicast"] = [_m("ip_is_global_unicast", (IP,), b)]
    for part in ("getScheme", "getHost", "getHostname", "getPort", "getEscapedPath"):
        out[part] = [_m(f"url_{part}", (URL,), s)]
    for name in NAMED_FORMATS:
        out[f"format.{name}"] = [_g(f"format.{name}", (), FORMAT)]
    return out


def _merge(*tables: dict[str, list[Overload]]) -> dict[str, tuple[Overload, ...]]:
    merged: dict[str, list[Overload]] = {}
    for table in tables:
        for name, overloads in table.items():
            merged.setdefault(name, []).extend(overloads)
    return {name: tuple(overloads) for name, overloads in merged.items()}


# function name -> its overloads (global and member forms together, as cel-go keeps them)
FUNCTIONS: Final = _merge(_standard(), _strings(), _lists(), _optional(), _kubernetes())


def helper_name(function: str, member: bool) -> str:
    """The runtime helper that implements ``function`` called globally or on a receiver."""
    safe = function.replace(".", "_").replace("@", "").replace("-", "_")
    return ("m_" if member else "g_") + safe
