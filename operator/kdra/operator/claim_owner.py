"""Who runs the claim lifecycle on the built-in kinds: kdra's claim controller, or
kube-controller-manager's ``resourceclaim-controller`` (``--claim-controller=auto|on|off``).

kdra's claim controller is the drop-in replacement of that controller, which is meant to be
turned off (``--controllers=*,-resourceclaim-controller``: the local control plane, kind,
kubeadm). A managed cluster cannot turn it off; two controllers generating claims for the
same pods would race (each creates a claim and records its own name). So, where the flavour's
objects may be served by upstream's controllers (the native flavour):

- ``on``: kdra's controller runs; ``off``: it leaves generation and clean-up to
  kube-controller-manager's;
- ``auto`` (the default): kdra's runs unless kube-controller-manager's is seen running —
  at start-up, its ServiceAccount ``kube-system/resource-claim-controller`` exists
  (kube-controller-manager creates it when it starts that controller with
  ``--use-service-account-credentials``, as kubeadm, kind and the managed offerings do); or
  later, a generated claim appears that kdra did not create: created after kdra's controller
  started, unknown to it, and written by no kdra field manager (its ``managedFields``, read
  with one GET, and only for such a claim). Either way kdra says so once — a warning in its
  log, the gauge ``kdra_resourceclaim_controller_deferred`` at 1 with the reason — and
  leaves the lifecycle from then on. kdra-scheduler's allocations stay releasable: they carry
  upstream's finalizer, which upstream's controller clears when it deallocates.

Invariants:
- Deferral is one way for the life of the process (a restart asks again) and never happens
  with ``on`` or in the kdra flavour.
- A candidate claim is judged only after :data:`SETTLE` seconds, against the controller's own
  record of what it created (the watch event of a claim kdra just created may arrive before
  the answer to its create): so kdra's own claims cost no request, and at most
  :data:`MAX_CHECKS` GETs are spent before kdra stops looking.
- An API error while looking (403 for the ServiceAccount, say) is logged and reads as "not
  seen": kdra runs its controller, as ``on`` would.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable

from kdra.dra.timestamps import parse_time
from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import Flavour
from kdra.kube.errors import ApiError, NotFound
from kdra.kube.resources import SERVICE_ACCOUNTS
from kdra.kube.store import JSON, key_of
from kdra.operator import metrics

__all__ = ["MODES", "SERVICE_ACCOUNT", "ClaimOwner"]

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
SERVICE_ACCOUNT = ("kube-system", "resource-claim-controller")
"""kube-controller-manager's identity for its resourceclaim-controller."""
SETTLE = 2.0
"""Seconds before a candidate claim is judged (the answer to kdra's own create is in)."""
MAX_CHECKS = 32
"""GETs spent on candidate claims before kdra stops looking."""
KDRA_MANAGER = "kdra"
"""Field managers of kdra's processes start with this (``kdra-operator``...)."""


class ClaimOwner:
    """kdra's or upstream's claim controller (see the module doc). :meth:`start` decides at
    start-up; :meth:`on_claim` watches for another controller's claims; :attr:`deferred` is
    the reason kdra leaves the lifecycle (None: kdra runs it)."""

    def __init__(self, client: KubeClient, flavour: Flavour, mode: str = "auto", *,
                 created_here: Callable[[JSON], bool] = lambda claim: False,
                 settle: float = SETTLE) -> None:
        if mode not in MODES:
            raise ValueError(f"claim controller {mode!r} (--claim-controller) is not one of "
                             f"{', '.join(MODES)}")
        self.client = client
        self.flavour = flavour
        self.mode = mode if flavour.upstream_controllers else "on"
        self.created_here = created_here
        """Whether kdra's controller created this claim (its own record)."""
        self.settle = settle
        self.deferred: str | None = None
        self.started = dt.datetime.now(dt.UTC)
        self._checks = 0
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def watching(self) -> bool:
        """Still looking for another controller's claims."""
        return self.mode == "auto" and self.deferred is None and self._checks < MAX_CHECKS

    async def start(self) -> None:
        """Decide at start-up (``off``; ``auto`` with upstream's ServiceAccount present)."""
        self.started = dt.datetime.now(dt.UTC)
        metrics.set_claim_controller_deferred(False)
        if self.mode == "off":
            self.defer("--claim-controller=off")
        elif self.mode == "auto":
            namespace, name = SERVICE_ACCOUNT
            try:
                await self.client.get(SERVICE_ACCOUNTS, name, namespace)
            except NotFound:
                return
            except (ApiError, OSError) as exc:
                log.warning("cannot tell whether kube-controller-manager's "
                            "resourceclaim-controller runs (reading ServiceAccount %s/%s: %s); "
                            "kdra's claim controller runs", namespace, name, exc)
                return
            self.defer(f"its ServiceAccount {namespace}/{name} exists")

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def defer(self, reason: str) -> None:
        """Leave claim generation and clean-up to kube-controller-manager's controller (said
        once)."""
        if self.deferred is not None:
            return
        self.deferred = reason
        log.warning("kube-controller-manager's resourceclaim-controller serves pods' claims "
                    "(%s): kdra's claim controller leaves claim generation and clean-up to it "
                    "(--claim-controller=on to run kdra's; turn the other off with "
                    "kube-controller-manager --controllers=*,-resourceclaim-controller)", reason)
        metrics.set_claim_controller_deferred(True)

    # ------------------------------------------------------------------ watching

    def on_claim(self, event_type: str | None, claim: JSON) -> None:
        """A claim event: a generated claim born since start-up that kdra may not have made
        is judged after :data:`SETTLE` seconds."""
        if event_type != "ADDED" or not self.watching or not self._candidate(claim):
            return
        task = asyncio.create_task(self._judge(claim), name="claim-owner-check")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _candidate(self, claim: JSON) -> bool:
        if self.flavour.generated_for(claim) is None:
            return False
        born = parse_time((claim.get("metadata") or {}).get("creationTimestamp"))
        return born is not None and born >= self.started.replace(microsecond=0)

    async def _judge(self, claim: JSON) -> None:
        await asyncio.sleep(self.settle)
        if not self.watching or self.created_here(claim):
            return
        self._checks += 1
        namespace, name = key_of(claim)
        try:
            managers = await self.client.managers(self.flavour.claims, name, namespace)
        except (ApiError, OSError) as exc:
            log.debug("claim %s/%s: who created it is unknown (%s)", namespace, name, exc)
            return
        if managers and not any(m.startswith(KDRA_MANAGER) for m in managers):
            self.defer(f"claim {namespace}/{name} was generated by "
                       f"{', '.join(sorted(managers))}, not by kdra")
