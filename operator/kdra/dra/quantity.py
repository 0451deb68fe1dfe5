"""Kubernetes resource quantities (``resource.Quantity``), exact, in pure Python.

Device capacities (``80Gi``), pod requests (``500m``) and the CEL ``quantity()`` library all
use this one type, so every part of kdra parses, compares and prints quantities the same way
the Kubernetes API server does.

Grammar (what the Go scanner upstream accepts)::

    quantity  ::= [sign] number [suffix]
    number    ::= digits | digits "." [digits] | "." digits
    suffix    ::= "Ki"|"Mi"|"Gi"|"Ti"|"Pi"|"Ei"        (binary SI, powers of 1024)
                | "n"|"u"|"m"|""|"k"|"M"|"G"|"T"|"P"|"E" (decimal SI)
                | ("e"|"E") [sign] digits               (decimal exponent)

Like upstream's scanner, a bare sign, a bare ``.`` or a bare suffix (``Mi``) parses as zero
(the upstream CEL docs say ``quantity('Mi')`` fails, but the Go parser accepts it);
``200K`` (capital K), surrounding whitespace and exponents beyond int32 are errors.

Invariants:

* The value is a :class:`decimal.Decimal` that is *exact*: no float ever takes part, and
  every value is a whole multiple of 10^-9. Parsing rounds finer values *up* (away from
  zero) to the next nano, as upstream does ("if you want some resources, you get some").
* A binary-SI quantity larger than 2^63-1 in magnitude is capped at 2^63-1 when parsed
  (upstream does the same); decimal forms are not capped.
* Equality, hashing and ordering compare values only: ``1Gi == 1024Mi``, ``1k == 1000``.
  The *format* (which suffix family was used) only affects :meth:`__str__`.
* ``str()`` is the canonical form: the largest suffix of the original family that loses no
  precision, no fractional digits (``1.5`` -> ``1500m``, ``1.5Gi`` -> ``1536Mi``). A value
  beyond the largest suffix of its family (10^21 and more, 2^70 and more) is printed in
  exponent form (``1e21``), so every printed quantity parses back to the same value.
* Arithmetic (:meth:`add`, :meth:`sub`, ``+``, ``-``) is exact; a result that would need
  more than 120 significant digits raises :class:`InvalidQuantity` instead of rounding.
"""

from __future__ import annotations

import decimal
import enum
from decimal import Decimal
from typing import Final

__all__ = ["Format", "InvalidQuantity", "Quantity", "is_valid_quantity", "parse_quantity"]


class InvalidQuantity(ValueError):
    """The text is not a quantity, or an arithmetic result is out of range."""


