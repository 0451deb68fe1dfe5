"""``kdra check``'s exit codes when it cannot vouch for the cluster: 2 (never 1, which means
"violations") when the cluster cannot be read or holds objects it cannot decode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdra.checks import run_check
from kdra_devenv.controlplane import free_port


def kubeconfig(tmp_path: Path, server: str, user: dict[str, Any] | None = None) -> Path:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": server}}],
        "users": [{"name": "x", "user": user or {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    return config


def test_an_unreachable_cluster_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    config = kubeconfig(tmp_path, f"http://127.0.0.1:{free_port()}")
    code = run_check(kubeconfig=str(config), cdi_dirs=[], state_dirs=[], nodes=[],
                     namespace="kdra-system", lease_grace=None, output="text")
    assert code == 2
    assert "cannot read the cluster" in capsys.readouterr().err
