"""Pending pods and their scheduling attempts: the binder's bookkeeping of who is tried when.

:class:`PodQueue` orders the pods to try. :class:`PendingPods` holds each pending pod's
state between attempts — queued, parked (fits nowhere: waits for a change), waiting for a
claim, being bound (an :class:`Attempt` written, waiting for prepare + bind), its failed
attempts, the nodes it avoids, the releases it may wait for — and the rules that move a pod
back into the queue. :class:`Context` is one attempt of the loop, from the pod's claims to
its decision; :class:`Attempt` is a decision being written, prepared and bound.

Invariants:
- A pod is in the queue at most once; the loop skips a popped pod that is no longer pending
  or is being bound, so requeueing one is always safe.
- A parked pod is retried only when something may help it: :meth:`PendingPods.wake` after a
  change (changes arriving together wake the parked pods once, ``wake_delay`` later), and
  every ``flush_interval`` — never a busy retry loop.
- A pod whose writes fail is retried after a per-pod jittered backoff
  (:func:`kdra.kube.core.backoff.backoff_delay`) that grows with its consecutive failures; the
  count is reset once its claims are written, and forgotten with the pod.
- While claims whose pods are gone still hold devices (being released), a pod that fits
  nowhere waits for them, unreported, at most ``release_wait`` seconds from its first
  failed attempt; a release expected from a claim controller that never comes stops being
  waited for after ``release_wait`` too.
- The pods this binder bound are remembered (the last ``BOUND_REMEMBERED``): an unbound
  version of one is stale (a bound pod never comes unbound).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from kdra.dra.allocator import NodeInfo
from kdra.dra.models import ResourceClaim
from kdra.kube.core.backoff import backoff_delay
from kdra.kube.core.podclaims import PodClaim
from kdra.kube.store import JSON, Key, RecentSet, Store, key_of
from kdra.operator.core.claim_records import ClaimRecords
from kdra.operator.scheduler.settings import BinderSettings

BOUND_REMEMBERED = 4096
"""Pods bound by this binder whose stale, unbound versions are recognised (a watch event
lags the Binding by milliseconds; thousands is ample)."""


class PodQueue:
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
class Context:
    """One scheduling attempt of a pod, from its claims and node filters to the decision."""

    resolved: list[tuple[PodClaim, str, JSON]]  # pod claim entry, claim name, claim
    parsed: list[ResourceClaim]
    unallocated: list[ResourceClaim]
    reasons: Counter[str]  # why nodes were filtered or rejected → how many
    total: int  # nodes in the cluster
    policy: str
    candidates: list[NodeInfo]
    filtered: Counter[str]  # the node filters' rejections only (the allocator's: by code)


@dataclass
class Attempt:
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


class PendingPods:
    """The binder's pending pods and where each one stands (see the module doc). One
    scheduling loop and its tasks use it, on one event loop: no locks."""

    def __init__(self, settings: BinderSettings) -> None:
        self.settings = settings
        self.pending: dict[Key, JSON] = {}
        self.queue = PodQueue()
        self.parked: set[Key] = set()
        self.waiting_for_claim: dict[Key, set[Key]] = defaultdict(set)
        self.binding: dict[Key, Attempt] = {}
        self.in_flight: dict[Key, Key] = {}  # claim being written → the pod it is written for
        self.excluded: dict[Key, dict[str, float]] = defaultdict(dict)
        self.failures: dict[Key, int] = {}  # pod → consecutive failed attempts (backoff)
        # Claims whose every consumer is gone, until deallocated or deleted → when to stop
        # expecting that (the claim controller may be down); and per pod, until when it may
        # wait for such releases unreported.
        self.releasing: dict[Key, float] = {}
        self.release_deadline: dict[Key, float] = {}
        self.bound = RecentSet()  # UIDs this binder bound: their unbound versions are stale
        self.records = ClaimRecords()
        """Claim names the claim controller decided for pods not yet recorded on them: the
        loop resolves claims from here, the Binding writes the record
        (:mod:`kdra.operator.core.claim_records`); shared with the claim controller."""
        self._wake_handle: asyncio.TimerHandle | None = None

    def remember_bound(self, uid: str) -> None:
        self.bound.add(uid, BOUND_REMEMBERED)

    def forget(self, key: Key) -> None:
        """The pod is gone, bound or being deleted: it is pending no more, and its parking,
        avoided nodes, backoff and release wait are dropped."""
        if self.pending.pop(key, None) is not None:
            self.parked.discard(key)
            self.excluded.pop(key, None)
        self.failures.pop(key, None)
        self.release_deadline.pop(key, None)

    def claim_changed(self, claim_key: Key) -> None:
        """Requeue the pending pods that waited for the claim (unless being bound)."""
        for pod_key in self.waiting_for_claim.pop(claim_key, set()):
            pod = self.pending.get(pod_key)
            if pod is not None and pod_key not in self.binding:
                self.queue.add(pod_key, pod)

    # ------------------------------------------------------------------ retries

    def backoff(self, key: Key) -> float:
        """Count one more failure of the pod's; how long to wait before its next attempt."""
        failures = self.failures.get(key, 0) + 1
        self.failures[key] = failures
        return backoff_delay(failures, base=self.settings.retry_delay,
                             cap=self.settings.max_retry_delay, rand=random.random)

    def retry_later(self, key: Key, delay: float) -> None:
        def again() -> None:
            pod = self.pending.get(key)
            if pod is not None and key not in self.binding:
                self.queue.add(key, pod)

        asyncio.get_running_loop().call_later(delay, again)

    def wake(self) -> None:
        """Retry parked (unschedulable) pods soon; changes arriving together wake them once."""
        if self._wake_handle is not None or not self.parked:
            return
        loop = asyncio.get_running_loop()
        self._wake_handle = loop.call_later(self.settings.wake_delay, self.wake_now)

    def wake_now(self) -> None:
        self._wake_handle = None
        # Emptied in place, not replaced: the binder reads the same set (``Binder.parked``).
        for key in self.parked:
            pod = self.pending.get(key)
            if pod is not None:
                self.queue.add(key, pod)
        self.parked.clear()

    async def flush(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval)
            self.wake_now()

    # ------------------------------------------------------------------ releases

    def expect_releases(self, uid: str, claims: Store) -> None:
        """Pod ``uid`` is gone or done: allocated claims it alone reserved will be released
        by the claim controller shortly."""
        until = time.monotonic() + self.settings.release_wait
        for claim in claims.index("reserved", uid):
            status = claim.get("status") or {}
            if status.get("allocation") and all(
                    ref.get("uid") == uid for ref in status.get("reservedFor") or ()):
                self.releasing[key_of(claim)] = until

    def wait_for_releases(self, key: Key) -> bool:
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
            min(deadline, max(self.releasing.values())) - now, self.wake)
        return True
