"""The C allocator's figures and the trimmer (glibc on this machine and in the image)."""

from __future__ import annotations

import ctypes

import pytest
from prometheus_client import generate_latest

from kdra.kube import memory, metrics

glibc = memory.malloc_stats() is not None
needs_glibc = pytest.mark.skipif(not glibc, reason="mallinfo2 needs glibc >= 2.33")


@needs_glibc
def test_in_use_follows_a_large_allocation_and_its_release() -> None:
    before = memory.malloc_stats()
    assert before is not None
    # 32 MiB: above any mmap threshold, so the block is mmapped, counted in use, and unmapped
    # again on free (heap fragmentation cannot blur the figure).
    block = ctypes.create_string_buffer(32 << 20)
    during = memory.malloc_stats()
    assert during is not None and during.in_use >= before.in_use + (32 << 20)
    del block
    after = memory.malloc_stats()
    assert after is not None and after.in_use < during.in_use - (31 << 20)


@needs_glibc
def test_trim_gives_free_heap_pages_back() -> None:
    # Many small blocks from the heap, every other one kept: freeing the rest leaves holes
    # that only malloc_trim(0) returns (the top of the heap is pinned by the kept ones).
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = [libc.malloc(64 << 10) for _ in range(400)]
    for block in blocks[::2]:
        libc.free(block)
    stats = memory.malloc_stats()
    assert stats is not None and stats.free >= 200 * (64 << 10)
    try:
        assert memory.trim() is True
    finally:
        for block in blocks[1::2]:
            libc.free(block)


@needs_glibc
def test_the_default_registry_exports_the_gauges() -> None:
    text = generate_latest(metrics.REGISTRY).decode()
    assert "kdra_malloc_in_use_bytes " in text
    assert "kdra_malloc_free_bytes " in text


def test_a_zero_interval_starts_no_thread() -> None:
    assert memory.start_trimmer(0) is None
