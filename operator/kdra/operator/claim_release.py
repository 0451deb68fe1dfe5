"""The claim controller's claim side: a claim's reservations, allocation and finalizer
released when its pods are gone or done, and a generated claim deleted when its pod is done,
replaced or gone (the controller: :mod:`kdra.operator.claim_controller`).

``sync_claim(ns, name)`` drops ``reservedFor`` entries of pods that are gone, replaced (other
UID) or done; clears ``status.allocation`` when no reservation is left; removes the flavour's
finalizer once the claim is deallocated, or once nobody valid reserves a claim being deleted —
which ends the object with its allocation, so no status write comes first.

A generated claim whose pod is certainly done with it — done or replaced (the pod is cached),
or gone by the pod watch's own DELETED event (its UID buried) — is released by removing the
finalizer and then deleted, which ends it at once with its allocation: two writes. The DELETE
waits for the finalizer-free version's watch event, so the API server finds that version in
its watch cache. (Deleting first and then removing the finalizer of the terminating claim cost
the API server a re-read of the claim from etcd on the removal — emptying the finalizers of a
terminating object is an error path of its update that re-fetches — and another on the
deletion it ended in when the removal was sent on the DELETE's answer: each a decode and
schema coercion of the claim, ~4 % of its CPU in the steady workload, issue 42.) Leaving it
to the garbage collector cost a deallocating status PUT, the finalizer's removal and the
collector's DELETEs (1.9 DELETE requests per claim at 500 nodes, bench/RESULTS.md, issue 42).
A claim whose pod is merely not seen (not cached, no deletion watched) is left to the garbage
collector, as upstream's controller leaves it: its ownerReference names the pod.

:class:`ClaimWrites` are the writes of a claim both sides make (the pod side adds a bound pod
to ``reservedFor``): a status PUT, its answer cached and handed to the binder.

Invariants:
- Every status write is a PUT of the object as cached, so its resourceVersion is the
  precondition: a concurrent change (the binder allocating) makes it fail with Conflict and the
  claim is reconciled again from fresh state. The finalizer's removal carries the
  resourceVersion too; a claim's deletion carries its UID.
- A pod missing from the cache is looked up with a live GET before its reservation is dropped
  (the cache may simply not have seen a brand-new pod yet).
- The finalizer (the flavour's: kdra's, or upstream's in the native flavour) is removed only
  from a claim that nobody valid reserves and that is either not allocated, being deleted, or
  a generated claim whose pod is done with it, deleted here next (a deleted claim takes its
  allocation with it: the binder, the agent and the quota book release its devices on its
  DELETED event); the binder owns the finalizer while it allocates.
"""

from __future__ import annotations

import logging

from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import Flavour
from kdra.kube.core.podclaims import (
    clear_allocation,
    drop_stray_device_statuses,
    is_object_name,
    pod_is_done,
)
from kdra.kube.errors import Conflict, NotFound
from kdra.kube.resources import PODS
from kdra.kube.store import JSON, Key, RecentSet, Store
from kdra.kube.typed_cache import Subscriber
from kdra.kube.workqueue import Retry
from kdra.operator import metrics
from kdra.operator.caches import ClaimCache
from kdra.operator.claim_owner import ClaimOwner

__all__ = ["ClaimRelease", "ClaimWrites", "with_status"]

log = logging.getLogger(__name__)


def with_status(claim: JSON) -> JSON:
    """A copy of ``claim`` whose ``status`` (only) may be changed: top-level keys are
    copied, nothing nested is (a deep copy of a free-form field nested a thousand levels
    deep would fail, and costs more)."""
    return {**claim, "status": dict(claim.get("status") or {})}



