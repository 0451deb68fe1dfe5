"""kopf in the operator — the only package of kdra that imports it (import-linter):

::

    __init__.py  run_operator: the API flavour decided, kopf.run with the handlers
                 registered, the metrics served
    routes.py    the handlers: start-up and clean-up of the operator's services, and the one
                 table of every entry point of the claim lifecycle (the kinds watched, the
                 services each event feeds), delivered by kdra's informers or kopf's watches

Invariant: handlers stay thin: unpack, call a service, return.
"""

from __future__ import annotations

import dataclasses
import logging
import os

from kdra.kube import loops, memory
from kdra.kube.client import connect
from kdra.kube.core.flavours import Flavour
from kdra.kube.errors import ApiError
from kdra.kube.flavour import FlavourError, resolve
from kdra.operator import metrics
from kdra.operator.settings import OperatorSettings


async def _flavour(settings: OperatorSettings) -> Flavour:
    """The API flavour the settings ask for, or (auto) the one the cluster serves."""
    client = await connect(settings.kubeconfig, component="operator")
    try:
        return await resolve(client, settings.flavour)
    finally:
        await client.close()


def run_operator(settings: OperatorSettings) -> int:
    """Run the operator until SIGINT/SIGTERM. Returns the process exit code."""
    import kopf

    from kdra.operator.handlers import routes as handlers

    if settings.kubeconfig:
        os.environ["KUBECONFIG"] = settings.kubeconfig  # for kopf's own login
    try:
        runner = loops.runner(settings.event_loop)
    except ValueError as exc:
        logging.getLogger(__name__).error("kdra operator cannot start: %s", exc)
        return 2
    if settings.watch not in handlers.WATCH_MODES:
        logging.getLogger(__name__).error(
            "kdra operator cannot start: watch %r (--watch, KDRA_WATCH) is not one of %s",
            settings.watch, ", ".join(handlers.WATCH_MODES))
        return 2
    metrics.init_series()
    with runner:
        # The flavour is decided before kopf starts: with --watch=kopf its handlers are
        # registered for the flavour's kinds.
        try:
            flavour = runner.run(_flavour(settings))
        except (FlavourError, ApiError, OSError) as exc:
            logging.getLogger(__name__).error("kdra operator cannot start: %s", exc)
            return 2
        settings = dataclasses.replace(settings, flavour=flavour.name)
        if settings.watch == "kopf":
            handlers.register_kopf_watches(kopf.get_default_registry(), settings.namespace,
                                           flavour)
        metrics.serve(settings.metrics_port)
        memory.start_trimmer(settings.malloc_trim_interval)
        kopf.run(
            loop=runner.get_loop(),
            clusterwide=True,
            standalone=True,  # one active replica is kdra's own Lease election (services.leader)
            liveness_endpoint=(f"http://0.0.0.0:{settings.health_port}/healthz"
                               if settings.health_port else None),
            memo=kopf.Memo(kdra_settings=settings),
        )
    return 0
