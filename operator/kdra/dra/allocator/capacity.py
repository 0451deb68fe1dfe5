"""Consumable capacity (KEP-5075): what a request consumes of a device's capacities, and
whether the device still has it.

A device's capacity ``{name: {value, requestPolicy}}`` and a request's ``capacity.requests``
(``{memory: 20Gi}``) meet here, as in upstream's allocator:

- every capacity of the device is consumed, whether the request names it or not: the
  request's amount rounded up by the capacity's ``requestPolicy`` — ``validRange`` (below
  ``min`` → ``min``; with ``step``, up to ``min`` + a whole number of steps), else
  ``validValues`` (the smallest valid value ≥ the amount) — or, when the request does not
  name it, the policy's ``default``, else the whole value;
- the device cannot serve the request when the request names a capacity the device lacks,
  when the rounded amount still breaks the policy (above ``max``, off the step grid, above
  every valid value), or when what is already consumed plus this exceeds the value;
- names: an unqualified request name means the device driver's domain (``memory`` =
  ``gpu.kdra.dev/memory`` on a ``gpu.kdra.dev`` device), and the other way round; usage is
  keyed by the name as the *device* publishes it (that is the name results carry in
  ``consumedCapacity``).

A device without ``allowMultipleAllocations`` is checked the same way (upstream's
``CmpRequestOverCapacity`` makes no difference either), but its results carry no
``consumedCapacity``: it is allocated whole.

Amounts are bounded: a counter, capacity, request-policy value or capacity request whose
magnitude exceeds :data:`MAX_AMOUNT` (2^63, the int64 range upstream's arithmetic works in)
is refused where it is parsed (:func:`amount`), so that every sum, difference and
division the allocator does on them is exact in :data:`EXACT`.

Invariants:
- Pure arithmetic on exact :class:`~decimal.Decimal` values in :data:`EXACT` (60 digits, every
  signal trapped): with bounded amounts at nano resolution no operation here can round or
  signal; nothing here rounds down.
- :func:`demand` never returns an amount that breaks the device's policy or exceeds its
  value; None means "this device cannot serve this request" (a soft no, the search moves on).
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

from kdra.dra.models import Device
from kdra.dra.quantity import Format, InvalidQuantity, Quantity, parse_quantity

__all__ = ["EXACT", "MAX_AMOUNT", "CapacitySpec", "RequestedCapacity", "amount", "demand",
           "device_capacities", "fmt", "parse_requests", "round_up"]

MAX_AMOUNT: Final = Decimal(2) ** 63
"""The largest magnitude of an amount the allocator computes with (see the module doc)."""

EXACT: Final = decimal.Context(
    prec=60, rounding=decimal.ROUND_HALF_EVEN,
    traps=[decimal.Inexact, decimal.InvalidOperation, decimal.Overflow, decimal.DivisionByZero,
           decimal.Underflow, decimal.Subnormal, decimal.Clamped])
"""The context of the allocator's quantity arithmetic: bounded amounts (at most 2^63, in
nanos: 28 digits) add, subtract and divide in it without rounding."""

_ZERO: Final = Decimal(0)


def amount(text: str) -> Decimal:
    """A quantity's value for the allocator's arithmetic. Raises InvalidQuantity for text
    that is not a quantity, and for a magnitude beyond :data:`MAX_AMOUNT`."""
    value = parse_quantity(text).value
    if abs(value) > MAX_AMOUNT:
        raise InvalidQuantity(f"{text!r}: beyond the allocator's range (at most 2^63)")
    return value


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    """One capacity of a device, parsed."""

    name: str
    """As the device publishes it (``memory`` or ``gpu.kdra.dev/memory``)."""
    value: Decimal
    format: Format
    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    step: Decimal | None = None

    @property
    def has_policy(self) -> bool:
        return (self.default is not None or bool(self.valid_values)
                or self.minimum is not None)


RequestedCapacity = tuple[tuple[str, Decimal], ...]
"""A request's ``capacity.requests``: ``(name, amount)`` pairs, names as written."""


def _dec(text: str | None) -> Decimal | None:
    return None if text is None else amount(text)


