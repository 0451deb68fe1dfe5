"""``DeviceTaintRule`` (kdra group, upstream ``resource.k8s.io`` shape as of 1.36): an
administrator's taint on every device a selector matches — maintenance, a bad batch of GPUs —
with the same effect as if the driver had put it in the slice.

``spec.deviceSelector`` is ``{driver?, pool?, device?}``: every field given must equal the
device's; the empty selector matches every device; no selector matches none (upstream
tombstoned ``deviceClassName`` and ``selectors`` in 1.35, so they are not accepted here
either). ``spec.taint`` is one :class:`~kdra.dra.taints.Taint`.

``timeAdded``: upstream's API server fills it in on create and when the effect changes; kdra's
CRD cannot, so a rule without ``spec.taint.timeAdded`` counts from its
``metadata.creationTimestamp`` — write ``timeAdded`` when changing the effect of an existing
rule for tolerationSeconds to count from the change.

:class:`DeviceTaintRule` is the whole kind — spec and the status the operator writes — and
the source of its CRD schema (``crds/devicetaintrules.yaml``, ``python -m hack.crdgen``);
:func:`parse_rule` reads only the metadata and the spec.

Invariants:
- :func:`parse_rule` is total: any JSON gives a :class:`TaintRule` or InvalidObject naming
  the field (the CRD schema rejects the same at admission; this is the second line).
- Matching reads only names (driver, pool, device), never attributes: the eviction
  controller can decide it from an allocation result alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from kdra.dra.models.base import (
    DNS_LABEL,
    DNS_SUBDOMAIN,
    APIObject,
    ObjectMeta,
    StatusCondition,
    _Model,
    parse,
)
from kdra.dra.models.crd import LABEL_NAME, LABEL_VALUE, crd
from kdra.dra.taints import Taint

KIND = "DeviceTaintRule"


class _Selector(_Model):
    """Which devices the taint applies to: every field that is set must equal the device's.
    The empty selector `{}` matches every device; without a selector the rule matches none."""

    driver: str | None = Field(default=None, max_length=63, pattern=DNS_SUBDOMAIN.pattern,
                               json_schema_extra=crd(min_length=1))
    """Only devices of this driver (the slice's `spec.driver`)."""
    pool: str | None = Field(default=None, max_length=253, json_schema_extra=crd(min_length=1))
    """Only devices of this pool (kdra's agent names each node's pool after the node, so this
    selects a node's devices)."""
    device: str | None = Field(default=None, max_length=63, pattern=DNS_LABEL.pattern,
                               json_schema_extra=crd(min_length=1))
    """Only the device with this name (`spec.devices[].name` in the slice)."""


class _Taint(_Model):
    """The taint the matching devices get."""

    key: str = Field(min_length=1, max_length=316, json_schema_extra=crd(
        max_length=317, pattern=LABEL_NAME))
    """The taint key, a label name, e.g. `example.com/maintenance`."""
    value: str = Field(default="", max_length=63, pattern=LABEL_VALUE)
    """The taint value, a label value."""
    effect: str = Field(min_length=1, max_length=64, json_schema_extra=crd(
        enum=["None", "NoSchedule", "NoExecute"], minLength=None, maxLength=None))
    """`NoSchedule` (not allocated unless tolerated), `NoExecute` (also evicts pods that do not
    tolerate it) or `None` (informational)."""
    time_added: str | None = Field(default=None, json_schema_extra=crd(fmt="date-time",
                                                                       max_length=64))
    """When the taint counts from for tolerationSeconds (RFC 3339). Unset, the rule's
    creationTimestamp; set it when changing the effect of an existing rule."""


class _Spec(_Model):
    """Which devices, and the taint they get."""

    device_selector: _Selector | None = None
    taint: _Taint


class _MatchedDevice(_Model):
    driver: str = Field(json_schema_extra=crd(max_length=63))
    pool: str = Field(json_schema_extra=crd(max_length=253))
    device: str = Field(json_schema_extra=crd(max_length=63))


class _Status(_Model):
    """Written by kdra's operator."""

    # What kdra.operator.taint_eviction writes; nothing parses it.

    matched_devices: int | None = Field(default=None, json_schema_extra=crd(minimum=0,
                                                                            format=None))
    """How many published devices the rule matches now."""
    devices: tuple[_MatchedDevice, ...] = Field(default=(), json_schema_extra=crd(max_items=128))
    """The matched devices (at most 128 listed)."""
    conditions: tuple[StatusCondition, ...] = Field(default=(), json_schema_extra=crd(
        max_items=8, list_map_keys=["type"]))
    """`EvictionInProgress`: True while pods using matched devices still have to be evicted;
    the message counts pending and evicted pods."""


class DeviceTaintRule(APIObject):
    """A DeviceTaintRule adds one taint to every device its selector matches, exactly as if the
    driver had put the taint in the device's ResourceSlice: `NoSchedule` keeps new claims off
    the devices unless they tolerate it, `NoExecute` also evicts the pods using them (Eviction
    API, PodDisruptionBudgets respected) once their tolerationSeconds have passed, `None` only
    reports in the status what `NoExecute` would do."""

    # The whole kind: the source of its CRD schema (python -m hack.crdgen).
    kind: str = KIND
    spec: _Spec
    status: _Status = _Status()


class _Rule(_Model):
    # What parse_rule reads: the metadata and the spec (a status is the operator's to write
    # and never makes a rule unreadable).
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: _Spec


@dataclass(frozen=True, slots=True)
class TaintRule:
    name: str
    driver: str | None
    pool: str | None
    device: str | None
    selects: bool
    """False when the rule has no selector (it then matches nothing)."""
    taint: Taint

    def matches(self, driver: str, pool: str, device: str) -> bool:
        return self.selects and all(want is None or want == have for want, have in (
            (self.driver, driver), (self.pool, pool), (self.device, device)))


def parse_rule(obj: Mapping[str, Any]) -> TaintRule:
    """A DeviceTaintRule object as a :class:`TaintRule` (InvalidObject when malformed)."""
    rule = parse(_Rule, obj)
    selector = rule.spec.device_selector
    creation = (obj.get("metadata") or {}).get("creationTimestamp")
    taint = rule.spec.taint
    return TaintRule(
        name=rule.metadata.name or "",
        driver=selector.driver if selector else None,
        pool=selector.pool if selector else None,
        device=selector.device if selector else None,
        selects=selector is not None,
        taint=Taint(taint.key, taint.value, taint.effect,
                    taint.time_added or (creation if isinstance(creation, str) else None)),
    )


def rule_taints(rules: Iterable[TaintRule], driver: str, pool: str,
                device: str) -> list[Taint]:
    """The taints the rules put on one device, in rule order."""
    return [rule.taint for rule in rules if rule.matches(driver, pool, device)]


__all__ = ["KIND", "DeviceTaintRule", "TaintRule", "parse_rule", "rule_taints"]
