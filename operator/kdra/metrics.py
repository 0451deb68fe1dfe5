"""Every Prometheus metric kdra exports, in one place.

Invariants:
- Names start with ``kdra_``; label values come from fixed sets declared here.
- Every labelled series a dashboard relies on exists from start-up with a zero value
  (:func:`init_series`), so rates and alerts work before the first event.
- Code records through the helper functions below, never by touching metric objects ad hoc.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, start_http_server

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


def init_series() -> None:
    for status in CREATE_STATUSES:
        claim_creates.labels(status=status)
    for allocated in ("true", "false"):
        for source in ("template", "user"):
            resource_claims.labels(allocated=allocated, source=source).set(0)
    for action in RELEASE_ACTIONS:
        claim_releases.labels(action=action)


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


def serve(port: int, registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``/metrics`` on ``port`` (0 disables) from a background thread."""
    if port:
        start_http_server(port, registry=registry)
