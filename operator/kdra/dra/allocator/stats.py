"""Counters of the allocator's work, for tests, the benchmark and metrics.

One :class:`Stats` lives on each :class:`~kdra.dra.allocator.snapshot.Snapshot`; every
operation on that snapshot adds to it. Counters only grow; take a :meth:`Stats.copy` before and
subtract to measure one call. One field is not a counter: :attr:`Stats.pause_at`, the CEL
allowance of the caller running now (:mod:`.pacing`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace


@dataclass(slots=True)
class Stats:
    cel_evaluations: int = 0
    """CEL selector evaluations actually run (memo misses)."""
    memo_hits: int = 0
    """Selector results answered from a device's memo."""
    match_lists_built: int = 0
    """Per-node lists of devices matching a selector set, built (cache misses)."""
    searches: int = 0
    """Per-node backtracking searches started."""
    search_steps: int = 0
    """Devices tried by the searches (a measure of backtracking)."""
    pool_gathers: int = 0
    """Per-node pool gatherings (cache misses)."""
    cel_cost: int = 0
    """Run-time CEL cost the evaluations were charged (units of the 1,000,000 budget each
    evaluation has; 0 for selectors without comprehensions or metered calls)."""
    pause_at: int | None = field(default=None, compare=False)
    """Not a counter: an evaluation that would start with ``cel_cost`` at or past this raises
    :class:`~.pacing.Paused` (set by an open :class:`~.pacing.Meter`; None: never)."""

    def copy(self) -> Stats:
        return replace(self)

    def since(self, earlier: Stats) -> Stats:
        """The work done since ``earlier`` (a copy taken before)."""
        return Stats(**{f.name: getattr(self, f.name) - getattr(earlier, f.name)
                        for f in fields(self) if f.name != "pause_at"})
