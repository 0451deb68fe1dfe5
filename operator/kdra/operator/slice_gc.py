"""Slice garbage collection: ResourceSlices nobody stands behind any more are deleted.

kubelet wipes a node's slices when a driver de-registers (after a grace period, 1.33+) and the
API server's garbage collector deletes slices owned by a deleted Node. kdra's operator does the
same for every pool, by these rules (checked per pool, in this order, per slice):

- ``node-gone``: the slice has ``nodeName`` and that Node does not exist (confirmed with a
  live GET, so a Node the cache has not seen yet is never mistaken for a deleted one);
- ``lease-expired``: the heartbeat Lease of the slice's (driver, node) agent (its per-node
  Lease, or the one Lease an agent process serving many simulated nodes shares among them;
  the freshest Lease naming the pool counts) expired more than ``grace`` seconds ago — the
  agent de-registered, crashed or lost its node (confirmed with a live GET of the Lease: a
  returning agent renews it before it publishes, and the Lease watch may lag behind the
  slice watch);
- ``old-generation``: a newer generation of the pool is complete (as many slices as its
  ``resourceSliceCount``), so the older slices are leftovers of an interrupted update.

Invariants:
- Where the slice kind holds every driver's slices (the native flavour's built-in kind), only
  pools of kdra's agents' drivers (named by their heartbeat Leases) are judged: another
  driver's slices are read by kdra, never deleted (:meth:`SliceGC.owns`).
- Slices of a live agent (its Lease is valid, or expired for less than ``grace``) are never
  deleted for ``lease-expired`` or ``old-generation``: the agent itself owns their life cycle.
  A pool without any agent Lease (published by something else) is judged by the other rules.
- Lease expiry is measured on this process's monotonic clock from when a renewal was
  *observed*, capped by what the Lease itself says (``renewTime + leaseDurationSeconds``), so
  clock skew between the agent and the operator cannot expire a live agent early.
- Every delete carries the slice's uid and resourceVersion as preconditions: a slice the
  agent re-created or re-published meanwhile is never deleted by mistake.
- A slice of node A naming pool B (:mod:`kdra.kube.core.pool_ownership`) is judged only by
  ``node-gone`` and ``lease-expired``: it neither keeps pool B's older generations alive nor,
  with a newer generation, gets B's slices deleted.
- Each deletion is logged with its reason and counted in
  ``kdra_slice_gc_deletions_total{reason}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from kdra.dra.timestamps import parse_time
from kdra.kube.client import KubeClient
from kdra.kube.core.agent_leases import AGENT_LEASE_LABEL, lease_pools
from kdra.kube.core.pool_ownership import speaks_for_pool
from kdra.kube.errors import Conflict, NotFound
from kdra.kube.resources import LEASES, NODES, SLICES, Resource
from kdra.kube.store import JSON, Store
from kdra.kube.workqueue import Retry, WorkQueue
from kdra.operator import metrics

log = logging.getLogger(__name__)

PoolKey = tuple[str, str]  # (driver, pool name)
AgentKey = tuple[str, str]  # (driver, node name)
LeaseState = Literal["live", "grace", "expired", "none"]
Reason = Literal["node-gone", "lease-expired", "old-generation"]


def pool_key(obj: JSON) -> PoolKey:
    spec = obj.get("spec") or {}
    return (str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", "")))


def _generation(obj: JSON) -> int:
    return int(((obj.get("spec") or {}).get("pool") or {}).get("generation") or 0)


def slice_store() -> Store:
    return Store("ResourceSlice", {
        "pool": lambda s: ["/".join(pool_key(s))],
        "node": lambda s: [n] if (n := (s.get("spec") or {}).get("nodeName")) else [],
    })


@dataclass
class AgentLease:
    """What the collector knows about one agent's heartbeat."""

    name: str
    renew_time: str
    duration: float
    expires_at: float
    """Monotonic time after which the Lease counts as expired."""


@dataclass(frozen=True)
class Deletion:
    slice: JSON
    reason: Reason
    why: str


