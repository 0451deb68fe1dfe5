"""The claim controller's pod side: every template entry of a pod's claims gets its own claim,
recorded where the API flavour keeps claim names, and a bound pod is reserved on its allocated
claims (the controller: :mod:`kdra.operator.claim_controller`).

``sync_pod(ns, name)`` makes sure every template entry of a pod's claims (the flavour's:
``spec.resourceClaims``, or the ``resource.kdra.dev/claims`` annotation —
:class:`kdra.kube.core.flavours.Flavour`) has its own claim (an orphan controlled by the pod
is adopted first, and a claim this controller created is asked for when the cache lacks it, so
a restart or a lost update never creates a second one), records the names
(``status.resourceClaimStatuses``, or the claim-statuses annotation), and adds a bound pod to
``reservedFor`` of its allocated claims if it is missing there.

Invariants:
- A claim is created only for a pod the API server still has, so a cached pod that is in fact
  gone — its deletion missed while the operator was busy — gets no claims; it is dropped from
  the cache (and the binder's) instead. The cache is taken as the API server's word once the
  pod informer's first LIST was compared with what the start-up primed (``pods_synced``: a
  deletion missed meanwhile is then delivered) and for an entry's first claim; otherwise —
  before that, with ``--watch=kopf`` (whose first listing delivers no deletions), and before
  re-creating an entry's claim — a live GET checks the pod (same UID, not being deleted, not
  done). Every pod's first claim thus costs no extra request (issue 42).
  Re-creating an entry's claim again and again backs off (:mod:`kdra.operator.core.claim_births`):
  a claim-creation storm (issue 36: ~13 claims/s for a deleted pod) cannot start.
- A recorded claim name is never replaced while the claim exists and the pod owns it (a binder
  may be binding the pod with it); the record is written with the pod's resourceVersion.
- Bad input (malformed claims, missing template) produces a Warning event on the pod and
  never an exception that would stop other pods from being served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from kdra.dra.errors import InvalidObject
from kdra.kube.core.podclaims import SCHEDULER_NAME, PodClaim, owned_by, pod_is_done, pod_ref
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.resources import PODS
from kdra.kube.store import JSON, Key, Store, key_of
from kdra.kube.workqueue import Retry, WorkQueue
from kdra.operator import metrics
from kdra.operator.claim_owner import ClaimOwner
from kdra.operator.claim_release import ClaimWrites, with_status
from kdra.operator.core.claim_births import Births
from kdra.operator.core.claim_records import ClaimRecords
from kdra.operator.core.extended import extended_claim

__all__ = ["MAX_RESERVED_FOR", "PodClaims"]

log = logging.getLogger(__name__)

MAX_RESERVED_FOR = 32


class PodClaims(ClaimWrites):
    """The pod side of :class:`~kdra.operator.claim_controller.ClaimController`."""

    events: EventRecorder
    pods: Store
    templates: Store
    births: Births
    owner: ClaimOwner
    pod_written: Callable[[JSON], None] | None
    pod_gone: Callable[[JSON], None] | None
    pods_synced: Callable[[], bool]
    records: ClaimRecords | None
    pod_queue: WorkQueue[Key]
    names_known: Callable[[JSON], None] | None
    _reported: dict[Key, str]

    async def _sync_pod_key(self, key: Key) -> None:
        pod = self.pods.get(key)
        if pod is not None and self.owner.deferred is None:
            await self.sync_pod(pod)

    async def sync_pod(self, pod: JSON) -> None:
        try:
            entries = self.flavour.pod_claims(pod)
        except InvalidObject as exc:
            await self._report(pod, "InvalidResourceClaims", f"{exc}; the pod is left alone "
                               "until its claims are fixed")
            return
        if pod_is_done(pod):
            return
        recorded = self.flavour.claim_statuses(pod)
        # Only the pod's entries count: a recorded name for anything else is not kdra's (the
        # record is rewritten without it), and a recorded generated claim
        # counts only if the pod owns it (_find_generated: upstream's IsForPod).
        names: dict[str, str] = {}
        pending = False
        # The API server confirmed the pod (once per sync, before a creation), or the cache
        # speaks for it (see the module doc).
        live = False
        for entry in entries:
            if entry.resource_claim_name is not None:
                names[entry.name] = entry.resource_claim_name
                continue
            claim = await self._find_generated(pod, entry, recorded.get(entry.name))
            if claim is None:
                if not live and (not self.pods_synced()
                                 or self.births.name(pod["metadata"]["uid"], entry.name)):
                    current = await self._still_there(pod)
                    if current is None:
                        return
                    if current["metadata"].get("resourceVersion") != \
                            pod["metadata"].get("resourceVersion"):
                        # Newer than this sync's view (another replica may have recorded
                        # its claim): start over from it, never write over it.
                        raise Retry("pod changed; reconciling its newer version")
                    live = True
                claim = await self._create_claim(pod, entry)
            if claim is None:
                pending = True
                continue
            names[entry.name] = claim["metadata"]["name"]
        await self._record_names(pod, entries, names)
        if not pending:
            self._reported.pop(key_of(pod), None)
        if pod.get("spec", {}).get("nodeName"):
            for claim_name in names.values():
                await self._ensure_reserved(pod, claim_name)

    async def _find_generated(self, pod: JSON, entry: PodClaim,
                              recorded: str | None) -> JSON | None:
        """The claim generated for the pod's template ``entry``: the one its claim-statuses
        annotation records, else the one the pod controls whose pod-claim-name annotation
        names the entry (as upstream's resourceclaim controller looks it up, so a claim
        created just before a crash is found, not created twice).

        A recorded claim missing from the cache is asked for at the API server: the cache may
        lag (the claim was just created by another replica), and replacing a recorded name
        would take a pod's claim away from under a binder binding it."""
        namespace, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        if recorded:
            claim = self.claims.get((namespace, recorded))
            if claim is None:
                try:
                    claim = await self.client.get(self.flavour.claims, recorded, namespace)
                except NotFound:
                    claim = None  # deleted: the pod gets a new one (below)
            if claim is not None and owned_by(claim, uid):
                self.owner.on_recorded(claim)  # recorded by kdra, or by another controller?
                return claim
        for claim in self.claims.index("owner", uid):
            annotations = claim["metadata"].get("annotations") or {}
            if annotations.get(self.flavour.pod_claim_name_annotation) == entry.name \
                    and owned_by(claim, uid):
                return claim
        created = self.births.name(uid, entry.name)
        if created is not None and created != recorded:  # made here, not cached (any more?)
            try:
                claim = await self.client.get(self.flavour.claims, created, namespace)
            except NotFound:
                return None  # deleted since: the pod gets a new one (after a backoff)
            if owned_by(claim, uid) and not claim["metadata"].get("deletionTimestamp"):
                self.claims.upsert(claim)
                return claim
        return None

    async def _still_there(self, pod: JSON) -> JSON | None:
        """The pod as the API server has it now, when it is still this pod (same UID), not
        being deleted and not done; else None, and a pod that is gone or replaced is dropped
        from the caches as its DELETED event would have dropped it."""
        meta = pod["metadata"]
        try:
            current = await self.client.get(PODS, meta["name"], meta["namespace"])
        except NotFound:
            current = None
        if current is None or current["metadata"].get("uid") != meta["uid"]:
            log.info("pod %s/%s (uid %s) is gone: no claims for it", meta["namespace"],
                     meta["name"], meta["uid"])
            self.pods.apply("DELETED", pod)
            self.births.forget(meta["uid"])
            if self.pod_gone is not None:
                self.pod_gone(pod)
            return None
        self.pods.upsert(current)
        if pod_is_done(current) or current["metadata"].get("deletionTimestamp"):
            return None
        return current

    async def _create_claim(self, pod: JSON, entry: PodClaim) -> JSON | None:
        namespace, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        wait = self.births.delay(uid, entry.name)
        if wait > 0:  # its claim was deleted again and again: not one creation per event
            raise Retry(f"claim of entry {entry.name!r} re-created recently", delay=wait)
        if entry.extended is not None:  # kdra.operator.core.extended: the pod's extended resources
            body, source = extended_claim(pod, entry), "the pod's extended resources"
        else:
            template_name = entry.resource_claim_template_name
            assert template_name is not None
            template = self.templates.get((namespace, template_name))
            if template is None:
                await self._report(pod, "FailedResourceClaimCreation",
                                   f"resource claim template {template_name!r} (entry "
                                   f"{entry.name!r}) not found in namespace {namespace!r}; "
                                   "the claim is created when the template appears")
                return None
            body = self.flavour.generated_claim(template, pod, entry)
            source = f"template {template_name!r}"
        try:
            claim = await self.client.create(self.flavour.claims, body, namespace)
        except ApiError as exc:
            metrics.record_claim_create(False)
            await self._report(pod, "FailedResourceClaimCreation",
                               f"creating the claim for entry {entry.name!r} from {source} "
                               f"failed: {exc.message}")
            # Refused content: a template entry waits for a template change (it re-enqueues
            # the pod); an extended-resources entry stays refused (its event says why) until
            # the pod is created again - its content comes from the pod spec, which is frozen.
            if exc.status in (400, 403, 422):
                return None
            raise Retry(str(exc)) from exc
        metrics.record_claim_create(True)
        self.claims.upsert(claim)  # seen at once, before the watch event arrives
        self.births.created(uid, entry.name, claim["metadata"]["name"])
        log.info("created claim %s/%s for pod %s entry %s", namespace,
                 claim["metadata"]["name"], pod["metadata"]["name"], entry.name)
        return claim

    async def _record_names(self, pod: JSON, entries: tuple[PodClaim, ...],
                            names: dict[str, str]) -> None:
        """Record the claim names where the flavour keeps them (the claim-statuses
        annotation, or ``status.resourceClaimStatuses``), unless they are already there —
        or, for a pod kdra's scheduler binds in kdra's flavour, hand them to the scheduler,
        whose Binding records them (:mod:`kdra.operator.core.claim_records`), unless the
        record is due apart from it."""
        write = self.flavour.statuses_write(pod, entries, names)
        key, meta = key_of(pod), pod["metadata"]
        records = self.records
        if write is None:
            if records is not None:
                records.drop(key)
            return
        if records is not None and self._binding_records(pod):
            fresh = records.put(key, meta["uid"], names)
            if not records.due(key, meta["uid"]):
                if fresh and self.names_known is not None:
                    self.names_known(pod)  # the scheduler resolves the claims from here
                self.pod_queue.add_after(key, records.remaining(key) + 0.05)
                return
        subresource, patch = write
        try:
            if subresource is None:
                updated = await self.client.patch(PODS, meta["name"], patch, meta["namespace"])
            else:
                updated = await self.client.patch(PODS, meta["name"], patch, meta["namespace"],
                                                  subresource=subresource)
        except NotFound:
            return
        except Conflict as exc:
            raise Retry("pod changed while recording claim names") from exc
        if records is not None:
            records.drop(key)
        self.pods.upsert(updated)
        if self.pod_written is not None:
            self.pod_written(updated)

    def _binding_records(self, pod: JSON) -> bool:
        """Whether the pod's Binding will carry its record: kdra's flavour, a pod kdra's
        scheduler is to bind (unbound, not being deleted)."""
        return self.flavour.records_in_binding and \
            pod.get("spec", {}).get("schedulerName") == SCHEDULER_NAME and \
            not pod.get("spec", {}).get("nodeName") and \
            not pod["metadata"].get("deletionTimestamp")

    async def _ensure_reserved(self, pod: JSON, claim_name: str) -> None:
        """A pod already bound to a node uses its allocated claims: make that visible. A
        generated claim only for the pod that owns it (upstream's IsForPod)."""
        namespace = pod["metadata"]["namespace"]
        claim = self.claims.get((namespace, claim_name))
        if claim is None or not claim.get("status", {}).get("allocation"):
            return
        if self.flavour.is_generated(claim) and not owned_by(claim, pod["metadata"]["uid"]):
            return
        if claim["metadata"].get("deletionTimestamp"):
            return
        reserved = claim["status"].get("reservedFor") or []
        if any(ref.get("uid") == pod["metadata"]["uid"] for ref in reserved):
            return
        if len(reserved) >= MAX_RESERVED_FOR:
            return
        body = with_status(claim)
        body["status"]["reservedFor"] = [*reserved, pod_ref(pod)]
        await self._write_status(body)
        metrics.record_release("reserve")

    async def _report(self, pod: JSON, reason: str, message: str) -> None:
        """One Warning event per distinct problem of a pod (the recorder counts repeats)."""
        key = key_of(pod)
        if self._reported.get(key) == f"{reason}:{message}":
            return
        self._reported[key] = f"{reason}:{message}"
        log.warning("pod %s/%s: %s: %s", key[0], key[1], reason, message)
        await self.events.warn(pod, reason, message)
