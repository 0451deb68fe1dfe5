"""Preemption for a whole gang: the cheapest set of lower-priority pods, across nodes, whose
eviction lets every pod of the gang fit at once — or no eviction at all.

:mod:`.gangs` calls :meth:`GangPreemption.preempt` when a gang's joint search found no
placement (and did not run out of budget). The victims are chosen by the single pod's
reprieve (:func:`kdra.operator.core.preemption.reprieve`), over the whole cluster instead of
one node, with each fit test a joint search of the gang (the search the gang was just refused
by) with the candidate victims' devices counted as free — all of them one
:class:`VictimSearch`, stepped beside the scheduling loop by the binder's runner of long
searches (:class:`~.searches.Searches`), as the gang's own search is; meanwhile the members
say so (:data:`CHOOSING`), and when it ends they are told what was done:

1. every *unit* of lower priority is a potential victim (:func:`~kdra.operator.core.
   preemption.gang_units`): a pod that holds devices, alone; a running gang, whole (all its
   bound members, and only when every one of them is less important than the preempting
   gang — evicting part of a gang would leave the rest holding devices and doing nothing);
2. the gang's joint search with every potential victim gone: no fit, no preemption (kdra never
   preempts for a gang that would still not fit);
3. the units are reprieved most important first (PodDisruptionBudget violators before the
   others): a unit stays when the gang still fits with the remaining victims gone — the
   victims left are minimal in kube-scheduler's sense (no unit could be reprieved alone).

Then, with the single pod's pieces (:class:`~.preemption.Preemption`): the quotas are checked
as for a pod (the gang's claims together, :meth:`Preemption.quota_denial`); the gang is
nominated under its own key (:func:`~.preemption.gang_key`): the freed devices and every
device of the placement that fit (free ones too: a smaller pod taking one meanwhile would
undo the fit) are held against every other pod of the same or lower priority, while its
members' own searches see them free. Each member's ``status.nominatedNodeName`` is written
with its node in the last fitting search, a ``Preempting`` event goes to the gang's oldest
member, each victim is evicted (Eviction API, uid precondition) with a ``Preempted`` event
naming the gang. Rounds and backoff are the gang's, as a pod's. Metrics:
``kdra_preemption_attempts_total`` with the results prefixed ``gang-`` (``gang-preempted``,
``gang-waiting``, ...), the victims in ``kdra_preemption_victims_total``.

Invariants:
- A gang never preempts when one of its members has ``preemptionPolicy: Never``, when
  evicting every lower-priority unit would still not let the whole gang fit, or when an
  unfinished search (budget or deadline) would have to decide — an unfinished search counts
  neither as "fits" nor as "does not fit".
- Only pods of lower priority than every member of the gang are victims; a running gang is
  evicted whole or not at all.
- Bounded: the fit tests of one decision spend at most ``settings.preemption.steps`` times
  the gang's members search steps and :data:`~.gangs.GANG_DEADLINE_CAP` seconds together, in
  the runner of long searches (one search at a time, at most half of the event loop); the
  scheduling loop never waits for them. A gang has at most one decision running.
- Nobody is evicted for a gang whose members are not all still pending when its decision
  ends.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field

from kdra.dra.allocator import DeviceId
from kdra.dra.allocator.gang import GangOutcome, GangSearch
from kdra.dra.allocator.gangplace import Pick
from kdra.dra.models import ResourceClaim
from kdra.kube.store import JSON, Key
from kdra.operator import metrics
from kdra.operator.core.preemption import (
    Hold,
    NodeVictims,
    Pod,
    Probe,
    Victims,
    can_preempt,
    gang_units,
    group_of,
    pod_priority,
    reprieve,
)
from kdra.operator.scheduler.preemption import Preemption, gang_key
from kdra.operator.scheduler.searches import Limit, Searches

log = logging.getLogger(__name__)

Start = Callable[[frozenset[DeviceId]], tuple[GangSearch[Pick], int]]
"""``freed devices → (the gang's joint search with them free, its step budget)``."""

Report = Callable[[str | None], Awaitable[None]]
"""Tell the gang's members how their preemption ended (a sentence, or None: nothing done)."""


def _runner_key(gang: Key) -> Key:
    """A gang's preemption decision in the runner of long searches: no pod's (a pod name has
    no ``/``), nor the gang's own search's."""
    return (gang[0], f"gang-preemption/{gang[1]}")


@dataclass
class Decision:
    """A :class:`VictimSearch`'s answer: the victims (None: no preemption), each member's
    node in the last joint search that fit and the devices it took there."""

    victims: Victims | None
    nodes: list[str] = field(default_factory=list)
    used: frozenset[DeviceId] = frozenset()
    exhausted: bool = False
    tests: int = 0


class VictimSearch:
    """The reprieve's fit tests (:func:`~kdra.operator.core.preemption.reprieve`), each a
    joint search of the gang, as one search in steps for the binder's runner of long searches
    (:class:`~.searches.Searches`): :meth:`advance` steps the current joint search and, when
    it ends, sends its answer to the reprieve and starts the next one. A joint search that
    runs out of its own budget ends the decision (``exhausted``: no preemption)."""

    def __init__(self, probe: Probe, start: Start) -> None:
        self._probe = probe
        self._start = start
        self._current: GangSearch[Pick] | None = None
        self._cap = 0
        self._spent = 0
        self._fitting: GangOutcome[Pick] | None = None
        self._outcome: Decision | None = None
        self.tests = 0
        try:
            self._current, self._cap = start(next(probe))
        except StopIteration as done:
            self._finish(done.value)

    @property
    def steps(self) -> int:
        return self._spent + (self._current.steps if self._current is not None else 0)

    def advance(self, steps: int | None) -> Decision | None:
        if self._outcome is not None:
            return self._outcome
        stop = None if steps is None else self.steps + steps
        while self._current is not None:
            current = self._current
            if stop is not None and self.steps >= stop:
                return None
            room = self._cap - current.steps
            outcome = current.advance(room if stop is None else max(1, min(room,
                                                                         stop - self.steps)))
            if outcome is None:
                if current.steps >= self._cap:
                    return self._finish(None, exhausted=True)
                continue
            if outcome.exhausted:
                return self._finish(None, exhausted=True)
            self.tests += 1
            self._spent += current.steps
            self._current = None
            fits = outcome.choices is not None
            if fits:
                self._fitting = outcome
            try:
                self._current, self._cap = self._start(self._probe.send(fits))
            except StopIteration as done:
                return self._finish(done.value)
        assert self._outcome is not None
        return self._outcome

    def give_up(self) -> Decision:
        if self._outcome is None:
            self._outcome = Decision(None, exhausted=True, tests=self.tests)
        return self._outcome

    def _finish(self, victims: Victims | None, *, exhausted: bool = False) -> Decision:
        self._current = None
        fitting = self._fitting
        if victims is None or fitting is None or fitting.choices is None:
            self._outcome = Decision(None, exhausted=exhausted, tests=self.tests)
        else:
            self._outcome = Decision(
                victims, [c.node for c in fitting.choices],
                frozenset(d for c in fitting.choices for d in c.devices
                          if isinstance(d, DeviceId)), tests=self.tests)
        return self._outcome


class GangPreemption:
    """A gang's preemption, on the single pod's state and writes (see the module doc)."""

    def __init__(self, preemption: Preemption, searches: Searches, *, deadline: float) -> None:
        self.preemption = preemption
        self.searches = searches
        self.deadline = deadline
        """Seconds all fit tests of one decision may take together."""

    async def preempt(self, gang: Key, members: Sequence[tuple[Key, JSON]],
                      claims: Sequence[ResourceClaim], nodes: Collection[str],
                      start: Start, report: Report, still: Callable[[], bool]) -> str | None:
        """The gang (``members``: its pending pods, oldest first; ``claims``: their
        unallocated claims; ``nodes``: their candidate nodes) fits nowhere: preempt for it
        if that helps. A sentence for the members' unschedulable report, or None. The
        victims are chosen beside the scheduling loop (:class:`VictimSearch` in the runner
        of long searches); ``report`` tells the members how it ended; ``still()``: the
        members are all still pending (else nobody is evicted)."""
        shared = self.preemption
        if not shared.settings.enabled or not claims or not members:
            return None
        pods = [pod for _, pod in members]
        if not all(can_preempt(pod) for pod in pods):
            metrics.record_preemption("gang-never")
            return None
        key = gang_key(*gang)
        first = pods[0]
        priority = min(pod_priority(pod) for pod in pods)
        if _runner_key(gang) in self.searches:
            metrics.record_preemption("gang-waiting")
            return CHOOSING
        blocked = await shared.blocked(key, first, claims, priority, "gang-")
        if blocked is not None:
            return blocked
        units = self._units(gang, priority, claims, nodes)
        if units is None:
            metrics.record_preemption("gang-no-candidates")
            return None
        found, holds, leaving = units
        search = VictimSearch(reprieve(found, holds, await shared.budgets(), leaving), start)
        self.searches.start(
            _runner_key(gang), search,
            functools.partial(self._decided, gang, list(members), claims, priority, report,
                              still),
            steps=shared.settings.steps * len(members), timeout=self.deadline)
        return CHOOSING

    def _units(self, gang: Key, priority: int, claims: Sequence[ResourceClaim],
               nodes: Collection[str]
               ) -> tuple[list[tuple[Pod, ...]], list[Hold], set[str]] | None:
        """The potential victims (units), the devices the pods concerned hold and the pods
        leaving anyway (UIDs), or None when no unit could free anything the gang may take."""
        shared = self.preemption
        if not shared.has_lower(priority):
            return None  # no bound pod of lower priority anywhere (the common case: cheap)
        reach = set(nodes)
        # At its quota, only the gang's own namespace's pods free what it may take.
        own_only = shared.quota_denial(gang[0], claims, ()) is not None
        bound = [p for p in shared.pods.values() if not own_only or p.namespace == gang[0]]
        # The pods on the gang's nodes, and the other members of their gangs (a victim gang
        # goes whole): nobody else can free anything the gang may take.
        touched = {group for p in bound if p.node in reach
                   and (group := group_of(p)) is not None}
        bound = [p for p in bound if p.node in reach or group_of(p) in touched]
        holds = shared.holds(bound)
        units = [unit for unit in gang_units(bound, priority, holds)
                 if any(p.node in reach for p in unit)]
        leaving = {p.uid for p in bound if p.leaving and p.node in reach}
        return (units, holds, leaving) if units else None

    async def _decided(self, gang: Key, members: list[tuple[Key, JSON]],
                       claims: Sequence[ResourceClaim], priority: int, report: Report,
                       still: Callable[[], bool], decision: Decision, limit: Limit,
                       seconds: float) -> None:
        """The decision ended: nominate the gang and evict its victims (if its members are
        all still pending and its quota admits it with them gone), and tell the members."""
        shared = self.preemption
        metrics.observe_preemption_decision(seconds)
        victims = decision.victims
        if victims is None or not still() or \
                shared.quota_denial(gang[0], claims, victims.pods) is not None:
            if decision.exhausted or limit:
                log.info("gang %s/%s: preemption search stopped after %d joint searches "
                         "(budget or deadline)", *gang, decision.tests)
            metrics.record_preemption("gang-no-candidates")
            await report(None)
            return
        where = ", ".join(sorted({v.node for v in victims.pods}))
        targets = [(member, node) for (member, _), node in zip(members, decision.nodes,
                                                                strict=True)]
        # Held: the freed devices and every device of the placement that fit — free ones
        # too, or a smaller pod could take one meanwhile and the gang would not fit again.
        await shared.nominate(gang_key(*gang), members[0][1],
                              NodeVictims(where, victims.pods, victims.pdb_violations,
                                          victims.freed | decision.used), targets, priority)
        metrics.record_preemption("gang-preempted")
        listed = ", ".join(v.ref for v in victims.pods)
        await report(f"preempting {len(victims.pods)} lower-priority pod(s) on "
                     f"{'nodes' if ', ' in where else 'node'} {where} ({listed}) for the "
                     "whole gang; their devices are held for it")


CHOOSING = "choosing lower-priority pods to preempt for the whole gang, across nodes"
"""What a gang's members say while its victims are being chosen."""


__all__ = ["CHOOSING", "Decision", "GangPreemption", "Report", "Start", "VictimSearch"]