class Format(enum.StrEnum):
    """The suffix family a quantity was written in; it is kept for printing."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


_BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES: Final = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18,
}  # fmt: skip
_DECIMAL_BY_EXPONENT: Final = {exp: sfx for sfx, exp in _DECIMAL_SUFFIXES.items()}
_BINARY_BY_POWER: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
_DIGITS: Final = frozenset("0123456789")
_NANO_EXPONENT: Final = -9
_ZERO: Final = Decimal(0)
_MAX_INT64: Final = 2**63 - 1
_MIN_INT64: Final = -(2**63)
_EXPONENT_RANGE: Final = range(-(2**31) + 1, 2**31)

# Exact arithmetic: Inexact is trapped, so a result never silently loses digits.
_CTX: Final = decimal.Context(
    prec=120,
    rounding=decimal.ROUND_HALF_EVEN,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.Inexact, decimal.InvalidOperation, decimal.Overflow, decimal.DivisionByZero],
)


class Quantity:
    """An exact, immutable Kubernetes quantity."""

    __slots__ = ("_format", "_text", "_value")

    _value: Decimal
    _format: Format
    _text: str | None

    def __init__(self, value: Decimal | int, format: Format = Format.DECIMAL_SI) -> None:
        """Wrap an exact value, rounding it up to a whole nano if finer (use
        :func:`parse_quantity` for text); ``format`` only chooses how :meth:`__str__` prints."""
        dec = Decimal(value)
        if not dec.is_finite():
            raise InvalidQuantity(f"{value!r} is not a finite number")
        exponent = dec.as_tuple().exponent
        if dec and isinstance(exponent, int) and exponent < _NANO_EXPONENT:
            dec = _round_up_to_nano(dec)
        _init(self, dec, format)

    @classmethod
    def _exact(cls, value: Decimal, format: Format) -> Quantity:
        """A quantity from a value already known to be a finite multiple of 10^-9."""
        quantity = object.__new__(cls)
        _init(quantity, value, format)
        return quantity

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    # -- accessors ---------------------------------------------------------------------

    @property
    def value(self) -> Decimal:
        """The exact value."""
        return self._value

    @property
    def format(self) -> Format:
        """The suffix family used when printing."""
        return self._format

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self._value > 0) - (self._value < 0)

    def is_zero(self) -> bool:
        return not self._value

    def as_int64(self) -> int | None:
        """The value as an int when it is a whole number within int64, else ``None``.

        Upstream's ``AsInt64`` also answers "no" for some whole numbers depending on how they
        were written (``1000m``, ``1.0``); kdra answers by value.
        """
        v = self._value
        if v < _MIN_INT64 or v > _MAX_INT64 or v != v.to_integral_value():
            return None
        return int(v)

    def as_approximate_float(self) -> float:
        """The nearest float (``inf`` when out of range)."""
        return float(self._value)

    def int_value(self) -> int:
        """The value rounded up, away from zero, to a whole number (upstream ``Value()``).

        Raises :class:`InvalidQuantity` outside int64 (upstream silently overflows)."""
        return _scaled_ceil(self._value, 0)

    def milli_value(self) -> int:
        """The value in thousandths, rounded up away from zero (upstream ``MilliValue()``).

        Raises :class:`InvalidQuantity` outside int64 (upstream silently overflows)."""
        return _scaled_ceil(self._value, 3)

    # -- comparison --------------------------------------------------------------------

    def compare(self, other: Quantity) -> int:
        """-1, 0 or 1 as ``self`` is smaller than, equal to or larger than ``other``."""
        a, b = self._value, other._value
        return (a > b) - (a < b)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self._value == other._value
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._value)

    def __lt__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self._value < other._value
        return NotImplemented

    def __le__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self._value <= other._value
        return NotImplemented

    def __gt__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self._value > other._value
        return NotImplemented

    def __ge__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self._value >= other._value
        return NotImplemented

    # -- arithmetic --------------------------------------------------------------------

    def add(self, other: Quantity | int) -> Quantity:
        """``self + other``. An int counts as a decimal-exponent quantity (as upstream's CEL
        ``add(int)``); when ``self`` is zero the result takes ``other``'s format."""
        return self._combine(other, negate=False)

    def sub(self, other: Quantity | int) -> Quantity:
        """``self - other``, with the same format rule as :meth:`add`."""
        return self._combine(other, negate=True)

    def __add__(self, other: Quantity | int) -> Quantity:
        if isinstance(other, (Quantity, int)) and not isinstance(other, bool):
            return self.add(other)
        return NotImplemented

    def __sub__(self, other: Quantity | int) -> Quantity:
        if isinstance(other, (Quantity, int)) and not isinstance(other, bool):
            return self.sub(other)
        return NotImplemented

    def __neg__(self) -> Quantity:
        return Quantity._exact(self._value.copy_negate(), self._format)

    def _combine(self, other: Quantity | int, negate: bool) -> Quantity:
        if isinstance(other, Quantity):
            value, fmt = other._value, other._format
        else:
            value, fmt = Decimal(other), Format.DECIMAL_EXPONENT
        try:
            result = _CTX.subtract(self._value, value) if negate else _CTX.add(self._value, value)
        except decimal.DecimalException as exc:
            raise InvalidQuantity(f"{self} {'-' if negate else '+'} {other}: out of range") from exc
        return Quantity._exact(result, fmt if self.is_zero() else self._format)

    # -- text --------------------------------------------------------------------------

    def __str__(self) -> str:
        if self._text is None:
            object.__setattr__(self, "_text", _canonical(self._value, self._format))
        assert self._text is not None
        return self._text

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"


def _init(quantity: Quantity, value: Decimal, format: Format) -> None:
    object.__setattr__(quantity, "_value", value)
    object.__setattr__(quantity, "_format", format)
    object.__setattr__(quantity, "_text", None)


