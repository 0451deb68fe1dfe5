"""The node agent's heartbeat: one ``coordination.k8s.io/v1`` Lease per node and driver, or
one per driver for an agent process serving many (simulated) nodes.

The operator's slice garbage collector reads these Leases: while a Lease is renewed, the
agent is alive and its slices are trusted; when it stays expired beyond a grace period, the
agent is gone ("de-registered", in kubelet's words) and its slices are deleted.

Invariants:
- The Lease lives in the system namespace, is named ``kdra-agent-<node>-<driver-dashed>``
  (one node) or ``kdra-agent-nodes-<digest of the nodes>-<driver-dashed>`` (many: one write
  per renewal instead of one per node — 50 writes/s for 500 simulated nodes otherwise),
  carries the label ``resource.kdra.dev/agent-lease=true`` and annotations naming its
  node(s) and driver, and holds this agent's identity.
- :meth:`Heartbeat.release` (graceful shutdown) sets ``renewTime`` back by the lease duration:
  the Lease is expired at once, but the collector still waits the grace period, so an agent
  that restarts (a rolling update) keeps its slices.
- A failed renewal is logged and retried at the next tick; it never stops the agent.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Sequence

from kdra.dra.timestamps import micro_time
from kdra.kube.client import KubeClient
from kdra.kube.core.agent_leases import (
    AGENT_LEASE_LABEL,
    LEASE_DRIVER_ANNOTATION,
    LEASE_NODE_ANNOTATION,
    LEASE_NODES_ANNOTATION,
    lease_name,
    shared_lease_name,
)
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.resources import LEASES
from kdra.kube.store import JSON

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, client: KubeClient, *, namespace: str, nodes: Sequence[str],
                 driver: str, identity: str, duration: int, interval: float,
                 shared_by: Sequence[str] | None = None) -> None:
        """``shared_by``: every node of a process serving many, whose one Lease this is
        (named after all of them, so it keeps its name when the nodes publishing ``driver``
        change); ``nodes`` are those it vouches for now."""
        self.client = client
        self.namespace = namespace
        self.driver = driver
        self.identity = identity
        self.duration = duration
        self.interval = interval
        self.shared = shared_by is not None
        self.name = (shared_lease_name(shared_by, driver) if shared_by is not None
                     else lease_name(nodes[0], driver))
        self.vouch_for(nodes)

    def vouch_for(self, nodes: Sequence[str]) -> None:
        """The nodes the Lease names (from the next renewal on)."""
        assert nodes and (self.shared or len(nodes) == 1)
        self.nodes = tuple(nodes)
        if self.shared:
            self.who = f"{len(self.nodes)} nodes"  # for log lines
            self._pools = {LEASE_NODES_ANNOTATION: ",".join(self.nodes)}
        else:
            self.who = f"node {self.nodes[0]}"
            self._pools = {LEASE_NODE_ANNOTATION: self.nodes[0]}
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def _body(self, now: str, acquired: str, transitions: int) -> JSON:
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {
                "name": self.name, "namespace": self.namespace,
                "labels": {AGENT_LEASE_LABEL: "true"},
                "annotations": {**self._pools, LEASE_DRIVER_ANNOTATION: self.driver},
            },
            "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": self.duration,
                     "acquireTime": acquired, "renewTime": now,
                     "leaseTransitions": transitions},
        }

    async def acquire(self) -> None:
        """Create the Lease, or take it over (a restarted agent has a new identity)."""
        now = micro_time()
        try:
            await self.client.create(LEASES, self._body(now, now, 0), self.namespace)
            return
        except Conflict as exc:
            if not exc.already_exists:
                raise
        for _ in range(5):
            current = await self.client.get(LEASES, self.name, self.namespace)
            spec = current.get("spec") or {}
            transitions = int(spec.get("leaseTransitions") or 0)
            if spec.get("holderIdentity") != self.identity:
                transitions += 1
            body = self._body(now, now, transitions)
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                await self.client.replace(LEASES, body)
                return
            except Conflict:
                continue

    async def renew(self) -> None:
        patch = {"metadata": {"labels": {AGENT_LEASE_LABEL: "true"},
                              "annotations": self._pools},
                 "spec": {"holderIdentity": self.identity, "renewTime": micro_time(),
                          "leaseDurationSeconds": self.duration}}
        try:
            await self.client.patch(LEASES, self.name, patch, self.namespace)
        except NotFound:
            await self.acquire()

    async def release(self) -> None:
        """Expire the Lease now (graceful shutdown); the collector's grace period still runs."""
        past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=self.duration)
        try:
            await self.client.patch(LEASES, self.name, {"spec": {"renewTime": micro_time(past)}},
                                    self.namespace)
        except (ApiError, OSError) as exc:
            log.warning("%s: releasing Lease %s failed: %s", self.who, self.name, exc)

    def start(self, acquired: bool = False) -> None:
        """Renew in the background (acquiring first unless ``acquired``)."""
        self._task = asyncio.create_task(self._loop(acquired), name=f"heartbeat-{self.name}")

    async def stop(self, release: bool = True) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if release:
            await self.release()

    async def _loop(self, acquired: bool) -> None:
        while True:
            try:
                if acquired:
                    await self.renew()
                else:
                    await self.acquire()
                    acquired = True
                if self._failing:
                    log.info("%s: Lease %s renewed again", self.who, self.name)
                self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a heartbeat must keep beating
                if not self._failing:
                    log.warning("%s: renewing Lease %s/%s failed: %s", self.who,
                                self.namespace, self.name, exc)
                self._failing = True
            await asyncio.sleep(self.interval)
