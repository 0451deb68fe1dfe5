"""Issue 36, attack 4: the webhook port, open to anyone who reaches it.

Three unauthenticated 60 MiB ``[{},{},...]`` POSTs to ``/validate`` took the operator to
~5 GB (bodies up to 64 MiB were read and decoded on the event loop), and another tenant's pod
creation timed out meanwhile.

Now, attacking as anyone on the network would (raw HTTPS to the port, no certificate, the
body streamed as fast as the server takes it):

* ``/validate`` and ``/mutate-pods`` answer 403 before reading a byte of the body: the
  operator takes only the API server's client certificate (``--webhook-client-ca``, which
  the test control plane's API server presents, as a cluster's admission configuration
  makes it);
* ``/convert``, which the API server calls without credentials, refuses a body over 32 MiB
  (413) or without a length (411) unread, bodies past 40 MiB in flight together (503), one
  that holds too many JSON values (400, not decoded), and one that trickles in (408 after
  30 s);

meanwhile another tenant's pod creations are answered by the webhooks (latency printed), the
operator's peak RSS stays within +100 MiB (printed), and afterwards a fresh pod binds, the
operator restarts and ``kdra check`` is clean (:meth:`Hostile.after_attack`).
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from tests.e2e.hostile_helpers import Hostile, hostile
from tests.e2e.hostile_watch import MIB, Memory, TenantProbe, logs_on_failure

__all__ = ["hostile", "logs_on_failure"]  # the module's fixtures

SIXTY_MIB = 60 * 1024 * 1024
CHUNK = 1024 * 1024


@dataclass
class Outcome:
    path: str
    status: int | None  # None: the server closed the connection without an answer
    sent: int
    seconds: float

    def __str__(self) -> str:
        answer = f"HTTP {self.status}" if self.status else "closed"
        return (f"{self.path}: {answer} after {self.sent / 1024 / 1024:.1f} MiB sent, "
                f"{self.seconds:.1f}s")


def _body(size: int, chunk: int = CHUNK) -> Iterator[bytes]:
    """``[{},{},...]`` of ``size`` bytes, in chunks of about ``chunk``."""
    piece = b"{}," * (chunk // 3)
    yield b"["
    sent = 1
    while sent + len(piece) + 3 < size:
        yield piece
        sent += len(piece)
    left = size - sent  # the rest, to the byte: a Content-Length is a promise
    count, pad = divmod(left - 3, 3)
    yield b"{}," * count + b"{}" + b" " * pad + b"]"


def attack(port: int, path: str, size: int, *, declared: bool = True,
           pause: float = 0.0, chunk: int = CHUNK) -> Outcome:
    """POST ``size`` bytes to ``path`` the way an attacker would: TLS without verifying the
    server, no client certificate, the body streamed until the server answers or closes."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    started = time.monotonic()
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=60) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
        framing = f"Content-Length: {size}" if declared else "Transfer-Encoding: chunked"
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Content-Type: application/json\r\n{framing}\r\n\r\n".encode())
        head = b""
        try:
            for data in _body(size, chunk):
                frame = data if declared else f"{len(data):x}\r\n".encode() + data + b"\r\n"
                sock.sendall(frame)
                sent += len(data)
                head = _early_answer(sock)
                if head:
                    break  # the server answered before the body was sent
                if pause:
                    time.sleep(pause)
            if not head and not declared:
                sock.sendall(b"0\r\n\r\n")
        except OSError:
            pass  # the server closed the connection: it read no further
        if not head:
            try:
                head = sock.recv(4096)
            except OSError:
                head = b""
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else None
    return Outcome(path, status, sent, time.monotonic() - started)


def _early_answer(sock: ssl.SSLSocket) -> bytes:
    """What the server has answered so far, without waiting (TLS 1.3 session tickets make
    the socket readable with nothing to read)."""
    if not select.select([sock], [], [], 0)[0]:
        return b""
    sock.setblocking(False)
    try:
        return sock.recv(4096)
    except (ssl.SSLWantReadError, BlockingIOError):
        return b""
    finally:
        sock.settimeout(60)


def concurrently(*calls: tuple[str, int, bool], port: int) -> list[Outcome]:
    results: list[Outcome] = []
    lock = threading.Lock()

    def run(path: str, size: int, declared: bool) -> None:
        outcome = attack(port, path, size, declared=declared)
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=run, args=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return results


def test_attack4_oversized_posts_to_the_webhook_port(hostile: Hostile) -> None:
    port = hostile.webhook_port
    memory = Memory(hostile).start()
    probe = TenantProbe(hostile).start()
    # A body that trickles in holds a connection, never the server: cut off after 30 s (the
    # API server's own limit for conversion webhooks), while the floods below go on.
    trickled: list[Outcome] = []
    trickle = threading.Thread(target=lambda: trickled.append(attack(
        port, "/convert", 64 * 1024, declared=True, pause=1.0, chunk=1024)))
    trickle.start()
    try:
        # The attack: three 60 MiB bodies to /validate at once (and to /mutate-pods).
        outcomes = concurrently(*[("/validate", SIXTY_MIB, True)] * 3,
                                ("/mutate-pods", SIXTY_MIB, False), port=port)
        for outcome in outcomes:
            print(f"\n[attack] {outcome}")
            assert outcome.status == 403
            assert outcome.sent < 8 * 1024 * 1024  # refused before the body was read
        # /convert takes no certificate (the API server sends none to conversion webhooks):
        # its limits hold instead.
        twenty = 20 * 1024 * 1024
        outcomes = concurrently(("/convert", SIXTY_MIB, True), ("/convert", SIXTY_MIB, False),
                                *[("/convert", twenty, True)] * 3, port=port)
        for outcome in sorted(outcomes, key=lambda o: o.sent):
            print(f"[attack] {outcome}")
            # 413: over 32 MiB; 411: no Content-Length; 503: the bodies in flight would pass
            # 40 MiB; 400: too many JSON values (below).
            assert outcome.status in (400, 411, 413, 503)
        assert {o.status for o in outcomes} >= {411, 413}
        # Alone, within the size: 30 MiB of [{},...] holds ten million JSON values, refused
        # before anything is decoded (a Python object each: over a gigabyte).
        solo = attack(port, "/convert", 30 * 1024 * 1024)
        print(f"[attack] alone: {solo}")
        assert solo.status == 400
        hostile.fresh_pod_binds("the webhook port attacks")
        trickle.join(timeout=120)
        print(f"[attack] trickling {trickled[0]}")
        assert trickled[0].status == 408
    finally:
        probe.stop("during the webhook port attacks")
    assert memory.growth_kib("three 60 MiB POSTs and the /convert floods") <= 100 * MIB
    hostile.after_attack("the webhook port attacks")
