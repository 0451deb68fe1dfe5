"""`python -m kdra_devenv demo` as a fixture: started as a user starts it (``make demo``), kept
running for a module's tests, stopped with SIGTERM (as Ctrl-C) at the end — one demo per module
that needs one (tests/e2e/test_observe.py, tests/e2e/test_guide_examples.py).

Invariants:
- The demo is the real one (its own etcd, kube-apiserver, kube-controller-manager, operator
  and agents, the flavour the caller asks for); nothing here changes what it does.
- Every process it started is stopped when the generator ends, whatever the tests did.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kdra_devenv.controlplane import binaries
from kdra_devenv.process import spawn, terminate

READY = "Ctrl-C stops everything."


@dataclass
class Demo:
    process: subprocess.Popen[str]
    output: str
    kubeconfig: Path
    operator_metrics: str
    agent_metrics: list[str]
    started: float = field(default_factory=time.time)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                env: dict[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """The demo's kubectl, with the plugin kubectl-kdra (this venv's) on PATH."""
        environment = {**os.environ, "KUBECONFIG": str(self.kubeconfig),
                       "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                               f"{os.environ.get('PATH', '')}", **(env or {})}
        result = subprocess.run([str(binaries(progress=False) / "kubectl"), *args],
                                input=input, capture_output=True, text=True, env=environment,
                                timeout=120, cwd=cwd)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)


def running_demo(run_dir: Path, *flags: str, timeout: float = 600) -> Iterator[Demo]:
    """Start the demo in ``run_dir`` with ``flags`` (e.g. ``--flavour kdra``), yield it once it
    printed its KUBECONFIG, stop it afterwards (SIGTERM: it stops what it started)."""
    workdir = run_dir / "demo"
    process = spawn([sys.executable, "-m", "kdra_devenv", "demo", "--dir", str(workdir),
                     *flags],
                    run_dir=run_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + timeout
        for line in process.stdout:
            lines.append(line)
            if line.strip() == READY or time.monotonic() > deadline:
                break
        output = "".join(lines)
        assert READY in output, output[-3000:]
        kubeconfig = re.search(r"^export KUBECONFIG=(\S+)$", output, re.M)
        urls = re.search(r"^metrics: (\S+) \(operator\), (.+) \(agents\)$", output, re.M)
        assert kubeconfig and urls, output[-3000:]
        yield Demo(process, output, Path(kubeconfig.group(1)), urls.group(1),
                   [url.strip() for url in urls.group(2).split(",")])
    finally:
        terminate(process, grace=120)  # SIGTERM: the demo stops what it started, as on Ctrl-C
