"""CEL device selectors: the environment, upstream's semantics, errors, cost bounds, cache."""

from __future__ import annotations

import time

import pytest

from kdra.dra.cel import (
    COST_LIMIT,
    MAX_EXPRESSION_LENGTH,
    CelDevice,
    DeviceSelector,
    compile_selector,
    make_device,
)
from kdra.dra.errors import CelCompileError, CelRuntimeError, InvalidObject

GPU = make_device(
    "gpu.kdra.dev",
    {
        "model": ("string", "a100"),  # bare: filed under the driver's domain
        "index": ("int", 3),
        "healthy": ("bool", True),
        "mig": ("bool", False),
        "driverVersion": ("version", "12.4.0"),
        "gpu.kdra.dev/uuid": ("string", "GPU-1234"),  # qualified with the driver's domain
        "pci.example.com/root": ("string", "pcie0"),  # another domain
    },
    {"memory": "80Gi", "pci.example.com/lanes": "16"},
)
CAT = make_device(
    "resource-driver.example.com",
    {"color": ("string", "black"), "size": ("string", "large")},
    {},
)
CATS = (
    'device.attributes["resource-driver.example.com"].color == "black" && '
    'device.attributes["resource-driver.example.com"].size == "large"'
)
A = 'device.attributes["gpu.kdra.dev"]'
C = 'device.capacity["gpu.kdra.dev"]'


