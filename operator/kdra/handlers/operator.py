"""kopf wiring of the operator: thin handlers that hand watch events to the services.

Only low-level ``@kopf.on.event`` handlers are used on the hot path: they add no annotations
and no extra PATCHes per object, and they just enqueue work (see kdra.services.workqueue).
"""

from __future__ import annotations

from typing import Any

import kopf

from kdra import GROUP, VERSION
from kdra.domain.podclaims import CLAIMS_ANNOTATION
from kdra.services.operator import Operator
from kdra.settings import OperatorSettings


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ours: OperatorSettings = memo.kdra_settings
    settings.posting.enabled = False  # kdra writes its own, deduplicated events
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.peering.name = ours.peering or "kdra"
    settings.peering.standalone = not ours.peering
    settings.peering.priority = ours.priority
    memo.operator = await Operator.start(ours)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    operator: Operator | None = getattr(memo, "operator", None)
    if operator is not None:
        await operator.stop()


@kopf.on.event("v1", "pods", annotations={CLAIMS_ANNOTATION: kopf.PRESENT})
def pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.claim_controller.on_pod(event["type"], event["object"])


@kopf.on.event(GROUP, VERSION, "resourceclaims")
def claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.claim_controller.on_claim(event["type"], event["object"])


@kopf.on.event(GROUP, VERSION, "resourceclaimtemplates")
def template_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.claim_controller.on_template(event["type"], event["object"])
