"""``kdra webhooks``: the operator's webhook server alone — conversion (``/convert``) and
admission — without controllers, leader election or kopf.

For installs that scale the webhooks apart from the operator, and for environments where
something must convert kdra's objects before any operator runs (the end-to-end tests run one
for their whole session). It takes the operator's settings (only ``webhook_*``,
``namespace``, ``kubeconfig``, ``event_loop`` matter) and runs until SIGINT/SIGTERM.

Invariants: the line ``kdra webhooks serving`` is logged only once the server listens (and,
with ``webhook_manage_config``, once the configurations and the CRDs' conversion point at
it); a server that cannot start exits with code 1 and the reason.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from kdra.kube import loops
from kdra.kube.client import KubeClient, connect
from kdra.operator.settings import OperatorSettings
from kdra.operator.webhooks.server import WebhookServer

log = logging.getLogger(__name__)


def run_webhooks(settings: OperatorSettings) -> int:
    """Serve the webhooks until SIGINT/SIGTERM. Returns the process exit code."""
    if not settings.webhook_port:
        log.error("kdra webhooks: webhook_port is 0; nothing to serve")
        return 2
    try:
        runner = loops.runner(settings.event_loop)
    except ValueError as exc:
        log.error("kdra webhooks cannot start: %s", exc)
        return 2
    with runner:
        return runner.run(_serve(settings))


async def _serve(settings: OperatorSettings) -> int:
    needs_client = settings.webhook_manage_config or not settings.webhook_cert_dir
    client: KubeClient | None = None
    try:
        if needs_client:
            client = await connect(settings.kubeconfig, component="webhooks")
        server = WebhookServer(settings, client)
        await server.start()
    except Exception as exc:  # any start-up failure: say why and exit
        log.error("kdra webhooks cannot start: %s", exc)
        if client is not None:
            await client.close()
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    log.info("kdra webhooks serving on port %d", server.port)
    await stop.wait()
    await server.stop()
    if client is not None:
        await client.close()
    return 0
