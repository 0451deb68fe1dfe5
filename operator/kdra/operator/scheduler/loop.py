"""The :class:`Binder`: kdra's scheduling loop and the composition of its helpers.

The binder owns one helper per job — :class:`~kdra.operator.scheduler.cluster.ClusterView`
(caches, snapshot, node filters), :class:`~kdra.operator.scheduler.pending.PendingPods` (queue
and per-pod bookkeeping), :class:`~kdra.operator.scheduler.reporting.Reporter`,
:class:`~kdra.operator.scheduler.prepare.PrepareWait` and
:class:`~kdra.operator.scheduler.writes.Writes` — and wires the watch events to them. Its loop
takes pending pods in priority order and, for each, resolves its claims, filters the nodes,
runs the allocator over the candidates (long searches go on beside the loop,
kdra.operator.scheduler.searches), picks a node by policy, and hands the writes to a task of the
pod's own.

Invariants:
- One loop, the only writer of ``status.allocation``; it hands each pod's writes, prepare
  wait and binding to a task of the pod's own and goes on with the next pod at once.
- An allocation is *assumed* in the allocator's snapshot (and the quota book) before it is
  written, so the next pod never gets the same device while the write is in flight; the
  pod's claims are *in flight* meanwhile, and another pod sharing one waits for the write,
  then builds on it.
- A pod naming a claim that does not exist gets ``PodScheduled=False`` (``Unschedulable``,
  kube-scheduler's ``resourceclaim... not found``) and an event, and waits for the claim; a
  template's claim not created yet is the claim controller's to make (nothing is written).
- A pod that fits nowhere gets a ``FailedScheduling`` event and a ``PodScheduled=False``
  condition saying why, node group by node group, and waits until slices, claims, classes or
  nodes change (or a periodic flush) — never a busy retry loop; while devices are being
  released it first waits for them, unreported (kdra.operator.scheduler.pending).
- The snapshot follows the newest version of each claim the binder has seen (a write
  response, its own or the claim controller's, may be newer than a watch event that arrives
  after it): a stale event never shows a device free that a newer version holds.
- A pod that carries what only kdra writes (device annotations), sets the device variables
  in a container (:func:`kdra.operator.core.admission_env.device_env_errors`), or names a claim
  generated for another pod is refused (``PodScheduled=False``, reason ``InvalidPod``,
  naming the field or the claim) and never bound: the webhooks deny these, this holds for
  pods stored without them.
- An attempt that fails unexpectedly (an API error, the API server unreachable, a bug)
  never stops the loop: the pod is retried after its backoff.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

from kdra import GROUP
from kdra.dra.allocator import ClusterOutcome, Placement, Placing, none_available
from kdra.dra.errors import InvalidObject
from kdra.dra.models import ResourceClaim
from kdra.dra.scheduling import (
    POD_GROUP_LABEL,
    SEARCH_EXHAUSTED,
    PodFit,
    best,
    explain,
    pod_policy,
    search_window,
)
from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    SCHEDULER_NAME,
    PodClaim,
    kdra_owned,
    owned_by,
)
from kdra.kube.core.untrusted import shorten
from kdra.kube.errors import ApiError
from kdra.kube.events import EventRecorder
from kdra.kube.store import JSON, Key, is_not_newer, key_of
from kdra.operator import metrics
from kdra.operator.caches import ClaimCache, SliceCache
from kdra.operator.core.admission_env import device_env_errors
from kdra.operator.scheduler.cluster import ClusterView
from kdra.operator.scheduler.gang_preemption import GangPreemption
from kdra.operator.scheduler.gang_writes import GangWrites
from kdra.operator.scheduler.gangs import GANG_DEADLINE_CAP, Gangs
from kdra.operator.scheduler.pending import Attempt, Context, PendingPods
from kdra.operator.scheduler.preemption import Preemption
from kdra.operator.scheduler.prepare import PrepareWait
from kdra.operator.scheduler.quota import QUOTA_REASON
from kdra.operator.scheduler.reporting import Reporter, exhausted_message, record_filtered
from kdra.operator.scheduler.searches import Limit, Searches
from kdra.operator.scheduler.settings import BinderSettings
from kdra.operator.scheduler.writes import Writes

log = logging.getLogger(__name__)


class Binder:
    """kdra's scheduler (see the package doc): one loop over its helpers' state."""

    def __init__(self, client: KubeClient, events: EventRecorder, *, claims: ClaimCache,
                 settings: BinderSettings | None = None, flavour: Flavour = KDRA,
                 slices: SliceCache | None = None) -> None:
        self.client = client
        self.flavour = flavour
        """Where a pod's claims and their names are, how claims are written (the API
        flavour, :mod:`kdra.kube.core.flavours`)."""
        self.events = events
        self.settings = settings or BinderSettings()
        self.claims = claims  # the typed claim cache (kdra.operator.caches), shared
        self.cluster = ClusterView(claims, slices)
        self.pods = PendingPods(self.settings)
        self.reporter = Reporter(client, events, self.pods)
        self.prepare = PrepareWait(claims, self.settings, implicit=flavour.agent_prepares)
        self.writes = Writes(client, events, claims=claims, cluster=self.cluster,
                             pods=self.pods, prepare=self.prepare, settings=self.settings,
                             flavour=flavour)
        # The helpers' state the loop reads on every pod, and the operator (snapshot,
        # quotas) and tests read, by the binder's own names: the same objects, never
        # replaced.
        self.snapshot = self.cluster.snapshot
        self.quotas = self.cluster.quotas
        self.usage = self.cluster.usage
        self.pending = self.pods.pending
        self.queue = self.pods.queue
        self.parked = self.pods.parked
        self.binding = self.pods.binding
        self.failures = self.pods.failures
        self.releasing = self.pods.releasing
        self._next_start = 0  # where the next spread search starts (kube-scheduler's rotation)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._flush_task: asyncio.Task[None] | None = None
        self.preemption = Preemption(client, events, claims=claims, snapshot=self.snapshot,
                                     settings=self.settings.preemption, quotas=self.quotas)
        self.searches = Searches(  # long allocation searches
            self.settings.search,
            on_error=lambda key: self.pods.retry_later(key, self.pods.backoff(key)))
        self.gangs = Gangs(  # pods labelled scheduling.x-k8s.io/pod-group: placed together
            cluster=self.cluster, pods=self.pods, reporter=self.reporter,
            writes=GangWrites(self.writes, self.pods), settings=self.settings,
            context=self._context, reserved=self.preemption.reserved_against,
            searches=self.searches,
            preemption=GangPreemption(self.preemption, self.searches,
                                      deadline=GANG_DEADLINE_CAP))

    # ------------------------------------------------------------------ lifecycle

    def prime(self, *, nodes: list[JSON], slices: list[JSON], classes: list[JSON],
              pods: list[JSON]) -> None:
        """Fill the caches from start-up LISTs. An object whose handling fails is logged and
        left out, as a watch event would be: one object never stops a start."""
        def each(handler: Callable[[str | None, JSON], None], objects: list[JSON]) -> None:
            for obj in objects:
                try:
                    handler(None, obj)
                except Exception:
                    log.exception("%s/%s: left out at start-up", *key_of(obj))

        each(self.on_node, nodes)
        each(self.on_slice, slices)
        each(self.on_class, classes)
        for claim in self.claims:
            self.cluster.snapshot_claim(claim)
        each(self.on_pod, pods)

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._run(), name="binder")
        self._flush_task = asyncio.create_task(self.pods.flush(), name="binder-flush")

    async def stop(self) -> None:
        await self.searches.stop()
        await self.gangs.writes.stop()
        for task in [self._loop_task, self._flush_task, *self._tasks]:
            if task is not None:
                task.cancel()
        await asyncio.gather(*[t for t in [self._loop_task, self._flush_task, *self._tasks]
                               if t is not None], return_exceptions=True)

    # ------------------------------------------------------------------ events in

    def on_pod(self, event_type: str | None, pod: JSON) -> None:
        key = key_of(pod)
        uid = pod["metadata"].get("uid", "")
        node = pod.get("spec", {}).get("nodeName")
        pods = self.pods
        if event_type == "DELETED":
            pods.bound.discard(uid)
        elif is_not_newer(pod, self.pending.get(key)):
            return  # a write response (the claim controller's) was handed over first, or
            # this is its watch event: nothing new
        elif not node and uid in pods.bound:
            return  # from before this binder bound it (a bound pod never comes unbound)
        self.preemption.on_pod(event_type, pod)  # bound pods: potential victims
        phase = pod.get("status", {}).get("phase")
        gone = event_type == "DELETED" or phase in ("Succeeded", "Failed")
        if gone and uid:
            pods.expect_releases(uid, self.claims)
        self.cluster.count_usage(uid, node, gone, pod)
        ours = pod.get("spec", {}).get("schedulerName") == SCHEDULER_NAME
        if not ours:
            return
        if gone or node or pod["metadata"].get("deletionTimestamp"):
            self.searches.cancel(key)
            pods.forget(key)
            metrics.set_pending_pods(len(self.pending))
            if gone:
                pods.wake()  # its devices may be released soon
            return
        self.pending[key] = pod
        metrics.set_pending_pods(len(self.pending))
        if key not in self.binding:
            self.parked.discard(key)
            self.queue.add(key, pod)

    def names_known(self, pod: JSON) -> None:
        """The claim controller put the pod's claim names in ``pods.records`` (not on the
        pod: no pod event follows): try the pod."""
        key = key_of(pod)
        current = self.pending.get(key)
        if current is not None and key not in self.binding:
            self.parked.discard(key)
            self.queue.add(key, current)

    def on_claim(self, event_type: str | None, claim: JSON, old: JSON | None = None) -> None:
        """The claim cache's subscriber (called after the cache applied the event; ``old``
        unused), and the claim controller's write responses (kdra.operator.composition)."""
        key = key_of(claim)
        before = self.snapshot.devices_in_use
        had, released = len(before), self.snapshot.releases
        if event_type == "DELETED":
            self.cluster.remove_claim(key, claim)
            self.releasing.pop(key, None)
        else:
            newest = self.claims.newest(claim)
            if newest is None:
                return  # a late write response of a claim already deleted
            if self.cluster.snapshotted(newest):
                return  # this version was taken already (the binder's own write, a re-list)
            claim = newest
            self.cluster.snapshot_claim(claim)
            if not (claim.get("status") or {}).get("allocation"):
                self.releasing.pop(key, None)
        self.pods.claim_changed(key)
        self.prepare.claim_changed(key)
        if (len(self.snapshot.devices_in_use) < had or event_type == "DELETED"
                or self.snapshot.releases > released):
            self.pods.wake()  # devices (or shares of a device) were freed

    def on_node(self, event_type: str | None, node: JSON) -> None:
        self.cluster.on_node(event_type, node)
        self.pods.wake()

    def on_slice(self, event_type: str | None, slice_: JSON, old: JSON | None = None) -> None:
        """The slice cache's subscriber."""
        self.cluster.on_slice(event_type, slice_)
        self.pods.wake()

    def on_rule(self, event_type: str | None, rule: JSON) -> None:
        """A DeviceTaintRule: its taint applies to matching devices at the next attempt."""
        self.cluster.on_rule(event_type, rule)
        self.pods.wake()

    def on_quota(self, event_type: str | None, quota: JSON) -> None:
        """A DeviceQuota: pods it held back are retried (or held back) at the next attempt."""
        self.quotas.on_quota(event_type, quota)
        self.pods.wake()

    def on_pod_group(self, event_type: str | None, obj: JSON) -> None:
        """A scheduler-plugins PodGroup: its gang's size (kdra.operator.scheduler.gangs)."""
        self.gangs.on_pod_group(event_type, obj)

    def on_class(self, event_type: str | None, device_class: JSON) -> None:
        self.cluster.on_class(event_type, device_class)
        self.pods.wake()

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while True:
            if self.searches:
                await asyncio.sleep(0)  # a long search takes its slice between two pods
            key = await self.queue.pop()
            pod = self.pending.get(key)
            if pod is None or key in self.binding or key in self.searches or \
                    self.gangs.busy(key):
                continue
            started = time.perf_counter()
            try:
                if POD_GROUP_LABEL in (pod["metadata"].get("labels") or ()):
                    result = await self.gangs.schedule(key, pod)  # kdra.operator.scheduler.gangs
                else:
                    result = await self._schedule(key, pod)
            except Exception as exc:
                result = self._failed(key, exc)
            metrics.record_schedule_attempt(result, time.perf_counter() - started)

    def _failed(self, key: Key, exc: Exception) -> str:
        """An attempt raised (called in its ``except``): log it, retry the pod after its
        backoff."""
        delay = self.pods.backoff(key)
        if isinstance(exc, (ApiError, OSError)):  # e.g. the API server restarting
            log.warning("scheduling %s/%s failed (%s); retrying in %.1fs", *key, exc, delay)
        else:
            log.exception("scheduling %s/%s failed; retrying", *key)
        self.pods.retry_later(key, delay)
        return "error"

    async def _schedule(self, key: Key, pod: JSON) -> str:
        attempt = await self._context(key, pod)
        if isinstance(attempt, str):
            return attempt
        candidates = attempt.candidates
        if attempt.unallocated and candidates:
            window = search_window(attempt.policy, len(candidates), self._next_start)
            started = time.perf_counter()
            placing = Placing(self.snapshot, attempt.unallocated, candidates,
                              in_flight=self.preemption.reserved_against(key, pod),
                              limit=window.limit, start=window.start,
                              node_steps=self.settings.search.node_steps(len(candidates)),
                              scoring=attempt.policy != "first-fit")
            outcome = placing.advance(self.settings.search.slice)
            if outcome is None:  # a long search: on beside the loop (scheduler.searches)
                self.searches.start(key, placing, functools.partial(
                    self._searched, key, pod, attempt, placing, window.rotates, started))
                return "searching"
            metrics.observe_allocator(time.perf_counter() - started)
            if window.rotates:
                self._next_start = outcome.next_start
            return await self._decide(key, pod, attempt, outcome)
        placements = {n.name: Placement(n.name, (), [], {}) for n in candidates}
        return await self._choose(key, pod, attempt, placements)

    async def _context(self, key: Key, pod: JSON) -> Context | str:
        """The pod's claims resolved and its candidate nodes filtered (an attempt's
        :class:`Context`), or the attempt's result where it ends here (reported)."""
        namespace = key[0]
        forged = sorted(k for k in kdra_owned(pod["metadata"].get("annotations"))
                        if k != CLAIM_STATUSES_ANNOTATION)
        if forged:
            # Only kdra writes these, in the Binding: an unbound pod carrying them was given
            # them by someone else (its env would read devices it does not hold).
            more = f" (and {len(forged) - 1} more)" if len(forged) > 1 else ""
            await self.reporter.unschedulable(
                pod, f"annotation {shorten(forged[0], 100)}{more} is written by kdra only, "
                "when it binds the pod; delete the pod and create it without it",
                reason="InvalidPod")
            return "invalid"
        env = device_env_errors(pod)
        if env:  # stored without the webhook (an outage, an object from before the rule)
            more = f" (and {len(env) - 1} more)" if len(env) > 1 else ""
            await self.reporter.unschedulable(
                pod, f"{env[0]}{more}; delete the pod and create it without it",
                reason="InvalidPod")
            return "invalid"
        try:
            entries = self.flavour.pod_claims(pod)
        except InvalidObject:
            self.parked.add(key)  # the claim controller reports the bad claims
            return "invalid"
        uid = pod["metadata"]["uid"]
        recorded = self.flavour.claim_statuses(pod)
        held = self.pods.records.names(key, uid)  # decided, to be recorded by the Binding
        if held:
            recorded = {**held, **recorded}  # a record on the pod is final: it wins
        resolved: list[tuple[PodClaim, str, JSON]] = []
        for entry in entries:
            # A generated claim only once the pod's record (claim-statuses annotation, or
            # status.resourceClaimStatuses) names it: two claim controllers may each have
            # generated one, and the record decides which one is the pod's.
            name = entry.resource_claim_name or recorded.get(entry.name)
            raw = self.claims.get((namespace, name)) if name else None
            if name is None or raw is None:
                if name:
                    self.pods.waiting_for_claim[(namespace, name)].add(key)
                log.debug("pod %s/%s waits for claim %s", *key, name or entry.name)
                if entry.resource_claim_name:
                    # Named by the user and not there: nobody creates it but them. Say so,
                    # as kube-scheduler's PreFilter does (a generated claim not recorded yet
                    # is the claim controller's to make: no report, no write per pod).
                    await self.reporter.unschedulable(pod, none_available(
                        f'resourceclaim.{GROUP} "{shorten(name, 253)}" not found (entry '
                        f'"{shorten(entry.name, 63)}"): the pod waits until it is created',
                        len(self.cluster.nodes)), park=False)  # its creation re-enqueues it
                return "waiting"  # the pod or claim event re-enqueues it
            if entry.generated and not owned_by(raw, uid):
                # Upstream's IsForPod: a generated claim serves only the pod that owns it.
                # The claim controller records the pod's own claim; its write wakes the pod.
                await self.reporter.unschedulable(
                    pod, f"claim {name!r} recorded for entry {entry.name!r} belongs to another "
                    "pod; waiting for the pod's own claim")
                return "unschedulable"
            generated = self.flavour.generated_for(raw)
            if generated is not None and generated.get("uid") != uid:
                # Named directly (resourceClaimName): the same rule, and no waiting helps.
                await self.reporter.unschedulable(
                    pod, f"claim {name!r} (entry {entry.name!r}) was generated for pod "
                    f"{shorten(generated.get('name'), 100)!r} and serves only that pod; "
                    "delete this pod and give it a claim of its own", reason="InvalidPod")
                return "invalid"
            owner = self.pods.in_flight.get((namespace, name))
            if owner is not None and owner != key:
                # Another pod's allocation of this (shared) claim is being written: wait for
                # it, then build on what it wrote (upstream: "claim in flight").
                self.pods.waiting_for_claim[(namespace, name)].add(key)
                return "waiting"
            if raw["metadata"].get("deletionTimestamp"):
                await self.reporter.unschedulable(pod, none_available(  # kube-scheduler's
                    f'resourceclaim "{shorten(name, 253)}" is being deleted',
                    len(self.cluster.nodes)))
                return "unschedulable"
            resolved.append((entry, name, raw))
        try:
            parsed = [self.cluster.parse(raw) for _, _, raw in resolved]
        except InvalidObject as exc:
            await self.reporter.unschedulable(pod, f"invalid claim: {exc}")
            return "unschedulable"
        for claim in parsed:
            reserved = claim.status.reserved_for
            if claim.allocated and not any(r.uid == uid for r in reserved) \
                    and len(reserved) >= 32:
                await self.reporter.unschedulable(
                    pod, f"claim {claim.metadata.name!r} is already reserved for 32 consumers")
                return "unschedulable"

        try:
            fit = PodFit.of(pod)
        except InvalidObject as exc:
            await self.reporter.unschedulable(pod, f"invalid pod: {exc}")
            return "unschedulable"
        reasons: Counter[str] = Counter()
        candidates, total = self.cluster.candidates(fit, parsed,
                                                    self.pods.excluded.get(key, {}), reasons)
        return Context(resolved, parsed, [c for c in parsed if not c.allocated], reasons,
                       total, pod_policy(pod, self.settings.policy), candidates,
                       reasons.copy())

    async def _searched(self, key: Key, pod: JSON, attempt: Context, placing: Placing,
                        rotates: bool, started: float, outcome: ClusterOutcome, limit: Limit,
                        _: float) -> None:
        """A long search ended (kdra.operator.scheduler.searches): decide as ``_schedule``
        would have, taking a placement only if it still fits the snapshot as it is now."""
        seconds = time.perf_counter() - started
        metrics.observe_allocator(seconds)
        current = self.pending.get(key)
        if current is None or key in self.binding or current.get("spec", {}).get("nodeName"):
            return  # deleted, bound or being bound meanwhile
        if rotates:
            self._next_start = outcome.next_start
        try:
            result = await self._decide(key, pod, attempt, outcome, placing=placing,
                                        limit=limit, seconds=seconds)
        except Exception as exc:
            result = self._failed(key, exc)
        metrics.record_schedule_attempt(result, seconds)

    async def _decide(self, key: Key, pod: JSON, attempt: Context, outcome: ClusterOutcome,
                      *, placing: Placing | None = None, limit: Limit = "",
                      seconds: float = 0.0) -> str:
        """The allocator's outcome for the pod's unallocated claims → a placement, or why
        not. ``placing``: the search was long, so the snapshot may have moved on."""
        if outcome.fatal is not None:
            message = outcome.summary(attempt.total)
            metrics.record_unschedulable(outcome.fatal.code.value)
            await self.reporter.unschedulable(pod, message)
            return "unschedulable"
        rejected = outcome.reasons.values()
        attempt.reasons.update(reason.message for reason in rejected)
        for code, count in Counter(reason.code.value for reason in rejected).items():
            metrics.record_unschedulable(code, count)
        if outcome.exhausted and not outcome.placements:
            return await self._exhausted(key, pod, attempt, outcome, limit, seconds)
        return await self._choose(key, pod, attempt, outcome.placements, placing)

    async def _choose(self, key: Key, pod: JSON, attempt: Context,
                      placements: dict[str, Placement], placing: Placing | None = None) -> str:
        choice = best(placements, attempt.policy, [n.name for n in attempt.candidates])
        if choice is not None and placing is not None and not placing.still_fits(choice):
            # Devices or slices changed during the long search: start over from fresh state.
            self.queue.add(key, self.pending.get(key, pod))
            return "conflict"
        if choice is not None and attempt.unallocated:  # DeviceQuotas (scheduler.quota)
            choice, denial = self.quotas.admit(key[0], attempt.unallocated, choice, placements,
                                               lambda rest: best(rest, attempt.policy, [
                                                   n.name for n in attempt.candidates]),
                                               placing.still_fits if placing else None)
            if denial is not None:
                if self.pods.wait_for_releases(key):  # as a pod that fits nowhere (below)
                    return "releasing"
                self.preemption.refused(key)  # devices freed for it go to others
                await self.reporter.unschedulable(pod, denial.message, reason=QUOTA_REASON)
                return "over-quota"
        if choice is None and attempt.unallocated and self.pods.wait_for_releases(key):
            return "releasing"
        if choice is None:
            record_filtered(attempt.filtered)
            message = explain(attempt.reasons, attempt.total)
            preempting = await self.preemption.preempt(key, pod, attempt.unallocated,
                                                       attempt.candidates)
            await self.reporter.unschedulable(  # kube-scheduler's "<fit error> preemption: ..."
                pod, f"{message} preemption: {preempting}" if preempting else message)
            return "unschedulable"
        return self._reserve(key, pod, attempt.resolved, attempt.parsed, attempt.unallocated,
                             choice)

    async def _exhausted(self, key: Key, pod: JSON, attempt: Context, outcome: ClusterOutcome,
                         limit: Limit, seconds: float) -> str:
        """No placement found within the search budget: say so, and retry after a backoff
        (not on every cluster change: each attempt may cost the whole budget again)."""
        message = exhausted_message(self.settings.search, attempt, outcome, seconds)
        metrics.record_search_exhausted(limit or "node-steps")
        delay = self.pods.backoff(key)
        await self.reporter.unschedulable(pod, message, reason=SEARCH_EXHAUSTED, park=False)
        self.pods.retry_later(key, delay)
        return "exhausted"

    def _reserve(self, key: Key, pod: JSON, resolved: list[tuple[PodClaim, str, JSON]],
                 parsed: Sequence[ResourceClaim], unallocated: Sequence[ResourceClaim],
                 choice: Placement) -> str:
        """Assume the placement in the snapshot and hand the writes, the prepare wait and the
        binding to a task of the pod's own, so the loop goes on with the next pod at once."""
        results = dict(zip([c.key for c in unallocated], choice.results, strict=True))
        attempt = Attempt(pod, choice.node, [(entry, name) for entry, name, _ in resolved])
        for claim in unallocated:
            self.snapshot.assume(claim, results[claim.key])
            self.quotas.assume(claim, results[claim.key])
        for _, name, _ in resolved:
            self.pods.in_flight[(key[0], name)] = key
        self.binding[key] = attempt
        task = asyncio.create_task(self.writes.allocate_and_bind(key, attempt, resolved,
                                                                 parsed, results),
                                   name=f"bind-{key[0]}/{key[1]}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return "allocated"
