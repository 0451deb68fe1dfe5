"""Turning the devices picked for a claim into its ``AllocationResult``.

- ``devices.results``: one entry per picked device, in pick order (requests in spec order,
  devices in walk order), named after the request — ``<request>/<subrequest>`` for the
  chosen alternative of a ``firstAvailable`` request — with ``adminAccess: true`` for
  admin-access requests; a share of a device that allows multiple allocations carries a
  ``shareID`` (:func:`share_id`) and its ``consumedCapacity`` (every capacity of the
  device, named as the device publishes it).
- ``devices.config``: first the DeviceClass configs (``FromClass``) — each class's entries
  once, in the order its requests appear, with ``requests`` naming every request of the claim
  that uses the class (the chosen alternative's name); then each claim config (``FromClaim``)
  once, keeping its ``requests`` verbatim (empty: every request) — except one that names
  only alternatives that were not chosen. (Upstream appends a claim config once per request
  it names; kdra writes it once: docs/api-versions.md, "Where kdra differs".)
- ``nodeSelector`` (upstream's createNodeSelector): a picked device's node selection is its
  slice's, or with ``perDeviceNodeSelection`` the device's own. If any picked device has a
  ``nodeName``, or ``bindsToNode``, one term ``matchFields metadata.name In [<the node
  allocated for>]``; otherwise the union (without repeats) of the requirements of the
  picked devices' single ``nodeSelector`` terms, as one term; ``allNodes`` adds nothing;
  nothing at all → ``None`` (usable on every node).
- A result copies its device's ``bindingConditions`` and ``bindingFailureConditions`` (the
  binder waits for them before binding the pod); a share's ``consumedCapacity`` is left
  unset when the device has no capacity, as upstream.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Literal, NamedTuple

from kdra.dra.allocator.capacity import fmt
from kdra.dra.allocator.nodeselector import node_name_selector
from kdra.dra.allocator.pools import DeviceEntry
from kdra.dra.models import (
    AllocationResult,
    Device,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    NodeSelector,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    OpaqueDeviceConfiguration,
)

if TYPE_CHECKING:
    from kdra.dra.allocator.prepared import PreparedClaim, PreparedRequest


class Pick(NamedTuple):
    """One device picked for one request."""

    request: PreparedRequest
    entry: DeviceEntry
    consumed: Mapping[str, Decimal] | None = None
    """What the ledger recorded (:meth:`~.ledger.Ledger.admit`; None: not through it)."""


def share_id(claim: PreparedClaim, position: int, pick: Pick) -> str:
    """The ``shareID`` of the ``position``-th result: a UUID derived from the claim's uid
    (its key when it has none), the position and the device — unique per device among live
    allocations (a claim has one allocation at a time), and the same when the same search is
    repeated."""
    metadata = claim.claim.metadata
    seed = f"{metadata.uid or claim.key}/{position}/{pick.entry.id}"
    return str(uuid.UUID(bytes=hashlib.sha256(seed.encode()).digest()[:16], version=4))


def _consumed(pick: Pick) -> dict[str, str] | None:
    if not pick.entry.shared or not pick.consumed:
        return None
    formats = {spec.name: spec.format for spec in pick.entry.capacities}
    return {name: fmt(amount, formats[name]) for name, amount in sorted(pick.consumed.items())}


def build_result(claim: PreparedClaim, picks: Sequence[Pick], node: str) -> AllocationResult:
    """The claim's AllocationResult from its picks on ``node`` (the node allocated for)."""
    results = tuple(
        DeviceRequestAllocationResult(
            request=pick.request.name,
            driver=pick.entry.id.driver,
            pool=pick.entry.id.pool,
            device=pick.entry.id.device,
            admin_access=True if pick.request.admin_access else None,
            tolerations=pick.request.tolerations,
            binding_conditions=(device := _device(pick)).binding_conditions,
            binding_failure_conditions=device.binding_failure_conditions,
            share_id=share_id(claim, position, pick) if pick.entry.shared and not
            pick.request.admin_access else None,
            consumed_capacity=_consumed(pick),
        )
        for position, pick in enumerate(picks)
    )
    return AllocationResult(
        devices=DeviceAllocationResult(results=results, config=_configs(claim)),
        node_selector=_node_selector(picks, node),
    )


def _device(pick: Pick) -> Device:
    return pick.entry.slice.spec.devices[pick.entry.index]


def _configs(claim: PreparedClaim) -> tuple[DeviceAllocationConfiguration, ...]:
    entries: list[tuple[Literal["FromClass", "FromClaim"], list[str], OpaqueDeviceConfiguration]]
    entries = []
    by_class: dict[str, range] = {}
    for request in claim.requests:
        seen = by_class.get(request.class_name)
        if seen is not None:
            for index in seen:
                entries[index][1].append(request.name)
            continue
        start = len(entries)
        for config in request.device_class.spec.config:
            entries.append(("FromClass", [request.name], config.opaque))
        by_class[request.class_name] = range(start, len(entries))
    chosen = {name for request in claim.requests for name in (request.name, request.parent)}
    for claim_config in claim.claim.spec.devices.config:
        if claim_config.requests and chosen.isdisjoint(claim_config.requests):
            continue  # only for alternatives that were not chosen
        entries.append(("FromClaim", list(claim_config.requests), claim_config.opaque))
    return tuple(
        DeviceAllocationConfiguration(source=source, requests=tuple(requests), opaque=opaque)
        for source, requests, opaque in entries
    )


def _node_selector(picks: Sequence[Pick], node: str) -> NodeSelector | None:
    fields: list[NodeSelectorRequirement] = []
    expressions: list[NodeSelectorRequirement] = []
    for pick in picks:
        spec = pick.entry.slice.spec
        device = _device(pick)
        node_name, selector = ((device.node_name, device.node_selector)
                               if spec.per_device_node_selection
                               else (spec.node_name, spec.node_selector))
        if node_name or device.binds_to_node:
            return node_name_selector(node)
        if selector is not None and selector.node_selector_terms:
            term = selector.node_selector_terms[0]
            _merge(term.match_fields, fields)
            _merge(term.match_expressions, expressions)
    if not fields and not expressions:
        return None
    term = NodeSelectorTerm(match_expressions=tuple(expressions), match_fields=tuple(fields))
    return NodeSelector(node_selector_terms=(term,))


def _merge(new: Sequence[NodeSelectorRequirement], into: list[NodeSelectorRequirement]) -> None:
    for requirement in new:
        values = set(requirement.values)
        if not any(
            have.key == requirement.key
            and have.operator == requirement.operator
            and set(have.values) == values
            for have in into
        ):
            into.append(requirement)
