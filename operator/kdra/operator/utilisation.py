"""The operator's utilisation metrics, computed from its caches when Prometheus scrapes.

``kdra_devices``, ``kdra_pool_devices`` and ``kdra_namespace_devices_allocated``
(:mod:`kdra.operator.metrics`) describe the whole cluster's devices. Keeping them up to date per
watch event would cost the hot path on every claim change; instead the metrics' collector asks for
them at scrape time (every 30 s by default), and this module answers from the binder's
snapshot (slices, classes, selector memos) and the shared claim cache, through the same pure
view ``kubectl kdra free`` uses (:mod:`kdra.dra.usage.utilisation`).

Invariants:
- No API call: only the caches are read.
- A scrape pays for what changed since the last one: claim rows are rebuilt only for new
  claim versions (:class:`ClaimRows`), the counts of a pool only when its slices or what the
  claims hold in it changed, and nothing is walked when nothing changed
  (:class:`~kdra.dra.usage.utilisation.UsageMemo`; bench/utilisation.py: 24,000 GPUs and
  12,000 claims, 194 ms a scrape before, 44 ms unchanged and ~110 ms after 1 % of the claims
  moved).
- The caches belong to the operator's event loop, and the scrape runs in the metrics server's
  thread: :func:`loop_source` runs the computation *on* the loop (between two events) and
  waits at most ``timeout`` seconds; a busy or stopped loop makes the scrape leave these
  gauges out, never fail or block for long.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Iterable

from kdra.dra.allocator import Snapshot
from kdra.dra.usage.claims import ClaimRow, claims_of
from kdra.dra.usage.utilisation import UsageMemo, namespace_usage, pool_totals, utilisation
from kdra.kube.store import JSON
from kdra.operator import metrics


class ClaimRows:
    """Each claim's row (:func:`kdra.dra.usage.claims.claims_of`), kept per claim (namespace,
    name, uid) and resourceVersion from one scrape to the next: a claim that did not change
    is not read again; with it, the per-pool counts of the last scrape (:attr:`pools`), so a
    pool whose slices and holders did not change is not counted again."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[str, ClaimRow]] = {}
        self.pools = UsageMemo()

    def __call__(self, claims: Iterable[JSON]) -> list[ClaimRow]:
        rows: dict[str, tuple[str, ClaimRow]] = {}
        for claim in claims:
            meta = claim.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}/{meta.get('uid')}"
            version = str(meta.get("resourceVersion", ""))
            known = self._rows.get(key)
            if known is None or known[0] != version or not version:
                (row,) = claims_of([claim])
                known = (version, row)
            rows[key] = known
        self._rows = rows
        return [row for _, row in rows.values()]


def figures(snapshot: Snapshot, claims: Iterable[JSON],
            rows: ClaimRows | None = None) -> metrics.Utilisation:
    """The utilisation of the cluster the caches describe (``rows``: a cache kept between
    calls)."""
    rows = rows or ClaimRows()
    found = rows(claims)
    devices = {(u.device_class, u.node, u.driver, u.pool):
               (u.free, u.allocated, u.blocked, u.unhealthy)
               for u in utilisation(snapshot, found, sort=False, memo=rows.pools)}
    return metrics.Utilisation(devices=devices, pools=pool_totals(snapshot, rows.pools),
                               namespaces=dict(namespace_usage(found)))


def loop_source(loop: asyncio.AbstractEventLoop, compute: Callable[[], metrics.Utilisation],
                timeout: float = 10.0) -> Callable[[], metrics.Utilisation | None]:
    """A source for the metrics' collector (called from another thread) that runs
    ``compute`` on ``loop``."""

    async def on_loop() -> metrics.Utilisation:
        return compute()

    def source() -> metrics.Utilisation | None:
        if loop.is_closed() or not loop.is_running():
            return None
        future = asyncio.run_coroutine_threadsafe(on_loop(), loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return None

    return source