def decide(slices: Iterable[JSON], *, node_exists: Callable[[str], bool],
           lease_state: Callable[[str, str], LeaseState],
           describe_lease: Callable[[str, str], str] = lambda d, n: "",
           is_node: Callable[[str], bool] | None = None) -> list[Deletion]:
    """The slices of one pool to delete, and why (pure: the caller supplies node existence
    and agent liveness). ``node_exists``: whether a slice's node may still exist;
    ``is_node``: whether a pool's name is a known node's (default ``node_exists``)."""
    named_after_node = is_node or node_exists
    deletions: list[Deletion] = []
    remaining: list[JSON] = []
    protected = False
    for obj in slices:
        spec = obj.get("spec") or {}
        driver, node = str(spec.get("driver", "")), spec.get("nodeName")
        if node and not node_exists(node):
            deletions.append(Deletion(obj, "node-gone", f"node {node} no longer exists"))
            continue
        state = lease_state(driver, node) if node else "none"
        if state == "expired":
            deletions.append(Deletion(obj, "lease-expired",
                                      f"the agent of node {node} for {driver} is gone: "
                                      f"{describe_lease(driver, node or '')}"))
            continue
        if not speaks_for_pool(obj, named_after_node):
            continue  # another node's pool: neither protects it nor supersedes its slices
        protected = protected or state in ("live", "grace")
        remaining.append(obj)
    if remaining and not protected:
        newest = max(_generation(obj) for obj in remaining)
        current = [obj for obj in remaining if _generation(obj) == newest]
        expected = int(current[0]["spec"]["pool"].get("resourceSliceCount") or 1)
        if len(current) >= expected:
            for obj in remaining:
                if _generation(obj) < newest:
                    deletions.append(Deletion(obj, "old-generation",
                                              f"generation {newest} of the pool is complete "
                                              f"({len(current)}/{expected} slices)"))
    return deletions


