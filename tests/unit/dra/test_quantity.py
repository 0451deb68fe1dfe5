"""Kubernetes quantities: parsing, canonical text, comparison and exact arithmetic.

Expected values follow the upstream apimachinery tables (resource/quantity_test.go).
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kdra.dra.quantity import (
    Format,
    InvalidQuantity,
    Quantity,
    is_valid_quantity,
    parse_quantity,
)

Q = parse_quantity


@pytest.mark.parametrize(
    ("text", "value", "canonical", "fmt"),
    [
        ("0", "0", "0", Format.DECIMAL_SI),
        ("0Ki", "0", "0", Format.BINARY_SI),
        ("1", "1", "1", Format.DECIMAL_SI),
        ("1Ki", "1024", "1Ki", Format.BINARY_SI),
        ("1024Mi", "1073741824", "1Gi", Format.BINARY_SI),
        ("80Gi", "85899345920", "80Gi", Format.BINARY_SI),
        ("1.5Gi", "1610612736", "1536Mi", Format.BINARY_SI),
        ("0.5Mi", "524288", "512Ki", Format.BINARY_SI),
        ("100.035Ki", "102435.84", "102435840m", Format.BINARY_SI),
        (".001Ki", "1.024", "1024m", Format.BINARY_SI),
        ("0.000000000001Ki", "0.000000002", "2n", Format.DECIMAL_SI),  # rounds up, to decimal
        ("9Ei", str(2**63 - 1), str(2**63 - 1), Format.BINARY_SI),  # capped at int64
        ("5n", "0.000000005", "5n", Format.DECIMAL_SI),
        ("500m", "0.5", "500m", Format.DECIMAL_SI),
        ("1.5", "1.5", "1500m", Format.DECIMAL_SI),
        ("50k", "50000", "50k", Format.DECIMAL_SI),
        ("2000", "2000", "2k", Format.DECIMAL_SI),
        ("100.035k", "100035", "100035", Format.DECIMAL_SI),
        ("10.035M", "10035000", "10035k", Format.DECIMAL_SI),
        ("0.0005k", "0.5", "500m", Format.DECIMAL_SI),
        ("1E", "1E18", "1E", Format.DECIMAL_SI),
        ("12E", "12E18", "12E", Format.DECIMAL_SI),
        ("1000E", "1E21", "1e21", Format.DECIMAL_SI),  # beyond E: exponent form
        ("1e3", "1000", "1e3", Format.DECIMAL_EXPONENT),
        ("1E-3", "0.001", "1e-3", Format.DECIMAL_EXPONENT),
        ("1.3E+6", "1300000", "1300e3", Format.DECIMAL_EXPONENT),
        ("0.5e-1", "0.05", "50e-3", Format.DECIMAL_EXPONENT),
        ("3.001n", "0.000000004", "4n", Format.DECIMAL_SI),  # sub-nano rounds up
        ("1.1E-9", "0.000000002", "2e-9", Format.DECIMAL_EXPONENT),
        ("0.00000012345", "0.000000124", "124n", Format.DECIMAL_SI),
        ("-1.5Gi", "-1610612736", "-1536Mi", Format.BINARY_SI),
        ("+1k", "1000", "1k", Format.DECIMAL_SI),
        ("1.", "1", "1", Format.DECIMAL_SI),
        ("1.G", "1E9", "1G", Format.DECIMAL_SI),
        (".", "0", "0", Format.DECIMAL_SI),  # as upstream's scanner
        ("Mi", "0", "0", Format.BINARY_SI),  # a bare suffix, too
    ],
)
def test_parse_and_canonical_form(text: str, value: str, canonical: str, fmt: Format) -> None:
    quantity = Q(text)
    assert quantity.value == Decimal(value)
    assert str(quantity) == canonical
    assert quantity.format is fmt
    assert Q(canonical) == quantity  # the canonical text reads back to the same value
    assert str(Q(canonical)) == canonical


@pytest.mark.parametrize(
    "text",
    [
        "",
        " 1",
        "1 ",
        "1.1.M",
        "1+1.0M",
        "0.1mi",
        "0.1am",
        "aoeu",
        "Three",
        ".5i",
        "1i",
        "-3.01i",
        "-3.01e-",
        "1e",
        "200K",  # decimal kilo is a lower-case k
        "10Mo",
        "10Mm",
        "1e4294967297",  # exponent beyond int32
        "1,5G",
        "9" * 100_000,  # beyond int()'s digit limit: InvalidQuantity, not ValueError
        "0." + "0" * 5000 + "1Gi",
    ],
)
def test_rejects_invalid_text(text: str) -> None:
    with pytest.raises(InvalidQuantity):
        Q(text)
    assert not is_valid_quantity(text)


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        ("1Gi", "1024Mi", 0),
        ("1k", "1000", 0),
        ("500m", "1", -1),
        ("200M", "0.2G", 0),
        ("50M", "50Mi", -1),
        ("50Mi", "50M", 1),
        ("10000T", "100Gi", 1),
        ("-1", "0", -1),
        ("1e3", "1k", 0),
        ("1n", "0", 1),
    ],
)
def test_comparisons_across_suffixes(left: str, right: str, expected: int) -> None:
    a, b = Q(left), Q(right)
    assert a.compare(b) == expected
    assert b.compare(a) == -expected
    assert (a == b) is (expected == 0)
    assert (a < b) is (expected < 0)
    assert (a > b) is (expected > 0)
    if expected == 0:
        assert hash(a) == hash(b)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (lambda: Q("50k").add(Q("20")), "50020"),
        (lambda: Q("50k").add(20), "50020"),
        (lambda: Q("50k").sub(Q("20k")), "30k"),
        (lambda: Q("50k").sub(20000), "30k"),
        (lambda: Q("50k").add(20).sub(Q("100k")).sub(-50000), "20"),
        (lambda: Q("100m") + Q("100m"), "200m"),
        (lambda: Q("1Gi") - Q("512Mi"), "512Mi"),
        (lambda: Q("0") + Q("1Gi"), "1Gi"),  # a zero takes the other's format
        (lambda: Q("1Gi") + Q("0"), "1Gi"),
        (lambda: Q("0") - Q("100m"), "-100m"),
        (lambda: -Q("9.01"), "-9010m"),
    ],
)
def test_arithmetic_is_exact(expression: object, expected: str) -> None:
    result = expression()  # type: ignore[operator]
    assert isinstance(result, Quantity)
    assert str(result) == expected


def test_arithmetic_out_of_range_raises() -> None:
    with pytest.raises(InvalidQuantity):
        Q("1e999999999").add(1)


@pytest.mark.parametrize(
    ("text", "as_int"),
    [
        ("50k", 50000),
        ("1Gi", 2**30),
        ("-9223372036854775808", -(2**63)),
        ("9223372036854775807", 2**63 - 1),
        ("9223372036854775808", None),
        ("9999999999999999999999999999999999999G", None),
        ("0.5", None),
        ("1000m", 1),  # by value (upstream answers by representation here)
    ],
)
def test_as_int64(text: str, as_int: int | None) -> None:
    assert Q(text).as_int64() == as_int


@pytest.mark.parametrize(
    ("text", "whole", "milli"),
    [("9.01", 10, 9010), ("-9.01", -10, -9010), ("1n", 1, 1), ("1.5Gi", 1610612736, 1610612736000)],
)
def test_rounding_up_away_from_zero(text: str, whole: int, milli: int) -> None:
    assert Q(text).int_value() == whole
    assert Q(text).milli_value() == milli


def test_float_sign_and_constructor() -> None:
    assert Q("50.703k").as_approximate_float() == 50703.0
    assert Q("1e400").as_approximate_float() == float("inf")
    assert (Q("-1").sign(), Q("0").sign(), Q("1m").sign()) == (-1, 0, 1)
    assert str(Quantity(Decimal("1E-12"))) == "1n"  # rounded up to a whole nano
    assert str(Quantity(2048, Format.BINARY_SI)) == "2Ki"
    with pytest.raises(AttributeError):
        Q("1").x = 1  # type: ignore[attr-defined]


SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@given(
    mantissa=st.integers(min_value=-(10**15), max_value=10**15),
    fraction=st.integers(min_value=0, max_value=999),
    suffix=st.sampled_from([*SUFFIXES, "e3", "e-6", "E9"]),
)
def test_canonical_text_round_trips(mantissa: int, fraction: int, suffix: str) -> None:
    quantity = Q(f"{mantissa}.{fraction:03d}{suffix}")
    printed = str(quantity)
    assert Q(printed) == quantity
    assert str(Q(printed)) == printed
