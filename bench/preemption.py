"""Preemption decision time at scale (issue 27): kdra's real binder on a full cluster.

Every node has 8 GPUs, each held by a bound one-GPU pod of some lower priority; a pod of
priority 1000 asking for 2 GPUs arrives. Its attempt runs the binder's whole path: the
allocation over every node (which fails: the cluster is full), then the preemption decision
(:class:`~kdra.operator.scheduler.preemption.Preemption`: candidates per node, reprieves with the
allocator's fit tests, PodDisruptionBudgets, the node choice), then the writes, which go to
:class:`InstantApi` (an in-memory stand-in answering at once). Printed per scenario:

- decision: the preemption decision alone (``Preemption._decide``: victims on every candidate
  node, fit tests, the choice) — what ``kdra_preemption_decision_seconds`` observes;
- attempt: the pod's whole scheduling attempt (allocation over all nodes + decision + writes).

Scenarios: every node a candidate (kube-scheduler-style sampling stops at 100 candidates;
and with no sampling, every node evaluated); one candidate node among 500 (the others' pods
are all more important); PodDisruptionBudgets covering a fifth of the pods. Prints figures;
asserts nothing.

    .venv/bin/python bench/preemption.py [--nodes 500] [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from typing import Any

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION, FINALIZER
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings
from kdra.operator.scheduler.preemption import PreemptionSettings

DRIVER = "gpu.kdra.dev"
NS = "bench"
GPUS = 8
JSON = dict[str, Any]


class InstantApi:
    """Answers every call at once; counts evictions; lists the PodDisruptionBudgets given."""

    def __init__(self, pdbs: list[JSON]) -> None:
        self.pdbs = pdbs
        self.evictions = 0

    async def patch(self, res: Resource, name: str, body: JSON, *_: Any, **__: Any) -> JSON:
        return {"metadata": {"name": name, "namespace": NS}, "status": body.get("status", {})}

    async def create(self, res: Resource, body: JSON, *_: Any) -> JSON:
        return body

    async def request(self, method: str, path: str, **_: Any) -> JSON:
        self.evictions += 1
        return {}

    async def list(self, res: Resource, *_: Any, **__: Any) -> list[JSON]:
        return self.pdbs


def gpu_slice(node: str) -> JSON:
    return {"metadata": {"name": f"{node}-gpu"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}}
                                 for i in range(GPUS)]}}


def node_object(name: str) -> JSON:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}}


def claim(name: str, count: int = 1, holder: tuple[str, str, int] | None = None) -> JSON:
    """A claim for ``count`` GPUs; allocated to ``holder`` = (pod, node, gpu index) if given."""
    status: JSON = {}
    if holder is not None:
        pod, node, index = holder
        status = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": node, "device": f"gpu-{index}"}]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]}
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": DRIVER, "count": count}}]}},
            "status": status}


def pod(name: str, priority: int, node: str | None = None, group: int = 0) -> JSON:
    spec: JSON = {"schedulerName": "kdra-scheduler", "priority": priority,
                  "containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"group": f"g{group}"},
                         "annotations": {CLAIMS_ANNOTATION: json.dumps(
                             [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}])}},
            "spec": spec,
            "status": {"phase": "Running",
                       "startTime": f"2026-01-01T00:{group % 60:02d}:00Z"} if node else {}}


def build(nodes: int, *, candidates: str, pdbs: bool, max_candidates: int
          ) -> tuple[Binder, InstantApi]:
    rng = random.Random(27)
    budgets = [{"metadata": {"name": f"g{g}", "namespace": NS},
                "spec": {"selector": {"matchLabels": {"group": f"g{g}"}}},
                "status": {"disruptionsAllowed": 0}} for g in range(0, 50, 5)] if pdbs else []
    api = InstantApi(budgets)
    binder = Binder(api, EventRecorder(api), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(release_wait=0.0, flush_interval=3600,
                                            preemption=PreemptionSettings(
                                                max_candidates=max_candidates)))
    names = [f"node-{i:04d}" for i in range(nodes)]
    pods = []
    for n, node in enumerate(names):
        for index in range(GPUS):
            name = f"p-{n}-{index}"
            if candidates == "one" and n != nodes // 2:
                priority = 2000  # more important than the preemptor: never a victim
            else:
                priority = rng.randrange(0, 1000, 100)
            pods.append(pod(name, priority, node, group=rng.randrange(50)))
            binder.claims.upsert(claim(f"{name}-gpu", holder=(name, node, index)))
    binder.claims.upsert(claim("top-gpu", count=2))
    binder.prime(nodes=[node_object(n) for n in names], slices=[gpu_slice(n) for n in names],
                 classes=[{"metadata": {"name": DRIVER}, "spec": {"selectors": [
                     {"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}], pods=pods)
    return binder, api


def ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.1f}"


async def measure(binder: Binder, runs: int
                  ) -> tuple[list[float], list[float], str, int, int]:
    """Decision and whole-attempt times over ``runs``; the last choice: node, victims, PDB
    violations."""
    top = pod("top", 1000)
    key = (NS, "top")
    claims = [binder.cluster.parse(binder.claims.get((NS, "top-gpu")) or {})]
    nodes = [view.info for view in binder.cluster.node_views()]
    decisions, attempts = [], []
    chosen, victims, violations = "", 0, 0
    for _ in range(runs):
        started = time.perf_counter()
        choice = await binder.preemption._decide(key, top, claims, nodes)
        decisions.append(time.perf_counter() - started)
        assert choice is not None
        chosen, victims, violations = choice.node, len(choice.victims), choice.pdb_violations
        binder.preemption.nominations.clear()
        started = time.perf_counter()
        result = await binder._schedule(key, top)
        attempts.append(time.perf_counter() - started)
        assert result == "unschedulable", result
        binder.preemption.nominations.clear()
    await binder.stop()
    return decisions, attempts, chosen, victims, violations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}; {args.nodes} nodes x {GPUS} GPUs, every GPU held "
          f"by a one-GPU pod; preemptor: priority 1000, 2 GPUs; {args.runs} runs each")
    scenarios = [
        ("every node a candidate, sampling 100", "all", False, 100),
        (f"every node a candidate, all {args.nodes} evaluated", "all", False, args.nodes),
        ("one candidate node", "one", False, 100),
        ("every node a candidate, PDBs on 1/5 of pods", "all", True, 100),
    ]
    for name, candidates, pdbs, max_candidates in scenarios:
        binder, api = build(args.nodes, candidates=candidates, pdbs=pdbs,
                            max_candidates=max_candidates)
        decisions, attempts, chosen, victims, violations = asyncio.run(
            measure(binder, args.runs))
        warm = decisions[1:] or decisions
        print(f"{name}: decision first (cold: pools gathered, selectors evaluated) "
              f"{1000 * decisions[0]:.1f} ms, then median {ms(warm, 0.5)} ms, p99 "
              f"{ms(warm, 0.99)} ms, max {ms(warm, 1.0)} ms; whole attempt median "
              f"{ms(attempts, 0.5)} ms (mean {1000 * statistics.fmean(attempts):.1f}); chose "
              f"{chosen} with {victims} victim(s), {violations} PDB violation(s); evictions issued "
              f"{api.evictions}")


if __name__ == "__main__":
    main()
