"""The binder's metrics (kdra's scheduler, in the operator): attempts, allocator time,
unschedulable reasons, preemption, and how long pods and claims waited.

Invariants:
- Label values come from the fixed sets declared here; an unknown value is counted under a
  fallback of its set (``error``, ``other``, ``steps``, ``no-candidates``), never as a new
  series.
- :func:`init_binder_series` creates every labelled series with a zero value (called by
  :func:`kdra.operator.metrics.controllers.init_series`).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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

_PREEMPTION_PLAIN = ("preempted", "waiting", "no-candidates", "never", "over-quota",
                     "held-back")
PREEMPTION_RESULTS = (*_PREEMPTION_PLAIN, *(f"gang-{r}" for r in _PREEMPTION_PLAIN))
"""A gang's preemption (kdra.operator.scheduler.gang_preemption) counts its results with the
``gang-`` prefix: ``gang-preempted``, ``gang-no-candidates``, ..."""

preemption_attempts = Counter(
    "kdra_preemption_attempts_total",
    "Preemption attempts for pods that fit nowhere, by result: preempted (victims chosen on "
    "one node, the pod nominated there), waiting (already nominated; its victims are "
    "terminating), no-candidates (no node where evicting lower-priority pods would let it "
    "fit), never (the pod's preemptionPolicy is Never), over-quota (its DeviceQuota would "
    "refuse it even with the devices free), held-back (its earlier preemptions did not get it "
    "bound: backing off, or out of rounds); the same results prefixed gang- for a whole gang "
    "that fits nowhere (gang-preempted: victims chosen across nodes).",
    ["result"],
)
preemption_victims = Counter(
    "kdra_preemption_victims_total",
    "Pods evicted (Eviction API accepted) to make room for a higher-priority pod or gang.",
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
    fallback = "gang-no-candidates" if result.startswith("gang-") else "no-candidates"
    preemption_attempts.labels(result=result if result in PREEMPTION_RESULTS
                               else fallback).inc()


def record_preemption_victim() -> None:
    preemption_victims.inc()


def observe_preemption_decision(seconds: float) -> None:
    preemption_decision.observe(seconds)


def set_nominated_pods(count: int) -> None:
    nominated_pods.set(count)


# --------------------------------------------------------------------------- gangs

GANG_RESULTS = ("placed", "waiting", "unschedulable", "exhausted", "over-quota", "conflict",
                "prepare-failed", "error")

gang_attempts = Counter(
    "kdra_gang_placement_attempts_total",
    "Joint placement attempts of gangs (pods labelled scheduling.x-k8s.io/pod-group), by "
    "result: placed (every member has devices and a node; its writes start), waiting (fewer "
    "than minMember pods pending), unschedulable (the gang does not fit as a whole), "
    "exhausted (the search budget ran out), over-quota (a DeviceQuota refuses the gang as a "
    "whole), conflict (the cluster changed during the search or the writes), prepare-failed, "
    "error. Gangs placed: the placed count.",
    ["result"],
)
gang_wait = Histogram(
    "kdra_gang_wait_seconds",
    "Time from a gang's first placement attempt to its joint placement.",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)


def record_gang_attempt(result: str) -> None:
    gang_attempts.labels(result=result if result in GANG_RESULTS else "error").inc()


def observe_gang_wait(seconds: float) -> None:
    gang_wait.observe(seconds)


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
    for result in GANG_RESULTS:
        gang_attempts.labels(result=result)


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
