"""Typed models of ResourceClaims, ResourceClaimTemplates and DeviceClasses in kdra's storage
version ``resource.kdra.dev/v1`` — upstream ``resource.k8s.io/v1`` (Kubernetes 1.36) field for
field, plus kdra's ``status.allocatedDevices`` summary.

A request is ``{name, exactly}`` (one kind of device: class, selectors, count or All,
adminAccess, tolerations, capacity requests) or ``{name, firstAvailable: [...]}`` (up to 8
sub-requests tried in order; results name the chosen one ``<request>/<subrequest>``).
Constraints are ``matchAttribute`` or ``distinctAttribute``.

Invariants:
- Parsing enforces what the allocator relies on: exactly one of ``exactly`` /
  ``firstAvailable``, counts that agree with the allocation mode, unique request and
  sub-request names, constraint and config references to existing requests (``req`` or
  ``req/sub``), exactly one kind of constraint, upstream's list limits. The CRD schema
  enforces the same at admission; this is the second line for objects that bypassed it.
- A field kdra does not act on would be reported by :meth:`ResourceClaim.unsupported`
  instead of ignored; today every field is acted on: tolerations (issue 25), capacity
  requests (issue 26: the allocator's capacity module; quantities are checked there, bad
  ones refused naming the field).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal

from pydantic import Field, model_validator

from kdra.dra.models.base import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    MAX_ALLOCATION_CONFIGS,
    MAX_CONDITIONS,
    MAX_CONFIGS,
    MAX_CONSTRAINTS,
    MAX_DEVICE_STATUSES,
    MAX_REQUESTS,
    MAX_RESERVED_FOR,
    MAX_RESULTS,
    MAX_SELECTORS,
    MAX_SUBREQUESTS,
    MAX_TOLERATIONS,
    All,
    Condition,
    DeviceConfiguration,
    DeviceSelector,
    ExactCount,
    NodeSelector,
    ObjectMeta,
    OpaqueDeviceConfiguration,
    _Model,
    parse,
    qualified_name_problem,
)

# --------------------------------------------------------------------------- requests


class DeviceToleration(_Model):
    """Unset fields stay unset (None), so a toleration dumps back as it was written: an
    empty ``effect`` or ``key`` would not pass the allocation result's schema."""

    key: str | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


MAX_CAPACITY_REQUESTS = 32


class CapacityRequirements(_Model):
    requests: dict[str, str] | None = Field(default=None, max_length=MAX_CAPACITY_REQUESTS)
    """Capacity name → amount (a quantity string); at most 32, as the CRD schema says."""


class BaseDeviceRequest(_Model):
    """What ``exactly`` and a sub-request share: class, selectors, mode and count."""

    device_class_name: str = Field(pattern=DNS_SUBDOMAIN.pattern, max_length=253)
    selectors: tuple[DeviceSelector, ...] = Field(default=(), max_length=MAX_SELECTORS)
    allocation_mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int | None = None
    tolerations: tuple[DeviceToleration, ...] = Field(default=(), max_length=MAX_TOLERATIONS)
    capacity: CapacityRequirements | None = None

    @model_validator(mode="after")
    def _count_matches_mode(self) -> BaseDeviceRequest:
        if self.allocation_mode == All and self.count not in (None, 0):
            raise ValueError("count must not be set when allocationMode is All")
        if self.allocation_mode == ExactCount and self.count is not None and self.count <= 0:
            raise ValueError("count must be greater than zero")
        return self

    @property
    def exact_count(self) -> int:
        """Devices needed in ExactCount mode (count defaults to 1)."""
        return self.count or 1

    def unsupported(self) -> list[str]:
        """Fields kdra accepts but does not act on yet (see the allocator): none today."""
        return []


class ExactDeviceRequest(BaseDeviceRequest):
    admin_access: bool | None = None


class DeviceSubRequest(BaseDeviceRequest):
    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63)


class DeviceRequest(_Model):
    name: str = Field(pattern=DNS_LABEL.pattern, max_length=63)
    exactly: ExactDeviceRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = Field(default=(),
                                                          max_length=MAX_SUBREQUESTS)

    @model_validator(mode="after")
    def _one_kind(self) -> DeviceRequest:
        if (self.exactly is None) == (not self.first_available):
            raise ValueError("exactly one of `exactly` or `firstAvailable` must be set")
        names = [sub.name for sub in self.first_available]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate sub-request names: {', '.join(duplicates)}")
        return self

    @property
    def admin_access(self) -> bool:
        return bool(self.exactly is not None and self.exactly.admin_access)

    def alternatives(self) -> Iterator[tuple[str, BaseDeviceRequest]]:
        """``(result name, what is asked)`` in the order to try: the request itself, or each
        sub-request as ``<request>/<subrequest>``."""
        if self.exactly is not None:
            yield self.name, self.exactly
        for sub in self.first_available:
            yield f"{self.name}/{sub.name}", sub


