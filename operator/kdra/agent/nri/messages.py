"""The protobuf messages kdra exchanges with a container runtime over NRI, and their codecs.

NRI (containerd/nri, ``pkg/api/api.proto``) and ttrpc (``request.proto``) define these
messages; kdra declares only the messages and fields it reads or writes, written here from
those documented APIs (field numbers and types), and builds their descriptors at import time
(tables turned into descriptors in a private pool by :mod:`kdra.agent.protodesc`): no
``.proto`` file, no protoc step, no generated code.
The wire format carries field numbers only, so the runtime's full messages decode into these
partial ones; fields kdra does not declare are kept as unknown fields and otherwise ignored.

Only the plugin's side is here: what kdra encodes and the runtime's messages it decodes (the
runtime's side, which only tests play, is ``tests/unit/agent/nri_runtime_messages.py``).
Everything else in kdra sees plain frozen dataclasses: this module is the only one that
touches protobuf objects (they are dynamically typed), so the rest stays checked by mypy.

Invariants:
- Every ``decode_*`` function is total over bytes: it returns a value or raises
  :class:`MessageError` (never another exception), whatever the input.
- Decoded strings, lists and maps are bounded by the frame they came in (at most 4 MiB: the
  ttrpc limit, checked by :mod:`kdra.agent.nri.wire` before decoding).
- The declared field numbers and types are NRI's and ttrpc's own (checked by round-trip
  tests against hand-encoded wire bytes), so a runtime reads what kdra writes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    "CONTAINER_STATE_NAMES",
    "Configure",
    "Container",
    "CreateContainer",
    "MessageError",
    "PodSandbox",
    "Request",
    "Response",
    "Synchronize",
    "decode_configure",
    "decode_create_container",
    "decode_request",
    "decode_response",
    "decode_synchronize",
    "encode_configure_response",
    "encode_create_container_response",
    "encode_empty",
    "encode_register_plugin",
    "encode_request",
    "encode_response",
    "encode_synchronize_response",
]

# (field name, number, type, repeated): the tables of kdra.agent.protodesc.

_TTRPC: dict[str, list[Field]] = {
    # ttrpc's request envelope (github.com/containerd/ttrpc request.proto)
    "KeyValue": [("key", 1, "string", False), ("value", 2, "string", False)],
    "Request": [("service", 1, "string", False), ("method", 2, "string", False),
                ("payload", 3, "bytes", False), ("timeout_nano", 4, "int64", False),
                ("metadata", 5, "KeyValue", True)],
    # google.rpc.Status (details, field 3, not declared: kdra sends none and ignores them)
    "Status": [("code", 1, "int32", False), ("message", 2, "string", False)],
    "Response": [("status", 1, "Status", False), ("payload", 2, "bytes", False)],
}

_NRI: dict[str, list[Field]] = {
    "Empty": [],
    "RegisterPluginRequest": [("plugin_name", 1, "string", False),
                              ("plugin_idx", 2, "string", False),
                              ("NRI_version", 3, "string", False)],
    "ConfigureRequest": [("config", 1, "string", False), ("runtime_name", 2, "string", False),
                         ("runtime_version", 3, "string", False),
                         ("registration_timeout", 4, "int64", False),
                         ("request_timeout", 5, "int64", False),
                         ("NRI_version", 6, "string", False)],
    "ConfigureResponse": [("events", 2, "int32", False), ("request_timeout", 3, "int64", False)],
    "PodSandbox": [("id", 1, "string", False), ("name", 2, "string", False),
                   ("uid", 3, "string", False), ("namespace", 4, "string", False),
                   ("labels", 5, "map", True), ("annotations", 6, "map", True)],
    # state is the ContainerState enum on the wire (a varint): declared int32, so an unknown
    # value from a newer runtime stays a number instead of becoming an unknown field.
    "Container": [("id", 1, "string", False), ("pod_sandbox_id", 2, "string", False),
                  ("name", 3, "string", False), ("state", 4, "int32", False),
                  ("labels", 5, "map", True), ("annotations", 6, "map", True),
                  ("args", 7, "string", True), ("env", 8, "string", True)],
    "SynchronizeRequest": [("pods", 1, "PodSandbox", True),
                           ("containers", 2, "Container", True), ("more", 3, "bool", False)],
    # update (field 1, repeated ContainerUpdate) not declared: kdra never asks for updates.
    "SynchronizeResponse": [("more", 2, "bool", False)],
    "CreateContainerRequest": [("pod", 1, "PodSandbox", False),
                               ("container", 2, "Container", False)],
    "KeyValue": [("key", 1, "string", False), ("value", 2, "string", False)],
    "CDIDevice": [("name", 1, "string", False)],
    # Only what kdra adjusts: env and CDI devices (the CDI spec carries device nodes/mounts).
    "ContainerAdjustment": [("env", 4, "KeyValue", True), ("CDI_devices", 8, "CDIDevice", True)],
    "CreateContainerResponse": [("adjust", 1, "ContainerAdjustment", False)],
}

_POOL = message_pool([  # private: never clashes with another library's
    file_descriptor("kdra/ttrpc.proto", "ttrpc", _TTRPC),
    file_descriptor("kdra/nri.proto", "nri.pkg.api.v1alpha1", _NRI),
])


def _class(full_name: str) -> Any:
    """The message class (``Any``: protobuf builds its attributes at run time)."""
    return message_class(_POOL, full_name)


_Request = _class("ttrpc.Request")
_Response = _class("ttrpc.Response")
_Empty = _class("nri.pkg.api.v1alpha1.Empty")
_RegisterPluginRequest = _class("nri.pkg.api.v1alpha1.RegisterPluginRequest")
_ConfigureRequest = _class("nri.pkg.api.v1alpha1.ConfigureRequest")
_ConfigureResponse = _class("nri.pkg.api.v1alpha1.ConfigureResponse")
_SynchronizeRequest = _class("nri.pkg.api.v1alpha1.SynchronizeRequest")
_SynchronizeResponse = _class("nri.pkg.api.v1alpha1.SynchronizeResponse")
_CreateContainerRequest = _class("nri.pkg.api.v1alpha1.CreateContainerRequest")
_CreateContainerResponse = _class("nri.pkg.api.v1alpha1.CreateContainerResponse")


_parse = parse  # the runtime's side (tests) decodes with the same helpers
_encode = encode


# --------------------------------------------------------------------------- ttrpc envelope


@dataclass(frozen=True)
class Request:
    """A ttrpc request: which method of which service, and its encoded argument."""

    service: str
    method: str
    payload: bytes = b""
    timeout_nano: int = 0
    """The caller's deadline, relative, in nanoseconds (0: none)."""


