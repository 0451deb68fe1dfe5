"""The allocator on v1's newer shapes, one table like test_allocator's: prioritized lists
(``firstAvailable``), ``distinctAttribute`` constraints, admin access in results, and what kdra
does not support yet (never allocated, always explained)."""

from __future__ import annotations

import re

import pytest

from kdra.dra.allocator import NodeInfo, Snapshot, allocate, place, preference
from kdra.dra.allocator.choices import MAX_COMBINATIONS
from kdra.dra.errors import AllocationError
from kdra.dra.scheduling import best
from tests.unit.builders import (
    CLASS,
    DRIVER,
    allocated,
    claim_config,
    claim_with,
    class_with,
    device,
    devices,
    distinct,
    first_available,
    gpu_class,
    match,
    node,
    opaque,
    request,
    slice_with,
    sub,
)
from tests.unit.dra.test_allocator import GPU, Case, picks

H100 = f'{GPU}.model == "H100"'
A100 = f'{GPU}.model == "A100"'
mixed = slice_with(device("gpu-0", model="A100", port=0), device("gpu-1", model="A100", port=0),
                   device("gpu-2", model="H100", port=1), device("gpu-3", model="A100", port=1))
big_or_two_small = first_available("gpu", sub("big", H100), sub("small", A100, count=2))
TAINTED = {"name": "gpu-0", "attributes": {"model": {"string": "H100"}},
           "taints": [{"key": "gpu.kdra.dev/unhealthy", "value": "xid-79",
                       "effect": "NoSchedule"}]}

