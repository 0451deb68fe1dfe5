"""The kubelet's side of kdra's DRA plugin, for the tests that play the kubelet: its requests
encoded, the plugin's answers decoded, and a gRPC client over a unix socket. kdra only ever
plays the plugin, so this is not in the product (:mod:`kdra.agent.kubelet.messages` has the
plugin's side).

The codecs use the same declared messages as the plugin's, so a round trip checks kdra's
declarations against each other; the byte-level tests
(:mod:`tests.unit.agent.test_kubelet_messages`) check them against the kubelet's field numbers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import TracebackType

import grpc
import grpc.aio

from kdra.agent.kubelet import messages as m
from kdra.agent.kubelet.messages import (
    Claim,
    ClaimResult,
    Device,
    DeviceHealth,
    PluginInfo,
)
from kdra.agent.protodesc import encode, parse


def encode_claims(claims: Sequence[Claim], package: str, method: str) -> bytes:
    message = m._class(f"{package}.{method}Request")()
    for claim in claims:
        message.claims.add(namespace=claim.namespace, uid=claim.uid, name=claim.name)
    return encode(message)


def decode_plugin_info(data: bytes) -> PluginInfo:
    info = parse(m._PluginInfo, data, "PluginInfo")
    return PluginInfo(info.type, info.name, info.endpoint, tuple(info.supported_versions))


def encode_registration_status(registered: bool, error: str = "") -> bytes:
    return encode(m._RegistrationStatus(plugin_registered=registered, error=error))


def decode_prepare_response(data: bytes, package: str) -> dict[str, ClaimResult]:
    message = parse(m._class(f"{package}.NodePrepareResourcesResponse"), data, "response")
    return {uid: ClaimResult(tuple(
        Device(tuple(d.request_names), d.pool_name, d.device_name, tuple(d.cdi_device_ids),
               d.share_id if package == m.DRA_V1 else "")
        for d in entry.devices), entry.error) for uid, entry in message.claims.items()}


def decode_unprepare_response(data: bytes, package: str) -> dict[str, str]:
    message = parse(m._class(f"{package}.NodeUnprepareResourcesResponse"), data, "response")
    return {uid: entry.error for uid, entry in message.claims.items()}


def decode_health(data: bytes) -> list[DeviceHealth]:
    message = parse(m._WatchResponse, data, "NodeWatchResourcesResponse")
    return [DeviceHealth(d.device.pool_name, d.device.device_name, d.health,
                         d.last_updated_time, d.health_check_timeout_seconds)
            for d in message.devices]


def _raw(data: bytes) -> bytes:
    return data


class Kubelet:
    """A gRPC client on one of the plugin's sockets, as the kubelet calls it."""

    def __init__(self, socket: Path | str) -> None:
        self.channel = grpc.aio.insecure_channel(f"unix:{socket}")

    async def __aenter__(self) -> Kubelet:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.channel.close()

    async def call(self, service: str, method: str, request: bytes) -> bytes:
        """One unary call (a deadline of 10 s, as the kubelet's order of magnitude)."""
        stub = self.channel.unary_unary(f"/{service}/{method}", request_serializer=_raw,
                                        response_deserializer=_raw)
        answer: bytes = await stub(request, timeout=10.0)
        return answer

    async def info(self) -> PluginInfo:
        return decode_plugin_info(await self.call(f"{m.REGISTRATION}.Registration", "GetInfo",
                                                  b""))

    async def notify(self, registered: bool, error: str = "") -> None:
        await self.call(f"{m.REGISTRATION}.Registration", "NotifyRegistrationStatus",
                        encode_registration_status(registered, error))

    async def prepare(self, *claims: Claim, package: str = m.DRA_V1) -> dict[str, ClaimResult]:
        return decode_prepare_response(await self.call(
            f"{package}.DRAPlugin", "NodePrepareResources",
            encode_claims(claims, package, "NodePrepareResources")), package)

    async def unprepare(self, *claims: Claim, package: str = m.DRA_V1) -> dict[str, str]:
        return decode_unprepare_response(await self.call(
            f"{package}.DRAPlugin", "NodeUnprepareResources",
            encode_claims(claims, package, "NodeUnprepareResources")), package)

    async def watch(self) -> AsyncIterator[list[DeviceHealth]]:
        stream = self.channel.unary_stream(f"/{m.HEALTH}.DRAResourceHealth/NodeWatchResources",
                                           request_serializer=_raw, response_deserializer=_raw)
        async for data in stream(b""):
            yield decode_health(data)
