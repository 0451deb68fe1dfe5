"""The DRA node service of one node: NodePrepareResources and NodeUnprepareResources, as the
kubelet calls them for every driver the agent serves there (native flavour).

Prepare, per claim the kubelet names (namespace, UID, name):

1. read the claim from the API server (``resource.k8s.io/v1``), as upstream's plugin helper
   does, and decide with :func:`kdra.agent.core.kubelet.claim_results`: a claim that is gone,
   replaced (another UID), not allocated, or whose devices of the calling driver are in
   another node's pool gets an error — this node's agent prepares only this node's devices;
2. prepare it with the agent's own :class:`~kdra.agent.prepare.Preparer` — CDI spec files,
   then the checkpoint — exactly as the kdra flavour does, without ``status.devices``;
3. answer with the CDI device IDs of the calling driver's devices (the kubelet hands them to
   the runtime for the containers that use each request).

A claim is prepared whole, for all the agent's drivers at once, whichever driver's plugin is
called first; the other drivers' calls find it prepared and get their own devices. Unprepare
removes the claim's files and checkpoint entry; a claim the node does not hold is fine.

A device still prepared for an earlier claim refuses the new one (``DeviceBusy``), unless that
claim no longer holds it — gone, replaced, deallocated or unreserved by the API server's word —
which happens when an unprepare was missed (the agent was down when the kubelet called, and
the kubelet gave up or was restarted): the earlier claim is unprepared first.

Invariants:
- Calls of every driver are serialized (one lock per node): the checkpoint has one writer at a
  time, as the kdra flavour's work queue guarantees there.
- Prepare and unprepare are idempotent: a prepared claim answers its recorded devices (its CDI
  files rewritten if someone deleted them), an unknown claim unprepares successfully.
- Every claim the kubelet names gets exactly one answer (the same UID twice: one), at most
  :data:`~kdra.agent.core.kubelet.MAX_CLAIMS` per call are worked on, and an error never
  escapes as an exception: it is that claim's answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from kdra.agent.core.checkpoint import ClaimRef
from kdra.agent.core.kubelet import MAX_CLAIMS, Claim, ClaimResult, claim_results, kubelet_devices
from kdra.agent.core.node_accounting import clashes
from kdra.agent.core.nodeprep import Result, admin_requests, busy_devices, still_holds
from kdra.agent.prepare import Preparer
from kdra.kube.errors import ApiError
from kdra.kube.store import JSON

log = logging.getLogger(__name__)

ReadClaim = Callable[[str, str], Awaitable[JSON | None]]
"""(namespace, name) → the claim as the API server has it now; None: not found. Raises
:class:`~kdra.kube.errors.ApiError` or ``OSError`` when the server cannot say."""


class KubeletService:
    """The kubelet's DRA calls for node ``node`` (see the module docstring)."""

    def __init__(self, node: str, preparer: Preparer, read_claim: ReadClaim,
                 drivers: Callable[[], Sequence[str]]) -> None:
        self.node = node
        self.preparer = preparer
        self.read_claim = read_claim
        self.drivers = drivers
        self._lock = asyncio.Lock()

    async def prepare(self, driver: str, claims: Sequence[Claim]) -> dict[str, ClaimResult]:
        answers: dict[str, ClaimResult] = {}
        for index, ref in enumerate(claims):
            if ref.uid in answers:
                continue
            if index >= MAX_CLAIMS:
                answers[ref.uid] = ClaimResult(error=f"more than {MAX_CLAIMS} claims in one "
                                                     "call: call again with fewer")
                continue
            try:
                answers[ref.uid] = await self._prepare(driver, ref)
            except Exception as exc:  # this claim's answer, never the whole call's
                log.exception("node %s: preparing claim %s for the kubelet failed", self.node,
                              ref.key)
                answers[ref.uid] = ClaimResult(error=f"preparing ResourceClaim {ref.key} "
                                                     f"failed: {exc}")
        return answers

    async def _prepare(self, driver: str, ref: Claim) -> ClaimResult:
        try:
            claim = await self.read_claim(ref.namespace, ref.name)
        except (ApiError, OSError) as exc:
            return ClaimResult(error=f"cannot read ResourceClaim {ref.key}: {exc}")
        decided = claim_results(claim, ref, node=self.node, driver=driver,
                                drivers=self.drivers())
        if isinstance(decided, str):
            log.warning("node %s: driver %s: not preparing claim %s (%s): %s", self.node,
                        driver, ref.key, ref.uid, decided)
            return ClaimResult(error=decided)
        assert claim is not None
        async with self._lock:
            entry = self.preparer.checkpoint.claims.get(ref.uid)
            if entry is None or entry.state != "prepared":
                await self._release_stale(claim, decided)
            outcomes = await self.preparer.prepare(claim, decided)
            entry = self.preparer.checkpoint.claims.get(ref.uid)
        failed = [o for o in outcomes if not o.ready]
        if failed or entry is None:
            return ClaimResult(error=f"cannot prepare ResourceClaim {ref.key} on node "
                                     f"{self.node}: " + "; ".join(
                                         f"{o.device}: {o.message}" for o in failed))
        return ClaimResult(devices=kubelet_devices(entry.devices, driver))

    async def _release_stale(self, claim: JSON, results: list[Result]) -> None:
        """Unprepare earlier claims that still hold devices ``results`` need but no longer
        hold them by the API server (their unprepare was missed)."""
        ref = ClaimRef.of(claim)
        checkpoint = self.preparer.checkpoint
        holders = {busy.uid: busy for key, busy in busy_devices(checkpoint, ref.uid).items()
                   if key in {r.key for r in results}}
        for clash in clashes(checkpoint, ref.uid, results, self.preparer.inventory(),
                             admin_requests(claim)).values():
            holders.update({holder.uid: holder for holder in clash.holders})
        drivers = list(self.drivers())
        for holder in holders.values():
            entry = self.preparer.checkpoint.claims.get(holder.uid)
            if entry is None:
                continue
            try:
                current = await self.read_claim(holder.namespace, holder.name)
            except (ApiError, OSError) as exc:
                log.warning("node %s: cannot read claim %s, which holds devices claim %s "
                            "needs: %s", self.node, holder.key, ref.key, exc)
                continue
            if any(still_holds(current, holder, device.key, self.node, drivers)
                   for device in entry.devices):
                continue
            log.warning("node %s: claim %s (%s) no longer holds its devices but was never "
                        "unprepared (missed NodeUnprepareResources); unpreparing it for claim "
                        "%s", self.node, holder.key, holder.uid, ref.key)
            await self.preparer.unprepare(entry, None)

    async def unprepare(self, driver: str, claims: Sequence[Claim]) -> dict[str, str]:
        errors: dict[str, str] = {}
        for index, ref in enumerate(claims):
            if ref.uid in errors:
                continue
            if index >= MAX_CLAIMS:
                errors[ref.uid] = f"more than {MAX_CLAIMS} claims in one call"
                continue
            errors[ref.uid] = ""
            async with self._lock:
                entry = self.preparer.checkpoint.claims.get(ref.uid)
                if entry is None:
                    continue
                try:
                    await self.preparer.unprepare(entry, None)
                except Exception as exc:
                    log.exception("node %s: unpreparing claim %s for the kubelet failed",
                                  self.node, ref.key)
                    errors[ref.uid] = f"unpreparing ResourceClaim {ref.key} failed: {exc}"
        return errors
