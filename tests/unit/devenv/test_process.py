"""kdra_devenv.process: children die with their parent; the sweep kills only orphans of a run.

Real processes (``sh``, ``sleep``), no cluster.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kdra_devenv.process import OWNER_ENV, children, is_running, spawn, sweep


def _wait_gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if is_running(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if is_running(p)]


# A parent that spawns a child through kdra_devenv.process, prints the child's PID and the
# PID of a grandchild the child starts in the background (not through spawn), then waits.
PARENT = """
import subprocess, sys, time
from pathlib import Path
from kdra_devenv.process import spawn
child = spawn(["sh", "-c", "sleep 600 & echo $!; wait"], run_dir=Path(sys.argv[1]),
              stdout=subprocess.PIPE, text=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(600)
"""


def _start_parent(run_dir: Path) -> tuple[subprocess.Popen[str], int, int]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(run_dir)],
                              stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child, grandchild = map(int, parent.stdout.readline().split())
    return parent, child, grandchild


def test_a_spawned_child_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    parent, child, grandchild = _start_parent(tmp_path / "run")
    assert is_running(child) and is_running(grandchild)
    assert child in children(parent.pid) and grandchild in children(parent.pid)
    parent.kill()
    parent.wait()
    assert _wait_gone([child]) == []
    # The grandchild was not started through spawn: only the sweep finds it.
    assert is_running(grandchild)
    marker = Path(f"/proc/{grandchild}/environ").read_bytes()
    assert f"{OWNER_ENV}={parent.pid}:".encode() in marker
    try:
        assert sweep(tmp_path / "elsewhere") == []  # another root: not touched
        assert is_running(grandchild)
        assert grandchild in sweep(tmp_path)
        assert _wait_gone([grandchild]) == []
    finally:
        if is_running(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_the_sweep_leaves_a_run_whose_owner_isis_running(tmp_path: Path) -> None:
    # This test process is the owner: it is alive, so its child is part of a run in progress.
    child = spawn(["sleep", "600"], run_dir=tmp_path / "run")
    try:
        assert child.pid not in sweep(tmp_path)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_child_spawned_from_a_worker_thread_outlives_the_thread(tmp_path: Path) -> None:
    # asyncio.to_thread(plane.start_component, ...) forks from a pool thread: the parent-death
    # signal must not fire when that thread ends, only when the process does.
    import threading

    started: list[subprocess.Popen[bytes]] = []
    worker = threading.Thread(target=lambda: started.append(
        spawn(["sleep", "600"], run_dir=tmp_path)))
    worker.start()
    worker.join()
    (child,) = started
    try:
        time.sleep(0.5)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
