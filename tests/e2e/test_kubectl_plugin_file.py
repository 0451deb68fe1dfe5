"""``kubectl-kdra`` as a user without pip gets it: the krew archive of hack/krew/package.sh,
unpacked, its one file run by the system's python3 from an empty environment (``env -i
PATH=/usr/bin:/bin``: no virtual environment, no PYTHONPATH, nothing of this checkout) against
the real control plane — directly and as ``kubectl kdra`` found on PATH — answering as the
plugin installed in the test's virtual environment does."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import ROOT

SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def plugin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin file out of the krew archive, checked against the generated manifest."""
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.fail(f"{SYSTEM_PYTHON} is missing: the test runs the plugin with it")
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(["bash", str(ROOT / "hack" / "krew" / "package.sh"), str(out)],
                           capture_output=True, text=True, timeout=600,
                           env={**os.environ, "PYTHON": sys.executable})
    assert built.returncode == 0, built.stderr[-3000:]
    archive, manifest_path = (Path(line) for line in built.stdout.split())
    (platform,) = yaml.safe_load(manifest_path.read_text())["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"] == archive.as_uri()  # a URL that exists: the local archive
    bin_dir = tmp_path_factory.mktemp("krew-bin")
    with tarfile.open(archive) as tar:
        assert tar.getnames() == [platform["bin"]]
        tar.extractall(bin_dir, filter="data")
    path = bin_dir / platform["bin"]
    assert os.access(path, os.X_OK)
    return path


def bare(*cmd: str, home: Path, path: str = "/usr/bin:/bin") -> subprocess.CompletedProcess[str]:
    """``cmd`` in an empty environment: PATH and HOME only."""
    return subprocess.run(["env", "-i", f"PATH={path}", f"HOME={home}", *cmd],
                          capture_output=True, text=True, timeout=120)


def test_the_single_file_runs_with_the_system_python_and_nothing_else(
        plugin: Path, control_plane: ControlPlane, ns: str, tmp_path: Path) -> None:
    assert plugin.read_bytes().startswith(b"#!/usr/bin/env python3\n")
    kubeconfig = str(control_plane.kubeconfig)
    version = bare(str(plugin), "--version", home=tmp_path)
    assert (version.returncode, version.stderr) == (0, "")
    assert version.stdout.startswith("kubectl-kdra ")
    assert (tmp_path / ".cache" / "kubectl-kdra").is_dir()  # unpacked once, under HOME

    venv_plugin = Path(sys.executable).parent / "kubectl-kdra"
    for command in (["free", "-o", "json"], ["top", "-n", ns, "-o", "json"]):
        ran = bare(str(plugin), "--kubeconfig", kubeconfig, *command, home=tmp_path)
        assert ran.returncode == 0, ran.stderr
        reference = subprocess.run([str(venv_plugin), "--kubeconfig", kubeconfig, *command],
                                   capture_output=True, text=True, timeout=120)
        assert json.loads(ran.stdout) == json.loads(reference.stdout)

    missing = bare(str(plugin), "--kubeconfig", kubeconfig, "-n", ns, "why", "pod/nosuch",
                   home=tmp_path)
    assert missing.returncode == 1 and "nosuch" in missing.stderr, missing.stderr

    kubectl = shutil.which("kubectl", path=str(control_plane.bin_dir))
    assert kubectl
    through_kubectl = bare(kubectl, "kdra", "--kubeconfig", kubeconfig, "free", home=tmp_path,
                           path=f"{plugin.parent}:/usr/bin:/bin")
    assert through_kubectl.returncode == 0, through_kubectl.stderr
    assert through_kubectl.stdout == bare(str(plugin), "free", "--kubeconfig", kubeconfig,
                                          "--color", "never", home=tmp_path).stdout
