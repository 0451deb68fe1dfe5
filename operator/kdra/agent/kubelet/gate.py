"""The plugin's sockets, as the kubelet reaches them: a unix socket that only the callers its
permissions allow may use, spliced to grpcio's own socket.

grpcio's Python server does not tell who is calling over a unix socket (no peer credentials),
so the sockets the kubelet knows — the registration socket in ``plugins_registry`` and the DRA
service's ``dra.sock`` — are not grpcio's. A :class:`GatedSocket` listens there, reads each
caller's credentials from the kernel (``SO_PEERCRED``: pid, uid, gid) and either splices the
connection to grpcio's socket, which lives in a private directory (mode 0700, the agent's own
temporary directory), or closes it at once. Who is allowed is decided by
:func:`kdra.agent.core.kubelet.peer_may_connect` from the permission bits of the socket and its
directory *now*: the kernel already refuses a ``connect`` they forbid, and the gate refuses a
caller that got past them anyway (``CAP_DAC_OVERRIDE``, a descriptor passed on, a bind mount).

Invariants:
- The socket is bound, made mode 0600 (owner: the agent's user, root in the DaemonSet), and
  only then listens: there is no moment when another user could connect.
- A stale socket at the path (left by a killed agent) is replaced; anything else there (a
  file, a directory) is an error, never deleted.
- :meth:`GatedSocket.stop` removes the socket only while the path is still the one this gate
  created (same inode): a newer agent's socket is never removed.
- Every refused connection is counted (``kdra_agent_kubelet_refused_connections_total``) and
  logged with the caller's pid, uid and gid (at most once a minute per uid).
- A connection is spliced byte for byte both ways until either side closes; a failing side
  closes both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kdra.agent import metrics
from kdra.agent.core.kubelet import peer_may_connect

log = logging.getLogger(__name__)

_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
CHUNK = 64 * 1024
REFUSAL_LOG_INTERVAL = 60.0


class GateError(OSError):
    """The socket cannot be created (the message names the path and why)."""


@dataclass(frozen=True)
class Peer:
    """The process at the other end of a unix socket connection (``SO_PEERCRED``)."""

    pid: int
    uid: int
    gid: int


def peer_of(sock: socket.socket) -> Peer:
    pid, uid, gid = _CRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                 _CRED.size))
    return Peer(pid, uid, gid)


def permitted(path: Path) -> Callable[[Peer], bool]:
    """The gate's rule: may ``peer`` connect to ``path`` by the permission bits of the socket
    and its directory (read at each connection)?"""

    def allow(peer: Peer) -> bool:
        try:
            directory, sock = os.stat(path.parent), os.stat(path)
        except OSError:
            return False
        return peer_may_connect(peer.uid, peer.gid,
                                directory=(directory.st_uid, directory.st_gid,
                                           directory.st_mode & 0o777),
                                socket=(sock.st_uid, sock.st_gid, sock.st_mode & 0o777))

    return allow


def bind_socket(path: Path, mode: int = 0o600) -> socket.socket:
    """A unix stream socket bound at ``path`` with ``mode``, not yet listening; a stale socket
    there is replaced, its directory created (0700) when missing."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
        else:
            raise GateError(f"{path} exists and is not a socket: not replacing it")
    except FileNotFoundError:
        pass
    except GateError:
        raise
    except OSError as exc:
        raise GateError(f"cannot prepare {path}: {exc}") from exc
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        os.chmod(path, mode)
    except OSError as exc:
        sock.close()
        raise GateError(f"cannot create the socket {path}: {exc}") from exc
    return sock


class GatedSocket:
    """A socket at ``path`` whose allowed callers are spliced to ``backend`` (grpcio's)."""

    def __init__(self, path: Path, backend: Path, *,
                 allow: Callable[[Peer], bool] | None = None) -> None:
        self.path = path
        self.backend = backend
        self.allow = allow or permitted(path)
        self._server: asyncio.Server | None = None
        self._inode: int | None = None
        self._splices: set[asyncio.Task[None]] = set()
        self._logged: dict[int, float] = {}  # uid → when its last refusal was logged
        self.refused = 0

    async def start(self) -> None:
        sock = bind_socket(self.path)
        self._inode = os.stat(self.path).st_ino
        try:
            self._server = await asyncio.start_unix_server(self._accept, sock=sock)
        except OSError as exc:
            sock.close()
            self._remove()
            raise GateError(f"cannot listen on {self.path}: {exc}") from exc

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for task in list(self._splices):
            task.cancel()
        await asyncio.gather(*self._splices, return_exceptions=True)
        self._remove()

    def _remove(self) -> None:
        with contextlib.suppress(OSError):
            if self._inode is not None and os.lstat(self.path).st_ino == self._inode:
                self.path.unlink()
        self._inode = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        try:
            peer = peer_of(sock)
        except OSError as exc:
            log.warning("kubelet plugin socket %s: cannot read the caller's credentials (%s); "
                        "connection closed", self.path, exc)
            self._refuse(writer)
            return
        if not self.allow(peer):
            now = time.monotonic()
            if now - self._logged.get(peer.uid, -REFUSAL_LOG_INTERVAL) >= REFUSAL_LOG_INTERVAL:
                if len(self._logged) > 1024:  # bounded: forget who was logged when
                    self._logged.clear()
                self._logged[peer.uid] = now
                log.warning("kubelet plugin socket %s: refused a connection from pid %d "
                            "(uid %d, gid %d): the socket's permissions allow only its owner "
                            "(the kubelet runs as root)", self.path, peer.pid, peer.uid,
                            peer.gid)
            self._refuse(writer)
            return
        task = asyncio.current_task()
        if task is not None:
            self._splices.add(task)
        try:
            await self._splice(reader, writer)
        finally:
            if task is not None:
                self._splices.discard(task)

    def _refuse(self, writer: asyncio.StreamWriter) -> None:
        self.refused += 1
        metrics.record_kubelet_refusal()
        writer.close()

    async def _splice(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_unix_connection(str(self.backend))
        except OSError as exc:
            log.warning("kubelet plugin socket %s: the plugin's server is not reachable (%s)",
                        self.path, exc)
            writer.close()
            return
        pumps = [asyncio.create_task(_pump(reader, up_writer)),
                 asyncio.create_task(_pump(up_reader, writer))]
        try:
            await asyncio.gather(*pumps)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for end in (writer, up_writer):
                end.close()


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy ``source`` to ``sink`` until end of file; then half-close ``sink``."""
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (ConnectionError, OSError):
        sink.close()
