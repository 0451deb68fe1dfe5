"""The command-line tools' one client (:class:`kdra.kube.reader.Reader`, pykube-ng) against a
real HTTP server on loopback (no API server needed for paging, decoding and credentials):
LISTs paged and filtered, an item too deep to decode skipped and reported, and a
kubeconfig's exec plugin — of the current API version, which pykube-ng alone does not
speak — run once by kdra for every request."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from kdra.kube.reader import PODS, ClusterError, Reader, Unreadable
from tests.unit.cli.test_check_exit import kubeconfig

DEEP = b"[" * 1100 + b"]" * 1100


@contextmanager
def serving(pages: list[bytes], status: int = 200) -> Iterator[tuple[str, list[Any]]]:
    """A server answering GETs with ``pages`` in turn; what it saw (query, headers)."""
    seen: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((parse_qs(urlsplit(self.path).query), dict(self.headers)))
            body = pages[len(seen) - 1]
            self.send_response(status)
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
        yield f"http://127.0.0.1:{server.server_port}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_list_pages_filters_and_reports_what_it_cannot_decode(tmp_path: Path) -> None:
    pages = [
        b'{"metadata": {"continue": "t"}, "items": [{"metadata": {"name": "a"}}, '
        b'{"metadata": {"name": "bad", "namespace": "ns", "resourceVersion": "7"}, '
        b'"status": {"devices": [{"data": %s}]}}]}' % DEEP,
        b'{"metadata": {}, "items": [{"metadata": {"name": "b"}}]}',
    ]
    with serving(pages) as (server, seen):
        reader = Reader(str(kubeconfig(tmp_path, server)))
        unreadable: list[str] = []
        items = reader.list(PODS, "ns", label_selector="a=b", unreadable=unreadable)
        reader.close()
    assert [i["metadata"]["name"] for i in items] == ["a", "b"]
    (first, headers), (second, _) = seen
    assert first["labelSelector"] == ["a=b"] and "continue" not in first
    assert second["continue"] == ["t"]
    assert headers["Authorization"] == "Bearer t"
    assert len(unreadable) == 1 and unreadable[0].startswith("ns/bad (resourceVersion 7): ")


def test_an_answer_that_is_no_json_object_is_a_cluster_error(tmp_path: Path) -> None:
    with serving([b"[" * 5000]) as (server, _):
        reader = Reader(str(kubeconfig(tmp_path, server)))
        with pytest.raises(ClusterError, match="cannot be decoded"):
            reader.get(PODS, "p", "ns")
    with serving([b'{"message": "no"}'], status=403) as (server, _):
        reader = Reader(str(kubeconfig(tmp_path, server)))
        with pytest.raises(Unreadable, match="403 Forbidden: no"):
            reader.list(PODS)


def test_an_exec_plugin_runs_once_for_every_request(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    plugin = tmp_path / "plugin.py"
    plugin.write_text(
        "import json, pathlib\n"
        f"runs = pathlib.Path({str(runs)!r})\n"
        "runs.write_text(str(int(runs.read_text()) + 1) if runs.exists() else '1')\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
        "'kind': 'ExecCredential', 'status': {'token': 'from-exec'}}))\n")
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                     "command": sys.executable, "args": [str(plugin)]}}
    pages = [b'{"metadata": {"continue": "t"}, "items": []}', b'{"metadata": {}, "items": []}',
             b'{"metadata": {"name": "p"}}']
    with serving(pages) as (server, seen):
        reader = Reader(str(kubeconfig(tmp_path, server, user)))
        reader.list(PODS)
        reader.get(PODS, "p", "ns")
        reader.close()
    assert [headers["Authorization"] for _, headers in seen] == ["Bearer from-exec"] * 3
    assert runs.read_text() == "1"


def test_a_failing_exec_plugin_is_a_cluster_error(tmp_path: Path) -> None:
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                     "command": sys.executable, "args": ["-c", "raise SystemExit(4)"]}}
    with pytest.raises(ClusterError, match="exited with status 4"):
        Reader(str(kubeconfig(tmp_path, "http://127.0.0.1:1", user)))
