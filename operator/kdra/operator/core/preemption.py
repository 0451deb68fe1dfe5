"""Priority preemption for pods with claims: which lower-priority pods, on which one node,
must go so that a pod that fits nowhere fits — kube-scheduler's default preemption, for
devices.

kdra allocates devices only, so only pods that hold devices (through claims allocated to them)
can be victims, and a victim frees the devices of the claims it alone uses (or uses only with
other victims). Per node (:func:`select_victims`), as kube-scheduler's ``SelectVictimsOnNode``:

1. every pod on the node with a lower priority than the preemptor's that holds devices is a
   potential victim; if the preemptor does not fit with all of them gone, the node is no
   candidate (kdra never preempts for a pod that would still not fit);
2. the potential victims are *reprieved* one by one, most important first (higher priority,
   then earlier start), those whose eviction would violate a PodDisruptionBudget before the
   others: a pod stays if the preemptor still fits with the remaining victims gone;
3. the node's answer: the victims left and how many of them violate a budget.

Among candidate nodes :func:`pick_node` takes, as kube-scheduler's
``pickOneNodeForPreemption``: the fewest budget violations, then the lowest highest-priority
victim, then the smallest sum of priorities (each offset by 2^31, so fewer victims win even
with negative priorities), then the fewest victims, then the latest start of the highest-
priority victims, then the node name.

Pods already being deleted leave anyway: their devices count as freed from the start, they are
never victims, and a node where they alone make room needs no preemption (the binder waits for
the release).

Invariants:
- Pure: the fit test is the caller's (:class:`~kdra.dra.allocator.probe.FitProbe`), so
  every "fits" is the allocator's own search.
- A node's answer is *minimal* in the kube-scheduler sense: no victim could be reprieved on
  its own and the preemptor still fit. The reprieve (:func:`reprieve`) is one piece for a
  single pod's node and a gang's whole cluster (units of pods evicted together).
- Parsing is total: a malformed PodDisruptionBudget selector matches no pod; a priority that
  is not an integer counts as 0.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.dra.allocator.pools import DeviceId
from kdra.dra.scheduling import POD_GROUP_LABEL

__all__ = [
    "NEVER",
    "Budget",
    "Hold",
    "NodeVictims",
    "Pod",
    "Probe",
    "Victims",
    "can_preempt",
    "freed_by",
    "gang_units",
    "group_of",
    "hold_of",
    "label_selector_matches",
    "pick_node",
    "pod_of",
    "pod_priority",
    "reprieve",
    "run_probe",
    "select_victims",
    "violating",
]

NEVER = "Never"
"""``spec.preemptionPolicy`` of a pod that must not preempt others."""

_OFFSET = 2**31
"""Added to each victim's priority in sums (kube-scheduler: MaxInt32 + 1)."""


@dataclass(frozen=True, slots=True)
class Pod:
    """A pod bound to a node, as preemption sees it."""

    namespace: str
    name: str
    uid: str
    node: str
    priority: int = 0
    started: str = ""
    """``status.startTime`` (RFC 3339, sorts as time; empty: not started, least important)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    leaving: bool = False
    """Being deleted already: leaves without being evicted, never a victim."""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Hold:
    """Devices an allocated claim holds, and the pods it is reserved for."""

    devices: frozenset[DeviceId]
    consumers: frozenset[str]
    """UIDs from the claim's ``reservedFor``."""


@dataclass(frozen=True, slots=True)
class Budget:
    """A PodDisruptionBudget: pods of ``namespace`` matching ``selector`` may lose ``allowed``
    more (its ``status.disruptionsAllowed``)."""

    namespace: str
    name: str
    selector: Mapping[str, Any] | None
    allowed: int


@dataclass(frozen=True, slots=True)
class NodeVictims:
    """The pods to evict on ``node`` so the preemptor fits there."""

    node: str
    victims: tuple[Pod, ...]
    """Most important first."""
    pdb_violations: int
    freed: frozenset[DeviceId]
    """The devices the victims (and pods leaving anyway) free."""


