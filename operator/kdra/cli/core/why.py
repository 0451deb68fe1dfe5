"""Why a pod is (not) scheduled: the view behind ``kubectl kdra why POD`` (pure, no I/O).

:func:`explain_pod` evaluates the pod now, the way kdra's binder would — the same node
filters (:func:`~kdra.dra.scheduling.node_rejection`), the same allocator entry point
(:func:`~kdra.dra.allocator.place`, every node, no feasible-node limit) — over the objects
the caller read, and returns an :class:`Explanation`:

- the pod's state and what kdra-scheduler last told it (its ``PodScheduled`` condition, with
  its reason: ``Unschedulable``, or ``AllocationSearchExhausted`` when the binder's search ran
  out of budget — then also what that means and what to do, in :attr:`Explanation.hints`);
- each claim of the pod: its state, and for a pending claim every request with its class and
  the selectors involved (the class's, then the request's own);
- the nodes grouped by why they cannot take the pod (the binder's messages, most frequent
  first), or the nodes it fits on now;
- the nearest fits: nodes where it would fit if N devices were freed, with the claims (and
  pods) holding those devices (:func:`~kdra.dra.allocator.nearest_fits`).

What could not be read is passed as ``None`` and said in :attr:`Explanation.notes` (e.g. no
Nodes: taints, selectors and capacity are not checked, nodes are taken from the slices).

The search is bounded like the binder's: ``steps`` for the whole evaluation (and again for
the nearest fits), ``node_steps(candidates)`` per node — pass the binder's budget
(``kdra.dra.scheduling.SearchBudget``) to see what it sees. Out of budget with no node
found, the verdict is ``search-exhausted``.

Invariants:
- Bounded: with ``steps`` given, no search runs past it (see above).
- Never raises on bad input: an unparsable annotation, claim, class or slice becomes a note
  or the explanation's ``problem``; invalid slices and classes are left out as the binder
  leaves them out.
- Rendered text (:mod:`kdra.cli.core.why_render`) holds no control sequences.
- The explanation is a recomputation, not the binder's memory: it can differ from the
  condition when the cluster changed since (both are shown).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kdra.cli.core.why_quota import QUOTA_HINT, quota_denials
from kdra.dra.allocator import (
    DeviceId,
    NodeInfo,
    Placing,
    ReasonCode,
    Snapshot,
    nearest_fits,
)
from kdra.dra.errors import InvalidObject
from kdra.dra.models import ResourceClaim, parse_claim, parse_class, parse_slice
from kdra.dra.quota import QUOTA_REASON
from kdra.dra.scheduling import (
    POD_GROUP_LABEL,
    SEARCH_EXHAUSTED,
    NodeView,
    PodFit,
    Resources,
    explain,
    node_rejection,
    node_usage,
    node_view,
)
from kdra.dra.usage.claims import claims_of, natural
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import (
    SCHEDULER_NAME,
)
from kdra.kube.core.untrusted import shorten

__all__ = ["ClaimInfo", "Explanation", "Group", "Nearest", "RequestInfo", "explain_pod"]

JSON = Mapping[str, Any]
MAX_NODES_LISTED = 6
"""Node names shown per group (the rest are counted)."""
UNLIMITED = Resources(cpu=10**12, memory=10**18, pods=10**6)
def gang_hint(gang: str) -> str:
    """What a gang member's evaluation means (the pod is placed only with its gang)."""
    return (f"gang {shorten(gang, 63)!r} ({POD_GROUP_LABEL}): kdra-scheduler places this pod "
            "only together with the rest of its gang, all of them at once or none; the "
            "evaluation here is this pod's alone, the scheduler's message above is the "
            "gang's (docs/gangs.md)")


SEARCH_EXHAUSTED_HINT = (
    f"{SEARCH_EXHAUSTED}: kdra-scheduler's allocation search for this pod ran out of its "
    "budget (the operator's --allocation-search-steps, --allocation-search-timeout) before "
    "it found a placement; it retries after a backoff. Long searches come from claims "
    "competing for the same devices (many requests, matchAttribute constraints, "
    "allocationMode All): fewer, larger requests or looser constraints search quickly; "
    "otherwise an operator may raise the budget.")
"""What ``AllocationSearchExhausted`` means and what to do (in :attr:`Explanation.hints`)."""
NOT_EVALUATED = "not evaluated: the search budget ran out first"
"""Allocatable of a node known only from its slices (its Node could not be read)."""


