"""Every Prometheus metric kdra exports, in one place.

Invariants:
- Names start with ``kdra_``; label values come from fixed sets declared here.
- Every labelled series a dashboard relies on exists from start-up with a zero value
  (:func:`init_series`), so rates and alerts work before the first event.
- Code records through the helper functions below, never by touching metric objects ad hoc.
"""

from __future__ import annotations

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

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


def init_series() -> None:
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
agent_prepare_errors = Counter(
    "kdra_agent_prepare_errors_total",
    "Claims whose preparation failed (bad device, file or API error); they are retried.",
)
agent_unprepare_errors = Counter(
    "kdra_agent_unprepare_errors_total",
    "Claims whose clean-up failed (file or API error); they are retried.",
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
    for health in DEVICE_HEALTH:
        agent_devices.labels(health=health).set(0)
    for state in HEALTH_STATES:
        device_health_transitions.labels(to=state)
    agent_prepared_claims.set(0)


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


def serve(port: int, registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``/metrics`` on ``port`` (0 disables) from a background thread."""
    if port:
        start_http_server(port, registry=registry)


# --------------------------------------------------------------------------- binder

SCHEDULE_RESULTS = ("allocated", "unschedulable", "waiting", "releasing", "conflict", "invalid",
                    "error", "prepare-failed")
UNSCHEDULABLE_REASONS = (
    "no-matching-device", "devices-busy", "constraint-unsatisfiable", "pool-incomplete",
    "pool-invalid", "too-many-devices", "cel-error", "class-missing", "unsupported",
    "too-many-choices", "taint", "unschedulable", "affinity", "resources", "prepare-failed",
    "claim-node-selector", "other",
)

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
unschedulable_reasons = Counter(
    "kdra_scheduler_unschedulable_reasons_total",
    "Why nodes were rejected for pods (one count per node and attempt), by reason.",
    ["reason"],
)


def init_binder_series() -> None:
    for result in SCHEDULE_RESULTS:
        schedule_attempts.labels(result=result)
    for reason in UNSCHEDULABLE_REASONS:
        unschedulable_reasons.labels(reason=reason)
    pending_pods.set(0)


def record_schedule_attempt(result: str, seconds: float) -> None:
    schedule_attempts.labels(result=result if result in SCHEDULE_RESULTS else "error").inc()


def set_pending_pods(count: int) -> None:
    pending_pods.set(count)


def observe_allocator(seconds: float) -> None:
    allocator_duration.observe(seconds)


def record_unschedulable(reason: str, nodes: int = 1) -> None:
    """``nodes`` rejected for ``reason`` in one attempt (counted at once: a pod's attempt
    may reject hundreds of nodes)."""
    label = reason if reason in UNSCHEDULABLE_REASONS else "other"
    unschedulable_reasons.labels(reason=label).inc(nodes)


def observe_scheduled(pod: dict[str, object], fallback_seconds: float) -> None:
    """Created → bound, from the pod's creationTimestamp (else ``fallback_seconds``)."""
    from kdra.domain.timestamps import now, parse_time

    meta = pod.get("metadata")
    created = parse_time(meta.get("creationTimestamp") if isinstance(meta, dict) else None)
    seconds = fallback_seconds if created is None else max(0.0, (now() - created).total_seconds())
    scheduling_duration.observe(seconds)
