"""The fake inventory, GPU profiles, slice building and generation decisions."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kdra.agent.core.gpu_profiles import (
    GPU_PROFILES,
    cuda_version_from_int,
    fake_gpu_uuid,
    parse_gpu_shorthand,
    to_semver,
)
from kdra.agent.core.inventory import expand_names, parse_inventory
from kdra.agent.core.inventory_devices import Inventory, InventoryDevice
from kdra.agent.core.publication import build_slices, plan_publication, slice_name
from kdra.dra.errors import InvalidObject
from kdra.dra.models import parse_slice
from kdra.dra.semver import is_valid_version
from kdra.dra.taints import Taint
from kdra.kube.core.agent_leases import lease_name, lease_pools, shared_lease_name

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples" / "inventory"


def attrs(device: InventoryDevice) -> dict[str, Any]:
    return {name: device.attribute(name) for name in device.attributes}


# --------------------------------------------------------------------------- GPU profiles


def test_eight_h100s_look_like_nvidia_gpus() -> None:
    inventory = parse_inventory("gpus: ['8 x H100-80GB']", "worker-1")
    assert [d.name for d in inventory.devices] == [f"gpu-{i}" for i in range(8)]
    gpu = inventory.devices[3]
    assert gpu.driver == "gpu.kdra.dev"
    assert attrs(gpu) == {
        "type": "gpu", "uuid": fake_gpu_uuid("worker-1", 3),
        "productName": "NVIDIA H100 80GB HBM3", "brand": "Nvidia", "architecture": "Hopper",
        "cudaComputeCapability": "9.0.0", "driverVersion": "550.54.15",
        "cudaDriverVersion": "12.4.0", "pciBusID": "0000:4b:00.0", "index": 3, "minor": 3,
        "pcieRoot": "pci0000:01", "numaNode": 0,
    }
    assert gpu.attributes["cudaComputeCapability"] == {"version": "9.0.0"}
    assert gpu.attributes["index"] == {"int": 3}
    assert gpu.capacity == {"memory": "80Gi"}
    assert gpu.healthy and gpu.device_nodes == ()
    assert [d.attribute("numaNode") for d in inventory.devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert len({d.attribute("pcieRoot") for d in inventory.devices}) == 4


def test_uuids_are_deterministic_per_node_and_index() -> None:
    a = parse_inventory("gpus: ['2 x A100-40GB']", "node-a")
    again = parse_inventory("gpus: ['2 x A100-40GB']", "node-a")
    b = parse_inventory("gpus: ['2 x A100-40GB']", "node-b")
    assert a == again
    uuids = [d.attribute("uuid") for d in a.devices + b.devices]
    assert len(set(uuids)) == 4
    assert all(str(u).startswith("GPU-") and len(str(u)) == 40 for u in uuids)


def test_two_models_continue_the_index() -> None:
    inventory = parse_inventory(
        "gpus:\n- 8 x H100-80GB\n- {profile: A100-40GB, count: 4, unhealthy: [3]}\n", "n")
    names = [d.name for d in inventory.devices]
    assert names == [f"gpu-{i}" for i in range(12)]
    a100 = inventory.devices[8]
    assert a100.attribute("productName") == "NVIDIA A100-SXM4-40GB"
    assert a100.attribute("architecture") == "Ampere"
    assert a100.attribute("index") == 8 and a100.capacity == {"memory": "40Gi"}
    assert [d.healthy for d in inventory.devices[8:]] == [True, True, True, False]
    assert inventory.health_counts() == (11, 1)


@pytest.mark.parametrize("profile", sorted(GPU_PROFILES))
def test_every_profile_publishes_a_valid_slice(profile: str) -> None:
    inventory = parse_inventory(f"gpus: ['2 x {profile}']", "node-1")
    for obj in build_slices(node="node-1", driver="gpu.kdra.dev", devices=inventory.devices,
                            generation=0):
        parse_slice(obj)
    assert is_valid_version(GPU_PROFILES[profile].cuda_compute_capability)


@pytest.mark.parametrize(("text", "expected"), [
    ("550.54.15", "550.54.15"), ("535.104.05", "535.104.5"), ("560.35", "560.35.0"),
    ("12.4", "12.4.0"), ("9", "9.0.0"), ("470.57.02 ", "470.57.2"),
])
def test_versions_become_strict_semver(text: str, expected: str) -> None:
    assert to_semver(text) == expected
    assert is_valid_version(expected)


def test_cuda_driver_version_from_nvml_int() -> None:
    assert cuda_version_from_int(12040) == "12.4.0"
    assert cuda_version_from_int(11080) == "11.8.0"


def test_shorthand() -> None:
    assert parse_gpu_shorthand("8 x H100-80GB") == (8, "H100-80GB")
    assert parse_gpu_shorthand("4x A100-40GB") == (4, "A100-40GB")
    with pytest.raises(ValueError):
        parse_gpu_shorthand("H100")


# --------------------------------------------------------------------------- arbitrary devices


def test_seed_cats_example() -> None:
    inventory = parse_inventory((EXAMPLES / "cats.yaml").read_text(), "worker-1")
    assert inventory.drivers == ("resource-driver.example.com",)
    assert [d.name for d in inventory.devices] == [f"kitten-{i}" for i in range(6)]
    assert inventory.devices[0].attributes == {"color": {"string": "white"},
                                               "size": {"string": "small"}}
    seed = (Path(__file__).resolve().parents[3] / "manifests" / "examples" / "seed-static-slice"
            / "resourceslice.yaml")
    import yaml

    from kdra.dra.models.conversion import to_v1

    published = to_v1(yaml.safe_load(seed.read_text()))["spec"]["devices"]
    built = build_slices(node="worker-1", driver="resource-driver.example.com",
                         devices=inventory.devices, generation=0)[0]["spec"]["devices"]
    assert built == published


def test_all_examples_parse() -> None:
    for file in EXAMPLES.glob("*.yaml"):
        assert parse_inventory(file.read_text(), "node-1", source=file.name).devices


def test_attribute_kinds_and_counted_devices() -> None:
    inventory = parse_inventory("""
