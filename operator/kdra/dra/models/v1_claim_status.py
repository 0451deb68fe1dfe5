"""Typed model of a ResourceClaim's ``status`` in kdra's storage version
``resource.kdra.dev/v1`` — upstream ``resource.k8s.io/v1`` (Kubernetes 1.36) field for field,
plus kdra's ``allocatedDevices`` summary. These classes are the source of the CRD schema's
``status`` (:mod:`kdra.dra.models.crd`).

Invariants:
- ``reservedFor`` is empty while the claim is not allocated (parsing refuses it, as the CRD's
  rule does at admission).
- The allocation is written whole and never changed in place: the schema makes
  ``status.allocation`` immutable once set (deallocate, then allocate anew).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from kdra.dra.models.base import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    MAX_ALLOCATION_CONFIGS,
    MAX_CONDITIONS,
    MAX_DEVICE_STATUSES,
    MAX_REQUESTS,
    MAX_RESERVED_FOR,
    MAX_RESULTS,
    MAX_TOLERATIONS,
    Condition,
    DeviceConfiguration,
    NodeSelector,
    _Model,
)
from kdra.dra.models.crd import (
    CONDITION_TYPE,
    POOL_NAME,
    REQUEST_REF,
    UUID,
    crd,
    crd_object,
    immutable,
    item,
    qualified_keys,
    quantity,
    rule,
)
from kdra.dra.models.v1_claim_spec import DeviceToleration

_DRIVER = crd(min_length=1, max_length=63, pattern=DNS_SUBDOMAIN.pattern)
_POOL = crd(min_length=1, max_length=253, pattern=POOL_NAME)
_DEVICE = crd(min_length=1, max_length=63, pattern=DNS_LABEL.pattern)
_SHARE_ID = crd(max_length=36, pattern=UUID)
ConditionType = Annotated[str, item("A condition type.", max_length=316, pattern=CONDITION_TYPE)]


class DeviceRequestAllocationResult(_Model):
    """One allocated device: which request it serves and where it lives. The triple
    driver/pool/device names the device uniquely in the cluster."""

    request: str = Field(json_schema_extra=crd(min_length=1, max_length=127,
                                                pattern=REQUEST_REF))
    """Name of the request in `spec.devices.requests` this device was allocated for;
    `<request>/<subrequest>` when the request is a `firstAvailable` list (naming the
    alternative that was chosen)."""
    driver: str = Field(json_schema_extra=_DRIVER)
    """Name of the driver that publishes the device (the ResourceSlice's `spec.driver`); it is
    also the driver that prepares it on the node."""
    pool: str = Field(json_schema_extra=_POOL)
    """Name of the pool the device belongs to (the ResourceSlice's `spec.pool.name`; for
    node-local drivers usually the node name)."""
    device: str = Field(json_schema_extra=_DEVICE)
    """Name of the device within its pool (the ResourceSlice's `spec.devices[].name`)."""
    admin_access: bool | None = None
    """True when the device was allocated with administrative access (the request's
    `adminAccess`): it does not count as in use for other claims."""
    tolerations: tuple[DeviceToleration, ...] = Field(
        default=(), json_schema_extra=crd(max_items=MAX_TOLERATIONS))
    """The request's tolerations at allocation time. At most 16."""
    binding_conditions: tuple[ConditionType, ...] = Field(default=(),
                                                          json_schema_extra=crd(max_items=4))
    """Conditions (copied from the device) that must be True in `status.devices` before the
    pod may bind. At most 4."""
    binding_failure_conditions: tuple[ConditionType, ...] = Field(
        default=(), json_schema_extra=crd(max_items=4))
    """Conditions (copied from the device) that, when True, make binding fail. At most 4."""
    share_id: str | None = Field(default=None, alias="shareID", json_schema_extra=_SHARE_ID)
    """Identifies this allocation of a device that allows multiple allocations (a UUID)."""
    consumed_capacity: dict[str, Annotated[str, quantity("An amount.")]] | None = Field(
        default=None, json_schema_extra=crd(max_properties=32, rules=[
            qualified_keys("capacity", "memory")]))
    """How much of each capacity this allocation consumes (devices that allow multiple
    allocations)."""


class DeviceAllocationConfiguration(DeviceConfiguration):
    """One piece of configuration for the allocated devices, copied from the DeviceClass or
    from the claim at allocation time."""

    source: Literal["FromClass", "FromClaim"] = Field(json_schema_extra=crd(max_length=16))
    """Where the entry came from: `FromClass` (a DeviceClass used by one of the requests) or
    `FromClaim` (the claim's own `spec.devices.config`). Drivers apply class entries first, so
    claim entries can override them."""
    requests: tuple[Annotated[str, item(
        "A request name, or `<request>/<subrequest>`.", min_length=1, max_length=127,
        pattern=REQUEST_REF)], ...] = Field(default=(),
                                            json_schema_extra=crd(max_items=MAX_REQUESTS))
    """Names of the requests (or `<request>/<subrequest>`) the entry applies to; empty means
    all requests of the claim."""


class DeviceAllocationResult(_Model):
    """The allocated devices and their configuration."""

    results: tuple[DeviceRequestAllocationResult, ...] = Field(default=(), max_length=MAX_RESULTS)
    """One entry per allocated device. At most 32."""
    config: tuple[DeviceAllocationConfiguration, ...] = Field(
        default=(), max_length=MAX_ALLOCATION_CONFIGS
    )
    """Configuration for the allocated devices, in the order drivers should apply it: class
    entries first, then claim entries. At most 64."""


class AllocationResult(_Model):
    """The outcome of allocation: which devices the claim got, their configuration, and which
    nodes can use them. Written by kdra's binder, never by users. Once set it cannot be
    changed, only removed again (deallocation) and then set anew."""

    devices: DeviceAllocationResult = DeviceAllocationResult()
    node_selector: NodeSelector | None = None
    """The nodes on which the allocated devices are reachable; a pod using the claim must run
    on one of them. For node-local devices this is a single `matchFields` term naming the
    node. Unset means every node."""
    allocation_timestamp: str | None = Field(default=None, json_schema_extra=crd(
        fmt="date-time", max_length=64))
    """When the devices were allocated (RFC 3339); may be unset."""


class ResourceClaimConsumerReference(_Model):
    """A reference to one consumer of the claim."""

    api_group: str = Field(default="", json_schema_extra=crd(max_length=253))
    """API group of the consumer; empty for core objects such as pods."""
    resource: str = Field(json_schema_extra=crd(min_length=1, max_length=253))
    """Resource type of the consumer, in plural lower case (`pods`)."""
    name: str = Field(json_schema_extra=crd(min_length=1, max_length=253))
    """Name of the consumer (same namespace as the claim)."""
    uid: str = Field(json_schema_extra=crd(min_length=1, max_length=128))
    """UID of the consumer, which tells apart two objects that had the same name at different
    times."""


class NetworkDeviceData(_Model):
    """Network settings of the device, for devices that are network interfaces."""

    interface_name: str | None = Field(default=None, json_schema_extra=crd(max_length=256))
    """Name of the interface inside the pod (for example `eth1`)."""
    ips: tuple[Annotated[str, item("One address with prefix length.", max_length=64)], ...] = (
        Field(default=(), json_schema_extra=crd(max_items=16)))
    """Addresses of the interface in CIDR notation (`192.0.2.5/24`, `2001:db8::5/64`). At most
    16."""
    hardware_address: str | None = Field(default=None, json_schema_extra=crd(max_length=128))
    """Hardware (MAC) address of the interface."""


class AllocatedDeviceStatus(_Model):
    """What the driver reports about one allocated device (KEP-4817). kdra's node agent writes
    an entry with a `Ready` condition once it has prepared the device; the binder waits for
    that before binding the pod."""

    driver: str = Field(json_schema_extra=_DRIVER)
    """Driver of the device; together with `pool` and `device` it must match one of
    `status.allocation.devices.results`."""
    pool: str = Field(json_schema_extra=_POOL)
    """Pool of the device."""
    device: str = Field(json_schema_extra=_DEVICE)
    """Name of the device within its pool."""
    share_id: str | None = Field(default=None, alias="shareID", json_schema_extra=_SHARE_ID)
    """For a device that allows multiple allocations: which allocation of it this entry
    describes (the result's `shareID`)."""
    conditions: tuple[Condition, ...] = Field(default=(), max_length=MAX_CONDITIONS,
                                              json_schema_extra=crd(list_map_keys=["type"]))
    """Conditions of the device, keyed by `type` (for example `Ready`). At most 8."""
    data: dict[str, Any] | None = None
    """Driver-specific details about the prepared device, any JSON object (kdra's GPU agent
    puts the GPU UUID and the CDI device names here). Keep it under 10 KiB; the schema cannot
    enforce that."""
    network_data: NetworkDeviceData | None = None

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class ResourceClaimStatus(_Model):
    """The current state of the claim: whether it is allocated, to which devices, who uses it,
    and what the drivers report about the devices. Written by kdra (binder, claim controller,
    node agents) through the status subresource."""

    model_config = crd_object(rules=[
        rule("!has(self.reservedFor) || size(self.reservedFor) == 0 || has(self.allocation)",
             "status.reservedFor may only be set while status.allocation is set; allocate the "
             "claim first (or clear reservedFor before clearing the allocation)",
             field_path=".reservedFor"),
        rule("!has(self.allocatedDevices) || has(self.allocation)",
             "status.allocatedDevices summarises status.allocation and may only be set with "
             "it; clear both together", field_path=".allocatedDevices"),
        rule("!has(self.devices) || size(self.devices) == 0 || (has(self.allocation) && "
             "has(self.allocation.devices) && has(self.allocation.devices.results) && "
             "self.devices.all(d, self.allocation.devices.results.exists(r, r.driver == "
             "d.driver && r.pool == d.pool && r.device == d.device)))",
             "every status.devices entry must be for a device in "
             "status.allocation.devices.results (as upstream requires); a driver reports only "
             "on devices allocated to the claim", field_path=".devices"),
    ])

    allocation: AllocationResult | None = Field(default=None, json_schema_extra=crd(rules=[
        immutable("status.allocation cannot be modified once set; clear it (deallocate) in one "
                  "update and set the new allocation in another")]))
    reserved_for: tuple[ResourceClaimConsumerReference, ...] = Field(
        default=(), max_length=MAX_RESERVED_FOR, json_schema_extra=crd(list_map_keys=["uid"])
    )
    """The objects (normally pods) currently allowed to use the allocated devices. kdra's
    binder adds a pod just before binding it; the claim controller removes pods that have
    finished or are gone, and clears the allocation when the list becomes empty. A claim can
    only be reserved while it is allocated. Keyed by `uid`; at most 256 entries."""
    devices: tuple[AllocatedDeviceStatus, ...] = Field(
        default=(), max_length=MAX_DEVICE_STATUSES,
        json_schema_extra=crd(list_map_keys=["driver", "pool", "device"]))
    """Per-device status reported by drivers, one entry per allocated device at most, keyed by
    driver, pool and device. At most 32."""
    allocated_devices: str | None = Field(default=None, json_schema_extra=crd(max_length=2048))
    """kdra's summary of the allocation for `kubectl get`: the names of every allocated device,
    comma-separated (e.g. `gpu-8,gpu-9`). Written together with `allocation` and cleared with
    it; not part of upstream's API, and never read by kdra's decisions."""

    @model_validator(mode="after")
    def _reserved_needs_allocation(self) -> ResourceClaimStatus:
        if self.reserved_for and self.allocation is None:
            raise ValueError("reservedFor must be empty while the claim is not allocated")
        return self


__all__ = [
    "AllocatedDeviceStatus",
    "AllocationResult",
    "DeviceAllocationConfiguration",
    "DeviceAllocationResult",
    "DeviceRequestAllocationResult",
    "NetworkDeviceData",
    "ResourceClaimConsumerReference",
    "ResourceClaimStatus",
]
