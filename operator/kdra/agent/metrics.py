"""The node agent's metrics (``kdra agent``): prepares, devices and their health, slices, NRI,
the kubelet plugin.

Served by `kdra agent` (one process per node, or one for many simulated nodes) with the
watch metrics every process shares (:mod:`kdra.kube.metrics`, whose :func:`serve` and
``REGISTRY`` are re-exported here); the values cover every node the process serves. The
operator's metrics are not the agent's: it neither imports nor serves them.

Invariants:
- Label values come from the fixed sets declared here (an unknown NRI result counts as
  ``error``; an unknown health state or kubelet method is not counted).
- :func:`init_agent_series` creates every labelled series with a zero value at start-up
  (the watches' too).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from kdra.kube.metrics import REGISTRY, serve
from kdra.kube.metrics.watches import init_watch_series

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


KUBELET_METHODS = ("GetInfo", "NotifyRegistrationStatus", "NodePrepareResources",
                   "NodeUnprepareResources", "NodeWatchResources")
KUBELET_RESULTS = ("ok", "error")

agent_kubelet_calls = Counter(
    "kdra_agent_kubelet_calls_total",
    "gRPC calls the kubelet made to the agent as its DRA plugin (native flavour), by method "
    "and result: error when the call failed or any of its claims got an error (the kubelet "
    "retries them).",
    ["method", "result"],
)
agent_kubelet_registrations = Counter(
    "kdra_agent_kubelet_registrations_total",
    "Registrations of the agent's DRA plugins the kubelet confirmed (NotifyRegistrationStatus "
    "with plugin_registered: one per driver, again after each kubelet restart).",
)
agent_kubelet_refused = Counter(
    "kdra_agent_kubelet_refused_connections_total",
    "Connections to the agent's kubelet plugin sockets refused because the caller's uid/gid "
    "is not allowed by the permissions of the socket and its directory.",
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
    for method in KUBELET_METHODS:
        for result in KUBELET_RESULTS:
            agent_kubelet_calls.labels(method=method, result=result)


def record_kubelet_call(method: str, ok: bool) -> None:
    if method in KUBELET_METHODS:
        agent_kubelet_calls.labels(method=method, result="ok" if ok else "error").inc()


def record_kubelet_registration() -> None:
    agent_kubelet_registrations.inc()


def record_kubelet_refusal() -> None:
    agent_kubelet_refused.inc()


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


__all__ = [
    "REGISTRY",
    "init_agent_series",
    "observe_nri_adjustment",
    "observe_prepare",
    "record_agent_slice_deletion",
    "record_health_transition",
    "record_kubelet_call",
    "record_kubelet_refusal",
    "record_kubelet_registration",
    "record_slice_publish",
    "record_unprepare_error",
    "serve",
    "set_agent_devices",
    "set_nri_connected",
    "set_prepared_claims",
]
