"""hack/kind-up.sh without Docker: ``--print-config`` prints the kind cluster configuration a
flavour creates and the overlay it installs, then stops (no docker, kind or kubectl needed).
The default is the native flavour, whose cluster runs kube-controller-manager without its
resourceclaim-controller (kdra's claim controller replaces it); ``--flavour kdra`` keeps every
controller. The script itself (creating the cluster) needs Docker: README, "Not testable on
this machine". The overlays it installs are built and dry-run against a real API server by
tests/e2e/test_manifests_build.py."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "hack" / "kind-up.sh"


def printed(*args: str) -> tuple[str, dict[str, Any]]:
    """The overlay named in the first line, and the kind configuration that follows."""
    result = subprocess.run(["bash", str(SCRIPT), "--print-config", *args],
                            capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin"})  # no docker/kind/kubectl needed
    assert result.returncode == 0, result.stderr
    first, _, rest = result.stdout.partition("\n")
    assert first.startswith("# hack/kind-up.sh --flavour "), first
    return first.rsplit(" ", 1)[1], yaml.safe_load(rest)


def controllers(config: dict[str, Any]) -> dict[str, str]:
    """kube-controller-manager's --controllers by kubeadm config version the patches set."""
    found = {}
    for patch in config.get("kubeadmConfigPatches") or ():
        cluster = yaml.safe_load(patch)
        assert cluster["kind"] == "ClusterConfiguration"
        args = cluster["controllerManager"]["extraArgs"]
        if cluster["apiVersion"] == "kubeadm.k8s.io/v1beta3":  # a map
            found["v1beta3"] = args["controllers"]
        else:  # v1beta4: a list of name/value
            assert cluster["apiVersion"] == "kubeadm.k8s.io/v1beta4", cluster
            (arg,) = [a for a in args if a["name"] == "controllers"]
            found["v1beta4"] = arg["value"]
    return found


def test_the_default_is_the_native_flavour_without_kcms_claim_controller() -> None:
    overlay, config = printed()
    assert overlay == "manifests/overlays/native"
    assert (ROOT / overlay / "Kustomization").is_file()
    assert config["kind"] == "Cluster"
    # kind uses kubeadm's v1beta3 config before Kubernetes 1.36, v1beta4 from 1.36 on.
    assert controllers(config) == {"v1beta3": "*,-resourceclaim-controller",
                                   "v1beta4": "*,-resourceclaim-controller"}
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker", "worker", "worker"]
    # CDI on in every node's containerd: the kubelet has the runtime inject the devices the
    # agent, its DRA plugin, prepared.
    (containerd,) = config["containerdConfigPatches"]
    assert "enable_cdi = true" in containerd
    assert printed("--flavour", "native") == (overlay, config)


def test_the_kdra_flavour_keeps_every_controller() -> None:
    overlay, config = printed("--flavour=kdra")
    assert overlay == "manifests/overlays/kind"
    assert controllers(config) == {}  # kubeadm's default: every controller
    assert config["containerdConfigPatches"] == printed()[1]["containerdConfigPatches"]


@pytest.mark.parametrize("args", [["--flavour", "upstream"], ["--colour", "native"]])
def test_a_wrong_argument_is_refused(args: list[str]) -> None:
    result = subprocess.run(["bash", str(SCRIPT), *args, "--print-config"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "kind-up:" in result.stderr and not result.stdout
