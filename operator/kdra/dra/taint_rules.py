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

from kdra.dra.models.base import DNS_LABEL, DNS_SUBDOMAIN, ObjectMeta, _Model, parse
from kdra.dra.taints import Taint

KIND = "DeviceTaintRule"


class _Selector(_Model):
    driver: str | None = Field(default=None, max_length=63, pattern=DNS_SUBDOMAIN.pattern)
    pool: str | None = Field(default=None, max_length=253)
    device: str | None = Field(default=None, max_length=63, pattern=DNS_LABEL.pattern)


class _Taint(_Model):
    key: str = Field(min_length=1, max_length=316)
    value: str = Field(default="", max_length=63,
                       pattern=r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
    effect: str = Field(min_length=1, max_length=64)
    time_added: str | None = None


class _Spec(_Model):
    device_selector: _Selector | None = None
    taint: _Taint


class _Rule(_Model):
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


__all__ = ["KIND", "TaintRule", "parse_rule", "rule_taints"]
