"""The real node leaves this (shared, root) host as it found it - the firewall, addresses and
links, mounts, cgroups, sysctls, /var/run/cdi and the other directories kubelet, containerd,
CNI and the agent write to, and processes (tests.node.hoststate):

- after the deployed clusters of tests/node/deployed and tests/node/native stopped (this file
  runs after those packages, whose fixtures are torn down first);
- after a start that failed half-way (kubelet started, never Ready);
- after ``python -m kdra_devenv node up`` was SIGKILLed with a pod running: something is left
  then (the test checks that it looks), and ``python -m kdra_devenv node down`` removes all of
  it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kdra_devenv.controlplane import binaries
from kdra_devenv.node import TOLERATE_ANNOTATION, Node, NodeError, control_plane
from kdra_devenv.process import spawn, terminate
from tests.node.conftest import require_node
from tests.node.hoststate import differences, snapshot


def _assert_as_found(before: dict[str, str]) -> None:
    changed = differences(before, snapshot())
    assert not changed, "\n".join(f"== {key}\n-- before:\n{old}\n-- after:\n{new}"
                                  for key, (old, new) in changed.items())


def test_the_host_is_as_found_after_the_deployed_clusters(host_before: dict[str, str]) -> None:
    _assert_as_found(host_before)


def test_the_host_is_as_found_after_a_failed_start(host_before: dict[str, str],
                                                   tmp_path: Path) -> None:
    require_node()
    plane = control_plane(tmp_path / "control-plane", binaries()).start()
    try:
        node = Node(plane, tmp_path / "node")
        with pytest.raises(NodeError, match="not Ready"):
            node.start(timeout=0.01)  # kubelet is started; it cannot be Ready this soon
        assert node.containerd is None and node.kubelet is None
    finally:
        plane.stop()
    _assert_as_found(host_before)


def test_node_down_cleans_up_after_a_killed_node(host_before: dict[str, str],
                                                 tmp_path: Path) -> None:
    require_node()
    up = spawn([sys.executable, "-m", "kdra_devenv", "node", "up", "--no-deploy", "--dir",
                tmp_path / "node"], run_dir=tmp_path, stdout=subprocess.PIPE,
               stderr=subprocess.STDOUT, text=True)
    try:
        assert up.stdout is not None
        kubeconfig = ""
        output = []
        for line in up.stdout:  # ends when the process does
            output.append(line)
            if line.startswith("export KUBECONFIG="):
                kubeconfig = line.strip().split("=", 1)[1]
                break
        assert kubeconfig, "".join(output)
        kubectl = [str(binaries() / "kubectl"), "--kubeconfig", kubeconfig]
        subprocess.run([*kubectl, "run", "sleeper", "--image=localhost/busybox:static",
                        "--image-pull-policy=Never", "--restart=Never",
                        f"--annotations={TOLERATE_ANNOTATION}=true", "--command", "--",
                        "sleep", "3600"], check=True, capture_output=True)
        deadline = time.monotonic() + 120
        while subprocess.run([*kubectl, "get", "pod", "sleeper", "-o",
                              "jsonpath={.status.phase}"], capture_output=True,
                             text=True).stdout != "Running":
            assert time.monotonic() < deadline, "the pod did not start"
            time.sleep(1)
        os.kill(up.pid, signal.SIGKILL)
        up.wait()
    finally:
        terminate(up)
    left = differences(host_before, snapshot())
    assert {"ip addr", "ip link", "mounts", "cgroups"} <= set(left), sorted(left)

    down = subprocess.run([sys.executable, "-m", "kdra_devenv", "node", "down"],
                          capture_output=True, text=True, timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    _assert_as_found(host_before)
