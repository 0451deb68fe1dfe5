"""Typed model of a ResourceSlice in ``resource.kdra.dev/v1`` — upstream
``resource.k8s.io/v1`` (Kubernetes 1.36) field for field: the driver, the pool, which nodes
can reach the devices, and the devices (:mod:`kdra.dra.models.v1_devices`) or the pool's
shared counters. The source of the ResourceSlice CRD's schema (:mod:`kdra.dra.models.crd`).

Invariants:
- Parsing enforces upstream's one-of and size rules: exactly one node scope — for the slice,
  and with ``perDeviceNodeSelection`` for each device, none without it —, node selectors of
  exactly one term, ``devices`` xor ``sharedCounters``, ≤ 128 devices per slice — 64 when a
  device uses taints, counters or list attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from kdra.dra.models.base import (
    DNS_SUBDOMAIN,
    MAX_COUNTER_SETS,
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_ADVANCED,
    APIObject,
    NodeSelector,
    _Model,
    parse,
)
from kdra.dra.models.crd import POOL_NAME, JsonDict, crd, crd_object, immutable, rule
from kdra.dra.models.v1_devices import (
    LIST_KINDS,
    NODE_NAME,
    ONE_TERM,
    CounterSet,
    Device,
)


class ResourcePool(_Model):
    """The pool this slice is part of. A pool is a group of devices that the driver publishes
    together, possibly in several slices; for node-local devices it is usually all devices of
    one driver on one node, named after the node."""

    name: str = Field(min_length=1, max_length=253, json_schema_extra=crd(pattern=POOL_NAME))
    """Name of the pool, unique per driver. At most 253 characters: one or more DNS subdomains
    separated by '/'."""
    generation: int = Field(ge=0)
    """Version of the pool's contents. The driver increments it whenever it republishes the
    pool; the allocator only looks at the slices with the highest generation and ignores older
    ones. Starts at 0."""
    resource_slice_count: int = Field(ge=1)
    """How many slices the pool has in this generation. The allocator treats the pool as
    incomplete until it sees that many (requests with allocationMode All cannot use an
    incomplete pool). At least 1."""


def _slice_rules() -> list[JsonDict]:
    scopes = ("(has(self.nodeName) ? 1 : 0) + (has(self.nodeSelector) ? 1 : 0) + "
              "(has(self.allNodes) && self.allNodes ? 1 : 0) + "
              "(has(self.perDeviceNodeSelection) && self.perDeviceNodeSelection ? 1 : 0) == 1")
    return [
        rule(scopes, "exactly one of spec.nodeName, spec.nodeSelector, spec.allNodes: true or "
             "spec.perDeviceNodeSelection: true must be set: nodeName for devices local to one "
             "node, nodeSelector for devices several nodes can reach, allNodes for devices "
             "every node can reach, perDeviceNodeSelection when each device says it"),
        rule("has(self.nodeName) == has(oldSelf.nodeName) && (!has(self.nodeName) || "
             "self.nodeName == oldSelf.nodeName)",
             "spec.nodeName is immutable; publish a new ResourceSlice for the other node and "
             "delete this one", field_path=".nodeName", reason="FieldValueForbidden"),
        rule("!(has(self.devices) && size(self.devices) > 0 && has(self.sharedCounters))",
             "only one of devices and sharedCounters may be set"),
        rule("!has(self.devices) || ((has(self.perDeviceNodeSelection) && "
             "self.perDeviceNodeSelection) ? self.devices.all(d, (has(d.nodeName) ? 1 : 0) + "
             "(has(d.nodeSelector) ? 1 : 0) + (has(d.allNodes) ? 1 : 0) == 1) : "
             "self.devices.all(d, !has(d.nodeName) && !has(d.nodeSelector) && "
             "!has(d.allNodes)))",
             "with perDeviceNodeSelection every device must set exactly one of nodeName, "
             "nodeSelector and allNodes; without it no device may set them",
             field_path=".devices"),
    ]


_LIST_TYPED = " || ".join(f"has(d.attributes[k].{kind})" for kind in LIST_KINDS)


class ResourceSliceSpec(_Model):
    """What the driver publishes: the driver, the pool, which nodes can reach the devices, and
    the devices (or the pool's shared counters). Exactly one of `nodeName`, `nodeSelector`,
    `allNodes: true` and `perDeviceNodeSelection: true` must be set."""

    model_config = crd_object(rules=_slice_rules())

    driver: str = Field(pattern=DNS_SUBDOMAIN.pattern, max_length=63, json_schema_extra=crd(
        min_length=1, rules=[immutable("spec.driver is immutable; publish a new ResourceSlice "
                                       "for the other driver and delete this one")]))
    """Name of the driver that publishes these devices and prepares them on nodes, for example
    `gpu.kdra.dev`. A DNS subdomain of at most 63 characters, normally a domain the vendor
    owns. Immutable. Selectable: `kubectl get kslice --field-selector
    spec.driver=gpu.kdra.dev`."""
    pool: ResourcePool
    node_name: str | None = Field(default=None, json_schema_extra=NODE_NAME)
    """Name of the node that has these devices, for node-local devices. Pods using them must
    run there. Immutable. Selectable: `kubectl get kslice --field-selector
    spec.nodeName=worker-1`."""
    node_selector: NodeSelector | None = Field(default=None, json_schema_extra=ONE_TERM)
    """The nodes that can reach these devices, for devices shared by several nodes
    (network-attached). Must have exactly one term."""
    all_nodes: bool = False
    """Set to true when every node in the cluster can reach these devices."""
    per_device_node_selection: bool = False
    """Each device says itself which nodes can reach it (`nodeName`, `nodeSelector` or
    `allNodes` on the device; only `true` may be set)."""
    devices: tuple[Device, ...] = Field(
        default=(), max_length=MAX_DEVICES_PER_SLICE, json_schema_extra=crd(rules=[
            rule("self.all(d, self.exists_one(o, o.name == d.name))",
                 "devices[].name values must be unique within a slice (and within the whole "
                 "pool); rename one of the devices that share a name"),
            rule(f"size(self) <= {MAX_DEVICES_PER_SLICE_ADVANCED} || !self.exists(d, "
                 "has(d.taints) || has(d.consumesCounters) || (has(d.attributes) && "
                 f"d.attributes.exists(k, {_LIST_TYPED})))",
                 f"at most {MAX_DEVICES_PER_SLICE_ADVANCED} devices per slice when a device "
                 "has taints, consumes counters or has list-typed attributes")]))
    """The devices of this slice (some or all of the pool's). At most 128, or 64 when a device
    has taints, consumes counters or has list-typed attributes. Not together with
    `sharedCounters`."""
    shared_counters: tuple[CounterSet, ...] = Field(
        default=(), max_length=MAX_COUNTER_SETS, json_schema_extra=crd(rules=[rule(
            "self.all(c, self.exists_one(o, o.name == c.name))",
            "sharedCounters[].name values must be unique")]))
    """Counter sets of the pool that partitionable devices consume from (published in a slice
    of their own, without devices). At most 8, names unique. Devices of the pool that consume
    from a set the pool does not publish are never allocated."""

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


class ResourceSlice(APIObject):
    """A ResourceSlice is how a driver tells the cluster which devices exist: it lists some or
    all devices of one pool, with their attributes and capacities, and says which nodes can
    reach them. kdra's node agent publishes one pool per node (at most 128 devices per slice);
    the binder reads the slices to allocate claims; kdra garbage-collects slices whose node or
    agent is gone. Users normally only read them: `kubectl get kslice`."""

    kind: str = "ResourceSlice"
    spec: ResourceSliceSpec


def parse_slice(obj: Mapping[str, Any]) -> ResourceSlice:
    return parse(ResourceSlice, obj)


__all__ = [
    "ResourcePool",
    "ResourceSlice",
    "ResourceSliceSpec",
    "parse_slice",
]
