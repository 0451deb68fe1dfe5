"""The MIG-like partition layout: names, limits, and that counters encode MIG placement."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from kdra.agent.core.gpu_partitions import (
    PARTITION_LAYOUTS,
    layout_for,
    partition_devices,
)
from kdra.agent.core.inventory import parse_inventory
from kdra.dra.models import parse_slice


def gpu(index: int = 0, profile: str = "H100-80GB") -> dict[str, Any]:
    inventory = parse_inventory(f"gpus: ['1 x {profile}']", "node-a")
    device = inventory.devices[0].to_api()
    device["name"] = f"gpu-{index}"
    return device


def test_h100_layout_has_the_expected_partitions() -> None:
    counters, devices = partition_devices(gpu(3))
    names = [d["name"] for d in devices]
    assert names[0] == "gpu-3"
    assert len(devices) == 1 + 7 + 3 + 2 + 1 + 1
    assert "gpu-3-mig-1g-10gb-6" in names and "gpu-3-mig-3g-40gb-4" in names
    assert "gpu-3-mig-7g-80gb-0" in names and "gpu-3-mig-4g-40gb-0" in names
    assert counters["name"] == "gpu-3"
    assert counters["counters"]["memory-slices"] == {"value": "8"}
    assert counters["counters"]["compute-slices"] == {"value": "7"}
    assert len(counters["counters"]) == 10
    part = next(d for d in devices if d["name"] == "gpu-3-mig-3g-40gb-4")
    assert part["attributes"]["type"] == {"string": "mig"}
    assert part["attributes"]["profile"] == {"string": "3g.40gb"}
    assert part["attributes"]["parentUUID"] == devices[0]["attributes"]["uuid"]
    assert "uuid" not in part["attributes"]
    assert part["capacity"] == {"memory": {"value": "40Gi"}}
    consumed = part["consumesCounters"][0]["counters"]
    assert set(consumed) == {"memory-slice-4", "memory-slice-5", "memory-slice-6",
                             "memory-slice-7", "memory-slices", "compute-slices"}
    assert consumed["compute-slices"] == {"value": "3"}


@pytest.mark.parametrize(("profile", "small", "big"), [
    ("A100-40GB", "1g.5gb", "7g.40gb"), ("A100-80GB", "1g.10gb", "7g.80gb"),
    ("H100-80GB", "1g.10gb", "7g.80gb")])
def test_layouts_by_profile_and_product(profile: str, small: str, big: str) -> None:
    layout = PARTITION_LAYOUTS[profile]
    assert layout.profiles[0].name == small and layout.profiles[-1].name == big
    product = gpu(0, profile)["attributes"]["productName"]["string"]
    assert layout_for(product) is layout


def test_devices_and_counters_pass_the_api_rules_in_slices_of_upstream_size() -> None:
    sets, devices = [], []
    for index in range(4):
        counters, devs = partition_devices(gpu(index))
        sets.append(counters)
        devices += devs
    assert len(devices) == 60  # four GPUs fit one slice of ≤ 64 devices with counters
    base = {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice"}
    spec = {"driver": "gpu.kdra.dev", "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 0, "resourceSliceCount": 2}}
    parse_slice({**base, "metadata": {"name": "d"}, "spec": {**spec, "devices": devices}})
    parse_slice({**base, "metadata": {"name": "c"}, "spec": {**spec, "sharedCounters": sets}})


def test_counters_allow_exactly_the_non_overlapping_placements() -> None:
    """Every subset of one GPU's devices: the counters fit iff the memory ranges are disjoint
    (the whole GPU counting as all of them) — MIG's rule, stated without counters."""
    counters, devices = partition_devices(gpu())
    totals = {k: int(v["value"]) for k, v in counters["counters"].items()}

    def span(device: dict[str, Any]) -> set[int]:
        attrs = device["attributes"]
        if attrs["type"]["string"] == "gpu":
            return set(range(8))
        start = attrs["placement"]["int"]
        return set(range(start, start + attrs["memorySlices"]["int"]))

    checked = 0
    for size in range(len(devices) + 1):
        for subset in itertools.combinations(devices, size):
            used: dict[str, int] = {}
            for device in subset:
                for name, value in device["consumesCounters"][0]["counters"].items():
                    used[name] = used.get(name, 0) + int(value["value"])
            fits = all(used[k] <= totals[k] for k in used)
            spans = [span(d) for d in subset]
            disjoint = sum(len(s) for s in spans) == len(set().union(*spans))
            assert fits == disjoint, [d["name"] for d in subset]
            checked += 1
    assert checked == 2 ** len(devices)


def test_existing_placements_only_and_errors() -> None:
    _, devices = partition_devices(gpu(), placements=[("3g.40gb", 4), ("1g.10gb", 0)],
                                   include_whole=False)
    assert [d["name"] for d in devices] == ["gpu-0-mig-1g-10gb-0", "gpu-0-mig-3g-40gb-4"]
    with pytest.raises(ValueError, match=r"3g\.40gb at memory slice 2"):
        partition_devices(gpu(), placements=[("3g.40gb", 2)])
    with pytest.raises(ValueError, match="no partition layout"):
        partition_devices(gpu(0, "T4-16GB"))
    with pytest.raises(ValueError, match="DNS label"):
        partition_devices({**gpu(), "name": "g" * 50})


def test_taints_of_the_gpu_carry_to_its_partitions() -> None:
    taint = {"key": "gpu.kdra.dev/unhealthy", "value": "xid", "effect": "NoSchedule"}
    _, devices = partition_devices({**gpu(), "taints": [taint]})
    assert all(d["taints"] == [taint] for d in devices)
