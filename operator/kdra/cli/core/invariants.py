"""Invariants of a settled kdra cluster, checked from what the API server holds — ``kdra
check`` and the fault-injection tests run them after every scenario (with the node agents'
disks: :mod:`kdra.checks`).

:func:`check` is a pure function over lists of API objects as dicts (pods, claims, slices,
nodes, leases) and, optionally, the rules of the node-local state a caller brings
(``node_rules``: :mod:`kdra.agent.core.node_check` over node agents' CDI spec files and
checkpoints, which the CLI cannot import). It returns one :class:`Violation` per broken rule,
each a short sentence naming the objects. The rules (``Violation.rule``):

``double-allocation``
    No device (driver/pool/device) appears in two allocation results — of two claims, or
    twice in one — that hold it: a result of an ``adminAccess`` request holds no device
    (upstream's rule), so a monitoring claim beside the claim that uses a device is fine.
    Results with a ``shareID`` (shares of a device that allows multiple allocations) are
    checked by :mod:`kdra.cli.core.invariants_shared` instead: ``counter-exceeded``,
    ``capacity-exceeded``, ``share-conflict``.
``pod-claims``
    Every bound pod (``spec.nodeName`` set) with ``schedulerName: kdra-scheduler`` and the
    claims annotation, not finished, has each of its claims: existing, allocated, reserved for
    it (by UID), with an allocation nodeSelector that admits its node and every allocated
    device reported ``Ready=True`` (prepare before bind) — or, for a device with binding
    conditions, those ``True`` (:mod:`kdra.dra.binding_conditions`).
``stale-reservation``
    No claim is reserved for a pod that is gone (no pod of that name, or another UID).
``unreserved-allocation``
    No claim that kdra allocated (it carries kdra's finalizer) stays allocated with an empty
    ``reservedFor`` (its devices would leak: the binder writes allocation and reservation
    together, the claim controller deallocates a claim whose last reservation went away).
    An allocation someone else wrote and nobody reserves is left alone, as upstream does
    (e.g. scheduler_perf's pre-allocated claims).
``orphan-slice``
    No ResourceSlice names (``spec.nodeName``) a Node that does not exist.
``foreign-pool``
    No node-local ResourceSlice names a pool other than its node's: a node speaks only for
    the pool named after it (:mod:`kdra.kube.core.pool_ownership`; kdra's readers ignore such a
    slice, so its devices, taints and capacities count for nothing).
``unallocated-device-status``
    No claim's ``status.devices`` has an entry for a device its allocation does not hold
    (upstream's API refuses one; kdra's CRD too, since issue 36).
``stale-slice``
    (only with ``now``) No slice of a node whose agent Lease for the slice's driver expired
    more than ``lease_grace`` seconds ago.
``foreign-claim`` / ``forged-devices`` / ``forged-env``
    kdra's per-pod outputs say nothing kdra did not decide: generated claims serve only their
    own pods, device annotations and device env name only devices the pod's claims hold
    (:mod:`kdra.cli.core.forged`).
``not-prepared`` / ``stale-checkpoint`` / ``unfinished-prepare`` / ``orphan-cdi``
    (only with ``node_rules``) the node-local rules: :mod:`kdra.agent.core.node_check`.

Invariants of this module: it never raises on malformed objects (a malformed piece is skipped
or reported), it never talks to the API server, and the order of the result is stable
(sorted by rule, then message) so outputs can be compared.

The rules describe a *settled* cluster: while pods are being scheduled or claims prepared,
some hold only eventually (a claim is allocated a moment before its devices are Ready).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kdra.cli.core.forged import RULES as FORGED_RULES
from kdra.cli.core.forged import Sources, forged_outputs
from kdra.cli.core.invariants_shared import RULES as SHARED_RULES
from kdra.cli.core.invariants_shared import shared_device_violations
from kdra.dra.allocator.nodeselector import NodeInfo, selector_matches
from kdra.dra.binding_conditions import unready_devices
from kdra.dra.errors import InvalidObject
from kdra.dra.models import NodeSelector
from kdra.dra.timestamps import parse_time
from kdra.dra.usage.claims import admin_requests
from kdra.kube.core.objects import allocation_results as _results
from kdra.kube.core.objects import metadata as _meta
from kdra.kube.core.objects import object_name as _name
from kdra.kube.core.podclaims import (
    CLAIMS_ANNOTATION,
    SCHEDULER_NAME,
    claim_statuses,
    pod_claims,
    protected_by_kdra,
)
from kdra.kube.core.pool_ownership import foreign_pool

JSON = Mapping[str, Any]
DeviceKey = tuple[str, str, str]

RULES = (
    "double-allocation",
    *SHARED_RULES,
    "pod-claims",
    *FORGED_RULES,
    "stale-reservation",
    "unreserved-allocation",
    "orphan-slice",
    "foreign-pool",
    "unallocated-device-status",
    "stale-slice",
)
"""The cluster's rules; :data:`kdra.checks.RULES` adds the node-local ones."""

