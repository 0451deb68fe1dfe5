"""kdra.operator.core.preemption (victim selection, node choice, PDBs) and the allocator's FitProbe.

Fit tests are real: every table runs :class:`FitProbe` over a snapshot of one or more GPU
nodes, so "fits" is the allocator's own search, not a stand-in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from kdra.dra.allocator import DeviceId, Snapshot
from kdra.dra.allocator.probe import FitProbe, OutOfSteps
from kdra.operator.core.preemption import (
    Budget,
    Hold,
    NodeVictims,
    Pod,
    can_preempt,
    freed_by,
    label_selector_matches,
    pick_node,
    pod_priority,
    select_victims,
    violating,
)
from tests.unit.builders import DRIVER, claim_with, devices, gpu_class, node, request, slice_with

NODE = "worker-1"


def gpu(index: int, pool: str = NODE) -> DeviceId:
    return DeviceId(DRIVER, pool, f"gpu-{index}")


def held(*indexes: int, pool: str = NODE) -> frozenset[DeviceId]:
    return frozenset(gpu(i, pool) for i in indexes)


def pod(name: str, priority: int, started: str = "", *, leaving: bool = False,
        namespace: str = "default", **labels: str) -> Pod:
    return Pod(namespace, name, f"uid-{name}", NODE, priority, started, labels, leaving)


def hold(*indexes: int, by: Sequence[str]) -> Hold:
    return Hold(held(*indexes), frozenset(f"uid-{n}" for n in by))


class Cluster:
    """One node with ``gpus`` GPUs; ``holds`` are allocated (in use) in the snapshot."""

    def __init__(self, gpus: int, holds: Sequence[Hold], count: int) -> None:
        self.snapshot = Snapshot.build([slice_with(*devices(gpus))], [gpu_class()])
        for index, item in enumerate(holds):
            claim = claim_with(request("gpu", count=len(item.devices)), name=f"held-{index}")
            self.snapshot.upsert_claim(_allocated(claim, sorted(d.device for d in item.devices)))
        self.probe = FitProbe(self.snapshot, [claim_with(request("gpu", count=count),
                                                         name="preemptor")])

    def fits(self, freed: frozenset[DeviceId]) -> bool:
        return self.probe.fits(node(NODE), freed)


def _allocated(claim: Any, names: list[str]) -> Any:
    from tests.unit.builders import allocated

    return allocated(claim, *(("gpu", n) for n in names))


def victims_of(result: NodeVictims | None) -> list[str] | None:
    return None if result is None else sorted(v.name for v in result.victims)


# --------------------------------------------------------------------------- victim selection

T1, T2, T3, T4 = ("2026-01-01T00:00:01Z", "2026-01-01T00:00:02Z", "2026-01-01T00:00:03Z",
                  "2026-01-01T00:00:04Z")
LADDER = [pod("a", 0, T1), pod("b", 100, T1), pod("c", 500, T1), pod("d", 2000, T1)]
LADDER_HOLDS = [hold(0, by=["a"]), hold(1, by=["b"]), hold(2, by=["c"]), hold(3, by=["d"])]

SELECTION: list[tuple[str, int, list[Pod], list[Hold], list[Budget], int, list[str] | None,
                      int]] = [
    # id, gpus on the node, pods, holds, budgets, preemptor's count → victims, PDB violations
    ("lowest-one", 4, LADDER, LADDER_HOLDS, [], 1, ["a"], 0),
    ("lowest-two", 4, LADDER, LADDER_HOLDS, [], 2, ["a", "b"], 0),
    ("lowest-three", 4, LADDER, LADDER_HOLDS, [], 3, ["a", "b", "c"], 0),
    ("higher-priority-never-victim", 4, LADDER, LADDER_HOLDS, [], 4, None, 0),
    ("nothing-lower", 2, [pod("x", 1000, T1), pod("y", 5000, T1)],
     [hold(0, by=["x"]), hold(1, by=["y"])], [], 1, None, 0),
    ("equal-priority-is-not-lower", 1, [pod("x", 1000, T1)], [hold(0, by=["x"])], [], 1,
     None, 0),
    ("fits-already", 2, [pod("a", 0, T1)], [hold(0, by=["a"])], [], 1, None, 0),
    # Equal priorities: the most recently started goes first (earlier ones are reprieved).
    ("latest-started-goes", 3, [pod("a", 0, T1), pod("b", 0, T3), pod("c", 0, T2)],
     [hold(0, by=["a"]), hold(1, by=["b"]), hold(2, by=["c"])], [], 1, ["b"], 0),
    # Fewest victims: one pod holding two GPUs rather than two pods holding one each
    # (when priorities say so: the two-GPU pod is the least important).
    ("one-big-victim", 4, [pod("big", 0, T4), pod("s1", 10, T1), pod("s2", 10, T1),
                           pod("top", 5000, T1)],
     [hold(0, 1, by=["big"]), hold(2, by=["s1"]), hold(3, by=["s2"])], [], 2, ["big"], 0),
    # A PodDisruptionBudget with no disruption left protects "a": "b" goes instead, though
    # "a" started later (without the budget "a" would go, see the next row).
    ("pdb-protects", 2, [pod("a", 0, T2, app="db"), pod("b", 0, T1, app="web")],
     [hold(0, by=["a"]), hold(1, by=["b"])],
     [Budget("default", "db", {"matchLabels": {"app": "db"}}, 0)], 1, ["b"], 0),
    ("no-pdb", 2, [pod("a", 0, T2, app="db"), pod("b", 0, T1, app="web")],
     [hold(0, by=["a"]), hold(1, by=["b"])], [], 1, ["a"], 0),
    # Where only the protected pod can make room, it is evicted anyway and counted.
    ("pdb-unavoidable", 3, [pod("a", 0, T1, app="db"), pod("top", 5000, T1)],
     [hold(0, 1, by=["a"]), hold(2, by=["top"])],
     [Budget("default", "db", {"matchLabels": {"app": "db"}}, 0)], 2, ["a"], 1),
    # A budget in another namespace does not protect.
    ("pdb-other-namespace", 2, [pod("a", 0, T2, app="db"), pod("b", 0, T1, app="web")],
     [hold(0, by=["a"]), hold(1, by=["b"])],
     [Budget("prod", "db", {"matchLabels": {"app": "db"}}, 0)], 1, ["a"], 0),
    # A claim shared by two pods frees its devices only when both go.
    ("shared-claim", 3, [pod("a", 0, T1), pod("b", 0, T1), pod("top", 5000, T1)],
     [hold(0, 1, by=["a", "b"]), hold(2, by=["top"])], [], 2, ["a", "b"], 0),
    # A pod being deleted frees its devices anyway: it is never a victim, and counts.
    ("leaving-counts", 3, [pod("gone", 0, T1, leaving=True), pod("b", 0, T1),
                           pod("c", 0, T2)],
     [hold(0, by=["gone"]), hold(1, by=["b"]), hold(2, by=["c"])], [], 2, ["c"], 0),
    # ...and where it alone makes room, there is nothing to preempt (the binder waits).
    ("leaving-alone-suffices", 2, [pod("gone", 0, T1, leaving=True), pod("b", 0, T1)],
     [hold(0, by=["gone"]), hold(1, by=["b"])], [], 1, None, 0),
    # Pods holding no devices are never victims (kdra frees devices only).
    ("no-devices-no-victim", 1, [pod("cpu-only", 0, T1), pod("top", 5000, T1)],
     [hold(0, by=["top"])], [], 1, None, 0),
]


@pytest.mark.parametrize(("gpus", "pods", "holds", "budgets", "count", "expected",
                          "violations"),
                         [row[1:] for row in SELECTION], ids=[row[0] for row in SELECTION])
def test_select_victims(gpus: int, pods: list[Pod], holds: list[Hold], budgets: list[Budget],
                        count: int, expected: list[str] | None, violations: int) -> None:
    cluster = Cluster(gpus, holds, count)
    result = select_victims(NODE, 1000, pods, holds, budgets, cluster.fits)
    assert victims_of(result) == expected
    if result is not None:
        assert result.pdb_violations == violations
        # The answer is verified: the preemptor fits with exactly these devices freed...
        assert cluster.fits(result.freed)
        # ...and minimal: reprieving any one victim alone makes it not fit.
        leaving = {p.uid for p in pods if p.leaving}
        victims = {v.uid for v in result.victims}
        for victim in result.victims:
            assert not cluster.fits(freed_by(leaving | (victims - {victim.uid}), holds))


def test_select_victims_stops_when_the_budget_runs_out() -> None:
    snapshot = Snapshot.build([slice_with(*devices(2))], [gpu_class()])
    for index in range(2):
        claim = claim_with(request("gpu"), name=f"held-{index}")
        snapshot.upsert_claim(_allocated(claim, [f"gpu-{index}"]))
    probe = FitProbe(snapshot, [claim_with(request("gpu"), name="p")], steps=1)
    pods = [pod("a", 0, T1), pod("b", 0, T1)]
    holds = [hold(0, by=["a"]), hold(1, by=["b"])]
    with pytest.raises(OutOfSteps):
        select_victims(NODE, 1000, pods, holds, [],
                       lambda freed: probe.fits(node(NODE), freed))


# --------------------------------------------------------------------------- node choice

def option(node_name: str, *victims: tuple[int, str], violations: int = 0) -> NodeVictims:
    return NodeVictims(node_name, tuple(
        Pod("default", f"{node_name}-{i}", f"{node_name}-{i}", node_name, priority, started)
        for i, (priority, started) in enumerate(victims)), violations, frozenset())


PICKS: list[tuple[str, list[NodeVictims], str]] = [
    ("fewest-pdb-violations", [option("n1", (0, T1), violations=1),
                               option("n2", (500, T1), (500, T1))], "n2"),
    ("lowest-highest-priority", [option("n1", (500, T1)),
                                 option("n2", (100, T1), (100, T1), (100, T1))], "n2"),
    ("smallest-priority-sum", [option("n1", (100, T1), (100, T1)),
                               option("n2", (100, T1), (0, T1))], "n2"),
    ("fewest-victims", [option("n1", (0, T1), (0, T1)), option("n2", (0, T1))], "n2"),
    ("negative-priorities-fewest", [option("n1", (-100, T1), (-100, T1)),
                                    option("n2", (-100, T1))], "n2"),
    ("latest-started", [option("n1", (0, T1)), option("n2", (0, T3))], "n2"),
    ("name-breaks-ties", [option("n2", (0, T1)), option("n1", (0, T1))], "n1"),
]


@pytest.mark.parametrize(("options", "expected"), [row[1:] for row in PICKS],
                         ids=[row[0] for row in PICKS])
def test_pick_node(options: list[NodeVictims], expected: str) -> None:
    chosen = pick_node(options)
    assert chosen is not None and chosen.node == expected
    assert pick_node(reversed(options)) == chosen  # the order given does not matter


def test_pick_node_of_nothing() -> None:
    assert pick_node([]) is None


def test_whole_cluster_one_node_fewest_lowest() -> None:
    """Two nodes: the preemptor needs 2 GPUs; node-a could give them by evicting two pods of
    priority 100, node-b by evicting one pod of priority 100 holding two: node-b wins, and no
    pod elsewhere is touched."""
    snapshot = Snapshot.build([slice_with(*devices(2), node="node-a"),
                               slice_with(*devices(2), node="node-b")], [gpu_class()])
    layout = {"node-a": [("a1", ["gpu-0"]), ("a2", ["gpu-1"])], "node-b": [("b1", ["gpu-0",
                                                                                  "gpu-1"])]}
    per_node: dict[str, tuple[list[Pod], list[Hold]]] = {}
    for node_name, owners in layout.items():
        pods, holds = [], []
        for name, names in owners:
            claim = claim_with(request("gpu", count=len(names)), name=f"c-{name}")
            snapshot.upsert_claim(_allocated_on(claim, names, node_name))
            pods.append(Pod("default", name, f"uid-{name}", node_name, 100, T1))
            holds.append(Hold(frozenset(DeviceId(DRIVER, node_name, n) for n in names),
                              frozenset({f"uid-{name}"})))
        per_node[node_name] = (pods, holds)
    probe = FitProbe(snapshot, [claim_with(request("gpu", count=2), name="p")])
    options = [select_victims(n, 1000, *per_node[n], [],
                              lambda freed, n=n: probe.fits(node(n), freed))  # type: ignore[misc]
               for n in layout]
    chosen = pick_node([o for o in options if o is not None])
    assert chosen is not None and chosen.node == "node-b"
    assert [v.name for v in chosen.victims] == ["b1"]


def _allocated_on(claim: Any, names: list[str], pool: str) -> Any:
    from tests.unit.builders import allocated

    return allocated(claim, *(("gpu", n) for n in names), pool=pool)


# --------------------------------------------------------------------------- PDBs, selectors

SELECTORS: list[tuple[str, Any, dict[str, str], bool]] = [
    ("empty-matches-all", {}, {"app": "x"}, True),
    ("null-matches-none", None, {"app": "x"}, False),
    ("match-labels", {"matchLabels": {"app": "x"}}, {"app": "x", "tier": "1"}, True),
    ("match-labels-miss", {"matchLabels": {"app": "x"}}, {"app": "y"}, False),
    ("in", {"matchExpressions": [{"key": "app", "operator": "In", "values": ["x", "y"]}]},
     {"app": "y"}, True),
    ("in-missing-label", {"matchExpressions": [{"key": "app", "operator": "In",
                                                "values": ["x"]}]}, {}, False),
    ("not-in", {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["x"]}]},
     {}, True),
    ("exists", {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, {"app": ""}, True),
    ("does-not-exist", {"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]},
     {"app": "x"}, False),
    ("unknown-operator", {"matchExpressions": [{"key": "app", "operator": "Gt"}]},
     {"app": "x"}, False),
    ("malformed-expressions", {"matchExpressions": "app"}, {"app": "x"}, False),
    ("malformed-expression", {"matchExpressions": [["app"]]}, {"app": "x"}, False),
    ("malformed-labels", {"matchLabels": ["app"]}, {"app": "x"}, False),
]


@pytest.mark.parametrize(("selector", "labels", "expected"), [r[1:] for r in SELECTORS],
                         ids=[r[0] for r in SELECTORS])
def test_label_selector_matches(selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert label_selector_matches(selector, labels) is expected


def test_violating_uses_up_allowed_disruptions_in_order() -> None:
    pods = [pod("a", 0, app="web"), pod("b", 0, app="web"), pod("c", 0, app="web"),
            pod("d", 0, app="db")]
    budgets = [Budget("default", "web", {"matchLabels": {"app": "web"}}, 2),
               Budget("default", "db", {"matchLabels": {"app": "db"}}, 1)]
    assert violating(pods, budgets) == {"uid-c"}
    assert violating(pods, []) == set()


# --------------------------------------------------------------------------- pod fields

@pytest.mark.parametrize(("spec", "priority", "preempts"), [
    ({"priority": 1000}, 1000, True),
    ({"priority": -5, "preemptionPolicy": "PreemptLowerPriority"}, -5, True),
    ({"priority": 1000, "preemptionPolicy": "Never"}, 1000, False),
    ({}, 0, True),
    ({"priority": "high"}, 0, True),
    ({"priority": True}, 0, True),
])
def test_pod_fields(spec: dict[str, Any], priority: int, preempts: bool) -> None:
    obj = {"spec": spec}
    assert pod_priority(obj) == priority
    assert can_preempt(obj) is preempts


# --------------------------------------------------------------------------- FitProbe

def test_fit_probe_reserved_and_freed() -> None:
    snapshot = Snapshot.build([slice_with(*devices(2))], [gpu_class()])
    snapshot.upsert_claim(_allocated(claim_with(request("gpu"), name="held"), ["gpu-0"]))
    claims = [claim_with(request("gpu"), name="p")]
    assert FitProbe(snapshot, claims).fits(node(NODE))
    reserved = FitProbe(snapshot, claims, reserved=held(1))
    assert not reserved.fits(node(NODE))  # gpu-1 held for someone else, gpu-0 in use
    assert reserved.fits(node(NODE), held(0))  # freeing gpu-0 makes room
    assert reserved.fits(node(NODE), held(1))  # freeing a reserved device too
    assert not FitProbe(snapshot, claims).fits(node("elsewhere"))


def test_fit_probe_budget() -> None:
    snapshot = Snapshot.build([slice_with(*devices(4))], [gpu_class()])
    probe = FitProbe(snapshot, [claim_with(request("gpu", count=4), name="p")], steps=2)
    with pytest.raises(OutOfSteps):
        probe.fits(node(NODE))
    with pytest.raises(OutOfSteps):
        probe.fits(node(NODE))
    assert probe.spent >= 2


def test_fit_probe_counts_the_shares_of_a_shared_gpu() -> None:
    """A probe sees what the allocator sees: a shared GPU with 70Gi of 80Gi taken has no room
    for 20Gi more (before, the probe saw the GPU free and preemption spared every victim)."""
    from kdra.dra.allocator import allocate
    from kdra.dra.allocator.probe import FitProbe
    from kdra.dra.allocator.snapshot import Snapshot
    from tests.unit.dra.test_allocator_partitions import (
        CLASSES,
        node,
        share,
        shared_gpu,
        slice_with,
        with_allocation,
    )

    snapshot = Snapshot.build([slice_with(shared_gpu())], CLASSES)
    big = share("big", "70Gi")
    result = allocate([big], snapshot, node())
    assert result is not None
    snapshot.upsert_claim(with_allocation(big, result[0]))
    assert allocate([share("more", "20Gi")], snapshot, node()) is None
    assert not FitProbe(snapshot, [share("more", "20Gi")]).fits(node())
    assert FitProbe(snapshot, [share("less", "10Gi")]).fits(node())
