"""The claim controller: per-pod claims from templates, reservation clean-up, deallocation.

kdra's counterpart of kube-controller-manager's resourceclaim controller (kubernetes/kubernetes
``pkg/controller/resourceclaim/controller.go``).

Two level-based loops over a shared cache (:class:`~kdra.kube.store.Store`):
- ``sync_pod(ns, name)`` makes sure every template entry of a pod's claims annotation has its
  own claim (an orphan controlled by the pod is adopted first, and a claim this controller
  created is asked for when the cache lacks it, so a restart or a lost update never creates a
  second one), records the names in the pod's claim-statuses annotation, and adds a bound pod
  to ``reservedFor`` of its allocated claims if it is missing there.
- ``sync_claim(ns, name)`` drops ``reservedFor`` entries of pods that are gone, replaced (other
  UID) or done; clears ``status.allocation`` when no reservation is left; removes kdra's
  finalizer once the claim is deallocated; deletes generated claims whose pod is done or was
  replaced (the claim of a pod that is gone is the garbage collector's: its ownerReference names
  the pod, and upstream's controller leaves it to the collector too).

Invariants:
- Every status write is a PUT of the object as cached, so its resourceVersion is the
  precondition: a concurrent change (the binder allocating) makes it fail with Conflict and the
  claim is reconciled again from fresh state.
- A pod missing from the cache is looked up with a live GET before its reservation is dropped
  (the cache may simply not have seen a brand-new pod yet).
- A claim is created only for a pod the API server still has (a live GET, same UID, not being
  deleted, not done), so a cached pod that is in fact gone — its deletion missed while the
  operator was busy — gets no claims; it is dropped from the cache (and the binder's) instead.
  Re-creating an entry's claim again and again backs off (:mod:`kdra.operator.core.claim_births`):
  a claim-creation storm (issue 36: ~13 claims/s for a deleted pod) cannot start.
- The finalizer is removed only from a claim that is not allocated and is being deleted or was
  just deallocated by this controller; the binder owns the finalizer while it allocates.
- Bad input (malformed annotation, missing template) produces a Warning event on the pod and
  never an exception that would stop other pods from being served.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from collections.abc import Callable

from kdra.dra.errors import InvalidObject
from kdra.kube.client import KubeClient
from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    PodClaim,
    claim_statuses,
    clear_allocation,
    drop_stray_device_statuses,
    generated_claim,
    is_object_name,
    owned_by,
    pod_claims,
    pod_is_done,
    pod_ref,
    protected_by_kdra,
)
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.resources import CLAIMS, PODS
from kdra.kube.store import JSON, Key, Store, is_not_newer, key_of
from kdra.kube.workqueue import Retry, WorkQueue
from kdra.operator import metrics
from kdra.operator.core.claim_births import Births
from kdra.operator.core.extended import extended_claim

log = logging.getLogger(__name__)

MAX_RESERVED_FOR = 32


def _owner_uids(claim: JSON) -> list[str]:
    return [ref["uid"] for ref in claim.get("metadata", {}).get("ownerReferences") or ()
            if ref.get("controller") and ref.get("kind") == "Pod" and ref.get("uid")]


def _reserved_uids(claim: JSON) -> list[str]:
    return [ref["uid"] for ref in claim.get("status", {}).get("reservedFor") or ()
            if ref.get("uid")]


def _with_status(claim: JSON) -> JSON:
    """A copy of ``claim`` whose ``status`` (only) may be changed: top-level keys are
    copied, nothing nested is (a deep copy of a free-form field nested a thousand levels
    deep would fail, and costs more)."""
    return {**claim, "status": dict(claim.get("status") or {})}


def _template_refs(pod: JSON) -> list[str]:
    try:
        entries = pod_claims(pod)
    except InvalidObject:
        return []
    return [e.resource_claim_template_name for e in entries if e.resource_claim_template_name]


def claim_store() -> Store:
    """The claims cache with the indexes the controller and binder use."""
    return Store("ResourceClaim", {"owner": _owner_uids, "reserved": _reserved_uids})


def pod_store() -> Store:
    return Store("Pod", {"uid": lambda pod: [pod["metadata"].get("uid", "")],
                         "template": _template_refs})


class ClaimController:
    def __init__(self, client: KubeClient, events: EventRecorder, *, pods: Store,
                 claims: Store, templates: Store, workers: int = 4,
                 pod_written: Callable[[JSON], None] | None = None,
                 claim_written: Callable[[str, JSON], None] | None = None,
                 pod_gone: Callable[[JSON], None] | None = None) -> None:
        self.client = client
        self.events = events
        self.pods = pods
        self.pod_written = pod_written
        """Called with the pod as the API server returned it after the controller recorded
        its claim names, so the binder can start on it before the watch event arrives."""
        self.claim_written = claim_written
        """Called with ("MODIFIED", claim as written) after a status write or finalizer
        removal, and ("DELETED", claim) after a delete: the binder sees devices freed
        without waiting for the watch event (which follows and changes nothing)."""
        self.pod_gone = pod_gone
        """Called with a cached pod found gone (or replaced) at the API server, as its
        DELETED event would have been: the binder drops it too."""
        self.claims = claims
        self.templates = templates
        self.births = Births()
        self.pod_queue: WorkQueue[Key] = WorkQueue("claims-pods", self._sync_pod_key,
                                                   workers=workers)
        self.claim_queue: WorkQueue[Key] = WorkQueue("claims-release", self._sync_claim_key,
                                                     workers=workers)
        self._reported: dict[Key, str] = {}
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
        """A pod with the claims annotation changed (or went away). An event of a version the
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
        if event_type == "DELETED" or pod_is_done(pod) or pod.get("spec", {}).get("nodeName"):
            for claim in self.claims.index("reserved", uid) + self.claims.index("owner", uid):
                self.claim_queue.add(key_of(claim))

    def on_claim(self, event_type: str | None, claim: JSON) -> None:
        """A claim changed (or went away); as :meth:`on_pod`, a version the cache already held
        queues nothing."""
        old = self.claims.apply(event_type, claim)
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

    def update_gauges(self) -> None:
        counts: dict[tuple[bool, bool], int] = defaultdict(int)
        for claim in self.claims:
            allocated = bool(claim.get("status", {}).get("allocation"))
            generated = POD_CLAIM_NAME_ANNOTATION in (
                claim["metadata"].get("annotations") or {})
            counts[(allocated, generated)] += 1
        metrics.set_claim_counts(counts)

    # ------------------------------------------------------------------ pods

    async def _sync_pod_key(self, key: Key) -> None:
        pod = self.pods.get(key)
        if pod is not None:
            await self.sync_pod(pod)

    async def sync_pod(self, pod: JSON) -> None:
        try:
            entries = pod_claims(pod)
        except InvalidObject as exc:
            await self._report(pod, "InvalidResourceClaims", f"{exc}; the pod is left alone "
                               "until its annotation is fixed")
            return
        if pod_is_done(pod):
            return
        recorded = claim_statuses(pod)
        # Only the annotation's entries count: a recorded name for anything else is not
        # kdra's (the annotation is rewritten without it), and a recorded generated claim
        # counts only if the pod owns it (_find_generated: upstream's IsForPod).
        names: dict[str, str] = {}
        pending = False
        live = False  # the API server confirmed the pod (once per sync, before a creation)
        for entry in entries:
            if entry.resource_claim_name is not None:
                names[entry.name] = entry.resource_claim_name
                continue
            claim = await self._find_generated(pod, entry, recorded.get(entry.name))
            if claim is None:
                if not live:
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
        if names != recorded:
            await self._record_names(pod, names)
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
                    claim = await self.client.get(CLAIMS, recorded, namespace)
                except NotFound:
                    claim = None  # deleted: the pod gets a new one (below)
            if claim is not None and owned_by(claim, uid):
                return claim
        for claim in self.claims.index("owner", uid):
            annotations = claim["metadata"].get("annotations") or {}
            if annotations.get(POD_CLAIM_NAME_ANNOTATION) == entry.name and owned_by(claim, uid):
                return claim
        created = self.births.name(uid, entry.name)
        if created is not None and created != recorded:  # made here, not cached (any more?)
            try:
                claim = await self.client.get(CLAIMS, created, namespace)
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
            body, source = generated_claim(template, pod, entry), f"template {template_name!r}"
        try:
            claim = await self.client.create(CLAIMS, body, namespace)
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

    async def _record_names(self, pod: JSON, names: dict[str, str]) -> None:
        meta = pod["metadata"]
        patch = {"metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": {CLAIM_STATUSES_ANNOTATION: json.dumps(names, sort_keys=True)},
        }}
        try:
            updated = await self.client.patch(PODS, meta["name"], patch, meta["namespace"])
        except NotFound:
            return
        except Conflict as exc:
            raise Retry("pod changed while recording claim names") from exc
        self.pods.upsert(updated)
        if self.pod_written is not None:
            self.pod_written(updated)

    async def _ensure_reserved(self, pod: JSON, claim_name: str) -> None:
        """A pod already bound to a node uses its allocated claims: make that visible. A
        generated claim only for the pod that owns it (upstream's IsForPod)."""
        namespace = pod["metadata"]["namespace"]
        claim = self.claims.get((namespace, claim_name))
        if claim is None or not claim.get("status", {}).get("allocation"):
            return
        if POD_CLAIM_NAME_ANNOTATION in (claim["metadata"].get("annotations") or {}) \
                and not owned_by(claim, pod["metadata"]["uid"]):
            return
        if claim["metadata"].get("deletionTimestamp"):
            return
        reserved = claim["status"].get("reservedFor") or []
        if any(ref.get("uid") == pod["metadata"]["uid"] for ref in reserved):
            return
        if len(reserved) >= MAX_RESERVED_FOR:
            return
        body = _with_status(claim)
        body["status"]["reservedFor"] = [*reserved, pod_ref(pod)]
        await self._write_status(body)
        metrics.record_release("reserve")

    # ------------------------------------------------------------------ claims

    async def _sync_claim_key(self, key: Key) -> None:
        claim = self.claims.get(key)
        if claim is not None:
            await self.sync_claim(claim)

    async def sync_claim(self, claim: JSON) -> None:
        namespace = claim["metadata"]["namespace"]
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        valid = []
        for ref in reserved:
            if not is_object_name(ref.get("name")):  # not a pod kdra reserved: drop it
                continue
            pod = await self._pod(namespace, ref["name"], ref.get("uid", ""))
            if pod is not None and pod["metadata"].get("uid") == ref.get("uid") \
                    and not pod_is_done(pod):
                valid.append(ref)
        deleting = bool(claim["metadata"].get("deletionTimestamp"))
        allocated = bool(status.get("allocation"))
        deallocated = False
        # Also an allocation kdra wrote (its finalizer is on the claim) that nobody reserves (a
        # binder died between its writes, or rolled back part of them): the binder writes
        # allocation and reservation in one update, so it is not in use. An unreserved
        # allocation someone else wrote (no kdra finalizer) is left alone, as upstream does.
        ours = protected_by_kdra(claim)
        if len(valid) != len(reserved) or (allocated and not valid and ours):
            body = _with_status(claim)
            body["status"]["reservedFor"] = valid
            if not valid:
                # No consumer left: no field at all, as upstream leaves it (omitempty), rather
                # than an empty list.
                body["status"].pop("reservedFor")
                clear_allocation(body["status"])
                deallocated = allocated
            claim = await self._write_status(body)
            for _ in range(len(reserved) - len(valid)):
                metrics.record_release("unreserve")
            if deallocated:
                metrics.record_release("deallocate")
                log.info("deallocated claim %s/%s", namespace, claim["metadata"]["name"])
            allocated = allocated and not deallocated
        finalizers = claim["metadata"].get("finalizers") or []
        if FINALIZER in finalizers and not allocated and (deleting or deallocated):
            claim = await self._remove_finalizer(claim)
        if not valid and not deleting:
            await self._delete_if_orphaned(claim)

    async def _pod(self, namespace: str, name: str, uid: str) -> JSON | None:
        """The pod ``namespace/name`` as cached, or else as the API server has it; None
        when it is gone. A pod whose deletion the watch reported (``uid`` buried in the
        cache) is gone without asking: that saves two GETs per released claim."""
        pod = self.pods.get((namespace, name))
        if pod is not None:
            return pod
        if uid and self.pods.was_deleted(uid):
            return None
        try:  # not cached (yet?): ask the API server before declaring it gone
            return await self.client.get(PODS, name, namespace)
        except NotFound:
            return None

    async def _write_status(self, body: JSON) -> JSON:
        drop_stray_device_statuses(body["status"])  # else the CRD refuses the write
        try:
            updated = await self.client.replace_status(CLAIMS, body)
        except Conflict as exc:
            raise Retry("claim changed concurrently; reconciling again") from exc
        except NotFound:
            return body
        self._written("MODIFIED", updated)
        return updated

    def _written(self, event_type: str, claim: JSON) -> None:
        """Cache the controller's own write (the store ignores it if a newer version or
        the deletion was seen meanwhile) and tell the binder."""
        if event_type == "DELETED":
            self.claims.delete(key_of(claim))
        else:
            self.claims.upsert(claim)
        if self.claim_written is not None:
            self.claim_written(event_type, claim)

    async def _remove_finalizer(self, claim: JSON) -> JSON:
        meta = claim["metadata"]
        patch = {"metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "finalizers": [f for f in meta.get("finalizers") or [] if f != FINALIZER],
        }}
        try:
            updated = await self.client.patch(CLAIMS, meta["name"], patch, meta["namespace"])
        except NotFound:
            return claim
        except Conflict as exc:
            raise Retry("claim changed while removing the finalizer") from exc
        self._written("MODIFIED", updated)
        return updated

    async def _delete_if_orphaned(self, claim: JSON) -> None:
        meta = claim["metadata"]
        if POD_CLAIM_NAME_ANNOTATION not in (meta.get("annotations") or {}):
            return
        owner = next((ref for ref in meta.get("ownerReferences") or ()
                      if ref.get("controller") and ref.get("kind") == "Pod"), None)
        if owner is None:
            return
        # Only a pod this controller sees, replaced or done, is certain not to need the claim.
        # A pod it does not see is either gone or not seen yet: as upstream, the garbage
        # collector deletes the claim of a pod that is truly gone (the claim's ownerReference),
        # with no lookup here and no second DELETE racing it.
        pod = self.pods.get((meta["namespace"], owner["name"]))
        if pod is None or (pod["metadata"].get("uid") == owner["uid"]
                           and not pod_is_done(pod)):
            return
        key = (meta["namespace"], meta["name"])
        try:
            left = await self.client.delete(CLAIMS, meta["name"], meta["namespace"],
                                            uid=meta["uid"])
        except NotFound:
            self.claims.delete(key)  # gone already (the garbage collector was first)
            return
        except Conflict as exc:
            raise Retry("claim replaced while deleting it") from exc
        # Gone from the cache at once: the watch events still on their way (older versions,
        # ignored once its UID is buried) would each ask for the deletion again, in vain.
        if left.get("kind") == "ResourceClaim" and left.get("metadata", {}).get(
                "finalizers"):
            self._written("MODIFIED", left)  # someone else's finalizer holds it: terminating
        else:
            self._written("DELETED", claim)
        metrics.record_release("delete")
        replaced = pod["metadata"].get("uid") != owner["uid"]
        log.info("deleted claim %s/%s: its pod %s is %s", meta["namespace"], meta["name"],
                 owner["name"], "replaced" if replaced else "done")

    # ------------------------------------------------------------------ reporting

    async def _report(self, pod: JSON, reason: str, message: str) -> None:
        """One Warning event per distinct problem of a pod (the recorder counts repeats)."""
        key = key_of(pod)
        if self._reported.get(key) == f"{reason}:{message}":
            return
        self._reported[key] = f"{reason}:{message}"
        log.warning("pod %s/%s: %s: %s", key[0], key[1], reason, message)
        await self.events.warn(pod, reason, message)

