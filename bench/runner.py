"""One run of bench/scale.py: a fresh control plane (control_plane), a contender set up on it
and its workload run and measured (run_one), or the ceiling, without a contender (run_ceiling).

Invariant: every run starts a new control plane of the same binaries and leaves nothing
running: the contender and the plane are stopped and etcd's data removed, also when the run
fails; run_one reports a failed run as an incomplete Result instead of raising.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

from contenders import QPS, Contender, Upstream
from kapi import Api
from kdra_devenv.controlplane import CONTROLLERS, ControlPlane, binaries
from measurement import (
    AUDIT_LOG,
    Profiler,
    audit_flags,
    audit_summary,
    server_profile,
    until_idle,
)
from objects import DEVICES_PER_NODE, install_crds
from report import Result
from workloads import (
    CEILING_WORKERS,
    STEADY_IN_FLIGHT,
    Params,
    ceiling_workload,
    preallocate,
    steady_workload,
    template_workload,
)


def control_plane(work: Path, native_dra: bool, audit: bool = False,
                  pprof: bool = False) -> ControlPlane:
    controllers = (*CONTROLLERS, "resourceclaim-controller") if native_dra else CONTROLLERS
    server_args = (*(audit_flags(work) if audit else ()), *(("--profiling",) if pprof else ()))
    return ControlPlane(work, binaries(), controllers=controllers,
                        controller_manager_args=("--kube-api-qps", QPS,
                                                 "--kube-api-burst", QPS),
                        apiserver_args=server_args).start()


async def run_one(kind: type[Contender], workload: str, params: Params, base: Path,
                  profiler: Profiler, tag: str = "", round_: int = 1) -> Result:
    """One contender's run of ``workload`` on a fresh control plane; ``tag`` (default: the
    workload) names its directory and profiles, e.g. ``template-2000`` or ``steady-half-r2``."""
    result = await _run_one(kind, workload, params, base, profiler, tag or workload)
    result.workload, result.round = workload, round_
    return result


async def _run_one(kind: type[Contender], workload: str, params: Params, base: Path,
                   profiler: Profiler, tag: str) -> Result:
    work = base / f"{kind.name}-{tag}"
    work.mkdir(parents=True)
    plane = control_plane(work, native_dra=kind is Upstream, audit=params.audit,
                          pprof=bool(params.pprof))
    contender = kind(plane, work, params.nodes)
    try:
        async with Api(plane.kubeconfig) as api:
            for ns in ("init", "test"):
                await api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
            t = time.monotonic()
            await contender.setup(api)
            for ns in ("init", "test"):
                await api.create(contender.claims_path(ns).replace(
                    "resourceclaims", "resourceclaimtemplates"), contender.template(ns))
            if workload.startswith("steady-"):
                level = workload.removeprefix("steady-")
                count = {"empty": 0, "half": params.nodes * DEVICES_PER_NODE // 2,
                         "full": params.nodes * DEVICES_PER_NODE - STEADY_IN_FLIGHT}[level]
                await preallocate(api, contender, count)
            await contender.start_scheduler(api)
            settled = await until_idle(contender)
            print(f"  [{contender.name} {workload}] ready in {time.monotonic() - t:.0f}s "
                  f"(idle after {settled:.1f}s)", flush=True)
            if params.pprof:
                profile = asyncio.create_task(
                    server_profile(api, params.pprof, work / "kube-apiserver.pprof"))
            if workload == "template":
                result = await template_workload(api, contender, params, profiler, tag)
            else:
                result = await steady_workload(api, contender, params, profiler, tag)
            if params.pprof:
                await profile
            if params.audit and result.window[1]:
                summary = audit_summary(work / AUDIT_LOG, result.window, result.pods)
                (work / "audit-summary.txt").write_text(summary + "\n")
                print(summary, flush=True)
            dead = [p.name for p in contender.measured if not p.alive()]
            if dead:
                result.note = (result.note + f" exited: {', '.join(dead)}").strip()
            if not result.complete or dead:
                tail = contender.logs()
                (base / f"{contender.name}-{workload}-logs.txt").write_text(tail)
                print(f"  [{contender.name} {workload}] INCOMPLETE ({result.note}); "
                      f"log tails:\n{tail[-3000:]}", flush=True)
            return result
    except Exception as exc:  # report and move on: the benchmark asserts nothing
        print(f"  [{contender.name} {workload}] FAILED: {exc!r}\n{contender.logs()[-3000:]}",
              flush=True)
        return Result(workload, contender.name, complete=False, note=f"failed: {exc}"[:200])
    finally:
        profiler.stop()
        contender.stop()
        plane.stop()
        shutil.rmtree(work / "etcd-data", ignore_errors=True)


async def run_ceiling(params: Params, base: Path, kdra_objects: bool) -> Result:
    """The ceiling on a fresh control plane: native objects, or kdra's (CRDs installed)."""
    work = base / ("ceiling-kdra-objects" if kdra_objects else "ceiling")
    work.mkdir(parents=True)
    plane = control_plane(work, native_dra=False)
    try:
        if kdra_objects:
            install_crds(plane)
        async with Api(plane.kubeconfig) as api:
            await api.create("/api/v1/namespaces", {"metadata": {"name": "test"}})
            return await ceiling_workload(api, params, CEILING_WORKERS, kdra_objects)
    finally:
        plane.stop()
        shutil.rmtree(work / "etcd-data", ignore_errors=True)
