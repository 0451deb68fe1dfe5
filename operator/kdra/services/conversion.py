"""The CRDs' conversion webhook, served by the operator's webhook server
(:mod:`kdra.services.webhook`): the ``/convert`` answer, and keeping the four CRDs'
``spec.conversion`` pointed at the server with its CA bundle.

Invariants:
- Conversions run in a worker thread: converting a list of a thousand objects must not stall
  the event loop. A body that is not JSON (or nests deeper than the decoder allows) is an HTTP
  400, as is one the webhook server's intake refuses for holding too many values; a
  ConversionReview whose objects cannot be converted gets a ``Failure`` result naming the
  object (:func:`kdra.dra.models.conversion.review`).
- :func:`point_crds` writes a CRD only when its conversion differs from what this server
  needs (defaults the API server adds are no difference); a CRD that is missing (not installed
  yet) is skipped with a warning, the others are still kept current.
"""

from __future__ import annotations

import asyncio
import logging

import orjson
from aiohttp import web

from kdra.domain.webhooks import CRD_NAMES, Endpoint, contains, conversion_patch
from kdra.dra.errors import InvalidObject
from kdra.dra.models import conversion
from kdra.kube.client import KubeClient
from kdra.kube.errors import NotFound
from kdra.kube.resources import CRDS

__all__ = ["answer", "point_crds"]

log = logging.getLogger(__name__)


async def answer(raw: bytes | bytearray) -> web.Response:
    """``POST /convert``: answer a ConversionReview, given the request's body as read by the
    webhook server (:mod:`kdra.services.webhook_intake`: size, time and value count
    checked), decoded and converted in a worker thread."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, _answer, raw)


def _answer(raw: bytes | bytearray) -> web.Response:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return web.json_response({"error": "the body is not JSON (or is nested too deeply)"},
                                 status=400)
    try:
        answer = conversion.review(body)
    except InvalidObject as exc:
        return web.json_response({"error": str(exc)}, status=400)
    except RecursionError:  # nothing the API server sends is nested this deep
        return web.json_response({"error": "the objects are nested too deeply"}, status=400)
    result = answer["response"]["result"]
    if result["status"] != "Success":
        log.warning("conversion failed: %s", result.get("message"))
    return web.json_response(answer)


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
        await client.patch(CRDS, name, patch)
        log.info("pointed the conversion webhook of CRD %s at %s", name, where)
