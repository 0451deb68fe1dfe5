"""kdra.dra.usage.utilisation on partitioned and shared GPUs: a device is free only when it
could be allocated now — its shared counters have room, a shared device has capacity left.

The slices are what the node agent publishes for its inventory (H100-80GB: 7 compute and
8 memory slices per GPU; the whole GPU and its MIG-like partitions draw on them)."""

from __future__ import annotations

from typing import Any

import pytest

from kdra.cli.core.describe import describe
from kdra.dra.usage.claims import claims_of
from kdra.dra.usage.utilisation import STATES, utilisation
from tests.unit.cli.test_describe_gpus import GPU, claim, slices
from tests.unit.dra.test_utilisation import GPU_CLASS, device_class, snapshot

MIG = "gpus: [{profile: H100-80GB, count: 2, partitions: mig}]"
SHARED = "gpus: [{profile: H100-80GB, count: 2, sharing: memory}]"
PARTITION_CLASS = device_class("mig", 'device.attributes["gpu.kdra.dev"].type == "mig"')
WHOLE_CLASS = device_class("whole", 'device.attributes["gpu.kdra.dev"].type == "gpu"')


def held(*devices: str) -> list[dict[str, Any]]:
    return [claim(f"c{i}", {"device": name}) for i, name in enumerate(devices)]


def states(inventory: str, claims: list[dict[str, Any]],
           classes: tuple[dict[str, Any], ...] = (GPU_CLASS,)) -> dict[str, tuple[int, ...]]:
    """class → (total, allocated, free, blocked, unhealthy) on node n1."""
    found = utilisation(snapshot(slices(inventory), list(classes)), claims_of(claims))
    return {u.device_class: (u.total, u.allocated, u.free, u.blocked, u.unhealthy)
            for u in found}


# Two H100s, 15 devices each: the whole GPU, 7x 1g.10gb, 3x 2g.20gb, 2x 3g.40gb, 4g.40gb,
# 7g.80gb; each takes its g compute slices of 7 and memory slices: 1g-N slice N, 2g-N N..N+1,
# 3g-0 0-3, 3g-4 4-7, 4g-0 0-3, 7g-0 and the whole GPU all 8.
CASES = [
    pytest.param([], {"mig": (28, 0, 28, 0, 0), "whole": (2, 0, 2, 0, 0)},
                 id="nothing held: every device free"),
    pytest.param(["gpu-0"], {"mig": (28, 0, 14, 14, 0), "whole": (2, 1, 1, 0, 0)},
                 id="the whole GPU blocks all its partitions, not the other GPU's"),
    pytest.param(["gpu-0-mig-1g-10gb-0"], {"mig": (28, 1, 14 + 9, 4, 0),
                                           "whole": (2, 0, 1, 1, 0)},
                 id="one partition blocks the parent and those on its memory slice"),
    pytest.param(["gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"],
                 {"mig": (28, 2, 14, 12, 0), "whole": (2, 0, 1, 1, 0)},
                 id="two 3g.40gb take every memory slice: the rest of the GPU is blocked"),
    pytest.param(["gpu-0-mig-4g-40gb-0"], {"mig": (28, 1, 14 + 5, 8, 0),
                                           "whole": (2, 0, 1, 1, 0)},
                 id="4g.40gb leaves 3 compute slices and memory 4-7: 1g-4..6, 2g-4, 3g-4 fit"),
]


@pytest.mark.parametrize(("taken", "expected"), CASES)
def test_partitions_block_the_parent_and_each_other(taken: list[str],
                                                    expected: dict[str, tuple[int, ...]]) -> None:
    assert states(MIG, held(*taken), (PARTITION_CLASS, WHOLE_CLASS)) == expected


def test_free_agrees_with_describe_device_by_device() -> None:
    """``free`` and ``describe`` call the same devices free (describe's own walk of the
    counters names the short counter; free asks the allocator's ledger)."""
    claims = [claim("a", {"device": "gpu-0-mig-3g-40gb-4"}),
              claim("b", {"device": "gpu-0-mig-1g-10gb-0"}),
              claim("c", {"device": "gpu-0-mig-1g-10gb-1", "adminAccess": True}),
              claim("d", {"device": "gpu-1"})]
    (pool,) = describe(slices(MIG), claims).pools
    blocked = sum(1 for d in pool.devices if d.blocked)
    assert states(MIG, claims)[GPU] == (30, 3, pool.free, blocked, 0) == (30, 3, 4, 23, 0)


def test_admin_access_blocks_nothing() -> None:
    claims = [claim("watch", {"device": "gpu-0", "adminAccess": True})]
    assert states(MIG, claims)[GPU] == (30, 0, 30, 0, 0)


