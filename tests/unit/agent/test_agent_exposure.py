"""The agent's NRI set-up: when the plugin runs, and the policy it reads the agent's state
through (claim cache + checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdra.agent.backends.registry import make_backends
from kdra.agent.core.checkpoint import ClaimEntry, ClaimRef
from kdra.agent.core.exposure import Adjustment, Refusal
from kdra.agent.core.nodeprep import Result, prepared_devices
from kdra.agent.exposure import make_nri_plugin
from kdra.agent.nri.messages import Container, PodSandbox
from kdra.agent.runner import AgentRunner
from kdra.agent.settings import AgentSettings

NODE = "node-1"
GPU = "gpu.kdra.dev"


def runner(tmp_path: Path, **settings: Any) -> AgentRunner:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("gpus: ['2 x H100-80GB']")
    agent_settings = AgentSettings(cdi_dir=str(tmp_path / "cdi"),
                                   state_dir=str(tmp_path / "state"),
                                   inventory=str(inventory), **settings)
    backends = make_backends(agent_settings, [NODE])
    made = AgentRunner(None, agent_settings, [NODE], backends)  # type: ignore[arg-type]
    made.nodes[NODE].inventory = backends.discover(NODE)
    return made


@pytest.mark.parametrize(("settings", "nodes", "runs"), [
    ({"nri_socket": "/run/nri.sock"}, ["n"], True),
    ({"nri_socket": ""}, ["n"], False),
    ({"nri_socket": "/run/nri.sock", "create_nodes": True}, ["n"], False),
    ({"nri_socket": "/run/nri.sock", "simulate_nodes": "n-{0..1}"}, ["n-0", "n-1"], False),
], ids=["real node", "off", "create-nodes", "simulated"])
def test_nri_runs_only_for_one_real_node(settings: dict[str, Any], nodes: list[str],
                                         runs: bool) -> None:
    plugin = make_nri_plugin(AgentSettings(**settings), nodes, policy=None)  # type: ignore[arg-type]
    assert (plugin is not None) == runs
    if plugin is not None:
        assert (plugin.socket_path, plugin.name, plugin.index) == ("/run/nri.sock", "kdra", "10")


def test_default_socket_is_containerds() -> None:
    assert AgentSettings().nri_socket == "/var/run/nri/nri.sock"


def test_policy_reads_the_runners_cache_and_checkpoint(tmp_path: Path) -> None:
    made = runner(tmp_path, nri_socket=str(tmp_path / "nri.sock"))
    assert made.nri is not None
    agent = made.nodes[NODE]
    claim = {"metadata": {"namespace": "ns", "name": "c", "uid": "u1", "resourceVersion": "5"},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "gpu", "driver": GPU, "pool": NODE, "device": "gpu-1"}]}},
                 "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}]}}
    made.claims[("ns", "c")] = claim
    pod = PodSandbox("sb", "p", "pod-1", "ns", {}, {"resource.kdra.dev/claims": json.dumps(
        [{"name": "gpu", "resourceClaimName": "c"}])})
    decision = made.nri.policy(pod, Container("id", "sb", "main"))
    assert isinstance(decision, Refusal) and decision.claim == "ns/c"  # not prepared yet
    ref = ClaimRef("u1", "ns", "c")
    devices = {(d.driver, d.name): d for d in agent.inventory.devices}
    prepared = prepared_devices(ref, [Result("gpu", GPU, NODE, "gpu-1")], devices,
                                backends=made.backends)
    agent.preparer.checkpoint = agent.preparer.checkpoint.with_entry(
        ClaimEntry(ref, "prepared", prepared, ("kdra.dev-u1.json",)))
    decision = made.nri.policy(pod, Container("id", "sb", "main"))
    assert isinstance(decision, Adjustment)
    assert decision.cdi_devices == ("kdra.dev/gpu=u1-gpu-1",)
    assert decision.devices == (f"{GPU}/{NODE}/gpu-1",)
    # another pod (other uid) with the same annotation gets nothing of it
    other = PodSandbox("sb2", "q", "pod-2", "ns", {}, pod.annotations)
    assert isinstance(made.nri.policy(other, Container("id", "sb2", "main")), Refusal)
