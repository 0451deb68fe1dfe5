"""One connection to a container runtime's NRI socket: the mux, a ttrpc server answering the
runtime's calls (connection 1, the Plugin service) and a ttrpc client for kdra's own calls
(connection 2, the Runtime service), on asyncio streams.

Invariants:
- :meth:`Session.run` never raises for anything the peer sends: a framing error, a message
  that does not decode, an unexpected message type or an I/O error ends the session (closes
  the socket, fails pending calls with ConnectionError) and is recorded in
  :attr:`Session.reason`; the caller reconnects.
- Each request is served in its own task, at most ``max_inflight`` at a time (the reader
  waits for a free slot: back-pressure instead of unbounded tasks). A handler that outlives
  the caller's deadline (``timeout_nano``) is cancelled and answered DEADLINE_EXCEEDED.
- A handler's :class:`RpcError` becomes the response status (the runtime shows its message);
  any other exception is logged and answered INTERNAL, except a :class:`MessageError` (the
  request's payload does not decode), which ends the session like any malformed input.
- Frames of one message are written with one ``write`` call (no interleaving within a
  connection's stream); a write that cannot drain within ``write_timeout`` ends the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from kdra.agent.nri.messages import (
    MessageError,
    Request,
    Response,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kdra.agent.nri.wire import (
    PLUGIN_CONN,
    REQUEST,
    RESPONSE,
    RUNTIME_CONN,
    MuxDecoder,
    ProtocolError,
    TtrpcDecoder,
    TtrpcMessage,
    mux_frames,
    ttrpc_frame,
)

log = logging.getLogger(__name__)

# gRPC status codes (ttrpc uses google.rpc.Status)
OK = 0
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
FAILED_PRECONDITION = 9
UNIMPLEMENTED = 12
INTERNAL = 13

Handler = Callable[[str, str, bytes], Awaitable[bytes]]
"""``handler(service, method, payload)`` → the encoded result, or raises RpcError."""

READ_SIZE = 64 * 1024


class RpcError(Exception):
    """A call failed with a status: raised by handlers to answer with it, and by
    :meth:`Session.call` when the runtime answered with one."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Session:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 handler: Handler, *, max_inflight: int = 32,
                 write_timeout: float = 5.0) -> None:
        self._reader = reader
        self._writer = writer
        self._handler = handler
        self._write_timeout = write_timeout
        self._mux = MuxDecoder()
        self._served = TtrpcDecoder()  # connection 1: requests from the runtime
        self._answers = TtrpcDecoder()  # connection 2: responses to our calls
        self._pending: dict[int, asyncio.Future[Response]] = {}
        self._next_stream = 1
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(max_inflight)
        self._closed = asyncio.Event()
        self.reason = ""
        """Why the session ended (empty while it runs)."""

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    async def run(self) -> None:
        """Read and dispatch until the session ends (see the module's invariants)."""
        reason = "closed"
        try:
            while not self.closed:
                data = await self._reader.read(READ_SIZE)
                if not data:
                    reason = "the runtime closed the connection"
                    break
                for conn, payload in self._mux.feed(data):
                    if conn == PLUGIN_CONN:
                        for message in self._served.feed(payload):
                            await self._on_request(message)
                    elif conn == RUNTIME_CONN:
                        for message in self._answers.feed(payload):
                            self._on_response(message)
                    # Other connections: nobody opened them; dropped (as NRI's mux does).
        except (ProtocolError, MessageError) as exc:
            reason = f"protocol error: {exc}"
        except (OSError, EOFError) as exc:
            reason = f"connection error: {exc!r}"
        finally:
            self.close(reason)

    def close(self, reason: str) -> None:
        """End the session: close the socket, fail pending calls, cancel running handlers."""
        if self.closed:
            return
        self.reason = reason
        self._closed.set()
        with contextlib.suppress(Exception):
            self._writer.close()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError(reason))
        self._pending.clear()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()

    async def wait_closed(self) -> None:
        await self._closed.wait()
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()

    # ------------------------------------------------------------------ server side

    async def _on_request(self, message: TtrpcMessage) -> None:
        if message.type != REQUEST:
            raise ProtocolError(f"ttrpc message type {message.type} from the runtime on the "
                                "plugin service (only unary requests are served)")
        if message.stream % 2 == 0:
            raise ProtocolError(f"request on even stream id {message.stream}")
        request = decode_request(message.data)
        await self._slots.acquire()
        if self.closed:
            self._slots.release()
            return
        task = asyncio.create_task(self._serve(message.stream, request),
                                   name=f"nri-{request.method}-{message.stream}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, stream: int, request: Request) -> None:
        timeout = request.timeout_nano / 1e9 if request.timeout_nano > 0 else None
        try:
            try:
                payload = await asyncio.wait_for(
                    self._handler(request.service, request.method, request.payload), timeout)
                response = Response(payload=payload)
            except RpcError as exc:
                response = Response(exc.code, exc.message)
            except TimeoutError:
                log.warning("NRI: %s/%s took longer than the runtime's %.3f s deadline",
                            request.service, request.method, timeout)
                response = Response(DEADLINE_EXCEEDED, "kdra: deadline exceeded")
            except MessageError as exc:
                self.close(f"protocol error: {exc}")
                return
            except Exception as exc:  # a bug must not end the agent: answer it
                log.exception("NRI: %s/%s failed", request.service, request.method)
                response = Response(INTERNAL, f"kdra: internal error: {exc!r}"[:1024])
            with contextlib.suppress(ConnectionError):
                await self._send(PLUGIN_CONN, ttrpc_frame(stream, RESPONSE,
                                                          encode_response(response)))
        finally:
            self._slots.release()

    # ------------------------------------------------------------------ client side

    def _on_response(self, message: TtrpcMessage) -> None:
        if message.type != RESPONSE:
            raise ProtocolError(f"ttrpc message type {message.type} from the runtime on the "
                                "runtime service (only responses expected)")
        response = decode_response(message.data)
        future = self._pending.pop(message.stream, None)
        if future is None:
            log.debug("NRI: response on stream %d nobody waits for (late?)", message.stream)
        elif not future.done():
            future.set_result(response)

    async def call(self, service: str, method: str, payload: bytes, *, within: float
                   ) -> bytes:
        """Call ``service/method`` on the runtime, giving it ``within`` seconds. Raises
        RpcError (an error status), TimeoutError, or ConnectionError (the session ended)."""
        if self.closed:
            raise ConnectionError(self.reason)
        stream = self._next_stream
        self._next_stream += 2
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[stream] = future
        try:
            request = Request(service, method, payload, int(within * 1e9))
            await self._send(RUNTIME_CONN, ttrpc_frame(stream, REQUEST,
                                                       encode_request(request)))
            response = await asyncio.wait_for(future, within)
        finally:
            self._pending.pop(stream, None)
        if response.code != OK:
            raise RpcError(response.code, response.message)
        return response.payload

    # ------------------------------------------------------------------ writes

    async def _send(self, conn: int, frame: bytes) -> None:
        if self.closed:
            raise ConnectionError(self.reason)
        try:
            self._writer.write(mux_frames(conn, frame))
            await asyncio.wait_for(self._writer.drain(), self._write_timeout)
        except (TimeoutError, OSError) as exc:
            self.close(f"write failed: {exc!r}")
            raise ConnectionError(self.reason) from exc
