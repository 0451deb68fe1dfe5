"""Selector evaluation paced like search steps (``kdra.dra.allocator.pacing``, issue 36).

A selector that costs much at run time is evaluated in slices: :meth:`Placing.advance` returns
"not done" in the middle of a node's devices once the slice's allowance is spent, resumes from
the devices' memos, and decides exactly what an unpaced evaluation decides, evaluating each
device once. The cost counts against the pod's steps (and a node's), so a pod whose selectors
are too costly is ``search-exhausted`` with a reason that says so. Ordinary selectors are
charged nothing and never pause.

Charged selectors here are comprehensions (``lists.range(n).all(i, i >= 0)``): a known,
cheap cost, so a slice of a few steps holds a few evaluations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from kdra.dra.allocator import (
    ClusterOutcome,
    NodeInfo,
    Placing,
    ReasonCode,
    Snapshot,
    allocate,
    nearest_fits,
    place,
)
from kdra.dra.allocator.pacing import UNITS_PER_STEP, Meter, Paused, steps_of
from kdra.dra.allocator.pools import Selector, SliceEntry
from kdra.dra.allocator.probe import FitProbe, OutOfSteps
from kdra.dra.allocator.stats import Stats
from kdra.dra.cel import COST_LIMIT, compile_selector, make_device
from kdra.dra.errors import CelRuntimeError, SearchExhausted
from kdra.dra.models import ResourceClaim, ResourceSlice
from tests.unit.builders import (
    DRIVER,
    NODE,
    allocated,
    claim_with,
    devices,
    first_available,
    gpu_class,
    match,
    node,
    nodes,
    request,
    slice_with,
    sub,
)
from tests.unit.dra.test_cel_bombs import close, shared

GPU = f'device.attributes["{DRIVER}"]'
LOOP = "lists.range(50).all(i, i >= 0)"
"""Charged at run time (50 iterations), true, ~10 µs."""
EVEN = f"{LOOP} && {GPU}.index % 2 == 0"
FAILS = f"{LOOP} && {GPU}.missing == 1"
"""Charged, then a run-time error (no such attribute)."""
BOMB_LEVELS = 6


def shared_format(levels: int = BOMB_LEVELS) -> str:
    """A list holding one list ten times, nested: admitted by its estimate, stopped at run time
    at the cost limit (tests/e2e/test_hostile_cel.py's bomb, smaller leaves)."""
    return shared(levels, '"a"') + f'"%s".format([l{levels - 1}]).size() > 0' + close(levels)


def loop_cost() -> int:
    _, units = compile_selector(LOOP).evaluate(make_device(DRIVER, {}, {}))
    return units


# --------------------------------------------------------------------------- the runtime


def test_an_ordinary_selector_is_charged_nothing() -> None:
    selector = compile_selector(f'device.driver == "{DRIVER}" && {GPU}.index >= 0')
    assert not selector.charged
    assert selector.evaluate(make_device(DRIVER, {"index": ("int", 1)}, {}), "d") == (True, 0)


def test_a_comprehension_is_charged_per_step() -> None:
    short = compile_selector("lists.range(10).all(i, i >= 0)")
    long = compile_selector("lists.range(20).all(i, i >= 0)")
    device = make_device(DRIVER, {}, {})
    assert short.charged
    assert short.evaluate(device)[1] > 0
    assert long.evaluate(device)[1] == 2 * short.evaluate(device)[1]


def test_a_failed_evaluation_carries_what_it_was_charged() -> None:
    device = make_device(DRIVER, {"index": ("int", 1)}, {})
    with pytest.raises(CelRuntimeError) as failed:
        compile_selector(FAILS).evaluate(device, "d")
    assert failed.value.cost == loop_cost()
    with pytest.raises(CelRuntimeError, match="actual cost limit exceeded") as stopped:
        compile_selector(shared_format()).evaluate(device, "d")
    assert stopped.value.cost == COST_LIMIT  # it worked through all of the budget


# --------------------------------------------------------------------------- the meter


def selector(expression: str) -> Selector:
    return Selector(expression, compile_selector(expression), "selector #0")


def test_an_evaluation_past_the_allowance_pauses_before_it_starts() -> None:
    entries = SliceEntry.of(slice_with(*devices(3))).entries
    stats = Stats()
    loop = selector(LOOP)
    with Meter(stats, 1) as meter:  # 2 units: the first evaluation runs, the next pauses
        assert entries[0].evaluate(loop, stats) is True
        with pytest.raises(Paused):
            entries[1].evaluate(loop, stats)
        assert entries[1].memoised(LOOP) is None  # nothing evaluated, nothing memoised
        assert entries[0].evaluate(loop, stats) is True  # memoised: no pause
    assert meter.units == loop_cost() == stats.cel_cost
    assert meter.steps() == steps_of(loop_cost()) == -(-loop_cost() // UNITS_PER_STEP)
    assert stats.cel_evaluations == 1
    assert stats.pause_at is None  # closed: nothing pauses any more
    assert entries[1].evaluate(loop, stats) is True


def test_ordinary_selectors_never_pause() -> None:
    entries = SliceEntry.of(slice_with(*devices(50))).entries
    stats = Stats()
    plain = selector(f"{GPU}.index >= 0")
    with Meter(stats, 0):
        assert all(entry.evaluate(plain, stats) for entry in entries)
    assert stats.cel_cost == 0 and stats.cel_evaluations == 50


def test_meters_nest_within_the_outer_allowance() -> None:
    stats = Stats()
    with Meter(stats, 10):
        outer = stats.pause_at
        with Meter(stats, 1000):
            assert stats.pause_at == outer
        with Meter(stats, 1):
            assert stats.pause_at == stats.cel_cost + UNITS_PER_STEP
        assert stats.pause_at == outer
    assert stats.pause_at is None


# --------------------------------------------------------------------------- Placing, sliced


@dataclass
class Case:
    id: str
    claims: list[ResourceClaim]
    slices: list[ResourceSlice] = field(default_factory=list)
    nodes: list[NodeInfo] = field(default_factory=lambda: [node()])
    taken: list[ResourceClaim] = field(default_factory=list)
    limit: int | None = None
    expect: str = ""
    """A word of the outcome: a node's reason message, or "placed"."""

    def __str__(self) -> str:
        return self.id

    def snapshot(self) -> Snapshot:
        slices = self.slices or [slice_with(*devices(12))]
        return Snapshot.build(slices=slices, classes=[gpu_class()], claims=self.taken)


def two_nodes(count: int = 8) -> list[ResourceSlice]:
    return [slice_with(*devices(count), node="worker-1"),
            slice_with(*devices(count), node="worker-2")]


CASES = [
    Case("one request, counted (the sole path)", [claim_with(request("gpu", LOOP, count=2))],
         expect="placed"),
    Case("a selector matching half", [claim_with(request("gpu", EVEN, count=3))],
         expect="placed"),
    Case("too few match: a reason from the counts",
         [claim_with(request("gpu", EVEN, count=7))], expect="too few devices"),
    Case("every matching device taken",
         [claim_with(request("gpu", EVEN, count=1))],
         slices=[slice_with(*devices(4))],
         taken=[allocated(claim_with(name=f"t{i}"), ("gpu", f"gpu-{i}")) for i in (0, 2)],
         expect="all allocated"),
    Case("a constraint: the search plans in slices",
         [claim_with(request("a", LOOP), request("b", EVEN), constraints=[match(
             f"{DRIVER}/root", "a", "b")])],
         slices=[slice_with(*devices(6, root="r0"), *(devices(6, prefix="other", root="r1")))],
         expect="placed"),
    Case("a constraint no set satisfies",
         [claim_with(request("a", LOOP), request("b", EVEN), constraints=[match(
             f"{DRIVER}/index", "a", "b")])], expect="cannot be satisfied"),
    Case("two claims and a failing selector: the error is the node's reason",
         [claim_with(request("gpu", LOOP), name="a"),
          claim_with(request("gpu", FAILS), name="b")], expect="fails at run time"),
    Case("firstAvailable: viability decided in slices",
         [claim_with(first_available("gpu", sub("big", EVEN, count=20), sub("small", LOOP)))],
         expect="placed"),
    Case("All: the checks before the search in slices",
         [claim_with(request("all", EVEN, all=True))], expect="placed"),
    Case("many nodes, a limit", [claim_with(request("gpu", EVEN, count=2))],
         slices=two_nodes(), nodes=nodes(2), limit=1, expect="placed"),
    Case("many nodes, none fits", [claim_with(request("gpu", EVEN, count=5))],
         slices=two_nodes(), nodes=nodes(2), expect="too few devices"),
]


def summary(outcome: ClusterOutcome) -> tuple[Any, ...]:
    placements = {name: sorted(map(str, p.devices)) for name, p in outcome.placements.items()}
    reasons = {name: (r.code, r.message) for name, r in outcome.reasons.items()}
    return placements, reasons, outcome.fatal, outcome.unevaluated, outcome.exhausted


def words(outcome: ClusterOutcome) -> str:
    return "placed" if outcome.placements else " ".join(
        r.message for r in outcome.reasons.values())


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("slice_steps", [1, 7, 40])
def test_sliced_matching_decides_what_unsliced_matching_decides(case: Case,
                                                                slice_steps: int) -> None:
    whole = case.snapshot()
    reference = place(whole, case.claims, case.nodes, limit=case.limit)
    assert case.expect in words(reference)
    assert reference.cel_units > 0

    snapshot = case.snapshot()
    placing = Placing(snapshot, case.claims, case.nodes, limit=case.limit)
    calls = 0
    outcome = None
    while outcome is None:
        calls += 1
        assert calls < 10_000
        outcome = placing.advance(slice_steps)
    assert summary(outcome) == summary(reference)
    # Paused in the middle, and every device evaluated once: no verdict lost or repeated.
    assert calls > 1
    assert snapshot.stats.cel_evaluations == whole.stats.cel_evaluations
    assert outcome.cel_units == reference.cel_units == snapshot.stats.cel_cost
    assert outcome.steps >= steps_of(outcome.cel_units)


def evaluated(snapshot: Snapshot, expression: str) -> int:
    """Devices of the node with a verdict memoised for ``expression``."""
    pools = snapshot.node_pools(node())
    return sum(entry.memoised(expression) is not None
               for pool in pools.pools for entry in pool.entries)


def test_a_slice_ends_in_the_middle_of_a_nodes_devices() -> None:
    snapshot = Snapshot.build(slices=[slice_with(*devices(12))], classes=[gpu_class()])
    placing = Placing(snapshot, [claim_with(request("gpu", LOOP))], [node()])
    per_device = steps_of(loop_cost())
    # Three evaluations' worth of steps: the fourth pauses.
    assert placing.advance(3 * per_device) is None
    assert evaluated(snapshot, LOOP) == 3
    done = placing.advance(None)
    assert done is not None and done.placements
    assert evaluated(snapshot, LOOP) == 12
    assert snapshot.stats.cel_evaluations == 12 + 12  # each device once, the class's too


def test_ordinary_selectors_are_decided_in_one_slice_and_charged_nothing() -> None:
    slices = [slice_with(*devices(125, prefix=f"s{i}"), name=f"slice-{i}", count=8)
              for i in range(8)]
    snapshot = Snapshot.build(slices=slices, classes=[gpu_class()])
    placing = Placing(snapshot, [claim_with(request("gpu", f"{GPU}.index % 7 == 3"))],
                      [node()])
    outcome = placing.advance(1)  # the smallest slice
    assert outcome is not None and outcome.placements
    assert outcome.cel_units == 0 and snapshot.stats.cel_cost == 0
    assert snapshot.stats.cel_evaluations == 2000


# --------------------------------------------------------------------------- budgets


def budgeted(snapshot: Snapshot, claims: list[ResourceClaim], candidates: list[NodeInfo], *,
             steps: int, slice_steps: int, node_steps: int | None = None) -> ClusterOutcome:
    """The binder's way (kdra.operator.scheduler.searches), without the clock."""
    placing = Placing(snapshot, claims, candidates, node_steps=node_steps)
    while True:
        if placing.steps >= steps:
            return placing.give_up()
        outcome = placing.advance(min(slice_steps, steps - placing.steps))
        if outcome is not None:
            return outcome


def test_a_selector_too_costly_for_the_budget_exhausts_it_and_says_why() -> None:
    snapshot = Snapshot.build(slices=[slice_with(*devices(128))], classes=[gpu_class()])
    bomb = [claim_with(request("gpu", shared_format()))]
    budget = 3 * COST_LIMIT // UNITS_PER_STEP  # three evaluations' worth
    outcome = budgeted(snapshot, bomb, [node()], steps=budget, slice_steps=1000)
    assert outcome.exhausted and not outcome.placements
    reason = outcome.reasons[NODE]
    assert reason.code is ReasonCode.SEARCH_EXHAUSTED
    assert "gave up evaluating CEL selectors" in reason.message
    assert f"{3 * COST_LIMIT} units" in (reason.detail or "")
    assert evaluated(snapshot, shared_format()) == 3  # each slice ran one, then paused
    # The next attempt goes on from the devices evaluated so far.
    budgeted(snapshot, bomb, [node()], steps=budget, slice_steps=1000)
    assert evaluated(snapshot, shared_format()) == 6


def test_the_bomb_gets_its_run_time_error_once_every_device_was_evaluated() -> None:
    snapshot = Snapshot.build(slices=[slice_with(*devices(4))], classes=[gpu_class()])
    bomb = [claim_with(request("gpu", shared_format()))]
    outcome = budgeted(snapshot, bomb, [node()], steps=10 * COST_LIMIT, slice_steps=1000)
    assert not outcome.exhausted
    assert "fails at run time: operation cancelled: actual cost limit exceeded" in \
        outcome.reasons[NODE].message


def test_a_nodes_steps_cap_its_selectors_and_the_next_node_is_evaluated() -> None:
    slices = [slice_with(*devices(6), node="worker-1"),
              slice_with(*devices(6), node="worker-2")]
    snapshot = Snapshot.build(slices=slices, classes=[gpu_class()])
    claims = [claim_with(request("gpu", LOOP))]
    per_device = steps_of(loop_cost())
    outcome = budgeted(snapshot, claims, nodes(2), steps=100 * per_device, slice_steps=1000,
                       node_steps=2 * per_device)
    assert outcome.reasons["worker-1"].code is ReasonCode.SEARCH_EXHAUSTED
    assert "worker-2" in outcome.reasons  # reached, and capped the same way
    assert outcome.exhausted


def test_a_counted_placement_evaluates_nothing_when_caches_were_emptied() -> None:
    snapshot = Snapshot.build(slices=[slice_with(*devices(8))], classes=[gpu_class()])
    outcome = place(snapshot, [claim_with(request("gpu", LOOP, count=2))], [node()])
    placement = outcome.placements[NODE]
    pools = snapshot.node_pools(node())
    # Other pods' selectors filled the caches meanwhile, which started over.
    pools._matching.clear()
    for pool in pools.pools:
        for entry in pool.entries:
            entry._memo.clear()
    before = snapshot.stats.cel_evaluations
    assert len(placement.devices) == 2
    assert snapshot.stats.cel_evaluations == before


def test_allocate_counts_selector_cost_against_its_steps() -> None:
    snapshot = Snapshot.build(slices=[slice_with(*devices(16))], classes=[gpu_class()])
    claims = [claim_with(request("gpu", shared_format()))]
    with pytest.raises(SearchExhausted, match="search steps"):
        allocate(claims, snapshot, node(), steps=COST_LIMIT // UNITS_PER_STEP)
    assert snapshot.stats.cel_evaluations - 16 <= 2


def test_fit_probes_and_nearest_fits_count_selector_cost_against_their_steps() -> None:
    snapshot = Snapshot.build(slices=[slice_with(*devices(16))], classes=[gpu_class()])
    claims = [claim_with(request("gpu", shared_format()))]
    probe = FitProbe(snapshot, claims, steps=COST_LIMIT // UNITS_PER_STEP)
    with pytest.raises(OutOfSteps):
        probe.fits(node())
    assert probe.spent >= COST_LIMIT // UNITS_PER_STEP
    whatif = nearest_fits(snapshot, claims, [node()], steps=COST_LIMIT // UNITS_PER_STEP)
    assert not whatif.complete
    assert snapshot.stats.cel_evaluations - 16 <= 4
