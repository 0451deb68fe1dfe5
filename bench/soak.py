"""Soak: the kdra operator and a node agent under a steady stream of pods, for half an hour.

    make soak                                                    # 30 minutes
    .venv/bin/python bench/soak.py --duration 120 --sample 10    # smoke run, ~4 minutes

A fresh control plane (kdra_devenv), kdra's CRDs, one ``kdra agent --simulate-nodes`` process
serving every simulated node and one ``kdra operator`` — started as bench/scale.py starts them
(:class:`contenders.Kdra`). Then scale.py's steady-state workload runs for ``--duration`` seconds:
``--pods`` pods are kept in flight, each one force-deleted once bound and replaced by a new
one (:func:`workloads.steady_workload`).

Every ``--sample`` seconds one line: RSS (VmRSS) and CPU share of the operator and of the
agent, the pods the operator has bound so far (its scheduling-duration histogram), and the
operator's C heap: bytes in use and bytes free inside it (``kdra_malloc_*`` gauges,
kdra.kube.memory) — a leak grows the first, heap space kept for reuse the second. At the
end, a summary: pods bound and pods/s; per process RSS at the start (the first sample after
``--warmup`` seconds: imports, caches and pools have settled by then), at the end, the peak,
and the growth in MiB and %; the invariant checker's verdict on the settled cluster
(``kdra check``'s rules, over the API objects and the agent's CDI files and checkpoints). The
same as JSON in ``--out``. Exit code 1 when a process died, nothing was bound or an invariant
is violated; RSS growth is reported, not judged.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import memtrace
import workloads
from contenders import Kdra, Proc
from kapi import Api, cpu_seconds, group_pids, rss_mib
from kdra.checks import read_local, violations
from kdra.kube.reader import Reader
from measurement import Profiler
from objects import DEVICES_PER_NODE, ROOT, node_name
from runner import control_plane
from workloads import Params

BOUND_METRIC = "kdra_scheduler_scheduling_duration_seconds_count"
HEAP = ("in_use", "free")  # the operator's kdra_malloc_<kind>_bytes gauges


@dataclass
class Sample:
    seconds: float  # since the steady state began
    bound: int  # pods the operator has bound since it started
    claims: int  # ResourceClaims in the workload's namespace (released ones are deleted)
    rss_mib: dict[str, float]  # VmRSS per process
    cpu_pct: dict[str, float]  # CPU share per process since the previous sample (100: a core)
    malloc_mib: dict[str, float]  # the operator's C heap: in use, free (kdra.kube.memory gauges)


def watched(kdra: Kdra) -> dict[str, int]:
    """Process group of each process sampled: kdra's, then kube-apiserver and etcd (to tell
    a slower kdra from a busier API server)."""
    groups = {p.name: p.pid for p in kdra.measured if p.alive()}
    groups.update({p.name: p.popen.pid for p in kdra.plane.processes
                   if p.name in ("kube-apiserver", "etcd")})
    return groups


def rss_of(group: int) -> float:
    return sum(rss_mib(pid)[0] for pid in group_pids(group))


def cpu_of(group: int) -> float:
    return sum(cpu_seconds(pid) for pid in group_pids(group))


def metrics(port: int, *names: str) -> dict[str, float]:
    """Per name, the sum of every series of that metric of a kdra process, from one scrape
    (0 when unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        text = ""
    lines = text.splitlines()
    return {name: sum(float(line.split()[-1]) for line in lines
                      if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"))
            for name in names}


async def sample_every(interval: float, kdra: Kdra, api: Api, samples: list[Sample],
                       started: float) -> None:
    """Append a :class:`Sample` every ``interval`` seconds (and print it) until cancelled."""
    groups = watched(kdra)
    previous = {name: cpu_of(group) for name, group in groups.items()}
    last = time.monotonic()
    while True:
        await asyncio.sleep(interval)
        now = time.monotonic()
        cpu = {name: cpu_of(group) for name, group in groups.items()}
        scraped = await asyncio.to_thread(metrics, kdra.metrics_port, BOUND_METRIC,
                                          *(f"kdra_malloc_{kind}_bytes" for kind in HEAP))
        bound = scraped[BOUND_METRIC]
        heap = {kind: round(scraped[f"kdra_malloc_{kind}_bytes"] / 2**20, 1) for kind in HEAP}
        sample = Sample(
            seconds=round(now - started, 1), bound=int(bound),
            claims=await api.count(kdra.claims_path("test")),
            rss_mib={name: round(rss_of(group), 1) for name, group in groups.items()},
            cpu_pct={name: round(100 * (cpu[name] - previous[name]) / (now - last), 1)
                     for name in cpu},
            malloc_mib=heap)
        previous, last = cpu, now
        samples.append(sample)
        kdra_procs = [p.name for p in kdra.measured]
        print(f"  t={sample.seconds:5.0f}s bound {sample.bound:5d} claims {sample.claims:3d}  "
              + "  ".join(f"{name.removeprefix('kdra-')}: {sample.rss_mib[name]:5.1f} MiB "
                          f"{sample.cpu_pct[name]:4.1f}%" for name in kdra_procs)
              + f"  operator C heap: {heap['in_use']:.1f} MiB in use, {heap['free']:.1f} free"
              + "  (CPU " + ", ".join(f"{name} {sample.cpu_pct[name]:.0f}%" for name in groups
                                     if name not in kdra_procs) + ")", flush=True)


def memory_summary(samples: list[Sample], warmup: float, procs: list[Proc]) -> dict[str, Any]:
    """Per kdra process: RSS at the first sample after ``warmup``, at the last one, the peak
    (sampled, and the kernel's VmHWM), growth in MiB and %."""
    if not samples:
        return {}
    first = next((s for s in samples if s.seconds >= warmup), samples[0])
    last = samples[-1]
    out: dict[str, Any] = {}
    for proc in procs:
        start, end = first.rss_mib[proc.name], last.rss_mib[proc.name]
        out[proc.name] = {
            "start_mib": start, "start_at_s": first.seconds, "end_mib": end,
            "end_at_s": last.seconds,
            "peak_mib": max(s.rss_mib[proc.name] for s in samples),
            "hwm_mib": round(sum(rss_mib(pid)[1] for pid in proc.pids()), 1),
            "growth_mib": round(end - start, 1),
            "growth_pct": round(100 * (end - start) / start, 1) if start else None,
            "cpu_avg_pct": round(sum(s.cpu_pct[proc.name] for s in samples) / len(samples), 1),
        }
        if proc.name == "kdra-operator":
            out[proc.name]["malloc_in_use_mib"] = [first.malloc_mib.get("in_use"),
                                                   last.malloc_mib.get("in_use")]
            out[proc.name]["malloc_free_mib"] = [first.malloc_mib.get("free"),
                                                 last.malloc_mib.get("free")]
    return out


async def settled_violations(kdra: Kdra, api: Api, nodes: list[str],
                             within: float = 90.0) -> list[str]:
    """The invariant checker's findings once the last pods are bound (checked until it finds
    nothing or ``within`` seconds run out: while a pod is being scheduled, its claim is
    allocated a moment before its devices are Ready)."""
    reader = Reader(str(kdra.plane.kubeconfig))
    deadline = time.monotonic() + within
    found: list[str] = []
    while time.monotonic() < deadline:
        pending = await api.count("/api/v1/namespaces/test/pods",
                                  {"fieldSelector": "spec.nodeName="})
        local = read_local([kdra.cdi], [kdra.work / "state"], nodes)
        found = [str(v) for v in await asyncio.to_thread(violations, reader, local=local)]
        if not pending and not found:
            return []
        await asyncio.sleep(3)
    return found


async def soak(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    workloads.STEADY_IN_FLIGHT = args.pods  # read by workloads.steady_workload
    plane = control_plane(work, native_dra=False)
    kdra = Kdra(plane, work, args.nodes)
    if args.trace_memory:
        kdra.trace_memory = work / "memtrace"
    nodes = [node_name(i) for i in range(args.nodes)]
    samples: list[Sample] = []
    try:
        async with Api(plane.kubeconfig) as api:
            await api.create("/api/v1/namespaces", {"metadata": {"name": "test"}})
            await kdra.setup(api)
            await api.create(kdra.claims_path("test").replace(
                "resourceclaims", "resourceclaimtemplates"), kdra.template("test"))
            await kdra.start_scheduler(api)
            pids = {p.name: p.pid for p in kdra.measured}
            print(f"ready: {pids}; steady state for {args.duration:.0f}s, {args.pods} pods in "
                  f"flight, a sample every {args.sample:.0f}s", flush=True)
            started = time.monotonic()
            sampler = asyncio.create_task(sample_every(args.sample, kdra, api, samples, started))
            if args.trace_memory:
                loop = asyncio.get_running_loop()
                loop.call_later(args.warmup, snapshot, kdra)
            params = Params(nodes=args.nodes, init_pods=0, measure_pods=0,
                            duration=args.duration, stall=90.0)
            try:
                result = await workloads.steady_workload(api, kdra, params,
                                                         Profiler(False, work), "soak")
            finally:
                sampler.cancel()
                await asyncio.gather(sampler, return_exceptions=True)
            dead = [p.name for p in kdra.measured if not p.alive()]
            growth = traced_growth(kdra) if args.trace_memory and not dead else []
            memory = memory_summary(samples, args.warmup, kdra.measured)
            found = await settled_violations(kdra, api, nodes) if not dead else ["(not run)"]
            tracebacks = {p.name: p.log.read_text(errors="replace").count("Traceback")
                          for p in kdra.measured}
            return {
                "duration_s": args.duration, "nodes": args.nodes,
                "devices_per_node": DEVICES_PER_NODE, "in_flight": args.pods,
                "pods_bound": result.pods, "pods_per_s": round(result.rate, 2),
                "latency_p50_ms": round(1000 * result.p50), "latency_p99_ms": round(
                    1000 * result.p99), "cpu_s": {k.removeprefix("cpu_"): v for k, v in
                                                 result.extra.items() if k.startswith("cpu_")},
                "memory": memory, "violations": len(found), "violation_samples": found[:10],
                "tracebacks_in_logs": tracebacks, "exited": dead,
                "operator_memory_growth": growth,
                "samples": [asdict(s) for s in samples], "work": str(work),
            }
    finally:
        kdra.stop()
        plane.stop()
        shutil.rmtree(work / "etcd-data", ignore_errors=True)


def snapshot(kdra: Kdra) -> None:
    """Ask the traced operator for a tracemalloc snapshot (bench/memtrace.py)."""
    operator = next(p for p in kdra.measured if p.name == "kdra-operator")
    os.kill(operator.pid, signal.SIGUSR2)


def traced_growth(kdra: Kdra) -> list[str]:
    """Take the end snapshot; the allocation sites that grew most since the warm-up one."""
    assert kdra.trace_memory is not None
    snapshot(kdra)
    first, last = kdra.trace_memory / "snapshot-1.trace", kdra.trace_memory / "snapshot-2.trace"
    deadline = time.monotonic() + 120
    while not last.exists() and time.monotonic() < deadline:
        time.sleep(1.0)
    time.sleep(2.0)  # the dump finishes writing
    if not first.exists() or not last.exists():
        return ["(no snapshots: the operator did not dump them)"]
    return memtrace.top_growth(first, last)


def print_summary(report: dict[str, Any]) -> None:
    print(f"\npods bound: {report['pods_bound']} in {report['duration_s']:.0f}s = "
          f"{report['pods_per_s']} pods/s (p50 {report['latency_p50_ms']} ms, "
          f"p99 {report['latency_p99_ms']} ms); CPU seconds {report['cpu_s']}")
    for name, mem in report["memory"].items():
        print(f"{name}: RSS {mem['start_mib']} MiB at {mem['start_at_s']:.0f}s -> "
              f"{mem['end_mib']} MiB at {mem['end_at_s']:.0f}s, peak {mem['peak_mib']} MiB "
              f"(VmHWM {mem['hwm_mib']}); growth {mem['growth_mib']:+} MiB "
              f"({mem['growth_pct']:+}%); CPU {mem['cpu_avg_pct']}% on average")
        if "malloc_in_use_mib" in mem:
            (used0, used1), (free0, free1) = mem["malloc_in_use_mib"], mem["malloc_free_mib"]
            print(f"  C heap (malloc): in use {used0} -> {used1} MiB, free {free0} -> {free1} "
                  "MiB")
    print(f"invariant violations: {report['violations']}"
          + "".join(f"\n  {v}" for v in report["violation_samples"]))
    if report.get("operator_memory_growth"):
        print("operator allocations that grew most after the warm-up (tracemalloc):")
        for line in report["operator_memory_growth"]:
            print(f"  {line}")
    print(f"tracebacks in logs: {report['tracebacks_in_logs']}; exited early: "
          f"{report['exited'] or 'none'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=1800.0,
                        help="steady-state seconds (default 1800)")
    parser.add_argument("--sample", type=float, default=30.0,
                        help="seconds between RSS/CPU samples (default 30)")
    parser.add_argument("--warmup", type=float, default=60.0,
                        help="the start RSS is the first sample after this many seconds")
    parser.add_argument("--pods", type=int, default=10, help="pods in flight (default 10)")
    parser.add_argument("--nodes", type=int, default=20,
                        help=f"simulated nodes, {DEVICES_PER_NODE} devices each (default 20)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON report (default: soak.json in the work directory)")
    parser.add_argument("--work", type=Path, default=None,
                        help="directory for the control plane and the logs (default: temp)")
    parser.add_argument("--trace-memory", action="store_true",
                        help="run the operator under tracemalloc (bench/memtrace.py, slower) "
                        "and print the allocation sites that grew after the warm-up")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="kdra-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    print(f"kdra soak: {args.nodes} nodes x {DEVICES_PER_NODE} devices, {args.pods} pods in "
          f"flight, {args.duration:.0f}s, commit {commit}, {os.cpu_count()} cores; work dir "
          f"{work}", flush=True)
    report = {"commit": commit, **asyncio.run(soak(args, work))}
    print_summary(report)
    out = args.out or work / "soak.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"report: {out}")
    failed = report["exited"] or report["violations"] or not report["pods_bound"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
