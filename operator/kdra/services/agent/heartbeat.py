"""The node agent's heartbeat: one ``coordination.k8s.io/v1`` Lease per node and driver.

The operator's slice garbage collector reads these Leases: while a Lease is renewed, the
agent is alive and its slices are trusted; when it stays expired beyond a grace period, the
agent is gone ("de-registered", in kubelet's words) and its slices are deleted.

Invariants:
- The Lease lives in the system namespace, is named ``kdra-agent-<node>-<driver-dashed>``,
  carries the label ``resource.kdra.dev/agent-lease=true`` and annotations naming its node
  and driver, and holds this agent's identity.
- :meth:`Heartbeat.release` (graceful shutdown) sets ``renewTime`` back by the lease duration:
  the Lease is expired at once, but the collector still waits the grace period, so an agent
  that restarts (a rolling update) keeps its slices.
- A failed renewal is logged and retried at the next tick; it never stops the agent.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

from kdra.domain.inventory import (
    AGENT_LEASE_LABEL,
    LEASE_DRIVER_ANNOTATION,
    LEASE_NODE_ANNOTATION,
    lease_name,
)
from kdra.domain.timestamps import micro_time
from kdra.kube.client import LEASES, ApiError, Conflict, KubeClient, NotFound
from kdra.services.store import JSON

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, client: KubeClient, *, namespace: str, node: str, driver: str,
                 identity: str, duration: int, interval: float) -> None:
        self.client = client
        self.namespace = namespace
        self.node = node
        self.driver = driver
        self.identity = identity
        self.duration = duration
        self.interval = interval
        self.name = lease_name(node, driver)
        self._task: asyncio.Task[None] | None = None
        self._failing = False

    def _body(self, now: str, acquired: str, transitions: int) -> JSON:
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {
                "name": self.name, "namespace": self.namespace,
                "labels": {AGENT_LEASE_LABEL: "true"},
                "annotations": {LEASE_NODE_ANNOTATION: self.node,
                                LEASE_DRIVER_ANNOTATION: self.driver},
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
        patch = {"metadata": {"labels": {AGENT_LEASE_LABEL: "true"}},
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
            log.warning("node %s: releasing Lease %s failed: %s", self.node, self.name, exc)

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
                    log.info("node %s: Lease %s renewed again", self.node, self.name)
                self._failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a heartbeat must keep beating
                if not self._failing:
                    log.warning("node %s: renewing Lease %s/%s failed: %s", self.node,
                                self.namespace, self.name, exc)
                self._failing = True
            await asyncio.sleep(self.interval)
