"""Invariants of partitionable and shared devices (issue 26), for ``kdra check``: recounted
from the claims' results and the slices alone — not with the allocator's own ledger, so a
bug in it cannot hide itself.

``counter-exceeded``
    For every counter set of a pool (newest generation), the counters consumed by the
    allocated devices that draw on it — each device once, however many results hold it —
    stay within the set's totals.
``capacity-exceeded``
    For every device, the ``consumedCapacity`` of the results holding it as a share
    (``shareID``) sums to at most each capacity's value.
``share-conflict``
    A device is not held both as a share and exclusively (a result without ``shareID``,
    admin access aside), and no device is held as a share unless its slice allows multiple
    allocations.

Invariants:
- Pure and total: objects that do not parse, amounts that are not quantities, and devices
  that are not in any slice are skipped (other rules report them), never an exception.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from kdra.dra.errors import InvalidObject
from kdra.dra.models import Device, parse_slice
from kdra.dra.quantity import InvalidQuantity, parse_quantity

__all__ = ["RULES", "shared_device_violations"]

RULES = ("counter-exceeded", "capacity-exceeded", "share-conflict")

JSON = Mapping[str, Any]
DeviceKey = tuple[str, str, str]


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _amount(text: object) -> Decimal | None:
    try:
        return parse_quantity(str(text)).value
    except InvalidQuantity:
        return None


def _newest(slices: Iterable[JSON]) -> tuple[dict[DeviceKey, Device],
                                             dict[tuple[str, str, str], dict[str, Decimal]]]:
    parsed = []
    for obj in slices:
        try:
            parsed.append(parse_slice(obj))
        except (InvalidObject, TypeError, ValueError):
            continue
    newest: dict[tuple[str, str], int] = {}
    for item in parsed:
        key = (item.spec.driver, item.spec.pool.name)
        newest[key] = max(newest.get(key, -1), item.spec.pool.generation)
    devices: dict[DeviceKey, Device] = {}
    sets: dict[tuple[str, str, str], dict[str, Decimal]] = {}
    for item in parsed:
        spec = item.spec
        if spec.pool.generation != newest[(spec.driver, spec.pool.name)]:
            continue
        for device in spec.devices:
            devices[(spec.driver, spec.pool.name, device.name)] = device
        for counter_set in spec.shared_counters:
            totals = {name: _amount(c.value) for name, c in counter_set.counters.items()}
            sets.setdefault((spec.driver, spec.pool.name, counter_set.name), {
                name: value for name, value in totals.items() if value is not None})
    return devices, sets


def shared_device_violations(claims: Sequence[JSON],
                             slices: Iterable[JSON]) -> list[tuple[str, str]]:
    """``(rule, message)`` for every broken rule of the module doc."""
    devices, sets = _newest(slices)
    exclusive: dict[DeviceKey, list[str]] = defaultdict(list)
    shares: dict[DeviceKey, list[tuple[str, Mapping[str, Any]]]] = defaultdict(list)
    for claim in claims:
        meta = _map(_map(claim).get("metadata"))
        name = f"{meta.get('namespace')}/{meta.get('name')}"
        allocation = _map(_map(_map(claim).get("status")).get("allocation"))
        results = _map(allocation.get("devices")).get("results")
        for result in results if isinstance(results, list) else ():
            if not isinstance(result, Mapping) or result.get("adminAccess") is True:
                continue
            key = (str(result.get("driver")), str(result.get("pool")),
                   str(result.get("device")))
            if result.get("shareID"):
                shares[key].append((name, _map(result.get("consumedCapacity"))))
            else:
                exclusive[key].append(name)
    found: list[tuple[str, str]] = []
    for key, holders in sorted(shares.items()):
        where = "/".join(key)
        names = sorted({name for name, _ in holders})
        if exclusive.get(key):
            found.append(("share-conflict", f"device {where} is held as a share by "
                          f"{', '.join(names)} and exclusively by "
                          f"{', '.join(sorted(exclusive[key]))}"))
        device = devices.get(key)
        if device is None:
            continue
        if not device.allow_multiple_allocations:
            found.append(("share-conflict", f"device {where} does not allow multiple "
                          f"allocations but is held as a share by {', '.join(names)}"))
        for capacity, published in sorted(device.capacity.items()):
            total = _amount(published.value)
            taken = sum((_amount(consumed.get(capacity)) or Decimal(0)
                         for _, consumed in holders), Decimal(0))
            if total is not None and taken > total:
                found.append(("capacity-exceeded", f"device {where}: shares consume {taken} of "
                              f"capacity {capacity} ({published.value}); held by "
                              f"{', '.join(names)}"))
    used: dict[tuple[str, str, str], dict[str, Decimal]] = defaultdict(dict)
    users: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for key in set(exclusive) | set(shares):
        device = devices.get(key)
        if device is None:
            continue
        for consumption in device.consumes_counters:
            set_key = (key[0], key[1], consumption.counter_set)
            users[set_key].add(key[2])
            for counter, value in consumption.counters.items():
                amount = _amount(value.value) or Decimal(0)
                used[set_key][counter] = used[set_key].get(counter, Decimal(0)) + amount
    for set_key, counters in sorted(used.items()):
        totals = sets.get(set_key, {})
        for counter, amount in sorted(counters.items()):
            total = totals.get(counter)
            if total is not None and amount > total:
                found.append(("counter-exceeded", f"counter {counter} of set {set_key[2]} in "
                              f"pool {set_key[0]}/{set_key[1]}: {amount} used of {total}, by "
                              f"devices {', '.join(sorted(users[set_key]))}"))
    return found
