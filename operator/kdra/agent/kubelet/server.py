"""grpcio's server for one driver's kubelet plugin: the four services the kubelet calls.

======================================================  ==================================
service (full gRPC name)                                methods
======================================================  ==================================
``pluginregistration.Registration``                     GetInfo, NotifyRegistrationStatus
``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``            NodePrepareResources,
``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``       NodeUnprepareResources
``v1alpha1.DRAResourceHealth``                          NodeWatchResources (server stream)
======================================================  ==================================

The services are declared with grpcio's generic handlers over raw bytes; the bytes are
(de)coded by :mod:`kdra.agent.kubelet.messages`. What each call does is the
:class:`PluginCalls` behind the server (:class:`kdra.agent.kubelet.plugin.DriverPlugin`).
The server listens on a socket in the agent's private directory; the kubelet reaches it
through :mod:`kdra.agent.kubelet.gate`.

Invariants:
- A request that does not decode is answered ``INVALID_ARGUMENT`` naming the message; an
  unexpected error in a call is logged and answered ``INTERNAL``: one bad call never stops the
  server.
- Every call is counted in ``kdra_agent_kubelet_calls_total{method,result}``.
- Messages are at most 4 MiB each way (grpcio's default, set explicitly).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import grpc
import grpc.aio

from kdra.agent import metrics
from kdra.agent.core.kubelet import Claim, ClaimResult, DeviceHealth
from kdra.agent.kubelet.messages import (
    DRA_V1,
    DRA_V1BETA1,
    HEALTH,
    REGISTRATION,
    MessageError,
    PluginInfo,
    RegistrationStatus,
    decode_claims,
    decode_empty,
    decode_registration_status,
    encode_empty,
    encode_health,
    encode_plugin_info,
    encode_prepare_response,
    encode_unprepare_response,
)

log = logging.getLogger(__name__)

MAX_MESSAGE = 4 * 1024 * 1024


class PluginCalls(Protocol):
    """What the calls of one driver's plugin do."""

    def info(self) -> PluginInfo: ...

    def registration(self, status: RegistrationStatus) -> None: ...

    async def prepare(self, claims: Sequence[Claim]) -> dict[str, ClaimResult]: ...

    async def unprepare(self, claims: Sequence[Claim]) -> dict[str, str]: ...

    def health(self) -> AsyncIterator[list[DeviceHealth]]: ...


class PluginServer:
    """The gRPC server of one driver's plugin, on ``backend`` (a unix socket path)."""

    def __init__(self, calls: PluginCalls, backend: Path) -> None:
        self.calls = calls
        self.backend = backend
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", MAX_MESSAGE),
                                          ("grpc.max_send_message_length", MAX_MESSAGE)])
        raw: dict[str, Any] = {"request_deserializer": None, "response_serializer": None}
        handlers = [
            grpc.method_handlers_generic_handler(f"{REGISTRATION}.Registration", {
                "GetInfo": grpc.unary_unary_rpc_method_handler(self._get_info, **raw),
                "NotifyRegistrationStatus": grpc.unary_unary_rpc_method_handler(
                    self._notify, **raw)}),
            grpc.method_handlers_generic_handler(f"{HEALTH}.DRAResourceHealth", {
                "NodeWatchResources": grpc.unary_stream_rpc_method_handler(self._watch,
                                                                           **raw)}),
        ]
        for package in (DRA_V1, DRA_V1BETA1):
            handlers.append(grpc.method_handlers_generic_handler(f"{package}.DRAPlugin", {
                "NodePrepareResources": grpc.unary_unary_rpc_method_handler(
                    self._prepare_handler(package), **raw),
                "NodeUnprepareResources": grpc.unary_unary_rpc_method_handler(
                    self._unprepare_handler(package), **raw)}))
        server.add_generic_rpc_handlers(handlers)
        self.backend.unlink(missing_ok=True)
        if not server.add_insecure_port(f"unix:{self.backend}"):
            raise OSError(f"grpc cannot listen on {self.backend}")
        await server.start()
        self._server = server

    async def stop(self, grace: float = 1.0) -> None:
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        self.backend.unlink(missing_ok=True)

    # ------------------------------------------------------------------ the calls

    async def _answer(self, method: str, context: grpc.aio.ServicerContext,
                      work: Callable[[], Awaitable[tuple[bytes, bool]]]) -> bytes:
        """Run ``work`` (→ the encoded answer and whether it reports success), count it, and
        map a bad request or an unexpected error to a gRPC status."""
        try:
            answer, ok = await work()
        except MessageError as exc:
            metrics.record_kubelet_call(method, False)
            log.warning("kubelet plugin: %s: %s", method, exc)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            raise AssertionError("unreachable") from exc  # abort raises
        except Exception as exc:
            metrics.record_kubelet_call(method, False)
            log.exception("kubelet plugin: %s failed", method)
            await context.abort(grpc.StatusCode.INTERNAL, f"{method} failed: {exc}")
            raise AssertionError("unreachable") from exc
        metrics.record_kubelet_call(method, ok)
        return answer

    async def _get_info(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        async def work() -> tuple[bytes, bool]:
            decode_empty(request, "InfoRequest")
            return encode_plugin_info(self.calls.info()), True

        return await self._answer("GetInfo", context, work)

    async def _notify(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        async def work() -> tuple[bytes, bool]:
            status = decode_registration_status(request)
            self.calls.registration(status)
            return encode_empty(), status.registered

        return await self._answer("NotifyRegistrationStatus", context, work)

    def _prepare_handler(self, package: str) -> Callable[..., Awaitable[bytes]]:
        async def handle(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            async def work() -> tuple[bytes, bool]:
                claims = decode_claims(request, package, "NodePrepareResources")
                results = await self.calls.prepare(claims)
                return (encode_prepare_response(results, package),
                        not any(r.error for r in results.values()))

            return await self._answer("NodePrepareResources", context, work)

        return handle

    def _unprepare_handler(self, package: str) -> Callable[..., Awaitable[bytes]]:
        async def handle(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            async def work() -> tuple[bytes, bool]:
                claims = decode_claims(request, package, "NodeUnprepareResources")
                errors = await self.calls.unprepare(claims)
                return encode_unprepare_response(errors, package), not any(errors.values())

            return await self._answer("NodeUnprepareResources", context, work)

        return handle

    async def _watch(self, request: bytes,
                     context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        try:
            decode_empty(request, "NodeWatchResourcesRequest")
        except MessageError as exc:
            metrics.record_kubelet_call("NodeWatchResources", False)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
            return
        metrics.record_kubelet_call("NodeWatchResources", True)
        async for devices in self.calls.health():
            yield encode_health(devices)
