"""The utilisation gauges (``kdra_devices``, ``kdra_pool_devices``,
``kdra_namespace_devices_allocated``): a collector computed at scrape time.

Computed at scrape time from the operator's caches (no API call, nothing per event): a
custom collector asks the operator's event loop for the figures (kdra.dra.usage.utilisation)
when Prometheus scrapes, and turns them into gauges with bounded label sets.

Invariants:
- Nothing per watch event: :class:`UtilisationCollector` computes the figures at each scrape
  (kdra.operator.utilisation).
- ``class``/``node``/``pool``/``namespace`` name cluster objects and are bounded by
  :class:`Limits`; ``state`` is one of :data:`DEVICE_STATES`.
- The gauges exist once there are devices: every (class, node, pool) then has all four
  states. A failing source leaves the gauges out; the scrape of the other metrics works.
- One collector a process (:func:`register_utilisation`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

DEVICE_STATES = ("free", "allocated", "blocked", "unhealthy")
NO_CLASS = "<none>"
"""``class`` of devices no DeviceClass selects (not a valid class name, so never a clash)."""
ALL = "<all>"
"""``node`` / ``pool`` / ``namespace`` value of a series that sums what the limits folded."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Utilisation:
    """What the collector exports, as the operator computed it (see kdra.dra.usage.utilisation).

    ``devices``: (class, node, driver, pool) → (free, allocated, blocked, unhealthy);
    ``pools``: (node, driver, pool) → devices published; ``namespaces``: (namespace, class)
    → devices allocated."""

    devices: dict[tuple[str, str, str, str], tuple[int, int, int, int]]
    pools: dict[tuple[str, str, str], int]
    namespaces: dict[tuple[str, str], int]


@dataclass(frozen=True)
class Limits:
    """Label cardinality bounds (settings ``metrics_max_nodes`` / ``metrics_max_namespaces``).

    - More nodes than ``max_nodes`` (counting the nodes of ``nodeName`` pools): ``kdra_devices``
      and ``kdra_pool_devices`` drop their ``node`` and ``pool`` labels' values to
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
     "Devices by DeviceClass, node, driver, pool and state (free: could be allocated now; "
     "allocated; blocked: held by nobody, but a shared counter it consumes has no room left, "
     "e.g. a GPU partition whose memory another partition holds, or its slice taints it "
     "NoSchedule/NoExecute; unhealthy: held "
     "by a claim but no longer published, or reported unhealthy by the node agent). A device "
     "counts for every class it matches; class <none>: no class selects it. node and pool are "
     "<all> above metrics_max_nodes nodes.",
     ["class", "node", "driver", "pool", "state"]),
    ("kdra_pool_devices",
     "Devices the newest generation of each pool publishes (each device once).",
     ["node", "driver", "pool"]),
    ("kdra_namespace_devices_allocated",
     "Devices allocated to the claims of each namespace, by DeviceClass of the request; "
     "namespace <all>: the namespaces beyond metrics_max_namespaces.",
     ["namespace", "class"]),
)


def bounded(found: Utilisation, limits: Limits) -> tuple[
        dict[tuple[str, str, str, str], tuple[int, int, int, int]],
        dict[tuple[str, str, str], int], dict[tuple[str, str], int]]:
    """``found`` with the label limits applied (see :class:`Limits`)."""
    nodes = {node for (node, _, _) in found.pools if not node.startswith("<")}
    nodes |= {node for (_, node, _, _) in found.devices if node and not node.startswith("<")}
    devices = dict(found.devices)
    pools = dict(found.pools)
    if len(nodes) > limits.max_nodes:
        folded: dict[tuple[str, str, str, str], tuple[int, int, int, int]] = {}
        for (device_class, _, driver, _), counts in devices.items():
            into = (device_class, ALL, driver, ALL)
            have = folded.get(into, (0, 0, 0, 0))
            folded[into] = (have[0] + counts[0], have[1] + counts[1], have[2] + counts[2],
                            have[3] + counts[3])
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
