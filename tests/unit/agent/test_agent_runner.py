"""The agent process's claim events: which versions are synced on which node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kdra.agent.backends.registry import make_backends
from kdra.agent.runner import AgentRunner
from kdra.agent.settings import AgentSettings

NODE = "node-1"
GPU = "gpu.kdra.dev"


def make_runner(tmp_path: Path) -> AgentRunner:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("gpus: ['2 x H100-80GB']")
    settings = AgentSettings(cdi_dir=str(tmp_path / "cdi"), state_dir=str(tmp_path / "state"),
                             inventory=str(inventory))
    backends = make_backends(settings, [NODE])
    runner = AgentRunner(None, settings, [NODE], backends)  # type: ignore[arg-type]
    runner.nodes[NODE].inventory = backends.discover(NODE)
    return runner


def claim(version: str, *, ready: bool = False) -> dict[str, Any]:
    status: dict[str, Any] = {
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": GPU, "pool": NODE, "device": "gpu-0"}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}]}
    if ready:
        status["devices"] = [{"driver": GPU, "pool": NODE, "device": "gpu-0",
                              "conditions": [{"type": "Ready", "status": "True"}]}]
    return {"metadata": {"namespace": "ns", "name": "c", "uid": "u1",
                         "resourceVersion": version}, "status": status}


def queued(runner: AgentRunner) -> int:
    count = len(runner.queue)
    runner.queue = type(runner.queue)("agent-claims", runner._sync)  # drained
    return count


def test_the_echo_of_our_own_status_write_is_cached_not_synced(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    runner._on_claim("MODIFIED", claim("10"))  # allocated to our node: prepare it
    assert queued(runner) == 1
    runner._wrote(claim("11", ready=True))  # the preparer reported Ready; server said rv 11
    runner._on_claim("MODIFIED", claim("11", ready=True))
    assert queued(runner) == 0
    assert runner.claims[("ns", "c")]["metadata"]["resourceVersion"] == "11"
    runner._on_claim("MODIFIED", claim("12"))  # someone else's write: synced
    assert queued(runner) == 1


def test_an_echo_recorded_after_its_event_does_not_hide_the_next_version(
        tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    runner._on_claim("MODIFIED", claim("10"))
    runner._on_claim("MODIFIED", claim("11", ready=True))  # the watch beat the write's answer
    runner._wrote(claim("11", ready=True))
    queued(runner)
    runner._on_claim("MODIFIED", claim("12"))
    assert queued(runner) == 1


def test_a_version_that_moved_only_other_metadata_is_cached_not_synced(
        tmp_path: Path) -> None:
    """The claim controller's finalizer removal before its DELETE (or a label, an
    annotation) changes nothing a preparer reads: no sync; a deletion, a new generation or
    a status change still is one."""
    runner = make_runner(tmp_path)
    runner._on_claim("MODIFIED", claim("10"))
    runner._wrote(claim("11", ready=True))
    queued(runner)
    released = claim("12", ready=True)
    released["metadata"]["labels"] = {"team": "a"}
    runner._on_claim("MODIFIED", released)
    assert queued(runner) == 0
    assert runner.claims[("ns", "c")]["metadata"]["resourceVersion"] == "12"
    deleting = claim("13", ready=True)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    runner._on_claim("MODIFIED", deleting)
    assert queued(runner) == 1
    changed = claim("14", ready=True)
    changed["metadata"]["generation"] = 2
    runner._on_claim("MODIFIED", changed)
    assert queued(runner) == 1
    runner._on_claim("DELETED", changed)
    assert queued(runner) == 1


def test_a_deletion_is_synced_even_at_the_version_we_wrote(tmp_path: Path) -> None:
    runner = make_runner(tmp_path)
    runner._on_claim("MODIFIED", claim("10"))
    runner._wrote(claim("11", ready=True))
    queued(runner)
    runner._on_claim("DELETED", claim("11", ready=True))
    assert queued(runner) == 1
    assert ("ns", "c") not in runner.claims
