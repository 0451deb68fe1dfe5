"""Pure scheduling rules of kdra's binder: node filters, scores, what a pod is told, and the
budget of an allocation search — shared by the binder (:mod:`kdra.operator.scheduler`) and
``kubectl kdra why`` (:mod:`kdra.cli.core.why`), which evaluates a pod as the binder would.

Mirrors kube-scheduler's default filters for the parts kdra must honour itself (it binds pods
directly): ``NodeUnschedulable``, ``TaintToleration`` (NoSchedule / NoExecute), ``NodeAffinity``
(``nodeSelector`` and required node affinity) and ``NodeResourcesFit`` (cpu, memory, pods).
The failure texts follow kube-scheduler's, so users recognise them.

Invariants:
- Every function is a pure function of its arguments (plain dicts from the API, kdra models).
- :meth:`PodFit.why_not` (and :func:`node_filter`) returns ``None`` when the node passes,
  else one short, node-independent message used to group nodes in explanations ("1 node(s)
  had untolerated taint {...}").
- Scores are "higher is better"; ties are broken by node name so placement is deterministic.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kdra.dra.allocator import NodeInfo, Placement, nodes_available, selector_matches
from kdra.dra.errors import InvalidObject
from kdra.dra.models import NodeSelector, ResourceClaim
from kdra.dra.quantity import InvalidQuantity, parse_quantity

JSON = Mapping[str, Any]
POLICIES = ("binpack", "spread", "first-fit")
POLICY_ANNOTATION = "resource.kdra.dev/placement-policy"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""A pod's gang (scheduler-plugins' label): kdra-scheduler places the pods of a namespace with
the same value together, all or none (kdra.operator.core.gangs, docs/gangs.md)."""
SEARCH_EXHAUSTED = "AllocationSearchExhausted"
"""PodScheduled=False reason of a pod whose allocation search ran out of budget (the binder
sets it; ``kubectl kdra why`` explains it)."""


# --------------------------------------------------------------------------- resources


@dataclass(frozen=True, slots=True)
class Resources:
    """CPU in millicores, memory in bytes, and a pod count."""

    cpu: int = 0
    memory: int = 0
    pods: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu + other.cpu, self.memory + other.memory,
                         self.pods + other.pods)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu - other.cpu, self.memory - other.memory,
                         self.pods - other.pods)


@functools.lru_cache(maxsize=4096)
def _scaled(text: str, scale: int) -> int:
    try:
        value: Decimal = parse_quantity(text).value
    except InvalidQuantity:
        return 0
    return int((value * scale).to_integral_value(rounding="ROUND_CEILING"))


def _quantity(text: Any, scale: int) -> int:
    """A quantity in units of 1/``scale``, rounded up; 0 when invalid. Memoised: clusters use
    few distinct quantity strings, and this runs for every pod and node."""
    return _scaled(str(text), scale)


