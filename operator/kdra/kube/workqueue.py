"""A keyed work queue for level-based controllers (client-go's workqueue, in asyncio).

Watch events only *enqueue keys*; workers then reconcile each key against the current cache.

Invariants:
- A key is queued at most once at a time (adding a queued key is a no-op).
- A key is processed by at most one worker at a time; a key added while it is being processed
  is processed again afterwards (so no event is lost).
- A failing key is retried with per-key exponential backoff plus jitter, capped
  (:func:`kdra.kube.core.backoff.backoff_delay`); success resets its backoff. ``add_after``
  delays a key without counting as a failure.
- One key's failure (any exception) never stops the workers; it is logged and retried. An
  API or connection error is logged in one line (it names the request); anything else with
  its traceback (a bug).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from kdra.kube.core.backoff import backoff_delay
from kdra.kube.errors import ApiError

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)


class Retry(Exception):
    """Raise from a handler to retry the key later without logging a traceback."""

    def __init__(self, reason: str, delay: float | None = None) -> None:
        self.reason = reason
        self.delay = delay
        super().__init__(reason)


class WorkQueue(Generic[K]):
    def __init__(self, name: str, handler: Callable[[K], Awaitable[None]], *,
                 workers: int = 4, base_delay: float = 0.05, max_delay: float = 30.0) -> None:
        self.name = name
        self._handler = handler
        self._workers = workers
        self._base = base_delay
        self._max = max_delay
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._dirty: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._tasks: list[asyncio.Task[None]] = []

    def __len__(self) -> int:
        return len(self._queued) + len(self._timers)

    def add(self, key: K) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        if key in self._active:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.put_nowait(key)

    def add_after(self, key: K, delay: float) -> None:
        if key in self._timers or key in self._queued:
            return
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(delay, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def retry(self, key: K, delay: float | None = None) -> None:
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        if delay is None:
            delay = backoff_delay(failures, base=self._base, cap=self._max, rand=random.random)
        self.add_after(key, delay)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def start(self) -> None:
        for index in range(self._workers):
            self._tasks.append(asyncio.create_task(self._work(), name=f"{self.name}-{index}"))

    async def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            delay: float | None = None
            failed = False
            try:
                await self._handler(key)
            except asyncio.CancelledError:
                raise
            except Retry as signal:
                log.debug("%s: retrying %s: %s", self.name, key, signal.reason)
                failed, delay = True, signal.delay
            except (ApiError, OSError) as exc:
                log.warning("%s: reconciling %s failed (%s); will retry", self.name, key, exc)
                failed = True
            except Exception:
                log.exception("%s: reconciling %s failed; will retry", self.name, key)
                failed = True
            finally:
                self._active.discard(key)
            if failed:
                # A newer event is covered by the retry, which reads the latest state.
                self._dirty.discard(key)
                self.retry(key, delay)
                continue
            self.forget(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self.add(key)
