"""Gangs in the binder: a group of pods gets all its devices at once, or none.

The binder hands a pod labelled ``scheduling.x-k8s.io/pod-group`` (kdra.operator.core.gangs)
to :meth:`Gangs.schedule` instead of placing it alone. Once ``minMember`` pods of the gang are
pending, it resolves every member's claims and candidate nodes as for a single pod
(``Binder._context``), then searches a placement for all of them together
(:func:`kdra.dra.allocator.gangplace.gang_search`: backtracking across the pods, one
:class:`~kdra.dra.allocator.Placing` per pod over the devices the earlier pods left, within
the scope of the gang's ``matchAttribute`` / ``topologyKey`` / spread). Only when every member
has a placement is anything assumed; then :mod:`.gang_writes` writes every claim, waits for
every prepare and binds every pod.

Invariants:
- Nothing of a gang is assumed, written or bound unless the whole gang has a placement;
  a gang that does not fit holds no device (every member is reported, parked until the
  cluster changes).
- The gang's search budget is its members' (steps: the pod budget times the members;
  time: the pod deadline times the members, at most ``GANG_DEADLINE_CAP``). One slice runs
  inline; a search that needs more goes on beside the scheduling loop in the binder's runner
  of long searches (:mod:`.searches`: one long search at a time, at most half the event loop),
  so a tenant's gang never holds the loop — the pods queued behind it are scheduled
  meanwhile. While it searches, its members are in :attr:`Gangs.searching` (the loop skips
  them) and no second search of the gang starts; members that arrived meanwhile are queued
  again when it ends.
- A placement found during a search that yielded is taken only if every member's placement
  still fits the snapshot as it is then (``Placing.still_fits``).
- DeviceQuotas are checked for the gang as a whole: each member is admitted with the
  members before it assumed; one denial and nothing of the gang is kept.
- A gang whose last attempt failed is not searched again until the snapshot, the nodes or
  its members changed (its other members, popped meanwhile, are parked at once).
- A gang that fits nowhere (the search finished) may preempt lower-priority pods as a whole
  (:mod:`.gang_preemption`); the devices it freed are held for it, and its members' searches
  see them free.
- Pods without the label never reach this module (one label lookup in the loop).
- Its bookkeeping is bounded: past ``REMEMBERED`` gangs, those with no pending member are
  forgotten.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable

from kdra.dra.allocator import DeviceId, Snapshot
from kdra.dra.allocator.gang import GangOutcome, GangSearch
from kdra.dra.allocator.gangplace import GangPod, Pick, gang_search
from kdra.dra.errors import InvalidObject
from kdra.kube.store import JSON, Key, key_of
from kdra.operator import metrics
from kdra.operator.core.gangs import (
    GangSpec,
    PodGroupSize,
    agreed,
    gang_of,
    gang_spec,
    pod_group,
)
from kdra.operator.scheduler.cluster import ClusterView
from kdra.operator.scheduler.gang_preemption import GangPreemption
from kdra.operator.scheduler.gang_writes import GangMember, GangWrites
from kdra.operator.scheduler.pending import Attempt, Context, PendingPods
from kdra.operator.scheduler.preemption import gang_key
from kdra.operator.scheduler.quota import QUOTA_REASON
from kdra.operator.scheduler.reporting import Reporter
from kdra.operator.scheduler.searches import Limit, Searches
from kdra.operator.scheduler.settings import BinderSettings

log = logging.getLogger(__name__)

GANG_DEADLINE_CAP = 60.0
"""The most seconds one gang's search may take, however many members it has."""

REMEMBERED = 1024
"""Gangs whose bookkeeping (first attempt, last failure) is kept before the gangs with no
pending member are forgotten."""

ContextOf = Callable[[Key, JSON], Awaitable[Context | str]]
Reserved = Callable[[Key, JSON], frozenset[DeviceId]]


