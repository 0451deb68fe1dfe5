"""Typed model of a ResourceSlice's devices in ``resource.kdra.dev/v1`` — upstream
``resource.k8s.io/v1`` (Kubernetes 1.36) field for field, and the source of the CRD schema's
``spec.devices`` (:mod:`kdra.dra.models.crd`).

Devices are flat: ``{name, attributes, capacity: {name: {value, requestPolicy}}, ...}``, plus
counters (``consumesCounters``; the slice's ``sharedCounters``) and multiple allocations,
per-device node selection (``nodeName`` / ``nodeSelector`` / ``allNodes``) and binding
conditions (``bindingConditions``, ``bindingFailureConditions``, ``bindsToNode``), which the
allocator and the binder act on (issues 26, 39), and the fields of features kdra does not act
on yet (node-allocatable mappings, list-typed attributes). Those are parsed and kept, and
:meth:`Device.unsupported` names them: the allocator never selects such a device until kdra
implements the feature, and says why.

Invariants:
- Parsing enforces upstream's per-device rules: exactly one attribute value, ≤ 32 attributes
  and capacities and ≤ 48 attribute values per device, node selectors of exactly one term
  (checked with the slice's scope in :mod:`kdra.dra.models.v1_slices`).
- :meth:`DeviceAttribute.scalar` is ``(kind, value)`` only for the four scalar kinds;
  list-typed attributes have none (CEL and matchAttribute see scalars only).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StrictBool, StrictInt, StrictStr, model_validator

from kdra.dra.models.base import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    MAX_ATTRIBUTE_STRING_LENGTH,
    MAX_ATTRIBUTE_VALUES,
    MAX_ATTRIBUTES_AND_CAPACITY,
    MAX_BINDING_CONDITIONS,
    MAX_COUNTER_CONSUMPTIONS,
    MAX_COUNTERS,
    MAX_TAINTS,
    MAX_VALID_VALUES,
    NodeSelector,
    _Model,
)
from kdra.dra.models.crd import (
    CONDITION_TYPE,
    LABEL_NAME,
    LABEL_VALUE,
    SEMVER,
    Quantity,
    crd,
    crd_object,
    item,
    qualified_keys,
    quantity,
    rule,
)

SCALAR_KINDS = ("int", "bool", "string", "version")
LIST_KINDS = ("ints", "bools", "strings", "versions")
UNSCHEDULABLE_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
"""Taint effects that keep a device from being allocated unless tolerated (upstream treats
unknown effects like ``None``: informational)."""


NOT_YET = ("Accepted and kept, but kdra does not implement this feature yet: it never "
           "allocates a device that uses it (the pod is told why).")
_LIST = crd(max_items=MAX_ATTRIBUTE_VALUES)
_VERSION = crd(pattern=SEMVER)
_STRING_ITEM = Annotated[StrictStr, Field(json_schema_extra=crd(
    max_length=MAX_ATTRIBUTE_STRING_LENGTH))]
_VERSION_ITEM = Annotated[StrictStr, item("A semantic version.", pattern=SEMVER,
                                          max_length=MAX_ATTRIBUTE_STRING_LENGTH)]


class DeviceAttribute(_Model):
    """The value of one attribute: exactly one of `int`, `bool`, `string` (at most 64
    characters), `version` (strict semantic version) — or, for list-typed attributes, `ints`,
    `bools`, `strings`, `versions`."""

    model_config = crd_object(rules=[rule(
        " + ".join(f"(has(self.{kind}) ? 1 : 0)" for kind in (*SCALAR_KINDS, *LIST_KINDS))
        + " == 1", "exactly one of int, bool, string, version, ints, bools, strings or "
        "versions must be set in an attribute value")])

    int_: StrictInt | None = Field(default=None, alias="int")
    """An integer value (64 bit)."""
    bool_: StrictBool | None = Field(default=None, alias="bool")
    """A boolean value."""
    string: StrictStr | None = Field(default=None, max_length=MAX_ATTRIBUTE_STRING_LENGTH)
    """A string value of at most 64 characters."""
    version: StrictStr | None = Field(default=None, max_length=MAX_ATTRIBUTE_STRING_LENGTH,
                                      json_schema_extra=_VERSION)
    """A semantic version following semver.org 2.0.0 strictly (`1.2.3`, `12.4.0-rc.1+build.5`;
    no leading `v`, no leading zeros), at most 64 characters. CEL selectors compare it with
    `semver()` helpers."""
    ints: tuple[StrictInt, ...] | None = Field(
        default=None, min_length=1, json_schema_extra=_LIST,
        description=f"A list of integers (list-typed attribute). {NOT_YET}")
    bools: tuple[StrictBool, ...] | None = Field(
        default=None, min_length=1, json_schema_extra=_LIST,
        description=f"A list of booleans (list-typed attribute). {NOT_YET}")
    strings: tuple[_STRING_ITEM, ...] | None = Field(
        default=None, min_length=1, json_schema_extra=_LIST,
        description=f"A list of strings of at most 64 characters (list-typed attribute). "
                    f"{NOT_YET}")
    versions: tuple[_VERSION_ITEM, ...] | None = Field(
        default=None, min_length=1, json_schema_extra=_LIST,
        description=f"A list of semantic versions (list-typed attribute). {NOT_YET}")

    @model_validator(mode="after")
    def _exactly_one(self) -> DeviceAttribute:
        set_ = [k for k, v in self._values().items() if v is not None]
        if len(set_) != 1:
            given = ", ".join(set_) or "none"
            raise ValueError("exactly one of int, bool, string, version, ints, bools, strings, "
                             f"versions must be set (got {given})")
        for value in (self.strings or ()) + (self.versions or ()):
            if len(value) > MAX_ATTRIBUTE_STRING_LENGTH:
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
    """The range an allocation may consume."""

    min: Annotated[str | None, quantity("Least amount (required).")] = Field(
        default=None, json_schema_extra=crd(required=True))
    max: Annotated[str | None, quantity("Largest amount.")] = None
    step: Annotated[str | None, quantity("Amounts must be `min` plus a multiple of `step`.")] = (
        None)


class CapacityRequestPolicy(_Model):
    """How the capacity may be consumed by several allocations (devices with
    `allowMultipleAllocations` only): what a request asks is rounded up to the next valid
    amount; a request that asks nothing consumes `default` (else everything)."""

    model_config = crd_object(rules=[rule("!(has(self.validValues) && has(self.validRange))",
                                          "only one of validValues and validRange may be set")])

    default: Annotated[str | None, quantity(
        "What an allocation consumes when its request does not say.")] = None
    valid_values: tuple[Quantity, ...] = Field(default=(), max_length=MAX_VALID_VALUES)
    """The amounts an allocation may consume, ascending. At most 10."""
    valid_range: CapacityRequestPolicyRange | None = None


class DeviceCapacity(_Model):
    """One capacity of the device."""

    value: Annotated[str, quantity(
        "How much the device has: an integer or a quantity string such as `80Gi`, `1.5`, "
        "`250m`. CEL: `device.capacity[\"<domain>\"].memory.compareTo(quantity(\"40Gi\")) >= 0`.")]
    request_policy: CapacityRequestPolicy | None = None


class Counter(_Model):
    """One counter."""

    value: Annotated[str, quantity("The amount.")]


def _counters(what: str) -> Any:
    return Field(default_factory=dict, max_length=MAX_COUNTERS, json_schema_extra=crd(
        required=True, rules=[rule(
            "self.all(k, k.size() <= 63 && k.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",
            "counter names must be DNS labels")]),
        description=f"{what}: counter name (a DNS label) to its amount. At most 32.")


class CounterSet(_Model):
    """A named set of counters."""

    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63,
                      json_schema_extra=crd(min_length=1))
    """Name of the counter set, a DNS label."""
    counters: dict[str, Counter] = _counters("The counters")


class DeviceCounterConsumption(_Model):
    """What the device consumes from one counter set."""

    counter_set: str = Field(pattern=DNS_LABEL.pattern, max_length=63,
                             json_schema_extra=crd(min_length=1))
    """Name of a counter set in the pool's `sharedCounters`."""
    counters: dict[str, Counter] = _counters("The amounts")


