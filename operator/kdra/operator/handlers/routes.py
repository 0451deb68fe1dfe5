"""kopf wiring of the operator: its lifecycle, and every entry point of the claim lifecycle.

kopf starts and stops the operator (:class:`kdra.operator.composition.Operator`), serves the
liveness endpoint and retries a failed start. Everything the operator does starts from one
of the watches in the table :func:`watches` (the kind watched — where the API flavour has
it — and the services each event feeds; claims and slices feed their typed cache, which hands
each event to the services subscribed to it, kdra.operator.caches), from
the services' own write responses (the claim controller hands the binder the pods it wrote,
``Operator._pod_written``, and the claims it wrote go through the claim cache to its other
subscribers, ``TypedCache.record``), from the admission webhooks
(kdra.operator.webhooks.server) or from timers inside the services (backoffs, the prepare wait, the
slice GC's grace, certificate rotation).

Which machinery delivers the watch events is ``--watch`` (``KDRA_WATCH``):

- ``informers`` (the default): kdra's own informers (kdra.kube.informer), one watch per
  kind, events handed over in stream order, a re-list turned into the deletions it implies,
  an object that cannot be decoded skipped;
- ``kopf``: the same routes registered as ``@kopf.on.event`` handlers, so kopf's watchers,
  per-object queues and workers deliver the events. kopf's re-list delivers no deletions:
  the events go through the informers' bookkeeping (:meth:`Operator.feed`), which a LIST of
  kdra's own reconciles every ``--kopf-reconcile-period`` (deletions delivered from it; the
  first pods LIST also ends the start-up's live GET per claim creation, as the informers'
  first LIST does). An event whose object has no readable metadata is skipped and counted in
  ``kdra_watch_decode_errors_total``, as the informers do. What kopf itself cannot decode — an
  object nested deeper than Python's JSON decoder allows, e.g. a tenant's claim with deep
  opaque parameters — fails kopf's watcher and with it kopf's whole reactor: the operator
  exits, and exits again after each restart while the object exists (6 of the 34 hostile and
  chaos tests fail under ``KDRA_WATCH=kopf``, all from this). kopf's JSON decoding is not
  kdra's to change: this, and kopf's CPU per pod, keep the informers the default
  (bench/RESULTS.md, "kopf or kdra's informers").

bench/scale.py measures one against the other (contenders ``kdra`` and ``kdra-kopf``);
bench/RESULTS.md has the figures behind the default.

Invariants:
- A route only updates caches and enqueues work: it never blocks and never awaits, so both
  machineries call it straight from the event loop, one event at a time.
- Every handler is ``async``: kopf runs sync handlers in a thread pool, and the services'
  caches and queues belong to the event loop.
- Watch events start flowing only after :meth:`Operator.start` has primed every cache from a
  LIST and started the workers (kopf starts its watchers after the startup handlers).

``KDRA_OPERATOR_PAUSE_BEFORE_WATCHES=<seconds>`` (tests only) waits that long between the
start-up (caches primed, controllers running) and the watches: the window in which a busy or
blocked start-up misses changes that its first watch LIST must then make good
(``tests/e2e/test_hostile_tenants_round2.py``, the claim-creation storm of issue 36).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import kopf

from kdra.kube.codec import strip_managed_fields
from kdra.kube.core.agent_leases import AGENT_LEASE_LABEL
from kdra.kube.core.backoff import Backoffs
from kdra.kube.core.flavours import Flavour
from kdra.kube.metrics.watches import record_watch_decode_error
from kdra.kube.resources import LEASES, NODES, POD_GROUPS, PODS, Resource
from kdra.kube.store import JSON
from kdra.operator.composition import Operator
from kdra.operator.scheduler.quota import DEVICE_QUOTAS
from kdra.operator.settings import OperatorSettings
from kdra.operator.taint_eviction import DEVICE_TAINT_RULES

WATCH_MODES = ("informers", "kopf")
PAUSE_ENV = "KDRA_OPERATOR_PAUSE_BEFORE_WATCHES"

log = logging.getLogger(__name__)

Route = Callable[[Operator, str | None, JSON], None]
"""One kind's entry point: (operator, event type — None for a listed object —, object)."""


# ------------------------------------------------------------------ the routes


def route_pod(op: Operator, event: str | None, pod: JSON) -> None:
    """Pods: the claim controller keeps those with claims (it generates and releases their
    claims); the binder keeps every pod (pending ones to schedule, bound ones as holders of
    node resources and as preemption victims); a new pod whose claims kdra would not see
    gets a warning event (kdra.operator.notices)."""
    if op.flavour.has_claims(pod):
        op.claim_controller.on_pod(event, pod)
    op.binder.on_pod(event, pod)
    op.notices.on_pod(event, pod)


def route_claim(op: Operator, event: str | None, claim: JSON) -> None:
    """ResourceClaims: the typed claim cache, which hands the event to its subscribers (the
    claim controller, the binder's snapshot and quota ledger, taint eviction: the
    composition's subscriptions), in no order any of them depends on."""
    op.claims.apply(event, claim)


def route_slice(op: Operator, event: str | None, slice_: JSON) -> None:
    """ResourceSlices: the typed slice cache, which hands the event to its subscribers (the
    binder's snapshot, the slice GC's owners, the taints in force)."""
    op.slices.apply(event, slice_)


def route_node(op: Operator, event: str | None, node: JSON) -> None:
    """Nodes: the binder's node filter; the slice GC (a deleted node's slices go)."""
    op.binder.on_node(event, node)
    op.slice_gc.on_node(event, node)


