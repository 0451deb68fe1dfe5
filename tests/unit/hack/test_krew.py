"""The krew package of `kubectl kdra`: hack/krew/package.sh builds an archive whose sha256 the
manifest states, with the files the manifest names; the launcher runs the plugin from its
virtual environment (one already made here, so no download)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def test_package_and_manifest_agree(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    result = subprocess.run(["bash", str(ROOT / "hack" / "krew" / "package.sh"), str(out)],
                            capture_output=True, text=True, env={**os.environ,
                                                                 "PYTHON": sys.executable},
                            timeout=300)
    assert result.returncode == 0, result.stderr
    archive, manifest_path = (Path(line) for line in result.stdout.split())
    manifest = yaml.safe_load(manifest_path.read_text())
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "kdra"
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"].endswith(f"/{archive.name}")
    assert manifest["spec"]["version"] == "v" + archive.name.split("-v")[1].removesuffix(
        ".tar.gz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert platform["bin"] in names
    assert any(name.startswith("kdra-") and name.endswith(".whl") for name in names)


def test_the_launcher_runs_the_plugin_from_its_environment(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    (store / "kubectl-kdra").write_bytes((ROOT / "hack" / "krew" / "kubectl-kdra").read_bytes())
    (store / "kubectl-kdra").chmod(0o755)
    (store / "kdra-0.1.0-py3-none-any.whl").write_bytes(b"")
    linked = tmp_path / "bin" / "kubectl-kdra"  # krew links the binary into ~/.krew/bin
    linked.parent.mkdir()
    linked.symlink_to(store / "kubectl-kdra")
    venv = tmp_path / "cache" / "kubectl-kdra" / "0.1.0" / "bin"
    venv.mkdir(parents=True)
    (venv / "kubectl-kdra").symlink_to(Path(sys.executable).parent / "kubectl-kdra")
    result = subprocess.run([str(linked), "--version"], capture_output=True, text=True,
                            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "kubectl-kdra 0.1.0"
