"""The ``kdra agent`` process: settings to nodes and device backends, the event loop, signals.

Invariants:
- A bad setting (``--backends`` included), a malformed inventory or a backend that cannot
  list devices (broken NVML) stops the agent before it connects, with exit code 2 and a
  message naming the problem; no connection to the API server: 1.
- SIGTERM/SIGINT stop the agent (its Leases are released); SIGHUP re-reads the inventory.
- The metrics' series exist (zero) before the metrics are served.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from kdra.agent import metrics
from kdra.agent.backends.registry import BackendSettingsError, make_backends
from kdra.agent.core.backend import Backends, DiscoveryError
from kdra.agent.core.inventory import expand_names
from kdra.agent.runner import AgentError, AgentRunner, resolve_flavour
from kdra.agent.settings import AgentSettings
from kdra.dra.errors import InvalidObject
from kdra.kube import loops, memory
from kdra.kube.client import connect
from kdra.kube.errors import ApiError

log = logging.getLogger(__name__)


def served_nodes(settings: AgentSettings) -> list[str]:
    if settings.simulate_nodes:
        try:
            names = expand_names(settings.simulate_nodes)
        except ValueError as exc:
            raise AgentError(f"--simulate-nodes: {exc}") from exc
        if not names:
            raise AgentError("--simulate-nodes names no node")
        return names
    if not settings.node_name:
        raise AgentError("no node name: set NODE_NAME (or --node-name), or --simulate-nodes")
    return [settings.node_name]


async def _main(settings: AgentSettings, nodes: list[str], backends: Backends) -> int:
    try:
        client = await connect(settings.kubeconfig, component="agent")
    except Exception as exc:  # any kubeconfig / in-cluster config problem
        log.error("kdra agent cannot connect to the API server: %s", exc)
        return 1
    try:
        settings = await resolve_flavour(client, settings)
    except (ApiError, OSError) as exc:
        log.error("kdra agent cannot ask the API server which flavour it serves: %s", exc)
        await client.close()
        return 1
    except AgentError:
        await client.close()
        raise
    runner = AgentRunner(client, settings, nodes, backends)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, runner.reread.set)
    try:
        starting = asyncio.create_task(runner.start())
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # raises AgentError
            await stopping
        else:
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
        log.info("kdra agent stopping: releasing Leases")
        return 0
    finally:
        await runner.stop()
        await client.close()


def run_agent(settings: AgentSettings) -> int:
    """Run the agent until SIGTERM/SIGINT. Returns the process exit code."""
    try:
        runner = loops.runner(settings.event_loop)
    except ValueError as exc:
        log.error("kdra agent cannot start: %s", exc)
        return 2
    metrics.init_agent_series()
    try:
        nodes = served_nodes(settings)
        backends = make_backends(settings, nodes)
        backends.discover(nodes[0])  # a bad inventory or broken NVML stops us here
    except (InvalidObject, DiscoveryError) as exc:
        log.error("kdra agent cannot start: %s: %s",
                  "malformed inventory" if isinstance(exc, InvalidObject) else "discovery",
                  exc)
        return 2
    except BackendSettingsError as exc:
        log.error("kdra agent cannot start: --backends: %s", exc)
        return 2
    except AgentError as exc:
        log.error("kdra agent cannot start: %s", exc)
        return 2
    metrics.serve(settings.metrics_port)
    memory.start_trimmer(settings.malloc_trim_interval)
    try:
        with runner:
            return runner.run(_main(settings, nodes, backends))
    except AgentError as exc:
        log.error("kdra agent cannot start: %s", exc)
        return 2
