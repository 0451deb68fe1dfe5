"""Everything the agent does for one node (:class:`NodeAgent`), and the start-up helpers.

Invariants:
- A node's checkpoint is written only by its :class:`NodeAgent`'s Preparer.
- The node's Leases are renewed before anything is published (:meth:`NodeAgent.start`): the
  slice GC must see the agent alive before it sees its new slices.
- :func:`retrying` retries only what may pass (connection errors, 429, 5xx) and raises every
  other error at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.core.backend import Backends
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice
from kdra.agent.health import HealthSource, InventoryHealth
from kdra.agent.heartbeat import Heartbeat
from kdra.agent.node_health import NodeHealth
from kdra.agent.prepare import HolderIndex, Preparer
from kdra.agent.publisher import SlicePublisher
from kdra.agent.settings import AgentSettings
from kdra.dra.timestamps import api_time
from kdra.kube.client import KubeClient
from kdra.kube.core.backoff import backoff_delay
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.resources import NATIVE_SLICES, NODES, SLICES
from kdra.kube.store import JSON

log = logging.getLogger(__name__)

T = TypeVar("T")


class NodeAgent:
    """Everything the agent does for one node."""

    def __init__(self, client: KubeClient, settings: AgentSettings, node: str,
                 backends: Backends, identity: str, holders: HolderIndex, *,
                 own_heartbeats: bool = True,
                 claims: Callable[[str, str], JSON | None] | None = None,
                 written: Callable[[JSON], None] | None = None,
                 health_sources: tuple[HealthSource, ...] = (InventoryHealth(),)) -> None:
        """``own_heartbeats``: renew this node's Leases (else the process's shared Lease
        vouches for the node: :class:`~kdra.agent.runner.AgentRunner` with many
        nodes)."""
        self.own_heartbeats = own_heartbeats
        self.client = client
        self.settings = settings
        self.node = node
        self.backends = backends
        self.identity = identity
        self.inventory = Inventory()
        self._drivers: tuple[Inventory | None, tuple[str, ...]] = (None, ())
        self._claim_drivers: tuple[object, object, tuple[str, ...]] = (None, None, ())
        self.health = NodeHealth(node, health_sources, debounce=settings.health_debounce,
                                 settle=settings.health_settle)
        native = settings.flavour == "native"
        self.publisher = SlicePublisher(client, node, NATIVE_SLICES if native else SLICES)
        self.heartbeats: dict[str, Heartbeat] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        self.preparer = Preparer(
            client, node, cdi=CdiDir(Path(settings.cdi_dir)),
            checkpoint_file=CheckpointFile(Path(settings.state_dir), node),
            inventory=lambda: self.inventory, drivers=lambda: self.claim_drivers,
            backends=backends, holders=holders, claims=claims, written=written,
            report_status=not native)  # native: the kubelet asks, and reads the answer
        self.preparer.health = self._health_condition

    def _health_condition(self, driver: str, device: str) -> tuple[bool, str, str]:
        """A prepared device's ``Healthy`` condition (a partition's: its GPU's too)."""
        found = self.inventory.device(driver, device)
        return self.health.condition(driver, device, found.parent if found else "")

    @property
    def drivers(self) -> tuple[str, ...]:
        """The drivers whose pools this node publishes: its devices', and those a backend
        publishes even when empty (NVML's GPU pool), first. Computed once per inventory (a
        new value after each discovery: an immutable Inventory), not on every claim event."""
        inventory = self.inventory
        if self._drivers[0] is not inventory:
            drivers = inventory.drivers
            empty = tuple(d for d in self.backends.drivers if d not in drivers)
            self._drivers = (inventory, (*empty, *drivers))
        return self._drivers[1]

    @property
    def claim_drivers(self) -> tuple[str, ...]:
        """Drivers whose claims this node serves: the published ones, plus any a prepared
        claim still uses (a driver gone from the inventory does not unprepare running
        claims; they are unprepared when deallocated). Computed once per (inventory,
        checkpoint): both immutable values, replaced on every change."""
        drivers, checkpoint = self.drivers, self.preparer.checkpoint
        cached = self._claim_drivers
        if cached[0] is not drivers or cached[1] is not checkpoint:
            held = {d.driver for entry in checkpoint.claims.values() for d in entry.devices}
            cached = (drivers, checkpoint, (*drivers, *sorted(held - set(drivers))))
            self._claim_drivers = cached
        return cached[2]

    def device_health(self, driver: str) -> list[tuple[str, bool]]:
        """(name, healthy by the applied health) of the node's devices of ``driver``."""
        return [(device.name, self.health.condition(device.driver, device.name,
                                                    device.parent)[0])
                for device in self.inventory.for_driver(driver)]

    def pools(self) -> dict[str, tuple[InventoryDevice, ...]]:
        """What to publish per driver: the inventory's devices with their health taints."""
        return {driver: tuple(map(self.health.tainted, self.inventory.for_driver(driver)))
                for driver in self.drivers}

    async def check_health(self) -> bool:
        """One health poll; returns whether a device's applied health changed. A backend
        whose health calls hardware (NVML) is asked from a thread; otherwise the sources read
        cached files and run inline."""
        if self.backends.health_blocks:
            return bool(await asyncio.to_thread(self.health.check, self.inventory))
        return bool(self.health.check(self.inventory))

    async def discover(self) -> bool:
        """Read the devices again (every backend, from a thread); returns whether anything
        changed."""
        inventory = await asyncio.to_thread(self.backends.discover, self.node)
        changed = inventory != self.inventory
        self.inventory = inventory
        return changed

    async def start(self) -> list[tuple[str, str]]:
        """Checkpoint, heartbeat, wipe, publish. Returns checkpointed claims to sync.

        The Leases are renewed *before* anything is published: the slice GC must see this
        agent alive before it sees its new slices, or it could take them for a dead agent's."""
        held = self.preparer.load()
        await self.check_health()  # published with its taints from the first slice on
        await self.start_heartbeats()
        await retrying(f"node {self.node}: deleting stale slices",
                       lambda: self.publisher.wipe(self.drivers))
        await retrying(f"node {self.node}: publishing slices",
                       lambda: self.publisher.publish(self.pools()))
        return held

    async def start_heartbeats(self) -> None:
        if not self.own_heartbeats:
            return
        for driver in self.drivers:
            beat = self._heartbeat(driver)
            acquired = False
            try:
                await retrying(f"node {self.node}: acquiring Lease {beat.name}", beat.acquire)
                acquired = True
            except ApiError as exc:  # e.g. no namespace yet: keep trying in the background
                log.warning("node %s: cannot acquire Lease %s/%s yet: %s", self.node,
                            beat.namespace, beat.name, exc)
            beat.start(acquired=acquired)
            self.heartbeats[driver] = beat

    def _heartbeat(self, driver: str) -> Heartbeat:
        return Heartbeat(self.client, namespace=self.settings.namespace, nodes=[self.node],
                         driver=driver, identity=self.identity,
                         duration=self.settings.lease_duration,
                         interval=self.settings.renew_interval)

    def sync_heartbeats(self) -> None:
        if not self.own_heartbeats:
            return
        for driver in self.drivers:
            if driver not in self.heartbeats:
                beat = self._heartbeat(driver)
                beat.start()
                self.heartbeats[driver] = beat
        for driver in set(self.heartbeats) - set(self.drivers):
            beat = self.heartbeats.pop(driver)
            task = asyncio.create_task(beat.stop(release=True))
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    async def stop(self) -> None:
        await asyncio.gather(*(beat.stop(release=True) for beat in self.heartbeats.values()))
        self.heartbeats.clear()


