"""Every Prometheus metric kdra exports, in one place.

Invariants:
- Names start with ``kdra_``; label values come from fixed sets declared here — except the
  utilisation gauges' ``class``/``node``/``pool``/``namespace``, which name cluster objects
  and are bounded by :class:`Limits` (documented there and in docs/user-guide.md).
- Every labelled series a dashboard relies on exists from start-up with a zero value
  (:func:`init_series`), so rates and alerts work before the first event. The utilisation
  gauges exist once there are devices: every (class, node, pool) then has all three states.
- Code records through the helper functions below, never by touching metric objects ad hoc.
- Nothing per watch event for utilisation: :class:`UtilisationCollector` computes it at
  scrape time (kdra.services.utilisation).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily, Metric

from kdra.memory import MallocCollector

# The C allocator's in-use / free bytes (kdra.memory), read at each scrape of the default
# registry: tells a leak from heap space kept for reuse when RSS grows.
REGISTRY.register(MallocCollector())

CREATE_STATUSES = ("success", "failure")

claim_creates = Counter(
    "kdra_resourceclaim_controller_creates_total",
    "ResourceClaims the claim controller tried to create from templates, by outcome.",
    ["status"],
)
resource_claims = Gauge(
    "kdra_resource_claims",
    "ResourceClaims known to the operator, by whether they are allocated and whether they "
    "were generated from a template (source=template) or created by a user (source=user).",
    ["allocated", "source"],
)
claim_releases = Counter(
    "kdra_resourceclaim_controller_releases_total",
    "Claim clean-up actions: reservations dropped, deallocations, generated claims deleted.",
    ["action"],
)
RELEASE_ACTIONS = ("unreserve", "deallocate", "delete", "reserve")

# --------------------------------------------------------------------------- slice GC (operator)

SLICE_GC_REASONS = ("node-gone", "lease-expired", "old-generation")

slice_gc_deletions = Counter(
    "kdra_slice_gc_deletions_total",
    "ResourceSlices the operator's slice garbage collector deleted, by reason: node-gone (the "
    "slice's Node no longer exists), lease-expired (the publishing agent's Lease expired beyond "
    "the grace period), old-generation (a newer generation of the pool is complete).",
    ["reason"],
)


# --------------------------------------------------------------------------- watches (both)

WATCH_KINDS = ("Pod", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "ResourceSlice",
               "Node", "Lease", "DeviceQuota", "other")

watch_decode_errors = Counter(
    "kdra_watch_decode_errors_total",
    "Objects in watch events and lists that could not be decoded (e.g. nested deeper than "
    "the JSON decoder's limit) and were skipped, by kind. Each is logged once.",
    ["kind"],
)


def init_watch_series() -> None:
    for kind in WATCH_KINDS:
        watch_decode_errors.labels(kind=kind)


def record_watch_decode_error(kind: str) -> None:
    watch_decode_errors.labels(kind=kind if kind in WATCH_KINDS else "other").inc()


def init_series() -> None:
    init_watch_series()
    for status in CREATE_STATUSES:
        claim_creates.labels(status=status)
    for allocated in ("true", "false"):
        for source in ("template", "user"):
            resource_claims.labels(allocated=allocated, source=source).set(0)
    for action in RELEASE_ACTIONS:
        claim_releases.labels(action=action)
    for reason in SLICE_GC_REASONS:
        slice_gc_deletions.labels(reason=reason)
    init_binder_series()
    init_taint_series()


def record_claim_create(success: bool) -> None:
    claim_creates.labels(status="success" if success else "failure").inc()


def record_release(action: str) -> None:
    claim_releases.labels(action=action).inc()


def set_claim_counts(counts: dict[tuple[bool, bool], int]) -> None:
    """``counts[(allocated, generated)]`` → number of claims."""
    for allocated in (True, False):
        for generated in (True, False):
            resource_claims.labels(
                allocated=str(allocated).lower(), source="template" if generated else "user"
            ).set(counts.get((allocated, generated), 0))


def record_slice_gc_deletion(reason: str) -> None:
    slice_gc_deletions.labels(reason=reason).inc()


# --------------------------------------------------------------------------- node agent
# Served by `kdra agent` (one process per node, or one for many simulated nodes); the values
# cover every node the process serves.

DEVICE_HEALTH = ("healthy", "unhealthy")

agent_prepare_duration = Histogram(
    "kdra_agent_prepare_duration_seconds",
    "Time to prepare one claim on a node (checkpoint, CDI spec, status), successful or not.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
agent_prepared_claims = Gauge(
    "kdra_agent_prepared_claims",
    "Claims currently prepared (recorded in the agent's checkpoints).",
)
agent_devices = Gauge(
    "kdra_agent_devices",
    "Devices the agent discovered, by applied health (after the debounce); unhealthy devices "
    "are published with the gpu.kdra.dev/unhealthy taint.",
    ["health"],
)
agent_slice_publishes = Counter(
    "kdra_agent_slice_publishes_total",
    "ResourceSlices the agent created or replaced (each bumps or starts a pool generation).",
)
AGENT_SLICE_DELETION_REASONS = ("start-up", "superseded", "foreign", "driver-gone")
agent_slice_deletions = Counter(
    "kdra_agent_slice_deletions_total",
    "ResourceSlices the agent deleted, by reason: start-up (the node's slices, replaced when "
    "the agent starts), superseded (its own slice a new generation no longer uses), foreign "
    "(a slice in the agent's pool that it did not write, e.g. applied by hand), driver-gone "
    "(no devices of that driver left on the node).",
    ["reason"],
)
agent_prepare_errors = Counter(
    "kdra_agent_prepare_errors_total",
    "Claims whose preparation failed (bad device, file or API error); they are retried.",
)
agent_unprepare_errors = Counter(
    "kdra_agent_unprepare_errors_total",
    "Claims whose clean-up failed (file or API error); they are retried.",
)

NRI_RESULTS = ("adjusted", "no_devices", "refused", "error")

agent_nri_adjustments = Counter(
    "kdra_agent_nri_adjustments_total",
    "Containers the agent's NRI plugin answered at creation, by result: adjusted (given "
    "its devices), no_devices (no kdra devices; device env overridden if set), refused "
    "(a claim of its pod is not prepared on the node: creation fails naming it), error.",
    ["result"],
)
agent_nri_adjustment_seconds = Histogram(
    "kdra_agent_nri_adjustment_seconds",
    "Time the agent's NRI plugin took to decide a container's adjustment (the runtime "
    "waits at most its request timeout, 2 s by default).",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.0),
)
agent_nri_connected = Gauge(
    "kdra_agent_nri_connected",
    "1 while the agent's NRI plugin is registered with the container runtime, else 0.",
)


HEALTH_STATES = ("healthy", "degraded", "lost")

device_health_transitions = Counter(
    "kdra_device_health_transitions_total",
    "Applied health changes of devices (after the debounce and settled period), by the "
    "state a device went to: degraded (tainted NoSchedule), lost (tainted NoExecute), healthy "
    "(taint removed).",
    ["to"],
)


def init_agent_series() -> None:
    init_watch_series()
    for health in DEVICE_HEALTH:
        agent_devices.labels(health=health).set(0)
    for state in HEALTH_STATES:
        device_health_transitions.labels(to=state)
    agent_prepared_claims.set(0)
    for reason in AGENT_SLICE_DELETION_REASONS:
        agent_slice_deletions.labels(reason=reason)
    for result in NRI_RESULTS:
        agent_nri_adjustments.labels(result=result)
    agent_nri_connected.set(0)


def record_agent_slice_deletion(reason: str) -> None:
    agent_slice_deletions.labels(reason=reason).inc()


def observe_nri_adjustment(result: str, seconds: float) -> None:
    agent_nri_adjustments.labels(result=result if result in NRI_RESULTS else "error").inc()
    agent_nri_adjustment_seconds.observe(seconds)


def set_nri_connected(connected: bool) -> None:
    agent_nri_connected.set(1 if connected else 0)


def record_health_transition(to: str) -> None:
    if to in HEALTH_STATES:
        device_health_transitions.labels(to=to).inc()


def observe_prepare(seconds: float, ok: bool) -> None:
    agent_prepare_duration.observe(seconds)
    if not ok:
        agent_prepare_errors.inc()


def record_unprepare_error() -> None:
    agent_unprepare_errors.inc()


def record_slice_publish(count: int = 1) -> None:
    agent_slice_publishes.inc(count)


def set_agent_devices(healthy: int, unhealthy: int) -> None:
    agent_devices.labels(health="healthy").set(healthy)
    agent_devices.labels(health="unhealthy").set(unhealthy)


def set_prepared_claims(count: int) -> None:
    agent_prepared_claims.set(count)


# --------------------------------------------------------------------------- device taints
# Served by the operator: the taints of published devices (slices and DeviceTaintRules) and
# the evictions NoExecute taints caused.

TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
TAINT_REASONS = ("unhealthy", "rule", "driver")
"""unhealthy: kdra's agent (key gpu.kdra.dev/unhealthy); rule: a DeviceTaintRule; driver:
any other taint a slice carries."""

device_taints = Gauge(
    "kdra_device_taints",
    "Taints on published devices now, by effect and by where they come from (unhealthy: the "
    "agent's health loop; rule: a DeviceTaintRule; driver: other slice taints).",
    ["effect", "reason"],
)
taint_evictions = Counter(
    "kdra_taint_evictions_total",
    "Pods the operator evicted (Eviction API) because a device they use has a NoExecute taint "
    "they do not tolerate (or no longer, after tolerationSeconds).",
)


def init_taint_series() -> None:
    for effect in TAINT_EFFECTS:
        for reason in TAINT_REASONS:
            device_taints.labels(effect=effect, reason=reason).set(0)
    taint_evictions.inc(0)


def set_device_taints(counts: dict[tuple[str, str], int]) -> None:
    """``counts[(effect, reason)]``; unknown effects count as None."""
    for effect in TAINT_EFFECTS:
        for reason in TAINT_REASONS:
            device_taints.labels(effect=effect, reason=reason).set(counts.get((effect, reason), 0))


def record_taint_eviction() -> None:
    taint_evictions.inc()


# --------------------------------------------------------------------------- device quotas
# Served by the operator. ``namespace``/``quota``/``class`` name DeviceQuotas and the classes
# they limit: bounded by the DeviceQuotas administrators create (at most 32 limits each).

quota_used = Gauge(
    "kdra_quota_used",
    "What the allocated (and in-flight) claims of a namespace hold of a class a DeviceQuota "
    "limits, by resource: devices, capacity/<name>, counters/<name>.",
    ["namespace", "quota", "class", "resource"],
)
quota_hard = Gauge(
    "kdra_quota_hard",
    "A DeviceQuota's hard limit, by class and resource (as kdra_quota_used).",
    ["namespace", "quota", "class", "resource"],
)
quota_denials = Counter(
    "kdra_quota_denials_total",
    "Scheduling attempts refused because the allocation would exceed a DeviceQuota, by the "
    "quota, class and resource it would exceed.",
    ["namespace", "quota", "class", "resource"],
)
_quota_series: dict[tuple[str, str], set[tuple[str, str]]] = {}


def set_quota(namespace: str, quota: str,
              rows: Iterable[tuple[str, str, float, float]]) -> None:
    """A DeviceQuota's ``(class, resource, used, hard)`` rows; series it no longer has go."""
    seen = set()
    for class_name, resource, used, hard in rows:
        quota_used.labels(namespace, quota, class_name, resource).set(used)
        quota_hard.labels(namespace, quota, class_name, resource).set(hard)
        seen.add((class_name, resource))
    for class_name, resource in _quota_series.get((namespace, quota), set()) - seen:
        quota_used.remove(namespace, quota, class_name, resource)
        quota_hard.remove(namespace, quota, class_name, resource)
    _quota_series[(namespace, quota)] = seen


