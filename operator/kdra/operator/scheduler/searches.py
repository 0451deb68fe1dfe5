"""Long allocation searches, stepped in slices beside the binder's scheduling loop.

The binder evaluates a pod's candidate nodes with :class:`~kdra.dra.allocator.Placing`
and gives it one slice of search steps inline: nearly every pod is decided within it, as
before. A pod whose search needs more is handed to :class:`Searches`, which steps it one slice
at a time, yielding to the event loop between slices, so the loop goes on scheduling other
pods meanwhile (the single scheduling loop would otherwise serve nobody while one pod's
search tries every combination). A search ends with its outcome, or when it has spent its
budget of steps or time (upstream's scheduler bounds the same search with a filter timeout,
10 s by default); then the placements found so far are all there is, and a pod without any
is retried later (``AllocationSearchExhausted``).

Steps count the selectors' run-time cost too (:mod:`kdra.dra.allocator.pacing`): a slice
also ends between two evaluations of a node's devices, so a tenant's selector that costs the
CEL limit on each of a node's 128 devices holds the loop for one evaluation at a time (the
inline slice included), not for all 128, and spends the pod's budget like a long search does.

A gang's joint search (:mod:`.gangs`) runs here too, with the gang's budget (its members'
together): one runner for both, so a long search of either kind never holds the scheduling
loop, and the two kinds never run at once.

Invariants:
- One long search runs at a time, in the order they were handed over. Its step budget counts
  every step of the pod's attempt; its deadline counts from when it starts running, so
  waiting behind another search does not use it up.
- After each slice the search sleeps as long as the slice took, so it never takes more than
  half of the event loop: watch events, bind tasks and the scheduling loop (which yields once
  per pod while a search is waiting, see ``Binder._run``) get the rest. A slice overruns its
  steps by at most one slot's scan or one selector evaluation (at most the CEL limit).
- A cancelled search (its pod was deleted or bound meanwhile) never calls back; one that
  fails with an unexpected exception calls ``on_error`` instead, so its pod is retried.
- Nothing here touches the snapshot directly; the callback re-checks a placement against the
  snapshot as it is then (``Placing.still_fits``) before the binder takes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from kdra.dra.scheduling import SearchBudget
from kdra.kube.store import Key

log = logging.getLogger(__name__)

Limit = Literal["", "steps", "deadline"]
"""What ended a search early: nothing (it finished), its step budget, or its deadline."""

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Stepped(Protocol[T_co]):
    """A search that goes on in slices: :class:`~kdra.dra.allocator.Placing` (one pod) or
    :class:`~kdra.dra.allocator.gang.GangSearch` (a gang)."""

    @property
    def steps(self) -> int: ...

    def advance(self, steps: int | None) -> T_co | None: ...

    def give_up(self) -> T_co: ...


Done = Callable[[T, Limit, float], Awaitable[None]]
"""Called with the outcome, what ended the search early, and the seconds it ran."""


@dataclass
class _Job(Generic[T]):
    key: Key
    search: Stepped[T]
    done: Callable[[T, Limit, float], Awaitable[None]]
    steps: int
    timeout: float
    on_error: Callable[[Key], None] | None


class Searches:
    """The long searches the binder handed over; :meth:`stop` cancels them."""

    def __init__(self, budget: SearchBudget,
                 on_error: Callable[[Key], None] | None = None) -> None:
        """``on_error(key)``: a search failed with an unexpected exception (a bug); the
        caller retries the pod later."""
        self.budget = budget
        self.on_error = on_error
        self._jobs: dict[Key, _Job[Any]] = {}
        self._ready = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._current: Key | None = None

    def __contains__(self, key: object) -> bool:
        return key in self._jobs

    def __len__(self) -> int:
        return len(self._jobs)

    def start(self, key: Key, search: Stepped[T], done: Callable[[T, Limit, float],
                                                                 Awaitable[None]],
              *, steps: int | None = None, timeout: float | None = None,
              on_error: Callable[[Key], None] | None = None) -> None:
        """Search on for ``key`` (a pod, or a gang's own key; after those already waiting);
        ``done`` gets the outcome. ``steps`` / ``timeout``: the search's budget (default:
        one pod's); ``on_error``: called instead of the runner's for this search. A key has
        at most one search (a second one replaces the first)."""
        self._jobs.pop(key, None)
        self._jobs[key] = _Job(key, search, done,
                               self.budget.steps if steps is None else steps,
                               self.budget.timeout if timeout is None else timeout,
                               on_error if on_error is not None else self.on_error)
        self._ready.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="binder-searches")

    def cancel(self, key: Key) -> None:
        """Forget pod ``key``'s search (its callback is not called)."""
        self._jobs.pop(key, None)

    async def stop(self) -> None:
        self._jobs.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            while not self._jobs:
                self._ready.clear()
                await self._ready.wait()
            job = next(iter(self._jobs.values()))
            try:
                await self._search(job)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("searching a placement for %s/%s failed", *job.key)
                if job.on_error is not None:
                    job.on_error(job.key)
            finally:
                if self._jobs.get(job.key) is job:
                    del self._jobs[job.key]

    async def _search(self, job: _Job[Any]) -> None:
        search = job.search
        started = time.monotonic()
        deadline = started + job.timeout
        limit: Limit = ""
        while True:
            if search.steps >= job.steps:  # the binder's inline slice included
                limit = "steps"
            elif time.monotonic() >= deadline:
                limit = "deadline"
            if limit:
                outcome = search.give_up()
                break
            began = time.monotonic()
            result = search.advance(min(self.budget.slice, job.steps - search.steps))
            if result is not None:
                outcome = result
                break
            # As long again for everything else: the search takes at most half the loop.
            await asyncio.sleep(time.monotonic() - began)
            if self._jobs.get(job.key) is not job:
                return  # cancelled meanwhile
        del self._jobs[job.key]
        await job.done(outcome, limit, time.monotonic() - started)