class DeviceConstraint(_Model):
    requests: tuple[str, ...] = Field(default=(), max_length=MAX_REQUESTS)
    match_attribute: str | None = None
    distinct_attribute: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> DeviceConstraint:
        kinds = [name for name in (self.match_attribute, self.distinct_attribute) if name]
        if len(kinds) != 1:
            raise ValueError("exactly one of matchAttribute or distinctAttribute must be set")
        problem = qualified_name_problem(kinds[0], fully=True)
        if problem:
            raise ValueError(problem)
        return self

    @property
    def attribute(self) -> str:
        return self.match_attribute or self.distinct_attribute or ""

    @property
    def distinct(self) -> bool:
        return self.distinct_attribute is not None


class DeviceClaimConfiguration(DeviceConfiguration):
    requests: tuple[str, ...] = Field(default=(), max_length=MAX_REQUESTS)


class DeviceClaim(_Model):
    requests: tuple[DeviceRequest, ...] = Field(default=(), max_length=MAX_REQUESTS)
    constraints: tuple[DeviceConstraint, ...] = Field(default=(), max_length=MAX_CONSTRAINTS)
    config: tuple[DeviceClaimConfiguration, ...] = Field(default=(), max_length=MAX_CONFIGS)

    @model_validator(mode="after")
    def _request_names(self) -> DeviceClaim:
        names = [request.name for request in self.requests]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate request names: {', '.join(duplicates)}")
        known = self.reference_names()
        named: tuple[tuple[str, tuple[DeviceConstraint | DeviceClaimConfiguration, ...]], ...] = (
            ("constraints", self.constraints), ("config", self.config))
        for kind, entries in named:
            for index, entry in enumerate(entries):
                unknown = [name for name in entry.requests if name not in known]
                if unknown:
                    raise ValueError(
                        f"{kind}[{index}].requests names unknown request(s) "
                        f"{', '.join(unknown)}; known: {', '.join(sorted(known)) or 'none'}"
                    )
        return self

    def reference_names(self) -> frozenset[str]:
        """What constraints and config may name: every request, and ``<request>/<sub>``
        for each sub-request."""
        names = {request.name for request in self.requests}
        names.update(f"{r.name}/{s.name}" for r in self.requests for s in r.first_available)
        return frozenset(names)


class ResourceClaimSpec(_Model):
    devices: DeviceClaim = DeviceClaim()


# --------------------------------------------------------------------------- status


class DeviceRequestAllocationResult(_Model):
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: tuple[DeviceToleration, ...] = ()
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    share_id: str | None = Field(default=None, alias="shareID")
    consumed_capacity: dict[str, str] | None = None


class DeviceAllocationConfiguration(DeviceConfiguration):
    source: Literal["FromClass", "FromClaim"]
    requests: tuple[str, ...] = ()


class DeviceAllocationResult(_Model):
    results: tuple[DeviceRequestAllocationResult, ...] = Field(default=(), max_length=MAX_RESULTS)
    config: tuple[DeviceAllocationConfiguration, ...] = Field(
        default=(), max_length=MAX_ALLOCATION_CONFIGS
    )


class AllocationResult(_Model):
    devices: DeviceAllocationResult = DeviceAllocationResult()
    node_selector: NodeSelector | None = None
    allocation_timestamp: str | None = None


class ResourceClaimConsumerReference(_Model):
    api_group: str = ""
    resource: str
    name: str
    uid: str


class NetworkDeviceData(_Model):
    interface_name: str | None = None
    ips: tuple[str, ...] = ()
    hardware_address: str | None = None


class AllocatedDeviceStatus(_Model):
    driver: str
    pool: str
    device: str
    share_id: str | None = Field(default=None, alias="shareID")
    conditions: tuple[Condition, ...] = Field(default=(), max_length=MAX_CONDITIONS)
    data: dict[str, Any] | None = None
    network_data: NetworkDeviceData | None = None

    def condition(self, type_: str) -> Condition | None:
        return next((c for c in self.conditions if c.type == type_), None)


