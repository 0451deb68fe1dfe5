"""The metrics every kdra process shares: the watch metrics of kdra's API client and the
serving of ``/metrics`` (the default registry, with the C allocator's gauges).

::

    watches.py   undecodable objects skipped by the watches and lists (operator and agent)
    serving.py   the default registry (with the C allocator's gauges) and its HTTP server

Each program keeps its own metrics (:mod:`kdra.operator.metrics`, :mod:`kdra.agent.metrics`)
and serves them with :func:`serve`: a process exports its program's metrics and these, never
another program's.

Invariants:
- Importing this package registers the C allocator's collector in the default registry,
  once.
- Names start with ``kdra_``; label values come from the fixed sets declared in the modules.
"""

from __future__ import annotations

from prometheus_client import REGISTRY

from kdra.kube.metrics.serving import serve
from kdra.kube.metrics.watches import init_watch_series, record_watch_decode_error

__all__ = ["REGISTRY", "init_watch_series", "record_watch_decode_error", "serve"]
