"""The node agent's runner: one node (a DaemonSet pod) or many simulated nodes.

One :class:`AgentRunner` a process (started by :mod:`kdra.agent.process`); what it
does for each node is a :class:`kdra.agent.node.NodeAgent`.

Start-up, per node (kubelet's order: kubernetes/kubernetes ``pkg/kubelet/cm/dra/manager.go``):
discover devices (a malformed inventory stops the agent with a message naming the line and
field) → create the Node if asked (simulation) → load the checkpoint and delete orphaned CDI
files → acquire the heartbeat Leases (before any slice appears, so the slice GC sees the agent
alive first) → delete the node's stale slices of its drivers → publish. Then one claim watch for
the whole process feeds a work queue keyed by (node, namespace, name); the inventory is polled
(and re-read at once on SIGHUP); published slices are re-checked every resync period.
SIGTERM/SIGINT stop the loops and release the Leases (the slices stay: the operator's slice
GC removes them only if the agent does not come back within its grace period).

The native flavour (``--flavour native``) starts the same way, with ``resource.k8s.io/v1``
slices, then serves the kubelet as its DRA plugin (:mod:`kdra.agent.kubelet`, one plugin per
driver) instead of watching claims: the kubelet asks for each pod's claims to be prepared
before its containers start, and has the runtime inject their CDI devices (no NRI). A watch of
the node's native slices re-publishes at once what someone deleted — the kubelet deletes
every slice of its node when it starts.

Why a plain asyncio watch rather than kopf: an agent serves the claims of *its* pools only,
with an explicit start-up order (checkpoint before the first prepare, wipe before publish)
and, in simulation, hundreds of nodes behind one watch stream. kopf would cache and dispatch
every claim of the cluster per handler with its own lifecycle around it; the agent needs
neither, so it keeps a cache of just the claims that concern its nodes.

Invariants:
- A claim is synced by at most one worker at a time (the work queue), and every node's
  checkpoint is written only by that node's Preparer.
- After every (re)list of claims, every claim a node holds in its checkpoint or that names
  one of its pools is synced, so missed events and restarts converge.
- Native flavour: the kubelet plugins start only after the checkpoint is loaded and the
  slices are published, and stop (deregister) before the Leases are released.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import TypeVar

from kdra.agent import metrics
from kdra.agent.core.backend import Backends, DiscoveryError
from kdra.agent.core.nodeprep import pools_of, same_for_preparer
from kdra.agent.exposure import ExposurePolicy, make_nri_plugin
from kdra.agent.heartbeat import Heartbeat
from kdra.agent.kubelet.plugin import HealthFeed, KubeletPlugins
from kdra.agent.kubelet.service import KubeletService
from kdra.agent.node import NodeAgent, ensure_node, retrying
from kdra.agent.node_health import health_sources
from kdra.agent.prepare import HolderIndex
from kdra.agent.settings import FLAVOURS, AgentSettings
from kdra.dra.errors import InvalidObject
from kdra.kube.client import KubeClient
from kdra.kube.errors import ApiError, NotFound
from kdra.kube.flavour import serves_native
from kdra.kube.resources import CLAIMS, NATIVE_CLAIMS, NATIVE_SLICES, SLICES
from kdra.kube.store import JSON, Key, is_not_newer, key_of
from kdra.kube.workqueue import WorkQueue

log = logging.getLogger(__name__)

ClaimKey = tuple[str, str, str]  # (node, namespace, name)
T = TypeVar("T")


class AgentError(Exception):
    """The agent cannot start: bad settings, inventory, or a backend that cannot list
    devices."""


RESYNC_SOON = 0.5
"""Seconds between a deleted native slice and its re-publication (deletions come in bursts:
the kubelet deletes every slice of its node at once)."""


async def resolve_flavour(client: KubeClient, settings: AgentSettings) -> AgentSettings:
    """``settings`` with ``flavour`` ``kdra`` or ``native`` (``auto``: native when the API
    server serves ``resource.k8s.io/v1``, as the operator decides it)."""
    if settings.flavour not in FLAVOURS:
        raise AgentError(f"--flavour {settings.flavour!r}: use one of {', '.join(FLAVOURS)}")
    if settings.flavour != "auto":
        return settings
    native = await serves_native(client)  # the operator's discovery (kdra.kube.flavour)
    log.info("--flavour auto: %s", "native (the API server serves resource.k8s.io/v1)"
             if native else "kdra (the API server does not serve resource.k8s.io/v1)")
    return dataclasses.replace(settings, flavour="native" if native else "kdra")


class AgentRunner:
    """One agent process: its nodes, the shared claim watch and the work queue."""

    def __init__(self, client: KubeClient, settings: AgentSettings, nodes: list[str],
                 backends: Backends) -> None:
        self.client = client
        self.settings = settings
        self.backends = backends
        self.identity = settings.identity or f"{socket.gethostname()}-{os.getpid()}"
        self.holders = HolderIndex()
        # Many nodes in one process (simulation): one shared Lease per driver, not one per node.
        self.shared = len(nodes) > 1
        self.heartbeats: dict[str, Heartbeat] = {}  # driver → the shared Lease
        self.health_sources = health_sources(settings, backends)
        self.nodes = {node: NodeAgent(client, settings, node, backends, self.identity,
                                      self.holders, own_heartbeats=not self.shared,
                                      claims=self._claim, written=self._wrote,
                                      health_sources=self.health_sources)
                      for node in nodes}
        self.claims: dict[Key, JSON] = {}
        self._prepared: dict[str, int] = {}  # node → prepared claims (the gauge's parts)
        self.queue: WorkQueue[ClaimKey] = WorkQueue("agent-claims", self._sync,
                                                    workers=settings.workers)
        self.synced = asyncio.Event()
        self.reread = asyncio.Event()
        self.resync_now = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._signature: object | None = None
        first = self.nodes[nodes[0]]
        self.native = settings.flavour == "native"
        self.nri = None if self.native else make_nri_plugin(settings, nodes, ExposurePolicy(
            first.node, claims=lambda: self.claims.values(),
            checkpoint=lambda: first.preparer.checkpoint, drivers=lambda: first.claim_drivers,
            backends=backends))
        self.kubelet: KubeletPlugins | None = None
        if self.native and len(nodes) == 1 and not settings.simulate_nodes:
            self.kubelet = KubeletPlugins(
                KubeletService(first.node, first.preparer, self._read_native_claim,
                               lambda: first.claim_drivers),
                HealthFeed(first.node, first.device_health),
                registry_dir=Path(settings.kubelet_registry_dir),
                plugins_dir=Path(settings.kubelet_plugins_dir))

    # ------------------------------------------------------------------ start-up

    async def start(self) -> None:
        self._signature = self.backends.signature()
        await self._each(self._discover_first)
        if self.settings.create_nodes:
            await self._each(lambda agent: retrying(
                f"creating Node {agent.node}", lambda: ensure_node(self.client, agent.node)))
        await self.sync_shared_heartbeats()  # renewed before anything is published
        await self._each(lambda agent: agent.start())
        self.update_gauges()
        if self.native:  # the kubelet says what to prepare: no claim watch
            self.synced.set()
            if len(self.nodes) == 1:
                self._tasks = [asyncio.create_task(self._watch_native_slices(),
                                                   name="agent-slice-watch")]
        else:
            # Claims are synced only once the first LIST is cached: before that, "not cached"
            # would read as "gone" and unprepare claims that are still in use.
            self._tasks = [asyncio.create_task(self._watch_claims(), name="agent-claim-watch")]
        await self.synced.wait()
        self.queue.start()
        self._tasks += [asyncio.create_task(self._poll(), name="agent-inventory-poll"),
                        asyncio.create_task(self._resync(), name="agent-resync")]
        if self.nri is not None:  # after the first LIST: see services.agent.exposure
            self._tasks.append(asyncio.create_task(self.nri.run(), name="agent-nri"))
        if self.kubelet is not None:  # checkpoint loaded, slices published: serve the kubelet
            try:
                await self.kubelet.sync(self._only_node().drivers)
            except OSError as exc:
                raise AgentError(f"cannot serve the kubelet as its DRA plugin: {exc}") from exc
        devices = sum(len(agent.inventory.devices) for agent in self.nodes.values())
        log.info("kdra agent started: %d node(s), %d device(s), drivers %s", len(self.nodes),
                 devices, ", ".join(sorted({d for a in self.nodes.values() for d in a.drivers})))

    async def sync_shared_heartbeats(self) -> None:
        """(Many nodes) One Lease per driver naming the nodes that publish it: new drivers
        get theirs (acquired before returning), gone ones are released."""
        if not self.shared:
            return
        serving: dict[str, list[str]] = {}
        for agent in self.nodes.values():
            for driver in agent.drivers:
                serving.setdefault(driver, []).append(agent.node)
        for driver, nodes in serving.items():
            beat = self.heartbeats.get(driver)
            if beat is not None:
                beat.vouch_for(nodes)
                continue
            beat = Heartbeat(self.client, namespace=self.settings.namespace, nodes=nodes,
                             driver=driver, identity=self.identity,
                             duration=self.settings.lease_duration,
                             interval=self.settings.renew_interval, shared_by=list(self.nodes))
            acquired = False
            try:
                await retrying(f"acquiring Lease {beat.name}", beat.acquire)
                acquired = True
            except ApiError as exc:  # e.g. no namespace yet: keep trying in the background
                log.warning("cannot acquire Lease %s/%s yet: %s", beat.namespace, beat.name,
                            exc)
            beat.start(acquired=acquired)
            self.heartbeats[driver] = beat
        for driver in set(self.heartbeats) - set(serving):
            await self.heartbeats.pop(driver).stop(release=True)

    async def _discover_first(self, agent: NodeAgent) -> None:
        try:
            await agent.discover()
        except InvalidObject as exc:
            raise AgentError(f"malformed inventory: {exc}") from exc
        except DiscoveryError as exc:
            raise AgentError(str(exc)) from exc

    async def _each(self, action: Callable[[NodeAgent], Awaitable[T]]) -> list[T]:
        """Run ``action(agent)`` for every node, at most 16 at a time; results in node order."""
        limit = asyncio.Semaphore(16)

        async def one(agent: NodeAgent) -> T:
            async with limit:
                return await action(agent)

        return list(await asyncio.gather(*(one(agent) for agent in self.nodes.values())))

    async def stop(self) -> None:
        if self.kubelet is not None:  # deregistered first: the kubelet stops calling
            await self.kubelet.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.queue.stop()
        await asyncio.gather(*(agent.stop() for agent in self.nodes.values()),
                             *(beat.stop(release=True) for beat in self.heartbeats.values()),
                             return_exceptions=True)
        for backend in self.backends:
            try:
                backend.close()
            except Exception:  # closing anyway; a backend should not raise here
                log.exception("device backend %s: closing failed", backend.name)

    def _only_node(self) -> NodeAgent:
        """The node of a process that serves one (a DaemonSet pod)."""
        (agent,) = self.nodes.values()
        return agent

    # ------------------------------------------------------------------ native flavour

    async def _read_native_claim(self, namespace: str, name: str) -> JSON | None:
        try:
            return await self.client.get(NATIVE_CLAIMS, name, namespace)
        except NotFound:
            return None

    async def _watch_native_slices(self) -> None:
        """Re-publish soon after one of the node's own slices is deleted (the kubelet wipes
        its node's slices when it starts; someone may delete one by hand)."""
        agent = self._only_node()
        async for event, obj in self.client.watch(
                NATIVE_SLICES, field_selector=f"spec.nodeName={agent.node}"):
            if event != "DELETED":
                continue
            spec = obj.get("spec") or {}
            if spec.get("driver") in agent.drivers and \
                    (spec.get("pool") or {}).get("name") == agent.node:
                log.info("node %s: ResourceSlice %s was deleted; publishing it again",
                         agent.node, (obj.get("metadata") or {}).get("name"))
                self.resync_now.set()

    # ------------------------------------------------------------------ claims

    def _interested(self, claim: JSON | None) -> set[str]:
        """Nodes of this process whose pools the claim names (allocation or status)."""
        if not claim:
            return set()
        nodes = set()
        pools = set(pools_of(claim))
        for entry in (claim.get("status") or {}).get("devices") or ():
            pools.add((str(entry.get("driver")), str(entry.get("pool"))))
        for driver, pool in pools:
            agent = self.nodes.get(pool)
            if agent is not None and driver in agent.claim_drivers:
                nodes.add(pool)
        return nodes

    def _claim(self, namespace: str, name: str) -> JSON | None:
        """The newest version of a claim seen (None: gone, or of no concern to our nodes)."""
        return self.claims.get((namespace, name))

    def _holders(self, key: Key) -> set[str]:
        """Nodes whose checkpoint holds a claim of this namespace/name."""
        return self.holders.nodes(*key)

    def _wrote(self, claim: JSON) -> None:
        """One of our preparers wrote ``claim``'s status: cache the server's answer, as the
        operator's controllers do with theirs, so queued syncs build on it."""
        key = key_of(claim)
        held = self.claims.get(key)
        if held is not None and not is_not_newer(claim, held):
            self.claims[key] = claim

    def _on_claim(self, event: str, claim: JSON) -> None:
        key = key_of(claim)
        old = self.claims.get(key)
        if event != "DELETED" and is_not_newer(claim, old):
            # No newer than what is cached: the echo of our own status write (a sync would
            # find it as that write left it) or a version already synced. Nothing to do.
            return
        if event == "MODIFIED" and old is not None and same_for_preparer(old, claim):
            self.claims[key] = claim  # newer, but nothing our preparers read changed
            return
        nodes = self._interested(claim) | self._interested(old) | self._holders(key)
        if event != "DELETED" and nodes:
            self.claims[key] = claim  # cached: it concerns one of our nodes
        else:
            self.claims.pop(key, None)
        for node in nodes:
            self.queue.add((node, key[0], key[1]))

    def _on_list(self, items: Iterable[JSON], skipped: Iterable[JSON] = ()) -> None:
        """A (re)list: the complete truth. Sync every claim that names our pools now or did
        before, and every claim a checkpoint holds. A claim that could not be decoded
        (``skipped``) keeps the version cached before, if any."""
        before = self.claims
        self.claims = {key_of(c): c for c in items
                       if self._interested(c) or self._holders(key_of(c))}
        for stub in skipped:
            key = key_of(stub)
            if key in before:
                self.claims.setdefault(key, before[key])
        for key, claim in [*self.claims.items(), *before.items()]:
            for node in self._interested(claim):
                self.queue.add((node, key[0], key[1]))
        for node, agent in self.nodes.items():
            for entry in agent.preparer.checkpoint.claims.values():
                self.queue.add((node, entry.claim.namespace, entry.claim.name))
        self.synced.set()

    async def _watch_claims(self) -> None:
        async for event, obj in self.client.watch(CLAIMS):
            try:
                if event == "LIST":
                    self._on_list(obj["items"], obj.get("skipped", ()))
                else:
                    self._on_claim(event, obj)
            except Exception:  # one bad object must not stop the watch
                log.exception("claim %s/%s: handling a %s event failed",
                              *key_of(obj) if event != "LIST" else ("", ""), event)

    async def _sync(self, key: ClaimKey) -> None:
        node, namespace, name = key
        agent = self.nodes[node]
        try:
            await agent.preparer.sync(namespace, name, self.claims.get((namespace, name)))
        finally:
            # Recount this node's checkpoint only (one process may serve hundreds of nodes).
            self._prepared[node] = agent.preparer.prepared_count
            metrics.set_prepared_claims(sum(self._prepared.values()))

    def update_gauges(self) -> None:
        healthy = unhealthy = 0
        for agent in self.nodes.values():
            good, bad = agent.health.counts(agent.inventory)
            healthy, unhealthy = healthy + good, unhealthy + bad
        metrics.set_agent_devices(healthy, unhealthy)
        self._prepared = {n: a.preparer.prepared_count for n, a in self.nodes.items()}
        metrics.set_prepared_claims(sum(self._prepared.values()))

    # ------------------------------------------------------------------ devices

    async def _poll(self) -> None:
        """Health every ``health_poll`` seconds; the inventory every ``inventory_poll`` (at
        once on SIGHUP)."""
        last_read = time.monotonic()
        period = min(self.settings.health_poll, self.settings.inventory_poll)
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.reread.wait(), period)
            forced = self.reread.is_set()
            self.reread.clear()
            due = time.monotonic() - last_read >= self.settings.inventory_poll
            signature = self.backends.signature() if forced or due else self._signature
            if forced or due:
                last_read = time.monotonic()
            reread = forced or (due and (signature is None or signature != self._signature))
            if reread:
                self._signature = signature
                await self._each(self._rediscover)
                # (Many nodes) a new driver's pool is published before the shared Lease
                # names it: the slice GC leaves a pool without a Lease alone meanwhile.
                await self.sync_shared_heartbeats()
            changed = await self._each(self._health)
            if reread or any(changed):  # the device gauges move with nothing else
                self.update_gauges()

    async def _health(self, agent: NodeAgent) -> bool:
        """Health poll of one node: republish when a device's applied health changed;
        returns whether it did."""
        if not await agent.check_health():
            return False
        try:
            await agent.publisher.publish(agent.pools())
        except (ApiError, OSError) as exc:
            log.warning("node %s: publishing health taints failed (%s); retried at the next "
                        "resync", agent.node, exc)
        if self.kubelet is not None:  # the kubelet's health streams send their lists now
            self.kubelet.health_changed()
        for key, claim in self.claims.items():  # their Healthy conditions change
            if agent.node in self._interested(claim):
                self.queue.add((agent.node, key[0], key[1]))
        return True

    async def _rediscover(self, agent: NodeAgent) -> None:
        try:
            changed = await agent.discover()
        except (InvalidObject, DiscoveryError) as exc:
            log.error("node %s: keeping the previous devices: %s", agent.node, exc)
            return
        if not changed:
            return
        log.info("node %s: devices changed; publishing", agent.node)
        agent.sync_heartbeats()
        if self.kubelet is not None:  # a driver may have come or gone
            try:
                await self.kubelet.sync(agent.drivers)
            except OSError as exc:
                log.error("node %s: kubelet plugin sockets: %s", agent.node, exc)
            self.kubelet.health_changed()
        try:
            await agent.publisher.publish(agent.pools())
        except (ApiError, OSError) as exc:
            log.warning("node %s: publishing failed (%s); retried at the next resync",
                        agent.node, exc)
        for key, claim in self.claims.items():  # a device may have become (un)available
            if agent.node in self._interested(claim):
                self.queue.add((agent.node, key[0], key[1]))

    async def _resync(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.resync_now.wait(), self.settings.resync_period)
            if self.resync_now.is_set():
                await asyncio.sleep(RESYNC_SOON)  # the rest of a burst of deletions
                self.resync_now.clear()
            listed = None
            if len(self.nodes) > 1:
                listed = await self._slices_by_node()
                if listed is None:
                    continue  # the LIST failed (logged): the next period tries again
            await self._each(functools.partial(self._resync_node, listed=listed))

    async def _slices_by_node(self) -> dict[str, list[JSON]] | None:
        """(Many nodes) Every slice, by ``spec.nodeName``: one LIST for all the nodes
        instead of one per node and period."""
        try:
            items = await self.client.list(SLICES)
        except (ApiError, OSError) as exc:
            log.warning("slice resync: listing ResourceSlices failed: %s", exc)
            return None
        by_node: dict[str, list[JSON]] = {}
        for obj in items:
            by_node.setdefault(str((obj.get("spec") or {}).get("nodeName")), []).append(obj)
        return by_node

    async def _resync_node(self, agent: NodeAgent,
                           listed: dict[str, list[JSON]] | None) -> None:
        try:
            await agent.publisher.resync(
                agent.pools(), None if listed is None else listed.get(agent.node, []))
        except (ApiError, OSError) as exc:
            log.warning("node %s: slice resync failed: %s", agent.node, exc)
