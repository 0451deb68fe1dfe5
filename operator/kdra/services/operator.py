"""The operator's composition root: one API client, the caches and the controllers.

Built once at start-up (from kopf's startup handler) and handed to the handlers through kopf's
memo; nothing here is a module global.

Invariants:
- Caches are primed from a LIST before any controller worker starts, so "not in the cache"
  means "does not exist" (or is newer than the start-up list, which a watch event fixes).
- ``stop()`` stops the workers before closing the API client.
"""

from __future__ import annotations

import logging

from kdra.domain.podclaims import CLAIMS_ANNOTATION
from kdra.kube.client import CLAIMS, PODS, TEMPLATES, KubeClient, connect
from kdra.kube.events import EventRecorder
from kdra.services.claim_controller import ClaimController, claim_store, pod_store
from kdra.services.store import Store
from kdra.settings import OperatorSettings

log = logging.getLogger(__name__)


class Operator:
    def __init__(self, settings: OperatorSettings, client: KubeClient) -> None:
        self.settings = settings
        self.client = client
        self.events = EventRecorder(client, component="kdra-operator")
        self.pods = pod_store()
        self.claims = claim_store()
        self.templates = Store("ResourceClaimTemplate")
        self.claim_controller = ClaimController(
            client, self.events, pods=self.pods, claims=self.claims, templates=self.templates,
            workers=settings.workers,
        )

    @classmethod
    async def start(cls, settings: OperatorSettings) -> Operator:
        client = await connect(settings.kubeconfig)
        operator = cls(settings, client)
        await operator.prime()
        operator.claim_controller.start()
        log.info("kdra operator started: %d pods with claims, %d claims, %d templates",
                 len(operator.pods), len(operator.claims), len(operator.templates))
        return operator

    async def prime(self) -> None:
        self.claims.prime(await self.client.list(CLAIMS))
        self.templates.prime(await self.client.list(TEMPLATES))
        self.pods.prime(
            pod for pod in await self.client.list(PODS)
            if CLAIMS_ANNOTATION in (pod["metadata"].get("annotations") or {})
        )

    async def stop(self) -> None:
        await self.claim_controller.stop()
        await self.client.close()
