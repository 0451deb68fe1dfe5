"""kopf in the operator — the only package of kdra that imports it (import-linter):

::

    __init__.py  run_operator: kopf.run with the handlers registered, the metrics served
    routes.py    the handlers: start-up and clean-up of the operator's services, and the one
                 table of every entry point of the claim lifecycle (the kinds watched, the
                 services each event feeds), delivered by kdra's informers or kopf's watches

Invariant: handlers stay thin: unpack, call a service, return.
"""

from __future__ import annotations

import logging
import os

from kdra.kube import loops, memory
from kdra.operator import metrics
from kdra.operator.settings import OperatorSettings


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
    if settings.watch == "kopf":
        handlers.register_kopf_watches(kopf.get_default_registry(), settings.namespace)
    metrics.init_series()
    metrics.serve(settings.metrics_port)
    memory.start_trimmer(settings.malloc_trim_interval)
    with runner:
        kopf.run(
            loop=runner.get_loop(),
            clusterwide=True,
            standalone=True,  # one active replica is kdra's own Lease election (services.leader)
            liveness_endpoint=(f"http://0.0.0.0:{settings.health_port}/healthz"
                               if settings.health_port else None),
            memo=kopf.Memo(kdra_settings=settings),
        )
    return 0
