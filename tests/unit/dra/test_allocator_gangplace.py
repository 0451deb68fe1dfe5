"""The gang search over a real snapshot (kdra.dra.allocator.gangplace): the allocator as each
pod's options; matchAttribute, topologyKey and spread across the gang; alike pods; the picks
are the allocator's results."""

from __future__ import annotations

from kdra.dra.allocator import DeviceId, NodeInfo, Snapshot
from kdra.dra.allocator.gangplace import GangPod, gang_search
from kdra.dra.models import ResourceClaim, parse_claim, parse_class, parse_slice
from tests.unit.builders import allocated, claim_with, request

DRIVER = "gpu.kdra.dev"


def snapshot(spec: dict[str, list[str]]) -> Snapshot:
    """node → one nvlinkDomain value per GPU."""
    slices = [parse_slice({
        "metadata": {"name": f"{node}-gpus"},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {"nvlinkDomain": {"string": d}}}
                             for i, d in enumerate(domains)]}})
        for node, domains in spec.items()]
    return Snapshot.build(slices, [parse_class({
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})])


def claims(count: int, gpus: int) -> list[ResourceClaim]:
    return [parse_claim({"metadata": {"name": f"c{i}", "namespace": "ns"},
                         "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                             "deviceClassName": DRIVER, "count": gpus}}]}}})
            for i in range(count)]


def nodes(racks: dict[str, str]) -> list[NodeInfo]:
    return [NodeInfo(n, {"rack": r} if r else {}) for n, r in racks.items()]


def held(outcome: object) -> list[tuple[str, str]]:
    choices = getattr(outcome, "choices", None) or []
    return [(r.pool, r.device) for c in choices
            for result in c.payload.placement.results for r in result.devices.results]


def test_match_attribute_across_the_gang() -> None:
    snap = snapshot({"a": ["nv1", "nv1", "nv2", "nv2"], "b": ["nv2", "nv2", "nv1", "nv1"]})
    infos = nodes({"a": "", "b": ""})
    outcome = gang_search(snap, [GangPod([c], infos) for c in claims(2, 2)],
                          steps=10_000, match_attribute=f"{DRIVER}/nvlinkDomain").advance(None)
    assert outcome is not None and outcome.choices is not None
    assert outcome.scope is not None and outcome.scope.label == f"{DRIVER}/nvlinkDomain=nv1"
    domain = {(n, f"gpu-{i}"): d for n, ds in {"a": ["nv1", "nv1", "nv2", "nv2"],
                                                "b": ["nv2", "nv2", "nv1", "nv1"]}.items()
              for i, d in enumerate(ds)}
    taken = held(outcome)
    assert len(taken) == 4 and len(set(taken)) == 4
    assert {domain[d] for d in taken} == {"nv1"}
    # Three pods x 2 in one domain: 4 GPUs per domain, no fit; the nearest fit is 2 pods.
    none = gang_search(snap, [GangPod([c], infos) for c in claims(3, 2)], steps=10_000,
                       match_attribute=f"{DRIVER}/nvlinkDomain").advance(None)
    assert none is not None and none.choices is None and none.nearest == 2
    assert not none.exhausted


def test_topology_key_and_spread() -> None:
    snap = snapshot({n: ["x"] * 4 for n in "abcd"})
    infos = nodes({"a": "r1", "b": "r2", "c": "r2", "d": ""})
    packed = gang_search(snap, [GangPod([c], infos) for c in claims(3, 2)], steps=10_000,
                         topology_key="rack").advance(None)
    assert packed is not None and packed.choices is not None
    assert {c.node for c in packed.choices} <= {"b", "c"}  # r2: 8 GPUs; r1 has 4, d no rack
    spread = gang_search(snap, [GangPod([c], infos) for c in claims(4, 1)], steps=10_000,
                         spread=True).advance(None)
    assert spread is not None and spread.choices is not None
    assert sorted(c.node for c in spread.choices) == ["a", "b", "c", "d"]
    too_many = gang_search(snap, [GangPod([c], infos) for c in claims(5, 1)], steps=10_000,
                           spread=True).advance(None)
    assert too_many is not None and too_many.choices is None and too_many.nearest == 4


def test_alike_pods_pack_and_a_full_gang_holds_whole_nodes() -> None:
    snap = snapshot({n: ["x"] * 4 for n in "abc"})
    infos = nodes({"a": "", "b": "", "c": ""})
    outcome = gang_search(snap, [GangPod([c], infos) for c in claims(4, 2)],
                          steps=10_000).advance(None)
    assert outcome is not None and outcome.choices is not None
    # Fullest first: the four pods take two whole nodes, the third stays free.
    assert sorted(c.node for c in outcome.choices) in (["a", "a", "b", "b"],
                                                        ["a", "a", "c", "c"],
                                                        ["b", "b", "c", "c"])
    assert len(set(held(outcome))) == 8


def hostile_pod(snap: Snapshot, infos: list[NodeInfo], tag: str) -> GangPod:
    """Five one-device claims ahead of a claim for every device: a search that tries every
    combination of the five before it finds the last one cannot be satisfied (node steps)."""
    ones = [parse_claim({"metadata": {"name": f"{tag}-one-{i}", "namespace": "ns"},
                         "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                             "deviceClassName": DRIVER}}]}}}) for i in range(5)]
    everything = parse_claim({"metadata": {"name": f"{tag}-all", "namespace": "ns"},
                              "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                                  "deviceClassName": DRIVER, "allocationMode": "All"}}]}}})
    return GangPod([*ones, everything], infos)


def test_a_long_evaluation_of_one_pod_is_sliced_and_decides_as_unsliced() -> None:
    """One member's evaluation may take its node's whole budget: the search pauses inside it
    at the caller's slice (hostile input cannot hold the event loop for a pod's budget) and
    decides what an unsliced search decides."""
    snap = snapshot({"a": ["x"] * 12})
    infos = nodes({"a": ""})

    def search() -> object:
        return gang_search(snap, [hostile_pod(snap, infos, f"m{i}") for i in range(2)],
                           steps=200_000, node_steps=lambda _: 40_000)

    whole = search().advance(None)  # type: ignore[attr-defined]
    sliced = search()
    deltas = []
    while True:
        before = sliced.steps  # type: ignore[attr-defined]
        outcome = sliced.advance(500)  # type: ignore[attr-defined]
        deltas.append(sliced.steps - before)  # type: ignore[attr-defined]
        if outcome is not None:
            break
    assert len(deltas) > 20, deltas  # the 40,000 steps of the first member, 500 at a time
    assert max(deltas[:-1]) <= 1_000, deltas  # a slice overruns by one slot's scan at most
    assert (outcome.choices, outcome.nearest, outcome.exhausted) == \
        (whole.choices, whole.nearest, whole.exhausted) == (None, 0, False)


def test_freed_devices_stay_out_of_scope_and_taken_by_earlier_members() -> None:
    """Gang preemption's what-if (``freed``: the victims' devices counted free) frees only
    what the snapshot holds: a freed device outside the member's matchAttribute scope, or one
    an earlier member of the gang took, stays unavailable to the member."""
    snap = snapshot({"a": ["nv1", "nv1", "nv2", "nv2"]})
    for i in range(4):  # every GPU held by a victim
        snap.upsert_claim(allocated(claim_with(request("gpu"), name=f"held-{i}"),
                                    ("gpu", f"gpu-{i}"), pool="a"))
    infos = nodes({"a": ""})

    def search(count: int, freed: set[str], attribute: str = "") -> object:
        return gang_search(snap, [GangPod([c], infos) for c in claims(count, 1)],
                           steps=10_000, match_attribute=attribute,
                           freed=frozenset(DeviceId(DRIVER, "a", d) for d in freed)
                           ).advance(None)

    # One device freed per domain: two members fit only by mixing domains — no fit.
    mixed = search(2, {"gpu-0", "gpu-2"}, f"{DRIVER}/nvlinkDomain")
    assert getattr(mixed, "choices", "unset") is None
    both = search(2, {"gpu-0", "gpu-1"}, f"{DRIVER}/nvlinkDomain")
    assert sorted(held(both)) == [("a", "gpu-0"), ("a", "gpu-1")]
    # One device freed: one member fits, two do not (the second may not reuse the first's).
    assert held(search(1, {"gpu-3"})) == [("a", "gpu-3")]
    assert getattr(search(2, {"gpu-3"}), "choices", "unset") is None
