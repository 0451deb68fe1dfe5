"""What bench/scale.py measures besides pods and latencies: a contender's CPU seconds and peak
RSS (Usage), the control plane's CPU (ServerUsage), the wait until a contender has gone idle
after its set-up (until_idle); and the diagnosis tools: py-spy profiles of kdra's processes
(Profiler, summarize_profile), kube-apiserver's CPU profile (server_profile) and its audit log,
summarized by client (audit_flags, audit_summary).

Invariant: CPU and RSS are read from /proc for every process of the measured process groups
(utime+stime, VmHWM), the same way for every contender; the diagnosis tools cost CPU and are
off unless asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

import aiohttp
import yaml

from contenders import Contender, Proc
from kapi import JSON, Api, cpu_seconds, rss_mib
from kdra_devenv.controlplane import ControlPlane
from kdra_devenv.process import spawn


class Usage:
    """CPU seconds over a phase and peak RSS of a set of process groups."""

    def __init__(self, procs: list[Proc]) -> None:
        self.procs = procs
        self.start = self._cpu()
        self.by_proc: dict[str, float] = {}  # CPU seconds per process (after finish())

    def _cpu(self) -> dict[int, float]:
        return {pid: cpu_seconds(pid) for p in self.procs for pid in p.pids()}

    def finish(self) -> tuple[float, float]:
        end = self._cpu()
        cpu = sum(end[pid] - self.start.get(pid, 0.0) for pid in end)
        peak = sum(rss_mib(pid)[1] for p in self.procs for pid in p.pids())
        self.by_proc = {p.name: round(sum(end.get(pid, 0.0) - self.start.get(pid, 0.0)
                                          for pid in p.pids()), 2) for p in self.procs}
        return cpu, peak


class ServerUsage:
    """CPU seconds of the control plane's processes over a phase that the contender does not
    count as its own: kube-apiserver and etcd (what its API traffic costs the server; same
    binaries for both contenders, so per pod they compare) and, for kdra, the
    kube-controller-manager, whose garbage collector deletes kdra's generated claims too
    (upstream counts it: its resourceclaim controller runs there). With them a run's notes
    account for the whole machine."""

    NAMES = ("kube-apiserver", "etcd", "kube-controller-manager")

    def __init__(self, plane: ControlPlane, counted: Iterable[Proc] = ()) -> None:
        own = {p.name for p in counted}
        self.pids = {p.name: p.popen.pid for p in plane.processes
                     if p.name in self.NAMES and p.name not in own}
        self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def finish(self) -> dict[str, float]:
        return {f"cpu_{name}": round(cpu_seconds(pid) - self.start[name], 2)
                for name, pid in self.pids.items()}


async def until_idle(contender: Contender, *, below: float = 0.15, window: float = 1.0,
                     limit: float = 120.0) -> float:
    """Wait until the contender's processes together use less than ``below`` of a core over
    ``window`` seconds (at most ``limit``); returns the seconds waited. scheduler_perf starts
    the scheduler before a workload's set-up steps, so it has listed and processed the nodes,
    slices and pre-allocated claims before the measured pods come; a contender started after
    the set-up first catches up on them, and that start-up work is not what a workload
    measures. The same rule for both contenders."""
    started = time.monotonic()
    procs = [p for p in contender.measured if p.alive()]

    def used() -> float:
        return sum(cpu_seconds(pid) for p in procs for pid in p.pids())

    while time.monotonic() - started < limit:
        before = used()
        await asyncio.sleep(window)
        if used() - before < below * window:
            break
    return time.monotonic() - started


class Profiler:
    """py-spy attached to the kdra processes during a measured phase (``--profile``)."""

    def __init__(self, enabled: bool, out: Path) -> None:
        self.enabled = enabled and shutil.which("py-spy", path=str(Path(sys.executable)
                                                                   .parent)) is not None
        self.out = out
        self.running: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, tag: str, procs: list[Proc]) -> None:
        if not self.enabled:
            return
        spy = str(Path(sys.executable).parent / "py-spy")
        for proc in procs:
            if not proc.name.startswith("kdra") or not proc.alive():
                continue
            path = self.out / f"{tag}-{proc.name}.txt"
            popen = spawn(
                [spy, "record", "--pid", str(proc.pid), "--format", "raw", "--rate", "50",
                 "--nonblocking", "--gil", "-o", str(path)],  # GIL holders: ~CPU, not I/O waits
                run_dir=self.out, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.running.append((proc.name, popen, path))

    def stop(self) -> list[tuple[str, Path]]:
        done = []
        for name, popen, path in self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGINT)
            try:
                popen.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait()
            done.append((name, path))
        self.running.clear()
        return done


def summarize_profile(path: Path, top: int = 15) -> str:
    """Top functions of a py-spy raw (collapsed) profile: self and inclusive share."""
    if not path.exists():
        return f"(no profile at {path})"
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f for f in stack.split(";") if f]
        # py-spy raw frames: "function (file:line)"; drop line numbers to aggregate
        names = [f.rsplit(":", 1)[0] + ")" if ":" in f else f for f in frames]
        names = [n_.replace("/work/main/operator/", "").replace(str(Path(sys.prefix)), "venv")
                 for n_ in names]
        if names:
            own[names[-1]] += n
        for name in set(names):
            incl[name] += n
    if not total:
        return f"(empty profile {path})"
    lines = [f"{path.name}: {total} samples"]
    lines.append("  self%   function")
    lines += [f"  {100 * c / total:5.1f}  {name}" for name, c in own.most_common(top)]
    lines.append("  incl%   function")
    lines += [f"  {100 * c / total:5.1f}  {name}" for name, c in incl.most_common(top + 10)]
    return "\n".join(lines)


async def server_profile(api: Api, seconds: int, path: Path) -> None:
    """kube-apiserver's CPU profile over the next ``seconds`` (pprof format) to ``path``;
    read it with ``go tool pprof -top <kube-apiserver binary> <path>``."""
    assert api.session is not None
    async with api.session.get("/debug/pprof/profile", params={"seconds": str(seconds)},
                               timeout=aiohttp.ClientTimeout(total=seconds + 60)) as resp:
        data = await resp.read()
    await asyncio.to_thread(path.write_bytes, data)


AUDIT_LOG = "audit.log"


def audit_flags(work: Path) -> tuple[str, ...]:
    """kube-apiserver flags for a Metadata-level audit log of every request (one line when
    it completes): who asks what, to find the requests a contender could save. The log costs
    the server CPU, so --audit runs are for diagnosis, not for the report's figures."""
    policy = work / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [{"level": "Metadata"}]}))
    return ("--audit-policy-file", str(policy), "--audit-log-path", str(work / AUDIT_LOG),
            "--audit-log-format", "json", "--audit-log-maxsize", "0")