class SliceGC:
    """Fed by watch events (slices, nodes, agent Leases) and a periodic sweep."""

    def __init__(self, client: KubeClient, *, namespace: str, grace: float,
                 sweep_interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 slices: Resource = SLICES, agents_only: bool = False) -> None:
        self.client = client
        self.resource = slices
        """Where the slices live (the API flavour's kind)."""
        self.agents_only = agents_only
        """Judge only pools of kdra's agents' drivers (:meth:`owns`): the kind holds other
        drivers' slices too (the native flavour), which kdra never writes."""
        self.drivers: set[str] = set()
        """The drivers kdra's agents publish (named by their heartbeat Leases)."""
        self.namespace = namespace
        self.grace = grace
        self.sweep_interval = sweep_interval or min(10.0, max(1.0, grace / 4))
        self.clock = clock
        self.slices = slice_store()
        self.nodes = Store("Node")
        self.leases: dict[AgentKey, AgentLease] = {}
        self.queue: WorkQueue[PoolKey] = WorkQueue("slice-gc", self._sync_pool, workers=2)
        self._sweeper: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    def prime(self, *, slices: Iterable[JSON], nodes: Iterable[JSON],
              leases: Iterable[JSON]) -> None:
        self.slices.prime(slices)
        self.nodes.prime(nodes)
        for lease in leases:
            self.on_lease("ADDED", lease)

    def start(self) -> None:
        self.queue.start()
        self._sweeper = asyncio.create_task(self._sweep(), name="slice-gc-sweep")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.queue.stop()

    async def _sweep(self) -> None:
        while True:
            for key in {pool_key(obj) for obj in self.slices}:
                self.queue.add(key)
            await asyncio.sleep(self.sweep_interval)

    # ------------------------------------------------------------------ events in

    def on_slice(self, event_type: str | None, obj: JSON, old: JSON | None = None) -> None:
        """The slice cache's subscriber: the GC keeps its own (raw) view, indexed by node
        and pool; it reads no slice's model."""
        self.slices.apply(event_type, obj)
        self.queue.add(pool_key(obj))

    def on_node(self, event_type: str | None, obj: JSON) -> None:
        self.nodes.apply(event_type, obj)
        if event_type == "DELETED":
            for key in {pool_key(s) for s in self.slices.index("node", obj["metadata"]["name"])}:
                self.queue.add(key)

    def on_lease(self, event_type: str | None, obj: JSON) -> None:
        """An agent heartbeat Lease changed. Others (wrong namespace or label) are ignored."""
        meta = obj.get("metadata") or {}
        if meta.get("namespace") != self.namespace or \
                (meta.get("labels") or {}).get(AGENT_LEASE_LABEL) != "true":
            return
        driver, nodes = lease_pools(obj)
        if driver is None:
            return
        self.drivers.add(driver)
        now = self.clock()
        spec = obj.get("spec") or {}
        renew = str(spec.get("renewTime") or "")
        duration = float(spec.get("leaseDurationSeconds") or 0)
        name = meta.get("name", "")
        renewed = parse_time(renew)
        left = duration
        if renewed is not None:
            age = (dt.datetime.now(dt.UTC) - renewed).total_seconds()
            left = min(duration, max(0.0, duration - age))
        for node in nodes:
            key = (driver, node)
            seen = self.leases.get(key)
            if seen is not None and seen.name != name and seen.expires_at >= now + left:
                # Another Lease vouches for this pool for longer (an agent that moved from
                # per-node Leases to one shared Lease, or back): the freshest one counts.
                continue
            if event_type == "DELETED":
                if seen is None:
                    continue
                # a deleted Lease is a de-registration: expired from now on
                seen.expires_at = min(seen.expires_at, now)
            elif seen is None or seen.renew_time != renew or seen.duration != duration \
                    or seen.name != name:
                self.leases[key] = AgentLease(name, renew, duration, now + left)
            else:
                continue  # nothing new for this node
            # The expiry itself is noticed by the periodic sweep (at most sweep_interval late).
            for pool in {pool_key(s) for s in self.slices.index("node", node)
                         if s["spec"].get("driver") == driver}:
                self.queue.add(pool)

    # ------------------------------------------------------------------ decisions

    def lease_state(self, driver: str, node: str) -> LeaseState:
        seen = self.leases.get((driver, node))
        if seen is None:
            return "none"
        now = self.clock()
        if now < seen.expires_at:
            return "live"
        return "grace" if now <= seen.expires_at + self.grace else "expired"

    def _describe_lease(self, driver: str, node: str) -> str:
        seen = self.leases.get((driver, node))
        if seen is None:
            return "no Lease"
        return (f"Lease {self.namespace}/{seen.name} expired "
                f"{self.clock() - seen.expires_at:.1f}s ago (grace {self.grace:g}s)")

    def owns(self, driver: str) -> bool:
        """Whether ``driver``'s slices are kdra's to judge: every driver where the kind is
        kdra's alone, else the drivers of kdra's agents (a driver once seen in an agent's
        Lease stays one, so its slices go when that agent is gone)."""
        return not self.agents_only or driver in self.drivers

    def _known_node(self, name: str) -> bool:
        return self.nodes.get(("", name)) is not None

    async def _sync_pool(self, key: PoolKey) -> None:
        slices = self.slices.index("pool", "/".join(key))
        if not slices or not self.owns(key[0]):
            return  # another driver's pool (native flavour): read, never written
        missing = {s["spec"]["nodeName"] for s in slices
                   if s["spec"].get("nodeName") and
                   self.nodes.get(("", s["spec"]["nodeName"])) is None}
        gone = set()
        for node in missing:  # the cache may lag behind a brand-new Node: ask the server
            try:
                self.nodes.upsert(await self.client.get(NODES, node))
            except NotFound:
                gone.add(node)
        known = self._known_node
        deletions = decide(slices, node_exists=lambda n: n not in gone,
                           lease_state=self.lease_state, describe_lease=self._describe_lease,
                           is_node=known)
        expired = {(d.slice["spec"]["driver"], d.slice["spec"]["nodeName"])
                   for d in deletions if d.reason == "lease-expired"}
        if expired:  # the Lease watch may lag behind a returning agent's slices: ask
            for driver, node in expired:
                await self._refresh_lease(driver, node)
            deletions = decide(slices, node_exists=lambda n: n not in gone,
                               lease_state=self.lease_state,
                               describe_lease=self._describe_lease, is_node=known)
        for deletion in deletions:
            await self._delete(deletion)

    async def _refresh_lease(self, driver: str, node: str) -> None:
        seen = self.leases.get((driver, node))
        if seen is None:
            return
        try:
            lease = await self.client.get(LEASES, seen.name, self.namespace)
        except NotFound:
            return
        self.on_lease("MODIFIED", lease)

    async def _delete(self, deletion: Deletion) -> None:
        meta = deletion.slice["metadata"]
        try:
            await self.client.delete(self.resource, meta["name"], uid=meta.get("uid"),
                                     resource_version=meta.get("resourceVersion"))
        except NotFound:
            self.slices.delete(("", meta["name"]))
            return
        except Conflict as exc:
            raise Retry(f"slice {meta['name']} changed; judging it again") from exc
        self.slices.delete(("", meta["name"]))
        metrics.record_slice_gc_deletion(deletion.reason)
        spec = deletion.slice["spec"]
        log.info("deleted ResourceSlice %s (driver %s, pool %s, generation %d): %s: %s",
                 meta["name"], spec.get("driver"), spec.get("pool", {}).get("name"),
                 _generation(deletion.slice), deletion.reason, deletion.why)
