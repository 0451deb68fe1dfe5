"""`make demo` (the README's first command: `python -m kdra_devenv demo`) runs to its table,
then waits; SIGTERM stops it and everything it started (as Ctrl-C does)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kdra_devenv.process import spawn

READY = "Ctrl-C stops everything."


def processes_under(directory: Path) -> list[str]:
    """Command lines of live processes that name ``directory`` (the demo's children do)."""
    found = subprocess.run(["pgrep", "-af", str(directory)], capture_output=True, text=True)
    return [line for line in found.stdout.splitlines() if "pgrep" not in line]


@pytest.mark.slow
def test_demo_prints_the_allocation_table_and_stops_everything_on_sigterm(
        tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    demo = spawn([sys.executable, "-m", "kdra_devenv", "demo", "--dir", str(workdir)],
                 run_dir=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert demo.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 600
    try:
        for line in demo.stdout:
            lines.append(line)
            if line.strip() == READY or time.monotonic() > deadline:
                break
        output = "".join(lines)
        print(output[-3000:])
        assert READY in output
        assert processes_under(workdir), "the demo's control plane is not running"
        demo.send_signal(signal.SIGTERM)
        code = demo.wait(timeout=120)
    finally:
        if demo.poll() is None:
            demo.kill()
    table = output.split("==> waiting for the pods to be bound", 1)[1]
    assert re.search(r"^pod-with-cats\s+worker-1\s+kitten-0,kitten-1$", table, re.M), table
    for pod in ("train-0", "train-1", "train-2"):
        assert re.search(rf"^{pod}\s+gpu-node-\d\s+gpu-\d$", table, re.M), table
    assert re.search(r"^pair-0\s+gpu-node-\d\s+gpu-8,gpu-9$", table, re.M), table
    assert "metrics: http://127.0.0.1:" in table
    assert code == 128 + signal.SIGTERM
    left = processes_under(workdir)
    assert not left, "still running after the demo stopped:\n" + "\n".join(left)