def route_rule(op: Operator, event: str | None, rule: JSON) -> None:
    """DeviceTaintRules: the binder's snapshot (tainted devices) and taint eviction."""
    op.binder.on_rule(event, rule)
    op.taint_eviction.on_rule(event, rule)


def route_quota(op: Operator, event: str | None, quota: JSON) -> None:
    """DeviceQuotas: the binder's quota checks."""
    op.binder.on_quota(event, quota)


def route_pod_group(op: Operator, event: str | None, group: JSON) -> None:
    """scheduler-plugins' PodGroups (where served): the binder's gang sizes."""
    op.binder.on_pod_group(event, group)


def route_class(op: Operator, event: str | None, device_class: JSON) -> None:
    """DeviceClasses: the binder's snapshot (selectors, configuration)."""
    op.binder.on_class(event, device_class)


def route_template(op: Operator, event: str | None, template: JSON) -> None:
    """ResourceClaimTemplates: the claim controller (pods waiting for a missing template)."""
    op.claim_controller.on_template(event, template)


def route_lease(op: Operator, event: str | None, lease: JSON) -> None:
    """Node agents' heartbeat Leases: the slice GC (an agent gone too long loses its slices)."""
    op.slice_gc.on_lease(event, lease)


@dataclass(frozen=True)
class Watch:
    """One watched kind and its route. ``own_namespace``: only kdra's namespace;
    ``labels``: only objects with these labels."""

    resource: Resource
    route: Route
    own_namespace: bool = False
    labels: tuple[tuple[str, str], ...] = ()

    def label_selector(self) -> str | None:
        return ",".join(f"{k}={v}" for k, v in self.labels) or None


def watches(flavour: Flavour, *, pod_groups: bool = True) -> tuple[Watch, ...]:
    """Every kind the operator watches, hot (pods, claims, slices, nodes, Leases) and rare;
    the four DRA kinds where the API ``flavour`` has them; scheduler-plugins' PodGroups with
    ``pod_groups`` (where the API server serves them)."""
    optional = (Watch(POD_GROUPS, route_pod_group),) if pod_groups else ()
    return (*optional,
        Watch(PODS, route_pod),
        Watch(flavour.claims, route_claim),
        Watch(flavour.slices, route_slice),
        Watch(NODES, route_node),
        Watch(DEVICE_TAINT_RULES, route_rule),
        Watch(DEVICE_QUOTAS, route_quota),
        Watch(flavour.classes, route_class),
        Watch(flavour.templates, route_template),
        # one renewal per node every few seconds
        Watch(LEASES, route_lease, own_namespace=True, labels=((AGENT_LEASE_LABEL, "true"),)),
    )


# ------------------------------------------------------------------ kopf


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ours: OperatorSettings = memo.kdra_settings
    settings.posting.enabled = False  # kdra writes its own, deduplicated events
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    # kopf's own API retries (its watches): capped, jittered, like kdra's own loops.
    settings.networking.error_backoffs = Backoffs(base=1.0, cap=16.0, attempts=8,
                                                  rand=random.random)
    settings.watching.reconnect_backoff = 1.0  # pause between kopf's watch streams
    settings.peering.standalone = True  # see kdra.kube.leader
    # With --watch=kopf: an object's worker outlives a burst (a pod's events come seconds
    # apart), so kopf does not start a task per event.
    settings.queueing.idle_timeout = 30.0
    operator = await Operator.start(ours)
    memo.operator = operator
    pause = os.environ.get(PAUSE_ENV)
    if pause:
        log.warning("pausing %ss before the watches start (%s: tests only)", pause, PAUSE_ENV)
        await asyncio.sleep(float(pause))
    served = watches(operator.flavour, pod_groups=operator.pod_groups)
    if ours.watch != "informers":
        memo.feeds = {
            watch.resource.plural: operator.feed(
                watch.resource, partial(watch.route, operator),
                namespace=ours.namespace if watch.own_namespace else None,
                label_selector=watch.label_selector())
            for watch in served}
    else:
        for watch in served:
            operator.watch(watch.resource, partial(watch.route, operator),
                           namespace=ours.namespace if watch.own_namespace else None,
                           label_selector=watch.label_selector())


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    operator: Operator | None = getattr(memo, "operator", None)
    if operator is not None:
        await operator.stop()


def register_kopf_watches(registry: kopf.OperatorRegistry, namespace: str,
                          flavour: Flavour) -> None:
    """``--watch=kopf``: every route of :func:`watches` as a kopf event handler."""
    for watch in watches(flavour):
        res = watch.resource
        kopf.on.event(res.group, res.version, res.plural, id=f"route-{res.plural}",
                      labels=dict(watch.labels) or None, registry=registry)(
            _kopf_handler(res, namespace if watch.own_namespace else None))


def _kopf_handler(res: Resource, namespace: str | None) -> Callable[..., Any]:
    """The kopf event handler of one kind: the event goes to the kind's feed (the routes,
    behind the informers' bookkeeping), an object without readable metadata is skipped."""
    async def on_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
        obj: Any = event.get("object")
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
            log.warning("%s: skipped a %s event whose object has no readable metadata",
                        res.plural, event.get("type") or "listing")
            record_watch_decode_error(res.kind)
            return
        if namespace is not None and meta.get("namespace") != namespace:
            return
        strip_managed_fields(obj)  # as kdra's client does for what it reads
        feed = memo.feeds.get(res.plural)
        if feed is not None:  # None: a kind not served at start-up (PodGroups)
            feed.deliver(event.get("type"), obj)
    return on_event