@pytest.mark.parametrize(
    ("device", "expression", "expected"),
    [
        # the seed's cats
        (CAT, CATS, True),
        (CAT, 'device.driver == "resource-driver.example.com"', True),
        (GPU, 'device.driver == "resource-driver.example.com"', False),
        # On a GPU the cats' domain is an empty map: guard with the driver, as upstream advises.
        (GPU, f'device.driver == "resource-driver.example.com" && {CATS}', False),
        # bare and qualified names
        (GPU, f'{A}.model == "a100"', True),
        (GPU, f'{A}.uuid == "GPU-1234"', True),
        (GPU, 'device.attributes["pci.example.com"].root == "pcie0"', True),
        (GPU, f'"model" in {A} && !("root" in {A})', True),
        (GPU, '"pci.example.com" in device.attributes', True),
        (GPU, f"size({A}) == 6", True),
        # an unknown domain is an empty map
        (GPU, '"x" in device.attributes["unknown.domain"]', False),
        (GPU, 'size(device.attributes["unknown.domain"]) == 0', True),
        (GPU, 'device.attributes["unknown.domain"].all(k, false)', True),
        (GPU, 'has(device.attributes["unknown.domain"].x)', False),
        (GPU, '"unknown.domain" in device.attributes', False),
        (GPU, 'device.capacity["unknown.domain"].exists(k, true)', False),
        # has()
        (GPU, f"has({A}.model)", True),
        (GPU, f"has({A}.missing)", False),
        (GPU, f"has({A}.missing) && {A}.missing == 1", False),
        (GPU, "has(device.driver)", True),
        # int, bool and string attributes
        (GPU, f"{A}.index == 3 && {A}.index > 2 && {A}.index <= 3", True),
        (GPU, f"{A}.healthy && !{A}.mig", True),
        (GPU, f'{A}.model.startsWith("a1") && {A}.model.matches("^a[0-9]+$")', True),
        (
            GPU,
            f'{A}.model.contains("10") && {A}.model.endsWith("0") && {A}.model.size() == 4',
            True,
        ),
        (GPU, f'{A}.model in ["a100", "h100"]', True),
        (GPU, f'{A}.index == "3"', False),  # different types are never equal
        (GPU, f"{A}.index == 3.0 && {A}.index == 3u", True),  # numbers compare across types
        (GPU, f"{A}.healthy == 1", False),
        # semver
        (GPU, f'{A}.driverVersion.isGreaterThan(semver("12.3.9"))', True),
        (GPU, f'{A}.driverVersion.isLessThan(semver("12.4.0-rc.1"))', False),
        (GPU, f'{A}.driverVersion.compareTo(semver("13.0.0")) == -1', True),
        (GPU, f"{A}.driverVersion.major() == 12 && {A}.driverVersion.minor() == 4", True),
        (GPU, f"{A}.driverVersion.patch() == 0", True),
        (GPU, f'{A}.driverVersion == semver("12.4.0+build.7")', True),  # build ignored
        (GPU, '!(semver("1.0.0-rc.1") == semver("1.0.0"))', True),  # != is too costly upstream
        (GPU, 'isSemver("1.2.3") && !isSemver("1.2") && !isSemver("v1.2.3")', True),
        # quantity
        (GPU, f'{C}.memory.compareTo(quantity("40Gi")) >= 0', True),
        (GPU, f'{C}.memory.isGreaterThan(quantity("80G"))', True),
        (GPU, f'{C}.memory.isLessThan(quantity("80Gi"))', False),
        (GPU, f'{C}.memory == quantity("81920Mi")', True),
        (GPU, f'{C}.memory.add(quantity("1Gi")) == quantity("81Gi")', True),
        (GPU, f"{C}.memory.sub(1).isLessThan({C}.memory)", True),
        (GPU, f"{C}.memory.asInteger() == 85899345920 && {C}.memory.isInteger()", True),
        (GPU, f"{C}.memory.asApproximateFloat() > 8.5e10", True),
        (GPU, f'sign({C}.memory) == 1 && sign(quantity("-1")) == -1', True),  # a global
        (GPU, 'device.capacity["pci.example.com"].lanes == quantity("16")', True),
        (GPU, 'quantity("1Gi") == quantity("1024Mi") && quantity("1k") == quantity("1000")', True),
        (GPU, f'dyn({C}.memory) == "80Gi"', False),  # a quantity never equals a non-quantity
        (GPU, 'isQuantity("1.5Gi") && !isQuantity("200K")', True),
        # CEL's commutative error handling
        (GPU, f"{A}.missing == 1 || true", True),
        (GPU, f"false && {A}.missing == 1", False),
        (GPU, f"{A}.missing == 1 && false", False),
        (GPU, "true ? true : 1 / 0 == 1", True),  # only the chosen branch is evaluated
        # macros and bindings
        (GPU, f'{A}.exists(name, name == "model")', True),
        (GPU, f'{A}.exists_one(name, name.startsWith("m"))', False),  # model and mig
        (GPU, "[1, 2, 3].all(x, x > 0) && [1, 2, 3].exists_one(x, x == 2)", True),
        (GPU, "[1, 2, 3].map(x, x * 2) == [2, 4, 6]", True),
        (GPU, "[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]", True),
        (GPU, "[1, 2, 3].filter(x, x % 2 == 1).size() == 2", True),
        (GPU, f'cel.bind(gpu, {A}, gpu.model == "a100" && gpu.index == 3)', True),
        (GPU, '[1].all(device, .device.driver == "gpu.kdra.dev" && device == 1)', True),
        (GPU, "[[1, 2], [3]].all(l, l.all(x, [5].all(x, x == 5) && x < 4))", True),  # shadowing
        # literals, conversions, collections
        (GPU, '{"a": 1, "b": 2}.b == 2 && {"a": 1}["a"] == 1', True),
        (GPU, "[10, 20][1] == 20 && size([1, 2]) == 2", True),
        (GPU, 'string(1.5) == "1.5" && string(1e6) == "1e+06" && string(3) == "3"', True),
        (GPU, 'int("12") == 12 && double("1.5") == 1.5 && uint(3) == 3u', True),
        (GPU, 'bool("true") && bytes("a") == b"a" && dyn(1) == 1', True),
        (GPU, "-7 / 2 == -3 && -7 % 2 == -1 && 7.0 / 2.0 == 3.5", True),  # Go's truncation
        (GPU, '"abc" < "abd" && 1 < 2.5 && false < true', True),
        (GPU, "null == null && !(dyn(null) == 0)", True),
        (GPU, "device.driver.lowerAscii() == 'gpu.kdra.dev'", True),
    ],
)
def test_matches(device: CelDevice, expression: str, expected: bool) -> None:
    assert compile_selector(expression).matches(device, "gpu.kdra.dev/pool/gpu-0") is expected


@pytest.mark.parametrize(
    "expression",
    [
        '"""a\nb""" == "a\\nb"',  # a multi-line string keeps its newline
        "'it\\'s' == \"it's\"",
        'r"\\d+" == "\\\\d+"',  # raw: no escapes
        '"\\u00e9" == "\u00e9" && "\\U0001F600".size() == 1',
        '"\\303\\251".size() == 2',  # octal escapes are code points in strings ...
        'b"\\303\\251".size() == 2 && b"\\xff" == b"\\377"',  # ... and bytes in bytes
        'b"\u00e9".size() == 2',
        '"\\a\\b\\f\\n\\r\\t\\v\\?\\`\\\\".size() == 10',
        "0x1F == 31 && -0x1F == -31 && 1e3 == 1000.0 && 18446744073709551615u > 0u",
    ],
)
def test_literals(expression: str) -> None:
    assert compile_selector(expression).matches(GPU) is True


