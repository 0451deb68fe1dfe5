"""Preparing partitions (created on demand, freed at unprepare) and shares of a GPU (CDI env
with the share), and the agent's own counter/capacity check — a table, and a hypothesis
property comparing it with a literal recount over random prepares and releases."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.core.checkpoint import Checkpoint, ClaimEntry, ClaimRef, PreparedDevice
from kdra.agent.core.inventory import parse_inventory
from kdra.agent.core.node_accounting import clashes
from kdra.agent.core.nodeprep import Result
from kdra.agent.core.shares import fake_partition_uuid
from kdra.agent.prepare import Preparer, WaitForRelease
from tests.unit.agent.prepare_helpers import NODE, FakeClient, discovered

GPU = "gpu.kdra.dev"


class Node:
    def __init__(self, tmp: Path, inventory: str) -> None:
        self.tmp = tmp
        self.client = FakeClient()
        backends, self.inventory = discovered(inventory)
        self.preparer = Preparer(
            self.client, NODE, cdi=CdiDir(tmp / "cdi"),  # type: ignore[arg-type]
            checkpoint_file=CheckpointFile(tmp / "state", NODE),
            inventory=lambda: self.inventory, drivers=lambda: self.inventory.drivers,
            backends=backends,
            claims=lambda namespace, name: self.client.objects.get((namespace, name)))
        self.preparer.load()

    def claim(self, name: str, results: list[dict[str, Any]]) -> dict[str, Any]:
        obj = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
               "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                            "generation": 1},
               "spec": {}, "status": {
                   "allocation": {"devices": {"results": [
                       {"request": "gpu", "driver": GPU, "pool": NODE, **r} for r in results]}},
                   "reservedFor": [{"resource": "pods", "name": name, "uid": f"pod-{name}"}]}}
        return self.client.put(obj)

    def sync(self, name: str) -> None:
        asyncio.run(self.preparer.sync("ns", name, self.client.objects.get(("ns", name))))

    def release(self, name: str) -> None:
        obj = self.client.objects[("ns", name)]
        self.client.put({**obj, "status": {}})

    def statuses(self, name: str) -> list[dict[str, Any]]:
        return list((self.client.objects[("ns", name)].get("status") or {}).get("devices") or ())

    def spec(self, name: str) -> dict[str, Any]:
        return json.loads((self.tmp / "cdi" / f"kdra.dev-uid-{name}.json").read_text())


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for device in spec["devices"]:
        env.update(item.split("=", 1) for item in device["containerEdits"]["env"])
    return env


def conditions(statuses: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["device"], e["conditions"][0]["reason"]) for e in statuses]


PARTITIONED = "gpus: [{profile: H100-80GB, count: 2, partitions: mig}]"
SHARED = "gpus: [{profile: H100-80GB, count: 1, sharing: memory}]"


def test_a_partition_is_created_on_demand_and_freed_at_unprepare(tmp_path: Path) -> None:
    node = Node(tmp_path, PARTITIONED)
    node.claim("a", [{"device": "gpu-0-mig-3g-40gb-4"}])
    node.sync("a")
    (status,) = node.statuses("a")
    assert status["conditions"][0]["status"] == "True"
    uuid = fake_partition_uuid(NODE, "gpu-0-mig-3g-40gb-4")
    assert status["data"]["uuid"] == uuid and uuid.startswith("MIG-")
    assert status["data"]["profile"] == "3g.40gb"
    env = env_of(node.spec("a"))
    assert env["KDRA_DEVICE_GPU_0_MIG_3G_40GB_4_UUID"] == uuid
    assert env["KDRA_DEVICE_GPU_0_MIG_3G_40GB_4_PROFILE"] == "3g.40gb"
    assert env["KDRA_GPU_PROFILE"] == "3g.40gb"
    assert env["KDRA_DEVICE_GPU_0_MIG_3G_40GB_4_PARENT_UUID"].startswith("GPU-")

    # The other half of gpu-0 is free: a 3g at slice 0 fits; the whole gpu-0 does not.
    node.claim("b", [{"device": "gpu-0-mig-3g-40gb-0"}])
    node.sync("b")
    assert conditions(node.statuses("b")) == [("gpu-0-mig-3g-40gb-0", "Prepared")]
    node.claim("c", [{"device": "gpu-0"}])
    node.sync("c")
    ((device, reason),) = conditions(node.statuses("c"))
    assert (device, reason) == ("gpu-0", "CountersExhausted")
    message = node.statuses("c")[0]["conditions"][0]["message"]
    assert "gpu-0: " in message and "held by claim ns/a" in message

    node.release("a")
    node.sync("a")  # unprepare frees its memory slices
    assert not (tmp_path / "cdi" / "kdra.dev-uid-a.json").exists()
    node.claim("d", [{"device": "gpu-0-mig-4g-40gb-0"}])  # overlaps b (slices 0-3)
    node.sync("d")
    assert conditions(node.statuses("d")) == [("gpu-0-mig-4g-40gb-0", "CountersExhausted")]
    node.claim("e", [{"device": "gpu-0-mig-2g-20gb-4"}])
    node.sync("e")
    assert conditions(node.statuses("e")) == [("gpu-0-mig-2g-20gb-4", "Prepared")]


def test_a_clash_with_a_released_holder_waits_for_its_unprepare(tmp_path: Path) -> None:
    node = Node(tmp_path, PARTITIONED)
    node.claim("a", [{"device": "gpu-1"}])
    node.sync("a")
    node.claim("b", [{"device": "gpu-1-mig-1g-10gb-6"}])
    node.release("a")  # deallocated; its unprepare has not run yet
    with pytest.raises(WaitForRelease, match="gpu-1-mig-1g-10gb-6"):
        node.sync("b")
    node.sync("a")
    node.sync("b")
    assert conditions(node.statuses("b")) == [("gpu-1-mig-1g-10gb-6", "Prepared")]


def share(share_id: str, memory: str) -> dict[str, Any]:
    return {"device": "gpu-0", "shareID": share_id, "consumedCapacity": {"memory": memory}}


def test_two_shares_of_one_gpu_each_see_their_share(tmp_path: Path) -> None:
    node = Node(tmp_path, SHARED)
    node.claim("a", [share("11111111-aaaa", "20Gi")])
    node.claim("b", [share("22222222-bbbb", "40Gi")])
    node.sync("a")
    node.sync("b")
    for name, share_id, memory in (("a", "11111111-aaaa", "20Gi"),
                                   ("b", "22222222-bbbb", "40Gi")):
        (status,) = node.statuses(name)
        assert status["shareID"] == share_id and status["conditions"][0]["status"] == "True"
        spec = node.spec(name)
        assert spec["devices"][0]["name"] == f"uid-{name}-gpu-0-{share_id}"
        env = env_of(spec)
        assert env["KDRA_GPU_MEMORY_LIMIT"] == memory
        assert env["KDRA_DEVICE_GPU_0_MEMORY_LIMIT"] == memory
        assert env["KDRA_SHARE_ID"] == env["KDRA_DEVICE_GPU_0_SHARE_ID"] == share_id
        assert env["KDRA_DEVICE_GPU_0_UUID"].startswith("GPU-")
    # 20 + 40 + 30 > 80: the third share is refused, naming the capacity and the holders.
    node.claim("c", [share("33333333-cccc", "30Gi")])
    node.sync("c")
    (status,) = node.statuses("c")
    assert (status["shareID"], status["conditions"][0]["reason"]) == (
        "33333333-cccc", "CapacityExceeded")
    assert "memory would be 90Gi of 80Gi" in status["conditions"][0]["message"]
    node.release("b")
    node.sync("b")
    node.sync("c")
    assert conditions(node.statuses("c")) == [("gpu-0", "Prepared")]


def test_one_claim_with_two_shares_of_one_gpu_gets_two_cdi_devices(tmp_path: Path) -> None:
    node = Node(tmp_path, SHARED)
    node.claim("a", [share("s-1", "10Gi"), share("s-2", "5Gi")])
    node.sync("a")
    spec = node.spec("a")
    assert [d["name"] for d in spec["devices"]] == ["uid-a-gpu-0-s-1", "uid-a-gpu-0-s-2"]
    assert sorted(e["shareID"] for e in node.statuses("a")) == ["s-1", "s-2"]


# --------------------------------------------------------------------------- pure table

INVENTORY = parse_inventory(PARTITIONED + "\n", NODE)
SHARED_INVENTORY = parse_inventory(SHARED, NODE)


def prepared(uid: str, *devices: str, shares: dict[str, str] | None = None,
             admin: bool = False) -> ClaimEntry:
    return ClaimEntry(ClaimRef(uid, "ns", uid), "prepared", tuple(
        PreparedDevice("r", GPU, NODE, d, admin_access=admin,
                       share_id=f"{uid}-{d}" if shares else "",
                       consumed_capacity=tuple((shares or {}).items()))
        for d in devices), ())


def result(device: str, memory: str = "") -> Result:
    return Result("r", GPU, NODE, device, "s" if memory else "",
                  (("memory", memory),) if memory else ())


@pytest.mark.parametrize(("held", "asked", "inventory", "expected"), [
    ([prepared("x", "gpu-0-mig-1g-10gb-3")], [result("gpu-0-mig-3g-40gb-0")], INVENTORY,
     {"gpu-0-mig-3g-40gb-0": "CountersExhausted"}),
    ([prepared("x", "gpu-0-mig-1g-10gb-3")], [result("gpu-0-mig-3g-40gb-4")], INVENTORY, {}),
    ([prepared("x", "gpu-0-mig-1g-10gb-3")], [result("gpu-1")], INVENTORY, {}),
    ([prepared("x", "gpu-0-mig-1g-10gb-3", admin=True)], [result("gpu-0")], INVENTORY, {}),
    ([], [result("gpu-0-mig-4g-40gb-0"), result("gpu-0-mig-3g-40gb-0")], INVENTORY,
     {"gpu-0-mig-3g-40gb-0": "CountersExhausted"}),  # the claim's own devices overlap
    # 7 x 1g use every compute slice; a 1g elsewhere is fine, any more on gpu-0 is not.
    ([prepared("x", *[f"gpu-0-mig-1g-10gb-{i}" for i in range(7)])],
     [result("gpu-0-mig-1g-10gb-0")], INVENTORY, {"gpu-0-mig-1g-10gb-0": "CountersExhausted"}),
    ([prepared("x", "gpu-0", shares={"memory": "60Gi"})], [result("gpu-0", "20Gi")],
     SHARED_INVENTORY, {}),
    ([prepared("x", "gpu-0", shares={"memory": "60Gi"})], [result("gpu-0", "21Gi")],
     SHARED_INVENTORY, {"gpu-0": "CapacityExceeded"}),
    ([], [result("gpu-0", "lots")], SHARED_INVENTORY, {"gpu-0": "CapacityExceeded"}),
])
def test_clashes(held: list[ClaimEntry], asked: list[Result], inventory: Any,
                 expected: dict[str, str]) -> None:
    checkpoint = Checkpoint(NODE, {e.claim.uid: e for e in held})
    found = clashes(checkpoint, "me", asked, inventory)
    assert {key[2]: clash.reason for key, clash in found.items()} == expected
    for clash in found.values():
        assert clash.message  # names the counter or capacity


# --------------------------------------------------------------------------- property

DEVICES = [d for d in INVENTORY.devices if d.name.startswith("gpu-0")]
SHARE_SIZES = ["1Gi", "5Gi", "20Gi", "40Gi", "79Gi"]


def _slices_of(name: str) -> set[int]:
    device = next(d for d in DEVICES if d.name == name)
    return {int(c.rsplit("-", 1)[1]) for use in device.consumes_counters
            for c in use.counters if c.startswith("memory-slice-")}


def _compute_of(name: str) -> int:
    device = next(d for d in DEVICES if d.name == name)
    return sum(int(v) for use in device.consumes_counters
               for c, v in use.counters.items() if c == "compute-slices")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, len(DEVICES) - 1),
                          st.sampled_from(SHARE_SIZES)), max_size=40))
def test_random_prepares_and_releases_keep_the_node_accounting_exact(
        ops: list[tuple[bool, int, str]]) -> None:
    """Preparing what ``clashes`` lets through and releasing at random: the partitions held
    never overlap, never use more than 7 compute slices, the shares never exceed 80Gi — and
    ``clashes`` refuses exactly what a literal check of the held devices refuses."""
    partitions: dict[str, str] = {}  # uid → partition device
    shares: dict[str, str] = {}  # uid → memory
    for serial, (release, index, size) in enumerate(ops):
        uid = f"c{serial}"
        if release and (partitions or shares):
            victim = sorted([*partitions, *shares])[index % len(partitions | shares)]
            partitions.pop(victim, None)
            shares.pop(victim, None)
            continue
        # Two nodes: one with the partitioned GPUs, one with the shared GPU.
        held = Checkpoint(NODE, {u: prepared(u, d) for u, d in partitions.items()})
        sharing = Checkpoint(NODE, {u: prepared(u, "gpu-0", shares={"memory": m})
                                    for u, m in shares.items()})
        if index % 3 == 0:  # a share of the shared GPU
            found = clashes(sharing, uid, [result("gpu-0", size)], SHARED_INVENTORY)
            used = sum(int(m[:-2]) for m in shares.values())
            fits = used + int(size[:-2]) <= 80
            assert (not found) == fits
            if fits:
                shares[uid] = size
        else:
            name = DEVICES[index].name
            found = clashes(held, uid, [result(name)], INVENTORY)
            taken = set().union(*(_slices_of(d) for d in partitions.values()))
            compute = sum(_compute_of(d) for d in partitions.values())
            fits = not (_slices_of(name) & taken) and compute + _compute_of(name) <= 7
            assert (not found) == fits, (name, sorted(partitions.values()))
            if fits:
                partitions[uid] = name
        slices = [_slices_of(d) for d in partitions.values()]
        assert sum(map(len, slices)) == len(set().union(*slices)) if slices else True
        assert sum(_compute_of(d) for d in partitions.values()) <= 7
        assert sum(int(m[:-2]) for m in shares.values()) <= 80