class Gangs:
    """The binder's gang placement (see the module doc)."""

    def __init__(self, *, cluster: ClusterView, pods: PendingPods, reporter: Reporter,
                 writes: GangWrites, settings: BinderSettings, context: ContextOf,
                 reserved: Reserved, searches: Searches,
                 preemption: GangPreemption | None = None) -> None:
        self.cluster = cluster
        self.snapshot: Snapshot = cluster.snapshot
        self.pods = pods
        self.reporter = reporter
        self.writes = writes
        self.settings = settings
        self.context = context
        self.reserved = reserved
        self.preemption = preemption
        """Preemption for a gang that fits nowhere (kdra.operator.scheduler.gang_preemption)."""
        self.failed: dict[Key, tuple[int, int, frozenset[Key]]] = {}
        """Gang → the state its last failed attempt saw (snapshot version, node list,
        members)."""
        self.first_seen: dict[Key, float] = {}  # gang → when a member was first tried
        self.searches = searches
        self.searching: dict[Key, frozenset[Key]] = {}
        """Gang → its members whose joint search runs beside the loop."""
        self.groups: dict[Key, PodGroupSize] = {}
        """PodGroup objects (namespace, name) → the gang size they declare, or why not."""

    def on_pod_group(self, event_type: str | None, obj: JSON) -> None:
        """A PodGroup: the gang of its name is tried again with its size."""
        key = key_of(obj)
        if event_type == "DELETED":
            self.groups.pop(key, None)
        else:
            size = pod_group(obj)
            if self.groups.get(key) == size:
                return  # its status changed (another scheduler's), not what kdra reads
            self.groups[key] = size
        self.failed.pop(key, None)
        for member in self.members(*key):
            if (pod := self.pods.pending.get(member)) is not None:
                self.pods.parked.discard(member)
                self.pods.queue.add(member, pod)

    def busy(self, key: Key) -> bool:
        """Pod ``key``'s gang is searching with it (the loop skips it meanwhile)."""
        return bool(self.searching) and any(key in members for members in self.searching.values())

    def members(self, namespace: str, name: str) -> list[Key]:
        """The gang's pending pods, oldest first (their keys)."""
        found = [(pod["metadata"].get("creationTimestamp") or "", key)
                 for key, pod in self.pods.pending.items()
                 if key[0] == namespace and gang_of(pod) == name]
        return [key for _, key in sorted(found)]

    async def schedule(self, key: Key, pod: JSON) -> str:
        """Try the gang of pod ``key``; the attempt's result (``metrics`` schedule result)."""
        name = gang_of(pod)
        assert name is not None
        gang = (key[0], name)
        members = self.members(*gang)
        if any(m in self.pods.binding for m in members):
            return "waiting"  # the gang is being written: its members wait for it
        if gang in self.searching:
            return "searching"  # queued again when the search ends
        try:
            group = self.groups.get(gang)
            spec = agreed(s for m in members
                          if (s := gang_spec(self.pods.pending[m], group)))
        except InvalidObject as exc:
            for member in members:
                if (other := self.pods.pending.get(member)) is not None:
                    await self.reporter.unschedulable(other, str(exc), reason="InvalidPod")
            return "invalid"
        if len(self.first_seen) > REMEMBERED or len(self.failed) > REMEMBERED:
            self._prune()
        self.first_seen.setdefault(gang, time.monotonic())
        if len(members) < spec.min_member:
            await self.reporter.unschedulable(
                pod, f"gang {name!r} waits for its pods: {len(members)} of "
                f"{spec.min_member} (minMember) pending; nothing is allocated until all are")
            metrics.record_gang_attempt("waiting")
            return "waiting"
        state = (self.snapshot.version, id(self.cluster.node_views()), frozenset(members))
        if self.failed.get(gang) == state:
            self.pods.parked.add(key)  # reported with the gang's last attempt
            return "unschedulable"
        contexts: list[Context] = []
        for member in members:
            current = self.pods.pending.get(member)
            if current is None:  # deleted meanwhile: the next attempt sees the gang as it is
                self.pods.queue.add(key, pod)
                return "conflict"
            context = await self.context(member, current)
            if isinstance(context, str):  # reported for that member; it is retried alone
                self.pods.parked.add(key)
                return "waiting"
            contexts.append(context)
        claims = [c.key for context in contexts for c in context.unallocated]
        if len(set(claims)) != len(claims):
            message = (f"gang {name!r}: two of its pods share a claim that is not allocated "
                       "yet; give each pod its own claims (a template) or allocate the shared "
                       "claim first")
            for member in members:
                if (other := self.pods.pending.get(member)) is not None:
                    await self.reporter.unschedulable(other, message)
            return "unschedulable"
        search, steps, timeout = self._search(members, contexts, spec)
        outcome = search.advance(self.settings.search.slice)
        if outcome is None:  # a long search: on beside the loop (scheduler.searches)
            self.searching[gang] = frozenset(members)
            self.searches.start(
                _search_key(gang), search,
                functools.partial(self._searched, gang, members, contexts, spec, state),
                steps=steps, timeout=timeout,
                on_error=functools.partial(self._search_failed, gang))
            return "searching"
        return await self._decide(gang, members, contexts, spec, outcome, state)

    async def _searched(self, gang: Key, members: list[Key], contexts: list[Context],
                        spec: GangSpec, state: tuple[int, int, frozenset[Key]],
                        outcome: GangOutcome[Pick], limit: Limit, seconds: float) -> None:
        """The gang's long search ended: decide as :meth:`schedule` would have (a placement
        is taken only if it still fits the snapshot as it is now), then queue the members
        that arrived meanwhile."""
        started = time.perf_counter()
        try:
            result = await self._decide(gang, members, contexts, spec, outcome, state)
        except Exception:
            log.exception("deciding gang %s/%s failed; retrying", *gang)
            result = "error"
            for member in members:
                if member in self.pods.pending and member not in self.pods.binding:
                    self.pods.retry_later(member, self.pods.backoff(member))
        finally:
            self._requeue_others(gang)
        metrics.record_schedule_attempt(result, seconds + time.perf_counter() - started)

    def _search_failed(self, gang: Key, _: Key) -> None:
        """The gang's search raised (a bug, logged by the runner): retry its members."""
        members = self.searching.get(gang, frozenset())
        self._requeue_others(gang)
        for member in members:
            if member in self.pods.pending:
                self.pods.retry_later(member, self.pods.backoff(member))

    def _requeue_others(self, gang: Key) -> None:
        """The gang searches no more: queue its pending members that were not part of the
        search (they arrived, or were popped and skipped, meanwhile)."""
        searched = self.searching.pop(gang, frozenset())
        for member in self.members(*gang):
            if member not in searched and member not in self.pods.binding:
                self.pods.queue.add(member, self.pods.pending[member])

    def _prune(self) -> None:
        """Forget gangs with no pending member (deleted, or bound whole)."""
        live = {(key[0], name) for key, pod in self.pods.pending.items()
                if (name := gang_of(pod)) is not None}
        for book in (self.first_seen, self.failed):
            for gang in [g for g in book if g not in live]:
                del book[gang]

    # ------------------------------------------------------------------ search

    def _search(self, members: list[Key], contexts: list[Context], spec: GangSpec,
                freed: frozenset[DeviceId] = frozenset()
                ) -> tuple[GangSearch[Pick], int, float]:
        """The gang's joint search, with its budget: (search, steps, seconds). ``freed``:
        devices in use counted as free (preemption's what-if)."""
        budget = self.settings.search
        steps = budget.steps * len(members)
        timeout = min(budget.timeout * len(members), GANG_DEADLINE_CAP)
        search = gang_search(
            self.snapshot, [GangPod(c.unallocated, c.candidates,
                                    self.reserved(m, self.pods.pending.get(m, {})),
                                    c.policy != "first-fit")
                            for m, c in zip(members, contexts, strict=True)],
            steps=steps, match_attribute=spec.match_attribute,
            topology_key=spec.topology_key, spread=spec.spread,
            node_steps=budget.node_steps, freed=freed)
        return search, steps, timeout

    def _what_if(self, members: list[Key], contexts: list[Context], spec: GangSpec,
                 freed: frozenset[DeviceId]) -> tuple[GangSearch[Pick], int]:
        """A preemption's fit test: the gang's joint search with ``freed`` devices free, and
        its step budget."""
        search, steps, _ = self._search(members, contexts, spec, freed)
        return search, steps

    async def _preempted(self, members: list[Key], message: str, sentence: str | None) -> None:
        """The gang's preemption decision ended: its members say what was done."""
        for member in members:
            pod = self.pods.pending.get(member)
            if pod is not None and member not in self.pods.binding:
                await self.reporter.unschedulable(
                    pod, f"{message} preemption: {sentence}" if sentence else message)

    def _all_pending(self, members: list[Key]) -> bool:
        return all(m in self.pods.pending and m not in self.pods.binding for m in members)

    # ------------------------------------------------------------------ decide

    async def _decide(self, gang: Key, members: list[Key], contexts: list[Context],
                      spec: GangSpec, outcome: GangOutcome[Pick],
                      state: tuple[int, int, frozenset[Key]]) -> str:
        name = gang[1]
        if outcome.choices is None:
            where = f" (in {outcome.nearest_scope.label})" if outcome.nearest_scope \
                and outcome.nearest_scope.label else ""
            budget = " before the search budget ran out" if outcome.exhausted else ""
            scope_note = ""
            if (spec.match_attribute or spec.topology_key) and not outcome.nearest_scope:
                scope_note = "; no device or node has the constraint's attribute or label"
            message = (f"gang {name!r} needs {spec.describe()} ({len(members)} pending) placed "
                       f"together: at most {outcome.nearest} of them fit at once{where}"
                       f"{budget}{scope_note}; nothing is allocated until all fit")
            verdict = "exhausted" if outcome.exhausted else "unschedulable"
            metrics.record_gang_attempt(verdict)
            if not outcome.exhausted and self.preemption is not None:
                preempting = await self.preemption.preempt(
                    gang, [(m, p) for m in members if (p := self.pods.pending.get(m))],
                    [c for context in contexts for c in context.unallocated],
                    {n.name for context in contexts for n in context.candidates},
                    functools.partial(self._what_if, members, contexts, spec),
                    functools.partial(self._preempted, members, message),
                    functools.partial(self._all_pending, members))
                if preempting:  # kube-scheduler's "<fit error> preemption: ..."
                    message = f"{message} preemption: {preempting}"
            if not outcome.exhausted:
                self.failed[gang] = state
            for member in members:
                pod = self.pods.pending.get(member)
                if pod is not None:
                    await self.reporter.unschedulable(pod, message, park=not outcome.exhausted)
            if outcome.exhausted:
                for member in members:
                    self.pods.retry_later(member, self.pods.backoff(member))
            return verdict
        picks = [choice.payload for choice in outcome.choices]
        gone = any(m not in self.pods.pending or m in self.pods.binding for m in members)
        if gone or any(p.placing is not None and not p.placing.still_fits(p.placement)
                       for p in picks):
            # A member was deleted (or bound) during the search, or the devices changed:
            # start over from the state as it is now.
            metrics.record_gang_attempt("conflict")
            for member in members:
                pod = self.pods.pending.get(member)
                if pod is not None and member not in self.pods.binding:
                    self.pods.queue.add(member, pod)
            return "conflict"
        results = [dict(zip([c.key for c in context.unallocated], pick.placement.results,
                            strict=True)) for context, pick in zip(contexts, picks, strict=True)]
        denial = None
        assumed: list[str] = []
        for member, context, pick, result in zip(members, contexts, picks, results,
                                                 strict=True):
            if context.unallocated:
                _, denial = self.cluster.quotas.admit(member[0], context.unallocated,
                                                      pick.placement, {}, lambda rest: None)
            if denial is not None:
                break
            for claim in context.unallocated:
                self.snapshot.assume(claim, result[claim.key])
                self.cluster.quotas.assume(claim, result[claim.key])
                assumed.append(claim.key)
        if denial is not None:
            if self.preemption is not None:  # devices freed for the gang go to others
                self.preemption.preemption.refused(gang_key(*gang))
            for claim_key in assumed:
                self.snapshot.forget(claim_key)
                self.cluster.quotas.forget(claim_key)
            metrics.record_gang_attempt("over-quota")
            for member in members:
                pod = self.pods.pending.get(member)
                if pod is not None:
                    await self.reporter.unschedulable(
                        pod, f"gang {name!r} as a whole: {denial.message}",
                        reason=QUOTA_REASON)
            return "over-quota"
        batch: list[GangMember] = []
        for member, context, pick, result in zip(members, contexts, picks, results,
                                                 strict=True):
            pod = self.pods.pending[member]
            attempt = Attempt(pod, pick.placement.node,
                              [(entry, claim) for entry, claim, _ in context.resolved])
            for _, claim_name, _ in context.resolved:
                self.pods.in_flight[(member[0], claim_name)] = member
            self.pods.binding[member] = attempt
            batch.append(GangMember(member, attempt, context.resolved, context.parsed, result))
        self.failed.pop(gang, None)
        waited = time.monotonic() - self.first_seen.pop(gang, time.monotonic())
        metrics.record_gang_attempt("placed")
        metrics.observe_gang_wait(waited)
        self.writes.start(gang, batch)
        return "allocated"


def _search_key(gang: Key) -> Key:
    """The gang's key in the runner of long searches: no pod's (a pod name has no ``/``)."""
    return (gang[0], f"gang/{gang[1]}")


__all__ = ["GANG_DEADLINE_CAP", "Gangs"]