def pod_requests(pod: JSON) -> Resources:
    """What a pod asks for: the sum over containers, or the largest init container,
    whichever is larger (kube-scheduler's effective request), plus one pod."""
    spec = pod.get("spec", {})

    def total(containers: Iterable[JSON]) -> tuple[int, int]:
        cpu = memory = 0
        for container in containers:
            requests = (container.get("resources") or {}).get("requests") or {}
            cpu += _quantity(requests.get("cpu", 0), 1000)
            memory += _quantity(requests.get("memory", 0), 1)
        return cpu, memory

    cpu, memory = total(spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        init_cpu, init_memory = total([init])
        cpu, memory = max(cpu, init_cpu), max(memory, init_memory)
    overhead = spec.get("overhead") or {}
    cpu += _quantity(overhead.get("cpu", 0), 1000)
    memory += _quantity(overhead.get("memory", 0), 1)
    return Resources(cpu, memory, 1)


def node_allocatable(node: JSON) -> Resources:
    status = node.get("status", {})
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    return Resources(
        _quantity(allocatable.get("cpu", 0), 1000),
        _quantity(allocatable.get("memory", 0), 1),
        _quantity(allocatable.get("pods", 110), 1),
    )


# --------------------------------------------------------------------------- filters


def tolerates(tolerations: Sequence[JSON], taint: JSON) -> bool:
    """Whether any toleration matches the taint (key, value/operator and effect)."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if not key and operator == "Exists":
            return True
        if key != taint.get("key"):
            continue
        if operator == "Exists" or toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def node_info(node: JSON) -> NodeInfo:
    meta = node.get("metadata", {})
    return NodeInfo(meta.get("name", ""), dict(meta.get("labels") or {}))


def _required_affinity(pod: JSON) -> NodeSelector | None:
    affinity = ((pod.get("spec", {}).get("affinity") or {}).get("nodeAffinity") or {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return None
    try:
        return NodeSelector.model_validate(required)
    except ValueError as exc:
        raise InvalidObject("spec.affinity.nodeAffinity."
                            "requiredDuringSchedulingIgnoredDuringExecution", str(exc)) from exc


@dataclass(frozen=True, slots=True)
class NodeView:
    """What the filters need of a Node, parsed once per node version (not once per pod)."""

    name: str
    info: NodeInfo
    allocatable: Resources
    unschedulable: bool
    taints: tuple[JSON, ...]  # NoSchedule and NoExecute taints only


def node_view(node: JSON) -> NodeView:
    spec = node.get("spec", {})
    return NodeView(
        name=node.get("metadata", {}).get("name", ""),
        info=node_info(node),
        allocatable=node_allocatable(node),
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(t for t in spec.get("taints") or []
                     if t.get("effect") in ("NoSchedule", "NoExecute")),
    )


_UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


@dataclass(frozen=True, slots=True)
class PodFit:
    """What the filters need of a pod, parsed once per scheduling attempt.

    Build with :meth:`of`, which raises :class:`InvalidObject` for an invalid required node
    affinity; :meth:`why_not` is then a cheap check per node.
    """

    tolerations: tuple[JSON, ...]
    node_selector: Mapping[str, str]
    affinity: NodeSelector | None
    requests: Resources

    @classmethod
    def of(cls, pod: JSON, requests: Resources | None = None) -> PodFit:
        spec = pod.get("spec", {})
        return cls(tuple(spec.get("tolerations") or []), dict(spec.get("nodeSelector") or {}),
                   _required_affinity(pod), requests or pod_requests(pod))

    def why_not(self, node: NodeView, used: Resources) -> str | None:
        """Why the node cannot take the pod (before devices are considered), or ``None``."""
        if node.unschedulable and not tolerates(self.tolerations, _UNSCHEDULABLE_TAINT):
            return "node(s) were unschedulable"
        for taint in node.taints:
            if not tolerates(self.tolerations, taint):  # kube-scheduler's {%s: %s}
                return (f"node(s) had untolerated taint {{{taint.get('key')}: "
                        f"{taint.get('value') or ''}}}")
        if self.node_selector:
            labels = node.info.labels
            if any(labels.get(k) != v for k, v in self.node_selector.items()):
                return "node(s) didn't match Pod's node affinity/selector"
        if self.affinity is not None and not selector_matches(self.affinity, node.info):
            return "node(s) didn't match Pod's node affinity/selector"
        # Run once per node for every pod: plain comparisons, no Resources built.
        requests, allocatable = self.requests, node.allocatable
        if requests.pods > allocatable.pods - used.pods:
            return "Too many pods"
        if requests.cpu > allocatable.cpu - used.cpu:
            return "Insufficient cpu"
        if requests.memory > allocatable.memory - used.memory:
            return "Insufficient memory"
        return None


def node_rejection(fit: PodFit, node: NodeView, used: Resources,
                   claims: Sequence[ResourceClaim]) -> str | None:
    """Why ``node`` cannot take the pod before its unallocated claims are considered: the
    pod's own filters (:meth:`PodFit.why_not`), or a claim of the pod already allocated with
    a node selector the node does not match. ``None``: the node is a candidate."""
    why = fit.why_not(node, used)
    if why is not None:
        return why
    for claim in claims:
        allocation = claim.status.allocation
        if claim.allocated and allocation is not None and \
                not selector_matches(allocation.node_selector, node.info):
            return (f"node(s) didn't match the node selector of allocated claim "
                    f"{claim.metadata.name!r}")
    return None


def node_usage(pods: Iterable[JSON]) -> dict[str, Resources]:
    """Node name → the summed requests of the pods bound to it that are not done (what the
    binder keeps up to date from pod events, computed at once from a list)."""
    used: dict[str, Resources] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase not in ("Succeeded", "Failed"):
            used[node] = used.get(node, Resources()) + pod_requests(pod)
    return used


def node_filter(pod: JSON, node: JSON, used: Resources, requests: Resources) -> str | None:
    """Why ``node`` cannot take ``pod`` (before devices are considered), or ``None``.
    (One-off form of ``PodFit.of(pod).why_not(node_view(node), used)``.)"""
    return PodFit.of(pod, requests).why_not(node_view(node), used)


# --------------------------------------------------------------------------- scoring


def pod_policy(pod: JSON, default: str) -> str:
    """The placement policy for a pod: its annotation if valid, else the default."""
    value = (pod.get("metadata", {}).get("annotations") or {}).get(POLICY_ANNOTATION)
    return value if value in POLICIES else default


def score(placement: Placement, policy: str) -> float:
    """Higher is better. ``binpack``: fewest matching devices left free on the node (fill
    nodes up, keep others whole); ``spread``: most left free; ``first-fit``: all equal."""
    free = sum(placement.free_after.values())
    if policy == "binpack":
        return -free
    if policy == "spread":
        return free
    return 0


MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENTAGE = 5


def feasible_nodes_to_find(nodes: int) -> int:
    """How many feasible nodes to find before choosing, as kube-scheduler's adaptive
    ``percentageOfNodesToScore``: every node below 100; else ``50 - nodes/125`` percent
    (at least 5%), and never fewer than 100. 500 nodes: 230; 2,000: 680; 5,000: 500."""
    if nodes < MIN_FEASIBLE_NODES:
        return nodes
    percentage = max(50 - nodes // 125, MIN_FEASIBLE_PERCENTAGE)
    return max(nodes * percentage // 100, MIN_FEASIBLE_NODES)


@dataclass(frozen=True, slots=True)
class SearchWindow:
    """Which nodes the allocator evaluates for one pod: ``limit`` feasible ones (``None``:
    all), from index ``start`` of the name-sorted candidates, wrapping around."""

    limit: int | None
    start: int
    rotates: bool  # the caller continues from ``ClusterOutcome.next_start`` next time


def search_window(policy: str, nodes: int, next_start: int) -> SearchWindow:
    """``first-fit``: the first feasible node by name. ``binpack``: the fullest of the first
    feasible nodes by name (starting at the same place keeps filling the same nodes).
    ``spread``: the emptiest of the feasible nodes found from where the previous pod's search
    stopped (kube-scheduler's rotating start index). The number found is
    :func:`feasible_nodes_to_find`, so the cost per pod stops growing with the cluster."""
    if policy == "first-fit":
        return SearchWindow(1, 0, rotates=False)
    limit = feasible_nodes_to_find(nodes)
    if policy == "spread":
        return SearchWindow(limit, next_start % nodes if nodes else 0, rotates=True)
    return SearchWindow(limit, 0, rotates=False)


def best(placements: Mapping[str, Placement], policy: str,
         order: Sequence[str]) -> Placement | None:
    """The winning placement: the best ``firstAvailable`` choices first (upstream's DRA
    score: a node where a request's first alternative fits beats one where only its third
    does), then the placement policy; ties go to the earliest node in ``order``."""
    rank = {name: index for index, name in enumerate(order)}
    packing = policy == "binpack"
    candidates = sorted(placements.values(),
                        key=lambda p: (-p.preference, p.fragmentation if packing else 0,
                                       -score(p, policy), rank.get(p.node, 0), p.node))
    return candidates[0] if candidates else None


# --------------------------------------------------------------------------- explanations


def explain(messages: Counter[str], total: int, available: int = 0) -> str:
    """``"0/12 nodes are available: 7 <why>, 4 <why>."`` — kube-scheduler's wording, most
    frequent reason first (:func:`kdra.dra.allocator.nodes_available`)."""
    return nodes_available(messages, total, available)


# --------------------------------------------------------------------------- search budget


@dataclass(frozen=True)
class SearchBudget:
    steps: int = 1_000_000
    """Search steps (devices tried) one pod's attempt may spend."""
    timeout: float = 10.0
    """Seconds one pod's attempt may search (wall clock, slices of other work included)."""
    slice: int = 1_000
    """Steps between two yields to the event loop (about 3 ms)."""

    def node_steps(self, nodes: int) -> int:
        """Steps one node's search may spend when ``nodes`` are candidates: the pod's budget
        shared by up to eight of them, so that one pathological node does not hide the
        others (a single candidate gets all of it)."""
        return max(1, self.steps // max(1, min(8, nodes)))
