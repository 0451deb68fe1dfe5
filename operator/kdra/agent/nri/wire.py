"""NRI's two framings, without I/O: connection multiplexing, then ttrpc messages.

One unix socket between the plugin and the runtime carries several logical connections
(NRI's ``multiplex`` package). Each frame is an 8-byte header ``>II`` (connection id,
payload length) and the payload; the payloads of one connection, in order, form one byte
stream. Nothing opens a connection, it is just used: connection 1 carries the *Plugin*
service (the runtime calls the plugin, the plugin is the ttrpc server), connection 2 the
*Runtime* service (the plugin calls the runtime: RegisterPlugin).

On each connection's stream, ttrpc frames messages with a 10-byte header ``>IIBB`` (data
length, stream id, type: 1 request / 2 response / 3 data, flags) and the data (a protobuf
request or response envelope, :mod:`.messages`). Clients use odd stream ids.

Invariants:
- Decoders are incremental (bytes arrive in any split) and bounded: a mux payload longer
  than a whole ttrpc message (10 + 4 MiB), a ttrpc message longer than 4 MiB, or an unknown
  ttrpc message type raises :class:`ProtocolError` at its header, before anything is
  buffered for it; a decoder never holds more than one frame plus one read.
- :func:`mux_frames` writes frames of at most 4096 bytes, header included: containerd reads
  each connection through a 4096-byte buffer and drops a plugin that sends a larger frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "DATA",
    "MAX_MESSAGE",
    "MAX_MUX_PAYLOAD",
    "MAX_WRITE_FRAME",
    "PLUGIN_CONN",
    "REQUEST",
    "RESPONSE",
    "RUNTIME_CONN",
    "MuxDecoder",
    "ProtocolError",
    "TtrpcDecoder",
    "TtrpcMessage",
    "mux_frames",
    "ttrpc_frame",
]

MUX_HEADER = struct.Struct(">II")
TTRPC_HEADER = struct.Struct(">IIBB")

PLUGIN_CONN = 1
"""Connection carrying the Plugin service: the runtime calls, kdra answers."""
RUNTIME_CONN = 2
"""Connection carrying the Runtime service: kdra calls, the runtime answers."""

REQUEST, RESPONSE, DATA = 1, 2, 3
MAX_MESSAGE = 4 << 20
"""ttrpc's limit on a message's data."""
MAX_MUX_PAYLOAD = TTRPC_HEADER.size + MAX_MESSAGE
"""The mux's limit on one frame's payload (a whole ttrpc message)."""
MAX_WRITE_FRAME = 4096
"""The largest frame kdra writes, header included."""


class ProtocolError(Exception):
    """The peer broke the framing: the connection cannot be trusted any further."""


class MuxDecoder:
    """Split the socket's byte stream into ``(connection id, payload)`` frames."""

    def __init__(self, max_payload: int = MAX_MUX_PAYLOAD) -> None:
        self._buffer = bytearray()
        self._max = max_payload

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """Every frame completed by ``data``. Raises ProtocolError for an oversized frame."""
        buffer = self._buffer
        buffer += data
        frames: list[tuple[int, bytes]] = []
        offset = 0
        while len(buffer) - offset >= MUX_HEADER.size:
            conn, length = MUX_HEADER.unpack_from(buffer, offset)
            if length > self._max:
                raise ProtocolError(f"mux frame of {length} bytes on connection {conn} "
                                    f"(at most {self._max})")
            end = offset + MUX_HEADER.size + length
            if len(buffer) < end:
                break
            frames.append((conn, bytes(buffer[offset + MUX_HEADER.size:end])))
            offset = end
        if offset:
            del buffer[:offset]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)


def mux_frames(conn: int, data: bytes, max_frame: int = MAX_WRITE_FRAME) -> bytes:
    """``data`` for connection ``conn`` as frames of at most ``max_frame`` bytes."""
    chunk = max_frame - MUX_HEADER.size
    out = bytearray()
    for start in range(0, len(data), chunk):
        piece = data[start:start + chunk]
        out += MUX_HEADER.pack(conn, len(piece))
        out += piece
    return bytes(out)


@dataclass(frozen=True)
class TtrpcMessage:
    stream: int
    type: int
    flags: int
    data: bytes


class TtrpcDecoder:
    """Split one logical connection's byte stream into ttrpc messages."""

    def __init__(self, max_message: int = MAX_MESSAGE) -> None:
        self._buffer = bytearray()
        self._max = max_message

    def feed(self, data: bytes) -> list[TtrpcMessage]:
        """Every message completed by ``data``. Raises ProtocolError for an oversized
        message or an unknown message type."""
        buffer = self._buffer
        buffer += data
        messages: list[TtrpcMessage] = []
        offset = 0
        while len(buffer) - offset >= TTRPC_HEADER.size:
            length, stream, kind, flags = TTRPC_HEADER.unpack_from(buffer, offset)
            if length > self._max:
                raise ProtocolError(f"ttrpc message of {length} bytes on stream {stream} "
                                    f"(at most {self._max})")
            if kind not in (REQUEST, RESPONSE, DATA):
                raise ProtocolError(f"unknown ttrpc message type {kind} on stream {stream}")
            end = offset + TTRPC_HEADER.size + length
            if len(buffer) < end:
                break
            messages.append(TtrpcMessage(stream, kind, flags,
                                         bytes(buffer[offset + TTRPC_HEADER.size:end])))
            offset = end
        if offset:
            del buffer[:offset]
        return messages

    @property
    def buffered(self) -> int:
        return len(self._buffer)


def ttrpc_frame(stream: int, kind: int, data: bytes, flags: int = 0) -> bytes:
    """One ttrpc message. Raises ValueError when ``data`` exceeds ttrpc's limit."""
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"ttrpc message of {len(data)} bytes (at most {MAX_MESSAGE})")
    return TTRPC_HEADER.pack(len(data), stream, kind, flags) + data
