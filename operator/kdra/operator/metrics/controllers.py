"""The operator's own metrics: the claim controller, the slice GC, device taints and quotas.

Invariants:
- Label values come from the fixed sets declared here, except the quota gauges'
  ``namespace``/``quota``/``class``, bounded by the DeviceQuotas administrators create.
- :func:`init_series` creates every labelled series the operator's dashboards rely on (its
  own, the binder's and the watches') with a zero value, at start-up.
- A DeviceQuota's series go with the DeviceQuota (:func:`set_quota`, :func:`forget_quota`).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge

from kdra.kube.metrics.watches import init_watch_series
from kdra.operator.metrics.binder import init_binder_series

# --------------------------------------------------------------------------- claim controller

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
claim_controller_deferred = Gauge(
    "kdra_resourceclaim_controller_deferred",
    "1 when kdra's claim controller leaves claim generation and clean-up to "
    "kube-controller-manager's resourceclaim-controller (native flavour: --claim-controller=off, "
    "or that controller was seen running; the operator's log says why), else 0.",
)
FLAVOURS = ("native", "kdra")
api_flavour = Gauge(
    "kdra_api_flavour",
    "1 for the API flavour the operator serves: native (resource.k8s.io/v1, pods' "
    "spec.resourceClaims) or kdra (resource.kdra.dev and pod annotations).",
    ["flavour"],
)

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
    init_watch_series()
    for status in CREATE_STATUSES:
        claim_creates.labels(status=status)
    for allocated in ("true", "false"):
        for source in ("template", "user"):
            resource_claims.labels(allocated=allocated, source=source).set(0)
    for action in RELEASE_ACTIONS:
        claim_releases.labels(action=action)
    claim_controller_deferred.set(0)
    for flavour in FLAVOURS:
        api_flavour.labels(flavour=flavour)
    for reason in SLICE_GC_REASONS:
        slice_gc_deletions.labels(reason=reason)
    init_binder_series()
    init_taint_series()


def record_claim_create(success: bool) -> None:
    claim_creates.labels(status="success" if success else "failure").inc()


def record_release(action: str) -> None:
    claim_releases.labels(action=action).inc()


def set_claim_controller_deferred(deferred: bool) -> None:
    """Whether kdra leaves the claim lifecycle to kube-controller-manager (why: the log)."""
    claim_controller_deferred.set(1 if deferred else 0)


def set_api_flavour(name: str) -> None:
    for flavour in FLAVOURS:
        api_flavour.labels(flavour=flavour).set(1 if flavour == name else 0)


def set_claim_counts(counts: dict[tuple[bool, bool], int]) -> None:
    """``counts[(allocated, generated)]`` → number of claims."""
    for allocated in (True, False):
        for generated in (True, False):
            resource_claims.labels(
                allocated=str(allocated).lower(), source="template" if generated else "user"
            ).set(counts.get((allocated, generated), 0))


def record_slice_gc_deletion(reason: str) -> None:
    slice_gc_deletions.labels(reason=reason).inc()


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
