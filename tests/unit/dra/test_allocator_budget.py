"""The bounded search: upstream's early stop for ``All``, the resumable walk, the per-node and
per-pod budgets of :class:`Placing`. One table per rule, as the other allocator tests.

The adversarial shape (issue 22, attack 9): claims with one ExactCount device each, ahead of
an ``All`` request over the same devices. Before the early stop, with one of the devices held
by another claim, the search tried every assignment of the claims ahead (16 devices and five
claims: about 10^6 steps) before failing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from kdra.dra.allocator import (
    DeviceId,
    NodeInfo,
    Placing,
    ReasonCode,
    Snapshot,
    allocate,
    place,
)
from kdra.dra.allocator.prepared import prepare
from kdra.dra.allocator.search import NodeSearch, busy_view
from kdra.dra.models import AllocationResult, ResourceClaim, ResourceSlice
from tests.unit.builders import (
    DRIVER,
    NODE,
    allocated,
    claim_with,
    devices,
    first_available,
    gpu_class,
    node,
    nodes,
    request,
    slice_with,
    sub,
)

GPU = f'device.attributes["{DRIVER}"]'


def adversarial(ahead: int, *, all_selector: str | None = None) -> list[ResourceClaim]:
    """``ahead`` one-device claims, then a claim asking for all matching devices."""
    selectors = (all_selector,) if all_selector else ()
    return [*(claim_with(request("gpu"), name=f"one-{i}") for i in range(ahead)),
            claim_with(request("all", *selectors, all=True), name="everything")]


def picks(results: list[AllocationResult] | None) -> list[list[str]] | None:
    if results is None:
        return None
    return [[f"{r.request}:{r.device}" for r in result.devices.results] for result in results]


# --------------------------------------------------------------------------- the early stop


@dataclass
class StopCase:
    id: str
    claims: list[ResourceClaim]
    slices: list[ResourceSlice]
    allocated: list[ResourceClaim] = field(default_factory=list)
    in_flight: set[DeviceId] = field(default_factory=set)
    expect: list[list[str]] | None = None
    max_steps: int = 0
    """The search may try at most this many devices."""

    def __str__(self) -> str:
        return self.id


taken_elsewhere = allocated(claim_with(name="other"), ("gpu", "gpu-15"))

STOP_CASES = [
    StopCase("All with a device held by another claim: no search at all",
             adversarial(5), [slice_with(*devices(16))], allocated=[taken_elsewhere]),
    StopCase("All with an in-flight device: no search at all",
             adversarial(5), [slice_with(*devices(16))],
             in_flight={DeviceId(DRIVER, NODE, "gpu-3")}),
    StopCase("the held device matches no All request: the search runs and succeeds",
             adversarial(2, all_selector=f"{GPU}.index < 4"), [slice_with(*devices(16))],
             allocated=[taken_elsewhere],
             expect=[["gpu:gpu-4"], ["gpu:gpu-5"],
                     ["all:gpu-0", "all:gpu-1", "all:gpu-2", "all:gpu-3"]],
             max_steps=200),
    StopCase("a device the pod's own claims took first is backtracked over",
             [claim_with(request("gpu"), name="one"),
              claim_with(request("all", f"{GPU}.index == 0", all=True), name="everything")],
             [slice_with(*devices(2))],
             expect=[["gpu:gpu-1"], ["all:gpu-0"]], max_steps=5),
    StopCase("adminAccess All takes devices in use: no early stop",
             [claim_with(request("all", all=True, admin=True), name="admin")],
             [slice_with(*devices(3))], allocated=[allocated(claim_with(name="other"),
                                                             ("gpu", "gpu-1"))],
             expect=[["all:gpu-0", "all:gpu-1", "all:gpu-2"]], max_steps=3),
]


@pytest.mark.parametrize("case", STOP_CASES, ids=str)
def test_all_early_stop(case: StopCase) -> None:
    snapshot = Snapshot.build(case.slices, [gpu_class()], case.allocated)
    before = snapshot.stats.copy()
    got = allocate(case.claims, snapshot, node(), in_flight=case.in_flight)
    assert picks(got) == case.expect
    assert snapshot.stats.since(before).search_steps <= case.max_steps


def test_without_the_early_stop_the_same_shape_explodes() -> None:
    """The budget's reason to exist: the shape with nothing held elsewhere (each one-device
    claim takes a device the All request needs) still tries every assignment."""
    snapshot = Snapshot.build([slice_with(*devices(8))], [gpu_class()])
    before = snapshot.stats.copy()
    assert allocate(adversarial(3), snapshot, node()) is None
    assert snapshot.stats.since(before).search_steps > 500


# --------------------------------------------------------------------------- resumable walk


RESUME_CASES = [
    ("adversarial, no solution", adversarial(3), [slice_with(*devices(7))], None),
    ("constraint backtracking, a solution",
     [claim_with(request("a", count=2), request("b", f"{GPU}.index >= 5"), name="c")],
     [slice_with(*devices(8))], [["a:gpu-0", "a:gpu-1", "b:gpu-5"]]),
    ("All after ExactCount, a solution",
     [claim_with(request("gpu"), name="one"),
      claim_with(request("all", f"{GPU}.index < 3", all=True), name="everything")],
     [slice_with(*devices(5))], [["gpu:gpu-3"], ["all:gpu-0", "all:gpu-1", "all:gpu-2"]]),
]


@pytest.mark.parametrize(("case", "claims", "slices", "expect"), RESUME_CASES,
                         ids=[c[0] for c in RESUME_CASES])
@pytest.mark.parametrize("step", [1, 2, 7])
def test_a_search_stepped_in_slices_finds_what_one_run_finds(
        case: str, claims: list[ResourceClaim], slices: list[ResourceSlice],
        expect: list[list[str]] | None, step: int) -> None:
    snapshot = Snapshot.build(slices, [gpu_class()])
    prepared = prepare(claims, snapshot)
    whole = NodeSearch(prepared, snapshot.node_pools(node()), busy_view(snapshot, ()),
                       snapshot.stats)
    result = whole.run()
    stepped = NodeSearch(prepared, snapshot.node_pools(node()), busy_view(snapshot, ()),
                         snapshot.stats)
    calls = 0
    while not stepped.advance(step):
        calls += 1
        assert stepped.result is None and not stepped.finished
    assert stepped.steps == whole.steps
    assert calls >= whole.steps // (step + len(slices[0].spec.devices)) - 1
    as_names = [[f"{p.request.name}:{p.entry.id.device}" for p in chosen]
                for chosen in stepped.result] if stepped.result is not None else None
    assert as_names == expect
    if result is not None:
        assert [[p.entry.id for p in c] for c in result] == \
            [[p.entry.id for p in c] for c in stepped.result or []]


# --------------------------------------------------------------------------- Placing budgets


def cluster(hard: int, easy: int, *, easy_first: bool = False
            ) -> tuple[Snapshot, list[NodeInfo]]:
    """Nodes for :data:`POD`: on a *hard* node (eight devices, all wanted by its All request)
    it does not fit, after trying every assignment of its one-device claims; an *easy* node
    has three more devices, listed first, that the All request does not want, so the search
    succeeds at once."""
    kinds = ["easy"] * easy + ["hard"] * hard if easy_first else ["hard"] * hard + ["easy"] * easy
    names = nodes(len(kinds))
    slices = []
    for info, kind in zip(names, kinds, strict=True):
        extra = devices(3, prefix="x", spare=True) if kind == "easy" else []
        slices.append(slice_with(*extra, *devices(8), node=info.name, name=f"s-{info.name}"))
    return Snapshot.build(slices, [gpu_class()]), names


POD = adversarial(3, all_selector=f'!("spare" in {GPU})')


@dataclass
class BudgetCase:
    id: str
    hard: int
    easy: int
    node_steps: int | None
    steps: int | None
    """Steps given to one advance() call; the caller gives up at the first pause."""
    placed: int
    exhausted: bool
    unevaluated: int
    easy_first: bool = False

    def __str__(self) -> str:
        return self.id


BUDGET_CASES = [
    BudgetCase("unbounded: every node searched to the end", 1, 2, None, None, 2, False, 0),
    BudgetCase("node cap: the hard node gives up, the easy ones are placed", 1, 2, 200, None, 2,
               True, 0),
    BudgetCase("pod budget spent on the hard node: nothing placed, the rest unevaluated",
               1, 2, None, 100, 0, True, 2),
    BudgetCase("easy node first, then the budget runs out: its placement counts", 1, 1,
               None, 100, 1, True, 0, easy_first=True),
]


@pytest.mark.parametrize("case", BUDGET_CASES, ids=str)
def test_placing_budgets(case: BudgetCase) -> None:
    snapshot, names = cluster(case.hard, case.easy, easy_first=case.easy_first)
    placing = Placing(snapshot, POD, names, node_steps=case.node_steps)
    outcome = placing.advance(case.steps)
    if outcome is None:
        outcome = placing.give_up()
    assert len(outcome.placements) == case.placed, outcome
    assert outcome.exhausted is case.exhausted
    assert outcome.unevaluated == case.unevaluated
    gave_up = [r for r in outcome.reasons.values() if r.code == ReasonCode.SEARCH_EXHAUSTED]
    assert len(gave_up) == (1 if case.exhausted else 0)
    for reason in gave_up:
        assert reason.message == ('allocation search gave up (claims "one-0", "one-1", '
                                  '"one-2", "everything")')
    if case.node_steps is not None:
        assert outcome.steps <= case.node_steps + 3 * (3 + 8 + 8)
    for placement in outcome.placements.values():
        assert sorted(map(str, placement.devices))[-3:] == [
            f"{DRIVER}/{placement.node}/x-{i}" for i in range(3)]


def test_place_is_placing_without_a_budget() -> None:
    snapshot, names = cluster(hard=0, easy=3)
    outcome = place(snapshot, POD, names)
    assert sorted(outcome.placements) == [n.name for n in names]
    assert not outcome.exhausted and outcome.steps == 3 * (3 + 8)


def test_a_paused_evaluation_resumes_to_the_same_outcome() -> None:
    snapshot, names = cluster(hard=2, easy=1)
    whole = Placing(snapshot, POD, names).advance(None)
    assert whole is not None
    stepped = Placing(snapshot, POD, names)
    pauses = 0
    while (outcome := stepped.advance(50)) is None:
        pauses += 1
    assert pauses > 10
    assert outcome.steps == whole.steps
    assert outcome.reasons == whole.reasons
    assert list(outcome.placements) == list(whole.placements) == [names[2].name]


def test_still_fits_rechecks_a_placement_after_the_snapshot_changed() -> None:
    names = nodes(2)
    snapshot = Snapshot.build([slice_with(*devices(1), node=n.name, name=f"s-{n.name}")
                               for n in names], [gpu_class()])
    claims = [claim_with(request("gpu"), name="pod-claim", namespace="team")]
    placing = Placing(snapshot, claims, names)
    outcome = placing.advance(None)
    assert outcome is not None
    first, second = (outcome.placements[n.name] for n in names)
    assert placing.still_fits(first)  # nothing changed
    # Another pod takes the first node's device meanwhile; the second node's stays free.
    snapshot.upsert_claim(allocated(claim_with(name="other"), ("gpu", "gpu-0"),
                                    pool=names[0].name))
    assert not placing.still_fits(first)
    assert placing.still_fits(second)
    # A new generation of the second node's slice: its pools are not the ones searched.
    snapshot.upsert_slice(slice_with(*devices(1), node=names[1].name, name=f"s-{names[1].name}",
                                     generation=1))
    assert not placing.still_fits(second)


# --------------------------------------------------------------------------- firstAvailable


def prioritized_pod() -> list[ResourceClaim]:
    """:data:`POD` with its All request first in a prioritized list: on a hard node the first
    alternative (all eight devices) tries every assignment of the one-device claims and
    fails, the second (two devices) then fits at once."""
    return [*POD[:3], claim_with(first_available("gpu", sub("all", all=True),
                                                 sub("two", count=2)), name="choice")]


def alternative_steps(snapshot: Snapshot, names: list[NodeInfo]) -> list[int]:
    """The steps of each alternative's search on its own (the pod with ``all``, with
    ``two``) on the first node."""
    steps = []
    for last in (claim_with(request("all", all=True), name="choice"),
                 claim_with(request("two", count=2), name="choice")):
        search = NodeSearch(prepare([*POD[:3], last], snapshot),
                            snapshot.node_pools(names[0]), busy_view(snapshot, ()),
                            snapshot.stats)
        search.run()
        steps.append(search.steps)
    return steps


def test_every_alternative_counts_against_the_node_budget() -> None:
    snapshot, names = cluster(hard=1, easy=0)
    first, second = alternative_steps(snapshot, names)
    assert first > 500 and second < 20  # the first alternative is the expensive one
    # Unbounded: the second alternative is chosen, after both searches' steps.
    outcome = Placing(snapshot, prioritized_pod(), names).advance(None)
    assert outcome is not None
    (placement,) = outcome.placements.values()
    assert outcome.steps == first + second
    assert [r.request for r in placement.results[-1].devices.results] == ["gpu/two"] * 2
    assert placement.preference == 7  # the second of a prioritized list: 8 - 1
    # A node budget the first alternative alone exhausts: the node gives up there, the
    # second alternative is never tried.
    capped = Placing(snapshot, prioritized_pod(), names, node_steps=first // 2).advance(None)
    assert capped is not None
    assert not capped.placements and capped.exhausted
    assert [r.code for r in capped.reasons.values()] == [ReasonCode.SEARCH_EXHAUSTED]
    assert capped.steps <= first // 2 + 3 * (8 + 8)
    # Enough for both: placed, with the same steps as unbounded.
    enough = Placing(snapshot, prioritized_pod(), names,
                     node_steps=first + second).advance(None)
    assert enough is not None and list(enough.placements) == [names[0].name]


def test_a_prioritized_search_paused_in_any_alternative_resumes_to_the_same_outcome() -> None:
    snapshot, names = cluster(hard=2, easy=1)
    whole = Placing(snapshot, prioritized_pod(), names).advance(None)
    assert whole is not None
    for step in (1, 37, 400):
        stepped = Placing(snapshot, prioritized_pod(), names)
        while (outcome := stepped.advance(step)) is None:
            pass
        assert outcome.steps == whole.steps
        assert outcome.reasons == whole.reasons
        assert {n: p.preference for n, p in outcome.placements.items()} == \
            {n: p.preference for n, p in whole.placements.items()}
        assert [str(d) for p in outcome.placements.values() for d in sorted(p.devices)] == \
            [str(d) for p in whole.placements.values() for d in sorted(p.devices)]


def test_the_pod_budget_stops_between_alternatives() -> None:
    """Placing.advance(steps) pauses wherever the steps run out, also right after an
    alternative failed; give_up() then reports the node as exhausted."""
    snapshot, names = cluster(hard=1, easy=0)
    first, _ = alternative_steps(snapshot, names)
    placing = Placing(snapshot, prioritized_pod(), names)
    assert placing.advance(first) is None  # the first alternative done, the second not
    outcome = placing.give_up()
    assert not outcome.placements and outcome.exhausted
    assert [r.code for r in outcome.reasons.values()] == [ReasonCode.SEARCH_EXHAUSTED]


def test_combinations_skipped_for_too_many_devices_count_against_the_cap() -> None:
    """Eight requests whose alternatives are 32 devices except the last, one: only the last
    of 8^8 combinations stays within a claim's 32 devices. Enumerating them is bounded like
    searching them (too-many-choices), not 16 million skips."""
    requests = [first_available(f"r{k}", *[sub(f"s{i}", count=32) for i in range(7)],
                                sub("one")) for k in range(8)]
    snapshot = Snapshot.build([slice_with(*devices(40))], [gpu_class()])
    outcome = place(snapshot, [claim_with(*requests)], [node()])
    (reason,) = outcome.reasons.values()
    assert reason.code == ReasonCode.TOO_MANY_CHOICES
    assert outcome.steps == 0  # nothing searched: every combination considered was skipped
