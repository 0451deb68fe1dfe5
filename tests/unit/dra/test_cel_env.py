"""The environment's consistency, and devices kdra does not understand.

* every declared overload has a run-time implementation and every implementation is
  declared (so a selector that type-checks never fails with "no such helper");
* the declarations are upstream's 1.36 base environment, no more: functions of later or
  feature-gated libraries are undeclared;
* :func:`make_device` either builds a device or raises ``InvalidObject``, for any input: a
  device with an attribute kdra cannot represent never gets a CEL view, so no selector can
  select it, and nothing crashes.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.dra.cel import CelDevice, compile_selector, make_device
from kdra.dra.cel._decls import FUNCTIONS, helper_name
from kdra.dra.cel._runtime import METERED, NAMESPACE
from kdra.dra.errors import CelCompileError, InvalidObject

# Names generated code uses directly (operators, macros' plumbing), not declared functions.
_PLUMBING = frozenset(
    (
        "CEL_ERRORS", "EMPTY_MAP", "dict_get", "over_budget", "truth", "select", "has",
        "index", "iterate", "iterate2", "make_list", "make_map",
        "insert_entries", "eq", "ne", "lt", "le", "gt", "ge", "in_", "add", "sub", "mul",
        "div", "mod", "neg", "not_",
    )
)  # fmt: skip
_METERED = frozenset(METERED)
_OPERATORS = frozenset(
    ("_?_:_", "!_", "-_", "_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_", "_-_", "_*_",
     "_/_", "_%_", "_[_]", "@in")
)  # fmt: skip


def test_every_declared_function_has_an_implementation() -> None:
    missing = [
        helper_name(name, overload.member)
        for name, overloads in FUNCTIONS.items()
        if name not in _OPERATORS
        for overload in overloads
        if helper_name(name, overload.member) not in NAMESPACE
    ]
    assert missing == []


def test_every_implementation_is_declared() -> None:
    declared = {
        helper_name(name, overload.member)
        for name, overloads in FUNCTIONS.items()
        for overload in overloads
    }
    undeclared = sorted(set(NAMESPACE) - declared - _PLUMBING - _METERED)
    assert undeclared == []


def test_every_metered_twin_meters_a_helper() -> None:
    # x_<name> is the metered twin of helper or operator <name> (_rt_meter).
    assert sorted(n for n in _METERED if n.removeprefix("x_") not in NAMESPACE) == []


@pytest.mark.parametrize(
    "expression",
    [
        "'abc'.reverse() == 'cba'",  # strings extension version 3
        "math.greatest(1, 2) == 2",  # the math extension is not in the base environment
        "quantity('1').mul(2) == quantity('2')",  # not in 1.36's quantity library
        "base64.encode(b'a') == 'YQ=='",  # the encoders extension is not in it either
        "authorizer.path('/healthz').check('get').allowed()",
        "duration('1s') > duration('0s')",
    ],
)
def test_outside_the_base_environment(expression: str) -> None:
    with pytest.raises(CelCompileError):
        compile_selector(expression)


ANY_VALUE = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
KINDS = st.sampled_from(["int", "bool", "string", "version", "ints", "float", "", "quantity"])


@settings(max_examples=300, deadline=None)
@given(
    attributes=st.dictionaries(
        st.text(min_size=1, max_size=12), st.tuples(KINDS, ANY_VALUE), max_size=4
    ),
    capacity=st.dictionaries(st.text(min_size=1, max_size=12), ANY_VALUE, max_size=3),
)
def test_make_device_is_total(attributes: dict[str, Any], capacity: dict[str, Any]) -> None:
    try:
        device = make_device("gpu.kdra.dev", attributes, capacity)
    except InvalidObject:
        return
    assert isinstance(device, CelDevice)
    # Whatever was accepted is something CEL can evaluate against without crashing.
    selector = compile_selector(
        'device.attributes["gpu.kdra.dev"].all(k, v, v == v) && '
        'device.capacity["gpu.kdra.dev"].all(k, q, q.isGreaterThan(q) || true)'
    )
    assert selector.matches(device) is True


@pytest.mark.parametrize(
    ("attributes", "capacity"),
    [
        ({"tags": ("strings", ["a", "b"])}, {}),  # a list-typed attribute (1.36 alpha)
        ({"index": ("ints", [1])}, {}),
        ({"flag": ("bool", "true")}, {}),
        ({"model": ("string", None)}, {}),
        ({"count": ("int", 1.5)}, {}),
        ({}, {"memory": 80}),
        ({}, {"memory": {"value": "80Gi"}}),
    ],
)
def test_devices_kdra_does_not_understand_are_never_selectable(
    attributes: dict[str, Any], capacity: dict[str, Any]
) -> None:
    with pytest.raises(InvalidObject):
        make_device("gpu.kdra.dev", attributes, capacity)
