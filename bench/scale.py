r"""Scale benchmark: kdra vs the real kube-scheduler on scheduler_perf's DRA workloads.

    .venv/bin/python bench/scale.py --workloads all --rounds 2 --sweep 100,2000  # ~50 min
    .venv/bin/python bench/scale.py --quick                     # smoke run, ~8 min
    .venv/bin/python bench/scale.py --quick --workloads template --profile
    .venv/bin/python bench/scale.py --workloads steady-empty --duration 30 --audit --pprof 25
    .venv/bin/python bench/scale.py --contenders kdra,kdra-kopf --compare kdra-kopf/kdra \
        --workloads template,steady-empty --rounds 2
    # kdra on native DRA against kube-scheduler, same objects (--compare defaults to
    # kdra-native/upstream when kdra itself does not run): smoke, then the figures (~30 min)
    .venv/bin/python bench/scale.py --quick --rounds 1 --workloads template \
        --contenders kdra-native,upstream
    .venv/bin/python bench/scale.py --contenders kdra-native,upstream --rounds 2 \
        --workloads template,steady-empty,steady-half,steady-full

Diagnosis (not for the report's figures: both cost the server CPU): ``--audit`` turns on
kube-apiserver's audit log and prints the requests per bound pod by client (User-Agent, or
the controller's service account), verb, resource and answer code; ``--pprof N`` saves the
server's CPU profile of the workload's first N seconds (``go tool pprof -top``).

Workloads (test/integration/scheduler_perf/dra/performance-config.yaml, re-created here):
- ``template``: SchedulingWithResourceClaimTemplate — N nodes x 10 devices (one driver, one
  DeviceClass ``device.driver == ...``, a template asking for 1 device); init pods are created
  and scheduled first, then the measured pods (2,500 + 2,500 on 500 nodes).
- ``steady-empty`` / ``steady-half`` / ``steady-full``: SteadyStateClusterResourceClaimTemplate —
  0 / N*5 / N*10-10 claims pre-allocated, then 10 pods kept in flight for a fixed duration: each
  bound pod is force-deleted and replaced.
- ``ceiling``: no scheduler at all; a minimal async client issues per pod the writes a DRA
  scheduler needs (pod create, claim create, claim status, pod status, binding) with 16
  workers: what this API server allows. Run twice, on fresh control planes: with native
  ``resource.k8s.io`` claims (the ceiling the targets use) and with kdra's objects (its
  custom-resource claims; the claim names in a pod annotation, as kdra records them), which
  separates the cost of kdra's storage format from the cost of its decisions.

Contenders, each on a fresh control plane (same binaries) per workload:
- ``kdra``: ``python -m kdra operator`` + one ``python -m kdra agent --simulate-nodes``
  serving every node (publishes the ResourceSlices, creates the Nodes; writes CDI specs to a
  tmpfs, as the DaemonSet's /var/run/cdi, and its checkpoints to disk). Each authenticates as
  deployed: its ServiceAccount's token, authorized by manifests/base's RBAC and admission
  policies (the simulating agent: manifests/simulation's own account and role, which also
  creates the Nodes); upstream's controller-manager also uses ServiceAccount
  tokens (``--use-service-account-credentials``), kube-scheduler a client certificate (as
  kubeadm sets it up);
- ``kdra-kopf``: ``kdra``, its operator started with ``KDRA_WATCH=kopf`` (the operator routes
  its hot watches through kopf handlers; one without that mode ignores the variable);
- ``kdra-native``: kdra's operator alone in the native flavour (``KDRA_FLAVOUR=native``, its
  ServiceAccount with manifests/components/native's rights) on ``upstream``'s objects — native
  templates, claims and pods, the pods with ``schedulerName: kdra-scheduler`` — and, like
  ``upstream``, Nodes and ResourceSlices created by the harness as scheduler_perf does (no
  agent: with no kubelet nothing is prepared, and in this flavour kdra's binder does not wait
  for preparation). kube-controller-manager runs without its resourceclaim-controller: kdra's
  claim controller generates and releases the claims. Measured: the operator, against
  ``upstream``'s kube-scheduler + kube-controller-manager (the table "CPU ms per bound pod by
  process" puts them side by side);
- ``upstream``: kube-scheduler + kube-controller-manager's resourceclaim-controller with native
  resource.k8s.io/v1 objects; the harness creates Nodes and ResourceSlices, as scheduler_perf.
Both the scheduler and the controller-manager get client QPS/burst 5000 (scheduler_perf runs
them unthrottled too; the defaults, 50 and 20 QPS, would cap upstream far below the API server).

Rounds (``--rounds N``): each 500-node workload runs N times per contender, the order
alternating (kdra, upstream, then upstream, kdra, ...), so a slow spell of this shared machine
that lasts minutes hits both alike. Every run is a row of the first table; the ratios and
targets use each contender's runs pooled (pods summed over seconds summed; p50/p99 and peak
RSS: the mean and the maximum over the rounds), and list the ratio of each round.
``--compare A/B`` picks the two contenders the ratio table compares (default
``kdra/upstream``, or ``kdra-native/upstream`` when kdra does not run; e.g.
``kdra-kopf/kdra``, ``kdra-native/kdra``); the targets are printed for kdra/upstream only.

Measured: pods/s over the measured phase (pods bound / (last binding - first create)),
create->bound latency from client-side timestamps (create call returned; first watch event
with spec.nodeName), CPU seconds of the contender's processes during the measured phase
(/proc utime+stime) and their peak RSS (VmHWM); from kube-apiserver's /metrics, the write
requests and the watch events (and their bytes) it sent in the phase, per bound pod. Prints
tables; asserts nothing.

The code, by responsibility (bench/, all imported by this CLI): objects.py (the workloads' API
objects), contenders.py (kdra, kdra-kopf, kdra-native, upstream and their processes),
workloads.py (template,
steady, preallocate, ceiling), measurement.py (CPU/RSS, profiles, audit), runner.py (one run on
a fresh control plane), report.py (Result, pooling, tables, targets); kapi.py the API client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from contenders import Contender, Kdra, KdraKopf, KdraNative, Upstream
from measurement import Profiler, summarize_profile
from objects import DEVICES_PER_NODE, ROOT
from report import (
    COMPARE,
    Result,
    cpu_table,
    default_compare,
    machine,
    sweep_table,
    table,
    targets,
    watch_table,
    write_block,
    writes_table,
)
from runner import run_ceiling, run_one
from workloads import STEADY_IN_FLIGHT, Params

WORKLOADS = ("template", "steady-empty", "steady-half", "steady-full", "ceiling")
SWEEP_MAX_PODS = 2500  # per phase: the 500-node size of scheduler_perf's template workload


def schedule(contenders: list[type[Contender]],
             rounds: int) -> list[tuple[int, type[Contender]]]:
    """(round, contender) in running order: the order reverses every round (A B, B A, A B
    ...), so a drift of the machine's speed hits every contender alike."""
    order: list[tuple[int, type[Contender]]] = []
    for round_ in range(1, rounds + 1):
        kinds = contenders if round_ % 2 else contenders[::-1]
        order += [(round_, kind) for kind in kinds]
    return order


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="all",
                        help=f"comma-separated from {', '.join(WORKLOADS)}, or all")
    parser.add_argument("--contenders", default="kdra,upstream",
                        help="comma-separated from kdra, kdra-kopf, kdra-native, upstream")
    parser.add_argument("--compare", default="", metavar="A/B",
                        help="the two contenders the ratio table compares, A/B (default "
                             f"{'/'.join(COMPARE)}, or kdra-native/upstream when kdra does "
                             "not run; the targets are printed for kdra/upstream only)")
    parser.add_argument("--quick", action="store_true",
                        help="100 nodes, 500+500 pods, 20 s steady state")
    parser.add_argument("--nodes", type=int, default=0, help="override the node count")
    parser.add_argument("--duration", type=float, default=0, help="steady-state seconds")
    parser.add_argument("--profile", action="store_true",
                        help="attach py-spy (from the venv) to kdra's processes during "
                             "measured phases; summaries printed and kept in --out")
    parser.add_argument("--pods", type=int, default=0,
                        help="override the init and measured pod counts (default nodes x 5)")
    parser.add_argument("--sweep", default="",
                        help="also run the template workload at these node counts, e.g. "
                             "100,2000 (pods: nodes x 5, at most 2,500 + 2,500)")
    parser.add_argument("--audit", action="store_true",
                        help="kube-apiserver audit log; prints requests per pod by client "
                             "(diagnosis: the log costs the server CPU)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run each 500-node workload this many times per contender, "
                             "alternating the order (kdra first, then upstream first ...); "
                             "ratios pool the rounds")
    parser.add_argument("--pprof", type=int, default=0, metavar="SECONDS",
                        help="kube-apiserver CPU profile of the workload's first SECONDS, "
                             "saved as kube-apiserver.pprof in the run's directory")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for logs, profiles and results.json")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the report (machine, command, tables) to this file")
    args = parser.parse_args(argv)

    nodes = args.nodes or (100 if args.quick else 500)
    pods = args.pods or nodes * DEVICES_PER_NODE // 2
    params = Params(nodes=nodes, init_pods=pods, measure_pods=pods,
                    duration=args.duration or (20.0 if args.quick else 60.0),
                    stall=45.0 if args.quick else 90.0, audit=args.audit,
                    pprof=args.pprof)
    workloads = list(WORKLOADS) if args.workloads == "all" else args.workloads.split(",")
    kinds: dict[str, type[Contender]] = {k.name: k for k in (Kdra, KdraKopf, KdraNative,
                                                                 Upstream)}
    contenders = [kinds[c] for c in args.contenders.split(",")]
    names = [k.name for k in contenders]
    if not args.compare:
        args.compare = "/".join(default_compare(names))
    pair = args.compare.split("/")
    if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(kinds):
        parser.error(f"--compare: two different contenders A/B from {', '.join(kinds)}")
    compare = (pair[0], pair[1])
    if compare != COMPARE and not set(compare) <= set(names):
        parser.error(f"--compare {args.compare}: both must be among --contenders")
    base = args.out or Path(tempfile.mkdtemp(prefix="kdra-scale-"))
    base.mkdir(parents=True, exist_ok=True)
    profiler = Profiler(args.profile, base)
    if args.profile and not profiler.enabled:
        print("py-spy not found in the venv: pip install py-spy; profiling off")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    print(f"kdra scale benchmark: {nodes} nodes x {DEVICES_PER_NODE} devices, "
          f"{params.init_pods}+{params.measure_pods} pods, steady {params.duration:.0f}s, "
          f"commit {commit}, {os.cpu_count()} cores; work dir {base}", flush=True)

    results: list[Result] = []
    ceiling: Result | None = None
    own_ceiling: Result | None = None  # the same writes on kdra's objects
    started = time.monotonic()
    swept: list[tuple[int, Result]] = []

    def report(final: bool) -> list[str]:
        """The tables so far; written to --markdown after every run (a crash keeps them)."""
        lines = [table(results, ceiling, own_ceiling, compare), ""]
        cpu = cpu_table(results)
        if cpu:
            lines += ["CPU ms per bound pod by process (counted: the contender's own processes; "
                      "the others are the control plane's):", "", cpu, ""]
        writes = writes_table(results)
        if writes:
            lines += ["API writes per bound pod (kube-apiserver's apiserver_request_total; the "
                      "harness's pod creates and deletes included):", "", writes, ""]
        watch = watch_table(results)
        if watch:
            lines += ["Watch events sent per bound pod (kube-apiserver's "
                      "apiserver_watch_events_total and _sizes, every watcher):", "", watch, ""]
        if swept:
            lines += ["Template workload by cluster size:", "", sweep_table(swept), ""]
        if compare == COMPARE:
            lines += [line + "  " for line in targets(results, ceiling, own_ceiling)]
        if args.markdown:
            command = "bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
            elapsed = time.monotonic() - started
            write_block(args.markdown, "\n".join([
                f"Run: `.venv/bin/python {command}` — {time.strftime('%Y-%m-%d %H:%M %Z')}, "
                f"commit `{commit}`, {elapsed / 60:.0f} min"
                f"{'' if final else ' so far (still running)'}.  ",
                f"Machine: {machine()}.  ",
                f"Size: {nodes} nodes x {DEVICES_PER_NODE} devices, {params.init_pods} + "
                f"{params.measure_pods} pods (template), steady state {params.duration:.0f} s "
                f"with {STEADY_IN_FLIGHT} pods in flight"
                f"{'' if args.rounds == 1 else f'; {args.rounds} rounds per contender'}.",
                "", *lines, ""]))
        return lines

    for workload in workloads:
        if workload == "ceiling":
            print("ceiling ...", flush=True)
            ceiling = asyncio.run(run_ceiling(params, base, kdra_objects=False))
            print(f"  ceiling: {ceiling.rate:.1f} pods/s", flush=True)
            own_ceiling = asyncio.run(run_ceiling(params, base, kdra_objects=True))
            print(f"  ceiling on kdra's objects: {own_ceiling.rate:.1f} pods/s", flush=True)
            report(final=False)
            continue
        for round_, kind in schedule(contenders, args.rounds):
            tag = workload if args.rounds == 1 else f"{workload}-r{round_}"
            print(f"{workload} / {kind.name}"
                  f"{'' if args.rounds == 1 else f' (round {round_})'} ...", flush=True)
            result = asyncio.run(run_one(kind, workload, params, base, profiler, tag, round_))
            results.append(result)
            report(final=False)
            print(f"  {result.pods} pods in {result.seconds:.1f}s = {result.rate:.1f} pods/s, "
                  f"p50 {1000 * result.p50:.0f} ms, p99 {1000 * result.p99:.0f} ms, "
                  f"CPU {result.cpu:.1f}s, peak RSS {result.rss:.0f} MiB {result.note}",
                  flush=True)
    for count in [int(n) for n in args.sweep.split(",") if n.strip()]:
        each = min(count * DEVICES_PER_NODE // 2, SWEEP_MAX_PODS)
        sweep_params = replace(params, nodes=count, init_pods=each, measure_pods=each)
        for kind in contenders:
            print(f"template at {count} nodes ({each}+{each} pods) / {kind.name} ...",
                  flush=True)
            result = asyncio.run(run_one(kind, "template", sweep_params, base, profiler,
                                         tag=f"template-{count}"))
            swept.append((count, result))
            print(f"  {result.pods} pods in {result.seconds:.1f}s = {result.rate:.1f} pods/s "
                  f"{result.note}", flush=True)
            report(final=False)
    print(f"\ntotal {time.monotonic() - started:.0f}s\n")
    print("\n".join(report(final=True)))
    if args.markdown:
        print(f"report: {args.markdown}")
    profiles = sorted(base.glob("*-kdra-*.txt"))
    for path in profiles:
        print()
        print(summarize_profile(path))
    (base / "results.json").write_text(json.dumps({
        "commit": commit, "nodes": nodes, "params": params.__dict__,
        "results": [r.__dict__ | {"rate": r.rate} for r in results],
        "ceiling": ceiling.__dict__ | {"rate": ceiling.rate} if ceiling else None,
        "ceiling_kdra_objects": (own_ceiling.__dict__ | {"rate": own_ceiling.rate}
                                 if own_ceiling else None),
        "sweep": [r.__dict__ | {"nodes": n, "rate": r.rate} for n, r in swept],
    }, indent=2, default=str))
    print(f"\nresults: {base / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
