"""Static type checking of selectors: what upstream's checker rejects is a compile error,
reported with cel-go's wording and a position, and surfaced by the validating webhook."""

from __future__ import annotations

import pytest

from kdra.dra.cel import compile_selector, make_device
from kdra.dra.errors import CelCompileError, CelRuntimeError
from kdra.operator.core.admission import class_errors

A = 'device.attributes["gpu.kdra.dev"]'
GPU = make_device("gpu.kdra.dev", {"model": ("string", "a100"), "index": ("int", 3)}, {})


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # the result must be bool (or an attribute value, whose type is unknown)
        ("device.driver", "1:1: must evaluate to bool or the unknown type, not string"),
        ("device.attributes", "not map(string, map(string, any))"),
        ("1 + 2", "not int"),
        ('["a"]', "not list(string)"),
        ("dyn(true)", "not dyn"),
        ("optional.of(true)", "not optional_type(bool)"),
        # calls with no matching overload
        ("isSemver(1)", "1:1: found no matching overload for 'isSemver' applied to '(int)'"),
        (
            '"a".lowerAscii(1) == "a"',
            "no matching overload for 'lowerAscii' applied to 'string.(int)'",
        ),
        ('"abc".split(1) == []', "'split' applied to 'string.(int)'"),
        ('[1, 2].join() == ""', "'join' applied to 'list(int).()'"),
        ('1 in {"a": 1}', "'@in' applied to '(int, map(string, int))'"),
        ('[1].exists(x, x > 0) ? 1 : "a"', "'_?_:_' applied to '(bool, int, string)'"),
        ("[1].sortBy(x, [x]) == [1]", "'@sortByAssociatedKeys' applied to 'list(int).(list(list"),
        ('sets.contains([1], ["a"])', "'sets.contains' applied to '(list(int), list(string))'"),
        ('quantity("1").isGreaterThan(semver("1.0.0"))', "'isGreaterThan' applied to"),
        ("device.driver.size(1) == 1", "'size' applied to 'string.(int)'"),
        ('device.driver == "x" && isSemver(1)', "1:25: found no matching overload for 'isSemver'"),
        # operands of && and ||, predicates of macros
        ("device.driver && true", "1:1: expected type 'bool' but found 'string'"),
        ("[1].all(x, x)", "expected type 'bool' but found 'int'"),
        # fields, ranges, literals
        ("(1).x == 1", "type 'int' does not support field selection"),
        ('quantity("1").x == 1', "undefined field 'x'"),
        ("[device].all(d, d.name == 1)", "undefined field 'name'"),
        ("(1).map(x, x) == []", "expression of type 'int' cannot be range of a comprehension"),
        ('[1, "a"].size() == 2', "1:5: expected type 'int' but found 'string'"),
        ('{"a": 1, "b": "x"}.size() == 2', "expected type 'int' but found 'string'"),
        ("[1, dyn(2)].size() == 2", "expected type 'int' but found 'dyn'"),
        ('["a", device.attributes["d"].x].size() == 2', "expected type 'string' but found 'any'"),
        # constant regular expressions are checked when compiling
        ('device.driver.matches("(")', "invalid matches argument"),
        ('device.driver.find("[") == ""', "program instantiation failed: error parsing regexp"),
        # macros with the wrong shape, cel-go's words
        ("[1, 2].exists(x, x, x > 1)", "duplicate variable name: x"),
        ("[1].map(1, 1) == []", "argument is not an identifier"),
        ("[1].all(__result__, true)", "iteration variable overwrites accumulator variable"),
        ("cel.bind(1, 2, true)", "cel.bind() variable names must be simple identifiers"),
        ("has(1)", "invalid argument to has() macro"),
        ('device.driver.?x == ""', "optional field selection and indexing are not supported"),
    ],
)
def test_type_errors_are_compile_errors(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError) as caught:
        compile_selector(expression)
    assert message in caught.value.message


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # attribute values are of the unknown type: anything goes when compiling ...
        (f"{A}.model.lowerAscii() == 'a100'", True),
        (f"{A}.index + 1 == 4", True),
        (f"{A}.index.size() == 1", None),  # ... and the run time decides
        (f"{A}.model", None),  # an attribute value may be the result
        (f"({A}.index > 5 ? true : {A}.index) && true", None),  # typed bool, yet an int
        (f"{A}.model.startsWith('a') ? {A}.index > 2 : {A}.missing", True),
        (f"[{A}.model, {A}.model].size() == 2", True),  # same (unknown) types
        ("1 < 2.5 && 2u < 3 && 1.0 > 0u", True),  # cross-type numeric ordering
        ("{1: 'a'}[1] == 'a' && [[], [1]].size() == 2", True),
        ("'%s is %d'.format(['x', 1]) == 'x is 1'", True),  # format's lists may mix types
        ("[].all(x, x)", True),  # an unconstrained element type becomes bool
        (f"{A}.exists(k, v, k == 'model' && v == 'a100')", True),
        ("[device].all(d, d.driver == 'gpu.kdra.dev')", True),
        ("has(device.driver) && has(device.attributes)", True),
    ],
)
def test_accepted_with_dynamic_checks(expression: str, expected: bool | None) -> None:
    selector = compile_selector(expression)
    if expected is None:
        with pytest.raises(CelRuntimeError):
            selector.matches(GPU)
    else:
        assert selector.matches(GPU) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("isSemver(1)", "found no matching overload for 'isSemver' applied to '(int)'"),
        ("device.driver", "must evaluate to bool or the unknown type, not string"),
        ('"a".lowerAscii(1) == "a"', "'lowerAscii' applied to 'string.(int)'"),
    ],
)
def test_admission_reports_type_errors(expression: str, message: str) -> None:
    device_class = {
        "apiVersion": "resource.kdra.dev/v1alpha3",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.kdra.dev"},
        "spec": {
            "selectors": [
                {"cel": {"expression": 'device.driver == "x"'}},
                {"cel": {"expression": expression}},
            ]
        },
    }
    errors = class_errors(device_class)
    assert [e.field for e in errors] == ["spec.selectors[1].cel.expression"]
    assert message in errors[0].message
