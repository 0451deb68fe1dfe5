"""The runtime's end of an NRI socket, scripted by a test: it accepts plugin connections,
answers RegisterPlugin and calls the plugin's methods, over a real unix socket and kdra's
own framing. (The real runtime is exercised in tests/node/test_nri.py; this side lets unit
tests send what containerd never would: malformed frames, refused registrations.)"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from pathlib import Path

from kdra.agent.nri.messages import (
    Request,
    Response,
    decode_request,
    decode_response,
    encode_empty,
    encode_request,
    encode_response,
)
from kdra.agent.nri.wire import (
    PLUGIN_CONN,
    REQUEST,
    RESPONSE,
    RUNTIME_CONN,
    MuxDecoder,
    TtrpcDecoder,
    mux_frames,
    ttrpc_frame,
)
from tests.unit.agent.nri_runtime_messages import decode_register_plugin

PLUGIN = "nri.pkg.api.v1alpha1.Plugin"


class PluginConnection:
    """One connected plugin, seen from the runtime."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 refuse_registration: str = "") -> None:
        self.reader, self.writer = reader, writer
        self.refuse = refuse_registration
        self.registered: asyncio.Future[tuple[str, str]] = \
            asyncio.get_running_loop().create_future()
        self.closed = asyncio.Event()
        self.frame_sizes: list[int] = []
        self._answers: dict[int, asyncio.Future[Response]] = {}
        self._stream = 1
        self._pump = asyncio.create_task(self._read())

    async def _read(self) -> None:
        mux, calls, answers = MuxDecoder(), TtrpcDecoder(), TtrpcDecoder()
        raw = bytearray()
        try:
            while data := await self.reader.read(65536):
                raw += data
                while len(raw) >= 8:  # record the plugin's frame sizes as written
                    length = struct.unpack_from(">II", raw)[1]
                    if len(raw) < 8 + length:
                        break
                    self.frame_sizes.append(8 + length)
                    del raw[:8 + length]
                for conn, payload in mux.feed(data):
                    if conn == RUNTIME_CONN:
                        for message in calls.feed(payload):
                            assert message.type == REQUEST
                            await self._registration(message.stream, message.data)
                    elif conn == PLUGIN_CONN:
                        for message in answers.feed(payload):
                            assert message.type == RESPONSE
                            future = self._answers.pop(message.stream)
                            future.set_result(decode_response(message.data))
        finally:
            self.closed.set()
            for future in self._answers.values():
                if not future.done():
                    future.set_exception(ConnectionError("plugin went away"))

    async def _registration(self, stream: int, data: bytes) -> None:
        request = decode_request(data)
        assert (request.service, request.method) == ("nri.pkg.api.v1alpha1.Runtime",
                                                     "RegisterPlugin")
        response = (Response(3, self.refuse) if self.refuse
                    else Response(payload=encode_empty()))
        self.write(ttrpc_frame(stream, RESPONSE, encode_response(response)), RUNTIME_CONN)
        if not self.registered.done():
            self.registered.set_result(decode_register_plugin(request.payload))

    def write(self, frame: bytes, conn: int = PLUGIN_CONN) -> None:
        self.writer.write(mux_frames(conn, frame))

    def write_raw(self, data: bytes) -> None:
        self.writer.write(data)

    async def call(self, method: str, payload: bytes, within: float = 2.0,
                   deadline: float | None = None) -> Response:
        """Call the plugin; ``deadline`` (default ``within``) is the one the request says."""
        stream, self._stream = self._stream, self._stream + 2
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._answers[stream] = future
        self.write(ttrpc_frame(stream, REQUEST, encode_request(
            Request(PLUGIN, method, payload, int((deadline or within) * 1e9)))))
        return await asyncio.wait_for(future, within)

    async def close(self) -> None:
        self.writer.close()
        self._pump.cancel()
        with contextlib.suppress(BaseException):
            await self._pump


class Runtime:
    """Listens on ``path``; each accepted plugin connection lands in :attr:`connections`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connections: asyncio.Queue[PluginConnection] = asyncio.Queue()
        self.refuse_registration = ""
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._accept, str(self.path))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self.connections.put(PluginConnection(reader, writer, self.refuse_registration))

    async def next(self, within: float = 10.0) -> PluginConnection:
        return await asyncio.wait_for(self.connections.get(), within)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
