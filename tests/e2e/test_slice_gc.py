"""The operator's slice garbage collector, with the operator and node agents as processes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import (
    EXAMPLES,
    GPU,
    SLICES,
    AgentFactory,
    generations,
    slices_of,
    unique,
)
from tests.e2e.conftest import get_json
from tests.e2e.procs import KdraProcess, wait_for

agents = agent_helpers.agents  # the fixture

GRACE = 5
LEASE_DURATION = 3


@pytest.fixture
def gc_operator(control_plane: ControlPlane, tmp_path: Path,
                request: pytest.FixtureRequest) -> Iterator[KdraProcess]:
    """The operator with a short slice GC grace period."""
    proc = KdraProcess(["operator", "--health-port", "0", "--webhook-port", "0",
                        "--slice-gc-grace", str(GRACE)], tmp_path / "operator.log",
                       control_plane.kubeconfig, ready_line="kdra operator started")
    proc.start(timeout=120)
    yield proc
    proc.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"===== operator log =====\n{proc.tail(200)}")


def deletions(operator: KdraProcess, reason: str) -> float:
    for line in operator.metrics().splitlines():
        if line.startswith(f'kdra_slice_gc_deletions_total{{reason="{reason}"}} '):
            return float(line.split()[-1])
    return 0.0


def create_node(plane: ControlPlane, name: str) -> None:
    plane.kubectl("create", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))


def slice_body(name: str, *, node: str, pool: str, generation: int, count: int,
               driver: str = "other.example.com", devices: int = 1) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": pool, "generation": generation,
                              "resourceSliceCount": count},
                     "devices": [{"name": f"{name}-dev-{i}", "basic": {}}
                                 for i in range(devices)]}}


def apply(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    plane.kubectl("create", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


def exists(plane: ControlPlane, name: str) -> bool:
    return plane.kubectl("get", SLICES, name, check=False).returncode == 0


def test_slices_of_a_deleted_node_are_collected(control_plane: ControlPlane,
                                                gc_operator: KdraProcess) -> None:
    node = unique("gone")
    create_node(control_plane, node)
    # No owner reference: only kdra's collector can delete these.
    apply(control_plane,
          slice_body(f"{node}-a", node=node, pool=node, generation=0, count=2),
          slice_body(f"{node}-b", node=node, pool=node, generation=0, count=2))
    time.sleep(2)
    assert exists(control_plane, f"{node}-a")  # the node exists: nothing to collect
    before = deletions(gc_operator, "node-gone")
    control_plane.kubectl("delete", "node", node)
    wait_for(lambda: not slices_of(control_plane, node), timeout=60,
             what="the deleted node's slices collected")
    assert deletions(gc_operator, "node-gone") == before + 2
    assert f"deleted ResourceSlice {node}-a" in gc_operator.tail(100)
    assert f"node-gone: node {node} no longer exists" in gc_operator.tail(100)


def test_old_generation_is_collected_once_the_new_one_is_complete(
        control_plane: ControlPlane, gc_operator: KdraProcess) -> None:
    node = unique("gens")
    create_node(control_plane, node)
    try:
        apply(control_plane,
              slice_body(f"{node}-g0-a", node=node, pool=node, generation=0, count=2),
              slice_body(f"{node}-g0-b", node=node, pool=node, generation=0, count=2),
              slice_body(f"{node}-g1-a", node=node, pool=node, generation=1, count=2))
        time.sleep(3)  # generation 1 is incomplete (1 of 2 slices): generation 0 stays
        assert generations(control_plane, node) == [0, 0, 1]
        before = deletions(gc_operator, "old-generation")
        apply(control_plane,
              slice_body(f"{node}-g1-b", node=node, pool=node, generation=1, count=2))
        wait_for(lambda: generations(control_plane, node) == [1, 1], timeout=60,
                 what="generation 0 collected")
        assert deletions(gc_operator, "old-generation") == before + 2
    finally:
        control_plane.kubectl("delete", "node", node, check=False)


def test_dead_agent_slices_are_collected_after_the_grace_period(
        control_plane: ControlPlane, gc_operator: KdraProcess, agents: AgentFactory) -> None:
    node = unique("dead")
    agent = agents(node, (EXAMPLES / "gpus.yaml").read_text(),
                   lease_duration=LEASE_DURATION)
    agent.inventory.write_text("gpus: ['4 x H100-80GB']\n")
    wait_for(lambda: generations(control_plane, node) == [1], timeout=60,
             what="generation 1")
    # A leftover of an older generation in the live agent's pool: not the collector's to
    # delete while the agent lives.
    stray = f"{node}-stray"
    apply(control_plane, slice_body(stray, node=node, pool=node, generation=0, count=1,
                                    driver=GPU))
    time.sleep(GRACE + 2)
    assert exists(control_plane, stray)
    assert len(slices_of(control_plane, node)) == 2
    before = deletions(gc_operator, "lease-expired")

    agent.proc.kill()
    killed = time.monotonic()
    wait_for(lambda: not slices_of(control_plane, node), timeout=90,
             what="the dead agent's slices collected")
    elapsed = time.monotonic() - killed
    print(f"agent killed -> slices deleted after {elapsed:.1f}s "
          f"(lease {LEASE_DURATION}s + grace {GRACE}s)")
    assert elapsed >= GRACE  # never before the grace period
    assert deletions(gc_operator, "lease-expired") == before + 2
    assert "lease-expired: the agent of node" in gc_operator.tail(100)

    agent.proc.start(timeout=90)  # the agent comes back: republished, and left alone
    assert len(slices_of(control_plane, node)) == 1
    time.sleep(GRACE + 2)
    assert len(slices_of(control_plane, node)) == 1
    lease = get_json(control_plane, "lease", f"kdra-agent-{node}-gpu-kdra-dev",
                     "-n", "kdra-system")
    assert lease["spec"]["leaseTransitions"] >= 1  # a new holder took it over
