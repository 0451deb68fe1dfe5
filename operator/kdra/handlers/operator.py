"""kopf wiring of the operator: thin handlers that hand watch events to the services.

Only low-level ``@kopf.on.event`` handlers are used on the hot path: they add no annotations
and no extra PATCHes per object, and they just enqueue work (see kdra.services.workqueue).
Every handler is ``async``: kopf runs sync handlers in a thread pool, and the services' caches
and queues belong to the event loop.
"""

from __future__ import annotations

from typing import Any

import kopf

from kdra import GROUP, VERSION
from kdra.domain.inventory import AGENT_LEASE_LABEL
from kdra.services.operator import Operator
from kdra.settings import OperatorSettings


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    ours: OperatorSettings = memo.kdra_settings
    settings.posting.enabled = False  # kdra writes its own, deduplicated events
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    settings.peering.standalone = True  # see kdra.services.leader
    memo.operator = await Operator.start(ours)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    operator: Operator | None = getattr(memo, "operator", None)
    if operator is not None:
        await operator.stop()


@kopf.on.event("v1", "pods")
async def pod_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.on_pod(event["type"], event["object"])


@kopf.on.event(GROUP, VERSION, "resourceclaims")
async def claim_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.on_claim(event["type"], event["object"])


@kopf.on.event(GROUP, VERSION, "resourceslices")
async def slice_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.on_slice(event["type"], event["object"])


@kopf.on.event(GROUP, VERSION, "deviceclasses")
async def class_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.binder.on_class(event["type"], event["object"])


@kopf.on.event("v1", "nodes")
async def node_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.on_node(event["type"], event["object"])


@kopf.on.event("coordination.k8s.io", "v1", "leases", labels={AGENT_LEASE_LABEL: "true"})
async def agent_lease_event(event: kopf.RawEvent, memo: kopf.Memo, namespace: str | None,
                            **_: Any) -> None:
    if namespace == memo.kdra_settings.namespace:  # node agents' heartbeats only
        memo.operator.slice_gc.on_lease(event["type"], event["object"])


@kopf.on.event(GROUP, VERSION, "resourceclaimtemplates")
async def template_event(event: kopf.RawEvent, memo: kopf.Memo, **_: Any) -> None:
    memo.operator.claim_controller.on_template(event["type"], event["object"])
