"""``kdra check``'s exit codes when it cannot vouch for the cluster: 2 (never 1, which means
"violations") when the cluster cannot be read or holds objects it cannot decode."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from kdra.checks import run_check
from kdra.kube.reader import PODS, Reader
from kdra_devenv.controlplane import free_port

DEEP = b"[" * 1100 + b"]" * 1100


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": server}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    return config


def test_a_list_leaves_out_and_reports_what_it_cannot_decode(tmp_path: Path) -> None:
    """The CLI's reader pages a LIST and skips an item nested too deep to decode (a real
    HTTP server on loopback answers; no API server needed for the paging and decoding)."""
    pages = [
        b'{"metadata": {"continue": "t"}, "items": [{"metadata": {"name": "a"}}, '
        b'{"metadata": {"name": "bad", "namespace": "ns", "resourceVersion": "7"}, '
        b'"status": {"devices": [{"data": %s}]}}]}' % DEEP,
        b'{"metadata": {}, "items": [{"metadata": {"name": "b"}}]}',
    ]
    queries: list[dict[str, list[str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            queries.append(parse_qs(urlsplit(self.path).query))
            body = pages[len(queries) - 1]
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        reader = Reader(str(_kubeconfig(tmp_path, f"http://127.0.0.1:{server.server_port}")))
        unreadable: list[str] = []
        items = reader.list(PODS, "ns", label_selector="a=b", unreadable=unreadable)
        reader.close()
    finally:
        server.shutdown()
    assert [i["metadata"]["name"] for i in items] == ["a", "b"]
    assert queries[0]["labelSelector"] == ["a=b"] and "continue" not in queries[0]
    assert queries[1]["continue"] == ["t"]
    assert len(unreadable) == 1 and unreadable[0].startswith("ns/bad (resourceVersion 7): ")


def test_an_unreachable_cluster_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    config = _kubeconfig(tmp_path, f"http://127.0.0.1:{free_port()}")
    code = run_check(kubeconfig=str(config), cdi_dirs=[], state_dirs=[], nodes=[],
                     namespace="kdra-system", lease_grace=None, output="text")
    assert code == 2
    assert "cannot read the cluster" in capsys.readouterr().err