class ResourceClaimStatus(_Model):
    allocation: AllocationResult | None = None
    reserved_for: tuple[ResourceClaimConsumerReference, ...] = Field(
        default=(), max_length=MAX_RESERVED_FOR
    )
    devices: tuple[AllocatedDeviceStatus, ...] = Field(default=(), max_length=MAX_DEVICE_STATUSES)
    allocated_devices: str | None = None
    """kdra's summary of the allocation for ``kubectl get kclaim`` (written with it)."""

    @model_validator(mode="after")
    def _reserved_needs_allocation(self) -> ResourceClaimStatus:
        if self.reserved_for and self.allocation is None:
            raise ValueError("reservedFor must be empty while the claim is not allocated")
        return self


class ResourceClaim(_Model):
    api_version: str = ""
    kind: str = "ResourceClaim"
    metadata: ObjectMeta
    spec: ResourceClaimSpec = ResourceClaimSpec()
    status: ResourceClaimStatus = ResourceClaimStatus()

    @property
    def key(self) -> str:
        """``namespace/name`` — how kdra refers to a claim in messages and indexes."""
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def allocated(self) -> bool:
        return self.status.allocation is not None

    def unsupported(self) -> list[str]:
        """``field: feature`` for each field kdra accepts but does not act on yet (empty
        when the claim uses none): the allocator refuses such claims with this text rather
        than ignoring what the user asked for."""
        found = []
        for i, request in enumerate(self.spec.devices.requests):
            if request.exactly is not None:
                found += [f"spec.devices.requests[{i}].exactly.{field}"
                          for field in request.exactly.unsupported()]
            for j, sub in enumerate(request.first_available):
                found += [f"spec.devices.requests[{i}].firstAvailable[{j}].{field}"
                          for field in sub.unsupported()]
        return found


# --------------------------------------------------------------------------- templates


class TemplateMeta(_Model):
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class ResourceClaimTemplateSpec(_Model):
    metadata: TemplateMeta = TemplateMeta()
    spec: ResourceClaimSpec = ResourceClaimSpec()


class ResourceClaimTemplate(_Model):
    api_version: str = ""
    kind: str = "ResourceClaimTemplate"
    metadata: ObjectMeta
    spec: ResourceClaimTemplateSpec = ResourceClaimTemplateSpec()


# --------------------------------------------------------------------------- DeviceClass


class DeviceClassConfiguration(DeviceConfiguration):
    pass


class DeviceClassSpec(_Model):
    selectors: tuple[DeviceSelector, ...] = Field(default=(), max_length=MAX_SELECTORS)
    config: tuple[DeviceClassConfiguration, ...] = Field(default=(), max_length=MAX_CONFIGS)
    extended_resource_name: str | None = None


class DeviceClass(_Model):
    api_version: str = ""
    kind: str = "DeviceClass"
    metadata: ObjectMeta
    spec: DeviceClassSpec = DeviceClassSpec()


# --------------------------------------------------------------------------- parsing


def parse_claim(obj: Mapping[str, Any]) -> ResourceClaim:
    return parse(ResourceClaim, obj)


def parse_template(obj: Mapping[str, Any]) -> ResourceClaimTemplate:
    return parse(ResourceClaimTemplate, obj)


def parse_class(obj: Mapping[str, Any]) -> DeviceClass:
    return parse(DeviceClass, obj)


__all__ = [
    "AllocatedDeviceStatus",
    "AllocationResult",
    "BaseDeviceRequest",
    "CapacityRequirements",
    "DeviceAllocationConfiguration",
    "DeviceAllocationResult",
    "DeviceClaim",
    "DeviceClaimConfiguration",
    "DeviceClass",
    "DeviceClassConfiguration",
    "DeviceClassSpec",
    "DeviceConstraint",
    "DeviceRequest",
    "DeviceRequestAllocationResult",
    "DeviceSubRequest",
    "DeviceToleration",
    "ExactDeviceRequest",
    "NetworkDeviceData",
    "OpaqueDeviceConfiguration",
    "ResourceClaim",
    "ResourceClaimConsumerReference",
    "ResourceClaimSpec",
    "ResourceClaimStatus",
    "ResourceClaimTemplate",
    "ResourceClaimTemplateSpec",
    "TemplateMeta",
    "parse_claim",
    "parse_class",
    "parse_template",
]
