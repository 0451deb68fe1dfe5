"""The operator's Prometheus metrics: one module per component, recorded through helpers.

::

    controllers.py  the claim controller, the slice GC, device taints, device quotas
    binder.py       scheduling attempts, allocator time, unschedulable reasons, preemption
    utilisation.py  the utilisation gauges, computed at scrape time by a collector

The watch metrics and the serving of ``/metrics`` are every process's
(:mod:`kdra.kube.metrics`; :func:`serve` and ``REGISTRY`` are re-exported here); the node
agent has its own (:mod:`kdra.agent.metrics`), which the operator neither imports nor serves.

This package's names (``metrics.record_release``, ``metrics.Limits``...) are the helpers code
records through; the metric objects stay in their modules.

Invariants:
- Names start with ``kdra_``; label values come from fixed sets declared in the modules —
  except the utilisation gauges' ``class``/``node``/``pool``/``namespace``, which name cluster
  objects and are bounded by :class:`Limits` (documented there and in docs/user-guide.md).
- Every labelled series a dashboard relies on exists from start-up with a zero value
  (:func:`init_series`), so rates and alerts work before the first event. The utilisation
  gauges exist once there are devices: every (class, node, pool) then has all three states.
- Code records through the helper functions, never by touching metric objects ad hoc.
- Nothing per watch event for utilisation: :class:`UtilisationCollector` computes it at
  scrape time (kdra.operator.utilisation).
- Importing this package registers the operator's metrics in the default registry, once.
- The modules import each other one way: controllers → binder, kube's watches.
"""

from __future__ import annotations

from kdra.kube.metrics import REGISTRY, serve
from kdra.operator.metrics.binder import (
    observe_allocator,
    observe_claim_allocated,
    observe_gang_wait,
    observe_preemption_decision,
    observe_scheduled,
    record_gang_attempt,
    record_preemption,
    record_preemption_victim,
    record_schedule_attempt,
    record_search_exhausted,
    record_unschedulable,
    set_nominated_pods,
    set_pending_pods,
)
from kdra.operator.metrics.controllers import (
    TAINT_EFFECTS,
    forget_quota,
    init_series,
    record_claim_create,
    record_quota_denial,
    record_release,
    record_slice_gc_deletion,
    record_taint_eviction,
    set_api_flavour,
    set_claim_controller_deferred,
    set_claim_counts,
    set_device_taints,
    set_quota,
)
from kdra.operator.metrics.utilisation import (
    Limits,
    Utilisation,
    UtilisationCollector,
    register_utilisation,
)

__all__ = [
    "REGISTRY",
    "TAINT_EFFECTS",
    "Limits",
    "Utilisation",
    "UtilisationCollector",
    "forget_quota",
    "init_series",
    "observe_allocator",
    "observe_claim_allocated",
    "observe_gang_wait",
    "observe_preemption_decision",
    "observe_scheduled",
    "record_claim_create",
    "record_gang_attempt",
    "record_preemption",
    "record_preemption_victim",
    "record_quota_denial",
    "record_release",
    "record_schedule_attempt",
    "record_search_exhausted",
    "record_slice_gc_deletion",
    "record_taint_eviction",
    "record_unschedulable",
    "register_utilisation",
    "serve",
    "set_api_flavour",
    "set_claim_controller_deferred",
    "set_claim_counts",
    "set_device_taints",
    "set_nominated_pods",
    "set_pending_pods",
    "set_quota",
]