NodeRules = Callable[[Sequence[JSON]], Iterable[tuple[str, str]]]
"""The node-local rules a caller brings: the claims -> (rule, message) of each violation."""


@dataclass(frozen=True, order=True)
class Violation:
    """One broken rule: ``rule`` (one of :data:`RULES`) and a sentence naming the objects."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


def check(
    *,
    pods: Iterable[JSON] = (),
    claims: Iterable[JSON] = (),
    slices: Iterable[JSON] = (),
    nodes: Iterable[JSON] = (),
    leases: Iterable[JSON] = (),
    node_rules: NodeRules | None = None,
    now: dt.datetime | None = None,
    lease_grace: float = 40.0,
    env_sources: Sources | None = None,
) -> list[Violation]:
    """Every violated invariant of the given cluster state (empty: all hold).
    ``env_sources``: the ConfigMaps' and Secrets' data the pods' environment reads
    (:func:`kdra.cli.core.forged.env_sources` says which), for ``forged-env``."""
    pods, claims, slices, nodes = list(pods), list(claims), list(slices), list(nodes)
    found: list[Violation] = []
    found += _double_allocations(claims)
    found += [Violation(rule, message)
              for rule, message in shared_device_violations(claims, slices)]
    found += _pod_claims(pods, claims, nodes)
    found += _stale_reservations(pods, claims)
    found += _orphan_slices(slices, nodes)
    node_names = {_meta(n).get("name") for n in nodes}
    found += [Violation("foreign-pool", why) for why in
              (foreign_pool(s, node_names.__contains__) for s in slices) if why]
    found += _unallocated_device_statuses(claims)
    found += [Violation(rule, message)
              for rule, message in forged_outputs(pods, claims, slices, env_sources)]
    if now is not None:
        found += _stale_slices(slices, list(leases), now, lease_grace)
    if node_rules is not None:
        found += [Violation(rule, message) for rule, message in node_rules(claims)]
    return sorted(set(found))


# --------------------------------------------------------------------------- helpers


def _spec(obj: JSON) -> JSON:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _status(obj: JSON) -> JSON:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _allocation(claim: JSON) -> JSON | None:
    allocation = _status(claim).get("allocation")
    return allocation if isinstance(allocation, Mapping) else None


def _device(result: JSON) -> DeviceKey:
    return (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))


def _reserved(claim: JSON) -> list[JSON]:
    return [r for r in _status(claim).get("reservedFor") or () if isinstance(r, Mapping)]


def _is_kdra_pod(pod: JSON) -> bool:
    spec = _spec(pod)
    return (spec.get("schedulerName") == SCHEDULER_NAME
            and CLAIMS_ANNOTATION in (_meta(pod).get("annotations") or {}))


def _finished(pod: JSON) -> bool:
    return _status(pod).get("phase") in ("Succeeded", "Failed")


# --------------------------------------------------------------------------- rules


def _double_allocations(claims: Sequence[JSON]) -> list[Violation]:
    holders: dict[DeviceKey, list[str]] = defaultdict(list)
    for claim in claims:
        devices = _spec(claim).get("devices")
        admin = admin_requests(devices if isinstance(devices, Mapping) else {})
        for result in _results(claim):
            if result.get("shareID"):
                continue  # a share: invariants_shared checks those
            if result.get("adminAccess") is True \
                    or str(result.get("request")).split("/", 1)[0] in admin:
                continue  # admin access holds no device
            holders[_device(result)].append(_name(claim))
    found = []
    for device, held in holders.items():
        if len(held) < 2:
            continue
        names = sorted(held)
        found.append(Violation("double-allocation", f"device {'/'.join(device)} is allocated "
                               f"{len(held)} times: to claims {', '.join(names)}"))
    return found


def _pod_claims(pods: Sequence[JSON], claims: Sequence[JSON],
                nodes: Sequence[JSON]) -> list[Violation]:
    by_key = {(_meta(c).get("namespace"), _meta(c).get("name")): c for c in claims}
    labels = {_meta(n).get("name"): dict(_meta(n).get("labels") or {}) for n in nodes}
    found = []
    for pod in pods:
        node = _spec(pod).get("nodeName")
        if not node or not _is_kdra_pod(pod) or _finished(pod):
            continue
        who = f"pod {_name(pod)} (bound to {node})"
        try:
            entries = pod_claims(pod)
        except InvalidObject as exc:
            found.append(Violation("pod-claims", f"{who} has a malformed claims annotation: "
                                   f"{exc}"))
            continue
        recorded = claim_statuses(pod)
        namespace, uid = _meta(pod).get("namespace"), _meta(pod).get("uid")
        for entry in entries:
            name = entry.resource_claim_name or recorded.get(entry.name)
            if name is None:
                found.append(Violation("pod-claims", f"{who}: entry {entry.name!r} names no "
                                       "claim (none recorded in its claim-statuses)"))
                continue
            claim = by_key.get((namespace, name))
            what = f"{who}: claim {namespace}/{name}"
            if claim is None:
                found.append(Violation("pod-claims", f"{what} does not exist"))
                continue
            allocation = _allocation(claim)
            if allocation is None:
                found.append(Violation("pod-claims", f"{what} is not allocated"))
                continue
            if not any(r.get("uid") == uid for r in _reserved(claim)):
                found.append(Violation("pod-claims", f"{what} is not reserved for the pod "
                                       f"(uid {uid})"))
            selector = allocation.get("nodeSelector")
            if selector is not None:
                try:
                    parsed = NodeSelector.model_validate(selector)
                except ValidationError:
                    found.append(Violation("pod-claims", f"{what} has a malformed "
                                           "allocation nodeSelector"))
                else:
                    if not selector_matches(parsed, NodeInfo(node, labels.get(node, {}))):
                        found.append(Violation("pod-claims", f"{what} is allocated with a "
                                               f"nodeSelector that does not admit node {node}"))
            missing = sorted("/".join(d) for d in unready_devices(claim))
            if missing:
                found.append(Violation("pod-claims", f"{what} has devices not reported Ready: "
                                       f"{', '.join(missing)}"))
    return found


def _stale_reservations(pods: Sequence[JSON], claims: Sequence[JSON]) -> list[Violation]:
    uids = {(_meta(p).get("namespace"), _meta(p).get("name")): _meta(p).get("uid") for p in pods}
    found = []
    for claim in claims:
        reserved = _reserved(claim)
        namespace = _meta(claim).get("namespace")
        for ref in reserved:
            if ref.get("resource", "pods") != "pods" or ref.get("apiGroup", "") not in ("", None):
                continue
            current = uids.get((namespace, ref.get("name")))
            if current is None:
                found.append(Violation("stale-reservation", f"claim {_name(claim)} is reserved "
                                       f"for pod {namespace}/{ref.get('name')}, which is gone"))
            elif current != ref.get("uid"):
                found.append(Violation("stale-reservation", f"claim {_name(claim)} is reserved "
                                       f"for pod {namespace}/{ref.get('name')} uid "
                                       f"{ref.get('uid')}, replaced by uid {current}"))
        if _allocation(claim) is not None and not reserved and protected_by_kdra(claim):
            found.append(Violation("unreserved-allocation", f"claim {_name(claim)} is "
                                   "allocated but reserved for no one"))
    return found


def _orphan_slices(slices: Sequence[JSON], nodes: Sequence[JSON]) -> list[Violation]:
    names = {_meta(n).get("name") for n in nodes}
    found = []
    for slice_ in slices:
        spec = _spec(slice_)
        node = spec.get("nodeName")
        if node and node not in names:
            found.append(Violation("orphan-slice", f"slice {_name(slice_)} is for node {node}, "
                                   "which is gone"))
    return found


def _unallocated_device_statuses(claims: Sequence[JSON]) -> list[Violation]:
    found = []
    for claim in claims:
        held = set(map(_device, _results(claim)))
        stray = sorted({"/".join(_device(entry)) for entry in _status(claim).get("devices") or ()
                        if isinstance(entry, Mapping) and _device(entry) not in held})
        if stray:
            found.append(Violation("unallocated-device-status", f"claim {_name(claim)} reports "
                                   f"devices it is not allocated: {', '.join(stray[:8])}"))
    return found


def _stale_slices(slices: Sequence[JSON], leases: Sequence[JSON], now: dt.datetime,
                  grace: float) -> list[Violation]:
    from kdra.kube.core.agent_leases import lease_pools

    expired: dict[tuple[str, str], float] = {}
    for lease in leases:
        driver, nodes = lease_pools(lease)
        spec = _spec(lease)
        renewed = parse_time(spec.get("renewTime"))
        if driver is None or renewed is None:
            continue
        until = renewed + dt.timedelta(seconds=float(spec.get("leaseDurationSeconds") or 0))
        late = (now - until).total_seconds()
        for node in nodes:
            # Two Leases may name a node (a restarted agent serving other nodes): the
            # freshest one counts.
            expired[(node, driver)] = min(late, expired.get((node, driver), late))
    found = []
    for slice_ in slices:
        spec = _spec(slice_)
        key = (str(spec.get("nodeName")), str(spec.get("driver")))
        overdue = expired.get(key)
        if overdue is not None and overdue > grace:
            found.append(Violation("stale-slice", f"slice {_name(slice_)} outlived the agent "
                                   f"Lease of node {key[0]} (driver {key[1]}) by {overdue:.0f}s"))
    return found
