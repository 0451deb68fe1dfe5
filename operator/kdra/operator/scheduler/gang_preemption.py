"""Preemption for a whole gang: the cheapest set of lower-priority pods, across nodes, whose
eviction lets every pod of the gang fit at once — or no eviction at all.

:mod:`.gangs` calls :meth:`GangPreemption.preempt` when a gang's joint search found no
placement (and did not run out of budget). The victims are chosen by the single pod's
reprieve (:func:`kdra.operator.core.preemption.reprieve`), over the whole cluster instead of
one node, with each fit test a joint search of the gang (the search the gang was just refused
by, :meth:`Gangs.search <kdra.operator.scheduler.gangs.Gangs.search>`) with the candidate
victims' devices counted as free:

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
  the gang's members search steps and :data:`~.gangs.GANG_DEADLINE_CAP` seconds together;
  each search yields to the event loop between slices.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence

from kdra.dra.allocator import DeviceId
from kdra.dra.allocator.gang import GangOutcome
from kdra.dra.allocator.gangplace import Pick
from kdra.dra.models import ResourceClaim
from kdra.kube.store import JSON, Key
from kdra.operator import metrics
from kdra.operator.core.preemption import (
    NodeVictims,
    Victims,
    can_preempt,
    gang_units,
    group_of,
    pod_priority,
    reprieve,
)
from kdra.operator.scheduler.preemption import Preemption, gang_key

log = logging.getLogger(__name__)

WhatIf = Callable[[frozenset[DeviceId], int, float], Awaitable[GangOutcome[Pick]]]
"""``(freed devices, steps, deadline) → the gang's joint search outcome`` with those devices
free (``exhausted`` when the steps or the monotonic deadline ran out)."""


class GangPreemption:
    """A gang's preemption, on the single pod's state and writes (see the module doc)."""

    def __init__(self, preemption: Preemption, *, deadline: float) -> None:
        self.preemption = preemption
        self.deadline = deadline
        """Seconds all fit tests of one decision may take together."""

    async def preempt(self, gang: Key, members: Sequence[tuple[Key, JSON]],
                      claims: Sequence[ResourceClaim], nodes: Collection[str],
                      search: WhatIf) -> str | None:
        """The gang (``members``: its pending pods, oldest first; ``claims``: their
        unallocated claims; ``nodes``: their candidate nodes) fits nowhere: preempt for it
        if that helps. A sentence for the members' unschedulable report, or None."""
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
        blocked = await shared.blocked(key, first, claims, priority, "gang-")
        if blocked is not None:
            return blocked
        started = time.perf_counter()
        decided = await self._decide(gang, priority, claims, nodes, len(members), search)
        metrics.observe_preemption_decision(time.perf_counter() - started)
        if decided is None:
            metrics.record_preemption("gang-no-candidates")
            return None
        victims, placed, used = decided
        where = ", ".join(sorted({v.node for v in victims.pods}))
        targets = [(member, node) for (member, _), node in zip(members, placed, strict=True)]
        # Held: the freed devices and every device of the placement that fit — free ones
        # too, or a smaller pod could take one meanwhile and the gang would not fit again.
        await shared.nominate(key, first, NodeVictims(where, victims.pods,
                                                      victims.pdb_violations,
                                                      victims.freed | used), targets,
                              priority)
        metrics.record_preemption("gang-preempted")
        listed = ", ".join(v.ref for v in victims.pods)
        return (f"preempting {len(victims.pods)} lower-priority pod(s) on "
                f"{'nodes' if ', ' in where else 'node'} {where} ({listed}) for the whole "
                "gang; their devices are held for it")

    async def _decide(self, gang: Key, priority: int, claims: Sequence[ResourceClaim],
                      nodes: Collection[str], size: int, search: WhatIf
                      ) -> tuple[Victims, list[str], frozenset[DeviceId]] | None:
        """The victims, each member's node in the last search that fit and the devices it
        took, or None."""
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
        leaving = [p for p in bound if p.leaving and p.node in reach]
        holds = shared.holds(bound)
        units = [unit for unit in gang_units(bound, priority, holds)
                 if any(p.node in reach for p in unit)]
        if not units:
            return None
        budget = shared.settings.steps * size
        deadline = time.monotonic() + self.deadline
        probe = reprieve(units, holds, await shared.budgets(), {p.uid for p in leaving})
        fitting: GangOutcome[Pick] | None = None
        tests = 0
        try:
            freed = next(probe)
            while True:
                outcome = await search(freed, budget, deadline)
                budget -= outcome.steps
                tests += 1
                if outcome.exhausted or budget <= 0:
                    log.info("gang %s/%s: preemption search stopped after %d joint searches "
                             "(budget or deadline)", *gang, tests)
                    return None
                if outcome.choices is not None:
                    fitting = outcome
                freed = probe.send(outcome.choices is not None)
        except StopIteration as done:
            victims: Victims | None = done.value
        if victims is None or fitting is None or fitting.choices is None:
            return None
        if shared.quota_denial(gang[0], claims, victims.pods) is not None:
            return None
        used = frozenset(d for c in fitting.choices for d in c.devices
                         if isinstance(d, DeviceId))
        return victims, [choice.node for choice in fitting.choices], used


__all__ = ["GangPreemption", "WhatIf"]
