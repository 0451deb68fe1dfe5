"""The operator's composition root: one API client, the API flavour, the caches and the
controllers.

Built once at start-up (from kopf's startup handler) and handed to the handlers through kopf's
memo; nothing here is a module global. The API flavour (:mod:`kdra.kube.flavour`: native or
kdra) is decided first and every service is built with it; none of them asks which it is.

Invariants:
- Caches are primed from a LIST before any controller worker starts, so "not in the cache"
  means "does not exist" (or is newer than the start-up list, which a watch event fixes).
  What was primed is handed to each kind's informer (:attr:`Operator.primed`), whose first
  LIST then delivers the deletions that happened in between (however long the start-up).
  With ``--watch=kopf`` the same bookkeeping is fed by kopf's handlers (:meth:`Operator.feed`)
  and compared with a LIST of kdra's own every ``kopf_reconcile_period`` (the first a few
  seconds after the start), which delivers the deletions kopf's re-lists do not.
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
from kdra.kube.core.flavours import Flavour
from kdra.kube.errors import ApiError, Forbidden, NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.flavour import resolve
from kdra.kube.informer import Handler, Informer
from kdra.kube.leader import LeaderElector
from kdra.kube.resources import LEASES, NODES, POD_GROUPS, PODS, Resource
from kdra.kube.store import JSON, Store
from kdra.operator import metrics, utilisation
from kdra.operator.caches import claim_store, pod_store, slice_store
from kdra.operator.claim_controller import ClaimController
from kdra.operator.notices import PodNotices
from kdra.operator.scheduler import Binder, BinderSettings
from kdra.operator.scheduler.preemption import PreemptionSettings
from kdra.operator.scheduler.quota import DEVICE_QUOTAS, QuotaStatusWriter
from kdra.operator.settings import OperatorSettings
from kdra.operator.slice_gc import SliceGC
from kdra.operator.taint_eviction import DEVICE_TAINT_RULES, TaintEvictionController
from kdra.operator.webhooks.server import WebhookServer, start_webhooks

log = logging.getLogger(__name__)

FIRST_RECONCILE = 5.0
"""``--watch=kopf``: seconds from the start to the first comparison of the caches with a LIST
(kopf's watchers list first; until then a pod's claim creation is preceded by a live GET, as
before any informer's first LIST)."""


def _leadership_lost(reason: str) -> None:
    """Stop acting at once: kopf handles SIGTERM by running the cleanup (services stop)."""
    log.error("leader election: leadership lost (%s); stopping", reason)
    os.kill(os.getpid(), signal.SIGTERM)


def share_claim_records(controller: ClaimController, binder: Binder) -> None:
    """Where the flavour records claim names on the pod (kdra's annotation), a pod's names go
    from the claim controller to the binder, whose Binding records them; the claim
    controller writes a record that falls due apart from it
    (:mod:`kdra.operator.core.claim_records`)."""
    if not controller.flavour.records_in_binding:
        return
    records = binder.pods.records
    records.wake = controller.pod_queue.add
    controller.records = records
    controller.names_known = binder.names_known


class Operator:
    def __init__(self, settings: OperatorSettings, client: KubeClient,
                 flavour: Flavour) -> None:
        self.settings = settings
        self.client = client
        self.flavour = flavour
        """The API flavour every service is built with (decided once, at start-up)."""
        self.elector: LeaderElector | None = None
        self.leadership: asyncio.Task[None] | None = None
        self.events = EventRecorder(client, component="kdra-operator")
        self.pods = pod_store(flavour)
        self.claims = claim_store()
        self.slices = slice_store()
        self.templates = Store("ResourceClaimTemplate")
        self.binder = Binder(client, EventRecorder(client, component="kdra-scheduler"),
                             claims=self.claims, slices=self.slices, flavour=flavour,
                             settings=BinderSettings(
                                 policy=settings.policy,
                                 prepare_timeout=settings.prepare_timeout,
                                 binding_timeout=settings.binding_timeout,
                                 preemption=PreemptionSettings(
                                     enabled=settings.preemption, hold=settings.preemption_hold,
                                     steps=settings.allocation_search_steps),
                                 search=SearchBudget(
                                     steps=settings.allocation_search_steps,
                                     timeout=settings.allocation_search_timeout)))
        # The controller's write responses go to the binder at once: claim names on a pod
        # (pod_written), devices freed by a deallocation (through the claim cache, to its
        # other subscribers); the watch events of the same versions follow and change
        # nothing.
        self.claim_controller = ClaimController(
            client, self.events, pods=self.pods, claims=self.claims, templates=self.templates,
            workers=settings.workers, pod_written=self._pod_written,
            pod_gone=lambda pod: self.binder.on_pod("DELETED", pod),
            flavour=flavour, mode=settings.claim_controller,
        )
        share_claim_records(self.claim_controller, self.binder)
        self.webhook: WebhookServer | None = None  # admission webhooks (started in start())
        self.slice_gc = SliceGC(client, namespace=settings.namespace,
                                grace=settings.slice_gc_grace, slices=flavour.slices,
                                agents_only=flavour.shared_slices)
        self.taint_eviction = TaintEvictionController(
            client, self.events, claims=self.claims, pods=self.pods,
            nodes=self.binder.cluster.nodes,
            owns=self.slice_gc.owns if flavour.shared_slices else None)
        self.quota_status = QuotaStatusWriter(client, self.binder.quotas)
        self.notices = PodNotices(self.events, flavour)  # pods whose claims kdra would not see
        # The typed claim cache applies each claim event once, then hands it to each
        # subscriber (kdra.kube.typed_cache): none depends on being called before another.
        for on_claim in (self.claim_controller.on_claim, self.binder.on_claim,
                         self.taint_eviction.on_claim):
            self.claims.subscribe(on_claim)
        for on_slice in (self.binder.on_slice, self.slice_gc.on_slice,
                         self.taint_eviction.on_slice):
            self.slices.subscribe(on_slice)
        self.informers: list[Informer] = []  # kdra.operator.handlers.routes starts them (watch())
        self.feeds: list[Informer] = []  # --watch=kopf: fed by kopf's handlers (feed())
        self._reconciler: asyncio.Task[None] | None = None
        self.pod_groups = False
        """Whether the API server serves scheduler-plugins' PodGroups (found at start-up)."""
        self.primed: dict[str, list[JSON]] = {}
        """Resource plural → the objects of the start-up LIST (until its informer starts)."""

    @classmethod
    async def start(cls, settings: OperatorSettings) -> Operator:
        client = await connect(settings.kubeconfig, component="operator")
        try:
            flavour = await resolve(client, settings.flavour)
        except BaseException:
            await client.close()
            raise
        operator = cls(settings, client, flavour)
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
        self.webhook = await start_webhooks(settings, self.client, self.flavour)
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
        metrics.set_api_flavour(self.flavour.name)
        await self.claim_controller.owner.start()
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
        log.info("kdra operator started (flavour %s: %s): %d pods with claims, %d claims, "
                 "%d templates", self.flavour.name, self.flavour.api_version, len(self.pods),
                 len(self.claims), len(self.templates))

    async def prime(self) -> None:
        flavour = self.flavour
        claims = await self.client.list(flavour.claims)
        templates = await self.client.list(flavour.templates)
        self.claims.prime(claims)
        self.templates.prime(templates)
        pods = await self.client.list(PODS)
        self.pods.prime(pod for pod in pods if flavour.has_claims(pod))
        nodes, slices = await self.client.list(NODES), await self.client.list(flavour.slices)
        self.slices.prime(slices)  # the services below prime their own views from it
        classes = await self.client.list(flavour.classes)
        self.binder.prime(nodes=nodes, slices=slices, classes=classes, pods=pods)
        leases = await self.client.list(LEASES, self.settings.namespace,
                                        label_selector=f"{AGENT_LEASE_LABEL}=true")
        self.slice_gc.prime(slices=slices, nodes=nodes, leases=leases)
        self.primed = {flavour.claims.plural: claims, flavour.templates.plural: templates,
                       PODS.plural: pods, NODES.plural: nodes, flavour.slices.plural: slices,
                       flavour.classes.plural: classes, LEASES.plural: leases}
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
        await self.prime_pod_groups()

    async def prime_pod_groups(self) -> None:
        """scheduler-plugins' PodGroups, optional (manifests/optional/podgroups-crd.yaml):
        primed and watched where the API server serves them and kdra may list them."""
        try:
            groups = await self.client.list(POD_GROUPS)
        except NotFound:
            log.info("PodGroup CRD (scheduling.x-k8s.io) not installed: gangs are sized by "
                     "their pods' annotations (restart after installing it to read PodGroups)")
            self.pod_groups = False
        except Forbidden:  # an older ClusterRole: gangs work as before, by annotation
            log.warning("PodGroups (scheduling.x-k8s.io) may not be listed by kdra's service "
                        "account: gangs are sized by their pods' annotations (grant list/watch "
                        "on podgroups, manifests/base/operator/rbac.yaml)")
            self.pod_groups = False
        else:
            self.pod_groups = True
            for group in groups:
                self.binder.on_pod_group(None, group)
            self.primed[POD_GROUPS.plural] = groups

    def watch(self, resource: Resource, handler: Handler, *, namespace: str | None = None,
              label_selector: str | None = None) -> None:
        """Start an informer feeding ``handler`` (kdra.operator.handlers.routes's routes) with every
        event of ``resource``, its first LIST compared with what was primed; ``stop()``
        stops it."""
        informer = self._informer(resource, handler, namespace, label_selector)
        self.informers.append(informer)
        informer.start()

    def feed(self, resource: Resource, handler: Handler, *, namespace: str | None = None,
             label_selector: str | None = None) -> Informer:
        """``--watch=kopf``: an informer's bookkeeping without its watch — kopf's handlers
        deliver each event to it (:meth:`Informer.deliver`), and :meth:`reconcile_feeds`
        compares it with a LIST now and then. Its known objects start as what was primed."""
        informer = self._informer(resource, handler, namespace, label_selector)
        self.feeds.append(informer)
        if self._reconciler is None:
            self._reconciler = asyncio.create_task(
                self.reconcile_feeds(self.settings.kopf_reconcile_period),
                name="kopf-reconciler")
        return informer

    def _informer(self, resource: Resource, handler: Handler, namespace: str | None,
                  label_selector: str | None) -> Informer:
        """An informer of ``resource`` knowing what was primed of it; the pods' one tells the
        claim controller when the cache speaks for the API server (``pods_synced``)."""
        informer = Informer(self.client, resource, handler, namespace=namespace,
                            label_selector=label_selector,
                            known=self.primed.pop(resource.plural, ()))
        if resource == PODS:
            self.claim_controller.pods_synced = informer.synced.is_set
        return informer

    async def reconcile_feeds(self, period: float, first: float = FIRST_RECONCILE) -> None:
        """Every ``period`` seconds (the first after ``first``: kopf's watchers list first),
        LIST each fed kind and deliver the deletions the LIST proves (Informer.reconcile).
        A failed LIST is logged and retried at the next period."""
        await asyncio.sleep(first)
        while True:
            for informer in list(self.feeds):
                res = informer.resource
                try:
                    items, version, skipped = await self.client.list_all(
                        res, informer.namespace, label_selector=informer.label_selector)
                except (ApiError, OSError) as exc:
                    log.warning("reconciling %s with a LIST failed (%s); retrying in %.0fs",
                                res.plural, exc, period)
                    continue
                gone = informer.reconcile(items, version, [s.stub() for s in skipped])
                if gone:
                    log.info("%s: %d deletion(s) kopf's watch did not deliver, delivered "
                             "from a LIST", res.plural, gone)
            await asyncio.sleep(period)

    def _pod_written(self, pod: JSON) -> None:
        """The claim controller's write response: the binder needs no watch hop to see the
        claim names (the watch event of the same version follows and changes nothing)."""
        self.binder.on_pod("MODIFIED", pod)

    async def stop(self) -> None:
        leading = self.leadership is not None and not self.leadership.done()
        if self.leadership is not None:
            self.leadership.cancel()  # a renewal cut off here cannot race the release below
            await asyncio.gather(self.leadership, return_exceptions=True)
        if self._reconciler is not None:
            self._reconciler.cancel()
            await asyncio.gather(self._reconciler, return_exceptions=True)
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
