"""The DeviceQuota kind (``resource.kdra.dev/v1alpha1``, namespaced): its model — what
:func:`kdra.operator.core.quota.parse_quota` reads (:class:`QuotaSpec` under ``spec``) and, as
:class:`DeviceQuotaKind`, the whole kind with the status the operator writes: the source of
its CRD schema (``crds/devicequotas.yaml``, written by ``python -m hack.crdgen``;
:mod:`kdra.dra.models.crd` says how).

Invariants:
- Parsing reads only the metadata and the spec (:class:`QuotaObject`): the status is the
  operator's to write and never makes a quota unreadable.
- Amounts are quantities and never negative (the schema's pattern has no ``-``; the parser
  refuses one naming the field).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from kdra.dra.models.base import DNS_SUBDOMAIN, APIObject, ObjectMeta, StatusCondition, _Model
from kdra.dra.models.crd import crd

KIND = "DeviceQuota"
MAX_LIMITS = 32
"""Limits per DeviceQuota (one per device class)."""
MAX_RESOURCES = 16
"""Capacity (and counter) names per limit."""
MAX_SUMMARY = 4000
"""Characters of the status's summary lines (the CRD allows 4096)."""

_AMOUNT = crd(pattern=r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
                      r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
Amount = Annotated[str | int, Field(json_schema_extra=_AMOUNT)]
"""A quantity that is not negative: an integer or a string such as ``80Gi``."""


class QuotaLimit(_Model):
    device_class_name: str = Field(pattern=DNS_SUBDOMAIN.pattern, max_length=253,
                                   json_schema_extra=crd(min_length=1))
    """The DeviceClass whose devices this limits (a device counts under the class of the
    request, or firstAvailable sub-request, it was allocated for)."""
    devices: int | None = Field(default=None, ge=0, json_schema_extra=crd(
        maximum=1000000, format=None))
    """How many devices of the class the namespace's claims may hold (admin-access results hold
    none). Unset, not limited."""
    capacity: dict[str, Amount] = Field(default_factory=dict, max_length=MAX_RESOURCES)
    """Capacity name (as devices publish it, without the driver's domain: `memory` for kdra's
    GPUs) to the most the held devices may have together; a device shared through consumable
    capacity counts what its result consumed."""
    counters: dict[str, Amount] = Field(default_factory=dict, max_length=MAX_RESOURCES)
    """Counter name (of a partitionable device's consumesCounters, summed over its counter
    sets) to the most the held devices may consume together."""


class QuotaSpec(_Model):
    """The limits, one per device class."""

    limits: tuple[QuotaLimit, ...] = Field(default=(), max_length=MAX_LIMITS, json_schema_extra=crd(
        required=True, list_map_keys=["deviceClassName"]))
    """At most one entry per device class; classes not listed are not limited."""


class QuotaObject(_Model):
    # What parse_quota reads: the metadata and the spec.
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: QuotaSpec = QuotaSpec()


QuotaObject.__name__ = KIND  # errors name the kind: "DeviceQuota team-a/gpus: spec.limits[0]..."



def _used_amounts() -> Any:
    return Field(default_factory=dict, json_schema_extra=crd(
        max_properties=MAX_RESOURCES, additionalProperties={"maxLength": 64}))


class QuotaUsage(_Model):
    device_class_name: str = Field(json_schema_extra=crd(max_length=253))
    devices: int | None = Field(default=None, json_schema_extra=crd(minimum=0, format=None))
    capacity: dict[str, str] = _used_amounts()
    counters: dict[str, str] = _used_amounts()


class QuotaStatus(_Model):
    """Written by kdra's operator."""

    # What kdra.operator.core.quota.quota_status builds; nothing parses it.
    used: tuple[QuotaUsage, ...] = Field(default=(), json_schema_extra=crd(max_items=MAX_LIMITS))
    """Per limited class, what the namespace's claims hold of what the quota limits
    (allocations being written included)."""
    used_summary: str | None = Field(default=None, json_schema_extra=crd(max_length=4096))
    """The usage as one line (the Used column)."""
    hard_summary: str | None = Field(default=None, json_schema_extra=crd(max_length=4096))
    """The limits as one line (the Hard column)."""
    conditions: tuple[StatusCondition, ...] = Field(default=(), json_schema_extra=crd(
        max_items=8, list_map_keys=["type"]))
    """`Exceeded`: True while usage is above a limit (after the quota was lowered: what is
    allocated stays, new allocations of that class wait); Unknown when the spec cannot be read
    (the message says why; the quota then limits nothing)."""


class DeviceQuotaKind(APIObject):
    """A DeviceQuota limits what the allocated ResourceClaims of its namespace hold together,
    per device class: devices, sums of device capacity and of consumed counters. Every
    DeviceQuota of a namespace applies. kdra's binder checks them when it allocates: a pod
    whose allocation would exceed one stays pending (PodScheduled=False, reason
    DeviceQuotaExceeded, the message naming the quota, the class and used + asked > hard)
    until usage drops or the quota is raised. A claim counts once however many pods use it,
    from allocation until it is deallocated."""

    api_version: str = ""
    """Version of the schema this object uses (`resource.kdra.dev/v1alpha1`)."""
    kind: str = KIND
    spec: QuotaSpec = Field(default=QuotaSpec(), json_schema_extra=crd(required=True))
    status: QuotaStatus = QuotaStatus()


__all__ = [
    "KIND",
    "MAX_LIMITS",
    "MAX_RESOURCES",
    "MAX_SUMMARY",
    "Amount",
    "DeviceQuotaKind",
    "QuotaLimit",
    "QuotaObject",
    "QuotaSpec",
    "QuotaStatus",
    "QuotaUsage",
]
