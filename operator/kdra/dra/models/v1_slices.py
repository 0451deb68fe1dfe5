"""Typed model of a ResourceSlice in ``resource.kdra.dev/v1`` — upstream
``resource.k8s.io/v1`` (Kubernetes 1.36) field for field.

Devices are flat: ``{name, attributes, capacity: {name: {value, requestPolicy}}, ...}``, plus
counters (``consumesCounters``; the slice's ``sharedCounters``) and multiple allocations,
per-device node selection (``perDeviceNodeSelection``; a device's ``nodeName`` /
``nodeSelector`` / ``allNodes``) and binding conditions (``bindingConditions``,
``bindingFailureConditions``, ``bindsToNode``), which the allocator and the binder act on
(issues 26, 39), and the fields of features kdra does not act on yet (node-allocatable
mappings, list-typed attributes). Those are parsed and kept, and :meth:`Device.unsupported`
names them: the allocator never selects such a device until kdra implements the feature,
and says why.

Invariants:
- Parsing enforces upstream's one-of and size rules (exactly one attribute value, exactly
  one node scope — for the slice, and with ``perDeviceNodeSelection`` for each device, none
  without it —, node selectors of exactly one term, ``devices`` xor ``sharedCounters``,
  ≤ 128 devices per slice — 64 when a device uses taints, counters or list attributes —
  ≤ 32 attributes and capacities and ≤ 48 attribute values per device).
- :meth:`DeviceAttribute.scalar` is ``(kind, value)`` only for the four scalar kinds;
  list-typed attributes have none (CEL and matchAttribute see scalars only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, StrictBool, StrictInt, StrictStr, model_validator

from kdra.dra.models.base import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    MAX_ATTRIBUTE_STRING_LENGTH,
    MAX_ATTRIBUTE_VALUES,
    MAX_ATTRIBUTES_AND_CAPACITY,
    MAX_BINDING_CONDITIONS,
    MAX_COUNTER_CONSUMPTIONS,
    MAX_COUNTER_SETS,
    MAX_COUNTERS,
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_ADVANCED,
    MAX_TAINTS,
    MAX_VALID_VALUES,
    NodeSelector,
    ObjectMeta,
    _Model,
    parse,
)

SCALAR_KINDS = ("int", "bool", "string", "version")
LIST_KINDS = ("ints", "bools", "strings", "versions")
UNSCHEDULABLE_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects that keep a device from being allocated unless tolerated (upstream treats
unknown effects like ``None``: informational)."""


class DeviceAttribute(_Model):
    """One attribute value: exactly one of ``int``, ``bool``, ``string``, ``version`` or (1.36)
    the list forms ``ints``, ``bools``, ``strings``, ``versions``."""

    int_: StrictInt | None = Field(default=None, alias="int")
    bool_: StrictBool | None = Field(default=None, alias="bool")
    string: StrictStr | None = Field(default=None, max_length=MAX_ATTRIBUTE_STRING_LENGTH)
    version: StrictStr | None = Field(default=None, max_length=MAX_ATTRIBUTE_STRING_LENGTH)
    ints: tuple[StrictInt, ...] | None = Field(default=None, min_length=1)
    bools: tuple[StrictBool, ...] | None = Field(default=None, min_length=1)
    strings: tuple[StrictStr, ...] | None = Field(default=None, min_length=1)
    versions: tuple[StrictStr, ...] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _exactly_one(self) -> DeviceAttribute:
        set_ = [k for k, v in self._values().items() if v is not None]
        if len(set_) != 1:
            given = ", ".join(set_) or "none"
            raise ValueError("exactly one of int, bool, string, version, ints, bools, strings, "
                             f"versions must be set (got {given})")
        for item in (self.strings or ()) + (self.versions or ()):
            if len(item) > MAX_ATTRIBUTE_STRING_LENGTH:
                raise ValueError(f"list items must be at most {MAX_ATTRIBUTE_STRING_LENGTH} "
                                 "characters")
        return self

    def _values(self) -> dict[str, Any]:
        return {"int": self.int_, "bool": self.bool_, "string": self.string,
                "version": self.version, "ints": self.ints, "bools": self.bools,
                "strings": self.strings, "versions": self.versions}

    @property
    def kind(self) -> str:
        """``int`` | ``bool`` | ``string`` | ``version`` | ``ints`` | ... (the one set)."""
        return next(k for k, v in self._values().items() if v is not None)

    @property
    def value(self) -> Any:
        return next(v for v in self._values().values() if v is not None)

    def scalar(self) -> tuple[str, int | bool | str] | None:
        """``(kind, value)`` for a scalar attribute, None for a list-typed one."""
        kind = self.kind
        return (kind, self.value) if kind in SCALAR_KINDS else None

    @property
    def size(self) -> int:
        """How many values it counts for against the per-device limit."""
        value = self.value
        return len(value) if isinstance(value, tuple) else 1


class CapacityRequestPolicyRange(_Model):
    min: str | None = None
    max: str | None = None
    step: str | None = None


class CapacityRequestPolicy(_Model):
    default: str | None = None
    valid_values: tuple[str, ...] = Field(default=(), max_length=MAX_VALID_VALUES)
    valid_range: CapacityRequestPolicyRange | None = None


class DeviceCapacity(_Model):
    value: str
    request_policy: CapacityRequestPolicy | None = None


class Counter(_Model):
    value: str


class CounterSet(_Model):
    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63)
    counters: dict[str, Counter] = Field(default_factory=dict, max_length=MAX_COUNTERS)


class DeviceCounterConsumption(_Model):
    counter_set: str = Field(pattern=DNS_LABEL.pattern, max_length=63)
    counters: dict[str, Counter] = Field(default_factory=dict, max_length=MAX_COUNTERS)