def test_a_missing_key_message_is_bounded_whatever_the_map() -> None:
    """However large the map (a selector can build one) and however long its keys, the
    message shows a few keys, cut short, and counts the rest; and it is only built when the
    error is reported, not when ``||`` absorbs it."""
    from kdra.dra.cel._rt_core import KEYS_SHOWN, MissingKey

    huge = {f"{'k' * 500}{i}": i for i in range(100_000)}
    message = str(MissingKey("k" * 10_000, huge))
    assert message.startswith("no such key: 'kkk")
    assert f"and {100_000 - KEYS_SHOWN} more" in message
    assert len(message) < 1000
    assert compile_selector(f"{A}.missing == 1 || true").matches(GPU) is True


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        # Issue 41: the message names the missing key, lists the keys there are (sorted) and
        # the nearest one.
        (f'{A}.modle == "a100"',
         "no such key: 'modle' (the map has 'driverVersion', 'healthy', 'index', 'mig', "
         "'model', 'uuid'; did you mean 'model'?)"),
        (f'{A}["index "] == 3', "no such key: 'index ' (the map has "),
        (CATS, "no such key: 'color' (the device has nothing in that domain)"),
        ('{"b": 1, "a": 2}.c == 1', "no such key: 'c' (the map has 'a', 'b')"),
        ("{1: 1}[2] == 1", "no such key: 2 (the map has 1)"),
        ('{"\u202eevil": 1}.x == 1', "the map has '\\u202eevil'"),  # escaped, not raw
        (f"{A}.missing == 1", "no such key: 'missing'"),
        (CATS, "no such key: 'color'"),  # an unknown domain is empty; its names are missing
        (f"true && {A}.missing == 1", "no such key"),
        (f'{A}["missing"] == 1', "no such key"),
        (f"{A}.index", "must evaluate to bool, not int"),
        (f"{A}.driverVersion", "must evaluate to bool, not kubernetes.Semver"),
        ('dyn("a") < 1', "no matching overload for '_<_'"),
        ("dyn(1) + 1.0 == 2.0", "no matching overload for '_+_'"),
        (f"{A}.model > 1", "no matching overload"),
        (f'{A}.driverVersion == "12.4.0"', "'_==_' applied to (kubernetes.Semver, string)"),
        (f'{A}.driverVersion > dyn(semver("1.0.0"))', "no matching overload"),  # no < on semver
        (f'{A}.index < dyn(quantity("1"))', "no matching overload"),
        (f"{A}.model && true", "expected bool, got string"),
        ("1 / 0 == 1", "division by zero"),
        ("9223372036854775807 + 1 > 0", "integer overflow"),
        ("[1][1] == 1", "index out of range"),
        ('semver("1.2") == semver("1.2.0")', "expected MAJOR.MINOR.PATCH"),
        ('sign(quantity("200K")) == 1', "unknown suffix"),
        ('quantity("1e30").asInteger() == 1', "cannot convert value to integer"),
        ('{"a": 1, "a": 2}.a == 1', "repeated key"),
        (f'{A}.all(name, name == "zz" || {A}.missing == 1)', "no such key"),
        (f'"x".matches({A}.model + "(")', "invalid regular expression"),
        ("[1, 2].exists(x, x / 0 == 1)", "division by zero"),
        (f"{A}.model.all(c, true)", "cannot iterate over string"),
    ],
)
def test_runtime_errors_name_expression_and_device(expression: str, message: str) -> None:
    selector = compile_selector(expression)
    with pytest.raises(CelRuntimeError) as caught:
        selector.matches(GPU, "gpu.kdra.dev/pool/gpu-0")
    error = caught.value
    assert message in error.message
    assert error.expression == expression
    assert error.device == "gpu.kdra.dev/pool/gpu-0"
    assert "gpu.kdra.dev/pool/gpu-0" in str(error)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 +", "1:3: syntax error"),
        ('device.attributes["x"', "syntax error"),
        ("device.driver == 'a' &&& true", "1:24: syntax error: unexpected character '&'"),
        ("foo(1)", "1:1: undeclared reference to 'foo'"),
        ("bar == 1", "1:1: undeclared reference to 'bar'"),
        ('device.driver == "x" && y', "1:25: undeclared reference to 'y'"),
        ("device.model == 1", "1:8: undefined field 'model'"),
        (
            "device.driver.reverse() == 'a'",
            "no matching overload for 'reverse' applied to 'string.()'",
        ),
        ("size() == 0", "1:1: found no matching overload for 'size' applied to '()'"),
        (
            'semver("1.0.0", 1).major() == 1',
            "no matching overload for 'semver' applied to '(string, int)'",
        ),
        ("[1].all(1, true)", "1:9: argument must be a simple name"),
        ("[1].all(x)", "1:5: undeclared reference to 'all' (in container '')"),
        ("device.driver", "must evaluate to bool or the unknown type, not string"),
        ("[true]", "must evaluate to bool or the unknown type, not list(bool)"),
        ("null", "must evaluate to bool or the unknown type, not null_type"),
        ('"a" < 1', "found no matching overload for '_<_' applied to '(string, int)'"),
        ("1 + 1.0", "found no matching overload for '_+_' applied to '(int, double)'"),
        (f'{A}.driverVersion > semver("1.0.0")', "'_>_' applied to '(any, kubernetes.Semver)'"),
        (
            f'{C}.memory < quantity("1")',
            "'_<_' applied to '(kubernetes.Quantity, kubernetes.Quantity)'",
        ),
        (f'{C}.memory == "80Gi"', "'_==_' applied to '(kubernetes.Quantity, string)'"),
        ('quantity("1").sign() == 1', "'sign' applied to 'kubernetes.Quantity.()'"),  # global only
        ('"x".matches("(")', "invalid matches argument"),
        ("null == 0", "'_==_' applied to '(null, int)'"),
        ("has(device)", "invalid argument to has()"),
        ("Foo{a: 1}", "message construction is not supported"),
        ("9223372036854775808 > 0", "out of range"),
        ('timestamp("2024-01-01T00:00:00Z") > 0', "timestamps are not supported"),
        ("type(1) == int", "estimated cost 18446744073709552"),  # upstream's estimate too
        ("x.all(x, true)", "undeclared reference to 'x'"),  # a macro variable is local
        ('"\\q" == "q"', "1:1: invalid escape sequence"),
        ('"\\uD800" == ""', "invalid code point"),
    ],
)
def test_compile_errors_have_positions(expression: str, message: str) -> None:
    with pytest.raises(CelCompileError) as caught:
        compile_selector(expression)
    assert message in caught.value.message
    assert caught.value.expression == expression


