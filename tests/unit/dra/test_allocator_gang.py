"""Joint placement of gangs (kdra.dra.allocator.gang): tables, and hypothesis properties
against a brute force over every assignment on small clusters — never a partial gang, a
placement whenever the brute force finds one, the constraints across pods hold."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.dra.allocator.gang import Choice, GangSearch, Scope, scopes


@dataclass(frozen=True)
class Toy:
    """A small cluster: node → its devices (id, domain) and labels; pods needing k devices."""

    devices: dict[str, list[tuple[str, str | None]]]
    labels: dict[str, dict[str, str]]

    def options(self, need: Sequence[int]):  # the binder's options callable, exhaustively
        def options(i: int, scope: Scope, taken: frozenset[Hashable],
                    used: frozenset[str]) -> tuple[list[Choice[None]], int]:
            out = []
            for node, devs in sorted(self.devices.items()):
                free = [d for d, dom in devs if d not in taken
                        and (scope.value is None or dom == scope.value)]
                out += [Choice(node, frozenset(c), None)
                        for c in itertools.combinations(free, need[i])]
            return out, len(out)
        return options

    def search(self, need: Sequence[int], *, attribute: bool = False, topology: bool = False,
               distinct: bool = False, steps: int | None = None):
        values = {dom for devs in self.devices.values() for _, dom in devs if dom is not None}
        gang = GangSearch(len(need), self.options(need), scopes(
            node_labels=self.labels, topology_key="rack" if topology else "",
            attribute="domain" if attribute else "", attribute_values=values),
            distinct_nodes=distinct)
        return gang.advance(steps)

    def brute(self, need: Sequence[int], *, attribute: bool = False, topology: bool = False,
              distinct: bool = False) -> bool:
        per_pod = [[(node, combo) for node, devs in self.devices.items()
                    for combo in itertools.combinations([d for d, _ in devs], k)]
                   for k in need]
        domain = {d: dom for devs in self.devices.values() for d, dom in devs}
        for assignment in itertools.product(*per_pod):
            if self.valid(assignment, domain, attribute=attribute, topology=topology,
                          distinct=distinct):
                return True
        return False

    def valid(self, assignment, domain, *, attribute: bool, topology: bool,
              distinct: bool) -> bool:
        devices = [d for _, combo in assignment for d in combo]
        nodes = [node for node, _ in assignment]
        if len(set(devices)) != len(devices):
            return False
        if distinct and len(set(nodes)) != len(nodes):
            return False
        if topology:
            racks = {self.labels[n].get("rack") for n in nodes}
            if len(racks) != 1 or None in racks:
                return False
        if attribute:
            doms = {domain[d] for d in devices}
            if len(doms) > 1 or None in doms:
                return False
        return True


def toy(spec: dict[str, tuple[str | None, list[str | None]]]) -> Toy:
    """node → (rack label or None, one domain per device)."""
    return Toy({n: [(f"{n}-{i}", dom) for i, dom in enumerate(doms)]
                for n, (_, doms) in spec.items()},
               {n: ({"rack": rack} if rack else {}) for n, (rack, _) in spec.items()})


# ------------------------------------------------------------------ tables

def test_whole_gang_or_nothing() -> None:
    cluster = toy({"a": ("r1", [None] * 4), "b": ("r1", [None] * 4), "c": ("r2", [None] * 4)})
    found = cluster.search([2, 2, 2, 2])
    assert found is not None and found.choices is not None and len(found.choices) == 4
    assert cluster.search([4, 4, 4, 2]).choices is None  # 14 > 12 devices
    too_big = cluster.search([4, 4, 4, 4])
    assert too_big.choices is None and too_big.nearest == 3  # the nearest fit: 3 of 4 pods


def test_backtracks_across_pods() -> None:
    # pod 0 (1 device) first takes a device on node a; pod 1 needs 3 on one node: only a has
    # 3 — the search must revisit pod 0's choice (move it to b).
    cluster = toy({"a": (None, [None] * 3), "b": (None, [None])})
    outcome = cluster.search([1, 3])
    assert outcome.choices is not None
    assert [c.node for c in outcome.choices] == ["b", "a"]


def test_match_attribute_keeps_gang_in_one_domain() -> None:
    cluster = toy({"a": (None, ["nv1", "nv1", "nv2"]), "b": (None, ["nv2", "nv2", "nv1"])})
    outcome = cluster.search([2, 2], attribute=True)
    assert outcome.choices is None  # nv1 has 3, nv2 has 3: 4 in one domain does not fit
    outcome = cluster.search([2, 1], attribute=True)
    assert outcome.choices is not None and outcome.scope is not None
    doms = {dom for c in outcome.choices for d in c.devices
            for devs in cluster.devices.values() for dd, dom in devs if dd == d}
    assert doms == {outcome.scope.value}


def test_topology_key_packs_into_one_rack_and_spread() -> None:
    cluster = toy({"a": ("r1", [None] * 2), "b": ("r2", [None] * 2), "c": ("r2", [None] * 2),
                   "d": (None, [None] * 8)})
    outcome = cluster.search([2, 2], topology=True)
    assert outcome.choices is not None
    assert {c.node for c in outcome.choices} == {"b", "c"}
    assert cluster.search([2, 2, 2], topology=True).choices is None  # node d has no rack
    spread = cluster.search([1, 1, 1, 1], distinct=True)
    assert spread.choices is not None and len({c.node for c in spread.choices}) == 4


def test_budget_slices_and_give_up() -> None:
    cluster = toy({n: (None, [None] * 3) for n in "abcd"})
    gang = GangSearch(5, cluster.options([3] * 5))  # 5 pods x 3 on 4 nodes of 3: no fit
    assert gang.advance(3) is None and gang.steps >= 3
    given_up = gang.give_up()
    assert given_up.exhausted and given_up.choices is None
    assert GangSearch(5, cluster.options([3] * 5)).advance(None).choices is None  # type: ignore[union-attr]


def test_scopes_product() -> None:
    found = scopes(node_labels={"a": {"rack": "1"}, "b": {"rack": "2"}, "c": {}},
                   topology_key="rack", attribute="dom", attribute_values=["x", "y", "x"])
    assert [s.label for s in found] == ["rack=1, dom=x", "rack=1, dom=y", "rack=2, dom=x",
                                        "rack=2, dom=y"]
    assert scopes() == [Scope()]
    assert scopes(topology_key="rack", node_labels={"a": {}}) == []  # no node has it


# ------------------------------------------------------------------ properties

domains = st.sampled_from([None, "x", "y"])
clusters = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.tuples(st.sampled_from([None, "r1", "r2"]), st.lists(domains, min_size=0, max_size=3)),
    min_size=1, max_size=3).map(toy)
needs = st.lists(st.integers(min_value=1, max_value=2), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(clusters, needs, st.booleans(), st.booleans(), st.booleans())
def test_found_iff_brute_force_finds(cluster: Toy, need: list[int], attribute: bool,
                                     topology: bool, distinct: bool) -> None:
    outcome = cluster.search(need, attribute=attribute, topology=topology, distinct=distinct)
    assert outcome is not None
    expected = cluster.brute(need, attribute=attribute, topology=topology, distinct=distinct)
    assert (outcome.choices is not None) == expected
    if outcome.choices is not None:
        assert len(outcome.choices) == len(need)  # never a partial gang
        domain = {d: dom for devs in cluster.devices.values() for d, dom in devs}
        assignment = [(c.node, tuple(c.devices)) for c in outcome.choices]
        assert all(len(devs) == k for (_, devs), k in zip(assignment, need, strict=True))
        assert cluster.valid(assignment, domain, attribute=attribute, topology=topology,
                             distinct=distinct)
    else:
        assert outcome.nearest < len(need)


@settings(max_examples=100, deadline=None)
@given(clusters, needs, st.integers(min_value=1, max_value=5))
def test_sliced_search_equals_whole(cluster: Toy, need: list[int], slice_: int) -> None:
    whole = cluster.search(need, attribute=True)
    values = {dom for devs in cluster.devices.values() for _, dom in devs if dom is not None}
    gang = GangSearch(len(need), cluster.options(need),
                      scopes(attribute="domain", attribute_values=values))
    outcome = None
    for _ in range(10_000):
        outcome = gang.advance(slice_)
        if outcome is not None:
            break
    assert outcome is not None and whole is not None
    assert outcome.choices == whole.choices and outcome.steps == whole.steps


def test_a_failed_partial_assignment_is_not_searched_again() -> None:
    # 5 alike pods x 1 device on 4 nodes of 1 device: the first four in any order leave the
    # same devices taken, and the fifth fits in none; each such state is searched once.
    cluster = toy({n: (None, [None]) for n in "abcd"})
    gang = GangSearch(5, cluster.options([1] * 5))
    outcome = gang.advance(None)
    assert outcome is not None and outcome.choices is None and outcome.nearest == 4
    # Without the memo: 4 + 4*3 + 4*3*2 + 4! evaluations (64) and more; with it, one per
    # subset of the devices (16) plus a step per repeated state.
    assert gang.steps < 64


def test_a_scope_cut_short_moves_on_and_says_exhausted() -> None:
    # Domain x: 4 nodes of 1 device — 5 pods need many backtracks to prove they do not fit;
    # domain y: one node of 5 devices fits at once.
    cluster = toy({"a": (None, ["x"]), "b": (None, ["x"]), "c": (None, ["x"]),
                   "d": (None, ["x"]), "e": (None, ["y"] * 5)})
    values = {"x", "y"}
    cut = GangSearch(5, cluster.options([1] * 5), scopes(
        attribute="domain", attribute_values=values), scope_backtracks=2)
    found = cut.advance(None)
    assert found is not None and found.choices is not None and found.scope is not None
    assert found.scope.value == "y"
    # Only x, cut short: no placement, and not "impossible" — out of budget.
    only_x = toy({n: (None, ["x"]) for n in "abcd"})
    short = GangSearch(5, only_x.options([1] * 5), scopes(
        attribute="domain", attribute_values={"x"}), scope_backtracks=2).advance(None)
    assert short is not None and short.choices is None and short.exhausted
    whole = GangSearch(5, only_x.options([1] * 5), scopes(
        attribute="domain", attribute_values={"x"})).advance(None)
    assert whole is not None and whole.choices is None and not whole.exhausted
