"""Serving the metrics: the default registry, with the C allocator's gauges, over HTTP.

Invariants:
- Every kdra metric is in prometheus_client's default :data:`REGISTRY`; importing
  :mod:`kdra.kube.metrics` registers the C allocator's collector there once.
- :func:`serve` serves from a background thread; port 0 serves nothing.
"""

from __future__ import annotations

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from kdra.kube.memory import MallocCollector

# The C allocator's in-use / free bytes (kdra.kube.memory), read at each scrape of the default
# registry: tells a leak from heap space kept for reuse when RSS grows.
REGISTRY.register(MallocCollector())


def serve(port: int, registry: CollectorRegistry = REGISTRY) -> None:
    """Serve ``/metrics`` on ``port`` (0 disables) from a background thread."""
    if port:
        start_http_server(port, registry=registry)
