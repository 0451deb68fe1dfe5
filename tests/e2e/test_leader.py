"""Two operator replicas: exactly one leads (Lease election); the standby takes over."""

from __future__ import annotations

import json
import time
from pathlib import Path

from kdra_devenv.controlplane import ControlPlane
from tests.e2e.procs import KdraProcess, wait_for

ARGS = ["operator", "--health-port", "0", "--leader-elect", "true",
        "--leader-lease-duration", "6"]


def holder(plane: ControlPlane) -> str:
    result = plane.kubectl("get", "lease", "kdra-operator", "-n", "kdra-system", "-o", "json",
                           check=False)
    return json.loads(result.stdout)["spec"].get("holderIdentity", "") if result.stdout else ""


def test_one_leader_and_takeover(control_plane: ControlPlane, tmp_path: Path) -> None:
    control_plane.kubectl("create", "namespace", "kdra-system", check=False)
    first = KdraProcess([*ARGS, "--identity", "replica-a"], tmp_path / "a.log",
                        control_plane.kubeconfig, ready_line="kdra operator started").start()
    second = KdraProcess([*ARGS, "--identity", "replica-b"], tmp_path / "b.log",
                         control_plane.kubeconfig, ready_line="standing by").start()
    try:
        assert holder(control_plane) == "replica-a"
        time.sleep(8)  # longer than the lease: the leader keeps renewing, b keeps waiting
        assert holder(control_plane) == "replica-a"
        assert "kdra operator started" not in second.tail(200)

        first.kill()  # a crash: no release, b must wait for the lease to expire
        started = time.monotonic()
        wait_for(lambda: "kdra operator started" in second.tail(200), timeout=60,
                 what="the standby taking over")
        takeover = time.monotonic() - started
        print(f"takeover after kill -9: {takeover:.1f}s (lease 6s)")
        assert holder(control_plane) == "replica-b"

        third = KdraProcess([*ARGS, "--identity", "replica-c"], tmp_path / "c.log",
                            control_plane.kubeconfig, ready_line="standing by").start()
        second.stop()  # graceful: releases the Lease, c takes over without waiting it out
        started = time.monotonic()
        wait_for(lambda: "kdra operator started" in third.tail(200), timeout=30,
                 what="takeover after a graceful stop")
        print(f"takeover after SIGTERM: {time.monotonic() - started:.1f}s")
        assert holder(control_plane) == "replica-c"
        third.stop()
    finally:
        first.stop()
        second.stop()