def _scaled_ceil(value: Decimal, shift: int) -> int:
    """``value * 10**shift`` rounded away from zero, as an int64."""
    if not value:
        return 0
    if value.adjusted() + shift > 19:
        raise InvalidQuantity(f"{value} does not fit 64 bits")
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    coefficient = int("".join(map(str, digits)))
    total = exponent + shift
    number: int = coefficient * 10**total if total >= 0 else -(-coefficient // 10**-total)
    number = -number if sign else number
    if not _MIN_INT64 <= number <= _MAX_INT64:
        raise InvalidQuantity(f"{value} does not fit 64 bits")
    return number


def _round_up_to_nano(value: Decimal) -> Decimal:
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    coefficient = int("".join(map(str, digits)) or "0")
    divisor = 10 ** (_NANO_EXPONENT - exponent)
    nanos = -(-coefficient // divisor)  # ceiling of a non-negative number
    return Decimal(f"{'-' if sign else ''}{nanos}E{_NANO_EXPONENT}")


def _split_number(text: str) -> tuple[bool, str, str, str]:
    """Scan ``[sign] digits [. digits] suffix`` the way upstream's scanner does.

    Returns (negative, integer digits, fraction digits, suffix text).
    """
    pos, end = 0, len(text)
    negative = False
    if pos < end and text[pos] in "+-":
        negative = text[pos] == "-"
        pos += 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    integer = text[start:pos]
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        fraction = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos != end:
        raise InvalidQuantity(f"{text!r}: quantities look like 1.5Gi, 500m, 10k or 1e3")
    return negative, integer, fraction, text[suffix_start:]


def _interpret_suffix(suffix: str, text: str) -> tuple[int, int, Format]:
    """(base, exponent, format) of a suffix, as upstream's suffixer."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], Format.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], Format.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        body = suffix[1:]
        digits = body[1:] if body[0] in "+-" else body
        if digits and all(c in _DIGITS for c in digits):
            exponent = int(body)
            # Upstream would silently wrap an exponent beyond int32; refuse it instead.
            if exponent in _EXPONENT_RANGE:
                return 10, exponent, Format.DECIMAL_EXPONENT
    raise InvalidQuantity(f"{text!r}: unknown suffix {suffix!r}")


def parse_quantity(text: str) -> Quantity:
    """Parse Kubernetes quantity text, raising :class:`InvalidQuantity`."""
    if not isinstance(text, str):
        raise InvalidQuantity(f"{text!r}: not a string")
    if not text:
        raise InvalidQuantity("empty quantity")
    negative, integer, fraction, suffix = _split_number(text)
    base, exponent, fmt = _interpret_suffix(suffix, text)
    try:
        coefficient = int((integer + fraction) or "0")
    except ValueError as exc:  # beyond Python's digit limit for int(str): hostile input
        raise InvalidQuantity(f"{text[:40]!r}...: too many digits") from exc
    scale = -len(fraction)
    if base == 10:
        scale += exponent
    else:
        coefficient <<= exponent
    if coefficient == 0:
        return Quantity._exact(_ZERO, fmt)
    value = Decimal(f"{'-' if negative else ''}{coefficient}E{scale}")  # exact
    if scale < _NANO_EXPONENT:
        value = _round_up_to_nano(value)
    if fmt is Format.BINARY_SI:
        if abs(value) > _MAX_INT64:
            value = Decimal(-_MAX_INT64 if negative else _MAX_INT64)
        elif abs(value) < 1:
            fmt = Format.DECIMAL_SI
    return Quantity._exact(value, fmt)


def is_valid_quantity(text: str) -> bool:
    """Whether :func:`parse_quantity` accepts ``text``."""
    try:
        parse_quantity(text)
    except InvalidQuantity:
        return False
    return True


def _canonical(value: Decimal, fmt: Format) -> str:
    if not value:
        return "0"
    if fmt is Format.BINARY_SI:
        text = _canonical_binary(value)
        if text is not None:
            return text
        # Below 1024, or fractional: decimal SI; beyond Ei: exponent form.
        fmt = Format.DECIMAL_SI if value.adjusted() <= 18 else Format.DECIMAL_EXPONENT
    sign, digit_tuple, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    exponent += len(digit_tuple) - len(digits)
    while exponent % 3:
        digits += "0"
        exponent -= 1
    suffix = _DECIMAL_BY_EXPONENT.get(exponent) if fmt is Format.DECIMAL_SI else None
    if suffix is None:
        suffix = f"e{exponent}" if exponent else ""
    return ("-" if sign else "") + digits + suffix


def _canonical_binary(value: Decimal) -> str | None:
    """Base-1024 form, or ``None`` when the value must be printed as decimal SI."""
    if -1024 < value < 1024 or value.adjusted() > 40 or value != value.to_integral_value():
        return None
    number = int(value)
    power = 0
    while number % 1024 == 0:
        number //= 1024
        power += 1
    if power >= len(_BINARY_BY_POWER):
        return None
    return f"{number}{_BINARY_BY_POWER[power]}"
