"""Jittered exponential backoff (kdra.kube.core.backoff): bounds, growth, cap, reproducibility."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from kdra.kube.core.backoff import Backoffs, backoff_ceiling, backoff_delay


@pytest.mark.parametrize(
    ("failures", "base", "cap", "ceiling"),
    [
        (1, 1.0, 30.0, 1.0),
        (2, 1.0, 30.0, 2.0),
        (3, 1.0, 30.0, 4.0),
        (5, 1.0, 30.0, 16.0),
        (6, 1.0, 30.0, 30.0),  # 32 capped
        (10_000, 1.0, 30.0, 30.0),  # no overflow
        (0, 1.0, 30.0, 1.0),  # counts as the first failure
        (-3, 0.5, 15.0, 0.5),
        (1, 0.05, 30.0, 0.05),  # the work queue's first retry
        (4, 0.05, 0.2, 0.2),
    ],
)
def test_ceiling(failures: int, base: float, cap: float, ceiling: float) -> None:
    assert backoff_ceiling(failures, base=base, cap=cap) == pytest.approx(ceiling)


@pytest.mark.parametrize(("base", "cap"), [(1.0, 30.0), (0.05, 30.0), (0.5, 15.0), (2.0, 2.0)])
def test_every_draw_is_within_half_and_all_of_the_ceiling(base: float, cap: float) -> None:
    rng = random.Random(1)
    for failures in range(1, 40):
        ceiling = backoff_ceiling(failures, base=base, cap=cap)
        draws = [backoff_delay(failures, base=base, cap=cap, rand=rng.random)
                 for _ in range(500)]
        assert min(draws) >= ceiling / 2
        assert max(draws) <= ceiling <= cap
        # Jittered: the draws spread over the upper half, not one value.
        assert max(draws) - min(draws) > ceiling * 0.4


def test_extremes_of_rand() -> None:
    assert backoff_delay(3, base=1.0, cap=30.0, rand=lambda: 0.0) == 2.0
    assert backoff_delay(3, base=1.0, cap=30.0, rand=lambda: 1.0) == 4.0
    assert backoff_delay(9, base=1.0, cap=30.0, rand=lambda: 0.0) == 15.0


def test_delays_grow_until_the_cap() -> None:
    rng = random.Random(2)
    means = [statistics.mean(backoff_delay(n, base=1.0, cap=30.0, rand=rng.random)
                             for _ in range(400)) for n in range(1, 9)]
    for before, after in itertools.pairwise(means[:6]):  # 1, 2, 4, 8, 16, 30 (capped)
        assert after > before * 1.5
    assert means[6] == pytest.approx(means[7], rel=0.1)  # both capped at 30: mean ~22.5
    assert 21.0 < means[7] < 24.0
    # Equal jitter keeps the *lower* bound growing: a retry n+2 never comes before retry n
    # could have come at the latest (until the cap).
    for n in range(1, 5):
        latest = backoff_delay(n, base=1.0, cap=30.0, rand=lambda: 1.0)
        earliest = backoff_delay(n + 2, base=1.0, cap=30.0, rand=lambda: 0.0)
        assert earliest >= latest


def test_a_seeded_random_makes_delays_reproducible() -> None:
    first = [backoff_delay(n, base=1.0, cap=30.0, rand=random.Random(42).random)
             for n in range(1, 10)]
    again = [backoff_delay(n, base=1.0, cap=30.0, rand=random.Random(42).random)
             for n in range(1, 10)]
    other = [backoff_delay(n, base=1.0, cap=30.0, rand=random.Random(43).random)
             for n in range(1, 10)]
    assert first == again
    assert first != other


def test_two_clients_failing_together_do_not_retry_together() -> None:
    """The point of jitter: clients that saw the same failure spread their retries."""
    clients = [random.Random(seed).random for seed in range(20)]
    retries = [backoff_delay(4, base=1.0, cap=30.0, rand=rand) for rand in clients]
    assert len({round(r, 2) for r in retries}) >= 15
    assert max(retries) - min(retries) > 1.5  # spread over [4, 8)


def test_backoffs_is_a_fresh_draw_per_iteration() -> None:
    rng = random.Random(3)
    delays = Backoffs(base=1.0, cap=8.0, attempts=6, rand=rng.random)
    assert len(delays) == 6
    first, second = list(delays), list(delays)
    assert len(first) == len(second) == 6
    assert first != second
    for n, (a, b) in enumerate(zip(first, second, strict=True), start=1):
        ceiling = backoff_ceiling(n, base=1.0, cap=8.0)
        assert ceiling / 2 <= a <= ceiling and ceiling / 2 <= b <= ceiling
