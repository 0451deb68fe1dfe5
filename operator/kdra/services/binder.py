"""The binder: kdra's scheduler for pods with ``schedulerName: kdra-scheduler``.

One scheduling loop — the only writer of ``status.allocation`` — takes pending pods in
priority order and, for each: resolves its claims, filters nodes (unschedulable, taints,
node selector / required affinity, cpu / memory / pod count), runs the allocator over the
candidates, picks a node by policy (binpack, spread, first-fit) and writes each claim's
allocation and reservation. A separate task per pod then waits for the node agent to report
every allocated device Ready (**prepare before bind**), writes the per-container allocation
annotations the pod's env reads, and binds the pod through ``pods/binding``.

Invariants:
- Every claim write carries the cached object's resourceVersion: a concurrent change fails
  with Conflict, the attempt is rolled back (claims this attempt allocated are deallocated)
  and the pod is retried from fresh state ("allocated elsewhere in the meantime").
- An allocation is *assumed* in the allocator's snapshot before it is written, so the next pod
  never gets the same device while the write is in flight; the assumption is dropped once the
  written claim is in the cache, or when the write fails.
- A pod that fits nowhere gets a ``FailedScheduling`` event and a ``PodScheduled=False``
  condition saying why, node group by node group, and waits until slices, claims, classes or
  nodes change (or a periodic flush) — never a busy retry loop. While claims whose pods are
  gone still hold devices (being released), it first waits for those releases, unreported,
  for at most ``release_wait`` seconds from its first failed attempt.
- The snapshot follows the newest version of each claim the binder has seen (a write
  response, its own or the claim controller's, may be newer than a watch event that arrives
  after it): a stale event never shows a device free that a newer version holds.
- A prepare that fails or times out deallocates what this attempt allocated, emits an event,
  keeps the node out of that pod's candidates for a while, and retries elsewhere.
- A pod whose writes fail (API errors, the API server unreachable; its unschedulable
  condition included) is retried after a per-pod jittered backoff
  (:func:`kdra.domain.backoff.backoff_delay`), reset once its claims are written. Rolling
  back is best effort: a reservation it cannot undo is built upon by the pod's next attempt
  (or released by the claim controller once the pod is gone), so a failed roll-back never
  leaves the pod out of the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kdra import metrics
from kdra.domain.backoff import backoff_delay
from kdra.domain.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    FINALIZER,
    SCHEDULER_NAME,
    PodClaim,
    claim_statuses,
    clear_allocation,
    kdra_owned,
    owned_by,
    pod_claims,
    pod_ref,
    set_allocation,
)
from kdra.domain.scheduling import (
    SEARCH_EXHAUSTED,
    NodeView,
    PodFit,
    Resources,
    best,
    container_devices,
    explain,
    node_rejection,
    node_view,
    pod_policy,
    pod_requests,
    search_window,
)
from kdra.domain.untrusted import shorten
from kdra.dra.allocator import (
    ClusterOutcome,
    NodeInfo,
    Placement,
    Placing,
    Snapshot,
)
from kdra.dra.errors import InvalidObject
from kdra.dra.models import (
    AllocationResult,
    ResourceClaim,
    dump,
    parse_claim,
    parse_class,
    parse_slice,
)
from kdra.dra.taint_rules import parse_rule
from kdra.kube.client import KubeClient
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.resources import CLAIMS, PODS
from kdra.services.preemption import Preemption, PreemptionSettings
from kdra.services.quota import QUOTA_REASON, QuotaBook
from kdra.services.searches import Limit, SearchBudget, Searches
from kdra.services.store import JSON, Key, RecentSet, Store, is_older, key_of

log = logging.getLogger(__name__)
NO_RESOURCES = Resources()
BOUND_REMEMBERED = 4096
"""Pods bound by this binder whose stale, unbound versions are recognised (a watch event
lags the Binding by milliseconds; thousands is ample)."""

STRATEGIC_MERGE = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class BinderSettings:
    policy: str = "binpack"
    """Default placement policy: binpack, spread or first-fit (per pod: annotation
    ``resource.kdra.dev/placement-policy``)."""
    prepare_timeout: float = 120.0
    """Seconds to wait for the node agent to report allocated devices Ready before the
    allocation is undone and the pod retried elsewhere."""
    exclude_after_failure: float = 300.0
    """Seconds a node stays out of a pod's candidates after preparing on it failed."""
    flush_interval: float = 30.0
    """Unschedulable pods are retried at least this often, even without a cluster change."""
    wake_delay: float = 0.05
    """Seconds from a change that may help unschedulable pods (devices freed, a node or
    slice changed) to their retry: changes arriving together wake them once. Short, as the
    pods wait for it (in steady state on a full cluster, every new pod does)."""
    retry_delay: float = 1.0
    """Seconds before a pod whose writes failed is retried (jittered, doubling per failure
    of that pod, at most ``max_retry_delay``)."""
    max_retry_delay: float = 30.0
    """The longest wait before retrying a pod whose writes keep failing."""
    release_wait: float = 5.0
    """Seconds a pod that fits nowhere waits, unreported, while devices are being released
    (their claims' pods are gone and the claim controller has not yet deallocated them):
    in a full cluster a new pod often arrives just before its predecessor's devices are
    freed. After this, or once nothing is being released, it is reported unschedulable."""
    preemption: PreemptionSettings = field(default_factory=PreemptionSettings)
    """Priority preemption for pods that fit nowhere (kdra.services.preemption)."""
    search: SearchBudget = field(default_factory=SearchBudget)
    """How much searching one pod's attempt may do (steps, seconds, steps between yields);
    a pod that finds no placement within it is reported ``AllocationSearchExhausted`` and
    retried after a backoff (kdra.services.searches)."""