def client_name(event: JSON) -> str:
    """``kdra-operator``, ``kube-controller-manager:generic-garbage-collector``, ..."""
    agent = str(event.get("userAgent", "")).split("/", 1)[0] or "?"
    user = str(event.get("user", {}).get("username", ""))
    account = "system:serviceaccount:kube-system:"
    return f"{agent}:{user.removeprefix(account)}" if user.startswith(account) else agent


def audit_summary(log: Path, window: tuple[float, float], pods: int, top: int = 40) -> str:
    """Requests per bound pod in the measured phase, by client, verb, resource and code."""
    counts: Counter[tuple[str, str, str, int]] = Counter()
    with log.open() as lines:
        for line in lines:
            event = json.loads(line)
            received = datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
            if not window[0] <= received <= window[1]:
                continue
            ref = event.get("objectRef") or {}
            what = ref.get("resource", event.get("requestURI", "?").split("?")[0])
            if ref.get("subresource"):
                what += "/" + ref["subresource"]
            code = int((event.get("responseStatus") or {}).get("code", 0))
            counts[(client_name(event), event.get("verb", "?"), what, code)] += 1
    per_pod = max(pods, 1)
    by_client: Counter[str] = Counter()
    for (client, *_), n in counts.items():
        by_client[client] += n
    out = [f"requests per bound pod ({pods} pods), by client:"]
    out += [f"  {n / per_pod:7.2f}  {client}" for client, n in by_client.most_common()]
    out.append(f"top {top} (client verb resource code):")
    out += [f"  {n / per_pod:7.2f}  {c} {v} {r} {code}"
            for (c, v, r, code), n in counts.most_common(top)]
    return "\n".join(out)
