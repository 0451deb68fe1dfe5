"""The binder's writes for one pod: its claims' allocation and reservation, the wait for
prepare, the binding, and the undo when any of it fails.

:class:`Writes` runs in a task of the pod's own (:meth:`Writes.allocate_and_bind`), started
by the binder's loop once the placement is assumed in the snapshot, so the loop goes on with
the next pod at once.

Invariants:
- Every claim write carries the cached object's resourceVersion: a concurrent change fails
  with Conflict, the attempt is rolled back (claims this attempt allocated are deallocated)
  and the pod is retried from fresh state ("allocated elsewhere in the meantime").
- The placement assumed in the snapshot (and the quota book) is dropped once the writes are
  done or failed — the written claim is in the cache by then — and the pod's claims are no
  longer in flight: pods waiting for them are queued again.
- Whatever happens to the writes, a pod they did not complete goes back to the queue (a
  pod left in ``binding`` would never be tried again); a pod whose writes failed waits a
  per-pod backoff first, reset once its claims are written.
- Rolling back is best effort: a reservation it cannot undo is built upon by the pod's next
  attempt (or released by the claim controller once the pod is gone), so a failed roll-back
  never leaves the pod out of the queue.
- The pod is bound only after every device lets it bind — its binding conditions True, or
  for a device without any kdra's ``Ready`` where kdra's agent prepares before bind (the
  kdra flavour; :mod:`kdra.operator.scheduler.prepare`); its per-container devices
  annotations (kdra flavour) travel in the Binding itself, and so does its claim-statuses
  record where it has none yet — then with the pod's resourceVersion as precondition, so the
  pod bound is the pod decided on.
- Claims are written as the flavour has them (:class:`kdra.kube.core.flavours.Flavour`): its
  claims resource, its finalizer (added with a plain update first, as upstream's scheduler
  does), its status shape. An allocation whose devices
  have binding conditions carries ``allocationTimestamp`` (as upstream's), and the pod gets a
  ``BindingConditionsPending`` event while they are awaited.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from kdra.dra.binding_conditions import has_binding_conditions
from kdra.dra.errors import InvalidObject
from kdra.dra.models import AllocationResult, ResourceClaim, dump
from kdra.dra.timestamps import api_time
from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import (
    PodClaim,
    clear_allocation,
    drop_stray_device_statuses,
    pod_ref,
)
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.resources import PODS
from kdra.kube.store import JSON, Key, Store
from kdra.operator import metrics
from kdra.operator.core.pod_devices import container_devices
from kdra.operator.scheduler.cluster import ClusterView
from kdra.operator.scheduler.pending import Attempt, PendingPods
from kdra.operator.scheduler.prepare import PrepareWait, prepared
from kdra.operator.scheduler.reporting import devices
from kdra.operator.scheduler.settings import BinderSettings

log = logging.getLogger(__name__)


class PodChanged(Exception):
    """The pod changed between the decision and its Binding (another version of its claims
    or their record): the attempt is rolled back and the pod tried again."""


class Writes:
    """The write path of the binder (see the module doc)."""

    def __init__(self, client: KubeClient, events: EventRecorder, *, claims: Store,
                 cluster: ClusterView, pods: PendingPods, prepare: PrepareWait,
                 settings: BinderSettings, flavour: Flavour = KDRA) -> None:
        self.client = client
        self.flavour = flavour
        self.events = events
        self.claims = claims
        self.cluster = cluster
        self.snapshot = cluster.snapshot
        self.quotas = cluster.quotas
        self.pods = pods
        self.prepare = prepare
        self.settings = settings

    # ------------------------------------------------------------------ allocation writes

    async def allocate_and_bind(self, key: Key, attempt: Attempt,
                                resolved: list[tuple[PodClaim, str, JSON]],
                                parsed: Sequence[ResourceClaim],
                                results: dict[str, AllocationResult]) -> None:
        pod = attempt.pod
        pods = self.pods
        written = False
        try:
            for (_, name, raw), claim in zip(resolved, parsed, strict=True):
                result = results.get(claim.key)
                if result is None and any(r.uid == pod["metadata"]["uid"]
                                          for r in claim.status.reserved_for):
                    attempt.expected[name] = (raw.get("status") or {}).get("allocation") or {}
                    continue
                written_claim = await self.write_claim(raw, pod, result)
                attempt.expected[name] = written_claim["status"]["allocation"]
                attempt.reserved_here.append(name)
                if result is not None:
                    attempt.allocated_here.append(name)
            written = True
            pods.failures.pop(key, None)
        except (Conflict, NotFound) as exc:
            log.info("pod %s/%s: claim changed while allocating (%s); retrying", *key, exc)
            metrics.record_schedule_attempt("conflict", 0.0)
            await self.roll_back(attempt)
        except ApiError as exc:
            metrics.record_schedule_attempt("error", 0.0)
            await self.roll_back(attempt)
            await self.events.warn(pod, "FailedScheduling", f"writing the allocation failed: "
                                   f"{exc.message}")
            await asyncio.sleep(pods.backoff(key))
        except OSError as exc:  # the API server is unreachable (Unreachable)
            log.warning("pod %s/%s: writing the allocation failed (%s); retrying", *key, exc)
            metrics.record_schedule_attempt("error", 0.0)
            await self.roll_back(attempt)
            await asyncio.sleep(pods.backoff(key))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("allocating for %s/%s failed", *key)
            await self.roll_back(attempt)
            await asyncio.sleep(pods.backoff(key))
        finally:
            for key_ in results:
                self.snapshot.forget(key_)
                self.quotas.forget(key_)
            for _, name, _ in resolved:
                claim_key = (key[0], name)
                if pods.in_flight.get(claim_key) == key:
                    del pods.in_flight[claim_key]
                for waiting in pods.waiting_for_claim.pop(claim_key, set()):
                    waiting_pod = pods.pending.get(waiting)
                    if waiting_pod is not None:
                        pods.queue.add(waiting, waiting_pod)
            if not written:  # whatever happened (even in a handler above): back in the queue
                pods.binding.pop(key, None)
                current = pods.pending.get(key)
                if current is not None:
                    pods.queue.add(key, current)
        if written:
            await self._prepare_and_bind(key, attempt)

    async def write_claim(self, raw: JSON, pod: JSON, result: AllocationResult | None) -> JSON:
        """Add the finalizer (if missing), then allocation (if new) + reservation; returns
        the claim as written."""
        meta = raw["metadata"]
        body = raw
        finalizer = self.flavour.finalizer
        if finalizer not in (meta.get("finalizers") or []):
            body = await self.client.patch(self.flavour.claims, meta["name"], {"metadata": {
                "resourceVersion": meta["resourceVersion"],
                "finalizers": [*(meta.get("finalizers") or []), finalizer],
            }}, meta["namespace"])
            if result is not None and (body.get("status") or {}).get("allocation"):
                raise Conflict(409, "Conflict", "allocated elsewhere in the meantime")
        # Shallow copies: only top-level status keys are replaced, nothing nested is mutated.
        status = dict(body.get("status") or {})
        body = {**body, "status": status}
        if result is not None:
            allocation = dump(result)
            if any(r.binding_conditions for r in result.devices.results):
                # As upstream: the binding timeout counts from here (kdra.operator.scheduler.
                # prepare), also across a restart of the binder.
                allocation["allocationTimestamp"] = api_time()
            self.flavour.set_allocation(status, allocation)
        status["reservedFor"] = [*(status.get("reservedFor") or []), pod_ref(pod)]
        drop_stray_device_statuses(status)  # else the CRD refuses the write
        updated = await self.client.replace_status(self.flavour.claims, body)
        self.claims.upsert(updated)
        self.cluster.snapshot_claim(updated)
        if result is not None:
            metrics.observe_claim_allocated(updated)
        return updated

    # ------------------------------------------------------------------ undo

    async def roll_back(self, attempt: Attempt, *, every_claim: bool = False) -> None:
        """Undo the reservations this attempt wrote (never one another binder wrote for the same
        pod); deallocate claims it allocated, if no one else uses them meanwhile. Best effort,
        never raising for an API or connection error: the pod's next attempt builds on what is
        left (its reservation, the allocation), and the claim controller releases leftovers
        once the pod is gone.

        Invariant (two binders may be active at once): a binder binds a pod only after it saw
        every claim, at some resourceVersion, with the allocation it expects, the pod in
        ``reservedFor`` and every device Ready; a roll-back writes only at a resourceVersion
        where the claim still has this attempt's allocation and is *not* Ready. Ready stays
        until the allocation is cleared, so the two never both succeed on one claim: a
        prepared claim stays with its pod (whose next attempt builds on it)."""
        namespace = attempt.pod["metadata"]["namespace"]
        uid = attempt.pod["metadata"]["uid"]
        # A failed write undoes only what this attempt wrote (another binder may have reserved
        # the same pod meanwhile); a failed prepare moves the pod, so it drops the pod from
        # every claim of the attempt, including reservations an earlier attempt left behind.
        names = [name for _, name in attempt.claims] if every_claim else attempt.reserved_here
        for name in names:
            expected = attempt.expected.get(name)
            if expected is None:
                continue  # never written nor built on by this attempt
            try:
                await self._release_claim(namespace, name, uid, expected,
                                          deallocate=name in attempt.allocated_here)
            except (ApiError, OSError) as exc:
                log.warning("pod %s/%s: rolling back claim %s failed (%s); left for the next "
                            "attempt", namespace, attempt.pod["metadata"]["name"], name, exc)

    async def _release_claim(self, namespace: str, name: str, uid: str, expected: JSON, *,
                             deallocate: bool) -> None:
        """Drop pod ``uid`` from the claim's ``reservedFor``; deallocate it if ``deallocate``
        and no one else is left. Only while the claim still has the ``expected`` allocation
        and its devices are not Ready (see ``roll_back``); re-reads and retries on Conflict
        (5 tries)."""
        for _ in range(5):
            raw = self.claims.get((namespace, name))
            if raw is None:
                return
            status = raw.get("status") or {}
            if status.get("allocation") != expected or prepared(raw) is True:
                return  # someone else's allocation now, or prepared: a binder may bind on it
            reserved = status.get("reservedFor") or []
            keep = [r for r in reserved if r.get("uid") != uid]
            if len(keep) == len(reserved):
                return
            body = {**raw, "status": dict(status)}  # shallow: only status keys change
            body["status"]["reservedFor"] = keep
            if not keep:
                del body["status"]["reservedFor"]  # no field, as upstream (omitempty)
            if not keep and deallocate:
                clear_allocation(body["status"])
            drop_stray_device_statuses(body["status"])
            try:
                updated = await self.client.replace_status(self.flavour.claims, body)
            except Conflict:
                try:
                    fresh = await self.client.get(self.flavour.claims, name, namespace)
                except NotFound:
                    return
                self.claims.upsert(fresh)
                continue
            except NotFound:
                return
            self.claims.upsert(updated)
            self.cluster.snapshot_claim(updated)
            return

    # ------------------------------------------------------------------ prepare + bind

    async def _prepare_and_bind(self, key: Key, attempt: Attempt) -> None:
        pod, node = attempt.pod, attempt.node
        pods = self.pods
        namespace = pod["metadata"]["namespace"]
        try:
            if any(has_binding_conditions(self.claims.get((namespace, name)) or {})
                   for _, name in attempt.claims):
                await self.events.normal(pod, "BindingConditionsPending", "waiting for binding "
                                         f"conditions for device on node {node}")
            failure = await self.prepare.wait(namespace, attempt)
            if failure is not None:
                await self.roll_back(attempt, every_claim=True)
                # Not the node's fault (DeviceBusy: another claim got the device first, e.g.
                # a second binder's; the claim changed under us): avoid the node only briefly.
                hold = self.settings.exclude_after_failure if failure.node_fault else 5.0
                pods.excluded[key][node] = time.monotonic() + hold
                await self.events.warn(pod, "FailedPrepare", f"devices on node {node!r} were "
                                       f"not prepared: {failure.message}; trying another node")
                metrics.record_schedule_attempt("prepare-failed", 0.0)
                return
            try:
                await self.bind(key, pod, node, attempt)
            except (NotFound, PodChanged) as exc:
                if isinstance(exc, PodChanged):
                    log.info("pod %s/%s changed before its binding: %s; trying it again",
                             *key, exc)
                await self.roll_back(attempt)
                return
            # Bound: not pending any more, though the watch event saying so may still be on
            # its way (requeueing the unbound copy would schedule it again, only to be told
            # 409 by the API server).
            pods.remember_bound(pod["metadata"]["uid"])
            if pods.pending.pop(key, None) is not None:
                metrics.set_pending_pods(len(pods.pending))
            metrics.observe_scheduled(pod, time.monotonic() - attempt.started)
            held = ", ".join(devices(self.claims, namespace, attempt)) or "none"
            await self.events.normal(pod, "Scheduled", f"Successfully assigned {namespace}/"
                                     f"{pod['metadata']['name']} to {node} with devices {held}")
        except asyncio.CancelledError:
            raise
        except ApiError as exc:  # e.g. the namespace is being deleted
            log.warning("binding %s/%s to %s failed: %s", *key, node, exc)
            await self.roll_back(attempt)
        except Exception:
            log.exception("binding %s/%s to %s failed", *key, node)
            await self.roll_back(attempt)
        finally:
            pods.binding.pop(key, None)
            current = pods.pending.get(key)
            if current is not None and not current.get("spec", {}).get("nodeName"):
                pods.queue.add(key, current)

    async def bind(self, key: Key, pod: JSON, node: str, attempt: Attempt) -> None:
        """Bind the pod to ``node``. The Binding carries the per-container devices
        annotations and, where the pod has no record of its claims' names yet, that record
        (kdra's flavour): the API server copies a Binding's annotations onto the pod in the
        same update that sets nodeName, so a kubelet never sees the pod bound without them
        (and they cost no write). A Binding with the record binds only the pod version the
        attempt decided on (its resourceVersion as precondition: the claims annotation may
        still change until the record is written); where only something else changed, it
        is retried once on the version the API server has. Raises NotFound (the pod is
        gone or replaced) and PodChanged; a pod already bound (a previous attempt's Binding
        went through) is not an error."""
        meta = pod["metadata"]
        annotations = self.device_annotations(pod, attempt)
        names = {entry.name: name for entry, name in attempt.claims}
        target = pod
        for _ in range(2):
            record = self.flavour.binding_record(target, names)
            version = target["metadata"].get("resourceVersion") if record else None
            try:
                await self.client.bind(meta["namespace"], meta["name"], meta["uid"], node,
                                       annotations={**annotations, **record},
                                       resource_version=version)
                break
            except Conflict as exc:
                if version is None:
                    break  # already bound (its record was on it before)
                # Which change? Asked once (a rare path): the cache may not have it yet.
                current = await self.client.get(PODS, meta["name"], meta["namespace"])
                if current["metadata"].get("uid") != meta["uid"]:
                    raise NotFound(404, "NotFound", "the pod was replaced") from exc
                recorded = self.flavour.claim_statuses(current)
                if current.get("spec", {}).get("nodeName"):
                    if recorded == names:
                        break  # a previous attempt's Binding went through
                    raise PodChanged("bound by another binder on other claims") from exc
                if not self._same_claims(current, pod) or recorded not in ({}, names):
                    raise PodChanged(exc.message) from exc
                target = current  # only something else changed (or the record was written)
        else:
            raise PodChanged("it changed again while being bound")
        self.pods.records.drop(key)

    def _same_claims(self, pod: JSON, other: JSON) -> bool:
        try:
            return self.flavour.pod_claims(pod) == self.flavour.pod_claims(other)
        except InvalidObject:
            return False

    def device_annotations(self, pod: JSON, attempt: Attempt) -> dict[str, str]:
        """The per-container devices annotations for the pod (kdra.dra.scheduling); none
        where the kubelet gives containers their devices (the flavour's
        ``device_annotations``)."""
        if not self.flavour.device_annotations:
            return {}
        namespace = pod["metadata"]["namespace"]
        results: dict[str, list[tuple[str, str, str, str]]] = {}
        uuids: dict[tuple[str, str, str], str] = {}
        for entry, name in attempt.claims:
            raw = self.claims.get((namespace, name)) or {}
            allocation = (raw.get("status") or {}).get("allocation") or {}
            rows = [(r["request"], r["driver"], r["pool"], r["device"])
                    for r in (allocation.get("devices") or {}).get("results") or []]
            results[entry.name] = rows
            for _, driver, pool, device in rows:
                uuid = self.cluster.attribute(driver, pool, device, "uuid")
                if uuid:
                    uuids[(driver, pool, device)] = uuid
        return container_devices(pod, [e for e, _ in attempt.claims], results, uuids)