class _PodQueue:
    """Pending pods, highest priority first, then oldest; each key at most once."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, str, int, Key]] = []
        self._queued: set[Key] = set()
        self._counter = itertools.count()
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: Key, pod: JSON) -> None:
        if key in self._queued:
            return
        self._queued.add(key)
        priority = int(pod.get("spec", {}).get("priority") or 0)
        created = pod.get("metadata", {}).get("creationTimestamp") or ""
        heapq.heappush(self._heap, (-priority, created, next(self._counter), key))
        self._ready.set()

    async def pop(self) -> Key:
        while not self._heap:
            self._ready.clear()
            await self._ready.wait()
        *_, key = heapq.heappop(self._heap)
        self._queued.discard(key)
        return key


@dataclass
class _Context:
    """One scheduling attempt of a pod, from its claims and node filters to the decision."""

    resolved: list[tuple[PodClaim, str, JSON]]  # pod claim entry, claim name, claim
    parsed: list[ResourceClaim]
    unallocated: list[ResourceClaim]
    reasons: Counter[str]  # why nodes were filtered or rejected → how many
    total: int  # nodes in the cluster
    policy: str
    candidates: list[NodeInfo]
    filtered: Counter[str]  # the node filters' rejections only (the allocator's: by code)


class _Failure(NamedTuple):
    """Why an attempt's devices were not prepared; ``node_fault``: the node is to blame (so
    the pod avoids it for a while), not a race with another writer."""

    message: str
    node_fault: bool


@dataclass
class _Attempt:
    """One pod's allocation, written and waiting for prepare + bind."""

    pod: JSON
    node: str
    claims: list[tuple[PodClaim, str]]  # pod claim entry, claim name
    allocated_here: list[str] = field(default_factory=list)  # claim names this attempt allocated
    reserved_here: list[str] = field(default_factory=list)  # claims this attempt reserved
    # The allocation each claim had when this attempt wrote or built on it. The attempt binds
    # only on exactly these allocations, and undoes nothing once a claim's allocation differs
    # (another binder's work).
    expected: dict[str, JSON] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)


