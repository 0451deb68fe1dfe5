"""The claim controller: per-pod claims from templates, reservation clean-up, deallocation.

kdra's counterpart of kube-controller-manager's resourceclaim controller (kubernetes/kubernetes
``pkg/controller/resourceclaim/controller.go``).

Two level-based loops over shared caches (the claims: a typed cache it subscribes to,
:mod:`kdra.operator.caches`; the pods with claims, the templates), one work queue each;
this module takes the events in, queues the keys and counts the claims for the gauges:
- the pod side, ``sync_pod(ns, name)`` (:mod:`kdra.operator.claim_pods`): every template
  entry of a pod's claims annotation gets its own claim (adopted, or asked for, before one is
  created), recorded in the pod's claim-statuses annotation; a bound pod is added to
  ``reservedFor`` of its allocated claims if it is missing there;
- the claim side, ``sync_claim(ns, name)`` (:mod:`kdra.operator.claim_release`):
  reservations of pods that are gone, replaced or done are dropped, a claim nobody reserves is
  deallocated, kdra's finalizer removed once it is, and a generated claim whose pod is done or
  was replaced is deleted.

Invariants:
- Each side's invariants (in its module) hold for the whole controller: every status write
  is a PUT with the cached resourceVersion as its precondition, a pod is looked up live
  before a reservation of it is dropped or a claim created for it, re-creating an entry's
  claim backs off (issue 36's claim-creation storm), the finalizer goes only from a claim that
  is not allocated, and bad input produces a Warning event, never an exception that would stop
  other pods from being served.
- An event of a version the cache already held (the echo of the controller's own write, a
  re-list) queues nothing.
- The gauges are recounted every few seconds, never per event (a recount per claim event would
  make the controller quadratic in the number of claims).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable

from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import pod_is_done
from kdra.kube.events import EventRecorder
from kdra.kube.store import JSON, Key, RecentSet, Store, is_not_newer, key_of
from kdra.kube.workqueue import WorkQueue
from kdra.operator import metrics
from kdra.operator.caches import ClaimCache, claim_store, pod_store
from kdra.operator.claim_owner import ClaimOwner
from kdra.operator.claim_pods import PodClaims
from kdra.operator.claim_release import ClaimRelease
from kdra.operator.core.claim_births import Births
from kdra.operator.core.claim_records import ClaimRecords

__all__ = ["ClaimController", "claim_store", "pod_store"]


class ClaimController(PodClaims, ClaimRelease):
    """The claim controller: :meth:`start`, feed it events (:meth:`on_pod`, :meth:`on_claim`,
    :meth:`on_template`), :meth:`stop`. :meth:`sync_pod` and :meth:`sync_claim` are its
    two sides' reconciliations (:mod:`kdra.operator.claim_pods`,
    :mod:`kdra.operator.claim_release`)."""

    def __init__(self, client: KubeClient, events: EventRecorder, *, pods: Store,
                 claims: ClaimCache, templates: Store, workers: int = 4,
                 pod_written: Callable[[JSON], None] | None = None,
                 pod_gone: Callable[[JSON], None] | None = None,
                 flavour: Flavour = KDRA, mode: str = "on") -> None:
        self.client = client
        self.flavour = flavour
        """Where pods' claims and claim names are, how generated claims are marked, which
        finalizer protects them (the API flavour, :mod:`kdra.kube.core.flavours`)."""
        self.events = events
        self.pods = pods
        self.pod_written = pod_written
        """Called with the pod as the API server returned it after the controller recorded
        its claim names, so the binder can start on it before the watch event arrives."""
        self.pods_synced: Callable[[], bool] = lambda: False
        """Whether the pod cache speaks for the API server (its informer's first LIST was
        compared with the primed pods); set by the operator's composition."""
        self.records: ClaimRecords | None = None
        """Claim names the scheduler's Binding is to record (kdra's flavour,
        :mod:`kdra.operator.core.claim_records`); None: every record is written here."""
        self.names_known: Callable[[JSON], None] | None = None
        """Called with a pod whose claim names went to :attr:`records` (not to the pod), so
        the scheduler tries it (set with :attr:`records` by the operator's composition)."""
        self.pod_gone = pod_gone
        """Called with a cached pod found gone (or replaced) at the API server, as its
        DELETED event would have been: the binder drops it too."""
        self.claims = claims
        self.templates = templates
        self.births = Births()
        self.owner = ClaimOwner(client, flavour, mode, created_here=self._created_here)
        """Whether kdra or kube-controller-manager runs the claim lifecycle (``mode``: the
        setting ``--claim-controller``; :mod:`kdra.operator.claim_owner`)."""
        self.pod_queue: WorkQueue[Key] = WorkQueue("claims-pods", self._sync_pod_key,
                                                   workers=workers)
        self.claim_queue: WorkQueue[Key] = WorkQueue("claims-release", self._sync_claim_key,
                                                     workers=workers)
        self._reported: dict[Key, str] = {}
        self._released_here = RecentSet()
        self._gauges: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.pod_queue.start()
        self.claim_queue.start()
        for pod in self.pods:
            self.pod_queue.add(key_of(pod))
        for claim in self.claims:
            self.claim_queue.add(key_of(claim))
        self.update_gauges()
        self._gauges = asyncio.create_task(self._refresh_gauges(), name="claim-gauges")

    async def _refresh_gauges(self, interval: float = 5.0) -> None:
        """Recount claims for the gauges every few seconds: a recount per claim event would
        make the controller quadratic in the number of claims (seen in the scale bench)."""
        while True:
            await asyncio.sleep(interval)
            self.update_gauges()

    async def stop(self) -> None:
        if self._gauges is not None:
            self._gauges.cancel()
        await self.pod_queue.stop()
        await self.claim_queue.stop()

    # ------------------------------------------------------------------ events in

    def on_pod(self, event_type: str | None, pod: JSON) -> None:
        """A pod with claims changed (or went away). An event of a version the
        cache already held (the echo of the controller's own write, a re-list) changes
        nothing and queues nothing."""
        old = self.pods.apply(event_type, pod)
        if event_type != "DELETED" and is_not_newer(pod, old):
            return
        key = key_of(pod)
        self.pod_queue.add(key)
        uid = pod["metadata"].get("uid", "")
        if event_type == "DELETED" or pod_is_done(pod):
            self.births.forget(uid)
            if self.records is not None:
                self.records.drop(key)
        if event_type == "DELETED" or pod_is_done(pod) or pod.get("spec", {}).get("nodeName"):
            for claim in self.claims.index("reserved", uid) + self.claims.index("owner", uid):
                self.claim_queue.add(key_of(claim))

    def on_claim(self, event_type: str | None, claim: JSON, old: JSON | None) -> None:
        """The claim cache's subscriber: a claim changed (or went away), ``old`` the version
        the cache held before; as :meth:`on_pod`, a version the cache already held queues
        nothing."""
        if event_type != "DELETED" and is_not_newer(claim, old):
            return
        self.claim_queue.add(key_of(claim))
        namespace = claim["metadata"].get("namespace", "")
        for ref in claim["metadata"].get("ownerReferences") or ():
            if ref.get("controller") and ref.get("kind") == "Pod" \
                    and not self.pods.was_deleted(ref.get("uid", "")):
                self.pod_queue.add((namespace, ref["name"]))

    def on_template(self, event_type: str | None, template: JSON) -> None:
        self.templates.apply(event_type, template)
        namespace, name = key_of(template)
        for pod in self.pods.index("template", name):
            if pod["metadata"].get("namespace") == namespace:
                self.pod_queue.add(key_of(pod))

    def _created_here(self, claim: JSON) -> bool:
        """Whether this controller created ``claim`` (its record of births)."""
        ref = self.flavour.generated_for(claim)
        entry = (claim["metadata"].get("annotations") or {}).get(
            self.flavour.pod_claim_name_annotation)
        return ref is not None and isinstance(entry, str) and self.births.name(
            str(ref.get("uid")), entry) == claim["metadata"].get("name")

    def update_gauges(self) -> None:
        counts: dict[tuple[bool, bool], int] = defaultdict(int)
        for claim in self.claims:
            allocated = bool(claim.get("status", {}).get("allocation"))
            generated = self.flavour.is_generated(claim)
            counts[(allocated, generated)] += 1
        metrics.set_claim_counts(counts)

