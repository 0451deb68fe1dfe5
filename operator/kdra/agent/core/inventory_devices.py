"""The devices a node agent knows: :class:`InventoryDevice` (one device as a backend found it,
with what the agent publishes about it) and :class:`Inventory` (all of one node's), and the
attribute values backends build them with (a GPU's: :func:`kdra.agent.core.gpu_profiles.
gpu_attributes`).

Invariants:
- Immutable values: discovery builds them, the health loop derives tainted copies.
- Every attribute is in the API's form (exactly one of int, bool, string, version).
- :meth:`InventoryDevice.to_api` gives the device exactly as a v1 ``ResourceSlice`` lists it;
  the counter sets a device provides (``counter_sets``) are not part of it (v1 publishes them
  in slices of their own, see :mod:`kdra.agent.core.pool_layout`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kdra.dra.taints import Taint

AttributeValue = Mapping[str, int | bool | str]
"""One attribute in the API's form: exactly one of ``{"int": 1}``, ``{"bool": true}``,
``{"string": "x"}``, ``{"version": "1.2.3"}``."""


def string_attr(value: str) -> AttributeValue:
    return {"string": value}


def int_attr(value: int) -> AttributeValue:
    return {"int": value}


def version_attr(value: str) -> AttributeValue:
    return {"version": value}


@dataclass(frozen=True)
class InventoryDevice:
    """One device a node has, as the agent knows it (published or not)."""

    driver: str
    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    healthy: bool = True
    health_reason: str = ""
    """Why the device is unhealthy (empty when healthy)."""
    device_nodes: tuple[str, ...] = ()
    """Host device nodes a container needs (a real GPU's ``/dev/nvidia3``); the backend's
    default CDI edits pass them on (:class:`kdra.agent.core.backend.BackendBase`)."""
    taints: tuple[Taint, ...] = ()
    """Taints to publish (the agent's health loop sets them; discovery never does)."""
    consumes_counters: tuple[CounterUse, ...] = ()
    """What allocating the device draws from the pool's shared counters (a partition)."""
    counter_sets: tuple[CounterUse, ...] = ()
    """Counter sets the device's hardware provides (a partitioned GPU's memory and compute
    slices): published in slices of their own, never inside a device (v1: devices xor
    sharedCounters per slice)."""
    allow_multiple_allocations: bool = False
    """A shared device: several claims may hold it at once, each a part of its capacity."""
    capacity_policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """capacity name → its ``requestPolicy`` in the API's form (shared devices)."""
    parent: str = ""
    """The physical device a partition is carved from (``gpu-0``); empty otherwise."""
    backend: str = ""
    """The name of the backend that found the device (:mod:`kdra.agent.core.backend`): the
    one asked how to prepare and expose it. Not published."""

    def attribute(self, name: str) -> int | bool | str | None:
        value = self.attributes.get(name)
        return next(iter(value.values())) if value else None

    def to_api(self) -> dict[str, Any]:
        """The device as it appears in a v1 ``ResourceSlice.spec.devices[]``."""
        device: dict[str, Any] = {"name": self.name}
        if self.attributes:
            device["attributes"] = {k: dict(v) for k, v in sorted(self.attributes.items())}
        if self.capacity:
            device["capacity"] = {k: {"value": v} for k, v in sorted(self.capacity.items())}
            for name, policy in self.capacity_policies.items():
                device["capacity"][name]["requestPolicy"] = dict(policy)
        if self.consumes_counters:
            device["consumesCounters"] = [use.to_api("counterSet")
                                          for use in self.consumes_counters]
        if self.allow_multiple_allocations:
            device["allowMultipleAllocations"] = True
        if self.taints:
            device["taints"] = [taint.to_api() for taint in self.taints]
        return device


@dataclass(frozen=True)
class CounterUse:
    """A counter set (``name``) with counter values: what a GPU provides, or what one of
    its partitions consumes of it. Values are quantities (``"1"``, ``"10Gi"``)."""

    name: str
    counters: Mapping[str, str]

    def to_api(self, key: str = "name") -> dict[str, Any]:
        """``{key: name, "counters": {counter: {"value": v}}}`` (``key``: ``name`` in
        ``sharedCounters``, ``counterSet`` in a device's ``consumesCounters``)."""
        return {key: self.name,
                "counters": {k: {"value": v} for k, v in sorted(self.counters.items())}}


@dataclass(frozen=True)
class Inventory:
    """Every device of one node, in publication order."""

    devices: tuple[InventoryDevice, ...] = ()

    @property
    def drivers(self) -> tuple[str, ...]:
        """The drivers with at least one device, in order of first appearance."""
        return tuple(dict.fromkeys(device.driver for device in self.devices))

    def for_driver(self, driver: str) -> tuple[InventoryDevice, ...]:
        return tuple(device for device in self.devices if device.driver == driver)

    def device(self, driver: str, name: str) -> InventoryDevice | None:
        return next((d for d in self.devices if d.driver == driver and d.name == name), None)

    def health_counts(self) -> tuple[int, int]:
        """(healthy, unhealthy) device counts."""
        healthy = sum(1 for device in self.devices if device.healthy)
        return healthy, len(self.devices) - healthy



__all__ = ["AttributeValue", "CounterUse", "Inventory", "InventoryDevice", "int_attr",
           "string_attr", "version_attr"]
