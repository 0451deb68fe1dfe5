"""kdra's NRI plugin: registration on the runtime's NRI socket, the plugin's lifecycle, and
the answer to ``CreateContainer``.

Lifecycle (NRI's, for a plugin that connects by itself): connect to the socket → call
``RegisterPlugin`` (name ``kdra``, index ``10``) within the runtime's registration timeout
(5 s) → the runtime calls ``Configure`` (kdra subscribes to CreateContainer only: its
decision needs no per-pod state, so no pod or removal events) → ``Synchronize`` with the
pods and containers that exist (possibly split: ``more=true`` is answered with ``more=true``
and no updates) → ``CreateContainer`` for every container created from then on, each within
the request timeout (2 s) → ``Shutdown`` when the runtime stops. Nothing restarts a dropped
plugin: when the connection ends (runtime restart, a late answer, a protocol error), the
plugin connects again, with capped, jittered backoff.

What the runtime does without an answer (containerd 2.2, NRI 0.11): a plugin that is not
registered, or that answers too late, is skipped and the container is created without its
adjustment (**fail open**); an error status fails the container's creation with kdra's
message (**fail closed**). containerd's NRI ``default_validator`` with
``required_plugins = ["kdra"]`` turns the first case into a failure too.

Invariants:
- :meth:`NriPlugin.run` runs until cancelled and never raises: connection failures, protocol
  errors and bugs in a decision end at most the current connection.
- A missing socket is logged once per outage (then retried quietly), a lost connection once.
- Every CreateContainer is counted in ``kdra_agent_nri_adjustments_total{result}`` and timed
  in ``kdra_agent_nri_adjustment_seconds``; ``kdra_agent_nri_connected`` is 1 exactly while
  the plugin is registered.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable

from kdra.agent import metrics
from kdra.agent.core.exposure import Adjustment, Decision, Refusal
from kdra.agent.nri.messages import (
    Container,
    MessageError,
    PodSandbox,
    decode_configure,
    decode_create_container,
    decode_synchronize,
    encode_configure_response,
    encode_create_container_response,
    encode_empty,
    encode_register_plugin,
    encode_synchronize_response,
)
from kdra.agent.nri.session import (
    FAILED_PRECONDITION,
    INTERNAL,
    UNIMPLEMENTED,
    RpcError,
    Session,
)
from kdra.kube.core.backoff import backoff_delay

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
PLUGIN_NAME = "kdra"
PLUGIN_INDEX = "10"
CREATE_CONTAINER = 4
"""NRI's Event enum value; a subscription is the bit ``1 << (event - 1)``."""
EVENTS = 1 << (CREATE_CONTAINER - 1)
REGISTRATION_TIMEOUT = 5.0
DEFAULT_REQUEST_TIMEOUT = 2.0

Policy = Callable[[PodSandbox, Container], Decision]
"""Decides a container's adjustment (pure and fast: it runs on the event loop)."""


def no_devices(pod: PodSandbox, container: Container) -> Decision:
    """A policy that adjusts nothing (the plugin registered, answering, exposing nothing)."""
    return Adjustment()