def forget_quota(namespace: str, quota: str) -> None:
    """A DeviceQuota was deleted: its gauges go."""
    set_quota(namespace, quota, ())
    _quota_series.pop((namespace, quota), None)


def record_quota_denial(namespace: str, quota: str, class_name: str, resource: str) -> None:
    quota_denials.labels(namespace, quota, class_name, resource).inc()


def serve(port: int, registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``/metrics`` on ``port`` (0 disables) from a background thread."""
    if port:
        start_http_server(port, registry=registry)


# --------------------------------------------------------------------------- binder

SCHEDULE_RESULTS = ("allocated", "unschedulable", "waiting", "releasing", "conflict", "invalid",
                    "error", "prepare-failed", "searching", "exhausted", "over-quota")
UNSCHEDULABLE_REASONS = (
    "no-matching-device", "devices-busy", "constraint-unsatisfiable", "pool-incomplete",
    "pool-invalid", "too-many-devices", "cel-error", "class-missing", "unsupported",
    "too-many-choices", "counters-exhausted", "capacity-exhausted", "invalid-request",
    "taint", "unschedulable", "affinity", "resources", "prepare-failed",
    "claim-node-selector", "search-exhausted", "other",
)
SEARCH_LIMITS = ("steps", "deadline", "node-steps")

schedule_attempts = Counter(
    "kdra_scheduler_schedule_attempts_total",
    "Scheduling attempts of the binder, by result.",
    ["result"],
)
pending_pods = Gauge(
    "kdra_scheduler_pending_pods",
    "Pods with schedulerName kdra-scheduler that are not bound yet.",
)
scheduling_duration = Histogram(
    "kdra_scheduler_scheduling_duration_seconds",
    "Time from pod creation to binding, for pods the binder bound.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
allocator_duration = Histogram(
    "kdra_allocator_duration_seconds",
    "Time the allocator took to evaluate the candidate nodes for one pod.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1),
)
search_exhausted = Counter(
    "kdra_allocator_search_exhausted_total",
    "Pods' scheduling attempts whose allocation search ended without a placement because it "
    "ran out of budget, by limit: steps (the pod's step budget), deadline (its time budget), "
    "node-steps (every node searched hit its per-node step budget). The pod is retried later.",
    ["limit"],
)
unschedulable_reasons = Counter(
    "kdra_scheduler_unschedulable_reasons_total",
    "Why nodes were rejected for pods (one count per node and attempt), by reason.",
    ["reason"],
)


# --------------------------------------------------------------------------- preemption

PREEMPTION_RESULTS = ("preempted", "waiting", "no-candidates", "never")

preemption_attempts = Counter(
    "kdra_preemption_attempts_total",
    "Preemption attempts for pods that fit nowhere, by result: preempted (victims chosen on "
    "one node, the pod nominated there), waiting (already nominated; its victims are "
    "terminating), no-candidates (no node where evicting lower-priority pods would let it "
    "fit), never (the pod's preemptionPolicy is Never).",
    ["result"],
)
preemption_victims = Counter(
    "kdra_preemption_victims_total",
    "Pods evicted (Eviction API accepted) to make room for a higher-priority pod.",
)
preemption_decision = Histogram(
    "kdra_preemption_decision_seconds",
    "Time to choose the victims and the node of one preemption (fit tests included).",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5),
)
nominated_pods = Gauge(
    "kdra_preemption_nominated_pods",
    "Pods nominated to a node by preemption whose freed devices are held for them.",
)


def record_preemption(result: str) -> None:
    preemption_attempts.labels(result=result if result in PREEMPTION_RESULTS
                               else "no-candidates").inc()


def record_preemption_victim() -> None:
    preemption_victims.inc()


def observe_preemption_decision(seconds: float) -> None:
    preemption_decision.observe(seconds)


def set_nominated_pods(count: int) -> None:
    nominated_pods.set(count)


def init_binder_series() -> None:
    for result in SCHEDULE_RESULTS:
        schedule_attempts.labels(result=result)
    for reason in UNSCHEDULABLE_REASONS:
        unschedulable_reasons.labels(reason=reason)
    for limit in SEARCH_LIMITS:
        search_exhausted.labels(limit=limit)
    pending_pods.set(0)
    for result in PREEMPTION_RESULTS:
        preemption_attempts.labels(result=result)
    preemption_victims.inc(0)
    nominated_pods.set(0)


def record_schedule_attempt(result: str, seconds: float) -> None:
    schedule_attempts.labels(result=result if result in SCHEDULE_RESULTS else "error").inc()


def set_pending_pods(count: int) -> None:
    pending_pods.set(count)


def observe_allocator(seconds: float) -> None:
    allocator_duration.observe(seconds)


def record_search_exhausted(limit: str) -> None:
    search_exhausted.labels(limit=limit if limit in SEARCH_LIMITS else "steps").inc()


def record_unschedulable(reason: str, nodes: int = 1) -> None:
    """``nodes`` rejected for ``reason`` in one attempt (counted at once: a pod's attempt
    may reject hundreds of nodes)."""
    label = reason if reason in UNSCHEDULABLE_REASONS else "other"
    unschedulable_reasons.labels(reason=label).inc(nodes)


def observe_scheduled(pod: dict[str, object], fallback_seconds: float) -> None:
    """Created → bound, from the pod's creationTimestamp (else ``fallback_seconds``)."""
    from kdra.dra.timestamps import now, parse_time

    meta = pod.get("metadata")
    created = parse_time(meta.get("creationTimestamp") if isinstance(meta, dict) else None)
    seconds = fallback_seconds if created is None else max(0.0, (now() - created).total_seconds())
    scheduling_duration.observe(seconds)


def observe_claim_allocated(claim: dict[str, object]) -> None:
    """A claim's allocation was written: created → allocated (each allocation write of a
    claim counts; one rolled back and allocated again counts twice)."""
    from kdra.dra.timestamps import now, parse_time

    meta = claim.get("metadata")
    created = parse_time(meta.get("creationTimestamp") if isinstance(meta, dict) else None)
    if created is not None:
        claim_pending.observe(max(0.0, (now() - created).total_seconds()))


claim_pending = Histogram(
    "kdra_claim_pending_seconds",
    "Time from a ResourceClaim's creation to the binder writing its allocation.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600),
)


# --------------------------------------------------------------------------- utilisation
# Computed at scrape time from the operator's caches (no API call, nothing per event): a
# custom collector asks the operator's event loop for the figures (kdra.domain.utilisation)
# when Prometheus scrapes, and turns them into gauges with bounded label sets.

DEVICE_STATES = ("free", "allocated", "unhealthy")
NO_CLASS = "<none>"
"""``class`` of devices no DeviceClass selects (not a valid class name, so never a clash)."""
ALL = "<all>"
"""``node`` / ``pool`` / ``namespace`` value of a series that sums what the limits folded."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Utilisation:
    """What the collector exports, as the operator computed it (see kdra.domain.utilisation).

    ``devices``: (class, node, driver, pool) → (free, allocated, unhealthy);
    ``pools``: (node, driver, pool) → devices published; ``namespaces``: (namespace, class)
    → devices allocated."""

    devices: dict[tuple[str, str, str, str], tuple[int, int, int]]
    pools: dict[tuple[str, str, str], int]
    namespaces: dict[tuple[str, str], int]


@dataclass(frozen=True)
class Limits:
    """Label cardinality bounds (settings ``metrics_max_nodes`` / ``metrics_max_namespaces``).

    - More nodes than ``max_nodes`` (counting the nodes of ``nodeName`` pools): ``kdra_devices``
      and ``kdra_pool_devices_total`` drop their ``node`` and ``pool`` labels' values to
      ``<all>`` and sum over them (per class and state; per driver) — series per class, not
      per node, on large clusters. The per-node view stays in ``kubectl kdra free``.
    - More namespaces holding devices than ``max_namespaces``: the ``max_namespaces`` holding
      the most keep their series, the rest are summed under ``namespace="<all>"``.
    - ``class`` has one value per DeviceClass (cluster-scoped, created by administrators) and
      ``<none>``; ``state`` and ``driver`` come from fixed or administrator-chosen sets.
    """

    max_nodes: int = 100
    max_namespaces: int = 50


class UtilisationCollector:
    """A prometheus-client collector over ``source`` (called at every scrape; None when this
    replica has nothing to report, e.g. a standby operator)."""

    def __init__(self, source: Callable[[], Utilisation | None], limits: Limits) -> None:
        self.source = source
        self.limits = limits

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(name, text, labels=labels) for name, text, labels in _FAMILIES]

    def collect(self) -> Iterator[Metric]:
        try:
            found = self.source()
        except Exception:  # never fail the scrape of the other metrics
            log.exception("computing the utilisation metrics failed")
            found = None
        families = [GaugeMetricFamily(name, text, labels=labels)
                    for name, text, labels in _FAMILIES]
        if found is not None:
            devices, pools, namespaces = bounded(found, self.limits)
            for (device_class, node, driver, pool), counts in sorted(devices.items()):
                for state, value in zip(DEVICE_STATES, counts, strict=True):
                    families[0].add_metric([device_class or NO_CLASS, node, driver, pool, state],
                                           value)
            for (node, driver, pool), total in sorted(pools.items()):
                families[1].add_metric([node, driver, pool], total)
            for (namespace, device_class), value in sorted(namespaces.items()):
                families[2].add_metric([namespace, device_class or NO_CLASS], value)
        yield from families


_FAMILIES = (
    ("kdra_devices",
     "Devices by DeviceClass, node, driver, pool and state (free, allocated, unhealthy: held "
     "by a claim but no longer published, or reported unhealthy by the node agent). A device "
     "counts for every class it matches; class <none>: no class selects it. node and pool are "
     "<all> above metrics_max_nodes nodes.",
     ["class", "node", "driver", "pool", "state"]),
    ("kdra_pool_devices_total",
     "Devices the newest generation of each pool publishes (each device once).",
     ["node", "driver", "pool"]),
    ("kdra_namespace_devices_allocated",
     "Devices allocated to the claims of each namespace, by DeviceClass of the request; "
     "namespace <all>: the namespaces beyond metrics_max_namespaces.",
     ["namespace", "class"]),
)


def bounded(found: Utilisation, limits: Limits) -> tuple[
        dict[tuple[str, str, str, str], tuple[int, int, int]],
        dict[tuple[str, str, str], int], dict[tuple[str, str], int]]:
    """``found`` with the label limits applied (see :class:`Limits`)."""
    nodes = {node for (node, _, _) in found.pools if not node.startswith("<")}
    nodes |= {node for (_, node, _, _) in found.devices if node and not node.startswith("<")}
    devices = dict(found.devices)
    pools = dict(found.pools)
    if len(nodes) > limits.max_nodes:
        folded: dict[tuple[str, str, str, str], tuple[int, int, int]] = {}
        for (device_class, _, driver, _), counts in devices.items():
            into = (device_class, ALL, driver, ALL)
            have = folded.get(into, (0, 0, 0))
            folded[into] = (have[0] + counts[0], have[1] + counts[1], have[2] + counts[2])
        devices = folded
        per_driver: dict[tuple[str, str, str], int] = {}
        for (_, driver, _), total in pools.items():
            per_driver[(ALL, driver, ALL)] = per_driver.get((ALL, driver, ALL), 0) + total
        pools = per_driver
    held: dict[str, int] = {}
    for (namespace, _), value in found.namespaces.items():
        held[namespace] = held.get(namespace, 0) + value
    kept = set(sorted(held, key=lambda n: (-held[n], n))[:limits.max_namespaces])
    namespaces: dict[tuple[str, str], int] = {}
    for (namespace, device_class), value in found.namespaces.items():
        where = (namespace if namespace in kept else ALL, device_class)
        namespaces[where] = namespaces.get(where, 0) + value
    return devices, pools, namespaces


_collector: UtilisationCollector | None = None


def register_utilisation(source: Callable[[], Utilisation | None], limits: Limits,
                         registry: CollectorRegistry = REGISTRY) -> UtilisationCollector:
    """Serve the utilisation gauges from ``source`` (registered once per process; a later
    call replaces the source and limits)."""
    global _collector
    if _collector is None:
        _collector = UtilisationCollector(source, limits)
        registry.register(_collector)
    else:
        _collector.source, _collector.limits = source, limits
    return _collector