@dataclass(frozen=True)
class Response:
    """A ttrpc response: a status (``code`` 0 is OK) and, when OK, the encoded result."""

    code: int = 0
    message: str = ""
    payload: bytes = b""


def encode_request(request: Request) -> bytes:
    return _encode(_Request(service=request.service, method=request.method,
                            payload=request.payload, timeout_nano=request.timeout_nano))


def decode_request(data: bytes) -> Request:
    message = _parse(_Request, data, "ttrpc request")
    return Request(message.service, message.method, message.payload, message.timeout_nano)


def encode_response(response: Response) -> bytes:
    message = _Response(payload=response.payload)
    if response.code or response.message:
        message.status.code = response.code
        message.status.message = response.message
    return _encode(message)


def decode_response(data: bytes) -> Response:
    message = _parse(_Response, data, "ttrpc response")
    return Response(message.status.code, message.status.message, message.payload)


# --------------------------------------------------------------------------- NRI


CONTAINER_STATE_NAMES = {0: "unknown", 1: "created", 2: "paused", 3: "running", 4: "stopped"}


@dataclass(frozen=True)
class PodSandbox:
    """What NRI tells about a pod (the fields kdra reads)."""

    id: str = ""
    name: str = ""
    uid: str = ""
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Container:
    """What NRI tells about a container (the fields kdra reads)."""

    id: str = ""
    pod_sandbox_id: str = ""
    name: str = ""
    state: int = 0
    env: tuple[str, ...] = ()
    """``KEY=value`` entries: the image's environment and the container's own."""


@dataclass(frozen=True)
class Configure:
    runtime_name: str = ""
    runtime_version: str = ""
    registration_timeout_ms: int = 0
    request_timeout_ms: int = 0
    config: str = ""


@dataclass(frozen=True)
class Synchronize:
    pods: tuple[PodSandbox, ...] = ()
    containers: tuple[Container, ...] = ()
    more: bool = False
    """More pods and containers follow in further Synchronize calls (a split sync)."""


@dataclass(frozen=True)
class CreateContainer:
    pod: PodSandbox
    container: Container


def _pod(message: Any) -> PodSandbox:
    return PodSandbox(message.id, message.name, message.uid, message.namespace,
                      dict(message.labels), dict(message.annotations))


def _container(message: Any) -> Container:
    return Container(message.id, message.pod_sandbox_id, message.name, message.state,
                     tuple(message.env))


def encode_empty() -> bytes:
    return _encode(_Empty())


def encode_register_plugin(name: str, index: str, nri_version: str = "") -> bytes:
    return _encode(_RegisterPluginRequest(plugin_name=name, plugin_idx=index,
                                          NRI_version=nri_version))


def decode_configure(data: bytes) -> Configure:
    m = _parse(_ConfigureRequest, data, "ConfigureRequest")
    return Configure(m.runtime_name, m.runtime_version, m.registration_timeout,
                     m.request_timeout, m.config)


def encode_configure_response(events: int) -> bytes:
    return _encode(_ConfigureResponse(events=events))


def decode_synchronize(data: bytes) -> Synchronize:
    m = _parse(_SynchronizeRequest, data, "SynchronizeRequest")
    return Synchronize(tuple(_pod(p) for p in m.pods),
                       tuple(_container(c) for c in m.containers), m.more)


def encode_synchronize_response(more: bool) -> bytes:
    return _encode(_SynchronizeResponse(more=more))


def decode_create_container(data: bytes) -> CreateContainer:
    m = _parse(_CreateContainerRequest, data, "CreateContainerRequest")
    return CreateContainer(_pod(m.pod), _container(m.container))


def encode_create_container_response(env: Iterable[tuple[str, str]] = (),
                                     cdi_devices: Sequence[str] = ()) -> bytes:
    """The adjustment of the container being created: env to set (an existing variable of
    the same name is replaced) and CDI devices to inject (fully qualified names)."""
    message = _CreateContainerResponse()
    for key, value in env:
        message.adjust.env.add(key=key, value=value)
    for name in cdi_devices:
        message.adjust.CDI_devices.add(name=name)
    return _encode(message)
