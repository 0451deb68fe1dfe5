"""Leader election for operator replicas, on a ``coordination.k8s.io/v1`` Lease.

Only the leader runs kdra's controllers (claim controller, binder, slice GC); a standby replica
blocks in :meth:`LeaderElector.acquire` — inside kopf's startup activity, so kopf starts no
watches either — until the leader's Lease expires. The scheme is client-go's: the holder renews
``renewTime`` every ``renew_interval``; anyone may take a Lease whose ``renewTime`` is older
than ``leaseDurationSeconds``.

Invariants:
- Every take-over and renewal is an update with the Lease's resourceVersion: of two replicas
  racing for an expired Lease exactly one wins (the other gets Conflict and stays standby).
- A leader that cannot renew for a whole lease duration calls ``on_lost`` (the operator then
  stops itself) before anyone else may take over; a leader that finds another holder in the
  Lease calls ``on_lost`` at once.
- Releasing (graceful shutdown) empties ``holderIdentity`` so a standby takes over without
  waiting for the lease to expire.
- A standby honours at most :func:`honoured_duration` seconds of another holder's lease (four
  times its own lease duration, at least 60 s), counted from the Lease's ``renewTime`` or
  from when this replica last saw the Lease change, whichever is earlier (client-go measures
  from the latter: it also covers a ``renewTime`` in the future). A Lease written with an
  absurd duration (2e9 s) or a renewal time years ahead — by anything but a live replica,
  which renews every third of the duration — keeps a standby waiting that long, not forever.
  The replicas of one Deployment share the duration, so a live leader is never taken over
  early.
- Whatever kdra does, allocations stay safe without this (resourceVersion preconditions);
  election avoids duplicate work and conflicting retries.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable

from kdra.dra.timestamps import micro_time, now, parse_time
from kdra.kube.client import KubeClient
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.resources import LEASES

log = logging.getLogger(__name__)


def honoured_duration(lease_duration: float) -> float:
    """The most seconds of another holder's Lease a replica waits for (see the module doc)."""
    return max(60.0, 4 * lease_duration)


class LeaderElector:
    def __init__(self, client: KubeClient, *, namespace: str, name: str, identity: str,
                 lease_duration: float = 15.0, renew_interval: float = 5.0) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_interval = renew_interval
        self._lease: dict[str, object] | None = None
        self._renewed = now()
        self._seen: tuple[object, float] | None = None
        """The Lease as last read (what changes on every renewal), and when it was first
        read like that (monotonic)."""

    def _spec(self, acquire: bool, transitions: int) -> dict[str, object]:
        now = micro_time()
        spec: dict[str, object] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        if acquire:
            spec["acquireTime"] = now
        return spec

    async def try_acquire(self) -> bool:
        """One attempt: True when this replica holds the Lease afterwards."""
        try:
            lease = await self.client.get(LEASES, self.name, self.namespace)
        except NotFound:
            try:
                self._lease = await self.client.create(LEASES, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(acquire=True, transitions=0),
                }, self.namespace)
            except Conflict:
                return False
            self._renewed = now()
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        renewed = parse_time(spec.get("renewTime")) or dt.datetime.min.replace(tzinfo=dt.UTC)
        try:
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        except (TypeError, ValueError):
            duration = self.lease_duration
        duration = min(duration, honoured_duration(self.lease_duration))
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"),
                  (lease.get("metadata") or {}).get("resourceVersion"))
        if self._seen is None or self._seen[0] != record:
            self._seen = (record, time.monotonic())
        unchanged = time.monotonic() - self._seen[1]
        expired = (now() - renewed > dt.timedelta(seconds=duration)
                   or unchanged > duration)
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0) + (holder != self.identity)
        lease["spec"] = self._spec(acquire=holder != self.identity, transitions=transitions)
        try:
            self._lease = await self.client.replace(LEASES, lease)
        except Conflict:
            return False
        self._renewed = now()
        return True

    async def acquire(self) -> None:
        """Block until this replica is the leader."""
        announced = False
        while True:
            try:
                if await self.try_acquire():
                    log.info("leader election: %s leads (Lease %s/%s)", self.identity,
                             self.namespace, self.name)
                    return
            except (ApiError, OSError) as exc:
                log.warning("leader election: %s", exc)
            if not announced:
                log.info("leader election: standing by; another replica holds Lease %s/%s",
                         self.namespace, self.name)
                announced = True
            await asyncio.sleep(self.renew_interval)

    async def keep(self, on_lost: Callable[[str], None]) -> None:
        """Renew the Lease until cancelled; call ``on_lost(reason)`` once leadership is gone."""
        while True:
            await asyncio.sleep(self.renew_interval)
            lease = self._lease
            try:
                if lease is None:
                    raise NotFound(404, "NotFound", "lease not held")
                lease["spec"] = {**lease.get("spec", {}),  # type: ignore[dict-item]
                                 "renewTime": micro_time()}
                self._lease = await self.client.replace(LEASES, lease)
                self._renewed = now()
                continue
            except (Conflict, NotFound):
                # Someone changed the Lease: look whether it is still ours.
                try:
                    if await self.try_acquire():
                        continue
                except (ApiError, OSError):
                    pass
                on_lost(f"Lease {self.namespace}/{self.name} is held by another replica")
                return
            except (ApiError, OSError) as exc:
                log.warning("leader election: renewing failed: %s", exc)
            if now() - self._renewed > dt.timedelta(seconds=self.lease_duration):
                on_lost(f"could not renew Lease {self.namespace}/{self.name} for "
                        f"{self.lease_duration:.0f}s")
                return

    async def release(self) -> None:
        """Empty ``holderIdentity`` so a standby takes over at once. A renewal cancelled in
        flight (shutdown cancels :meth:`keep`) may still have reached the server, making the
        Lease we hold stale: on Conflict, read it again and release it if it is still ours."""
        lease, self._lease = self._lease, None
        if lease is None:
            return
        for _ in range(3):
            lease["spec"] = {**lease.get("spec", {}),  # type: ignore[dict-item]
                             "holderIdentity": ""}
            try:
                await self.client.replace(LEASES, lease)
                return
            except Conflict:
                try:
                    lease = await self.client.get(LEASES, self.name, self.namespace)
                except (ApiError, OSError) as exc:
                    log.info("leader election: release failed (the Lease will expire): %s", exc)
                    return
                spec = lease.get("spec")
                if not isinstance(spec, dict) or spec.get("holderIdentity") != self.identity:
                    return  # taken over already
            except (ApiError, OSError) as exc:
                log.info("leader election: release failed (the Lease will expire): %s", exc)
                return
        log.info("leader election: release failed (the Lease kept changing; it will expire)")
