"""A gang's writes: every member's claims, then every member's prepare, then every binding.

:meth:`GangWrites.start` runs the writes of a gang placed by :mod:`.gangs` in a task of the
gang's own, with the single pod's write steps (:class:`~.writes.Writes`: ``write_claim``,
``roll_back``, the prepare wait, ``device_annotations``).

Invariants:
- Every claim write carries the cached object's resourceVersion (``Writes.write_claim``).
- No member is bound before every member's claims are written and every member's devices
  let it bind (prepared, binding conditions): a failure before the first binding rolls back
  every member's writes (their reservations; allocations they made) and the whole gang is
  retried after a backoff — nothing of the gang stays held.
- The assumed allocations and in-flight claims are dropped once the writes are done or failed,
  and every member the writes did not bind goes back to the queue.
- A binding refused after others of the gang were bound (the pod deleted meanwhile) cannot be
  undone — a bound pod never comes unbound; it is logged, and the gang's remaining members
  are still bound (the gang has its devices).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from kdra.dra.models import AllocationResult, ResourceClaim
from kdra.kube.core.podclaims import PodClaim
from kdra.kube.errors import ApiError, Conflict, NotFound
from kdra.kube.store import JSON, Key
from kdra.operator import metrics
from kdra.operator.scheduler.pending import Attempt, PendingPods
from kdra.operator.scheduler.reporting import devices
from kdra.operator.scheduler.writes import PodChanged, Writes

log = logging.getLogger(__name__)


@dataclass
class GangMember:
    """One pod of a placed gang and what to write for it."""

    key: Key
    attempt: Attempt
    resolved: list[tuple[PodClaim, str, JSON]]
    parsed: Sequence[ResourceClaim]
    results: dict[str, AllocationResult]


class GangWrites:
    """The write path of gangs (see the module doc)."""

    def __init__(self, writes: Writes, pods: PendingPods) -> None:
        self.writes = writes
        self.pods = pods
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, gang: Key, members: list[GangMember]) -> None:
        task = asyncio.create_task(self.run(gang, members), name=f"gang-{gang[0]}/{gang[1]}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def run(self, gang: Key, members: list[GangMember]) -> None:
        pods = self.pods
        written = False
        prepared = False
        try:
            try:
                for member in members:
                    await self._write(member)
                written = True
            finally:
                self._settle(members)
            failures = await asyncio.gather(*(
                self.writes.prepare.wait(m.key[0], m.attempt) for m in members))
            failed = [(m, f) for m, f in zip(members, failures, strict=True) if f is not None]
            if failed:
                member, failure = failed[0]
                log.info("gang %s/%s: devices of pod %s were not prepared (%s); retrying the "
                         "gang", *gang, member.key[1], failure.message)
                await self.writes.events.warn(member.attempt.pod, "FailedPrepare",
                                              f"devices on node {member.attempt.node!r} were "
                                              f"not prepared: {failure.message}; retrying the "
                                              "whole gang")
                metrics.record_gang_attempt("prepare-failed")
            else:
                prepared = True
                for member in members:
                    await self._bind(member)
        except asyncio.CancelledError:
            raise
        except (Conflict, NotFound) as exc:
            log.info("gang %s/%s: a claim changed while allocating (%s); retrying", *gang, exc)
            metrics.record_gang_attempt("conflict")
        except (ApiError, OSError) as exc:
            log.warning("gang %s/%s: writing failed (%s); retrying", *gang, exc)
            metrics.record_gang_attempt("error")
        except Exception:
            log.exception("gang %s/%s: writing failed", *gang)
            metrics.record_gang_attempt("error")
        finally:
            if not prepared:
                for member in members:
                    await self.writes.roll_back(member.attempt, every_claim=written)
            delay = 0.0 if prepared else max(pods.backoff(m.key) for m in members)
            for member in members:
                pods.binding.pop(member.key, None)
            if delay:
                await asyncio.sleep(delay)
            for member in members:
                current = pods.pending.get(member.key)
                if current is not None and not current.get("spec", {}).get("nodeName"):
                    pods.queue.add(member.key, current)

    async def _write(self, member: GangMember) -> None:
        attempt = member.attempt
        pod = attempt.pod
        uid = pod["metadata"]["uid"]
        for (_, name, raw), claim in zip(member.resolved, member.parsed, strict=True):
            result = member.results.get(claim.key)
            if result is None and any(r.uid == uid for r in claim.status.reserved_for):
                attempt.expected[name] = (raw.get("status") or {}).get("allocation") or {}
                continue
            written = await self.writes.write_claim(raw, pod, result)
            attempt.expected[name] = written["status"]["allocation"]
            attempt.reserved_here.append(name)
            if result is not None:
                attempt.allocated_here.append(name)

    def _settle(self, members: list[GangMember]) -> None:
        """The writes are done or failed: drop the assumed allocations and in-flight claims;
        pods waiting for those claims go back to the queue."""
        pods = self.pods
        for member in members:
            for assumed in member.results:
                self.writes.snapshot.forget(assumed)
                self.writes.quotas.forget(assumed)
            for _, name, _ in member.resolved:
                claim_key = (member.key[0], name)
                if pods.in_flight.get(claim_key) == member.key:
                    del pods.in_flight[claim_key]
                for waiting in pods.waiting_for_claim.pop(claim_key, set()):
                    waiting_pod = pods.pending.get(waiting)
                    if waiting_pod is not None:
                        pods.queue.add(waiting, waiting_pod)

    async def _bind(self, member: GangMember) -> None:
        pod, node = member.attempt.pod, member.attempt.node
        namespace, name = member.key
        try:
            await self.writes.bind(member.key, pod, node, member.attempt)
        except NotFound:
            log.warning("gang pod %s/%s was deleted before its binding; the rest of its gang "
                        "is bound", namespace, name)
            return
        except PodChanged as exc:
            # Its claims stay allocated and reserved for it: its next attempt binds it there.
            log.warning("gang pod %s/%s changed before its binding (%s); the rest of its gang "
                        "is bound, it is tried again", namespace, name, exc)
            return
        pods = self.pods
        pods.remember_bound(pod["metadata"]["uid"])
        pods.failures.pop(member.key, None)
        if pods.pending.pop(member.key, None) is not None:
            metrics.set_pending_pods(len(pods.pending))
        metrics.observe_scheduled(pod, 0.0)
        held = ", ".join(devices(self.writes.claims, namespace, member.attempt)) or "none"
        await self.writes.events.normal(pod, "Scheduled", f"Successfully assigned {namespace}/"
                                        f"{name} to {node} with devices {held} (gang member)")
