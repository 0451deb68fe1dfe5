"""The watch metrics, served by the operator and by the agent alike (both run kdra's API client).

Invariants:
- ``kind`` comes from :data:`WATCH_KINDS`; any other kind is counted as ``other``.
- Recorded by :class:`kdra.kube.client.KubeClient` for each object it skips (logged once,
  counted every time it is skipped).
"""

from __future__ import annotations

from prometheus_client import Counter

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

