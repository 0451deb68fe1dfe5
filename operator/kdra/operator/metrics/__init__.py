"""Every Prometheus metric kdra exports: one module per component, recorded through helpers.

::

    operator.py     the claim controller, the slice GC, device taints, device quotas
    binder.py       scheduling attempts, allocator time, unschedulable reasons, preemption
    agent.py        the node agent: prepares, devices and their health, slices, NRI
    watches.py      undecodable objects skipped by the watches and lists (operator and agent)
    utilisation.py  the utilisation gauges, computed at scrape time by a collector
    serving.py      the default registry (with the C allocator's gauges) and its HTTP server

This package's names (``metrics.record_release``, ``metrics.Limits``...) are the helpers code
records through; the metric objects stay in their modules.

Invariants:
- Names start with ``kdra_``; label values come from fixed sets declared in the modules —
  except the utilisation gauges' ``class``/``node``/``pool``/``namespace``, which name cluster
  objects and are bounded by :class:`Limits` (documented there and in docs/user-guide.md).
- Every labelled series a dashboard relies on exists from start-up with a zero value
  (:func:`init_series`, :func:`init_agent_series`), so rates and alerts work before the first
  event. The utilisation gauges exist once there are devices: every (class, node, pool) then
  has all three states.
- Code records through the helper functions, never by touching metric objects ad hoc.
- Nothing per watch event for utilisation: :class:`UtilisationCollector` computes it at
  scrape time (kdra.operator.utilisation).
- Importing this package registers every metric in the default registry, once.
- The modules import each other one way: operator → binder, watches; agent → watches.
"""

from __future__ import annotations

from prometheus_client import REGISTRY

from kdra.agent.metrics import (
    init_agent_series,
    observe_nri_adjustment,
    observe_prepare,
    record_agent_slice_deletion,
    record_health_transition,
    record_slice_publish,
    record_unprepare_error,
    set_agent_devices,
    set_nri_connected,
    set_prepared_claims,
)
from kdra.kube.metrics.serving import serve
from kdra.kube.metrics.watches import (
    record_watch_decode_error,
)
from kdra.operator.metrics.binder import (
    observe_allocator,
    observe_claim_allocated,
    observe_preemption_decision,
    observe_scheduled,
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
    "init_agent_series",
    "init_series",
    "observe_allocator",
    "observe_claim_allocated",
    "observe_nri_adjustment",
    "observe_preemption_decision",
    "observe_prepare",
    "observe_scheduled",
    "record_agent_slice_deletion",
    "record_claim_create",
    "record_health_transition",
    "record_preemption",
    "record_preemption_victim",
    "record_quota_denial",
    "record_release",
    "record_schedule_attempt",
    "record_search_exhausted",
    "record_slice_gc_deletion",
    "record_slice_publish",
    "record_taint_eviction",
    "record_unprepare_error",
    "record_unschedulable",
    "record_watch_decode_error",
    "register_utilisation",
    "serve",
    "set_agent_devices",
    "set_claim_counts",
    "set_device_taints",
    "set_nominated_pods",
    "set_nri_connected",
    "set_pending_pods",
    "set_prepared_claims",
    "set_quota",
]
