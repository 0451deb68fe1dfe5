"""How one pool's devices and shared counter sets are split into ResourceSlices.

A pool is published as several slices when it has to be (upstream v1 limits):

- a slice holds devices **or** ``sharedCounters``, never both: the counter sets of a
  partitioned GPU go into slices of their own, after the device slices;
- at most 128 devices per slice, 64 when any device of the pool uses taints or consumes
  counters, and at most :data:`MAX_CONSUMED_COUNTERS_PER_SLICE` counters consumed by all
  devices of one slice together;
- at most 8 counter sets per slice, each of at most 32 counters.

Invariants:
- Pure and deterministic: the same devices give the same slices in the same order (slice
  names are their positions, so a restarted agent publishes identical content).
- Device order is kept; counter sets keep the order of the devices that provide them. A
  counter set name provided twice is an error (:class:`ValueError`): two GPUs would then
  share one set of hardware counters.
- A pool with neither devices nor counters still gets one (empty) device slice, so the
  pool says "this node has none" instead of being absent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kdra.agent.core.inventory_devices import CounterUse, InventoryDevice
from kdra.dra.models.base import (
    MAX_COUNTER_SETS,
    MAX_COUNTERS,
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_ADVANCED,
)

MAX_CONSUMED_COUNTERS_PER_SLICE = 1024
"""Upstream's bound on the counters all devices of one slice consume together."""


@dataclass(frozen=True)
class SliceContent:
    """What one slice of the pool publishes: devices, or counter sets (one is empty)."""

    devices: tuple[InventoryDevice, ...] = ()
    counter_sets: tuple[CounterUse, ...] = ()


def _device_limit(devices: Sequence[InventoryDevice]) -> int:
    advanced = any(device.taints or device.consumes_counters for device in devices)
    return MAX_DEVICES_PER_SLICE_ADVANCED if advanced else MAX_DEVICES_PER_SLICE


def _consumed(device: InventoryDevice) -> int:
    return sum(len(use.counters) for use in device.consumes_counters)


def counter_sets_of(devices: Sequence[InventoryDevice]) -> tuple[CounterUse, ...]:
    """Every counter set the devices provide, in order. Raises ValueError for a set name
    provided twice or a set of more than 32 counters."""
    seen: dict[str, str] = {}
    sets: list[CounterUse] = []
    for device in devices:
        for counter_set in device.counter_sets:
            if counter_set.name in seen:
                raise ValueError(f"counter set {counter_set.name!r} is provided by both "
                                 f"{seen[counter_set.name]} and {device.name}")
            if len(counter_set.counters) > MAX_COUNTERS:
                raise ValueError(f"counter set {counter_set.name!r} of {device.name} has "
                                 f"{len(counter_set.counters)} counters (at most "
                                 f"{MAX_COUNTERS})")
            seen[counter_set.name] = device.name
            sets.append(counter_set)
    return tuple(sets)


def layout(devices: Sequence[InventoryDevice]) -> list[SliceContent]:
    """The pool's slices: device slices first, then counter-set slices (see the module)."""
    limit = _device_limit(devices)
    parts: list[SliceContent] = []
    current: list[InventoryDevice] = []
    consumed = 0
    for device in devices:
        cost = _consumed(device)
        if current and (len(current) >= limit
                        or consumed + cost > MAX_CONSUMED_COUNTERS_PER_SLICE):
            parts.append(SliceContent(devices=tuple(current)))
            current, consumed = [], 0
        current.append(device)
        consumed += cost
    if current:
        parts.append(SliceContent(devices=tuple(current)))
    sets = counter_sets_of(devices)
    for start in range(0, len(sets), MAX_COUNTER_SETS):
        parts.append(SliceContent(counter_sets=sets[start:start + MAX_COUNTER_SETS]))
    return parts or [SliceContent()]


__all__ = ["MAX_CONSUMED_COUNTERS_PER_SLICE", "SliceContent", "counter_sets_of", "layout"]
