"""Small helpers for bench/scale.py: a minimal async API client, pod tracking, /proc stats.

The client speaks raw JSON over aiohttp with the admin kubeconfig's client certificate (the
files :class:`kdra_devenv.controlplane.ControlPlane` writes); it retries 429/5xx/connection
errors a few times and never makes decisions. Nothing here asserts.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

JSON = dict[str, Any]
MERGE = "application/merge-patch+json"
WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE", "APPLY", "CREATE", "UPDATE"}
WATCH_SERIES = {"apiserver_watch_events_total": "events",
                "apiserver_watch_events_sizes_sum": "bytes"}


class ApiFailure(RuntimeError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(f"HTTP {status}: {text[:300]}")
        self.status = status


class Api:
    """One aiohttp session against the control plane; ``limit`` bounds open connections."""

    def __init__(self, kubeconfig: Path, limit: int = 64) -> None:
        cfg = json.loads(kubeconfig.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        self.server = cluster["server"]
        ctx = ssl.create_default_context(cafile=cluster["certificate-authority"])
        ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        self._ssl = ctx
        self._limit = limit
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Api:
        self.session = aiohttp.ClientSession(
            base_url=self.server, read_bufsize=2**22,
            connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._limit),
            timeout=aiohttp.ClientTimeout(total=120))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.session:
            await self.session.close()

    async def call(self, method: str, path: str, body: Any = None, *,
                   ctype: str = "application/json", params: dict[str, str] | None = None,
                   ok_conflict: bool = False, ok_missing: bool = False,
                   attempts: int = 8) -> JSON:
        assert self.session is not None
        data = None if body is None else json.dumps(body)
        for attempt in range(attempts):
            try:
                async with self.session.request(method, path, data=data, params=params,
                                                headers={"Content-Type": ctype}) as resp:
                    text = await resp.text()
                    if resp.status < 300:
                        return dict(json.loads(text)) if text else {}
                    if resp.status == 409 and ok_conflict:
                        return {}
                    if resp.status == 404 and ok_missing:
                        return {}
                    if resp.status in (429, 500, 502, 503, 504) and attempt < attempts - 1:
                        await asyncio.sleep(0.2 * (attempt + 1))
                        continue
                    raise ApiFailure(resp.status, text)
            except (aiohttp.ClientError, TimeoutError, OSError):
                if attempt == attempts - 1:
                    raise
                await asyncio.sleep(0.2 * (attempt + 1))
        raise AssertionError("unreachable")

    async def server_counters(self) -> tuple[Counter[str], Counter[str]]:
        """kube-apiserver's counts so far (:func:`server_counts` of its /metrics)."""
        assert self.session is not None
        async with self.session.get("/metrics") as resp:
            return server_counts(await resp.text())

    async def create(self, path: str, body: JSON, **kw: Any) -> JSON:
        return await self.call("POST", path, body, **kw)

    async def patch_status(self, path: str, body: JSON) -> JSON:
        return await self.call("PATCH", path + "/status", body, ctype=MERGE)

    async def force_delete(self, path: str) -> JSON:
        return await self.call("DELETE", path, {"gracePeriodSeconds": 0}, ok_missing=True,
                               params={"gracePeriodSeconds": "0"})

    async def count(self, path: str, params: dict[str, str] | None = None) -> int:
        total, token = 0, ""
        while True:
            query = {"limit": "1000", **(params or {})}
            if token:
                query["continue"] = token
            result = await self.call("GET", path, params=query)
            total += len(result.get("items") or [])
            token = (result.get("metadata") or {}).get("continue") or ""
            if not token:
                return total

    async def resource_version(self, path: str) -> str:
        result = await self.call("GET", path, params={"limit": "1"})
        return str(result["metadata"]["resourceVersion"])

    async def watch(self, path: str, rv: str,
                    handle: Callable[[str, JSON], None]) -> None:
        """Watch ``path`` from ``rv`` until cancelled, calling ``handle(type, object)``."""
        assert self.session is not None
        while True:
            params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true",
                      "timeoutSeconds": "3000"}
            try:
                async with self.session.get(path, params=params,
                                            timeout=aiohttp.ClientTimeout(total=None)) as r:
                    async for line in r.content:
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            rv = await self.resource_version(path)
                            break
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        if event.get("type") != "BOOKMARK":
                            handle(event["type"], obj)
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)


async def bounded(limit: int, jobs: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Run the jobs with at most ``limit`` in flight; return their results in order."""
    semaphore = asyncio.Semaphore(limit)

    async def one(job: Callable[[], Awaitable[Any]]) -> Any:
        async with semaphore:
            return await job()

    return list(await asyncio.gather(*(one(j) for j in jobs)))


@dataclass
class PodTracker:
    """Client-side timestamps: create returned, first watch event with ``spec.nodeName``."""

    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, str] = field(default_factory=dict)
    on_bound: Callable[[str], None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def handle(self, kind: str, pod: JSON) -> None:
        if kind == "DELETED":
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            return
        meta = pod["metadata"]
        key = f"{meta['namespace']}/{meta['name']}"
        if key in self.bound:
            return
        self.bound[key] = time.monotonic()
        self.nodes[key] = node
        self.changed.set()
        if self.on_bound:
            self.on_bound(key)

    def bound_in(self, namespace: str) -> int:
        prefix = namespace + "/"
        return sum(1 for k in self.bound if k.startswith(prefix))

    def latencies(self, keys: list[str]) -> list[float]:
        return sorted(max(0.0, self.bound[k] - self.created[k])
                      for k in keys if k in self.bound and k in self.created)

    async def wait_bound(self, namespace: str, count: int, stall: float) -> bool:
        """Wait until ``count`` pods of ``namespace`` are bound; False after ``stall``
        seconds without a new binding anywhere."""
        while self.bound_in(namespace) < count:
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), stall)
            except TimeoutError:
                return False
        return True


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


# ------------------------------------------------------------------ /proc

_TICK = os.sysconf("SC_CLK_TCK")


def group_pids(pgid: int) -> list[int]:
    """Processes of one process group (each contender process starts its own session)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid:
            pids.append(int(entry))
    return pids


def cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_mib(pid: int) -> tuple[float, float]:
    """(current RSS, peak RSS) in MiB."""
    now = peak = 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                now = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    except OSError:
        pass
    return now, peak


def server_counts(metrics: str) -> tuple[Counter[str], Counter[str]]:
    """From kube-apiserver's /metrics text: write requests by "VERB resource[/subresource]"
    (``apiserver_request_total``; reads and watches excluded), and the watch traffic by
    "events resource" and "bytes resource" (every event sent to every watcher:
    ``apiserver_watch_events_total``, ``apiserver_watch_events_sizes_sum``). Other series and
    lines are ignored."""
    writes: Counter[str] = Counter()
    watch: Counter[str] = Counter()
    for line in metrics.splitlines():
        name, _, rest = line.partition("{")
        if name not in WATCH_SERIES and name != "apiserver_request_total":
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', rest.split("}", 1)[0]))
        what = labels.get("resource", "")
        value = int(float(line.rsplit(" ", 1)[1]))
        if name in WATCH_SERIES:
            watch[f"{WATCH_SERIES[name]} {what}"] += value
        elif labels.get("verb") in WRITE_VERBS:
            if labels.get("subresource"):
                what += "/" + labels["subresource"]
            writes[f"{labels['verb']} {what}"] += value
    return writes, watch
