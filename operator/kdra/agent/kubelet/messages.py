"""The protobuf messages kdra exchanges with the kubelet as its DRA plugin, and their codecs.

Three of the kubelet's gRPC APIs (Kubernetes 1.35, ``k8s.io/kubelet``), declared from their
documentation (field numbers and types; ``shared/KUBELET-DRA.md``) as
:mod:`kdra.agent.protodesc` tables — no ``.proto`` file, no generated code:

- plugin registration (package ``pluginregistration``, ``pkg/apis/pluginregistration/v1``):
  ``InfoRequest`` → ``PluginInfo`` (1 type, 2 name, 3 endpoint, 4 supported_versions);
  ``RegistrationStatus`` (1 plugin_registered, 2 error) → ``RegistrationStatusResponse``;
- the DRA node service, ``k8s.io.kubelet.pkg.apis.dra.v1`` and ``…v1beta1`` (the same
  messages without ``Device.share_id``): ``Node(Un)prepareResourcesRequest`` (1 claims: Claim
  1 namespace, 2 uid, 3 name) → responses keyed by claim UID (1 claims, a map): prepared
  devices (1 request_names, 2 pool_name, 3 device_name, 4 cdi_device_ids, 5 share_id) or an
  error;
- device health, ``v1alpha1`` (``pkg/apis/dra-health/v1alpha1``): ``NodeWatchResources``
  streams ``NodeWatchResourcesResponse`` (1 devices: DeviceHealth 1 device {1 pool_name,
  2 device_name}, 2 health UNKNOWN 0 / HEALTHY 1 / UNHEALTHY 2, 3 last_updated_time (unix
  seconds), 4 health_check_timeout_seconds).

Only the plugin's side is here (what the kubelet sends, decoded; what the plugin answers,
encoded); the kubelet's side, which only tests play, is
``tests/unit/agent/kubelet_side.py``. Everything else in kdra sees the frozen dataclasses below.

Invariants:
- Every ``decode_*`` function is total over bytes: it returns a value or raises
  :class:`MessageError`, whatever the input. gRPC bounds each message (4 MiB by default),
  so what a decoder returns is bounded too.
- The declared field numbers and types are the kubelet's own (checked by tests against
  hand-encoded wire bytes), so the kubelet reads what kdra writes.
- An empty ``share_id`` is not written (the field is proto3 ``optional``: absent, not "").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kdra.agent.core.kubelet import (
    HEALTH_HEALTHY,
    HEALTH_UNHEALTHY,
    HEALTH_UNKNOWN,
    Claim,
    ClaimResult,
    Device,
    DeviceHealth,
)
from kdra.agent.protodesc import (
    Field,
    MessageError,
    encode,
    file_descriptor,
    message_class,
    message_pool,
    parse,
)

__all__ = [
    "DRA_V1",
    "DRA_V1BETA1",
    "HEALTH",
    "HEALTHY",
    "REGISTRATION",
    "UNHEALTHY",
    "UNKNOWN",
    "Claim",
    "ClaimResult",
    "Device",
    "DeviceHealth",
    "MessageError",
    "PluginInfo",
    "RegistrationStatus",
    "decode_claims",
    "decode_empty",
    "decode_registration_status",
    "encode_empty",
    "encode_health",
    "encode_plugin_info",
    "encode_prepare_response",
    "encode_unprepare_response",
]

REGISTRATION = "pluginregistration"
DRA_V1 = "k8s.io.kubelet.pkg.apis.dra.v1"
DRA_V1BETA1 = "k8s.io.kubelet.pkg.apis.dra.v1beta1"
HEALTH = "v1alpha1"
"""The packages: a gRPC service's full name is ``<package>.<service>``."""

UNKNOWN, HEALTHY, UNHEALTHY = HEALTH_UNKNOWN, HEALTH_HEALTHY, HEALTH_UNHEALTHY
"""``v1alpha1.HealthStatus`` (an enum: declared int32, the same varint on the wire)."""

_REGISTRATION: dict[str, list[Field]] = {
    "InfoRequest": [],
    "PluginInfo": [("type", 1, "string", False), ("name", 2, "string", False),
                   ("endpoint", 3, "string", False),
                   ("supported_versions", 4, "string", True)],
    "RegistrationStatus": [("plugin_registered", 1, "bool", False),
                           ("error", 2, "string", False)],
    "RegistrationStatusResponse": [],
}


def _dra(share_id: bool) -> dict[str, list[Field]]:
    device: list[Field] = [("request_names", 1, "string", True), ("pool_name", 2, "string", False),
                           ("device_name", 3, "string", False),
                           ("cdi_device_ids", 4, "string", True)]
    if share_id:  # v1 only: `optional string share_id = 5`
        device.append(("share_id", 5, "string", False))
    return {
        "Claim": [("namespace", 1, "string", False), ("uid", 2, "string", False),
                  ("name", 3, "string", False)],
        "NodePrepareResourcesRequest": [("claims", 1, "Claim", True)],
        "Device": device,
        "NodePrepareResourceResponse": [("devices", 1, "Device", True),
                                        ("error", 2, "string", False)],
        "NodePrepareResourcesResponse": [("claims", 1, "map:NodePrepareResourceResponse", True)],
        "NodeUnprepareResourcesRequest": [("claims", 1, "Claim", True)],
        "NodeUnprepareResourceResponse": [("error", 1, "string", False)],
        "NodeUnprepareResourcesResponse": [("claims", 1, "map:NodeUnprepareResourceResponse",
                                            True)],
    }