def device_capacities(device: Device) -> tuple[CapacitySpec, ...]:
    """The device's capacities, parsed. Raises InvalidQuantity for a malformed value or one
    out of range (:func:`amount`)."""
    specs = []
    for name, capacity in device.capacity.items():
        quantity = parse_quantity(capacity.value)
        value = amount(capacity.value)
        policy = capacity.request_policy
        spec = CapacitySpec(name, value, quantity.format)
        if policy is not None:
            valid_range = policy.valid_range
            spec = CapacitySpec(
                name, value, quantity.format,
                default=_dec(policy.default),
                valid_values=tuple(sorted(amount(v) for v in policy.valid_values)),
                minimum=_dec(valid_range.min) if valid_range else None,
                maximum=_dec(valid_range.max) if valid_range else None,
                step=_dec(valid_range.step) if valid_range else None,
            )
        specs.append(spec)
    return tuple(specs)


def parse_requests(requests: Mapping[str, str] | None) -> RequestedCapacity:
    """A request's ``capacity.requests`` parsed. Raises ValueError naming the bad entry (not
    a quantity, beyond 2^63, or negative)."""
    parsed = []
    for name, text in sorted((requests or {}).items()):
        try:
            value = amount(str(text))
        except InvalidQuantity as exc:
            raise ValueError(f"capacity.requests[{name}]: {str(text)[:64]!r} is not a quantity "
                             "(or beyond 2^63)") from exc
        if value < 0:
            raise ValueError(f"capacity.requests[{name}]: {text} is negative")
        parsed.append((name, value))
    return tuple(parsed)


def _resolve(name: str, driver: str, specs: tuple[CapacitySpec, ...]) -> CapacitySpec | None:
    """The device capacity a request name refers to (see the module doc)."""
    exact = next((s for s in specs if s.name == name), None)
    if exact is not None:
        return exact
    domain, _, bare = name.partition("/")
    if bare:
        if domain != driver:
            return None
        return next((s for s in specs if s.name == bare), None)
    return next((s for s in specs if s.name == f"{driver}/{name}"), None)


def round_up(asked: Decimal | None, spec: CapacitySpec) -> Decimal:
    """What a request consumes of ``spec``: ``asked`` rounded up by the policy, or the
    default / whole value when not asked."""
    if asked is None:
        return spec.default if spec.default is not None else spec.value
    if spec.minimum is not None:
        if asked < spec.minimum:
            return spec.minimum
        if spec.step is None or spec.step <= 0:
            return asked
        whole, rest = EXACT.divmod(EXACT.subtract(asked, spec.minimum), spec.step)  # ≥ 0
        return EXACT.add(spec.minimum, EXACT.multiply(whole + (1 if rest else 0), spec.step))
    if spec.valid_values:
        return next((v for v in spec.valid_values if v >= asked), asked)
    return asked


def _violates(amount: Decimal, spec: CapacitySpec) -> bool:
    if spec.default is not None and amount == spec.default:
        return False
    if spec.minimum is not None:
        if spec.maximum is not None and amount > spec.maximum:
            return True
        if spec.step is not None and spec.step > 0:
            return EXACT.remainder(EXACT.subtract(amount, spec.minimum), spec.step) != 0
        return False
    if spec.valid_values:
        return amount not in spec.valid_values
    return False


def demand(requested: RequestedCapacity, driver: str, specs: tuple[CapacitySpec, ...],
           used: Mapping[str, Decimal] | None) -> dict[str, Decimal] | None:
    """What serving the request takes from the device: ``{capacity name: amount}`` for every
    capacity of the device (what a share of a device that allows multiple allocations
    records as its ``consumedCapacity``), or None when the device cannot serve it (see the
    module doc). ``used``: what other allocations (and this search's earlier picks) already
    consume of the device."""
    asked: dict[str, Decimal] = {}
    for name, value in requested:
        spec = _resolve(name, driver, specs)
        if spec is None or spec.name in asked:
            return None  # a capacity the device lacks (or named twice)
        asked[spec.name] = value
    consumed: dict[str, Decimal] = {}
    for spec in specs:
        rounded = round_up(asked.get(spec.name), spec)
        if rounded < 0 or _violates(rounded, spec):
            return None
        already = used.get(spec.name, _ZERO) if used else _ZERO
        if EXACT.add(already, rounded) > spec.value:
            return None
        consumed[spec.name] = rounded
    return consumed


def fmt(amount: Decimal, spec_format: Format) -> str:
    """An amount as a quantity string in the capacity's suffix family (``20Gi``)."""
    return str(Quantity(amount, spec_format))
