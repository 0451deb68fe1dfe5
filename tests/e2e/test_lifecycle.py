"""Nothing outlives its parent: the control plane and kdra's processes end with whoever started
them, however it ends (SIGKILL included), and a background ``python -m kdra_devenv controlplane``
stops cleanly on SIGINT (even when the shell started it with SIGINT ignored), SIGTERM and SIGHUP.

Real binaries, real processes; PIDs are read from /proc.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kdra_devenv.process import children, is_running
from tests.e2e.conftest import ROOT

# What the e2e fixtures do (tests/e2e/conftest.py, tests/e2e/procs.py): a control plane and a
# kdra operator as real processes. Prints every PID it started, then waits to be killed.
FIXTURE = """
import sys, time
from pathlib import Path
from kdra_devenv.controlplane import ControlPlane, binaries
from tests.e2e.procs import KdraProcess
workdir = Path(sys.argv[1])
plane = ControlPlane(workdir, binaries()).start()
plane.kubectl("apply", "--server-side", "-k", "crds")
plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f", "crds")
operator = KdraProcess(["operator", "--health-port", "0"], workdir / "operator.log",
                       plane.kubeconfig, ready_line="kdra operator started").start()
print("ready", flush=True)
time.sleep(3600)
"""


def _survivors(pids: list[int], timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(is_running(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if is_running(p)]


def _names(pids: list[int]) -> set[str]:
    names = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
    return names


def _wait_for_line(proc: subprocess.Popen[str], text: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if text in line:
            return
    raise AssertionError(f"process exited ({proc.wait()}) before printing {text!r}")


def test_fixture_processes_die_when_the_test_run_is_killed(tmp_path: Path) -> None:
    run = subprocess.Popen([sys.executable, "-c", FIXTURE, str(tmp_path / "cp")], cwd=ROOT,
                           stdout=subprocess.PIPE, text=True)
    try:
        _wait_for_line(run, "ready")
        started = children(run.pid)
        assert {"etcd", "kube-apiserver", "kube-controller"} <= {n[:15] for n in
                                                                _names(started)}, started
        assert len(started) >= 4  # etcd, apiserver, controller-manager, operator
        run.kill()  # as a CI limit or `kill -9` would: no handler, no atexit
        run.wait()
        assert _survivors(started) == []
    finally:
        if run.poll() is None:
            run.kill()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what `cmd &` in a script does


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["sigint", "sigterm", "sighup"])
def test_background_controlplane_stops_everything_on_a_signal(tmp_path: Path,
                                                              signum: int) -> None:
    run = subprocess.Popen([sys.executable, "-m", "kdra_devenv", "controlplane", "--dir",
                            str(tmp_path / "cp")], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           preexec_fn=_ignore_sigint)
    try:
        _wait_for_line(run, "export KUBECONFIG=")
        started = children(run.pid)
        assert len(started) >= 3, started
        run.send_signal(signum)
        assert run.wait(60) == 128 + signum
        # Stopped by the control plane itself (SIGTERM, then SIGKILL after a grace period),
        # before it exited: nothing is left for the kernel to clean up.
        assert [p for p in started if is_running(p)] == []
    finally:
        if run.poll() is None:
            run.kill()