async def retrying(what: str, action: Callable[[], Awaitable[T]],
                   first_delay: float = 0.5, max_delay: float = 15.0) -> T:
    """``action()``, retried with capped, jittered backoff (:func:`backoff_delay`) while the
    API server is unavailable or overloaded (connection errors, 429, 5xx); other errors are
    raised."""
    failures = 0
    while True:
        try:
            return await action()
        except ApiError as exc:
            if exc.status != 429 and exc.status < 500:
                raise
            problem: Exception = exc
        except OSError as exc:
            problem = exc
        failures += 1
        delay = backoff_delay(failures, base=first_delay, cap=max_delay, rand=random.random)
        log.warning("%s failed (%s); retrying in %.1fs", what, problem, delay)
        await asyncio.sleep(delay)


async def ensure_node(client: KubeClient, node: str) -> None:
    """Create a Node object with capacity and a Ready condition (simulation: no kubelet)."""
    try:
        await client.get(NODES, node)
        return
    except NotFound:
        pass
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {
                "kubernetes.io/hostname": node, "kubernetes.io/os": "linux",
                "kdra.dev/simulated": "true"}}}
    try:
        await client.create(NODES, body)
    except Conflict:
        return
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    now = api_time()
    await client.patch(NODES, node, {"status": {
        "capacity": capacity, "allocatable": capacity,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KdraSimulatedNode",
                        "message": "simulated by kdra agent", "lastHeartbeatTime": now,
                        "lastTransitionTime": now}],
    }}, subresource="status")
    # The API server taints every new Node not-ready (TaintNodesByCondition); on a real cluster
    # the node lifecycle controller lifts it once the kubelet reports Ready. The agent is the
    # simulated node's kubelet, so it lifts it itself.
    created = await client.get(NODES, node)
    taints = [t for t in created.get("spec", {}).get("taints") or []
              if t.get("key") != "node.kubernetes.io/not-ready"]
    await client.patch(NODES, node, {"metadata": {
        "resourceVersion": created["metadata"]["resourceVersion"]},
        "spec": {"taints": taints or None}})
    log.info("created simulated Node %s", node)