CASES = [
    # ---------------------------------------------------------------- firstAvailable
    Case("firstAvailable: the first alternative wins when it fits",
         [claim_with(big_or_two_small)], slices=[mixed], expect=[["gpu/big:gpu-2"]]),
    Case("firstAvailable: the next alternative when the first has no device",
         [claim_with(big_or_two_small)],
         slices=[slice_with(device("gpu-0", model="A100"), device("gpu-1", model="A100"))],
         expect=[["gpu/small:gpu-0", "gpu/small:gpu-1"]]),
    Case("firstAvailable: the next alternative when the first one's device is in use",
         [claim_with(big_or_two_small)], slices=[mixed],
         allocated=[allocated(claim_with(name="old"), ("gpu", "gpu-2"))],
         expect=[["gpu/small:gpu-0", "gpu/small:gpu-1"]]),
    Case("firstAvailable: no alternative fits does not fit",
         [claim_with(first_available("gpu", sub("big", H100, count=2),
                                     sub("small", A100, count=4)))], slices=[mixed]),
    Case("firstAvailable: alternatives of two requests combine best-first",
         [claim_with(first_available("a", sub("h", H100), sub("any")),
                     first_available("b", sub("h", H100), sub("any")))],
         slices=[mixed], expect=[["a/h:gpu-2", "b/any:gpu-0"]]),
    Case("firstAvailable: a later request's better choice found when an earlier one moves",
         # a/x fits on its own, but only b/y's gpu-2 would be left for b: kdra tries the
         # combination (a/x, b/y) and finds gpu-3 for a, upstream would settle on (a/x, b/z)
         [claim_with(first_available("a", sub("x", f"{GPU}.port == 1")),
                     first_available("b", sub("y", H100), sub("z")))],
         slices=[mixed], expect=[["a/x:gpu-3", "b/y:gpu-2"]]),
    Case("firstAvailable: an alternative with All",
         [claim_with(first_available("gpu", sub("all-h100", H100, all=True), sub("one")))],
         slices=[mixed], expect=[["gpu/all-h100:gpu-2"]]),
    Case("firstAvailable: constraints on <request> cover the chosen alternative",
         [claim_with(first_available("gpu", sub("two", count=2)),
                     constraints=[match(f"{DRIVER}/port", "gpu")])],
         slices=[mixed], expect=[["gpu/two:gpu-0", "gpu/two:gpu-1"]]),
    Case("firstAvailable: a constraint on <request>/<sub> only binds that alternative",
         [claim_with(first_available("gpu", sub("pair", count=2), sub("one")),
                     constraints=[match(f"{DRIVER}/port", "gpu/pair")])],
         slices=[slice_with(device("gpu-0", port=0), device("gpu-1", port=1))],
         expect=[["gpu/one:gpu-0"]]),
    Case("firstAvailable: a missing class of any alternative is an error (as upstream)",
         [claim_with(first_available("gpu", sub("big"), sub("other", cls="nope")))],
         error=r"device class nope not found \(request gpu/other of claim default/claim\)"),
    Case("firstAvailable: past 32 devices an alternative is skipped, not an error",
         [claim_with(first_available("gpu", sub("many", count=33), sub("few", count=2)))],
         slices=[slice_with(*devices(40))], expect=[["gpu/few:gpu-0", "gpu/few:gpu-1"]]),
    # ---------------------------------------------------------------- distinctAttribute
    Case("distinctAttribute: devices with different values",
         [claim_with(request(count=2), constraints=[distinct(f"{DRIVER}/port")])],
         slices=[mixed], expect=[["gpu:gpu-0", "gpu:gpu-2"]]),
    Case("distinctAttribute: not enough distinct values does not fit",
         [claim_with(request(count=3), constraints=[distinct(f"{DRIVER}/port")])],
         slices=[mixed]),
    Case("distinctAttribute: a device lacking the attribute cannot be chosen",
         [claim_with(request(count=2), constraints=[distinct(f"{DRIVER}/port")])],
         slices=[slice_with(device("gpu-0"), device("gpu-1", port=0), device("gpu-2", port=1))],
         expect=[["gpu:gpu-1", "gpu:gpu-2"]]),
    Case("distinctAttribute across two requests, with matchAttribute on another attribute",
         [claim_with(request("a"), request("b"),
                     constraints=[distinct(f"{DRIVER}/port"), match(f"{DRIVER}/model")])],
         slices=[mixed], expect=[["a:gpu-0", "b:gpu-3"]]),
    Case("distinctAttribute backtracks (the first pick blocks the only completion)",
         [claim_with(request("a", f"{GPU}.port <= 1"), request("b", f"{GPU}.port == 0"),
                     constraints=[distinct(f"{DRIVER}/port")])],
         slices=[slice_with(device("gpu-0", port=0), device("gpu-1", port=1))],
         expect=[["a:gpu-1", "b:gpu-0"]]),
    Case("distinctAttribute: int 1 and string \"1\" are distinct values",
         [claim_with(request(count=2), constraints=[distinct(f"{DRIVER}/port")])],
         slices=[slice_with(device("gpu-0", port=1), device("gpu-1", port="1"))],
         expect=[["gpu:gpu-0", "gpu:gpu-1"]]),
    Case("distinctAttribute with All: equal values are an error",
         [claim_with(request(all=True), constraints=[distinct(f"{DRIVER}/port")])],
         slices=[mixed], error=r"does not satisfy distinctAttribute gpu.kdra.dev/port"),
    # ---------------------------------------------------------------- not supported yet
    Case("a tainted device (NoSchedule) is not allocated without a toleration",
         [claim_with(request("gpu", H100))],
         slices=[slice_with(TAINTED, device("gpu-1", model="H100"))], expect=[["gpu:gpu-1"]]),
    Case("a device with an informational (None) taint is allocated",
         [claim_with()],
         slices=[slice_with({**TAINTED, "taints": [{"key": "k", "effect": "None"}]})],
         expect=[["gpu:gpu-0"]]),
    # Issue 39: a device consuming a counter set its pool does not publish makes the pool
    # invalid (upstream), which is the error when nothing else fits.
    Case("a device consuming a counter set the pool does not publish invalidates the pool",
         [claim_with()],
         slices=[slice_with({"name": "gpu-0", "consumesCounters": [
             {"counterSet": "gpu", "counters": {"mem": {"value": "10Gi"}}}]})],
         error=r"invalid resource pools were encountered: resource pool "
               r"gpu.kdra.dev/worker-1 is invalid: device gpu-0 consumes counter set gpu"),
    # Issue 39: binding conditions are acted upon (they used to be refused as unsupported).
    Case("a device with binding conditions is allocated, its conditions in the result",
         [claim_with()],
         slices=[slice_with({"name": "gpu-1", "bindingConditions": ["Attached"],
                             "bindingFailureConditions": ["Failed"]})],
         expect=[["gpu:gpu-1"]]),
    # Issue 26: multiple allocations are acted upon (they used to be refused as unsupported).
    Case("a device that allows multiple allocations is allocated (as a share)",
         [claim_with()],
         slices=[slice_with({"name": "gpu-0", "allowMultipleAllocations": True},
                            {"name": "gpu-1", "nodeAllocatableResourceMappings": {
                                "cpu": {"capacityKey": "cores"}}})],
         expect=[["gpu:gpu-0"]]),
    Case("a device with list-typed attributes is never allocated",
         [claim_with()], slices=[slice_with({"name": "gpu-0", "attributes": {
             "cores": {"ints": [0, 1]}}})]),
    Case("All fails when a matching device uses a feature kdra does not support",
         [claim_with(request(all=True))],
         slices=[slice_with({"name": "gpu-0", "nodeAllocatableResourceMappings": {
                                "cpu": {"capacityKey": "cores"}}},
             device("gpu-1", model="H100"))],
         error=r"matching device gpu.kdra.dev/worker-1/gpu-0 uses "
               r"nodeAllocatableResourceMappings, which kdra does not support yet"),
    # Issue 25: taints and tolerations are acted upon (they used to be refused as unsupported).
    # Issue 39: as upstream (tainted-all-devices-single), All counts a matching device it does
    # not tolerate among "all" and cannot take it: the node does not fit.
    Case("All does not fit when a matching device has a taint it does not tolerate",
         [claim_with(request(all=True))],
         slices=[slice_with(TAINTED, device("gpu-1", model="H100"))]),
    Case("a claim tolerating the taint may get the tainted device",
         [claim_with({"name": "gpu", "exactly": {
             "deviceClassName": CLASS, "tolerations": [{"key": "gpu.kdra.dev/unhealthy",
                                                        "operator": "Exists"}]}})],
         slices=[slice_with(TAINTED)], expect=[["gpu:gpu-0"]]),
    # Issue 26: capacity requests are acted upon: they filter devices by capacity.
    Case("a capacity request in an alternative picks the device that has it",
         [claim_with({"name": "gpu", "firstAvailable": [
             {"name": "a", "deviceClassName": CLASS,
              "capacity": {"requests": {"memory": "10Gi"}}}]})],
         slices=[slice_with(device("gpu-0", capacity={"memory": "8Gi"}),
                            device("gpu-1", capacity={"memory": "16Gi"}))],
         expect=[["gpu/a:gpu-1"]]),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_allocate(case: Case) -> None:
    snapshot = Snapshot.build(case.slices, case.classes or [gpu_class()], case.allocated)
    if case.error is not None:
        with pytest.raises(AllocationError) as raised:
            allocate(case.claims, snapshot, case.node, case.in_flight)
        assert re.search(case.error, str(raised.value)), str(raised.value)
        return
    results = allocate(case.claims, snapshot, case.node, case.in_flight)
    if case.expect is None:
        assert results is None
    else:
        assert results is not None and picks(results) == case.expect


def test_results_name_the_alternative_and_carry_its_config() -> None:
    claim = claim_with(big_or_two_small, config=[
        claim_config("gpu/big", mode="exclusive"), claim_config("gpu/small", mode="shared"),
        claim_config("gpu", all="yes")])
    snapshot = Snapshot.build([mixed], [class_with(CLASS, f'device.driver == "{DRIVER}"',
                                                   config=[opaque(cls="gpu")])])
    (result,) = allocate([claim], snapshot, node()) or []
    assert [r.request for r in result.devices.results] == ["gpu/big"]
    sources = [(c.source, c.requests, c.opaque.parameters) for c in result.devices.config]
    assert sources == [("FromClass", ("gpu/big",), {"cls": "gpu"}),
                       ("FromClaim", ("gpu/big",), {"mode": "exclusive"}),
                       ("FromClaim", ("gpu",), {"all": "yes"})]  # verbatim, as upstream


def test_admin_access_is_recorded_in_the_results() -> None:
    snapshot = Snapshot.build([mixed], [gpu_class()])
    (result,) = allocate([claim_with(request(admin=True), request("plain"))], snapshot,
                         node()) or []
    assert [(r.request, r.admin_access) for r in result.devices.results] == [
        ("gpu", True), ("plain", None)]


def test_too_many_combinations_are_refused_with_a_reason() -> None:
    # Every alternative fits alone (5 free devices), no combination does (6 requests):
    # 3^6 combinations are more than one node's budget.
    requests = [first_available(f"r{k}", *[sub(f"s{i}") for i in range(3)]) for k in range(6)]
    assert MAX_COMBINATIONS < 3 ** 6
    snapshot = Snapshot.build([slice_with(*devices(5))], [gpu_class()])
    with pytest.raises(AllocationError, match="combinations of the pod's firstAvailable"):
        allocate([claim_with(*requests)], snapshot, node())


# --------------------------------------------------------------------------- across nodes


def cluster_of(*per_node: list[dict[str, object]]) -> tuple[Snapshot, list[NodeInfo]]:
    slices = [slice_with(*d, node=f"worker-{i}") for i, d in enumerate(per_node, start=1)]
    return (Snapshot.build(slices, [gpu_class()]),
            [node(f"worker-{i}") for i in range(1, len(per_node) + 1)])


@pytest.mark.parametrize("policy", ["binpack", "spread", "first-fit"])
def test_a_node_with_the_first_choice_beats_one_with_a_later_choice(policy: str) -> None:
    """worker-1 only fits the third alternative, worker-2 the first: worker-2 wins whatever
    the placement policy (which only breaks ties among equally preferred nodes)."""
    snapshot, nodes = cluster_of(
        [device("gpu-0", model="T4"), device("gpu-1", model="T4")],
        [device("gpu-0", model="H100")] + [device(f"gpu-{i}", model="T4") for i in (1, 2, 3)],
        [device("gpu-0", model="A100")])
    claim = claim_with(first_available(
        "gpu", sub("h100", H100), sub("a100", A100), sub("t4", f'{GPU}.model == "T4"')))
    outcome = place(snapshot, [claim], nodes)
    ranks = {name: p.preference for name, p in outcome.placements.items()}
    assert ranks == {"worker-1": 6, "worker-2": 8, "worker-3": 7}
    chosen = best(outcome.placements, policy, [n.name for n in nodes])
    assert chosen is not None and chosen.node == "worker-2"
    assert [r.request for r in chosen.results[0].devices.results] == ["gpu/h100"]


def test_among_equally_preferred_nodes_the_policy_decides() -> None:
    snapshot, nodes = cluster_of([device("gpu-0", model="H100")],
                                 [device(f"gpu-{i}", model="H100") for i in range(3)])
    claim = claim_with(first_available("gpu", sub("h100", H100), sub("any")))
    outcome = place(snapshot, [claim], nodes)
    assert {p.preference for p in outcome.placements.values()} == {8}
    assert best(outcome.placements, "binpack", ["worker-1", "worker-2"]).node == "worker-1"
    assert best(outcome.placements, "spread", ["worker-1", "worker-2"]).node == "worker-2"


def test_preference_sums_every_prioritized_request() -> None:
    snapshot, nodes = cluster_of([device("gpu-0", model="A100"), device("gpu-1", model="H100"),
                                  device("gpu-2", model="A100")])
    claim = claim_with(first_available("a", sub("h", H100), sub("x")),
                       first_available("b", sub("h", H100), sub("x")), request("plain"))
    placement = place(snapshot, [claim], nodes).placements["worker-1"]
    assert placement.preference == 8 + 7  # a got its first choice, b its second
    assert [r.request for r in placement.results[0].devices.results] == [
        "a/h", "b/x", "plain"]
    assert preference([]) == 0


def test_why_not_names_unsupported_devices_and_alternatives() -> None:
    bound = {"name": "gpu-0", "attributes": {"model": {"string": "H100"}},
             "nodeAllocatableResourceMappings": {"cpu": {"capacityKey": "cores"}}}
    snapshot, nodes = cluster_of([bound])
    outcome = place(snapshot, [claim_with(first_available("gpu", sub("h", H100),
                                                          sub("a", A100)))], nodes)
    assert not outcome.placements
    summary = outcome.summary()
    assert ("1 device(s) not usable: they use nodeAllocatableResourceMappings, which kdra does "
            "not support yet") in summary, summary
    assert "no other firstAvailable alternative of it fits either" in summary, summary


def test_why_not_names_tainted_devices() -> None:
    """Issue 25: a device turned away by a taint is named with the taint's key."""
    snapshot, nodes = cluster_of([TAINTED])
    outcome = place(snapshot, [claim_with(request("gpu", H100))], nodes)
    assert not outcome.placements
    summary = outcome.summary()
    assert "1 device tainted gpu.kdra.dev/unhealthy (not tolerated)" in summary, summary
