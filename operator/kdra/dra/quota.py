"""Device quota (kind ``DeviceQuota``, namespaced): the arithmetic, pure — shared by the
binder, which enforces it (:mod:`kdra.operator.scheduler.quota`), the admission webhook and
``kubectl kdra why``, which applies the binder's check (issue 41). The status kdra writes on a
DeviceQuota is :mod:`kdra.operator.core.quota`'s.

A DeviceQuota limits, per device class, what the allocated claims of its namespace may hold
together: a number of devices, sums of device capacity (``memory``) and of consumed counters.
Every DeviceQuota of a namespace applies (as ResourceQuota objects do): an allocation must fit
all of them.

What a claim is charged (:func:`claim_charge`): for each result of its allocation that holds a
device (admin-access results hold none, as in :func:`~kdra.dra.allocator.devices_in_use`),
under the class of the request (or sub-request) it answers: one device, the device's capacity
values (or the result's ``consumedCapacity`` when the driver shares the device), and the
counters the device consumes. Capacity and counter names are as the device publishes them, the
driver's own domain left off (``memory``, never ``gpu.kdra.dev/memory``).

Invariants:
- A claim is charged once, however many pods reserve it: charges are kept per claim, never
  per pod (:class:`Ledger`).
- An allocation decided but not yet written (in flight) counts: :meth:`Ledger.assume` charges
  it until :meth:`Ledger.forget`; while a claim has both an assumed and an observed charge, the
  assumed one counts (they are the same allocation, seen twice), never both.
- :meth:`Ledger.used` of a namespace always equals the sum of the counting charges of its
  claims (kept incrementally; the tables in tests/unit/operator/test_quota.py check it).
- :func:`parse_quota` is total: any JSON gives a :class:`DeviceQuota` or InvalidObject naming
  the field (the CRD schema rejects the same at admission; this is the second line).
- A check only looks at the classes and resources a request asks for: a namespace already
  over a lowered quota keeps its allocations, and only new ones that add to an exceeded
  resource are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kdra.dra.errors import InvalidObject
from kdra.dra.models import AllocationResult, ResourceClaim
from kdra.dra.models.base import parse
from kdra.dra.quantity import InvalidQuantity, Quantity, parse_quantity
from kdra.dra.quota_kind import KIND, QuotaObject

QUOTA_REASON = "DeviceQuotaExceeded"
"""The ``PodScheduled=False`` reason of a pod whose allocation a DeviceQuota refuses (the
binder writes it; ``kubectl kdra why`` applies the same check)."""
DEVICES = "devices"
"""The resource name of the device count in messages, metrics and the status."""
ZERO = Quantity(0)


class DeviceFacts(NamedTuple):
    """What a device is charged beyond itself: its capacity values and consumed counters,
    by name (driver domain left off)."""

    capacity: Mapping[str, Quantity]
    counters: Mapping[str, Quantity]


NO_FACTS = DeviceFacts({}, {})

# --------------------------------------------------------------------------- usage


@dataclass(frozen=True)
class Usage:
    """Devices, capacity sums and counter sums of one device class."""

    devices: int = 0
    capacity: Mapping[str, Quantity] = field(default_factory=dict)
    counters: Mapping[str, Quantity] = field(default_factory=dict)

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.devices + other.devices, _sum(self.capacity, other.capacity, 1),
                     _sum(self.counters, other.counters, 1))

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.devices - other.devices, _sum(self.capacity, other.capacity, -1),
                     _sum(self.counters, other.counters, -1))

    def amount(self, resource: str) -> Quantity:
        """``devices``, ``capacity/<name>`` or ``counters/<name>`` (zero when absent)."""
        if resource == DEVICES:
            return Quantity(self.devices)
        kind, _, name = resource.partition("/")
        values = self.capacity if kind == "capacity" else self.counters
        return values.get(name, ZERO)

    @property
    def empty(self) -> bool:
        return not self.devices and all(v.is_zero() for v in self.capacity.values()) and \
            all(v.is_zero() for v in self.counters.values())


def _sum(a: Mapping[str, Quantity], b: Mapping[str, Quantity], sign: int) -> dict[str, Quantity]:
    out = dict(a)
    for name, value in b.items():
        total = out.get(name, ZERO) + value if sign > 0 else out.get(name, ZERO) - value
        if total.is_zero():
            out.pop(name, None)
        else:
            out[name] = total
    return out


Charge = Mapping[str, Usage]
"""Device class → what a claim (or a pod's claims, or a namespace) holds of it."""


def add_charges(a: Charge, b: Charge, sign: int = 1) -> dict[str, Usage]:
    """``a + b`` (``sign`` -1: ``a - b``), classes whose usage becomes empty dropped."""
    out = dict(a)
    for class_name, usage in b.items():
        before = out.get(class_name, Usage())
        after = before + usage if sign > 0 else before - usage
        if after.empty:
            out.pop(class_name, None)
        else:
            out[class_name] = after
    return out


def _bare(name: str, driver: str) -> str:
    domain, slash, bare = name.partition("/")
    return bare if slash and domain == driver else name


def claim_charge(claim: ResourceClaim, allocation: AllocationResult | None,
                 facts: Callable[[str, str, str], DeviceFacts | None]) -> dict[str, Usage]:
    """What ``allocation`` (default: the claim's own) charges the claim's namespace, by class.

    ``facts(driver, pool, device)`` gives a device's capacity and counters (None: unknown, the
    device is then charged as a device only)."""
    allocation = allocation if allocation is not None else claim.status.allocation
    if allocation is None:
        return {}
    classes: dict[str, str] = {}
    admin: set[str] = set()
    for request in claim.spec.devices.requests:
        if request.admin_access:
            admin.add(request.name)
        for name, asked in request.alternatives():
            classes[name] = asked.device_class_name
    charge: dict[str, Usage] = {}
    for result in allocation.devices.results:
        if result.admin_access or result.request.split("/", 1)[0] in admin:
            continue
        class_name = classes.get(result.request)
        if class_name is None:
            continue  # not a request of this claim (the claim's spec rules this out)
        known = facts(result.driver, result.pool, result.device) or NO_FACTS
        capacity: Mapping[str, Quantity] = known.capacity
        if result.consumed_capacity:
            capacity = {}
            for name, text in result.consumed_capacity.items():
                try:
                    capacity = _sum(capacity, {_bare(name, result.driver): parse_quantity(text)}, 1)
                except InvalidQuantity:
                    continue  # the claim's schema rules this out; charge what can be read
        one = Usage(1, dict(capacity), dict(known.counters))
        charge[class_name] = charge.get(class_name, Usage()) + one
    return charge


def device_facts(driver: str, capacity: Mapping[str, Any],
                 consumes_counters: Iterable[Any]) -> DeviceFacts:
    """A device's :class:`DeviceFacts` from its v1 slice entry's ``capacity`` (name →
    ``{value}``) and ``consumesCounters`` (``[{counterSet, counters: {name: {value}}}]``), raw
    JSON; values that are not quantities are left out (the slice schema rules them out)."""
    caps: dict[str, Quantity] = {}
    for name, entry in capacity.items():
        value = _quantity(entry)
        if value is not None:
            caps = _sum(caps, {_bare(str(name), driver): value}, 1)
    counters: dict[str, Quantity] = {}
    for consumption in consumes_counters:
        entries = consumption.get("counters") if isinstance(consumption, Mapping) else None
        for name, entry in (entries.items() if isinstance(entries, Mapping) else ()):
            value = _quantity(entry)
            if value is not None:
                counters = _sum(counters, {_bare(str(name), driver): value}, 1)
    return DeviceFacts(caps, counters)


def entry_facts(driver: str, entry: Mapping[str, Any]) -> DeviceFacts:
    """The :class:`DeviceFacts` of one device of a v1 slice (``spec.devices[]``, raw JSON)."""
    capacity = entry.get("capacity")
    counters = entry.get("consumesCounters")
    return device_facts(driver, capacity if isinstance(capacity, Mapping) else {},
                        counters if isinstance(counters, list) else ())


def slice_facts(slices: Iterable[Mapping[str, Any]]
                ) -> Callable[[str, str, str], DeviceFacts | None]:
    """``facts(driver, pool, device)`` over raw v1 slices (what ``kubectl kdra why`` reads;
    the binder looks them up in its slice cache instead)."""
    found: dict[tuple[str, str, str], DeviceFacts] = {}
    for obj in slices:
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        if not isinstance(spec, Mapping):
            continue
        driver = str(spec.get("driver") or "")
        pool = spec.get("pool")
        name = str(pool.get("name") or "") if isinstance(pool, Mapping) else ""
        for entry in spec.get("devices") or ():
            if isinstance(entry, Mapping):
                found[(driver, name, str(entry.get("name")))] = entry_facts(driver, entry)
    return lambda driver, pool, device: found.get((driver, pool, device))


def _quantity(entry: Any) -> Quantity | None:
    text = entry.get("value") if isinstance(entry, Mapping) else None
    if not isinstance(text, str):
        return None
    try:
        return parse_quantity(text)
    except InvalidQuantity:
        return None


class Ledger:
    """Charges per claim (``namespace/name``) and their sums per namespace. See the module doc."""

    def __init__(self) -> None:
        self._held: dict[str, Charge] = {}
        self._assumed: dict[str, Charge] = {}
        self._used: dict[str, dict[str, Usage]] = {}

    def _counting(self, key: str) -> Charge:
        assumed = self._assumed.get(key)
        return assumed if assumed is not None else self._held.get(key, {})

    def _set(self, table: dict[str, Charge], key: str, charge: Charge) -> bool:
        """Replace ``table[key]``; whether the namespace's usage changed."""
        before = self._counting(key)
        if charge:
            table[key] = charge
        else:
            table.pop(key, None)
        after = self._counting(key)
        if before == after:
            return False
        namespace = key.split("/", 1)[0]
        used = add_charges(add_charges(self._used.get(namespace, {}), before, -1), after)
        if used:
            self._used[namespace] = used
        else:
            self._used.pop(namespace, None)
        return True

    def observe(self, key: str, charge: Charge) -> bool:
        """The claim as the API shows it charges ``charge`` (empty: not allocated)."""
        return self._set(self._held, key, charge)

    def remove(self, key: str) -> bool:
        """The claim was deleted."""
        changed = self._set(self._held, key, {})
        return self._set(self._assumed, key, {}) or changed

    def assume(self, key: str, charge: Charge) -> bool:
        """An allocation of the claim is in flight (decided, being written)."""
        return self._set(self._assumed, key, charge)

    def forget(self, key: str) -> bool:
        """The in-flight allocation was written (and observed) or abandoned."""
        return self._set(self._assumed, key, {})

    def used(self, namespace: str) -> Mapping[str, Usage]:
        return self._used.get(namespace, {})

    def charge(self, key: str) -> Charge:
        """What the claim ``key`` counts for now (assumed, else observed; empty: nothing)."""
        return self._counting(key)

    def in_flight(self, namespace: str) -> int:
        prefix = namespace + "/"
        return sum(1 for key in self._assumed if key.startswith(prefix))

    def claims(self, namespace: str) -> int:
        """Claims of the namespace with a counting charge."""
        prefix = namespace + "/"
        return sum(1 for key in {*self._held, *self._assumed} if key.startswith(prefix))


# --------------------------------------------------------------------------- quotas


@dataclass(frozen=True)
class Limit:
    """The hard limits of one class: resource (``devices``, ``capacity/<name>``,
    ``counters/<name>``) → quantity."""

    device_class: str
    hard: Mapping[str, Quantity]


@dataclass(frozen=True)
class DeviceQuota:
    namespace: str
    name: str
    limits: tuple[Limit, ...]
    generation: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def limit(self, device_class: str) -> Limit | None:
        return next((lim for lim in self.limits if lim.device_class == device_class), None)


def parse_quota(obj: Mapping[str, Any]) -> DeviceQuota:
    """A DeviceQuota object as a :class:`DeviceQuota` (InvalidObject when malformed)."""
    quota = parse(QuotaObject, obj)
    where = f"{KIND} {quota.metadata.namespace}/{quota.metadata.name}"
    seen: set[str] = set()
    limits = []
    for i, limit in enumerate(quota.spec.limits):
        if limit.device_class_name in seen:
            raise InvalidObject(f"spec.limits[{i}].deviceClassName",
                                f"{limit.device_class_name!r} is limited twice", where)
        seen.add(limit.device_class_name)
        hard: dict[str, Quantity] = {}
        if limit.devices is not None:
            hard[DEVICES] = Quantity(limit.devices)
        for kind, values in (("capacity", limit.capacity), ("counters", limit.counters)):
            for name, text in values.items():
                try:
                    value = parse_quantity(str(text))
                except InvalidQuantity as exc:
                    raise InvalidObject(f"spec.limits[{i}].{kind}[{name}]", str(exc),
                                        where) from exc
                if value.sign() < 0:
                    raise InvalidObject(f"spec.limits[{i}].{kind}[{name}]",
                                        "must not be negative", where)
                hard[f"{kind}/{name}"] = value
        limits.append(Limit(limit.device_class_name, hard))
    generation = (obj.get("metadata") or {}).get("generation")
    return DeviceQuota(quota.metadata.namespace or "", quota.metadata.name or "", tuple(limits),
                       generation if isinstance(generation, int) else 0)


@dataclass(frozen=True)
class Denial:
    """Why an allocation does not fit a quota: one class, one resource, the numbers."""

    quota: str  # namespace/name
    device_class: str
    resource: str
    used: Quantity
    asked: Quantity
    hard: Quantity
    alone: bool = False
    """The claim exceeds the limit on its own (admission), whatever else is allocated."""

    @property
    def message(self) -> str:
        what = self.resource.split("/", 1)[-1]
        if self.alone:
            return (f"{KIND} {self.quota}: class {self.device_class!r} {what}: {self.asked} "
                    f"asked > {self.hard} hard (the claim alone exceeds the quota)")
        return (f"{KIND} {self.quota}: class {self.device_class!r} {what}: {self.used} used + "
                f"{self.asked} asked > {self.hard} hard")


def check(quotas: Iterable[DeviceQuota], used: Charge, asked: Charge) -> Denial | None:
    """The first quota limit that ``used + asked`` exceeds (quotas by name, then limits in
    order, devices before capacity and counters), or None when the allocation fits every
    quota. Only resources ``asked`` adds to are checked."""
    for quota in sorted(quotas, key=lambda q: q.name):
        for limit in quota.limits:
            want = asked.get(limit.device_class)
            if want is None:
                continue
            have = used.get(limit.device_class, Usage())
            for resource, hard in limit.hard.items():
                more = want.amount(resource)
                if more.sign() <= 0:
                    continue
                now = have.amount(resource)
                if now + more > hard:
                    return Denial(quota.key, limit.device_class, resource, now, more, hard)
    return None


def allocation_denial(quotas: Iterable[DeviceQuota], used: Charge,
                      claims: Sequence[ResourceClaim], results: Sequence[AllocationResult],
                      facts: Callable[[str, str, str], DeviceFacts | None]) -> Denial | None:
    """The binder's check of one placement: the first quota limit that ``used`` plus what
    ``results`` (one allocation per claim, in order) charge exceeds; None when it fits."""
    asked: Charge = {}
    for claim, result in zip(claims, results, strict=True):
        asked = add_charges(asked, claim_charge(claim, result, facts))
    return check(quotas, used, asked)


def namespace_charge(claims: Iterable[ResourceClaim],
                     facts: Callable[[str, str, str], DeviceFacts | None]) -> Charge:
    """What the allocations of ``claims`` (one namespace's, each claim once) charge it."""
    used: Charge = {}
    for claim in claims:
        used = add_charges(used, claim_charge(claim, None, facts))
    return used


def least_devices(claim: ResourceClaim) -> dict[str, int]:
    """The fewest devices per class any allocation of the claim holds (for an early check at
    admission): ExactCount requests count; an All request counts nothing (how many devices it
    gets is known only at allocation); a ``firstAvailable`` request counts its smallest
    alternative when all its alternatives are of one class, else nothing."""
    least: dict[str, int] = {}
    for request in claim.spec.devices.requests:
        if request.admin_access:
            continue
        options = [(asked.device_class_name, asked.exact_count if asked.allocation_mode ==
                    "ExactCount" else 0) for _, asked in request.alternatives()]
        if len({class_name for class_name, _ in options}) != 1:
            continue
        count = min(n for _, n in options)
        if count:
            least[options[0][0]] = least.get(options[0][0], 0) + count
    return least


def least_charge(claim: ResourceClaim) -> dict[str, Usage]:
    """The least any allocation of the claim is charged: :func:`least_devices` as a charge
    (device counts; capacity and counters depend on the devices chosen, so none)."""
    return {name: Usage(n) for name, n in least_devices(claim).items()}


def early_denials(claim: ResourceClaim, quotas: Iterable[DeviceQuota]) -> list[Denial]:
    """The quota limits a claim exceeds on its own, whatever else the namespace holds (the
    admission webhook refuses such a claim: it could never be allocated)."""
    asked = least_charge(claim)
    denials = []
    for quota in sorted(quotas, key=lambda q: q.name):
        for limit in quota.limits:
            hard = limit.hard.get(DEVICES)
            want = asked.get(limit.device_class)
            if hard is not None and want is not None and Quantity(want.devices) > hard:
                denials.append(Denial(quota.key, limit.device_class, DEVICES, ZERO,
                                      Quantity(want.devices), hard, alone=True))
    return denials


__all__ = [
    "DEVICES",
    "KIND",
    "QUOTA_REASON",
    "Charge",
    "Denial",
    "DeviceFacts",
    "DeviceQuota",
    "Ledger",
    "Limit",
    "Usage",
    "add_charges",
    "allocation_denial",
    "check",
    "claim_charge",
    "device_facts",
    "early_denials",
    "entry_facts",
    "least_charge",
    "least_devices",
    "namespace_charge",
    "parse_quota",
    "slice_facts",
]