devices:
- name: nic
  driver: net.example.com
  count: 3
  attributes:
    speed: 100
    rdma: true
    model: cx7
    firmware: {version: 28.39.1002}
    example.com/zone: a
  capacity: {bandwidth: 100G}
""", "n")
    assert [d.name for d in inventory.devices] == ["nic-0", "nic-1", "nic-2"]
    assert inventory.devices[0].attributes == {
        "speed": {"int": 100}, "rdma": {"bool": True}, "model": {"string": "cx7"},
        "firmware": {"version": "28.39.1002"}, "example.com/zone": {"string": "a"}}
    assert inventory.devices[0].capacity == {"bandwidth": "100G"}


def test_empty_inventory() -> None:
    assert parse_inventory("", "n") == Inventory()
    assert parse_inventory("# nothing\n", "n") == Inventory()


BAD = [
    ("gpus: ['8 x H100']", 1, "gpus[0]", "unknown GPU profile 'H100'"),
    ("gpus:\n- profile: H100-80GB\n  count: 0\n", 3, "gpus[0].count", "whole number"),
    ("gpus:\n- profile: H100-80GB\n  colour: red\n", 3, "gpus[0].colour", "unknown field"),
    ("gpus:\n- profile: T4-16GB\n  driverVersion: 12.4\n", 3, "gpus[0].driverVersion",
     "strict semantic version"),
    ("devices:\n- name: Kitten\n", 2, "devices[0].name", "DNS label"),
    ("devices:\n- name: a\n  attributes:\n    bad-name: 1\n", 4, "devices[0].attributes.bad-name",
     "attribute name"),
    ("devices:\n- name: a\n  attributes:\n    x: {version: '1.2'}\n", 4,
     "devices[0].attributes.x.version", "strict semantic version"),
    ("devices:\n- name: a\n  attributes:\n    x: " + "y" * 65 + "\n", 4,
     "devices[0].attributes.x", "at most 64"),
    ("devices:\n- name: a\n  capacity:\n    memory: lots\n", 4, "devices[0].capacity.memory",
     "not a quantity"),
    ("devices:\n- name: a\n- name: b\n- name: a\n", 4, "devices[2]", "defined twice"),
    ("devices:\n- name: a\n  driver: Not_A_Driver\n", 3, "devices[0].driver", "driver name"),
    ("nodes: []\n", 1, "nodes", "unknown field"),
    ("gpus: [\n", 2, "<root>", "not valid YAML"),
    ("- 8 x H100-80GB\n", 1, "<root>", "must be a mapping"),
    ("devices:\n- name: a\n  attributes: {" + ", ".join(f"a{i}: 1" for i in range(33)) + "}\n",
     2, "devices[0]", "at most 32"),
]


@pytest.mark.parametrize(("text", "line", "field", "message"), BAD)
def test_malformed_inventory_names_line_and_field(text: str, line: int, field: str,
                                                  message: str) -> None:
    with pytest.raises(InvalidObject) as info:
        parse_inventory(text, "n", source="fake.yaml")
    error = info.value
    assert error.field == field
    assert error.obj == f"fake.yaml line {line}"
    assert message in error.message
    assert str(error).startswith(f"fake.yaml line {line}: {field}: ")


# --------------------------------------------------------------------------- slices


def widgets(count: int, driver: str = "widget.example.com") -> tuple[InventoryDevice, ...]:
    return parse_inventory(f"devices: [{{name: w, count: {count}, driver: {driver}}}]",
                           "n").devices


def test_300_devices_make_3_slices() -> None:
    slices = build_slices(node="node-1", driver="widget.example.com", devices=widgets(300),
                          generation=4, owner={"name": "node-1", "uid": "uid-1"})
    assert [s["metadata"]["name"] for s in slices] == [
        "node-1-widget-example-com-0", "node-1-widget-example-com-1",
        "node-1-widget-example-com-2"]
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 44]
    for obj in slices:
        assert obj["spec"]["pool"] == {"name": "node-1", "generation": 4,
                                       "resourceSliceCount": 3}
        assert obj["spec"]["nodeName"] == "node-1"
        assert obj["metadata"]["ownerReferences"] == [{
            "apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "uid-1",
            "controller": True}]
        parse_slice(obj)


def test_every_device_is_published_tainted_ones_with_their_taints() -> None:
    """Issue 25: an unhealthy device is published with the agent's taint (it used to be left
    out); the health loop, not the inventory, decides the taint."""
    inventory = parse_inventory("gpus: [{profile: L4-24GB, count: 2, unhealthy: [0, 1]}]", "n")
    taint = Taint("gpu.kdra.dev/unhealthy", "XID-48", "NoSchedule", "2026-12-02T08:00:00Z")
    devices = (replace(inventory.devices[0], taints=(taint,)), inventory.devices[1])
    slices = build_slices(node="n", driver="gpu.kdra.dev", devices=devices, generation=0)
    published = slices[0]["spec"]["devices"]
    assert [d["name"] for d in published] == ["gpu-0", "gpu-1"]
    assert published[0]["taints"] == [{"key": "gpu.kdra.dev/unhealthy", "value": "XID-48",
                                       "effect": "NoSchedule",
                                       "timeAdded": "2026-12-02T08:00:00Z"}]
    assert "taints" not in published[1]
    parse_slice(slices[0])


def test_a_pool_with_taints_has_at_most_64_devices_per_slice() -> None:
    devices = list(widgets(100))
    assert len(build_slices(node="n", driver="widget.example.com", devices=devices,
                            generation=0)) == 1
    devices[7] = replace(devices[7], taints=(Taint("k", "", "NoExecute"),))
    slices = build_slices(node="n", driver="widget.example.com", devices=devices,
                          generation=0)
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 36]
    for obj in slices:
        parse_slice(obj)


def test_no_devices_is_one_empty_slice() -> None:
    slices = build_slices(node="n", driver="gpu.kdra.dev", devices=(), generation=0)
    assert len(slices) == 1 and slices[0]["spec"]["devices"] == []
    assert slices[0]["spec"]["pool"]["resourceSliceCount"] == 1


def test_long_names_stay_valid_and_distinct() -> None:
    node = "n" * 250
    names = {slice_name(node, "gpu.kdra.dev", i) for i in range(3)}
    assert len(names) == 3 and all(len(n) <= 253 for n in names)
    assert slice_name("node-1", "gpu.kdra.dev", 0) == "node-1-gpu-kdra-dev-0"
    assert lease_name("node-1", "gpu.kdra.dev") == "kdra-agent-node-1-gpu-kdra-dev"
    assert len(lease_name(node, "gpu.kdra.dev")) <= 253


def test_a_shared_lease_is_named_after_its_nodes_in_any_order() -> None:
    name = shared_lease_name(["b", "a"], "gpu.kdra.dev")
    assert name == shared_lease_name(["a", "b"], "gpu.kdra.dev")
    assert name != shared_lease_name(["a", "c"], "gpu.kdra.dev")
    assert name.startswith("kdra-agent-nodes-") and name.endswith("-gpu-kdra-dev")


@pytest.mark.parametrize(("annotations", "expected"), [
    ({"resource.kdra.dev/node": "n1", "resource.kdra.dev/driver": "d"}, ("d", ("n1",))),
    ({"resource.kdra.dev/nodes": "n1,n2,", "resource.kdra.dev/driver": "d"},
     ("d", ("n1", "n2"))),
    ({"resource.kdra.dev/node": "n1"}, (None, ())),
    ({"resource.kdra.dev/nodes": "", "resource.kdra.dev/driver": "d"}, (None, ())),
    ({}, (None, ())),
])
def test_lease_pools(annotations: dict[str, str],
                     expected: tuple[str | None, tuple[str, ...]]) -> None:
    assert lease_pools({"metadata": {"annotations": annotations}}) == expected


def published(devices: tuple[InventoryDevice, ...], generation: int,
              owner: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Slices as the API server returns them (with server-set metadata)."""
    slices = build_slices(node="n", driver="widget.example.com", devices=devices,
                          generation=generation, owner=owner)
    for index, obj in enumerate(slices):
        obj["metadata"].update(uid=f"uid-{index}", resourceVersion=str(100 + index),
                               creationTimestamp="2024-01-01T00:00:00Z")
    return slices