@pytest.mark.parametrize(("shares", "expected"), [
    pytest.param([], (2, 0, 2, 0, 0), id="no share"),
    pytest.param(["20Gi", "40Gi"], (2, 0, 2, 0, 0), id="20Gi left: still free"),
    pytest.param(["79Gi", "1Gi"], (2, 1, 1, 0, 0), id="all 80Gi used: allocated"),
    pytest.param(["80Gi"], (2, 1, 1, 0, 0), id="one share of everything"),
    pytest.param(["79Gi", "lots"], (2, 0, 2, 0, 0),
                 id="an amount that is not a quantity counts as nothing, as for the allocator"),
    pytest.param(["79Gi", "9" * 100_000, "-80Gi"], (2, 0, 2, 0, 0),
                 id="hostile amounts (100k digits, negative) count as nothing, never fail"),
])
def test_a_shared_gpu_is_free_while_a_default_share_fits(shares: list[str],
                                                          expected: tuple[int, ...]) -> None:
    claims = [claim(f"s{i}", {"device": "gpu-0", "shareID": f"id-{i}",
                              "consumedCapacity": {"memory": amount}})
              for i, amount in enumerate(shares)]
    assert states(SHARED, claims)[GPU] == expected


def test_a_partitioned_gpu_in_the_json_and_table_of_free() -> None:
    found = utilisation(snapshot(slices(MIG), [GPU_CLASS]), claims_of(held("gpu-0")))
    assert found[0].to_json() == {"class": GPU, "node": "n1", "driver": GPU, "pool": "n1",
                                  "total": 30, "allocated": 1, "free": 15, "blocked": 14,
                                  "unhealthy": 0}



def counted_pool() -> list[dict[str, Any]]:
    """One pool in two slices: a counter set ``board`` (8 ``mem``), a shared device ``s``
    (40Gi, default share 1Gi) and partitions ``p4`` / ``p8`` drawing 4 and 8 of it."""
    def consumer(name: str, mem: str, **more: Any) -> dict[str, Any]:
        return {"name": name, "attributes": {"id": {"string": name}}, **more,
                "consumesCounters": [{"counterSet": "board", "counters": {"mem": {"value": mem}}}]}
    pool = {"name": "n1", "generation": 1, "resourceSliceCount": 2}
    shared = consumer("s", "4", allowMultipleAllocations=True, capacity={"memory": {
        "value": "40Gi", "requestPolicy": {"default": "1Gi"}}})
    return [{"metadata": {"name": "n1-counters"}, "spec": {
                "driver": GPU, "nodeName": "n1", "pool": pool,
                "sharedCounters": [{"name": "board", "counters": {"mem": {"value": "8"}}}]}},
            {"metadata": {"name": "n1-devices"}, "spec": {
                "driver": GPU, "nodeName": "n1", "pool": pool,
                "devices": [shared, consumer("p4", "4"), consumer("p8", "8")]}}]


@pytest.mark.parametrize(("results", "expected"), [
    pytest.param([], {"s": "free", "p4": "free", "p8": "free"}, id="nothing held"),
    pytest.param([{"device": "s", "shareID": "a", "consumedCapacity": {"memory": "1Gi"}}],
                 {"s": "free", "p4": "free", "p8": "blocked"},
                 id="a share takes the shared device's counters"),
    pytest.param([{"device": "s", "shareID": "a", "consumedCapacity": {"memory": "1Gi"}},
                  {"device": "s", "shareID": "b", "consumedCapacity": {"memory": "1Gi"}},
                  {"device": "p4"}],
                 {"s": "free", "p4": "allocated", "p8": "blocked"},
                 id="more shares take the counters once: p4 still fitted beside them"),
    pytest.param([{"device": "p8"}], {"s": "blocked", "p4": "blocked", "p8": "allocated"},
                 id="a partition blocks a shared device that has no share yet"),
    pytest.param([{"device": "s", "shareID": "a", "consumedCapacity": {"memory": "40Gi"}}],
                 {"s": "allocated", "p4": "free", "p8": "blocked"},
                 id="a shared device with no capacity left is allocated"),
])
def test_shared_devices_and_counters(results: list[dict[str, Any]],
                                     expected: dict[str, str]) -> None:
    classes = [device_class(name, f'device.attributes["{GPU}"].id == "{name}"')
               for name in expected]
    rows = claims_of([claim(f"c{i}", result) for i, result in enumerate(results)])
    found = {u.device_class: next(state for state in STATES if u.count(state))
             for u in utilisation(snapshot(counted_pool(), classes), rows)}
    assert found == expected
