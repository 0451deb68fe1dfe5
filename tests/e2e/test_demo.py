"""`kdra demo` (the README's first command) runs to its table, non-interactively."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_prints_the_allocation_table(tmp_path: object) -> None:
    result = subprocess.run([sys.executable, "-m", "kdra", "demo", "--no-wait"],
                            capture_output=True, text=True, timeout=600)
    print(result.stdout[-3000:], result.stderr[-3000:])
    assert result.returncode == 0
    table = result.stdout.split("==> waiting for the pods to be bound", 1)[1]
    assert re.search(r"^pod-with-cats\s+worker-1\s+kitten-0,kitten-1$", table, re.M), table
    for pod in ("train-0", "train-1", "train-2"):
        assert re.search(rf"^{pod}\s+gpu-node-\d\s+gpu-\d$", table, re.M), table
    assert re.search(r"^pair-0\s+gpu-node-\d\s+gpu-8,gpu-9$", table, re.M), table
    assert "metrics: http://127.0.0.1:" in table