class ClaimWrites:
    """A claim's status written by the controller (the state is
    :class:`~kdra.operator.claim_controller.ClaimController`'s)."""

    client: KubeClient
    claims: ClaimCache
    flavour: Flavour
    on_claim: Subscriber
    """The controller's own subscription to the claim cache (ClaimController.on_claim)."""

    async def _write_status(self, body: JSON) -> JSON:
        drop_stray_device_statuses(body["status"])  # else the CRD refuses the write
        try:
            updated = await self.client.replace_status(self.flavour.claims, body)
        except Conflict as exc:
            raise Retry("claim changed concurrently; reconciling again") from exc
        except NotFound:
            return body
        self._written("MODIFIED", updated)
        return updated

    def _written(self, event_type: str, claim: JSON) -> None:
        """Cache the controller's own write (the cache ignores it if a newer version or
        the deletion was seen meanwhile) and hand it to the claim cache's other subscribers
        (the binder sees devices freed without waiting for the watch event)."""
        self.claims.record(event_type, claim, by=self.on_claim)


RELEASED_REMEMBERED = 4096
"""Claims whose finalizer was removed here and whose DELETE awaits that version's watch event
(UIDs; an event lags its write by milliseconds: thousands is ample)."""


class ClaimRelease(ClaimWrites):
    """The claim side of :class:`~kdra.operator.claim_controller.ClaimController`."""

    pods: Store
    owner: ClaimOwner
    _released_here: RecentSet

    async def _sync_claim_key(self, key: Key) -> None:
        claim = self.claims.get(key)
        if claim is not None and self.owner.deferred is None:
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
                    and not pod_is_done(pod) and not self._superseded(claim, pod):
                valid.append(ref)
        deleting = bool(claim["metadata"].get("deletionTimestamp"))
        if not valid and not deleting and self._unneeded(claim):
            if self.flavour.finalizer not in (claim["metadata"].get("finalizers") or []):
                await self._delete(claim)  # ends it (or leaves it to others' finalizers)
            elif claim["metadata"].get("uid") not in self._released_here:
                # The finalizer off first; the DELETE on that version's watch event (the
                # module doc). An older version's event meanwhile asks for nothing.
                await self._remove_finalizer(claim, cached=False)
                self._released_here.add(claim["metadata"]["uid"], RELEASED_REMEMBERED)
                self._count_release(claim, len(reserved), announce=False)  # _delete says it
            return
        if deleting and not valid:
            await self._release_deleted(claim, len(reserved))
            return
        allocated = bool(status.get("allocation"))
        deallocated = False
        # Also an allocation a scheduler wrote with the flavour's finalizer (kdra's binder, or
        # in the native flavour upstream's scheduler too) that nobody reserves (a binder died
        # between its writes, or rolled back part of them): schedulers write allocation and
        # reservation in one update, so it is not in use. An unreserved allocation without
        # the finalizer is left alone, as upstream does.
        ours = self.flavour.protected(claim)
        if len(valid) != len(reserved) or (allocated and not valid and ours):
            body = with_status(claim)
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
        if self.flavour.finalizer in finalizers and not allocated and deallocated:
            await self._remove_finalizer(claim)

    def _unneeded(self, claim: JSON) -> bool:
        """Whether ``claim`` was generated for a pod that is certainly done with it: the pod
        is done, replaced (same name, other UID), or its deletion was watched. A pod this
        controller does not see at all is either gone or not seen yet: as upstream, the
        garbage collector deletes the claim of a pod that is truly gone (the claim's
        ownerReference), with no lookup here."""
        owner = self.flavour.generated_for(claim)
        if owner is None:
            return False
        uid = str(owner.get("uid") or "")
        pod = self.pods.get((claim["metadata"]["namespace"], str(owner.get("name"))))
        if pod is None:
            return bool(uid) and self.pods.was_deleted(uid)
        return pod["metadata"].get("uid") != uid or pod_is_done(pod) or \
            self._superseded(claim, pod)

    def _superseded(self, claim: JSON, pod: JSON) -> bool:
        """Whether ``claim``, generated for ``pod``, is not the one the pod's record names for
        its entry: a duplicate a second claim controller made (two replicas at once), which
        that replica's binder may even have allocated and had prepared before the other's
        record was written — a recorded name is final (never replaced while its claim
        exists), and the pod runs on it, so this one is released and deleted, its devices
        freed. Only a claim a claim controller generated (the flavour's finalizer is set at
        birth): an object merely made to look generated for the pod is left to the
        scheduler, which refuses it to any other pod. A pod with no record for the entry
        yet supersedes nothing."""
        if not self.flavour.protected(claim) and \
                claim["metadata"].get("uid") not in self._released_here:
            return False  # (its finalizer removed here: the DELETE is still to come)
        owner = self.flavour.generated_for(claim)
        if owner is None or owner.get("uid") != pod["metadata"].get("uid"):
            return False
        entry = (claim["metadata"].get("annotations") or {}).get(
            self.flavour.pod_claim_name_annotation)
        recorded = self.flavour.claim_statuses(pod).get(str(entry))
        return recorded is not None and recorded != claim["metadata"]["name"]

    async def _delete(self, claim: JSON) -> None:
        """Delete the unneeded generated ``claim``, kdra's finalizer no longer on it (its UID
        the precondition): it ends at once, unless another controller's finalizer holds it
        (then that controller's to release)."""
        meta = claim["metadata"]
        key = (meta["namespace"], meta["name"])
        released = meta["uid"] in self._released_here  # its finalizer removed here: one line
        try:
            left = await self.client.delete(self.flavour.claims, meta["name"], meta["namespace"],
                                            uid=meta["uid"])
        except NotFound:
            self.claims.delete(key)  # gone already (the garbage collector was first)
            if released:
                log.info("released claim %s/%s (deleted already)", *key)
            return
        except Conflict as exc:
            raise Retry("claim replaced while deleting it") from exc
        metrics.record_release("delete")
        log.info("%s claim %s/%s: its pod is done, replaced or gone",
                 "released and deleted" if released else "deleted", *key)
        if left.get("kind") == "ResourceClaim" and left.get("metadata", {}).get("finalizers"):
            self._written("MODIFIED", left)  # terminating under someone else's finalizer
            return
        self._written("DELETED", claim)

    def _count_release(self, claim: JSON, unreserved: int, *, announce: bool = True) -> None:
        """The metrics of a claim released by its finalizer's removal, and its log line
        (``announce``; a generated claim deleted next gets one line for both, issue 42)."""
        for _ in range(unreserved):
            metrics.record_release("unreserve")
        if (claim.get("status") or {}).get("allocation"):
            metrics.record_release("deallocate")
            if announce:
                log.info("released claim %s/%s", claim["metadata"]["namespace"],
                         claim["metadata"]["name"])

    async def _release_deleted(self, claim: JSON, unreserved: int) -> None:
        """Release a claim being deleted that nobody valid reserves: the flavour's finalizer
        removed (if it is there), which ends the object — its allocation and reservations
        with it, so no status write comes first."""
        if self.flavour.finalizer not in (claim["metadata"].get("finalizers") or []):
            return
        await self._remove_finalizer(claim)
        self._count_release(claim, unreserved)

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

    async def _remove_finalizer(self, claim: JSON, *, cached: bool = True) -> JSON:
        """Remove the flavour's finalizer (the claim's resourceVersion the precondition);
        ``cached``: the answer goes to the cache and its subscribers at once — else the
        version's watch event brings it, and with it the claim's next step."""
        meta = claim["metadata"]
        patch = {"metadata": {
            "resourceVersion": meta.get("resourceVersion"),
            "finalizers": [f for f in meta.get("finalizers") or [] if f != self.flavour.finalizer],
        }}
        try:
            updated = await self.client.patch(self.flavour.claims, meta["name"], patch,
                                              meta["namespace"])
        except NotFound:
            return claim
        except Conflict as exc:
            raise Retry("claim changed while removing the finalizer") from exc
        gone = bool(meta.get("deletionTimestamp")) and not (
            updated.get("metadata") or {}).get("finalizers")
        if cached or gone:
            self._written("DELETED" if gone else "MODIFIED", updated)
        return updated
