"""How long to wait before retrying after an API error: capped exponential backoff with jitter.

Every kdra loop that retries after the API server failed (the watch in ``kdra.kube.client``,
the work queues, the binder, the node agent's start-up) takes its delay from
:func:`backoff_delay`, so there is one implementation. Jitter matters when the API server
comes back: without it, every client that saw the same failure retries at the same instants.

The scheme is "equal jitter" (AWS Architecture Blog, *Exponential Backoff And Jitter*): half
of the exponential step is kept, the other half is random. Unlike "full jitter", the delay
never drops towards zero, so it still grows with the number of failures.

Invariants:
- Pure: the randomness is passed in (``rand``, a ``random.random``-like callable returning a
  float in [0, 1)); a seeded ``random.Random(seed).random`` makes the delays reproducible.
- ``ceiling(n) = min(cap, base * 2 ** (n - 1))`` for the n-th consecutive failure (n >= 1;
  smaller n count as 1), and ``ceiling(n) / 2 <= backoff_delay(n) < ceiling(n) <= cap``
  (``== ceiling(n)`` only if ``rand`` returns 1.0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

Rand = Callable[[], float]
"""A source of floats in [0, 1), e.g. ``random.random`` or ``random.Random(7).random``."""


def backoff_ceiling(failures: int, *, base: float, cap: float) -> float:
    """The un-jittered delay after ``failures`` consecutive failures: ``base``, doubling,
    at most ``cap``."""
    exponent = min(max(failures, 1) - 1, 64)  # 2.0 ** 64 * base exceeds any sensible cap
    return min(cap, base * 2.0 ** exponent)


def backoff_delay(failures: int, *, base: float, cap: float, rand: Rand) -> float:
    """Seconds to wait after the ``failures``-th consecutive failure (equal jitter).

    Bounds: ``c / 2 <= delay <= c`` with ``c = min(cap, base * 2 ** (failures - 1))``; so the
    first retry waits between ``base / 2`` and ``base``, and no retry waits more than ``cap``.
    """
    ceiling = backoff_ceiling(failures, base=base, cap=cap)
    return ceiling / 2 + ceiling / 2 * rand()


@dataclass(frozen=True)
class Backoffs:
    """A re-iterable sequence of ``attempts`` jittered delays (failures 1, 2, ...): a fresh
    draw each time it is iterated. Fits where a library takes a list of retry delays and
    iterates it once per request, e.g. kopf's ``settings.networking.error_backoffs``."""

    base: float
    cap: float
    attempts: int
    rand: Rand

    def __len__(self) -> int:
        return self.attempts

    def __iter__(self) -> Iterator[float]:
        for failures in range(1, self.attempts + 1):
            yield backoff_delay(failures, base=self.base, cap=self.cap, rand=self.rand)
