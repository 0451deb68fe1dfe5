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
  later, a pod's ``status.resourceClaimStatuses`` records a generated claim born since
  kdra's controller started that kdra did not create. Only a cluster component may write a
  pod's status (namespace users may not: the ``edit`` role has no ``pods/status``), and
  claims are recorded there by upstream's controller alone; a claim made to *look* generated
  (its annotation and owner reference are a user's to write) is no evidence, so no user can
  switch kdra's controller off. Either way kdra says so once — a warning in its log, the
  gauge ``kdra_resourceclaim_controller_deferred`` at 1 — and leaves the lifecycle from then
  on. kdra-scheduler's allocations stay releasable: they carry upstream's finalizer, which
  upstream's controller clears when it deallocates.

Invariants:
- Deferral is one way for the life of the process (a restart asks again) and never happens
  with ``on`` or in the kdra flavour.
- A recorded claim is judged against the controller's own record of what it created
  (:class:`~kdra.operator.core.claim_births.Births`, written before kdra records a claim),
  and only if born more than :data:`MARGIN` seconds after start-up (a previous replica's
  claims are not another controller's): no request is spent on it.
- An API error while looking for the ServiceAccount (403, say) is logged and reads as "not
  seen": kdra runs its controller, as ``on`` would.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

from kdra.dra.timestamps import parse_time
from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import Flavour
from kdra.kube.core.native_pods import CLAIM_CONTROLLER_ACCOUNT
from kdra.kube.errors import ApiError, NotFound
from kdra.kube.resources import SERVICE_ACCOUNTS
from kdra.kube.store import JSON, key_of
from kdra.operator import metrics

__all__ = ["MODES", "SERVICE_ACCOUNT", "ClaimOwner"]

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
SERVICE_ACCOUNT = CLAIM_CONTROLLER_ACCOUNT
"""kube-controller-manager's identity for its resourceclaim-controller."""
MARGIN = 30.0
"""Seconds after start-up before a recorded claim counts: a claim born earlier may be a
previous kdra replica's (creation times are the API server's clock, start-up this
process's)."""


class ClaimOwner:
    """kdra's or upstream's claim controller (see the module doc). :meth:`start` decides at
    start-up; :meth:`on_recorded` hears of claims pods' records name; :attr:`deferred` is
    the reason kdra leaves the lifecycle (None: kdra runs it)."""

    def __init__(self, client: KubeClient, flavour: Flavour, mode: str = "auto", *,
                 created_here: Callable[[JSON], bool] = lambda claim: False,
                 margin: float = MARGIN) -> None:
        if mode not in MODES:
            raise ValueError(f"claim controller {mode!r} (--claim-controller) is not one of "
                             f"{', '.join(MODES)}")
        self.client = client
        self.flavour = flavour
        self.mode = mode if flavour.upstream_controllers else "on"
        self.created_here = created_here
        """Whether kdra's controller created this claim (its own record)."""
        self.margin = margin
        self.deferred: str | None = None
        self.started = dt.datetime.now(dt.UTC)

    @property
    def watching(self) -> bool:
        """Still looking for another controller's claims."""
        return self.mode == "auto" and self.deferred is None

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

    def on_recorded(self, claim: JSON) -> None:
        """A pod's record (``status.resourceClaimStatuses``) names ``claim``, generated for
        it: one born well after start-up that kdra did not create means another controller
        records claims. (kdra notes each claim it creates before it records it, so its own
        are known here; no request is made.)"""
        if self.watching and self._born_after_start(claim) and not self.created_here(claim):
            namespace, name = key_of(claim)
            self.defer(f"pods' claims are recorded by another controller: claim "
                       f"{namespace}/{name} was generated by someone else")

    def _born_after_start(self, claim: JSON) -> bool:
        if self.flavour.generated_for(claim) is None:
            return False
        born = parse_time((claim.get("metadata") or {}).get("creationTimestamp"))
        return born is not None and born > self.started + dt.timedelta(seconds=self.margin)
