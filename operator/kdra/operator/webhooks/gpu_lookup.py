"""Which of a pod's claims may get GPUs, for the mutating webhook (``NVIDIA_VISIBLE_DEVICES``).

The webhook runs when the pod is created, long before anything is allocated, so it can only
ask what each claim *could* get: the claim's (or template's) requests name DeviceClasses,
and a class whose selectors pin another driver can never give a GPU
(:func:`kdra.operator.core.admission.class_may_select`). The pod's containers that consume only such
claims get no ``NVIDIA_VISIBLE_DEVICES`` at all (the seed's cats used to get an empty one).

On the way it notes the entries that name (``resourceClaimName``) a claim generated for
another pod (:attr:`GpuClaimLookup.foreign`): such a claim serves only that pod (upstream's
IsForPod), and a pod being created can never be it, so the webhook denies the pod.

Invariants:
- Fails towards the variable: a claim, template or class that cannot be read (not created
  yet, an API error, a timeout) counts as "may get GPUs". Leaving the variable out of a
  container that then gets a GPU would hide the GPU from it; an unneeded empty one does no harm.
- Bounded: at most ``MAX_LOOKUPS`` GETs per pod (each object once) within ``TIMEOUT``
  seconds, well inside the webhook's own 5-s timeout; the webhook server answers on time
  whatever the API server does.
- Stateless (every replica serves the webhook, standbys too): nothing is cached across pods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from kdra.dra.errors import InvalidObject
from kdra.kube.client import KubeClient
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import PodClaim
from kdra.kube.errors import ApiError
from kdra.operator.core import admission

TIMEOUT = 2.0
"""Seconds for all of one pod's lookups."""
MAX_LOOKUPS = 16
"""GETs per pod at most; past it the remaining claims count as "may get GPUs"."""


class GpuClaimLookup:
    def __init__(self, client: KubeClient, flavour: Flavour = KDRA) -> None:
        self.client = client
        self.flavour = flavour
        """Where the pod's claims are and where claims, templates and classes live."""
        self.foreign: dict[str, tuple[str, str]] = {}
        """Entry name → (claim, pod it was generated for), for the claims read that a pod
        being created may not use (filled by :meth:`gpu_claims`)."""

    async def gpu_claims(self, body: Any) -> frozenset[str] | None:
        """Names of the claim entries of the AdmissionReview's pod that may get GPUs; None
        when the pod cannot be read (the webhook then treats every entry so)."""
        found = self._pod_claims(body)
        if found is None:
            return None
        namespace, entries = found
        budget = _Budget(MAX_LOOKUPS)
        try:
            async with asyncio.timeout(TIMEOUT):
                return frozenset([entry.name for entry in entries
                                  if await self._may_get_gpus(namespace, entry, budget)])
        except TimeoutError:
            return None

    async def foreign_claims(self, body: Any) -> dict[str, tuple[str, str]]:
        """Only the check of :attr:`foreign` (no classes read): entry name → (claim, the pod
        it was generated for) for the AdmissionReview's pod being created; bounded as
        :meth:`gpu_claims` (a claim that cannot be read counts as not foreign: the scheduler
        refuses it all the same)."""
        found = self._pod_claims(body)
        if found is None:
            return {}
        namespace, entries = found
        budget = _Budget(MAX_LOOKUPS)
        try:
            async with asyncio.timeout(TIMEOUT):
                for entry in entries:
                    if entry.resource_claim_name:
                        self._note_foreign(entry, await budget.get(
                            self.client, self.flavour.claims, entry.resource_claim_name,
                            namespace))
        except TimeoutError:
            pass
        return dict(self.foreign)

    def _pod_claims(self, body: Any) -> tuple[str, tuple[PodClaim, ...]] | None:
        """(namespace, claims) of the pod an AdmissionReview creates; None when there is none
        or its claims do not parse."""
        request = body.get("request") if isinstance(body, Mapping) else None
        if not isinstance(request, Mapping) or request.get("operation") != "CREATE":
            return None
        pod = request.get("object")
        if not isinstance(pod, Mapping):
            return None
        namespace = request.get("namespace") or (pod.get("metadata") or {}).get("namespace")
        try:
            entries = self.flavour.pod_claims(pod)
        except InvalidObject:
            return None
        if not isinstance(namespace, str) or not namespace:
            return None
        return namespace, entries

    def _note_foreign(self, entry: PodClaim, claim: dict[str, Any] | None) -> None:
        owner = self.flavour.generated_for(claim) if claim is not None else None
        if owner is not None and entry.resource_claim_name:  # a pod being created owns nothing
            self.foreign[entry.name] = (entry.resource_claim_name, str(owner.get("name")))

    async def _may_get_gpus(self, namespace: str, entry: PodClaim, budget: _Budget) -> bool:
        if entry.extended is not None:  # a generated extended-resource claim: its classes
            return await self._classes_may_get_gpus(
                [r.device_class for r in entry.extended], budget)
        if entry.resource_claim_template_name:
            template = await budget.get(self.client, self.flavour.templates,
                                        entry.resource_claim_template_name, namespace)
            spec = (template or {}).get("spec")
            claim_spec = spec.get("spec") if isinstance(spec, Mapping) else None
        elif entry.resource_claim_name:
            claim = await budget.get(self.client, self.flavour.claims,
                                     entry.resource_claim_name, namespace)
            claim_spec = (claim or {}).get("spec")
            self._note_foreign(entry, claim)
        else:
            return True
        classes = admission.claim_request_classes(claim_spec, entry.request)
        if classes is None:
            return True
        return await self._classes_may_get_gpus(classes, budget)

    async def _classes_may_get_gpus(self, classes: Iterable[str], budget: _Budget) -> bool:
        for name in classes:
            device_class = await budget.get(self.client, self.flavour.classes, name)
            if admission.class_may_select(device_class):
                return True
        return False


class _Budget:
    """GETs for one pod: each object read once, at most ``limit`` reads."""

    def __init__(self, limit: int) -> None:
        self.left = limit
        self.seen: dict[tuple[str, str, str | None], dict[str, Any] | None] = {}

    async def get(self, client: KubeClient, resource: Any, name: str,
                  namespace: str | None = None) -> dict[str, Any] | None:
        """The object, or None when it cannot be read (missing, error, budget spent)."""
        key = (resource.plural, name, namespace)
        if key in self.seen:
            return self.seen[key]
        found: dict[str, Any] | None = None
        if self.left > 0:
            self.left -= 1
            try:
                found = dict(await client.get(resource, name, namespace))
            except (ApiError, OSError, ValueError):
                found = None
        self.seen[key] = found
        return found
