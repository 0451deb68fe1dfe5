"""kdra's API client against the real API server: a watch outlives a kube-apiserver outage.

The watch (``KubeClient.watch``) must retry on its own while kube-apiserver is down, waiting
longer after each failure with jitter (``kdra.kube.core.backoff``), and deliver what is created
once the server is back, without the caller doing anything (it lists again first when the
server no longer has the version it watched from).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import re
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from kdra.kube.client import WatchEvent, connect
from kdra.kube.core.backoff import backoff_ceiling
from kdra.kube.reader import PODS as READER_PODS
from kdra.kube.reader import Reader, Unreadable
from kdra.kube.resources import NAMESPACES
from kdra_devenv.controlplane import ControlPlane
from tests.e2e.procs import wait_for

RETRY = re.compile(r"watch of namespaces failed \(.*; (\d+) in a row\); retrying in ([\d.]+)s")
BASE, CAP = 0.5, 4.0


def retries(caplog: pytest.LogCaptureFixture) -> list[tuple[int, float]]:
    """(consecutive failures, delay) of the retries the watch logged since its last success
    (a request that reached the stopping server may have reset the count once)."""
    found: list[tuple[int, float]] = []
    for record in caplog.records:
        match = RETRY.search(record.getMessage())
        if record.name == "kdra.kube.client" and match:
            failures, delay = int(match[1]), float(match[2])
            found = [(failures, delay)] if failures == 1 else [*found, (failures, delay)]
    return found


def api_ready(plane: ControlPlane) -> bool:
    return plane.kubectl("get", "--raw", "/readyz", check=False).returncode == 0


def test_watch_reconnects_after_an_outage(control_plane: ControlPlane,
                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kdra.kube.client")
    label = f"kdra-e2e-watch={uuid.uuid4().hex[:8]}"
    name = f"watch-{label.split('=')[1]}"
    events: asyncio.Queue[WatchEvent] = asyncio.Queue()

    async def next_event(seconds: float) -> WatchEvent:
        return await asyncio.wait_for(events.get(), seconds)

    async def scenario() -> tuple[list[tuple[int, float]], float, WatchEvent]:
        client = await connect(str(control_plane.kubeconfig))

        async def consume() -> None:
            async for event in client.watch(NAMESPACES, label_selector=label,
                                            retry_delay=BASE, max_retry_delay=CAP):
                await events.put(event)

        task = asyncio.create_task(consume())
        try:
            kind, body = await next_event(30)
            assert (kind, body["items"]) == ("LIST", [])
            await asyncio.to_thread(control_plane.stop_component, "kube-apiserver")
            try:
                for _ in range(300):  # a minute at most
                    if len(retries(caplog)) >= 5:
                        break
                    await asyncio.sleep(0.2)
                during = retries(caplog)
            finally:
                # From this (the main) thread: a process dies with the thread that started it
                # (PR_SET_PDEATHSIG), and asyncio.to_thread's worker ends with asyncio.run.
                control_plane.start_component("kube-apiserver")
                await asyncio.to_thread(wait_for, lambda: api_ready(control_plane), 120, 0.5,
                                        "kube-apiserver /readyz after the outage")
            # The restarted server has no history for the version the watch saw last: it
            # answers 410 Gone and the watch lists again. Create the object once that list
            # is through, so it can only arrive as a watch event.
            with contextlib.suppress(TimeoutError):
                kind, body = await next_event(20)
                assert (kind, body.get("items")) == ("LIST", []), (kind, body)
            started = time.monotonic()
            await asyncio.to_thread(control_plane.kubectl, "apply", "-f", "-", input=(
                '{"apiVersion": "v1", "kind": "Namespace", "metadata": '
                f'{{"name": "{name}", "labels": {{"{label.split("=")[0]}": '
                f'"{label.split("=")[1]}"}}}}}}'))
            event = await next_event(60)
            assert not task.done(), task
            return during, time.monotonic() - started, event
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await client.close()

    try:
        during, delivered_after, (kind, obj) = asyncio.run(scenario())
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)
    print(f"watch retries during the outage (failures, delay s): {during}; "
          f"ADDED delivered {delivered_after:.1f}s after the create")

    # It retried on its own, several times, counting consecutive failures from 1.
    assert len(during) >= 5, during
    counts = [n for n, _ in during]
    assert counts == list(range(1, len(during) + 1)), counts
    # Each delay lies within its jitter bounds, ceilings doubling from 0.5 s up to the 4 s cap.
    for n, delay in during:
        ceiling = backoff_ceiling(n, base=BASE, cap=CAP)
        assert ceiling / 2 - 0.01 <= delay <= ceiling + 0.01, (n, delay)
    delays = [d for _, d in during]
    assert delays[3] > delays[0] and delays[4] > delays[1], delays  # growing (equal jitter)
    # ... and jittered: not the bare exponential steps 0.5, 1, 2, 4, 4.
    assert any(abs(d - backoff_ceiling(n, base=BASE, cap=CAP)) > 0.02 for n, d in during)
    # Back up: the object created after the outage arrives as ADDED.
    assert kind == "ADDED", (kind, obj)
    assert obj["metadata"]["name"] == name
    assert delivered_after < 30


def test_credentials_of_every_kind_reach_the_real_api_server(control_plane: ControlPlane,
                                                             tmp_path: Path) -> None:
    """kdra's own credential loading (kdra.kube.kubeconfig) against kube-apiserver: the
    admin's client certificate inline (``*-data``), a service account's token from a
    ``tokenFile`` and from an exec plugin — each one who the API server says it is, through
    the async client and the command-line tools' client alike (the token file's rotation:
    tests/unit/kube/test_kubeconfig.py)."""
    admin = json.loads(control_plane.kubeconfig.read_text())
    user = admin["users"][0]["user"]
    cluster = admin["clusters"][0]["cluster"]

    def data(path: str) -> str:
        return base64.b64encode(Path(path).read_bytes()).decode()

    def kubeconfig(name: str, credentials: dict[str, Any]) -> str:
        path = tmp_path / name
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "ctx",
            "clusters": [{"name": "c", "cluster": {
                "server": cluster["server"],
                "certificate-authority-data": data(cluster["certificate-authority"])}}],
            "users": [{"name": "u", "user": credentials}],
            "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}]}))
        return str(path)

    account = f"cred-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "serviceaccount", account, "-n", "default")
    tokens = [control_plane.kubectl("create", "token", account, "-n", "default").stdout.strip()
              for _ in range(2)]
    token_file = tmp_path / "token"
    token_file.write_text(tokens[0])
    plugin = tmp_path / "plugin.py"
    plugin.write_text("import json\nprint(json.dumps({'apiVersion': "
                      "'client.authentication.k8s.io/v1beta1', 'kind': 'ExecCredential', "
                      f"'status': {{'token': {tokens[1]!r}}}}}))\n")
    inline = kubeconfig("inline", {"client-certificate-data": data(user["client-certificate"]),
                                   "client-key-data": data(user["client-key"])})
    from_file = kubeconfig("file", {"tokenFile": str(token_file)})
    from_exec = kubeconfig("exec", {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
        "args": [str(plugin)]}})
    expected_admin = control_plane.kubectl("auth", "whoami", "-o", "jsonpath={.status."
                                           "userInfo.username}").stdout.strip()

    async def whoami(path: str) -> str:
        async with await connect(path, component="test") as client:
            return await client.whoami()

    assert asyncio.run(whoami(inline)) == expected_admin
    service_account = f"system:serviceaccount:default:{account}"
    assert asyncio.run(whoami(from_file)) == service_account
    assert asyncio.run(whoami(from_exec)) == service_account
    # the command-line tools' client (pykube-ng, credentials resolved by kdra) from the same
    # kubeconfigs: the admin reads; the service account is known, and refused (no RBAC)
    reader = Reader(inline)
    try:
        assert isinstance(reader.list(READER_PODS, "default"), list)
    finally:
        reader.close()
    for path in (from_file, from_exec):
        reader = Reader(path)
        try:
            with pytest.raises(Unreadable) as refused:
                reader.list(READER_PODS, "default")
        finally:
            reader.close()
        assert refused.value.status == 403 and service_account in refused.value.message
