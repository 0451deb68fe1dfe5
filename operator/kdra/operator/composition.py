"""The operator's composition root: one API client, the caches and the controllers.

Built once at start-up (from kopf's startup handler) and handed to the handlers through kopf's
memo; nothing here is a module global.

Invariants:
- Caches are primed from a LIST before any controller worker starts, so "not in the cache"
  means "does not exist" (or is newer than the start-up list, which a watch event fixes).
  What was primed is handed to each kind's informer (:attr:`Operator.primed`), whose first
  LIST then delivers the deletions that happened in between (however long the start-up).
- ``stop()`` stops the workers before closing the API client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket

from kdra.dra import cel
from kdra.dra.scheduling import SearchBudget
from kdra.kube.client import KubeClient, connect
from kdra.kube.core.agent_leases import AGENT_LEASE_LABEL
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.kube.errors import NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.informer import Handler, Informer
from kdra.kube.leader import LeaderElector
from kdra.kube.resources import CLAIMS, CLASSES, LEASES, NODES, PODS, SLICES, TEMPLATES, Resource
from kdra.kube.store import JSON, Store
from kdra.operator import metrics, utilisation
from kdra.operator.claim_controller import ClaimController, claim_store, pod_store
from kdra.operator.notices import PodNotices
from kdra.operator.scheduler import Binder, BinderSettings
from kdra.operator.scheduler.preemption import PreemptionSettings
from kdra.operator.scheduler.quota import DEVICE_QUOTAS, QuotaStatusWriter
from kdra.operator.settings import OperatorSettings
from kdra.operator.slice_gc import SliceGC
from kdra.operator.taint_eviction import DEVICE_TAINT_RULES, TaintEvictionController
from kdra.operator.webhooks.server import WebhookServer, start_webhooks

log = logging.getLogger(__name__)


def _leadership_lost(reason: str) -> None:
    """Stop acting at once: kopf handles SIGTERM by running the cleanup (services stop)."""
    log.error("leader election: leadership lost (%s); stopping", reason)
    os.kill(os.getpid(), signal.SIGTERM)


class Operator:
    def __init__(self, settings: OperatorSettings, client: KubeClient) -> None:
        self.settings = settings
        self.client = client
        self.elector: LeaderElector | None = None
        self.leadership: asyncio.Task[None] | None = None
        self.events = EventRecorder(client, component="kdra-operator")
        self.pods = pod_store()
        self.claims = claim_store()
        self.templates = Store("ResourceClaimTemplate")
        self.binder = Binder(client, EventRecorder(client, component="kdra-scheduler"),
                             claims=self.claims, settings=BinderSettings(
                                 policy=settings.policy,
                                 prepare_timeout=settings.prepare_timeout,
                                 binding_timeout=settings.binding_timeout,
                                 preemption=PreemptionSettings(
                                     enabled=settings.preemption, hold=settings.preemption_hold,
                                     steps=settings.allocation_search_steps),
                                 search=SearchBudget(
                                     steps=settings.allocation_search_steps,
                                     timeout=settings.allocation_search_timeout)))
        # The controller's write responses go to the binder at once: claim names on a pod,
        # devices freed by a deallocation (the watch events of the same versions follow and
        # change nothing).
        self.claim_controller = ClaimController(
            client, self.events, pods=self.pods, claims=self.claims, templates=self.templates,
            workers=settings.workers, pod_written=self._pod_written,
            claim_written=self.binder.on_claim,
            pod_gone=lambda pod: self.binder.on_pod("DELETED", pod),
        )
        self.webhook: WebhookServer | None = None  # admission webhooks (started in start())
        self.slice_gc = SliceGC(client, namespace=settings.namespace,
                                grace=settings.slice_gc_grace)
        self.taint_eviction = TaintEvictionController(client, self.events, claims=self.claims,
                                                      pods=self.pods,
                                                      nodes=self.binder.cluster.nodes)
        self.quota_status = QuotaStatusWriter(client, self.binder.quotas)
        self.notices = PodNotices(self.events)  # pods whose claims kdra would not see
        self.informers: list[Informer] = []  # kdra.operator.handlers.routes starts them (watch())
        self.primed: dict[str, list[JSON]] = {}
        """Resource plural → the objects of the start-up LIST (until its informer starts)."""

    @classmethod
    async def start(cls, settings: OperatorSettings) -> Operator:
        client = await connect(settings.kubeconfig, component="operator")
        operator = cls(settings, client)
        try:
            await operator._start()
        except BaseException:
            # kopf retries a failed start-up: give back what this attempt took (the webhook
            # port above all, else every retry fails with "address already in use").
            await asyncio.shield(operator.stop())
            raise
        return operator

    async def _start(self) -> None:
        settings = self.settings
        # Admission webhooks: stateless, so every replica serves them (standbys too), and
        # before the controllers run, since the claims they create go through the validating
        # webhook (kdra.operator.webhooks.server).
        self.webhook = await start_webhooks(settings, self.client)
        if settings.leader_elect:
            self.elector = LeaderElector(
                self.client, namespace=settings.namespace, name="kdra-operator",
                identity=settings.identity or f"{socket.gethostname()}-{os.getpid()}",
                lease_duration=settings.leader_lease_duration,
                renew_interval=settings.leader_lease_duration / 3)
            await self.elector.acquire()  # a standby waits here
            self.leadership = asyncio.create_task(
                self.elector.keep(_leadership_lost), name="leader-lease")
        await asyncio.to_thread(cel.warm_up)  # else the first allocation pays for it
        await self.prime()
        self.claim_controller.start()
        self.binder.start()
        self.slice_gc.start()
        self.taint_eviction.start()
        self.quota_status.start()
        # Utilisation gauges, computed from the caches at scrape time (leader only: a
        # standby has no caches, and the sums over replicas stay right).
        rows = utilisation.ClaimRows()
        metrics.register_utilisation(
            utilisation.loop_source(asyncio.get_running_loop(), lambda: utilisation.figures(
                self.binder.snapshot, self.claims, rows)),
            metrics.Limits(max_nodes=settings.metrics_max_nodes,
                           max_namespaces=settings.metrics_max_namespaces))
        log.info("kdra operator started: %d pods with claims, %d claims, %d templates",
                 len(self.pods), len(self.claims), len(self.templates))

    async def prime(self) -> None:
        claims, templates = await self.client.list(CLAIMS), await self.client.list(TEMPLATES)
        self.claims.prime(claims)
        self.templates.prime(templates)
        pods = await self.client.list(PODS)
        self.pods.prime(
            pod for pod in pods
            if CLAIMS_ANNOTATION in (pod["metadata"].get("annotations") or {})
        )
        nodes, slices = await self.client.list(NODES), await self.client.list(SLICES)
        classes = await self.client.list(CLASSES)
        self.binder.prime(nodes=nodes, slices=slices, classes=classes, pods=pods)
        leases = await self.client.list(LEASES, self.settings.namespace,
                                        label_selector=f"{AGENT_LEASE_LABEL}=true")
        self.slice_gc.prime(slices=slices, nodes=nodes, leases=leases)
        self.primed = {CLAIMS.plural: claims, TEMPLATES.plural: templates, PODS.plural: pods,
                       NODES.plural: nodes, SLICES.plural: slices, CLASSES.plural: classes,
                       LEASES.plural: leases}
        try:
            rules = await self.client.list(DEVICE_TAINT_RULES)
        except NotFound:  # CRDs of an older kdra: no rules (the informer retries)
            log.warning("DeviceTaintRule CRD not installed: apply crds/devicetaintrules.yaml")
            rules = []
        self.taint_eviction.prime(slices=slices, rules=rules)
        self.primed[DEVICE_TAINT_RULES.plural] = rules
        for rule in rules:
            self.binder.on_rule(None, rule)
        try:
            quotas = await self.client.list(DEVICE_QUOTAS)
        except NotFound:  # CRDs of an older kdra: no quotas (the informer retries)
            log.warning("DeviceQuota CRD not installed: apply crds/devicequotas.yaml")
            quotas = []
        for quota in quotas:
            self.binder.on_quota(None, quota)
        self.primed[DEVICE_QUOTAS.plural] = quotas

    def watch(self, resource: Resource, handler: Handler, *, namespace: str | None = None,
              label_selector: str | None = None) -> None:
        """Start an informer feeding ``handler`` (kdra.operator.handlers.routes's routes) with every
        event of ``resource``, its first LIST compared with what was primed; ``stop()``
        stops it."""
        informer = Informer(self.client, resource, handler, namespace=namespace,
                            label_selector=label_selector,
                            known=self.primed.pop(resource.plural, ()))
        self.informers.append(informer)
        if resource == PODS:
            self.claim_controller.pods_synced = informer.synced.is_set
        informer.start()

    def _pod_written(self, pod: JSON) -> None:
        """The claim controller's write response: the binder needs no watch hop to see the
        claim names (the watch event of the same version follows and changes nothing)."""
        self.binder.on_pod("MODIFIED", pod)

    async def stop(self) -> None:
        leading = self.leadership is not None and not self.leadership.done()
        if self.leadership is not None:
            self.leadership.cancel()  # a renewal cut off here cannot race the release below
            await asyncio.gather(self.leadership, return_exceptions=True)
        for informer in self.informers:
            await informer.stop()
        await self.slice_gc.stop()
        await self.taint_eviction.stop()
        await self.quota_status.stop()
        await self.notices.stop()
        await self.binder.stop()
        await self.claim_controller.stop()
        if self.webhook is not None:  # after the controllers: their last writes are admitted
            await self.webhook.stop()
        if self.elector is not None and leading:
            await self.elector.release()  # a standby takes over without waiting for expiry
        await self.client.close()
