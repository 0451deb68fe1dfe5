"""CEL evaluation paced like search steps: what a tenant's selector costs at run time counts
against the same budget as the search, and an evaluation stops a slice like a step does.

A selector admitted by its estimate may still cost up to the run-time limit (1,000,000 units)
per device, and the units that take longest in kdra's Python are those of walks over nested
lists (``==``, ``in``, ``format`` of a list that holds one list many times): 0.2-0.8 µs each,
so one evaluation takes up to ~0.8 s. The allocator evaluates a request's selectors on every
device of a node before its search (memoised per device), so before this module a node with
128 devices held its caller — the binder's event loop, where the webhooks are served too —
for 128 such evaluations in one go (tens of seconds).

Now each evaluation's actual cost (:meth:`~kdra.dra.cel.DeviceSelector.evaluate`: the units
its comprehension steps and metered calls were charged, the limit for one stopped there; 0
for an ordinary selector) is added to :attr:`Stats.cel_cost`, and a caller with a budget of
steps opens a :class:`Meter`:

- evaluations inside it may spend about ``steps`` x :data:`UNITS_PER_STEP` units; once they
  have, the next evaluation that is not memoised raises :class:`Paused` *before* it starts
  (nothing is evaluated or memoised), and the caller returns "not done" and resumes later —
  the results memoised so far are kept, so resuming costs memo look-ups, not evaluations;
- :meth:`Meter.steps` converts the units spent into search steps, which the caller adds to
  its steps: a pod's search budget (steps, steps per node) covers its selectors' cost too.

Conversion: :data:`UNITS_PER_STEP` is 2, so that a step's worth of units takes about as
long as a step (a device tried by the backtracking walk: 1.1-1.9 µs) for the slowest units
(walks: 0.2-0.8 µs each); a pod's budget then bounds the time its selectors take as it
bounds its walk. Cheaper units (comprehensions: 0.02-0.07 µs; ``findAll``: 0.1 µs) are
overcharged, which only selectors charged at all can notice (``bench/cel_pacing.py``
measures all of it).

Invariants:
- Ordinary selectors are free: a selector that cannot be charged (no comprehension, no
  metered call: ``DeviceSelector.charged``) adds nothing, never pauses, and costs two
  comparisons per memo miss.
- An allowance (a :class:`Meter`'s, or the one :class:`~.cluster.Placing` sets per slice)
  always lets its first evaluation run (it is at least one unit; a meter inside a spent one
  excepted), so a caller that resumes with a fresh allowance always makes progress; a slice
  overruns its allowance by at most one evaluation (at most 1,000,000 units).
- :class:`Paused` is raised only between evaluations, never inside one, and only while an
  allowance is set (``Stats.pause_at``); without one nothing pauses.
- Meters nest: the inner allowance never exceeds the outer one, and closing a meter restores
  the outer allowance.
"""

from __future__ import annotations

from types import TracebackType
from typing import Final, Protocol

from kdra.dra.allocator.stats import Stats

__all__ = ["UNITS_PER_STEP", "Meter", "Paused", "StepBudget", "steps_of"]

UNITS_PER_STEP: Final = 2
"""CEL cost units worth one search step (see the module doc for the measurement)."""


class Paused(Exception):
    """The caller's allowance of CEL cost is spent: a selector evaluation was about to start.
    Nothing was evaluated; call again with a fresh allowance (memoised results stay)."""


def steps_of(units: int) -> int:
    """Search steps worth ``units`` of CEL cost (rounded up: any cost is at least a step)."""
    return -(-units // UNITS_PER_STEP)


class Meter:
    """CEL cost spent by one caller's synchronous section on ``stats``, within an allowance of
    ``steps`` search steps (None: no allowance, nothing pauses). Use as a context manager, or
    call :meth:`close`."""

    __slots__ = ("_outer", "start", "stats")

    def __init__(self, stats: Stats, steps: int | None) -> None:
        self.stats = stats
        self.start = stats.cel_cost
        self._outer = stats.pause_at
        if steps is not None:
            limit = self.start + max(1, steps * UNITS_PER_STEP)
            stats.pause_at = limit if self._outer is None else min(self._outer, limit)

    @property
    def units(self) -> int:
        """Units of CEL cost spent since the meter opened."""
        return self.stats.cel_cost - self.start

    def steps(self) -> int:
        """The units spent, as search steps (:func:`steps_of`)."""
        return steps_of(self.units)

    def close(self) -> None:
        self.stats.pause_at = self._outer

    def __enter__(self) -> Meter:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


class _Search(Protocol):
    """A node's search (:class:`~.choices.ChoiceSearch`, :class:`~.search.NodeSearch`)."""

    stats: Stats
    steps: int

    def advance(self, steps: int | None) -> bool: ...


class StepBudget:
    """Steps several searches may spend together, their selectors' run-time cost included
    (``left``: None for no limit)."""

    __slots__ = ("left", "spent")

    def __init__(self, steps: int | None) -> None:
        self.left = steps
        self.spent = 0

    @property
    def out(self) -> bool:
        return self.left is not None and self.left <= 0

    def advance(self, search: _Search) -> bool:
        """``search.advance`` within what is left: True once it finished, False when it
        paused or ran out first. What it spent is counted also when it raises."""
        before = search.steps
        meter = Meter(search.stats, self.left)
        try:
            return search.advance(self.left)
        except Paused:
            return False
        finally:
            meter.close()
            spent = search.steps - before + meter.steps()
            self.spent += spent
            if self.left is not None:
                self.left -= spent