_TAINT_KEY = crd(min_length=1, max_length=317, pattern=LABEL_NAME)
_TAINT_VALUE = crd(max_length=63, pattern=LABEL_VALUE)
_TAINT_EFFECT = crd(enum=["None", "NoSchedule", "NoExecute"], max_length=16)


class DeviceTaint(_Model):
    """A taint the driver put on the device."""

    key: str = Field(json_schema_extra=_TAINT_KEY)
    """The taint key, a label name."""
    value: str = Field(default="", json_schema_extra=_TAINT_VALUE)
    """The taint value, a label value."""
    effect: str = Field(json_schema_extra=_TAINT_EFFECT)
    """`NoSchedule` (not allocated unless tolerated), `NoExecute` (also evicts pods that do not
    tolerate it) or `None` (informational)."""
    time_added: str | None = Field(default=None, json_schema_extra=crd(fmt="date-time",
                                                                       max_length=64))
    """When the taint was added (RFC 3339)."""


class NodeAllocatableResourceMapping(_Model):
    """One mapping."""

    capacity_key: str | None = Field(default=None, json_schema_extra=crd(max_length=96))
    """A capacity of the device whose value is counted."""
    allocation_multiplier: Annotated[str | None, quantity(
        "Factor applied to the device count or to the capacity (default 1).")] = None


NODE_NAME = crd(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN.pattern)
ONE_TERM = crd(rules=[rule(
    "size(self.nodeSelectorTerms) == 1",
    "nodeSelector must have exactly one entry in nodeSelectorTerms; combine requirements "
    "inside one term", field_path=".nodeSelectorTerms")], properties={"nodeSelectorTerms": {
        "maxItems": 1,
        "description": "The terms, ORed: a node matches when it matches at least one term. A "
                       "ResourceSlice's node selector must have exactly one term."}})
"""A slice's node selectors (the slice's, a device's) have exactly one term."""
_CONDITION_TYPE = Annotated[str, item("A condition type.", max_length=316,
                                      pattern=CONDITION_TYPE)]


