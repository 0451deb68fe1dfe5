"""kdra processes under test: the operator (and later the agent) as real OS processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kdra_devenv.controlplane import free_port
from kdra_devenv.process import spawn


class KdraProcess:
    """``python -m kdra <args>``, logging to ``log``; waits for ``ready_line`` in the log."""

    def __init__(self, args: list[str], log: Path, kubeconfig: Path,
                 ready_line: str, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.log = log
        self.kubeconfig = kubeconfig
        self.ready_line = ready_line
        self.env = env or {}
        self.popen: subprocess.Popen[bytes] | None = None
        self.metrics_port = free_port()

    def start(self, timeout: float = 60.0) -> KdraProcess:
        offset = self.log.stat().st_size if self.log.exists() else 0
        # Admission webhooks stay off unless a test turns them on (--webhook-port): the
        # configurations an operator leaves behind would make the shared control plane
        # refuse pods with claims once that operator stops. The API flavour is kdra's unless
        # a test asks for native (--flavour native): the session's API server serves
        # resource.k8s.io/v1, where the default would be native.
        env = {"KDRA_WEBHOOK_PORT": "0", "KDRA_FLAVOUR": "kdra", **os.environ,
               "KUBECONFIG": str(self.kubeconfig), **self.env}
        with self.log.open("ab") as out:
            self.popen = spawn(
                [sys.executable, "-m", "kdra", *self.args,
                 "--metrics-port", str(self.metrics_port)],
                run_dir=self.log.parent, stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"kdra {self.args[0]} exited: {self.tail()}")
            with self.log.open("rb") as fh:
                fh.seek(offset)
                if self.ready_line.encode() in fh.read():
                    return self
            time.sleep(0.2)
        raise RuntimeError(f"kdra {self.args[0]} not ready in {timeout}s: {self.tail()}")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.popen and self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def stop(self, timeout: float = 20.0) -> int | None:
        if not self.popen or self.popen.poll() is not None:
            return self.popen.returncode if self.popen else None
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "<no log>"

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as response:
            return str(response.read().decode())


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.25, what: str = "condition"):  # type: ignore[no-untyped-def]
    """Poll ``predicate`` until it returns a truthy value; return it, or fail after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")
