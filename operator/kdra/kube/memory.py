"""What the C allocator holds, and giving its free pages back: for long-running processes.

A Python process's RSS is not its live memory. Objects of more than 512 bytes (most API
objects: JSON dicts and strings) come from glibc's ``malloc``; when they are freed, the space
stays in the heap for reuse, and glibc returns it to the kernel only from the top of the heap
and only past a threshold that grows with the largest block freed (a big LIST response raises
it to megabytes). Under a steady stream of pods the heap is sliced ever more finely, so RSS
creeps up although the live bytes do not (measured in bench/soak.py: ``[heap]`` grew while
every Python allocation site that grew was a bounded cache).

- :func:`malloc_stats` reads glibc's ``mallinfo2()``: bytes in use, bytes free inside the
  heap. Exported as Prometheus gauges by :class:`MallocCollector`, so a growing RSS can be told
  apart: live memory (in use grows) or free space kept (free grows).
- :func:`start_trimmer` calls ``malloc_trim(0)`` every ``interval`` seconds from a daemon
  thread: it returns every free page of the heap (not only its top) to the kernel.

Invariants: on a C library without these functions (musl, macOS) both are no-ops — no
gauges, no thread — and nothing raises. ``malloc_trim`` frees no live object; it runs
outside the GIL (ctypes releases it), so the event loop is not stopped while it walks the
heap (milliseconds for a heap of ~50 MiB).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+): every field a ``size_t``."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


@dataclass(frozen=True, slots=True)
class MallocStats:
    in_use: int
    """Bytes of live allocations (heap blocks in use plus mmapped blocks)."""
    free: int
    """Bytes free inside the heap: kept for reuse, counted in RSS until trimmed."""
    heap: int
    """Bytes of heap obtained from the kernel (``sbrk``; the main arena)."""


@cache
def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        libc.mallinfo2.restype = _MallInfo2
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError, TypeError):
        return None  # not glibc >= 2.33
    return libc


def malloc_stats() -> MallocStats | None:
    """The C allocator's figures now, or None where ``mallinfo2`` is missing."""
    libc = _libc()
    if libc is None:
        return None
    info = libc.mallinfo2()
    return MallocStats(in_use=info.uordblks + info.hblkhd, free=info.fordblks,
                       heap=info.arena)


def trim() -> bool:
    """Give the heap's free pages back to the kernel; True when some were."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


class MallocCollector(Collector):
    """``kdra_malloc_in_use_bytes`` and ``kdra_malloc_free_bytes``, read at each scrape."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        stats = malloc_stats()
        if stats is None:
            return
        yield GaugeMetricFamily(
            "kdra_malloc_in_use_bytes",
            "Bytes the C allocator (glibc malloc) has handed out and not got back: the "
            "process's live memory outside Python's small-object arenas.", value=stats.in_use)
        yield GaugeMetricFamily(
            "kdra_malloc_free_bytes",
            "Bytes free inside the C allocator's heap, kept for reuse (counted in RSS until "
            "malloc_trim gives them back; see --malloc-trim-interval).", value=stats.free)


def start_trimmer(interval: float) -> threading.Thread | None:
    """Trim every ``interval`` seconds from a daemon thread (None: 0 or no glibc)."""
    if interval <= 0 or _libc() is None:
        return None
    def run() -> None:  # until the process ends (a daemon thread)
        while True:
            time.sleep(interval)
            try:
                trim()
            except Exception:  # never let a diagnostic take the process down
                log.exception("malloc_trim failed")

    thread = threading.Thread(target=run, name="malloc-trim", daemon=True)
    thread.start()
    return thread
