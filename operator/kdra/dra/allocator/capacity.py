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

A device without ``allowMultipleAllocations`` is still filtered by capacity requests (it must
have that much), but its results carry no ``consumedCapacity``: it is allocated whole.

Invariants:
- Pure arithmetic on exact :class:`~decimal.Decimal` values; nothing here rounds down.
- :func:`demand` never returns an amount that breaks the device's policy or exceeds its
  value; None means "this device cannot serve this request" (a soft no, the search moves on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from kdra.dra.models import Device
from kdra.dra.quantity import Format, InvalidQuantity, Quantity, parse_quantity

__all__ = ["CapacitySpec", "RequestedCapacity", "demand", "device_capacities", "fmt",
           "parse_requests", "round_up"]


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
    return None if text is None else parse_quantity(text).value


def device_capacities(device: Device) -> tuple[CapacitySpec, ...]:
    """The device's capacities, parsed. Raises InvalidQuantity for a malformed value."""
    specs = []
    for name, capacity in device.capacity.items():
        quantity = parse_quantity(capacity.value)
        policy = capacity.request_policy
        spec = CapacitySpec(name, quantity.value, quantity.format)
        if policy is not None:
            valid_range = policy.valid_range
            spec = CapacitySpec(
                name, quantity.value, quantity.format,
                default=_dec(policy.default),
                valid_values=tuple(sorted(parse_quantity(v).value
                                          for v in policy.valid_values)),
                minimum=_dec(valid_range.min) if valid_range else None,
                maximum=_dec(valid_range.max) if valid_range else None,
                step=_dec(valid_range.step) if valid_range else None,
            )
        specs.append(spec)
    return tuple(specs)


def parse_requests(requests: Mapping[str, str] | None) -> RequestedCapacity:
    """A request's ``capacity.requests`` parsed. Raises ValueError naming the bad entry (not
    a quantity, or negative)."""
    parsed = []
    for name, text in sorted((requests or {}).items()):
        try:
            amount = parse_quantity(str(text)).value
        except InvalidQuantity as exc:
            raise ValueError(f"capacity.requests[{name}]: {text!r} is not a quantity") from exc
        if amount < 0:
            raise ValueError(f"capacity.requests[{name}]: {text} is negative")
        parsed.append((name, amount))
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
        whole, rest = divmod(asked - spec.minimum, spec.step)  # both ≥ 0: exact floor
        return spec.minimum + (whole + (1 if rest else 0)) * spec.step
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
            return (amount - spec.minimum) % spec.step != 0
        return False
    if spec.valid_values:
        return amount not in spec.valid_values
    return False


def demand(requested: RequestedCapacity, driver: str, specs: tuple[CapacitySpec, ...],
           used: Mapping[str, Decimal] | None, shared: bool) -> dict[str, Decimal] | None:
    """What serving the request takes from the device: ``{capacity name: amount}`` (every
    capacity for a ``shared`` device — allowMultipleAllocations —, the asked ones otherwise),
    or None when the device cannot serve it (see the module doc). ``used``: what other
    allocations (and this search's earlier picks) already consume of a shared device."""
    asked: dict[str, Decimal] = {}
    for name, amount in requested:
        spec = _resolve(name, driver, specs)
        if spec is None or spec.name in asked:
            return None  # a capacity the device lacks (or named twice)
        asked[spec.name] = amount
    if not shared:
        for spec in specs:
            wanted = asked.get(spec.name)
            if wanted is not None and wanted > spec.value:
                return None
        return asked
    consumed: dict[str, Decimal] = {}
    for spec in specs:
        rounded = round_up(asked.get(spec.name), spec)
        if rounded < 0 or _violates(rounded, spec):
            return None
        already = used.get(spec.name, Decimal(0)) if used else Decimal(0)
        if already + rounded > spec.value:
            return None
        consumed[spec.name] = rounded
    return consumed


def fmt(amount: Decimal, spec_format: Format) -> str:
    """An amount as a quantity string in the capacity's suffix family (``20Gi``)."""
    return str(Quantity(amount, spec_format))