_HEALTH: dict[str, list[Field]] = {
    "NodeWatchResourcesRequest": [],
    "DeviceIdentifier": [("pool_name", 1, "string", False), ("device_name", 2, "string", False)],
    "DeviceHealth": [("device", 1, "DeviceIdentifier", False), ("health", 2, "int32", False),
                     ("last_updated_time", 3, "int64", False),
                     ("health_check_timeout_seconds", 4, "int64", False)],
    "NodeWatchResourcesResponse": [("devices", 1, "DeviceHealth", True)],
}

_POOL = message_pool([  # private: never clashes with another library's
    file_descriptor("kdra/kubelet/pluginregistration.proto", REGISTRATION, _REGISTRATION),
    file_descriptor("kdra/kubelet/dra-v1.proto", DRA_V1, _dra(share_id=True)),
    file_descriptor("kdra/kubelet/dra-v1beta1.proto", DRA_V1BETA1, _dra(share_id=False)),
    file_descriptor("kdra/kubelet/dra-health-v1alpha1.proto", HEALTH, _HEALTH),
])


def _class(full_name: str) -> Any:
    return message_class(_POOL, full_name)


_InfoRequest = _class(f"{REGISTRATION}.InfoRequest")
_PluginInfo = _class(f"{REGISTRATION}.PluginInfo")
_RegistrationStatus = _class(f"{REGISTRATION}.RegistrationStatus")
_RegistrationStatusResponse = _class(f"{REGISTRATION}.RegistrationStatusResponse")
_WatchResponse = _class(f"{HEALTH}.NodeWatchResourcesResponse")


# --------------------------------------------------------------------------- registration


@dataclass(frozen=True)
class PluginInfo:
    """What ``GetInfo`` answers: the plugin's type, name (the driver), the DRA service's
    socket and the gRPC services it serves (``v1.DRAPlugin``...)."""

    type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


@dataclass(frozen=True)
class RegistrationStatus:
    """What the kubelet says of a registration (``error`` when it refused it)."""

    registered: bool
    error: str = ""


def encode_plugin_info(info: PluginInfo) -> bytes:
    return encode(_PluginInfo(type=info.type, name=info.name, endpoint=info.endpoint,
                              supported_versions=list(info.supported_versions)))


def decode_registration_status(data: bytes) -> RegistrationStatus:
    message = parse(_RegistrationStatus, data, "RegistrationStatus")
    return RegistrationStatus(message.plugin_registered, message.error)


def decode_empty(data: bytes, what: str) -> None:
    """An argument without fields (InfoRequest, NodeWatchResourcesRequest): any fields a newer
    kubelet adds are ignored; bytes that are not a message are refused."""
    parse(_InfoRequest, data, what)


def encode_empty() -> bytes:
    return encode(_RegistrationStatusResponse())


# --------------------------------------------------------------------------- DRA node service


def _version(package: str) -> str:
    if package not in (DRA_V1, DRA_V1BETA1):
        raise ValueError(f"not a DRA node service package: {package!r}")
    return package


def decode_claims(data: bytes, package: str, method: str) -> list[Claim]:
    """The claims of a ``Node(Un)prepareResourcesRequest`` (``method`` names which) of the
    DRA service ``package``."""
    cls = _class(f"{_version(package)}.{method}Request")
    message = parse(cls, data, f"{method}Request")
    return [Claim(c.namespace, c.uid, c.name) for c in message.claims]


def encode_prepare_response(results: Mapping[str, ClaimResult], package: str) -> bytes:
    """``NodePrepareResourcesResponse``: one entry per claim UID. (v1beta1 has no share
    IDs: a share's device is reported without one.)"""
    message = _class(f"{_version(package)}.NodePrepareResourcesResponse")()
    for uid, result in results.items():
        entry = message.claims[uid]
        entry.error = result.error
        for device in result.devices:
            out = entry.devices.add(request_names=list(device.request_names),
                                    pool_name=device.pool, device_name=device.device,
                                    cdi_device_ids=list(device.cdi_device_ids))
            if device.share_id and package == DRA_V1:
                out.share_id = device.share_id
    return encode(message)


def encode_unprepare_response(errors: Mapping[str, str], package: str) -> bytes:
    """``NodeUnprepareResourcesResponse``: one entry per claim UID, ``""`` for success."""
    message = _class(f"{_version(package)}.NodeUnprepareResourcesResponse")()
    for uid, error in errors.items():
        message.claims[uid].error = error
    return encode(message)


# --------------------------------------------------------------------------- health


def encode_health(devices: Sequence[DeviceHealth]) -> bytes:
    """``NodeWatchResourcesResponse``: the full list of the driver's devices."""
    message = _WatchResponse()
    for device in devices:
        entry = message.devices.add(health=device.health, last_updated_time=device.last_updated,
                                    health_check_timeout_seconds=device.timeout_seconds)
        entry.device.pool_name = device.pool
        entry.device.device_name = device.device
    return encode(message)
