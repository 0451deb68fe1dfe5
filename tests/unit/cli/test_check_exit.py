"""``kdra check``'s exit codes when it cannot vouch for the cluster: 2 (never 1, which means
"violations") when the cluster cannot be read or holds objects it cannot decode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kdra.checks import run_check
from kdra.kube.readers import list_all
from kdra_devenv.controlplane import free_port

DEEP = b"[" * 1100 + b"]" * 1100


class Page:
    def __init__(self, data: bytes) -> None:
        self.data = data


def test_list_all_leaves_out_and_reports_what_it_cannot_decode() -> None:
    pages = [
        b'{"metadata": {"continue": "t"}, "items": [{"metadata": {"name": "a"}}, '
        b'{"metadata": {"name": "bad", "namespace": "ns", "resourceVersion": "7"}, '
        b'"status": {"devices": [{"data": %s}]}}]}' % DEEP,
        b'{"metadata": {}, "items": [{"metadata": {"name": "b"}}]}',
    ]
    calls: list[dict[str, Any]] = []

    def call(**kwargs: Any) -> Page:
        calls.append(kwargs)
        return Page(pages[len(calls) - 1])

    unreadable: list[str] = []
    items = list_all(call, unreadable=unreadable)
    assert [i["metadata"]["name"] for i in items] == ["a", "b"]
    assert calls[1]["_continue"] == "t"
    assert len(unreadable) == 1 and unreadable[0].startswith("ns/bad (resourceVersion 7): ")


def test_an_unreachable_cluster_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": f"http://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    code = run_check(kubeconfig=str(config), cdi_dirs=[], state_dirs=[], nodes=[],
                     namespace="kdra-system", lease_grace=None, output="text")
    assert code == 2
    assert "cannot read the cluster" in capsys.readouterr().err