@dataclass(frozen=True)
class RequestInfo:
    name: str
    device_class: str
    count: str
    """``"2"``, or ``"all"`` for allocationMode All (``" (admin)"`` added for adminAccess)."""
    selectors: tuple[str, ...]
    """``class: <expr>`` for the class's selectors, then ``request: <expr>``."""


@dataclass(frozen=True)
class ClaimInfo:
    entry: str
    """The pod's name for the claim (its annotation entry)."""
    name: str
    """The ResourceClaim's name; empty while a template's claim is not created yet."""
    state: str
    """``missing``, ``invalid``, ``pending``, ``allocated`` or ``reserved``."""
    node: str = ""
    devices: tuple[str, ...] = ()
    requests: tuple[RequestInfo, ...] = ()
    problem: str = ""


@dataclass(frozen=True)
class Group:
    reason: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Nearest:
    node: str
    devices: tuple[str, ...]
    """``driver/pool/device`` to free."""
    holders: tuple[str, ...]
    """``claim namespace/name (pods ...)`` holding them."""
    minimal: bool


@dataclass(frozen=True)
class Explanation:
    pod: str
    verdict: str
    """``bound``, ``fits`` (some node can take it now), ``unschedulable``, ``over-quota``
    (it fits, but its namespace's DeviceQuotas refuse every placement, as the binder's check
    does), ``search-exhausted`` (no node found within the search budget), ``waiting`` (for
    its claims), ``invalid`` or ``not-kdra`` (kdra does not schedule it)."""
    summary: str
    node: str = ""
    condition: str = ""
    """The pod's ``PodScheduled=False`` message (what kdra-scheduler last said), if any."""
    claims: tuple[ClaimInfo, ...] = ()
    groups: tuple[Group, ...] = ()
    fits: tuple[str, ...] = ()
    nearest: tuple[Nearest, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    hints: tuple[str, ...] = ()
    """What a reason means and what to do (e.g. :data:`SEARCH_EXHAUSTED_HINT`)."""
    condition_reason: str = ""
    """The ``PodScheduled=False`` condition's reason (``Unschedulable``,
    ``AllocationSearchExhausted``...)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod, "verdict": self.verdict, "summary": self.summary,
            "node": self.node, "condition": self.condition,
            "conditionReason": self.condition_reason,
            "claims": [{"entry": c.entry, "name": c.name, "state": c.state, "node": c.node,
                        "devices": list(c.devices), "problem": c.problem,
                        "requests": [{"name": r.name, "class": r.device_class, "count": r.count,
                                      "selectors": list(r.selectors)} for r in c.requests]}
                       for c in self.claims],
            "groups": [{"reason": g.reason, "count": len(g.nodes), "nodes": list(g.nodes)}
                       for g in self.groups],
            "fits": list(self.fits),
            "nearest": [{"node": n.node, "free": len(n.devices), "devices": list(n.devices),
                         "heldBy": list(n.holders), "minimal": n.minimal}
                        for n in self.nearest],
            "notes": list(self.notes),
            "hints": list(self.hints),
        }


# --------------------------------------------------------------------------- building


def explain_pod(pod: JSON, *, claims: Iterable[JSON], classes: Iterable[JSON],
                slices: Iterable[JSON], nodes: Iterable[JSON] | None,
                pods: Iterable[JSON] | None, notes: Sequence[str] = (),
                steps: int | None = None,
                node_steps: Callable[[int], int] | None = None,
                quotas: Iterable[JSON] = (),
                templates: Iterable[JSON] | None = None,
                flavour: Flavour = KDRA) -> Explanation:
    """Evaluate ``pod`` against the cluster as given (module doc). ``claims`` should hold
    every claim (the pod's, and those holding devices); ``nodes`` / ``pods`` None: not read.
    ``steps`` / ``node_steps(candidates)``: the search budget (None: unbounded).
    ``quotas``: the DeviceQuotas of the pod's namespace (the binder's check is applied);
    ``templates``: the ResourceClaimTemplates of its namespace (None: not read).
    ``flavour``: where the pod's claims are (the API flavour the objects were read in)."""
    found = _evaluate(pod, claims, classes, slices, nodes, pods, list(notes),
                      _Budget(steps, node_steps), list(quotas), templates, flavour)
    reason = _scheduled_condition(pod)[1]
    exhausted = found.verdict == "search-exhausted"
    if exhausted or (reason == SEARCH_EXHAUSTED and found.verdict != "bound"):
        found = replace(found, hints=(*found.hints, SEARCH_EXHAUSTED_HINT))
    if found.verdict == "over-quota" or (reason == QUOTA_REASON and found.verdict != "bound"):
        found = replace(found, hints=(*found.hints, QUOTA_HINT))
    labels = (pod.get("metadata") or {}).get("labels")
    gang = labels.get(POD_GROUP_LABEL) if isinstance(labels, Mapping) else None
    if isinstance(gang, str) and gang and found.verdict != "bound":
        found = replace(found, hints=(*found.hints, gang_hint(gang)))
    return replace(found, condition_reason=reason)


def _generated_unrecorded(pod: JSON, claims: Iterable[JSON], flavour: Flavour) -> dict[str, str]:
    """Entry name → the claim generated for it, for a pod whose record is not written yet
    (kdra's flavour writes it in the pod's Binding): the claims the pod controls, by their
    pod-claim-name annotation, as the claim controller finds them."""
    uid = (pod.get("metadata") or {}).get("uid")
    found: dict[str, str] = {}
    for claim in claims:
        meta = claim.get("metadata") if isinstance(claim, Mapping) else None
        owner = flavour.generated_for(claim)
        if not isinstance(meta, Mapping) or owner is None or owner.get("uid") != uid:
            continue
        entry = (meta.get("annotations") or {}).get(flavour.pod_claim_name_annotation)
        if isinstance(entry, str) and isinstance(meta.get("name"), str):
            found.setdefault(entry, meta["name"])
    return found


@dataclass(frozen=True)
class _Budget:
    steps: int | None
    node_steps: Callable[[int], int] | None


def _evaluate(pod: JSON, claims: Iterable[JSON], classes: Iterable[JSON],
              slices: Iterable[JSON], nodes: Iterable[JSON] | None,
              pods: Iterable[JSON] | None, notes: list[str], budget: _Budget,
              quotas: list[JSON], templates: Iterable[JSON] | None,
              flavour: Flavour) -> Explanation:
    slices = list(slices)  # read twice: the snapshot, and the devices' facts for quotas
    meta = pod.get("metadata") or {}
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    namespace = str(meta.get("namespace") or "")
    spec = pod.get("spec") or {}
    condition = _scheduled_condition(pod)[0]
    if not flavour.has_claims(pod):
        return Explanation(key, "not-kdra", f"the pod has no claims ({flavour.claims_field} "
                           "is not set): kdra allocates no devices for it",
                           spec.get("nodeName") or "", condition, notes=tuple(notes))
    try:
        entries = flavour.pod_claims(pod)
    except InvalidObject as exc:
        return Explanation(key, "invalid", f"its {flavour.claims_name} is invalid: {exc}",
                           condition=condition, notes=tuple(notes))
    raw_claims = list(claims)
    by_key = {(str((c.get("metadata") or {}).get("namespace")),
               str((c.get("metadata") or {}).get("name"))): c for c in raw_claims}
    statuses = flavour.claim_statuses(pod)
    infos: list[ClaimInfo] = []
    parsed: list[ResourceClaim] = []
    classes_by_name = _classes(classes, notes)
    template_names = None if templates is None else {
        str((t.get("metadata") or {}).get("name")) for t in templates
        if isinstance(t, Mapping) and (t.get("metadata") or {}).get("namespace") == namespace}
    unrecorded = {} if statuses else _generated_unrecorded(pod, raw_claims, flavour)
    for entry in entries:
        name = entry.resource_claim_name or statuses.get(entry.name, "") or \
            unrecorded.get(entry.name, "")
        raw = by_key.get((namespace, name)) if name else None
        if raw is None:
            template = entry.resource_claim_template_name
            source = (f"template {template!r}" if entry.from_template
                      else "the pod's extended resources")
            if name:
                problem = f"claim {name!r} does not exist"
            elif template and template_names is not None and template not in template_names:
                problem = (f"template {template!r} does not exist in namespace {namespace}: "
                           "create it there (the claim controller then creates the pod's "
                           "claim from it)")
            else:
                problem = f"not created yet from {source} (the claim controller creates it)"
            infos.append(ClaimInfo(entry.name, name, "missing", problem=problem))
            continue
        try:
            claim = parse_claim(raw)
        except InvalidObject as exc:
            infos.append(ClaimInfo(entry.name, name, "invalid", problem=str(exc)))
            continue
        parsed.append(claim)
        infos.append(_claim_info(entry.name, claim, raw, classes_by_name))
    node_name = spec.get("nodeName") or ""
    if node_name:
        return Explanation(key, "bound", f"bound to node {node_name}", node_name, condition,
                           tuple(infos), notes=tuple(notes))
    if spec.get("schedulerName") != SCHEDULER_NAME:
        notes.append(f"spec.schedulerName is {spec.get('schedulerName')!r}, not "
                     f"{SCHEDULER_NAME!r}: kdra's binder does not schedule this pod")
    if any(info.state in ("missing", "invalid") for info in infos):
        waiting = [f"{i.entry} ({i.problem})" if i.state == "missing" else i.entry
                   for i in infos if i.state in ("missing", "invalid")]
        return Explanation(key, "waiting", "waiting for its claims: " + "; ".join(waiting),
                           condition=condition, claims=tuple(infos), notes=tuple(notes))
    try:
        fit = PodFit.of(pod)
    except InvalidObject as exc:
        return Explanation(key, "invalid", f"invalid pod: {exc}", condition=condition,
                           claims=tuple(infos), notes=tuple(notes))

    snapshot = Snapshot()
    for device_class in classes_by_name.values():
        snapshot.upsert_class(device_class)
    pools_nodes: set[str] = set()
    for raw_slice in slices:
        try:
            parsed_slice = parse_slice(raw_slice)
        except InvalidObject:
            continue
        snapshot.upsert_slice(parsed_slice)
        if parsed_slice.spec.node_name:
            pools_nodes.add(parsed_slice.spec.node_name)
    for raw in raw_claims:
        try:
            snapshot.upsert_claim(parse_claim(raw))
        except InvalidObject:
            continue
    views = _views(nodes, pools_nodes, notes)
    used = node_usage(pods) if pods is not None else {}
    if pods is None and nodes is not None:
        notes.append("pods could not be read: cpu/memory/pod-count fit not checked")

    groups: dict[str, list[str]] = defaultdict(list)
    candidates: list[NodeInfo] = []
    for view in views:
        why = node_rejection(fit, view, used.get(view.name, Resources()), parsed)
        if why is None:
            candidates.append(view.info)
        else:
            groups[why].append(view.name)
    unallocated = [claim for claim in parsed if not claim.allocated]
    fits: list[str] = []
    nearest: list[Nearest] = []
    if not unallocated:
        fits = [node.name for node in candidates]
    elif candidates:
        placing = Placing(snapshot, unallocated, candidates, node_steps=(
            budget.node_steps(len(candidates)) if budget.node_steps is not None else None))
        outcome = placing.advance(budget.steps) or placing.give_up()
        if outcome.fatal is not None:
            return Explanation(key, "unschedulable", outcome.summary(len(views)),
                               condition=condition, claims=tuple(infos),
                               groups=_sorted_groups(groups), notes=tuple(notes))
        for node, reason in outcome.reasons.items():
            groups[reason.message].append(node)
        denials = quota_denials(namespace, quotas, raw_claims, slices, unallocated,
                                outcome.placements, notes)
        for node, denial in denials.items():  # the binder's DeviceQuota check (issue 41)
            groups[f"{denial.message} ({QUOTA_REASON})"].append(node)
        fits = sorted((n for n in outcome.placements if n not in denials), key=natural)
        if denials and not fits:
            first = denials[min(denials, key=natural)]
            return Explanation(key, "over-quota", f"{first.message} ({QUOTA_REASON})",
                               condition=condition, claims=tuple(infos),
                               groups=_sorted_groups(groups), notes=tuple(notes))
        busy = [node for node in candidates if node.name in outcome.reasons
                and outcome.reasons[node.name].code in (ReasonCode.DEVICES_BUSY,
                                                        ReasonCode.CONSTRAINT_UNSATISFIABLE)]
        if not fits and busy:
            nearest = _nearest(snapshot, unallocated, busy, raw_claims, budget.steps, notes)
        if outcome.exhausted and not fits:
            skipped = [node.name for node in candidates if node.name not in outcome.reasons
                       and node.name not in outcome.placements]
            if skipped:
                groups[NOT_EVALUATED] = skipped
            counts = Counter({reason: len(names) for reason, names in groups.items()})
            return Explanation(
                key, "search-exhausted", f"no placement found within the search budget "
                f"({outcome.steps} steps spent"
                f"{f' of {budget.steps}' if budget.steps is not None else ''}); "
                + explain(counts, len(views)), condition=condition, claims=tuple(infos),
                groups=_sorted_groups(groups), nearest=tuple(nearest), notes=tuple(notes))
    counts = Counter({reason: len(names) for reason, names in groups.items()})
    summary = explain(counts, len(views), len(fits))
    verdict = "fits" if fits else "unschedulable"
    return Explanation(key, verdict, summary, condition=condition, claims=tuple(infos),
                       groups=_sorted_groups(groups), fits=tuple(fits),
                       nearest=tuple(nearest), notes=tuple(notes))


def _scheduled_condition(pod: JSON) -> tuple[str, str]:
    """The pod's PodScheduled=False message (else its reason) and reason; empty if none."""
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled" and \
                condition.get("status") == "False":
            reason = str(condition.get("reason") or "")
            return str(condition.get("message") or reason), reason
    return "", ""


def _classes(classes: Iterable[JSON], notes: list[str]) -> dict[str, Any]:
    parsed = {}
    for raw in classes:
        try:
            device_class = parse_class(raw)
        except InvalidObject as exc:
            notes.append(f"DeviceClass {(raw.get('metadata') or {}).get('name')!r} is invalid "
                         f"and ignored: {exc}")
            continue
        parsed[device_class.metadata.name] = device_class
    return parsed


def _claim_info(entry: str, claim: ResourceClaim, raw: JSON,
                classes: Mapping[str, Any]) -> ClaimInfo:
    (row,) = claims_of([raw])
    devices = tuple(str(device) for device in row.devices)
    if claim.allocated:
        return ClaimInfo(entry, claim.metadata.name, row.state, row.node, devices)
    requests = []
    for request in claim.spec.devices.requests:
        # One row per alternative of a firstAvailable request, named as its results would be.
        for name, asked in request.alternatives():
            device_class = classes.get(asked.device_class_name)
            selectors = [f"class: {s.cel.expression}" for s in
                         (device_class.spec.selectors if device_class is not None else ())]
            selectors += [f"request: {s.cel.expression}" for s in asked.selectors]
            if device_class is None:
                selectors.insert(0, f"class {asked.device_class_name!r} does not exist")
            count = "all" if asked.allocation_mode == "All" else str(asked.exact_count)
            requests.append(RequestInfo(name, asked.device_class_name,
                                        count + (" (admin)" if request.admin_access else ""),
                                        tuple(" ".join(s.split()) for s in selectors)))
    return ClaimInfo(entry, claim.metadata.name, "pending", requests=tuple(requests))


def _views(nodes: Iterable[JSON] | None, from_slices: set[str],
           notes: list[str]) -> list[NodeView]:
    if nodes is not None:
        return sorted((node_view(node) for node in nodes), key=lambda v: natural(v.name))
    notes.append("nodes could not be read: taints, node selectors and capacity are not "
                 "checked; the nodes are those the ResourceSlices name")
    return [NodeView(name, NodeInfo(name, {}), UNLIMITED, False, ())
            for name in sorted(from_slices, key=natural)]


def _nearest(snapshot: Snapshot, claims: Sequence[ResourceClaim], nodes: Sequence[NodeInfo],
             raw_claims: Sequence[JSON], steps: int | None, notes: list[str]) -> list[Nearest]:
    holders: dict[DeviceId, list[str]] = defaultdict(list)
    for row in claims_of(raw_claims):
        pods = ", ".join(pod.split("/", 1)[-1] for pod in row.pods)
        text = f"{row.key}" + (f" (pod {pods})" if pods else "")
        for device in row.held:  # admin access holds nothing: freeing it frees nothing
            holders[DeviceId(device.driver, device.pool, device.device)].append(text)
    found = []
    whatif = nearest_fits(snapshot, claims, nodes, steps=steps)
    if not whatif.complete:
        notes.append(f"the search for the nearest fit ran out of its budget ({whatif.steps} "
                     "steps): a node it did not reach might need fewer devices freed")
    for freeing in whatif.fits:
        held = dict.fromkeys(h for device in freeing.devices for h in holders.get(device, ()))
        found.append(Nearest(freeing.node, tuple(str(d) for d in freeing.devices),
                             tuple(held), freeing.minimal))
    return found


def _sorted_groups(groups: Mapping[str, list[str]]) -> tuple[Group, ...]:
    return tuple(Group(reason, tuple(sorted(nodes, key=natural)))
                 for reason, nodes in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))