class Binder:
    def __init__(self, client: KubeClient, events: EventRecorder, *, claims: Store,
                 settings: BinderSettings | None = None) -> None:
        self.client = client
        self.events = events
        self.settings = settings or BinderSettings()
        self.claims = claims  # shared with the claim controller (raw dicts)
        self.nodes = Store("Node")
        self._views: list[NodeView] | None = None  # the nodes parsed for the filters, by name
        self._next_start = 0  # where the next spread search starts (kube-scheduler's rotation)
        self._parsed: dict[str, tuple[str, ResourceClaim]] = {}  # uid → (version, parsed)
        self.slices = Store("ResourceSlice", {"pool": lambda s: [
            f"{s['spec'].get('driver')}/{s['spec'].get('pool', {}).get('name')}"]})
        self.snapshot = Snapshot()
        self.quotas = QuotaBook(self.slices)  # DeviceQuotas and what claims hold (services.quota)
        self.pending: dict[Key, JSON] = {}
        self._bound = RecentSet()  # UIDs this binder bound: their unbound versions are stale
        self.usage: dict[str, dict[str, Resources]] = defaultdict(dict)  # node → pod uid → req
        self._pod_node: dict[str, str] = {}  # pod uid → the node its usage is counted on
        self.node_used: dict[str, Resources] = {}  # node → sum of its pods' requests
        self.queue = _PodQueue()
        self.parked: set[Key] = set()
        self.waiting_for_claim: dict[Key, set[Key]] = defaultdict(set)
        self.binding: dict[Key, _Attempt] = {}
        self.in_flight: dict[Key, Key] = {}  # claim being written → the pod it is written for
        self.excluded: dict[Key, dict[str, float]] = defaultdict(dict)
        self.failures: dict[Key, int] = {}  # pod → consecutive failed attempts (backoff)
        # Claims whose every consumer is gone, until deallocated or deleted → when to stop
        # expecting that (the claim controller may be down); and per pod, until when it may
        # wait for such releases unreported.
        self.releasing: dict[Key, float] = {}
        self.release_deadline: dict[Key, float] = {}
        self._claim_changed: dict[Key, asyncio.Event] = {}
        self._wake_handle: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._flush_task: asyncio.Task[None] | None = None
        self.preemption = Preemption(client, events, claims=claims, snapshot=self.snapshot,
                                     settings=self.settings.preemption)
        self.searches = Searches(  # long allocation searches
            self.settings.search,
            on_error=lambda key: self._retry_later(key, self._backoff(key)))

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
            self._snapshot_claim(claim)
        each(self.on_pod, pods)

    def start(self) -> None:
        self._loop_task = asyncio.create_task(self._run(), name="binder")
        self._flush_task = asyncio.create_task(self._flush(), name="binder-flush")

    async def stop(self) -> None:
        await self.searches.stop()
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
        if event_type == "DELETED":
            self._bound.discard(uid)
        elif is_older(pod, self.pending.get(key)):
            return  # a write response (the claim controller's) was handed over first
        elif not node and uid in self._bound:
            return  # from before this binder bound it (a bound pod never comes unbound)
        self.preemption.on_pod(event_type, pod)  # bound pods: potential victims
        phase = pod.get("status", {}).get("phase")
        gone = event_type == "DELETED" or phase in ("Succeeded", "Failed")
        if gone and uid:
            self._expect_releases(uid)
        # Resource usage of every pod on a node (kdra's or not) for the fit filter.
        previous = self._pod_node.pop(uid, None)
        if previous is not None:
            released = self.usage.get(previous, {}).pop(uid, None)
            if released is not None:
                self.node_used[previous] = self.node_used[previous] - released
            if not self.usage.get(previous):
                self.usage.pop(previous, None)
                self.node_used.pop(previous, None)
        if node and not gone:
            requests = pod_requests(pod)
            self.usage[node][uid] = requests
            self.node_used[node] = self.node_used.get(node, Resources()) + requests
            self._pod_node[uid] = node
        ours = pod.get("spec", {}).get("schedulerName") == SCHEDULER_NAME
        if not ours:
            return
        if gone or node or pod["metadata"].get("deletionTimestamp"):
            self.searches.cancel(key)
            if self.pending.pop(key, None) is not None:
                self.parked.discard(key)
                self.excluded.pop(key, None)
            self.failures.pop(key, None)
            self.release_deadline.pop(key, None)
            metrics.set_pending_pods(len(self.pending))
            if gone:
                self._wake()  # its devices may be released soon
            return
        self.pending[key] = pod
        metrics.set_pending_pods(len(self.pending))
        if key not in self.binding:
            self.parked.discard(key)
            self.queue.add(key, pod)

    def on_claim(self, event_type: str | None, claim: JSON) -> None:
        """Called after the shared claim store applied the event."""
        key = key_of(claim)
        before = self.snapshot.devices_in_use
        had, released = len(before), self.snapshot.releases
        if event_type == "DELETED":
            self.snapshot.remove_claim(f"{key[0]}/{key[1]}")
            self.quotas.remove(*key)
            self._parsed.pop(claim["metadata"].get("uid", ""), None)
            self.releasing.pop(key, None)
        else:
            newest = self.claims.newest(claim)
            if newest is None:
                return  # a late write response of a claim already deleted
            claim = newest
            self._snapshot_claim(claim)
            if not (claim.get("status") or {}).get("allocation"):
                self.releasing.pop(key, None)
        for pod_key in self.waiting_for_claim.pop(key, set()):
            pod = self.pending.get(pod_key)
            if pod is not None and pod_key not in self.binding:
                self.queue.add(pod_key, pod)
        event = self._claim_changed.pop(key, None)
        if event is not None:
            event.set()
        if (len(self.snapshot.devices_in_use) < had or event_type == "DELETED"
                or self.snapshot.releases > released):
            self._wake()  # devices (or shares of a device) were freed

    def on_node(self, event_type: str | None, node: JSON) -> None:
        self.nodes.apply(event_type, node)
        self._views = None
        self._wake()

    def _remember_bound(self, uid: str) -> None:
        self._bound.add(uid, BOUND_REMEMBERED)

    def _expect_releases(self, uid: str) -> None:
        """Pod ``uid`` is gone or done: allocated claims it alone reserved will be released
        by the claim controller shortly."""
        until = time.monotonic() + self.settings.release_wait
        for claim in self.claims.index("reserved", uid):
            status = claim.get("status") or {}
            if status.get("allocation") and all(
                    ref.get("uid") == uid for ref in status.get("reservedFor") or ()):
                self.releasing[key_of(claim)] = until

    def _wait_for_releases(self, key: Key) -> bool:
        """Whether the pod ``key``, which fits nowhere now, should wait unreported for the
        devices being released (see ``BinderSettings.release_wait``); if so it is parked and
        woken by the release, or at the end of its wait."""
        now = time.monotonic()
        for claim_key, until in list(self.releasing.items()):
            if until <= now:
                del self.releasing[claim_key]
        deadline = self.release_deadline.setdefault(key, now + self.settings.release_wait)
        if not self.releasing or deadline <= now:
            return False
        self.parked.add(key)
        asyncio.get_running_loop().call_later(
            min(deadline, max(self.releasing.values())) - now, self._wake)
        return True

    def _node_views(self) -> list[NodeView]:
        """The nodes, parsed for the filters and sorted by name; rebuilt after a node event."""
        if self._views is None:
            self._views = sorted((node_view(n) for n in self.nodes), key=lambda v: v.name)
        return self._views

    def on_slice(self, event_type: str | None, slice_: JSON) -> None:
        self.slices.apply(event_type, slice_)
        name = slice_["metadata"]["name"]
        if event_type == "DELETED":
            self.snapshot.remove_slice(name)
        else:
            try:
                self.snapshot.upsert_slice(parse_slice(slice_))
            except InvalidObject as exc:
                log.warning("ignoring invalid slice: %s", exc)
                self.snapshot.remove_slice(name)
        self._wake()

    def on_rule(self, event_type: str | None, rule: JSON) -> None:
        """A DeviceTaintRule: its taint applies to matching devices at the next attempt."""
        name = str(rule["metadata"]["name"])
        if event_type == "DELETED":
            self.snapshot.remove_rule(name)
        else:
            try:
                self.snapshot.upsert_rule(parse_rule(rule))
            except InvalidObject as exc:
                log.warning("ignoring invalid DeviceTaintRule: %s", exc)
                self.snapshot.remove_rule(name)
        self._wake()

    def on_quota(self, event_type: str | None, quota: JSON) -> None:
        """A DeviceQuota: pods it held back are retried (or held back) at the next attempt."""
        self.quotas.on_quota(event_type, quota)
        self._wake()

    def on_class(self, event_type: str | None, device_class: JSON) -> None:
        name = device_class["metadata"]["name"]
        if event_type == "DELETED":
            self.snapshot.remove_class(name)
        else:
            try:
                self.snapshot.upsert_class(parse_class(device_class))
            except InvalidObject as exc:
                log.warning("ignoring invalid device class: %s", exc)
                self.snapshot.remove_class(name)
        self._wake()

    def _parse(self, claim: JSON) -> ResourceClaim:
        """``parse_claim``, once per claim version (a version is parsed on its watch event,
        after the binder's own write, and per scheduling attempt otherwise)."""
        meta = claim["metadata"]
        uid, version = meta.get("uid", ""), meta.get("resourceVersion", "")
        cached = self._parsed.get(uid)
        if cached is not None and cached[0] == version and version:
            return cached[1]
        parsed = parse_claim(claim)
        self._parsed[uid] = (version, parsed)
        return parsed

    def _snapshot_claim(self, claim: JSON) -> None:
        try:
            parsed = self._parse(claim)
            self.snapshot.upsert_claim(parsed)
            self.quotas.observe(parsed)
        except InvalidObject as exc:
            log.warning("claim %s/%s not usable: %s", *key_of(claim), exc)

    def _wake(self) -> None:
        """Retry parked (unschedulable) pods soon; changes arriving together wake them once."""
        if self._wake_handle is not None or not self.parked:
            return
        loop = asyncio.get_running_loop()
        self._wake_handle = loop.call_later(self.settings.wake_delay, self._wake_now)

    def _wake_now(self) -> None:
        self._wake_handle = None
        parked, self.parked = self.parked, set()
        for key in parked:
            pod = self.pending.get(key)
            if pod is not None:
                self.queue.add(key, pod)

    async def _flush(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval)
            self._wake_now()

    # ------------------------------------------------------------------ the loop

    async def _run(self) -> None:
        while True:
            if self.searches:
                await asyncio.sleep(0)  # a long search takes its slice between two pods
            key = await self.queue.pop()
            pod = self.pending.get(key)
            if pod is None or key in self.binding or key in self.searches:
                continue
            started = time.perf_counter()
            try:
                result = await self._schedule(key, pod)
            except Exception as exc:
                delay = self._backoff(key)
                if isinstance(exc, (ApiError, OSError)):  # e.g. the API server restarting
                    log.warning("scheduling %s/%s failed (%s); retrying in %.1fs", *key, exc,
                                delay)
                else:
                    log.exception("scheduling %s/%s failed; retrying", *key)
                result = "error"
                self._retry_later(key, delay)
            metrics.record_schedule_attempt(result, time.perf_counter() - started)

    def _backoff(self, key: Key) -> float:
        """Count one more failure of the pod's; how long to wait before its next attempt."""
        failures = self.failures.get(key, 0) + 1
        self.failures[key] = failures
        return backoff_delay(failures, base=self.settings.retry_delay,
                             cap=self.settings.max_retry_delay, rand=random.random)

    def _retry_later(self, key: Key, delay: float) -> None:
        def again() -> None:
            pod = self.pending.get(key)
            if pod is not None and key not in self.binding:
                self.queue.add(key, pod)

        asyncio.get_running_loop().call_later(delay, again)

    async def _schedule(self, key: Key, pod: JSON) -> str:
        namespace = key[0]
        forged = sorted(k for k in kdra_owned(pod["metadata"].get("annotations"))
                        if k != CLAIM_STATUSES_ANNOTATION)
        if forged:
            # Only kdra writes these, in the Binding: an unbound pod carrying them was given
            # them by someone else (its env would read devices it does not hold).
            more = f" (and {len(forged) - 1} more)" if len(forged) > 1 else ""
            await self._unschedulable(pod, f"annotation {shorten(forged[0], 100)}{more} is "
                                      "written by kdra only, when it binds the pod; delete the "
                                      "pod and create it without it", reason="InvalidPod")
            return "invalid"
        try:
            entries = pod_claims(pod)
        except InvalidObject:
            self.parked.add(key)  # the claim controller reports the bad annotation
            return "invalid"
        recorded = claim_statuses(pod)
        uid = pod["metadata"]["uid"]
        resolved: list[tuple[PodClaim, str, JSON]] = []
        for entry in entries:
            # A generated claim only once the pod's claim-statuses annotation names it: two
            # claim controllers (two active operators) may each have generated one, and the
            # annotation decides which one is the pod's.
            name = entry.resource_claim_name or recorded.get(entry.name)
            raw = self.claims.get((namespace, name)) if name else None
            if name is None or raw is None:
                if name:
                    self.waiting_for_claim[(namespace, name)].add(key)
                log.debug("pod %s/%s waits for claim %s", *key, name or entry.name)
                return "waiting"  # the pod or claim event re-enqueues it
            if entry.generated and not owned_by(raw, uid):
                # Upstream's IsForPod: a generated claim serves only the pod that owns it.
                # The claim controller records the pod's own claim; its write wakes the pod.
                await self._unschedulable(pod, f"claim {name!r} recorded for entry "
                                          f"{entry.name!r} belongs to another pod; waiting for "
                                          "the pod's own claim")
                return "unschedulable"
            owner = self.in_flight.get((namespace, name))
            if owner is not None and owner != key:
                # Another pod's allocation of this (shared) claim is being written: wait for
                # it, then build on what it wrote (upstream: "claim in flight").
                self.waiting_for_claim[(namespace, name)].add(key)
                return "waiting"
            if raw["metadata"].get("deletionTimestamp"):
                await self._unschedulable(pod, f"claim {name!r} is being deleted")
                return "unschedulable"
            resolved.append((entry, name, raw))
        try:
            parsed = [self._parse(raw) for _, _, raw in resolved]
        except InvalidObject as exc:
            await self._unschedulable(pod, f"invalid claim: {exc}")
            return "unschedulable"
        for claim in parsed:
            reserved = claim.status.reserved_for
            if claim.allocated and not any(r.uid == uid for r in reserved) \
                    and len(reserved) >= 32:
                await self._unschedulable(pod, f"claim {claim.metadata.name!r} is already "
                                          "reserved for 32 consumers")
                return "unschedulable"

        try:
            fit = PodFit.of(pod)
        except InvalidObject as exc:
            await self._unschedulable(pod, f"invalid pod: {exc}")
            return "unschedulable"
        reasons: Counter[str] = Counter()
        candidates: list[NodeInfo] = []
        excluded = self.excluded.get(key, {})
        now = time.monotonic()
        nodes = self._node_views()
        for node in nodes:
            if excluded.get(node.name, 0) > now:
                reasons["node(s) failed to prepare this pod's devices recently"] += 1
                continue
            why = node_rejection(fit, node, self.node_used.get(node.name, NO_RESOURCES),
                                 parsed)
            if why is not None:
                reasons[why] += 1
                continue
            candidates.append(node.info)

        attempt = _Context(resolved, parsed, [c for c in parsed if not c.allocated], reasons,
                           len(nodes), pod_policy(pod, self.settings.policy), candidates,
                           reasons.copy())
        if attempt.unallocated and candidates:
            window = search_window(attempt.policy, len(candidates), self._next_start)
            started = time.perf_counter()
            placing = Placing(self.snapshot, attempt.unallocated, candidates,
                              in_flight=self.preemption.reserved_against(key, pod),
                              limit=window.limit, start=window.start,
                              node_steps=self.settings.search.node_steps(len(candidates)),
                              scoring=attempt.policy != "first-fit")
            outcome = placing.advance(self.settings.search.slice)
            if outcome is None:  # a long search: on beside the loop (kdra.services.searches)
                self.searches.start(key, placing, functools.partial(
                    self._searched, key, pod, attempt, placing, window.rotates, started))
                return "searching"
            metrics.observe_allocator(time.perf_counter() - started)
            if window.rotates:
                self._next_start = outcome.next_start
            return await self._decide(key, pod, attempt, outcome)
        placements = {n.name: Placement(n.name, (), [], {}) for n in candidates}
        return await self._choose(key, pod, attempt, placements)

    async def _searched(self, key: Key, pod: JSON, attempt: _Context, placing: Placing,
                        rotates: bool, started: float, outcome: ClusterOutcome, limit: Limit,
                        _: float) -> None:
        """A long search ended (kdra.services.searches): decide as ``_schedule`` would have,
        taking a placement only if it still fits the snapshot as it is now."""
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
            delay = self._backoff(key)
            if isinstance(exc, (ApiError, OSError)):
                log.warning("scheduling %s/%s failed (%s); retrying in %.1fs", *key, exc, delay)
            else:
                log.exception("scheduling %s/%s failed; retrying", *key)
            result = "error"
            self._retry_later(key, delay)
        metrics.record_schedule_attempt(result, seconds)

    async def _decide(self, key: Key, pod: JSON, attempt: _Context, outcome: ClusterOutcome,
                      *, placing: Placing | None = None, limit: Limit = "",
                      seconds: float = 0.0) -> str:
        """The allocator's outcome for the pod's unallocated claims → a placement, or why
        not. ``placing``: the search was long, so the snapshot may have moved on."""
        if outcome.fatal is not None:
            message = outcome.summary(attempt.total)
            metrics.record_unschedulable(outcome.fatal.code.value)
            await self._unschedulable(pod, message)
            return "unschedulable"
        rejected = outcome.reasons.values()
        attempt.reasons.update(reason.message for reason in rejected)
        for code, count in Counter(reason.code.value for reason in rejected).items():
            metrics.record_unschedulable(code, count)
        if outcome.exhausted and not outcome.placements:
            return await self._exhausted(key, pod, attempt, outcome, limit, seconds)
        return await self._choose(key, pod, attempt, outcome.placements, placing)

    async def _choose(self, key: Key, pod: JSON, attempt: _Context,
                      placements: dict[str, Placement], placing: Placing | None = None) -> str:
        choice = best(placements, attempt.policy, [n.name for n in attempt.candidates])
        if choice is not None and placing is not None and not placing.still_fits(choice):
            # Devices or slices changed during the long search: start over from fresh state.
            self.queue.add(key, self.pending.get(key, pod))
            return "conflict"
        if choice is not None and attempt.unallocated:  # DeviceQuotas (kdra.services.quota)
            choice, denial = self.quotas.admit(key[0], attempt.unallocated, choice, placements,
                                               lambda rest: best(rest, attempt.policy, [
                                                   n.name for n in attempt.candidates]),
                                               placing.still_fits if placing else None)
            if denial is not None:
                if self._wait_for_releases(key):  # as a pod that fits nowhere (below)
                    return "releasing"
                await self._unschedulable(pod, denial.message, reason=QUOTA_REASON)
                return "over-quota"
        if choice is None and attempt.unallocated and self._wait_for_releases(key):
            return "releasing"
        if choice is None:
            for message, count in attempt.filtered.items():
                metrics.record_unschedulable(_reason_label(message), count)
            message = explain(attempt.reasons, attempt.total)
            preempting = await self.preemption.preempt(key, pod, attempt.unallocated,
                                                       attempt.candidates)
            await self._unschedulable(pod, f"{message}; {preempting}" if preempting else message)
            return "unschedulable"
        return self._reserve(key, pod, attempt.resolved, attempt.parsed, attempt.unallocated,
                             choice)

    async def _exhausted(self, key: Key, pod: JSON, attempt: _Context, outcome: ClusterOutcome,
                         limit: Limit, seconds: float) -> str:
        """No placement found within the search budget: say so, and retry after a backoff
        (not on every cluster change: each attempt may cost the whole budget again)."""
        budget = self.settings.search
        claims = ", ".join(repr(claim.metadata.name) for claim in attempt.unallocated)
        spent = (f"{outcome.steps} steps in {seconds:.1f}s" if seconds
                 else f"{outcome.steps} steps")
        message = (f"allocation search for claims {claims} exhausted its budget "
                   f"({budget.steps} steps, "
                   f"{budget.node_steps(len(attempt.candidates))} per node, "
                   f"{budget.timeout:g}s; spent {spent}) without finding a placement; "
                   f"retrying later. {explain(attempt.reasons, attempt.total)}")
        metrics.record_search_exhausted(limit or "node-steps")
        delay = self._backoff(key)
        await self._unschedulable(pod, message, reason=SEARCH_EXHAUSTED, park=False)
        self._retry_later(key, delay)
        return "exhausted"

    # ------------------------------------------------------------------ writes

    def _reserve(self, key: Key, pod: JSON, resolved: list[tuple[PodClaim, str, JSON]],
                 parsed: Sequence[ResourceClaim], unallocated: Sequence[ResourceClaim],
                 choice: Placement) -> str:
        """Assume the placement in the snapshot and hand the writes, the prepare wait and the
        binding to a task of the pod's own, so the loop goes on with the next pod at once."""
        results = dict(zip([c.key for c in unallocated], choice.results, strict=True))
        attempt = _Attempt(pod, choice.node, [(entry, name) for entry, name, _ in resolved])
        for claim in unallocated:
            self.snapshot.assume(claim, results[claim.key])
            self.quotas.assume(claim, results[claim.key])
        for _, name, _ in resolved:
            self.in_flight[(key[0], name)] = key
        self.binding[key] = attempt
        task = asyncio.create_task(self._allocate_and_bind(key, attempt, resolved, parsed,
                                                           results),
                                   name=f"bind-{key[0]}/{key[1]}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return "allocated"

    async def _allocate_and_bind(self, key: Key, attempt: _Attempt,
                                 resolved: list[tuple[PodClaim, str, JSON]],
                                 parsed: Sequence[ResourceClaim],
                                 results: dict[str, AllocationResult]) -> None:
        pod = attempt.pod
        written = False
        try:
            for (_, name, raw), claim in zip(resolved, parsed, strict=True):
                result = results.get(claim.key)
                if result is None and any(r.uid == pod["metadata"]["uid"]
                                          for r in claim.status.reserved_for):
                    attempt.expected[name] = (raw.get("status") or {}).get("allocation") or {}
                    continue
                written_claim = await self._write_claim(raw, pod, result)
                attempt.expected[name] = written_claim["status"]["allocation"]
                attempt.reserved_here.append(name)
                if result is not None:
                    attempt.allocated_here.append(name)
            written = True
            self.failures.pop(key, None)
        except (Conflict, NotFound) as exc:
            log.info("pod %s/%s: claim changed while allocating (%s); retrying", *key, exc)
            metrics.record_schedule_attempt("conflict", 0.0)
            await self._roll_back(attempt)
        except ApiError as exc:
            metrics.record_schedule_attempt("error", 0.0)
            await self._roll_back(attempt)
            await self.events.warn(pod, "FailedScheduling", f"writing the allocation failed: "
                                   f"{exc.message}")
            await asyncio.sleep(self._backoff(key))
        except OSError as exc:  # the API server is unreachable (Unreachable)
            log.warning("pod %s/%s: writing the allocation failed (%s); retrying", *key, exc)
            metrics.record_schedule_attempt("error", 0.0)
            await self._roll_back(attempt)
            await asyncio.sleep(self._backoff(key))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("allocating for %s/%s failed", *key)
            await self._roll_back(attempt)
            await asyncio.sleep(self._backoff(key))
        finally:
            for key_ in results:
                self.snapshot.forget(key_)
                self.quotas.forget(key_)
            for _, name, _ in resolved:
                claim_key = (key[0], name)
                if self.in_flight.get(claim_key) == key:
                    del self.in_flight[claim_key]
                for waiting in self.waiting_for_claim.pop(claim_key, set()):
                    waiting_pod = self.pending.get(waiting)
                    if waiting_pod is not None:
                        self.queue.add(waiting, waiting_pod)
            if not written:  # whatever happened (even in a handler above): back in the queue
                self.binding.pop(key, None)
                current = self.pending.get(key)
                if current is not None:
                    self.queue.add(key, current)
        if written:
            await self._prepare_and_bind(key, attempt)

    async def _write_claim(self, raw: JSON, pod: JSON, result: AllocationResult | None) -> JSON:
        """Add the finalizer (if missing), then allocation (if new) + reservation; returns
        the claim as written."""
        meta = raw["metadata"]
        body = raw
        if FINALIZER not in (meta.get("finalizers") or []):
            body = await self.client.patch(CLAIMS, meta["name"], {"metadata": {
                "resourceVersion": meta["resourceVersion"],
                "finalizers": [*(meta.get("finalizers") or []), FINALIZER],
            }}, meta["namespace"])
            if result is not None and (body.get("status") or {}).get("allocation"):
                raise Conflict(409, "Conflict", "allocated elsewhere in the meantime")
        # Shallow copies: only top-level status keys are replaced, nothing nested is mutated.
        status = dict(body.get("status") or {})
        body = {**body, "status": status}
        if result is not None:
            set_allocation(status, dump(result))
        status["reservedFor"] = [*(status.get("reservedFor") or []), pod_ref(pod)]
        updated = await self.client.replace_status(CLAIMS, body)
        self.claims.upsert(updated)
        self._snapshot_claim(updated)
        if result is not None:
            metrics.observe_claim_allocated(updated)
        return updated

    async def _roll_back(self, attempt: _Attempt, *, every_claim: bool = False) -> None:
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
        and its devices are not Ready (see ``_roll_back``); re-reads and retries on Conflict
        (5 tries)."""
        for _ in range(5):
            raw = self.claims.get((namespace, name))
            if raw is None:
                return
            status = raw.get("status") or {}
            if status.get("allocation") != expected or _prepared(raw) is True:
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
            try:
                updated = await self.client.replace_status(CLAIMS, body)
            except Conflict:
                try:
                    fresh = await self.client.get(CLAIMS, name, namespace)
                except NotFound:
                    return
                self.claims.upsert(fresh)
                continue
            except NotFound:
                return
            self.claims.upsert(updated)
            self._snapshot_claim(updated)
            return

    # ------------------------------------------------------------------ prepare + bind

    async def _prepare_and_bind(self, key: Key, attempt: _Attempt) -> None:
        pod, node = attempt.pod, attempt.node
        namespace = pod["metadata"]["namespace"]
        try:
            failure = await self._wait_prepared(namespace, attempt)
            if failure is not None:
                await self._roll_back(attempt, every_claim=True)
                # Not the node's fault (DeviceBusy: another claim got the device first, e.g.
                # a second binder's; the claim changed under us): avoid the node only briefly.
                hold = self.settings.exclude_after_failure if failure.node_fault else 5.0
                self.excluded[key][node] = time.monotonic() + hold
                await self.events.warn(pod, "FailedPrepare", f"devices on node {node!r} were "
                                       f"not prepared: {failure.message}; trying another node")
                metrics.record_schedule_attempt("prepare-failed", 0.0)
                return
            try:
                # The devices annotation travels in the Binding: the API server copies a
                # Binding's annotations onto the pod in the same update that sets nodeName,
                # so a kubelet never sees the pod bound without it (and it costs no write).
                await self.client.bind(namespace, pod["metadata"]["name"],
                                       pod["metadata"]["uid"], node,
                                       annotations=self._annotations(pod, attempt))
            except NotFound:
                await self._roll_back(attempt)
                return
            except Conflict:
                pass  # already bound (e.g. a previous attempt's bind went through)
            # Bound: not pending any more, though the watch event saying so may still be on
            # its way (requeueing the unbound copy would schedule it again, only to be told
            # 409 by the API server).
            self._remember_bound(pod["metadata"]["uid"])
            if self.pending.pop(key, None) is not None:
                metrics.set_pending_pods(len(self.pending))
            metrics.observe_scheduled(pod, time.monotonic() - attempt.started)
            await self.events.normal(pod, "Scheduled", f"Successfully assigned {namespace}/"
                                     f"{pod['metadata']['name']} to {node} with devices "
                                     f"{', '.join(self._devices(namespace, attempt)) or 'none'}")
        except asyncio.CancelledError:
            raise
        except ApiError as exc:  # e.g. the namespace is being deleted
            log.warning("binding %s/%s to %s failed: %s", *key, node, exc)
            await self._roll_back(attempt)
        except Exception:
            log.exception("binding %s/%s to %s failed", *key, node)
            await self._roll_back(attempt)
        finally:
            self.binding.pop(key, None)
            current = self.pending.get(key)
            if current is not None and not current.get("spec", {}).get("nodeName"):
                self.queue.add(key, current)

    async def _wait_prepared(self, namespace: str, attempt: _Attempt) -> _Failure | None:
        """None once every allocated device is Ready; else why not (failure or timeout)."""
        deadline = attempt.started + self.settings.prepare_timeout
        uid = attempt.pod["metadata"]["uid"]
        for _, name in attempt.claims:
            key = (namespace, name)
            while True:
                raw = self.claims.get(key)
                if raw is None:
                    return _Failure(f"claim {name!r} was deleted", node_fault=False)
                status = raw.get("status") or {}
                if status.get("allocation") != attempt.expected.get(name) or not any(
                        r.get("uid") == uid for r in status.get("reservedFor") or []):
                    return _Failure(f"claim {name!r} was released or allocated anew by another "
                                    "writer meanwhile", node_fault=False)
                state = _prepared(raw)
                if state is True:
                    break
                if isinstance(state, str):
                    return _Failure(state, node_fault="DeviceBusy" not in state)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return _Failure(f"timed out after {self.settings.prepare_timeout:.0f}s "
                                    "waiting for the node agent to report the devices of claim "
                                    f"{name!r} Ready", node_fault=True)
                event = self._claim_changed.setdefault(key, asyncio.Event())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), timeout=min(remaining, 5.0))
        return None

    def _annotations(self, pod: JSON, attempt: _Attempt) -> dict[str, str]:
        """The per-container devices annotations for the pod (kdra.domain.scheduling)."""
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
                uuid = self._attribute(driver, pool, device, "uuid")
                if uuid:
                    uuids[(driver, pool, device)] = uuid
        return container_devices(pod, [e for e, _ in attempt.claims], results, uuids)

    def _attribute(self, driver: str, pool: str, device: str, name: str) -> str | None:
        for slice_ in self.slices.index("pool", f"{driver}/{pool}"):
            for dev in slice_["spec"].get("devices") or []:
                if dev.get("name") == device:
                    attrs = dev.get("attributes") or {}
                    value = attrs.get(name) or attrs.get(f"{driver}/{name}") or {}
                    string = value.get("string")
                    return str(string) if string is not None else None
        return None

    def _devices(self, namespace: str, attempt: _Attempt) -> list[str]:
        out = []
        for _, name in attempt.claims:
            raw = self.claims.get((namespace, name)) or {}
            allocation = (raw.get("status") or {}).get("allocation") or {}
            for r in (allocation.get("devices") or {}).get("results") or []:
                out.append(f"{r['pool']}/{r['device']}")
        return out

    # ------------------------------------------------------------------ reporting

    async def _unschedulable(self, pod: JSON, message: str, *, reason: str = "Unschedulable",
                             park: bool = True) -> None:
        """Report the pod unschedulable (condition + event); ``park``: wait for a change in
        the cluster before the next attempt."""
        key = key_of(pod)
        if park:
            self.parked.add(key)
        log.info("pod %s/%s is unschedulable: %s", *key, message)
        condition = {"type": "PodScheduled", "status": "False", "reason": reason,
                     "message": message}
        current = next((c for c in pod.get("status", {}).get("conditions") or []
                        if c.get("type") == "PodScheduled"), None)
        if current is None or current.get("message") != message or \
                current.get("reason") != reason:
            try:
                updated = await self.client.patch(
                    PODS, pod["metadata"]["name"], {"status": {"conditions": [condition]}},
                    pod["metadata"]["namespace"], subresource="status",
                    content_type=STRATEGIC_MERGE)
                if key in self.pending:
                    self.pending[key] = updated
            except ApiError as exc:
                if exc.status == 429 or exc.status >= 500:
                    raise  # the server is busy or restarting: the pod is retried (backoff)
                log.debug("condition on %s/%s not written: %s", *key, exc)
        await self.events.warn(pod, "FailedScheduling", message)


def _prepared(raw: JSON) -> bool | str | None:
    """True: every allocated device has Ready=True; a string: a device reported failure;
    None: still waiting."""
    status = raw.get("status") or {}
    allocation = status.get("allocation")
    if not allocation:
        return "the claim was deallocated"
    devices = {(d.get("driver"), d.get("pool"), d.get("device")): d
               for d in status.get("devices") or []}
    for result in (allocation.get("devices") or {}).get("results") or []:
        entry = devices.get((result["driver"], result["pool"], result["device"]))
        if entry is None:
            return None
        ready = next((c for c in entry.get("conditions") or [] if c.get("type") == "Ready"),
                     None)
        if ready is None:
            return None
        if ready.get("status") == "False":
            return (f"device {result['pool']}/{result['device']}: {ready.get('reason', '')} "
                    f"{ready.get('message', '')}").strip()
        if ready.get("status") != "True":
            return None
    return True


def _reason_label(message: str) -> str:
    """A fixed metric label for a node-filter message."""
    for label, words in (("taint", "taint"), ("unschedulable", "unschedulable"),
                         ("affinity", "affinity"), ("resources", "Insufficient"),
                         ("resources", "Too many pods"), ("prepare-failed", "prepare"),
                         ("claim-node-selector", "node selector")):
        if words in message:
            return label
    return "other"

