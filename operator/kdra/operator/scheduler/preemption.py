"""Priority preemption in the binder: when a pod with claims fits nowhere, evict the fewest,
least important lower-priority pods on one node whose devices let it fit, nominate that node
for it, and hold the freed devices for it.

The binder calls :meth:`Preemption.preempt` when a pod's unallocated claims fit no candidate
node, and searches every pod's placement with :meth:`Preemption.reserved_against` as devices
in use. The victims are chosen by :mod:`kdra.operator.core.preemption` (kube-scheduler's rules: the
node with the fewest PodDisruptionBudget violations, then the lowest victims), with fit tests
by the allocator's own search (:class:`~kdra.dra.allocator.probe.FitProbe`). Then:

1. the preemptor's ``status.nominatedNodeName`` is set (best effort: the hold below is what
   keeps the devices; the field tells users and tools);
2. each victim is evicted through the Eviction API (``policy/v1``; a PodDisruptionBudget that
   blocks — 429 — is retried at the preemptor's next attempts, at most every :data:`RETRY`
   seconds), with a ``Preempted`` event on the victim naming the preemptor and a
   ``Preempting`` event on the preemptor naming the node and the victims;
3. the freed devices are *held*: while the nomination lasts, every other pod of the same or
   lower priority is searched with them in use, so only the preemptor (or a more important
   pod) can take them once the victims' claims are released.

A pod preempts only when the other checks would admit it once the devices are free: its
namespace's DeviceQuotas must not refuse even the least any allocation of its claims costs,
counting what the victims of its own namespace free (:meth:`QuotaBook.least_denial
<kdra.operator.scheduler.quota.QuotaBook.least_denial>`); a refusal of the full check after the
victims are gone (:meth:`Preemption.refused`) ends the nomination. And the evictions per
preemptor are bounded: a pod whose nomination ended without it being bound preempts again
only after a backoff (:attr:`PreemptionSettings.backoff`, doubling), and at most
:attr:`PreemptionSettings.max_rounds` times — a tenant's pod that something keeps refusing
cannot evict other tenants' pods again and again (issue 36).

A gang (:mod:`.gang_preemption`) uses the same state and writes under its own key
(:func:`gang_key`): one nomination for the whole gang, whose held devices its members' own
searches see free, and that ends when one of them is bound.

Invariants:
- A pod with ``preemptionPolicy: Never`` never preempts; a pod never preempts for a node where
  it would still not fit; only pods of lower priority that hold devices are victims (kdra
  allocates devices only: CPU, memory and pod count are not freed by preemption).
- A pod over its quota (as above) never preempts; a pod preempts at most ``max_rounds``
  times without being bound, each round after the previous one's backoff.
- One nomination per pod: while its victims are terminating (or their devices being
  released) the pod waits instead of preempting again. A nomination ends when the pod is
  bound or gone, after :attr:`PreemptionSettings.hold` seconds, or when its victims are gone
  and their claims released but the pod still fits nowhere (it may then preempt anew).
- Bounded: the fit tests of one decision share the binder's search step budget, and at most
  :attr:`PreemptionSettings.max_candidates` candidate nodes are evaluated in full (as
  kube-scheduler samples candidates).
- API failures never stop the binder's loop: a failed eviction is retried later, a failed
  PodDisruptionBudget list counts as no budgets (logged), a failed nominatedNodeName write is
  logged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from kdra.dra.allocator import DeviceId, NodeInfo, Snapshot
from kdra.dra.allocator.probe import FitProbe, OutOfSteps
from kdra.dra.allocator.reasons import Unallocatable
from kdra.dra.models import ResourceClaim
from kdra.dra.quota import Denial
from kdra.kube.client import KubeClient
from kdra.kube.errors import ApiError, NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.resources import PODS, Resource
from kdra.kube.store import JSON, Key, Store, key_of
from kdra.operator import metrics
from kdra.operator.core.gangs import gang_of
from kdra.operator.core.preemption import (
    Budget,
    Hold,
    NodeVictims,
    Pod,
    can_preempt,
    hold_of,
    pick_node,
    pod_of,
    pod_priority,
    select_victims,
)
from kdra.operator.scheduler.quota import QuotaBook

log = logging.getLogger(__name__)

PDBS = Resource("policy", "v1", "poddisruptionbudgets", True, "PodDisruptionBudget")
RETRY = 5.0
"""Seconds before an eviction that failed (a PodDisruptionBudget, 429) is tried again."""
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
BUDGETS_TTL = 2.0
"""Seconds a list of PodDisruptionBudgets is reused (their status changes as pods come and go:
a budget read a moment ago is as good as the disruption controller's own lag)."""


@dataclass(frozen=True)
class PreemptionSettings:
    enabled: bool = True
    """Whether pods that fit nowhere may preempt lower-priority pods."""
    hold: float = 120.0
    """Seconds a nomination (and the hold on the victims' devices) lasts at most."""
    max_candidates: int = 100
    """Candidate nodes evaluated in full per decision (kube-scheduler: at least 100, or 10%
    of the nodes); the best of them is taken."""
    steps: int = 1_000_000
    """Search steps all fit tests of one decision may spend together."""
    max_rounds: int = 3
    """Nominations one pod may make without being bound; past them it waits as if its
    ``preemptionPolicy`` were Never (until it is created again)."""
    backoff: float = 30.0
    """Seconds before a pod whose nomination ended without it being bound may preempt
    again; doubled after each such round."""


@dataclass
class _Nomination:
    node: str
    priority: int
    victims: dict[str, Pod]  # uid → victim
    devices: frozenset[DeviceId]
    until: float
    tried: dict[str, float] = field(default_factory=dict)  # victim uid → last eviction attempt


@dataclass
class _Rounds:
    """A pod's preemptions that did not (yet) get it bound."""

    uid: str
    count: int = 0
    not_before: float = 0.0  # monotonic time before which it does not preempt again


GANG_PREFIX = "pod-group:"
"""A gang's key in the books of nominations and rounds: ``(namespace, "pod-group:<name>")``,
never a pod's (a pod name has no colon)."""


def gang_key(namespace: str, name: str) -> Key:
    """The key gang ``name``'s nomination and rounds are kept under."""
    return (namespace, GANG_PREFIX + name)


def _by(key: Key) -> str:
    """The preemptor, for events and logs: a pod ``ns/name`` or a gang ``gang ns/name``."""
    if key[1].startswith(GANG_PREFIX):
        return f"gang {key[0]}/{key[1][len(GANG_PREFIX):]}"
    return f"{key[0]}/{key[1]}"


def _for(key: Key) -> str:
    return f" for {_by(key)}" if key[1].startswith(GANG_PREFIX) else ""


def _nodes(nodes: str, *, quoted: bool = False) -> str:
    """``node 'a'`` (one node) or ``nodes a, b`` (a gang's: joined with ", ")."""
    if ", " in nodes:
        return f"nodes {nodes}"
    return f"node {nodes!r}" if quoted else f"node {nodes}"


class Preemption:
    """The binder's preemption (see the module doc). ``snapshot`` and ``claims`` are the
    binder's."""

    def __init__(self, client: KubeClient, events: EventRecorder, *, claims: Store,
                 snapshot: Snapshot, settings: PreemptionSettings | None = None,
                 quotas: QuotaBook | None = None) -> None:
        self.client = client
        self.events = events
        self.claims = claims
        self.snapshot = snapshot
        self.settings = settings or PreemptionSettings()
        self.quotas = quotas
        self.rounds: dict[Key, _Rounds] = {}  # pods that preempted and are not bound yet
        self.pods: dict[str, Pod] = {}  # uid → bound, not finished pod
        self.on_node: dict[str, set[str]] = defaultdict(set)  # node → pod uids
        self._priorities: Counter[int] = Counter()  # priority → bound pods with it
        self.nominations: dict[Key, _Nomination] = {}
        self._budget_cache: tuple[float, list[Budget]] | None = None  # (when listed, budgets)

    # ------------------------------------------------------------------ inputs

    def on_pod(self, event_type: str | None, pod: JSON) -> None:
        """Every pod event the binder sees (bound pods of any scheduler may hold claims)."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        old = self.pods.pop(uid, None)
        if old is not None:
            self._priorities[old.priority] -= 1
            if not self._priorities[old.priority]:
                del self._priorities[old.priority]
            self.on_node[old.node].discard(uid)
            if not self.on_node[old.node]:
                del self.on_node[old.node]
        node = (pod.get("spec") or {}).get("nodeName")
        done = event_type == "DELETED" or (pod.get("status") or {}).get("phase") in (
            "Succeeded", "Failed")
        if node and not done:
            self.pods[uid] = current = pod_of(pod)
            self.on_node[str(node)].add(uid)
            self._priorities[current.priority] += 1
        if node or done:
            keys = [key_of(pod)]
            if node and (group := gang_of(pod)) is not None:  # the gang is placed
                keys.append(gang_key(str(meta.get("namespace", "")), group))
            for ended in keys:
                self.rounds.pop(ended, None)
                if self.nominations.pop(ended, None) is not None:
                    metrics.set_nominated_pods(len(self.nominations))

    def reserved_against(self, key: Key, pod: JSON) -> frozenset[DeviceId]:
        """Devices held for other nominated pods (or gangs) at least as important as
        ``pod``: in use for ``pod``'s search (a gang's members share their gang's)."""
        if not self.nominations:
            return frozenset()
        now = time.monotonic()
        priority = pod_priority(pod)
        own = gang_key(key[0], group) if (group := gang_of(pod)) is not None else None
        held: set[DeviceId] = set()
        for other, nomination in self.nominations.items():
            if other != key and other != own and nomination.until > now \
                    and nomination.priority >= priority:
                held.update(nomination.devices)
        return frozenset(held)

    # ------------------------------------------------------------------ decision

    async def preempt(self, key: Key, pod: JSON, claims: Sequence[ResourceClaim],
                      nodes: Sequence[NodeInfo]) -> str | None:
        """The pod fits none of ``nodes``: preempt for it if that helps. Returns a sentence
        for the pod's unschedulable report (what preemption did or waits for), or None."""
        if not self.settings.enabled or not claims:
            return None
        if not can_preempt(pod):
            metrics.record_preemption("never")
            return None
        blocked = await self.blocked(key, pod, claims, pod_priority(pod))
        if blocked is not None:
            return blocked
        started = time.perf_counter()
        choice = await self._decide(key, pod, claims, nodes)
        metrics.observe_preemption_decision(time.perf_counter() - started)
        if choice is None:
            metrics.record_preemption("no-candidates")
            return None
        await self.nominate(key, pod, choice)
        metrics.record_preemption("preempted")
        victims = ", ".join(v.ref for v in choice.victims)
        return (f"preempting {len(choice.victims)} lower-priority pod(s) on node "
                f"{choice.node!r} ({victims}); its devices are held for this pod")

    async def blocked(self, key: Key, pod: JSON, claims: Sequence[ResourceClaim],
                      priority: int, result: str = "") -> str | None:
        """Why the pod (or gang: ``key`` its :func:`gang_key`, ``pod`` its oldest member)
        does not look for victims now — it waits for its nomination, backs off, or its quota
        refuses it anyway —, counted with the ``result`` prefix; None: it may."""
        waiting = await self.nominated(key, pod)
        if waiting is not None:
            metrics.record_preemption(f"{result}waiting")
            return waiting
        held_back = self.held_back(key, str(pod["metadata"].get("uid", "")))
        if held_back is not None:
            metrics.record_preemption(f"{result}held-back")
            return held_back
        denial = self.quota_denial(key[0], claims, self.lower(key[0], priority))
        if denial is not None:
            metrics.record_preemption(f"{result}over-quota")
            return (f"not preempting: {denial.message} (evicting lower-priority pods would "
                    "not change that)")
        return None

    async def _decide(self, key: Key, pod: JSON, claims: Sequence[ResourceClaim],
                      nodes: Sequence[NodeInfo]) -> NodeVictims | None:
        priority = pod_priority(pod)
        if not self.has_lower(priority):
            return None  # no bound pod of lower priority anywhere (the common case: cheap)
        lower = [n for n in nodes if any(
            (p := self.pods.get(uid)) is not None and p.priority < priority and not p.leaving
            for uid in self.on_node.get(n.name, ()))]
        if not lower:
            return None
        try:
            probe = FitProbe(self.snapshot, claims, reserved=self.reserved_against(key, pod),
                             steps=self.settings.steps)
        except Unallocatable:
            return None  # the binder reports the bad input
        budgets = await self.budgets()
        # At its quota, only the pod's own namespace's pods free what it may take: others'
        # are no victims then (their devices would go to someone else).
        own_only = self.quota_denial(key[0], claims, ()) is not None
        options: list[NodeVictims] = []
        for node in lower:
            pods = [p for uid in sorted(self.on_node.get(node.name, ()))
                    if (p := self.pods[uid]).namespace == key[0] or p.leaving or not own_only]
            holds = self.holds(pods)
            try:
                option = select_victims(node.name, priority, pods, holds, budgets,
                                        functools.partial(probe.fits, node))
            except OutOfSteps:
                log.info("pod %s/%s: preemption search stopped after %d steps (%d nodes "
                         "evaluated)", *key, probe.spent, len(options))
                break
            if option is not None:
                options.append(option)
                if len(options) >= self.settings.max_candidates:
                    break
            await asyncio.sleep(0)  # one node's searches at a time: watches and webhooks go on
        # The quotas, with exactly what each option's victims free (of the pod's namespace).
        return pick_node(o for o in options
                         if self.quota_denial(key[0], claims, o.victims) is None)

    # ------------------------------------------------------------------ bounds

    def has_lower(self, priority: int) -> bool:
        """Whether some bound pod has a lower priority."""
        return bool(self._priorities) and min(self._priorities) < priority

    def holds(self, pods: Iterable[Pod]) -> list[Hold]:
        """The devices the claims reserved for ``pods`` hold."""
        return [h for h in (hold_of(c) for p in pods
                            for c in self.claims.index("reserved", p.uid)) if h]

    def lower(self, namespace: str, priority: int) -> Iterator[Pod]:
        """Bound pods of ``namespace`` that preemption could free: lower priority, or
        leaving anyway."""
        return (p for p in self.pods.values() if p.namespace == namespace
                and (p.priority < priority or p.leaving))

    def quota_denial(self, namespace: str, claims: Sequence[ResourceClaim],
                     leaving: Iterable[Pod]) -> Denial | None:
        """What the namespace's quotas would refuse even with the claims of ``leaving``
        (those no one else uses) released; None: no quota stands in the way."""
        if self.quotas is None or not self.quotas.quotas.get(namespace):
            return None  # the common case: no quota, nothing to count
        uids = {pod.uid for pod in leaving}
        freed = [f"{c['metadata'].get('namespace')}/{c['metadata'].get('name')}"
                 for uid in uids for c in self.claims.index("reserved", uid)
                 if (hold := hold_of(c)) is not None and hold.consumers <= uids]
        return self.quotas.least_denial(namespace, claims, freed)

    def held_back(self, key: Key, uid: str) -> str | None:
        """Why the pod (or gang: :func:`gang_key`, its oldest member's uid) may not preempt
        now (its earlier nominations did not get it bound), or None."""
        rounds = self.rounds.get(key)
        if rounds is None or rounds.uid != uid:
            return None
        if rounds.count >= self.settings.max_rounds:
            return (f"not preempting again: {rounds.count} preemption(s) for this pod did not "
                    "get it bound")
        left = rounds.not_before - time.monotonic()
        if left > 0:
            return (f"not preempting again for {left:.0f}s: its last preemption did not get "
                    "it bound")
        return None

    def refused(self, key: Key) -> None:
        """The pod's placement was refused by a check preemption cannot help with (its
        DeviceQuota): a nomination it holds ends now — the devices it held go to others —
        and counts as a round that did not get it bound."""
        if self.nominations.pop(key, None) is not None:
            metrics.set_nominated_pods(len(self.nominations))
            self._ended(key)

    def _ended(self, key: Key) -> None:
        """The pod's nomination ended without it being bound: back off."""
        rounds = self.rounds.get(key)
        if rounds is not None:
            rounds.not_before = time.monotonic() + self.settings.backoff * 2 ** max(
                rounds.count - 1, 0)

    async def budgets(self) -> list[Budget]:
        """The cluster's PodDisruptionBudgets, listed at most every :data:`BUDGETS_TTL`
        seconds (pods that cannot preempt retry on every release of devices)."""
        now = time.monotonic()
        if self._budget_cache is not None and now - self._budget_cache[0] < BUDGETS_TTL:
            return self._budget_cache[1]
        try:
            items = await self.client.list(PDBS)
        except (ApiError, OSError) as exc:
            log.warning("listing PodDisruptionBudgets failed (%s): preempting as if none", exc)
            self._budget_cache = (now, [])  # not again before BUDGETS_TTL: each try would log
            return []
        out = []
        for item in items:
            meta, spec = item.get("metadata") or {}, item.get("spec") or {}
            allowed = (item.get("status") or {}).get("disruptionsAllowed")
            out.append(Budget(str(meta.get("namespace", "")), str(meta.get("name", "")),
                              spec.get("selector"),
                              allowed if isinstance(allowed, int) else 0))
        self._budget_cache = (now, out)
        return out

    # ------------------------------------------------------------------ acting

    async def nominate(self, key: Key, pod: JSON, choice: NodeVictims,
                       targets: Sequence[tuple[Key, str]] | None = None,
                       priority: int | None = None) -> None:
        """Hold ``choice.freed`` for ``key`` (a pod, or a gang: :func:`gang_key`), write
        the nominated node of each of ``targets`` (pod, node; default: ``key`` on
        ``choice.node``), tell ``pod`` and evict the victims. ``priority``: the hold's
        (default: ``pod``'s)."""
        uid = str(pod["metadata"].get("uid", ""))
        rounds = self.rounds.get(key)
        if rounds is None or rounds.uid != uid:
            self.rounds[key] = rounds = _Rounds(uid)
        rounds.count += 1
        self.nominations[key] = _Nomination(
            choice.node, pod_priority(pod) if priority is None else priority,
            {v.uid: v for v in choice.victims}, choice.freed,
            time.monotonic() + self.settings.hold)
        metrics.set_nominated_pods(len(self.nominations))
        for target, node in targets if targets is not None else [(key, choice.node)]:
            try:
                await self.client.patch(PODS, target[1], {"status": {"nominatedNodeName": node}},
                                        target[0], subresource="status",
                                        content_type=STRATEGIC_MERGE)
            except (ApiError, OSError) as exc:
                log.warning("pod %s/%s: nominatedNodeName not written: %s", *target, exc)
        listed = ", ".join(f"{v.ref} (priority {v.priority})" for v in choice.victims[:10])
        more = f" and {len(choice.victims) - 10} more" if len(choice.victims) > 10 else ""
        await self.events.normal(pod, "Preempting", f"Preempting {len(choice.victims)} pod(s) "
                                 f"on {_nodes(choice.node)}{_for(key)}: {listed}{more}")
        await self._evict_all(key, pod, self.nominations[key])

    async def nominated(self, key: Key, pod: JSON) -> str | None:
        """For a pod already nominated: evict victims not yet gone (a budget may have blocked
        them) and say what it waits for; None when there is no live nomination."""
        nomination = self.nominations.get(key)
        if nomination is None:
            return None
        present = [uid for uid in nomination.victims if uid in self.pods]
        # Victims' claims still allocated: the claim controller has yet to release them.
        releasing = any((claim.get("status") or {}).get("allocation")
                        for uid in nomination.victims
                        for claim in self.claims.index("reserved", uid))
        if nomination.until <= time.monotonic() or not (present or releasing):
            del self.nominations[key]  # expired, or everything freed and still no fit
            metrics.set_nominated_pods(len(self.nominations))
            self._ended(key)
            return None
        await self._evict_all(key, pod, nomination)
        where = _nodes(nomination.node, quoted=True)
        return (f"waiting for {len(present)} preempted pod(s) on {where} to terminate and "
                "release their devices" if present else
                f"waiting for the devices of preempted pods on {where} to be released")

    async def _evict_all(self, key: Key, pod: JSON, nomination: _Nomination) -> None:
        now = time.monotonic()
        for uid, victim in nomination.victims.items():
            current = self.pods.get(uid)
            if current is None or current.leaving:
                continue  # gone or going
            last = nomination.tried.get(uid)
            if last is not None and now - last < RETRY:
                continue
            nomination.tried[uid] = now
            await self._evict(key, pod, victim, victim.node)

    async def _evict(self, key: Key, pod: JSON, victim: Pod, node: str) -> None:
        body = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": victim.name, "namespace": victim.namespace},
                "deleteOptions": {"preconditions": {"uid": victim.uid}}}
        ref = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": victim.name, "namespace": victim.namespace, "uid": victim.uid}}
        try:
            await self.client.request("POST", PODS.path(victim.namespace, victim.name,
                                                        "eviction"), body=body)
        except NotFound:
            return
        except ApiError as exc:
            if exc.status == 409:
                return  # another pod by that name now (uid precondition)
            log.info("%s: evicting %s failed (%s); retrying", _by(key), victim.ref, exc)
            if exc.status == 429:  # a PodDisruptionBudget does not allow it now
                await self.events.warn(pod, "PreemptionBlocked", f"cannot evict {victim.ref} "
                                       f"on node {node} yet: {exc.message}")
            return
        except OSError as exc:
            log.warning("%s: evicting %s failed: %s", _by(key), victim.ref, exc)
            return
        metrics.record_preemption_victim()
        log.info("%s preempted %s on node %s", _by(key), victim.ref, node)
        await self.events.normal(ref, "Preempted", f"Preempted by {_by(key)} on node {node}")


__all__ = ["GANG_PREFIX", "PDBS", "Preemption", "PreemptionSettings", "gang_key"]
