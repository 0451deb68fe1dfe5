"""kopf wiring of the operator: its lifecycle.

kopf starts and stops the operator (kdra.services.operator), serves the liveness endpoint and
retries a failed start. Every kind kdra watches — pods, claims, slices, nodes, the node
agents' heartbeat Leases, and the rare kinds, DeviceClasses and ResourceClaimTemplates — is
watched by the operator's own informers (kdra.services.informer), which skip kopf's per-event
machinery and survive an object they cannot decode (a kopf watch would replay it forever).
Every handler is ``async``: kopf runs sync handlers in a thread pool, and the services' caches
and queues belong to the event loop.
"""

from __future__ import annotations

import random
from typing import Any

import kopf

from kdra.domain.backoff import Backoffs
from kdra.services.operator import Operator
from kdra.settings import OperatorSettings


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ours: OperatorSettings = memo.kdra_settings
    settings.posting.enabled = False  # kdra writes its own, deduplicated events
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    # kopf's own API retries (its rare-kind watches): capped, jittered, like kdra's own loops.
    settings.networking.error_backoffs = Backoffs(base=1.0, cap=16.0, attempts=8,
                                                  rand=random.random)
    settings.watching.reconnect_backoff = 1.0  # pause between kopf's watch streams
    settings.peering.standalone = True  # see kdra.services.leader
    memo.operator = await Operator.start(ours)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    operator: Operator | None = getattr(memo, "operator", None)
    if operator is not None:
        await operator.stop()

