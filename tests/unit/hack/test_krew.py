"""The krew package of `kubectl kdra`: hack/krew/package.sh builds an archive holding the
single-file plugin (hack/krew/build_plugin.py) whose sha256 and URL the generated manifest
states; the template's placeholders are all replaced. Running the file from an empty
environment against a real API server: tests/e2e/test_kubectl_plugin_file.py."""

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
    result = subprocess.run(["bash", str(ROOT / "hack" / "krew" / "package.sh"), str(out),
                             "https://downloads.example.org/kdra"],
                            capture_output=True, text=True, env={**os.environ,
                                                                 "PYTHON": sys.executable},
                            timeout=600)
    assert result.returncode == 0, result.stderr
    archive, manifest_path = (Path(line) for line in result.stdout.split())
    manifest = yaml.safe_load(manifest_path.read_text())
    assert "placeholder" not in yaml.safe_dump(manifest)
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "kdra"
    (platform,) = manifest["spec"]["platforms"]
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["uri"] == f"https://downloads.example.org/kdra/{archive.name}"
    version = manifest["spec"]["version"]
    assert archive.name == f"kubectl-kdra-{version}-linux-amd64.tar.gz"
    with tarfile.open(archive) as tar:
        assert tar.getnames() == [platform["bin"]] == ["kubectl-kdra"]
    assert platform["files"] == [{"from": "kubectl-kdra", "to": "."}]