class Device(_Model):
    """One device: its name, attributes and capacities, and the fields of newer features."""

    model_config = crd_object(rules=[
        rule("(has(self.attributes) ? size(self.attributes) : 0) + (has(self.capacity) ? "
             "size(self.capacity) : 0) <= 32",
             "a device may have at most 32 attributes and capacities together (attributes + "
             "capacity); drop some or move them to another device"),
        rule("!has(self.capacity) || (has(self.allowMultipleAllocations) && "
             "self.allowMultipleAllocations) || self.capacity.all(k, "
             "!has(self.capacity[k].requestPolicy))",
             "capacity[].requestPolicy may only be set when allowMultipleAllocations is true",
             field_path=".capacity"),
        rule("has(self.bindingConditions) == has(self.bindingFailureConditions)",
             "bindingConditions and bindingFailureConditions must be set together"),
        rule("!has(self.allNodes) || self.allNodes",
             "allNodes may only be set to true", field_path=".allNodes"),
    ])

    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63,
                      json_schema_extra=crd(min_length=1))
    """Name of the device, unique within the pool (not only within this slice). Allocation
    results refer to it. A DNS label: lower-case letters, digits and '-', at most 63
    characters."""
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict, json_schema_extra=crd(
        max_properties=MAX_ATTRIBUTES_AND_CAPACITY, rules=[qualified_keys("attribute", "model")]))
    """Facts about the device, by name. A name is a C identifier of at most 32 characters
    (`color`, `productName`), which belongs to the slice's driver (CEL:
    `device.attributes["<driver>"].color`), or `<domain>/<identifier>` for names defined by
    someone else (`acme.io/family` -> `device.attributes["acme.io"].family`). A name should
    mean the same and have the same type on every device. Attributes and capacities together:
    at most 32 per device."""
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict, json_schema_extra=crd(
        max_properties=MAX_ATTRIBUTES_AND_CAPACITY, rules=[qualified_keys("capacity", "memory")]))
    """Amounts the device has, by name (same naming rules as `attributes`). Attributes and
    capacities together: at most 32 per device."""
    consumes_counters: tuple[DeviceCounterConsumption, ...] = Field(
        default=(), max_length=MAX_COUNTER_CONSUMPTIONS, json_schema_extra=crd(rules=[rule(
            "self.all(c, self.exists_one(o, o.counterSet == c.counterSet))",
            "one entry per counter set")]))
    """Counters of the slice's pool this device uses up when allocated (partitionable devices,
    e.g. a MIG slice of a GPU). At most 2 entries, one per counter set. The device is
    allocated only while every counter it consumes stays within the set's total, counting
    every allocated device of the pool."""
    node_name: str | None = Field(default=None, json_schema_extra=NODE_NAME)
    """With `perDeviceNodeSelection`: the node that has this device (the device is offered only
    there; its allocation is pinned to that node)."""
    node_selector: NodeSelector | None = Field(default=None, json_schema_extra=ONE_TERM)
    """With `perDeviceNodeSelection`: the nodes that can reach this device (exactly one term;
    the allocation carries it)."""
    all_nodes: bool | None = None
    """With `perDeviceNodeSelection`: every node can reach this device (only `true` may be
    set)."""
    taints: tuple[DeviceTaint, ...] = Field(default=(), max_length=MAX_TAINTS)
    """Taints on the device. A device with a `NoSchedule` or `NoExecute` taint is allocated
    only to requests that tolerate it; `NoExecute` also evicts pods using it that do not
    tolerate it; `None` taints are informational. kdra's agent taints unhealthy devices
    `gpu.kdra.dev/unhealthy`. At most 16."""
    binds_to_node: bool | None = None
    """The allocation must be limited to the node chosen at allocation time (its nodeSelector
    names that node)."""
    binding_conditions: tuple[_CONDITION_TYPE, ...] = Field(
        default=(), max_length=MAX_BINDING_CONDITIONS)
    """Conditions that must be True in the claim's `status.devices` before a pod using the
    device may bind (the binder waits for them instead of the node agent's `Ready`, at most
    --binding-timeout, 600 s). At most 4."""
    binding_failure_conditions: tuple[_CONDITION_TYPE, ...] = Field(
        default=(), max_length=MAX_BINDING_CONDITIONS)
    """Conditions that, when True, make binding fail: the allocation is undone and the pod
    tried on another node. At most 4."""
    allow_multiple_allocations: bool | None = None
    """The device may be allocated to several claims at once, each consuming part of its
    capacity (consumable capacity); each allocation is a share with its own `shareID` and
    `consumedCapacity`."""
    node_allocatable_resource_mappings: dict[str, NodeAllocatableResourceMapping] | None = (
        Field(default=None, json_schema_extra=crd(max_properties=32), description=(
            "How allocating the device counts against the node's allocatable resources "
            f"(resource name, e.g. `cpu`, to a mapping). {NOT_YET}")))

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


__all__ = [
    "LIST_KINDS",
    "NODE_NAME",
    "NOT_YET",
    "ONE_TERM",
    "SCALAR_KINDS",
    "UNSCHEDULABLE_EFFECTS",
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
]