def test_too_long_expression_is_rejected() -> None:
    fits = "true" + " " * (MAX_EXPRESSION_LENGTH - 4)
    assert compile_selector(fits).matches(GPU) is True
    with pytest.raises(CelCompileError, match="longer than 10240 bytes"):
        compile_selector(fits + " ")
    multibyte = '"' + "\u00e9" * (MAX_EXPRESSION_LENGTH // 2) + '" != ""'  # bytes, not chars
    with pytest.raises(CelCompileError, match="longer than"):
        compile_selector(multibyte)


def test_deep_nesting_is_rejected_but_long_chains_are_fine() -> None:
    with pytest.raises(CelCompileError, match="nested too deeply"):
        compile_selector("(" * 300 + "true" + ")" * 300)
    chain = " || ".join(f'device.driver == "d{i}"' for i in range(300))
    assert compile_selector(chain).matches(GPU) is False


@pytest.mark.parametrize("levels", [1, 10, 20])
def test_nesting_beyond_pythons_block_limit_still_compiles(levels: int) -> None:
    # CPython allows 20 nested loops/try blocks per function; the generator must cope.
    logic = "true"
    for i in range(levels):
        logic = f'(device.driver == "x" {"&&" if i % 2 else "||"} {logic})'
    assert compile_selector(logic).matches(GPU) is (levels == 1)  # "false && ..." above
    loops = "true"
    for i in range(min(levels, 9)):
        loops = f"[{i}].all(x{i}, x{i} == {i} && {loops})"
    assert compile_selector(loops).matches(GPU) is True


BIG = "[" + ", ".join(str(i) for i in range(1000)) + "]"
STRING_DOUBLED_20_TIMES = '"0123456789"'
for _i in range(20):
    STRING_DOUBLED_20_TIMES = f"cel.bind(s{_i}, {STRING_DOUBLED_20_TIMES}, s{_i} + s{_i})"


@pytest.mark.parametrize(
    "expression",
    [
        f"{BIG}.all(x, {BIG}.all(y, x != y || true))",
        f"{BIG}.exists(x, {BIG}.map(y, y * x).size() == 0)",
        "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9].map(a, " * 6 + "a" + ")" * 6 + " == []",  # 10^6 items
        STRING_DOUBLED_20_TIMES + ".size() > 0",  # the estimate tracks string sizes
    ],
)
def test_runaway_expressions_are_rejected_when_compiling(expression: str) -> None:
    started = time.monotonic()
    with pytest.raises(CelCompileError, match=r"estimated cost \d+ exceeds the limit of 1000000"):
        compile_selector(expression)
    assert time.monotonic() - started < 5


def test_runaway_evaluation_is_stopped_by_the_budget() -> None:
    # A device beyond the API limits (2000 attributes, not 32) defeats the estimate:
    # the run-time budget must stop the 4,000,000 iterations.
    crowded = make_device("d", {f"a{i}": ("int", i) for i in range(2000)}, {})
    selector = compile_selector(
        'device.attributes["d"].all(x, device.attributes["d"].all(y, true))'
    )
    assert selector.cost_estimate <= COST_LIMIT
    started = time.monotonic()
    with pytest.raises(CelRuntimeError, match="actual cost limit exceeded"):
        selector.matches(crowded, "d/p/crowded")
    assert time.monotonic() - started < 2
    # The budget is not a CEL error: "|| true" does not absorb it.
    absorbing = compile_selector(
        'device.attributes["d"].all(x, device.attributes["d"].all(y, true)) || true'
    )
    with pytest.raises(CelRuntimeError, match="cost limit exceeded"):
        absorbing.matches(crowded)


def test_list_doubling_is_priced_by_what_it_builds() -> None:
    # cel-go estimates list concatenation at 1 (its lists concatenate lazily), so upstream
    # accepts this; kdra's concatenation copies, so it also costs the size of its result.
    doubling = "[[1, 2]]" + ".map(l, l + l)" * 30 + ".size() > 0"
    with pytest.raises(CelCompileError, match=r"estimated cost 4294968094 exceeds"):
        compile_selector(doubling)
    # Eight doublings fit; the run-time charge follows what is built.
    assert compile_selector("[[1, 2]]" + ".map(l, l + l)" * 8 + ".size() > 0").matches(GPU)


def test_compile_cache_returns_the_same_object() -> None:
    first = compile_selector(CATS)
    assert compile_selector(CATS) is first
    assert isinstance(first, DeviceSelector) and first.expression == CATS
    assert compile_selector(CATS + " ") is not first
    for _ in range(2):  # failures are cached too, but raised afresh
        with pytest.raises(CelCompileError, match="undeclared"):
            compile_selector("nope")


def test_evaluation_leaves_the_device_untouched() -> None:
    before = repr(GPU)
    for expression in (f"{A}.index == 3", f"{A}.missing == 1 || true", f"{A}.all(n, true)"):
        compile_selector(expression).matches(GPU)
    assert repr(GPU) == before
    with pytest.raises(AttributeError):
        GPU.driver = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        GPU.attributes["gpu.kdra.dev"]["model"] = "h100"


@pytest.mark.parametrize(
    ("attributes", "capacity", "field"),
    [
        ({"driverVersion": ("version", "1.2")}, {}, "driverVersion"),
        ({"driverVersion": ("version", 12)}, {}, "driverVersion"),
        ({}, {"memory": "80GB"}, "memory"),
        ({"count": ("int", True)}, {}, "count"),
        ({"count": ("int", 2**63)}, {}, "count"),
        ({"flag": ("bool", 1)}, {}, "flag"),
        ({"name": ("str", "x")}, {}, "name"),
        (
            {"model": ("string", "a"), "gpu.kdra.dev/model": ("string", "b")},
            {},
            "gpu.kdra.dev/model",
        ),
    ],
)
def test_make_device_rejects_bad_values(
    attributes: dict[str, tuple[str, object]], capacity: dict[str, str], field: str
) -> None:
    with pytest.raises(InvalidObject) as caught:
        make_device("gpu.kdra.dev", attributes, capacity)  # type: ignore[arg-type]
    assert caught.value.field == field