def test_first_publication_starts_at_min_generation() -> None:
    plan = plan_publication(node="n", driver="widget.example.com", devices=widgets(3),
                            published=[], owner=None, min_generation=7)
    assert plan.changed and plan.generation == 7 and len(plan.slices) == 1


def test_unchanged_pool_is_not_republished() -> None:
    devices = widgets(200)
    owner = {"name": "n", "uid": "u"}
    plan = plan_publication(node="n", driver="widget.example.com", devices=devices,
                            published=published(devices, 3, owner), owner=owner)
    assert not plan.changed and plan.generation == 3 and plan.slices == ()


@pytest.mark.parametrize("change", ["device added", "device removed", "attribute changed",
                                    "taint added", "owner changed"])
def test_any_change_bumps_the_generation(change: str) -> None:
    devices = widgets(130)
    owner = {"name": "n", "uid": "u"}
    current = published(devices, 3, owner)
    new = list(devices)
    if change == "device added":
        new.append(InventoryDevice("widget.example.com", "extra"))
    elif change == "device removed":
        new = new[:100]
    elif change == "attribute changed":
        new[5] = InventoryDevice("widget.example.com", new[5].name, {"x": {"int": 1}})
    elif change == "taint added":  # 130 devices, one tainted: 64 per slice, three slices
        new[129] = replace(new[129], taints=(Taint("k", "v", "NoSchedule"),))
    else:
        owner = {"name": "n", "uid": "recreated"}
    plan = plan_publication(node="n", driver="widget.example.com", devices=new,
                            published=current, owner=owner)
    assert plan.changed and plan.generation == 4
    assert {s["spec"]["pool"]["generation"] for s in plan.slices} == {4}
    expected_slices = {"device removed": 1, "taint added": 3}.get(change, 2)
    assert len(plan.slices) == expected_slices
    assert plan.stale == (("n-widget-example-com-1",) if expected_slices == 1 else ())


def test_mixed_generations_are_republished() -> None:
    devices = widgets(200)
    current = published(devices, 3)
    current[1]["spec"]["pool"]["generation"] = 2  # an interrupted update
    plan = plan_publication(node="n", driver="widget.example.com", devices=devices,
                            published=current, owner=None)
    assert plan.changed and plan.generation == 4


# --------------------------------------------------------------------------- simulated nodes


def test_expand_names() -> None:
    assert expand_names("node-{0..2}") == ["node-0", "node-1", "node-2"]
    assert expand_names("a,b node-{08..10}") == ["a", "b", "node-08", "node-09", "node-10"]
    assert len(expand_names("sim-{0..99}")) == 100
    with pytest.raises(ValueError, match="duplicate"):
        expand_names("a a")
    with pytest.raises(ValueError, match="not a node name"):
        expand_names("Bad_Name")