class DeviceTaint(_Model):
    key: str
    value: str = ""
    effect: str
    time_added: str | None = None


class NodeAllocatableResourceMapping(_Model):
    capacity_key: str | None = None
    allocation_multiplier: str | None = None


class Device(_Model):
    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63)
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict)
    consumes_counters: tuple[DeviceCounterConsumption, ...] = Field(
        default=(), max_length=MAX_COUNTER_CONSUMPTIONS)
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool | None = None
    taints: tuple[DeviceTaint, ...] = Field(default=(), max_length=MAX_TAINTS)
    binds_to_node: bool | None = None
    binding_conditions: tuple[str, ...] = Field(default=(), max_length=MAX_BINDING_CONDITIONS)
    binding_failure_conditions: tuple[str, ...] = Field(default=(),
                                                        max_length=MAX_BINDING_CONDITIONS)
    allow_multiple_allocations: bool | None = None
    node_allocatable_resource_mappings: dict[str, NodeAllocatableResourceMapping] | None = None

    @model_validator(mode="after")
    def _size(self) -> Device:
        total = len(self.attributes) + len(self.capacity)
        if total > MAX_ATTRIBUTES_AND_CAPACITY:
            raise ValueError(
                f"a device may have at most {MAX_ATTRIBUTES_AND_CAPACITY} attributes and "
                f"capacities together (has {total})"
            )
        values = sum(attribute.size for attribute in self.attributes.values())
        if values > MAX_ATTRIBUTE_VALUES:
            raise ValueError(f"a device may have at most {MAX_ATTRIBUTE_VALUES} attribute "
                             f"values (has {values})")
        return self

    @property
    def advanced(self) -> bool:
        """Uses taints, counters or list attributes (the slice then holds at most 64)."""
        return bool(self.taints or self.consumes_counters or any(
            a.scalar() is None for a in self.attributes.values()))

    def unsupported(self) -> list[str]:
        """The features this device uses that kdra does not implement yet (empty: none).
        Such a device is never allocated: kdra cannot honour what the driver declared."""
        found = []
        if self.node_allocatable_resource_mappings:
            found.append("nodeAllocatableResourceMappings")
        if any(a.scalar() is None for a in self.attributes.values()):
            found.append("list-typed attributes")
        return found


class ResourcePool(_Model):
    name: str = Field(min_length=1, max_length=253)
    generation: int = Field(ge=0)
    resource_slice_count: int = Field(ge=1)


class ResourceSliceSpec(_Model):
    driver: str = Field(pattern=DNS_SUBDOMAIN.pattern, max_length=63)
    pool: ResourcePool
    node_name: str | None = None
    node_selector: NodeSelector | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = Field(default=(), max_length=MAX_DEVICES_PER_SLICE)
    shared_counters: tuple[CounterSet, ...] = Field(default=(), max_length=MAX_COUNTER_SETS)

    @model_validator(mode="after")
    def _one_node_scope(self) -> ResourceSliceSpec:
        chosen = [name for name, on in (("nodeName", bool(self.node_name)),
                                        ("nodeSelector", self.node_selector is not None),
                                        ("allNodes", self.all_nodes),
                                        ("perDeviceNodeSelection",
                                         self.per_device_node_selection)) if on]
        if len(chosen) != 1:
            raise ValueError(
                "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection must "
                f"be set (got {', '.join(chosen) or 'none'})"
            )
        if self.node_selector is not None and len(self.node_selector.node_selector_terms) != 1:
            raise ValueError("nodeSelector must have exactly one term")
        for device in self.devices:
            scopes = [name for name, on in (("nodeName", bool(device.node_name)),
                                            ("nodeSelector", device.node_selector is not None),
                                            ("allNodes", bool(device.all_nodes))) if on]
            if self.per_device_node_selection and len(scopes) != 1:
                raise ValueError(
                    f"device {device.name}: with perDeviceNodeSelection exactly one of "
                    f"nodeName, nodeSelector, allNodes must be set (got "
                    f"{', '.join(scopes) or 'none'})")
            if not self.per_device_node_selection and (
                    scopes or device.node_name is not None or device.all_nodes is not None):
                raise ValueError(f"device {device.name}: nodeName, nodeSelector and allNodes "
                                 "may be set only with perDeviceNodeSelection")
            if device.node_selector is not None and len(
                    device.node_selector.node_selector_terms) != 1:
                raise ValueError(f"device {device.name}: nodeSelector must have exactly one "
                                 "term")
        if self.devices and self.shared_counters:
            raise ValueError("only one of devices and sharedCounters may be set")
        if (len(self.devices) > MAX_DEVICES_PER_SLICE_ADVANCED
                and any(device.advanced for device in self.devices)):
            raise ValueError(
                f"at most {MAX_DEVICES_PER_SLICE_ADVANCED} devices when a device uses taints, "
                f"counters or list attributes (has {len(self.devices)})")
        return self


class ResourceSlice(_Model):
    api_version: str = ""
    kind: str = "ResourceSlice"
    metadata: ObjectMeta
    spec: ResourceSliceSpec


def parse_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    return parse(ResourceSlice, obj)


__all__ = [
    "LIST_KINDS",
    "SCALAR_KINDS",
    "CapacityRequestPolicy",
    "CapacityRequestPolicyRange",
    "Counter",
    "CounterSet",
    "Device",
    "DeviceAttribute",
    "DeviceCapacity",
    "DeviceCounterConsumption",
    "DeviceTaint",
    "NodeAllocatableResourceMapping",
    "ResourcePool",
    "ResourceSlice",
    "ResourceSliceSpec",
    "parse_slice",
]
