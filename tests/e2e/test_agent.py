"""The node agent against a real API server, as a real process (kill -9 included)."""

from __future__ import annotations

import json
import os
import signal

from kdra.agent.core.gpu_profiles import fake_gpu_uuid
from kdra.kube.core.agent_leases import lease_pools
from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import (
    CLAIMS,
    EXAMPLES,
    GPU,
    SYSTEM_NAMESPACE,
    AgentFactory,
    allocate,
    create_claim,
    deallocate,
    device_status,
    generations,
    lease,
    ready_devices,
    slices_of,
    unique,
)
from tests.e2e.conftest import get_json
from tests.e2e.procs import wait_for

agents = agent_helpers.agents  # the fixture

H100S = (EXAMPLES / "gpus.yaml").read_text()


def widgets(count: int, color: str = "blue") -> str:
    return ("devices:\n- name: widget\n  driver: widget.example.com\n"
            f"  count: {count}\n  attributes: {{color: {color}}}\n")


def test_eight_h100s_publish_one_slice(control_plane: ControlPlane,
                                       agents: AgentFactory) -> None:
    node = unique("h100")
    agent = agents(node, H100S)
    (slice_,) = slices_of(control_plane, node)
    node_uid = get_json(control_plane, "node", node)["metadata"]["uid"]
    assert slice_["metadata"]["name"] == f"{node}-gpu-kdra-dev-0"
    assert slice_["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}]
    spec = slice_["spec"]
    assert spec["driver"] == GPU and spec["nodeName"] == node
    assert spec["pool"] == {"name": node, "generation": 0, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == [f"gpu-{i}" for i in range(8)]
    gpu = spec["devices"][5]  # published in v1: flat, capacities as {value}
    assert gpu["capacity"] == {"memory": {"value": "80Gi"}}
    assert gpu["attributes"]["uuid"] == {"string": fake_gpu_uuid(node, 5)}
    assert gpu["attributes"]["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert gpu["attributes"]["architecture"] == {"string": "Hopper"}
    assert gpu["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert gpu["attributes"]["driverVersion"] == {"version": "550.54.15"}
    assert gpu["attributes"]["index"] == {"int": 5}
    assert gpu["attributes"]["numaNode"] == {"int": 1}
    print("published slice:\n" + json.dumps(slice_, indent=2))

    heartbeat = lease(control_plane, node)
    assert heartbeat is not None
    assert heartbeat["metadata"]["labels"] == {"resource.kdra.dev/agent-lease": "true"}
    assert heartbeat["spec"]["leaseDurationSeconds"] == 10
    renewed = heartbeat["spec"]["renewTime"]
    wait_for(lambda: (lease(control_plane, node) or {}).get("spec", {}).get("renewTime")
             != renewed, timeout=30, what="a Lease renewal")
    node_obj = get_json(control_plane, "node", node)
    assert node_obj["status"]["capacity"]["pods"] == "110"
    assert agent.metric('kdra_agent_devices{health="healthy"}') == 8.0
    assert agent.metric("kdra_agent_slice_publishes_total") == 1.0

    agent.proc.stop()  # graceful: the Lease is released (expired now), the slices stay
    released = lease(control_plane, node)
    assert released is not None and released["spec"]["renewTime"] < renewed
    assert len(slices_of(control_plane, node)) == 1


def test_300_devices_three_slices_and_edits_bump_the_generation(
        control_plane: ControlPlane, agents: AgentFactory) -> None:
    node = unique("many")
    agent = agents(node, widgets(300))
    slices = slices_of(control_plane, node)
    assert [s["metadata"]["name"] for s in slices] == [
        f"{node}-widget-example-com-{i}" for i in range(3)]
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 44]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {3}
    assert generations(control_plane, node) == [0, 0, 0]

    agent.inventory.write_text(widgets(200, color="red"))  # picked up by mtime polling
    wait_for(lambda: generations(control_plane, node) == [1, 1], timeout=60,
             what="generation 1 in two slices, the third one gone")
    slices = slices_of(control_plane, node)
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
    assert slices[0]["spec"]["devices"][0]["attributes"]["color"] == {"string": "red"}


def test_sighup_rereads_the_inventory(control_plane: ControlPlane,
                                      agents: AgentFactory) -> None:
    node = unique("hup")
    agent = agents(node, "gpus: ['2 x L4-24GB']\n", "--inventory-poll", "3600")
    assert generations(control_plane, node) == [0]
    agent.inventory.write_text("gpus: [{profile: L4-24GB, count: 2, unhealthy: [1]}]\n")
    assert agent.proc.popen is not None
    os.kill(agent.proc.popen.pid, signal.SIGHUP)
    # Issue 25: the unhealthy device stays published and gets the health taint once the
    # health loop (every 2 s, independent of --inventory-poll) has debounced it.
    wait_for(lambda: generations(control_plane, node) == [1], timeout=60,
             what="generation 1 after SIGHUP")
    (slice_,) = slices_of(control_plane, node)
    assert [d["name"] for d in slice_["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert "taints" not in slice_["spec"]["devices"][0]
    (taint,) = slice_["spec"]["devices"][1]["taints"]
    assert (taint["key"], taint["effect"]) == ("gpu.kdra.dev/unhealthy", "NoSchedule")
    assert agent.metric('kdra_agent_devices{health="unhealthy"}') == 1.0
    assert agent.metric('kdra_device_health_transitions_total{to="degraded"}') == 1.0


def test_malformed_inventory_stops_the_agent(control_plane: ControlPlane,
                                             agents: AgentFactory) -> None:
    try:
        agents(unique("bad"), "gpus:\n- 8 x H100-80GB\n- 2 x Z9000\n")
    except RuntimeError as exc:
        assert "line 3: gpus[1]: unknown GPU profile 'Z9000'" in str(exc)
    else:
        raise AssertionError("the agent started with a malformed inventory")


def test_prepare_and_unprepare(control_plane: ControlPlane, agents: AgentFactory,
                               namespace: str) -> None:
    node = unique("prep")
    agent = agents(node, H100S)
    claim = create_claim(control_plane, namespace, "train")
    uid = claim["metadata"]["uid"]
    allocate(control_plane, namespace, "train", node, ["gpu-2", "gpu-5"])
    wait_for(lambda: ready_devices(control_plane, namespace, "train") ==
             {"gpu-2": "True", "gpu-5": "True"}, timeout=60, what="devices Ready")
    assert agent.cdi_files() == [f"kdra.dev-{uid}.json"]
    spec = json.loads((agent.cdi / f"kdra.dev-{uid}.json").read_text())
    print("CDI spec:\n" + json.dumps(spec, indent=2))
    uuids = [fake_gpu_uuid(node, 2), fake_gpu_uuid(node, 5)]
    assert spec["cdiVersion"] == "0.6.0" and spec["kind"] == "kdra.dev/gpu"
    assert [d["name"] for d in spec["devices"]] == [f"{uid}-gpu-2", f"{uid}-gpu-5"]
    assert spec["devices"][1]["containerEdits"]["env"] == [
        f"KDRA_DEVICE_GPU_5={GPU}/{node}/gpu-5", f"KDRA_DEVICE_GPU_5_CLAIM={namespace}/train",
        f"KDRA_DEVICE_GPU_5_UUID={uuids[1]}"]
    # the list variables are the NRI plugin's, per container: no spec sets them
    assert spec["containerEdits"]["env"] == [f"KDRA_NODE_NAME={node}"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [  # fake GPUs: /dev/null's
        {"path": "/dev/kdra/gpu-2", "type": "c", "major": 1, "minor": 3, "fileMode": 0o666}]
    entry = device_status(control_plane, namespace, "train")[0]
    assert entry["driver"] == GPU and entry["pool"] == node and entry["device"] == "gpu-2"
    assert entry["conditions"][0]["reason"] == "Prepared"
    assert entry["data"] == {"uuid": uuids[0], "productName": "NVIDIA H100 80GB HBM3",
                             "cdiDeviceIDs": [f"kdra.dev/gpu={uid}-gpu-2"]}
    assert agent.checkpoint()[uid]["state"] == "prepared"
    wait_for(lambda: agent.metric("kdra_agent_prepared_claims") == 1.0, timeout=10,
             what="prepared claims gauge")

    deallocate(control_plane, namespace, "train")
    wait_for(lambda: not agent.cdi_files() and not device_status(
        control_plane, namespace, "train"), timeout=60, what="unprepare")
    assert agent.checkpoint() == {}

    # A deleted claim is unprepared too; a device the node lacks is reported, not prepared.
    create_claim(control_plane, namespace, "gone")
    allocate(control_plane, namespace, "gone", node, ["gpu-0"])
    wait_for(lambda: len(agent.cdi_files()) == 1, timeout=60, what="second claim prepared")
    control_plane.kubectl("delete", CLAIMS, "gone", "-n", namespace)
    wait_for(lambda: not agent.cdi_files() and agent.checkpoint() == {}, timeout=60,
             what="deleted claim unprepared")
    create_claim(control_plane, namespace, "nope")
    allocate(control_plane, namespace, "nope", node, ["gpu-42"])
    wait_for(lambda: ready_devices(control_plane, namespace, "nope") == {"gpu-42": "False"},
             timeout=60, what="Ready=False")
    assert device_status(control_plane, namespace, "nope")[0]["conditions"][0]["reason"] == \
        "DeviceNotFound"
    assert not agent.cdi_files()


def test_restart_wipes_slices_and_keeps_prepared_claims(
        control_plane: ControlPlane, agents: AgentFactory, namespace: str) -> None:
    node = unique("restart")
    agent = agents(node, H100S)
    claim = create_claim(control_plane, namespace, "kept")
    allocate(control_plane, namespace, "kept", node, ["gpu-1"])
    wait_for(lambda: ready_devices(control_plane, namespace, "kept") == {"gpu-1": "True"},
             timeout=60, what="prepared")
    before = slices_of(control_plane, node)
    spec_file = agent.cdi / f"kdra.dev-{claim['metadata']['uid']}.json"
    content = spec_file.read_text()

    agent.proc.kill()  # crash
    agent.proc.start(timeout=90)
    after = slices_of(control_plane, node)
    assert [s["metadata"]["uid"] for s in after] != [s["metadata"]["uid"] for s in before]
    assert [s["spec"]["pool"]["generation"] for s in after] == [1]  # newer than the wiped one
    assert after[0]["spec"]["devices"] == before[0]["spec"]["devices"]
    assert agent.cdi_files() == [spec_file.name] and spec_file.read_text() == content
    assert list(agent.checkpoint()) == [claim["metadata"]["uid"]]
    assert ready_devices(control_plane, namespace, "kept") == {"gpu-1": "True"}
    log = agent.proc.tail(200)
    assert (f"deleted ResourceSlice {before[0]['metadata']['name']} (driver gpu.kdra.dev, "
            f"pool {node}, generation 0) at start-up") in log
    assert "unprepared claim" not in log  # the restart did not touch the prepared claim


def test_kill_during_prepare_then_restart(control_plane: ControlPlane, agents: AgentFactory,
                                          namespace: str) -> None:
    node = unique("crash")
    agent = agents(node, H100S, env={"KDRA_AGENT_PAUSE_AFTER": "cdi-written"})
    claim = create_claim(control_plane, namespace, "crashy")
    uid = claim["metadata"]["uid"]
    allocate(control_plane, namespace, "crashy", node, ["gpu-3"])
    wait_for(lambda: "paused after cdi-written" in agent.proc.tail(50), timeout=60,
             what="the pause point")
    agent.proc.kill()
    assert uid not in agent.checkpoint()  # the CDI file is written first: an orphan now
    assert agent.cdi_files() == [f"kdra.dev-{uid}.json"]
    assert device_status(control_plane, namespace, "crashy") == []

    agent.proc.env = {}
    agent.proc.start(timeout=90)
    wait_for(lambda: ready_devices(control_plane, namespace, "crashy") == {"gpu-3": "True"},
             timeout=60, what="prepared after the restart")
    assert agent.checkpoint()[uid]["state"] == "prepared"
    assert agent.cdi_files() == [f"kdra.dev-{uid}.json"]
    log = agent.proc.tail(200)
    assert "removed orphaned CDI spec" in log  # the restart cleaned up, then prepared again
    assert "unprepared claim" not in log

    # Killed while paused again, but the claim is deallocated before the agent returns.
    create_claim(control_plane, namespace, "second")
    agent.proc.kill()
    agent.proc.env = {"KDRA_AGENT_PAUSE_AFTER": "cdi-written"}
    agent.proc.start(timeout=90)
    allocate(control_plane, namespace, "second", node, ["gpu-4"])
    wait_for(lambda: agent.proc.tail(50).count("paused after cdi-written") >= 2, timeout=60,
             what="the second pause")
    agent.proc.kill()
    assert len(agent.cdi_files()) == 2
    deallocate(control_plane, namespace, "second")
    agent.proc.env = {}
    agent.proc.start(timeout=90)
    wait_for(lambda: agent.cdi_files() == [f"kdra.dev-{uid}.json"], timeout=60,
             what="the interrupted prepare undone")
    assert list(agent.checkpoint()) == [uid]
    assert ready_devices(control_plane, namespace, "crashy") == {"gpu-3": "True"}


def test_seed_cats_example(control_plane: ControlPlane, agents: AgentFactory) -> None:
    node = unique("cats")
    agents(node, (EXAMPLES / "cats.yaml").read_text())
    (slice_,) = slices_of(control_plane, node)
    assert slice_["spec"]["driver"] == "resource-driver.example.com"
    assert slice_["spec"]["devices"][1] == {"name": "kitten-1", "attributes": {
        "color": {"string": "black"}, "size": {"string": "large"}}}
    assert lease(control_plane, node, "resource-driver.example.com") is not None
    assert lease(control_plane, node) is None  # no GPUs in this inventory


def test_simulated_nodes_resync_restores_a_deleted_slice(control_plane: ControlPlane,
                                                         agents: AgentFactory) -> None:
    """The periodic resync of a many-node agent reads every slice with one LIST and writes
    again only what is missing."""
    prefix = unique("resync")
    agent = agents(prefix, "gpus: ['2 x A100-40GB']\n", "--simulate-nodes",
                   f"{prefix}-{{0..2}}", "--resync-period", "1")
    (gone,) = slices_of(control_plane, f"{prefix}-1")
    (kept,) = slices_of(control_plane, f"{prefix}-2")
    control_plane.kubectl("delete", agent_helpers.SLICES, gone["metadata"]["name"])
    wait_for(lambda: len(slices_of(control_plane, f"{prefix}-1")) == 1, timeout=30,
             what="the deleted slice published again by the resync")
    (again,) = slices_of(control_plane, f"{prefix}-1")
    assert again["metadata"]["uid"] != gone["metadata"]["uid"]
    assert again["spec"]["devices"] == gone["spec"]["devices"]
    (still,) = slices_of(control_plane, f"{prefix}-2")
    assert still["metadata"]["resourceVersion"] == kept["metadata"]["resourceVersion"]
    assert "published 1 slice(s)" in agent.proc.tail(100)
    for index in range(3):
        control_plane.kubectl("delete", "node", f"{prefix}-{index}", "--wait=false",
                              check=False)


def test_simulated_nodes(control_plane: ControlPlane, agents: AgentFactory) -> None:
    prefix = unique("sim")
    agent = agents(prefix, "gpus: ['2 x A100-40GB']\n", "--simulate-nodes",
                   f"{prefix}-{{0..4}}")
    for index in range(5):
        node = f"{prefix}-{index}"
        assert get_json(control_plane, "node", node)["status"]["conditions"][0]["type"] == \
            "Ready"
        (slice_,) = slices_of(control_plane, node)
        assert slice_["spec"]["pool"]["name"] == node
        assert slice_["spec"]["devices"][0]["attributes"]["uuid"] == \
            {"string": fake_gpu_uuid(node, 0)}
        assert lease(control_plane, node) is not None
    assert agent.metric('kdra_agent_devices{health="healthy"}') == 10.0
    # One Lease for the five nodes (one write per renewal, not five), none per node.
    leases = get_json(control_plane, "lease", "-n", SYSTEM_NAMESPACE)["items"]
    assert not [item for item in leases
                if item["metadata"]["name"].startswith(f"kdra-agent-{prefix}-")]
    shared = [item for item in leases
              if lease_pools(item) == (GPU, tuple(f"{prefix}-{i}" for i in range(5)))]
    assert len(shared) == 1
    assert shared[0]["metadata"]["name"].startswith("kdra-agent-nodes-")
    for index in range(5):
        control_plane.kubectl("delete", "node", f"{prefix}-{index}", "--wait=false",
                              check=False)