def pod_priority(pod: Mapping[str, Any]) -> int:
    """``spec.priority`` (set by the Priority admission plugin from the PriorityClass); 0 when
    absent or not an integer."""
    value = (pod.get("spec") or {}).get("priority") if isinstance(pod, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def can_preempt(pod: Mapping[str, Any]) -> bool:
    """False for ``preemptionPolicy: Never`` (the pod waits instead)."""
    return (pod.get("spec") or {}).get("preemptionPolicy") != NEVER


def freed_by(leaving: Collection[str], holds: Iterable[Hold]) -> frozenset[DeviceId]:
    """Devices free once the pods ``leaving`` (UIDs) are gone: those of claims every consumer
    of which leaves."""
    freed: set[DeviceId] = set()
    for hold in holds:
        if hold.consumers and all(uid in leaving for uid in hold.consumers):
            freed.update(hold.devices)
    return frozenset(freed)


def pod_of(pod: Mapping[str, Any]) -> Pod:
    """A bound pod as preemption sees it. Total over malformed fields."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    return Pod(str(meta.get("namespace", "")), str(meta.get("name", "")),
               str(meta.get("uid", "")), str((pod.get("spec") or {}).get("nodeName") or ""),
               pod_priority(pod), str((pod.get("status") or {}).get("startTime") or ""),
               {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
               bool(meta.get("deletionTimestamp")))


def hold_of(claim: Mapping[str, Any]) -> Hold | None:
    """The devices a claim's allocation holds (admin-access results excluded) and its
    consumers; None when it holds nothing. Total over malformed status."""
    status = claim.get("status") or {}
    allocation = status.get("allocation") if isinstance(status, dict) else None
    if not isinstance(allocation, dict):
        return None
    devices_ = allocation.get("devices")
    results = devices_.get("results") if isinstance(devices_, dict) else None
    devices = frozenset(
        DeviceId(str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for r in (results if isinstance(results, list) else ())
        if isinstance(r, dict) and not r.get("adminAccess"))
    consumers = frozenset(str(ref.get("uid")) for ref in status.get("reservedFor") or ()
                          if isinstance(ref, dict) and ref.get("uid"))
    return Hold(devices, consumers) if devices and consumers else None


def _importance(pod: Pod) -> tuple[int, int, str, str]:
    """Sort key, most important first: higher priority, then started (earlier first)."""
    return (-pod.priority, 0 if pod.started else 1, pod.started, pod.ref)


def label_selector_matches(selector: Mapping[str, Any] | None,
                           labels: Mapping[str, str]) -> bool:
    """A metav1 LabelSelector: ``matchLabels`` and ``matchExpressions`` (In, NotIn, Exists,
    DoesNotExist) all hold. An empty selector matches every pod (policy/v1), none (null)
    matches none, and anything malformed matches none."""
    if not isinstance(selector, Mapping):
        return False
    match_labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(match_labels, Mapping) or not isinstance(expressions, list):
        return False
    if any(labels.get(str(k)) != v for k, v in match_labels.items()):
        return False
    for expression in expressions:
        if not isinstance(expression, Mapping):
            return False
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if not isinstance(key, str) or not isinstance(values, list):
            return False
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            return False
        if not ok:
            return False
    return True


def violating(pods: Sequence[Pod], budgets: Sequence[Budget]) -> set[str]:
    """UIDs of ``pods`` whose eviction (all of them, in order) would violate a budget:
    each pod uses up one allowed disruption of every budget matching it; a pod that finds a
    matching budget with none left violates it (kube-scheduler's filterPodsWithPDBViolation)."""
    left = [budget.allowed for budget in budgets]
    out: set[str] = set()
    for pod in pods:
        for index, budget in enumerate(budgets):
            if budget.namespace != pod.namespace or not label_selector_matches(
                    budget.selector, pod.labels):
                continue
            left[index] -= 1
            if left[index] < 0:
                out.add(pod.uid)
    return out


@dataclass(frozen=True, slots=True)
class Victims:
    """What :func:`reprieve` chose: the pods to evict (most important first), how many of
    them violate a PodDisruptionBudget, and the devices they (and pods leaving anyway) free."""

    pods: tuple[Pod, ...]
    pdb_violations: int
    freed: frozenset[DeviceId]


Probe = Generator[frozenset[DeviceId], bool, Victims | None]
"""A victim search as a coroutine: it yields the devices a fit test frees and is sent whether
the preemptor fits with them free (``send``); it returns the victims, or None. Pure: the
caller runs the fit tests, synchronously (:func:`select_victims`) or between yields to its
event loop (a gang's joint search, :mod:`kdra.operator.scheduler.gang_preemption`)."""


def reprieve(units: Sequence[Sequence[Pod]], holds: Sequence[Hold], budgets: Sequence[Budget],
             leaving: Collection[str] = frozenset()) -> Probe:
    """The fewest, least important victims among ``units`` — each a set of pods evicted
    together or not at all (a pod; the bound members of a gang) — whose eviction lets the
    preemptor fit (the module doc's steps 1-3, with the fit tests yielded). ``leaving``: UIDs
    of pods leaving anyway (their devices count as free throughout). None when there is no
    unit, when the preemptor would not fit even with every unit gone, or when it fits with
    none of them gone (nothing to preempt)."""
    potential = sorted((u for u in units if u), key=lambda u: min(_importance(p) for p in u))
    if not potential:
        return None
    victims = {pod.uid for unit in potential for pod in unit}
    if not (yield freed_by(set(leaving) | victims, holds)):
        return None
    breaking = violating([pod for unit in potential for pod in unit], budgets)
    order = ([u for u in potential if any(p.uid in breaking for p in u)] +
             [u for u in potential if not any(p.uid in breaking for p in u)])
    violations = 0
    for unit in order:
        uids = {pod.uid for pod in unit}
        victims -= uids
        if (yield freed_by(set(leaving) | victims, holds)):
            continue  # reprieved
        victims |= uids
        violations += sum(1 for pod in unit if pod.uid in breaking)
    if not victims:
        return None  # fits once pods already leaving are gone: nothing to preempt
    chosen = tuple(p for unit in potential for p in unit if p.uid in victims)
    return Victims(chosen, violations, freed_by(set(leaving) | victims, holds))


def run_probe(probe: Probe, fits: Callable[[frozenset[DeviceId]], bool]) -> Victims | None:
    """Run a victim search with synchronous fit tests (``fits`` may raise to stop it)."""
    try:
        freed = next(probe)
        while True:
            freed = probe.send(fits(freed))
    except StopIteration as done:
        result: Victims | None = done.value
        return result


def select_victims(node: str, priority: int, pods: Sequence[Pod], holds: Sequence[Hold],
                   budgets: Sequence[Budget],
                   fits: Callable[[frozenset[DeviceId]], bool]) -> NodeVictims | None:
    """The fewest, least important victims on ``node`` (see the module doc), or None when
    the preemptor would not fit even with every lower-priority pod gone, or fits without
    evicting anyone (nothing to preempt). ``pods``: the pods on the node; ``holds``: the
    claims they use; ``fits(freed)``: the preemptor fits the node with ``freed`` free (may
    raise to stop the search, e.g. its budget ran out)."""
    leaving = {pod.uid for pod in pods if pod.leaving}
    users = {uid for hold in holds for uid in hold.consumers}
    units = [(pod,) for pod in pods if not pod.leaving and pod.priority < priority
             and pod.uid in users]
    found = run_probe(reprieve(units, holds, budgets, leaving), fits)
    if found is None:
        return None
    return NodeVictims(node, found.pods, found.pdb_violations, found.freed)


def _rank(option: NodeVictims) -> tuple[int, int, int, int, str, str]:
    victims = option.victims
    top = max((v.priority for v in victims), default=-_OFFSET)
    # The earliest start among the highest-priority victims; the later it is, the better.
    earliest = min((v.started for v in victims if v.priority == top and v.started),
                   default="")
    later_first = "".join(chr(0x10FFFF - ord(c)) for c in earliest)
    return (option.pdb_violations, top, sum(v.priority + _OFFSET for v in victims),
            len(victims), later_first, option.node)


def pick_node(options: Iterable[NodeVictims]) -> NodeVictims | None:
    """The node to preempt on (ranking in the module doc); None when there is none."""
    return min(options, key=_rank, default=None)


def group_of(pod: Pod) -> tuple[str, str] | None:
    """The pod's gang (namespace, ``scheduling.x-k8s.io/pod-group`` label), or None."""
    group = pod.labels.get(POD_GROUP_LABEL)
    return None if group is None else (pod.namespace, group)


def gang_units(pods: Iterable[Pod], priority: int, holds: Sequence[Hold]
               ) -> list[tuple[Pod, ...]]:
    """The units a gang of ``priority`` may evict, for :func:`reprieve`: a pod of lower
    priority that holds devices, alone; the bound members of a gang (pods of a namespace
    with the same ``scheduling.x-k8s.io/pod-group`` label), together — every member, a gang
    without a few of its pods does nothing useful — and only when every member has a lower
    priority and one of them holds devices. Pods leaving anyway are in no unit."""
    users = {uid for hold in holds for uid in hold.consumers}
    alone: list[tuple[Pod, ...]] = []
    gangs: dict[tuple[str, str], list[Pod]] = {}
    for pod in pods:
        if pod.leaving:
            continue
        group = group_of(pod)
        if group is not None:
            gangs.setdefault(group, []).append(pod)
        elif pod.priority < priority and pod.uid in users:
            alone.append((pod,))
    together = [tuple(sorted(members, key=_importance)) for members in gangs.values()
                if all(p.priority < priority for p in members)
                and any(p.uid in users for p in members)]
    return alone + together
