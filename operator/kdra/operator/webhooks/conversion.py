"""The CRDs' conversion webhook, served by the operator's webhook server
(:mod:`kdra.operator.webhooks.server`): the ``/convert`` answer, and keeping the four CRDs'
``spec.conversion`` pointed at the server with its CA bundle.

Invariants:
- Conversions run in a worker thread: converting a list of a thousand objects must not stall
  the event loop. The body comes as the webhook server's intake read it (size, time and value
  count checked: :mod:`kdra.kube.webhook_intake`); one that is not a ConversionReview is
  an HTTP 400; one whose objects cannot be converted gets a ``Failure`` result naming the
  object (:func:`kdra.dra.models.conversion.review`); a claim's device data nested deeper
  than any decoder allows is carried over undecoded (:mod:`kdra.operator.core.conversion_review`),
  so one such claim never fails a list.
- :func:`point_crds` writes a CRD only when its conversion differs from what this server
  needs (defaults the API server adds are no difference); a CRD that is missing (not installed
  yet), or that the admission policy ``kdra-operator-crds`` does not let it point here (only
  kdra's own Service, or where the CRD points already), is skipped with a message, the others
  are still kept current.
"""

from __future__ import annotations

import asyncio
import logging

from kdra.kube.client import KubeClient
from kdra.kube.errors import ApiError, NotFound
from kdra.kube.resources import CRDS
from kdra.kube.webhook_server import Reply
from kdra.operator.core import conversion_review
from kdra.operator.core.webhook_configs import CRD_NAMES, Endpoint, contains, conversion_patch

__all__ = ["answer", "point_crds"]

log = logging.getLogger(__name__)


async def answer(raw: bytes | bytearray) -> Reply:
    """``POST /convert``: answer a ConversionReview, given the request's body as read by the
    webhook server (:mod:`kdra.kube.webhook_intake`: size, time and value count
    checked), decoded and converted in a worker thread
    (:func:`kdra.operator.core.conversion_review.answer`)."""
    loop = asyncio.get_running_loop()
    result = await loop.run_in_executor(None, conversion_review.answer, bytes(raw))
    if result.failure is not None:
        log.warning("conversion failed: %s", result.failure)
    return Reply(data=result.body, status=result.status)


async def point_crds(client: KubeClient, endpoint: Endpoint, ca_pem: bytes,
                     where: str) -> None:
    """Point each CRD's conversion webhook at ``endpoint`` with ``ca_pem`` (only where it
    does not yet). ``where``: the endpoint in words, for the log."""
    patch = conversion_patch(endpoint, ca_pem)
    wanted = {k: v for k, v in patch["spec"]["conversion"]["webhook"]["clientConfig"].items()
              if v is not None}
    for name in CRD_NAMES:
        try:
            live = await client.get(CRDS, name)
        except NotFound:
            log.warning("CRD %s is not installed: its conversion webhook is not configured "
                        "(install crds/, then the operator configures it)", name)
            continue
        current = ((live.get("spec") or {}).get("conversion") or {}).get("webhook") or {}
        config = current.get("clientConfig") or {}
        if contains(config, wanted) and set(config) == set(wanted):
            continue
        try:
            await client.patch(CRDS, name, patch)
        except ApiError as exc:
            if exc.status not in (403, 422):
                raise
            # The admission policy kdra-operator-crds: only kdra's own Service, or the
            # CA bundle of where it points now.
            log.error("cannot point the conversion webhook of CRD %s at %s (%s): point it "
                      "there when installing (the operator may point it only at kdra's own "
                      "Service, or renew the CA bundle of where it points)", name, where,
                      exc.message)
            continue
        log.info("pointed the conversion webhook of CRD %s at %s", name, where)
