"""The binder's DeviceQuota check for ``kubectl kdra why`` (issue 41): a node the pod fits on
is no fit if its namespace's DeviceQuotas refuse that node's allocation — ``why`` said "Fits
now on 2 node(s)" while kdra-scheduler held the pod with ``DeviceQuotaExceeded``.

:func:`quota_denials` takes the placements the allocator found and answers, per node, the
denial the binder would give (:func:`kdra.dra.quota.allocation_denial`, the binder's own check:
what the namespace's allocated claims hold, each once, plus what the placement would charge).
What ``why`` cannot see, the binder's allocations in flight, is not counted: the binder may
refuse a placement ``why`` admits a moment before it is written.

Invariants:
- Pure, and total: a DeviceQuota or claim that cannot be parsed limits (or holds) nothing and
  is named in a note, as the binder leaves it out.
- No quotas (or none readable): no denial, and no work done.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kdra.dra.allocator import Placement
from kdra.dra.errors import InvalidObject
from kdra.dra.models import ResourceClaim, parse_claim
from kdra.dra.quota import (
    Denial,
    DeviceQuota,
    allocation_denial,
    namespace_charge,
    parse_quota,
    slice_facts,
)

__all__ = ["QUOTA_HINT", "quota_denials"]

JSON = Mapping[str, Any]
QUOTA_HINT = ("DeviceQuotaExceeded: a DeviceQuota of the pod's namespace refuses the devices "
              "the pod would get (kubectl get kdevicequota -n NAMESPACE shows used / hard); "
              "kdra-scheduler retries when a claim of the namespace is released or the quota "
              "raised.")
"""What ``DeviceQuotaExceeded`` means and what to do (in the explanation's hints)."""


def quota_denials(namespace: str, quotas: Iterable[JSON], claims: Iterable[JSON],
                  slices: Iterable[JSON], unallocated: Sequence[ResourceClaim],
                  placements: Mapping[str, Placement],
                  notes: list[str]) -> dict[str, Denial]:
    """Node → the denial the binder would give the pod's ``unallocated`` claims placed there
    (nodes whose placement fits every quota are left out)."""
    parsed: list[DeviceQuota] = []
    for raw in quotas:
        try:
            quota = parse_quota(raw)
        except InvalidObject as exc:
            notes.append(f"DeviceQuota {_name(raw)!r} is invalid and limits nothing: {exc}")
            continue
        if quota.namespace == namespace:
            parsed.append(quota)
    if not parsed or not placements:
        return {}
    facts = slice_facts(slices)
    held: list[ResourceClaim] = []
    for raw in claims:
        meta = raw.get("metadata")
        if not isinstance(meta, Mapping) or meta.get("namespace") != namespace:
            continue
        try:
            held.append(parse_claim(raw))
        except InvalidObject:
            continue  # holds nothing the binder would count either
    used = namespace_charge(held, facts)
    denials = {}
    for node, placement in placements.items():
        denial = allocation_denial(parsed, used, unallocated, placement.results, facts)
        if denial is not None:
            denials[node] = denial
    return denials


def _name(raw: JSON) -> str:
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        return "?"
    return f"{meta.get('namespace')}/{meta.get('name')}"