class NriPlugin:
    def __init__(self, socket_path: str, policy: Policy = no_devices, *,
                 name: str = PLUGIN_NAME, index: str = PLUGIN_INDEX,
                 first_delay: float = 0.5, max_delay: float = 10.0) -> None:
        self.socket_path = socket_path
        self.policy = policy
        self.name = name
        self.index = index
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT
        self.registered = asyncio.Event()
        """Set while the plugin is registered (tests and start-up wait for it)."""
        self.synchronized = asyncio.Event()
        """Set once the runtime's Synchronize is answered on the current connection."""
        self.registrations = 0
        """How many times the plugin has registered (reconnections included)."""
        self._session: Session | None = None

    async def run(self) -> None:
        failures = 0
        quiet = False  # the current outage has been logged
        while True:
            try:
                reader, writer = await asyncio.open_unix_connection(self.socket_path)
            except OSError as exc:
                failures += 1
                if not quiet:
                    log.warning("NRI: cannot connect to %s (%s); retrying in the background. "
                                "Until kdra's plugin is registered, containers get their "
                                "devices only through the webhook's env (not tamper-proof)",
                                self.socket_path, exc.strerror or exc)
                    quiet = True
                await self._pause(failures)
                continue
            try:
                registered = await self._serve(reader, writer)
            except Exception:  # a bug must cost at most this connection, never the agent
                log.exception("NRI: the connection to %s failed", self.socket_path)
                registered = False
            if registered:
                failures, quiet = 0, False
            failures += 1
            await self._pause(failures)

    async def _pause(self, failures: int) -> None:
        await asyncio.sleep(backoff_delay(failures, base=self.first_delay, cap=self.max_delay,
                                          rand=random.random))

    async def _serve(self, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> bool:
        """One connection: register, then serve until it ends. Returns whether the
        registration succeeded."""
        session = Session(reader, writer, self._handle)
        self._session = session
        self.synchronized.clear()
        serving = asyncio.create_task(session.run(), name="nri-session")
        try:
            try:
                await session.call(RUNTIME_SERVICE, "RegisterPlugin",
                                   encode_register_plugin(self.name, self.index),
                                   within=REGISTRATION_TIMEOUT)
            except (RpcError, ConnectionError, TimeoutError, MessageError) as exc:
                log.warning("NRI: registration as %s-%s on %s failed: %s", self.index,
                            self.name, self.socket_path, exc or type(exc).__name__)
                session.close(f"registration failed: {exc!r}")
                return False
            log.info("NRI: registered as plugin %s-%s on %s", self.index, self.name,
                     self.socket_path)
            self.registrations += 1
            self.registered.set()
            metrics.set_nri_connected(True)
            await asyncio.shield(serving)
            log.warning("NRI: connection to %s ended (%s); connecting again", self.socket_path,
                        session.reason)
            return True
        finally:
            self.registered.clear()
            self.synchronized.clear()
            metrics.set_nri_connected(False)
            session.close("plugin stopping")
            await session.wait_closed()
            serving.cancel()
            await asyncio.gather(serving, return_exceptions=True)
            self._session = None

    # ------------------------------------------------------------------ Plugin service

    async def _handle(self, service: str, method: str, payload: bytes) -> bytes:
        if service != PLUGIN_SERVICE:
            raise RpcError(UNIMPLEMENTED, f"kdra: unknown service {service!r}")
        if method == "CreateContainer":
            return self._create_container(payload)
        if method == "Configure":
            configure = decode_configure(payload)
            if configure.request_timeout_ms > 0:
                self.request_timeout = configure.request_timeout_ms / 1000
            log.info("NRI: configured by %s %s (request timeout %.1f s); subscribing to "
                     "CreateContainer", configure.runtime_name or "the runtime",
                     configure.runtime_version, self.request_timeout)
            return encode_configure_response(EVENTS)
        if method == "Synchronize":
            sync = decode_synchronize(payload)
            log.info("NRI: synchronized: %d pod(s), %d container(s)%s", len(sync.pods),
                     len(sync.containers), " (more follow)" if sync.more else "")
            if not sync.more:
                self.synchronized.set()
            return encode_synchronize_response(sync.more)
        if method == "Shutdown":
            log.info("NRI: the runtime is shutting down")
            return encode_empty()
        raise RpcError(UNIMPLEMENTED, f"kdra: {method} is not subscribed")

    def _create_container(self, payload: bytes) -> bytes:
        started = time.monotonic()
        request = decode_create_container(payload)  # malformed: the session ends
        pod, container = request.pod, request.container
        result = "error"
        try:
            decision = self.policy(pod, container)
            if isinstance(decision, Refusal):
                result = "refused"
                log.warning("NRI: refused container %s of pod %s/%s: %s", container.name,
                            pod.namespace, pod.name, decision.message)
                raise RpcError(FAILED_PRECONDITION, decision.message)
            result = decision.outcome
            if decision.devices:
                log.info("NRI: container %s of pod %s/%s gets %s", container.name,
                         pod.namespace, pod.name, ", ".join(decision.devices))
            return encode_create_container_response(decision.env, decision.cdi_devices)
        except RpcError:
            raise
        except Exception as exc:
            log.exception("NRI: deciding the devices of container %s of pod %s/%s failed",
                          container.name, pod.namespace, pod.name)
            raise RpcError(INTERNAL, f"kdra: internal error deciding the devices of "
                                     f"container {container.name!r}: {exc!r}"[:1024]) from exc
        finally:
            elapsed = time.monotonic() - started
            metrics.observe_nri_adjustment(result, elapsed)
            if elapsed > self.request_timeout:
                log.warning("NRI: answered CreateContainer of %s/%s in %.3f s, later than the "
                            "runtime's %.1f s: it went ahead without kdra's adjustment",
                            pod.namespace, pod.name, elapsed, self.request_timeout)
