"""Fragmentation benchmark (issue 26): MIG-like partitions and whole GPUs, arriving and
leaving, placed by kdra's fragmentation-aware scoring and by first-fit (upstream's order).

    .venv/bin/python bench/fragmentation.py [--nodes 8] [--gpus 8] [--arrivals 3000]
                                            [--lifetime 140] [--seed 1] [--quick]

The cluster: ``--nodes`` nodes with ``--gpus`` H100-80GB each, every GPU published as
partitionable devices (``kdra.agent.core.gpu_partitions``: the whole GPU, 1g.10gb x7, 2g.20gb x3,
3g.40gb x2, 4g.40gb, 7g.80gb, on one counter set per GPU). The stream (seeded, the same for
every contender): one request per step, a size drawn from the mix below, a lifetime drawn
from an exponential distribution (mean ``--lifetime`` steps; the default offers ~90% of the
memory slices); a request that fits nowhere is dropped (not queued) and counted as not
placed. Departures free their partition at their step, before that step's arrival.

    1g.10gb 35%  2g.20gb 20%  3g.40gb 15%  4g.40gb 10%  7g.80gb 10%  whole GPU 10%

Contenders, each through the allocator's cluster entry point (``place``), the placement
then recorded as allocated in the snapshot (as the binder does):
- **kdra**: every node evaluated, the binder's ``binpack`` choice (``best``: fewest devices
  still allocatable after the placement), candidates on the node in fragmentation-aware
  order (``kdra.dra.allocator.fragmentation``);
- **first-fit**: the first node (by name) that fits, devices in walk order — what upstream's
  allocator takes on a node, with nodes in a fixed order;
- **random-node**: a random feasible node (kube-scheduler breaks equal scores at random;
  its DRA plugin does not score devices), devices in walk order.

Reported: the share of requests placed (all, and per size), and the largest partition still
allocatable somewhere in the cluster, sampled every ``--sample`` steps (the time line shows
it per window: ``W`` whole/7g, ``4`` 4g, ``3`` 3g, ``2``, ``1``, ``.`` nothing), plus the
share of samples where a 7g (or whole GPU) was still allocatable. Prints figures; asserts
nothing. Figures go to bench/RESULTS.md by hand.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the slices' builder

from tests.unit.partition_slices import node_slices

from kdra.dra.allocator import NodeInfo, Snapshot, allocate, place
from kdra.dra.models import ResourceClaim, parse_claim, parse_class, parse_slice
from kdra.dra.scheduling import best

DRIVER = "gpu.kdra.dev"
MIG_CLASS = "mig.gpu.kdra.dev"
GPU_CLASS = "gpu.kdra.dev"
MIX = (("1g.10gb", 35), ("2g.20gb", 20), ("3g.40gb", 15), ("4g.40gb", 10), ("7g.80gb", 10),
       ("whole", 10))
LADDER = (("W", ("whole", "7g.80gb")), ("4", ("4g.40gb",)), ("3", ("3g.40gb",)),
          ("2", ("2g.20gb",)), ("1", ("1g.10gb",)))
CONTENDERS = ("kdra", "first-fit", "random-node")


def classes() -> list[object]:
    def cls(name: str, kind: str) -> object:
        return parse_class({"metadata": {"name": name}, "spec": {"selectors": [
            {"cel": {"expression": f'device.driver == "{DRIVER}" && '
                                   f'device.attributes["{DRIVER}"].type == "{kind}"'}}]}})
    return [cls(MIG_CLASS, "mig"), cls(GPU_CLASS, "gpu")]


def claim(name: str, size: str) -> ResourceClaim:
    exactly: dict[str, object] = {"deviceClassName": GPU_CLASS}
    if size != "whole":
        exactly = {"deviceClassName": MIG_CLASS, "selectors": [{"cel": {
            "expression": f'device.attributes["{DRIVER}"].profile == "{size}"'}}]}
    return parse_claim({"metadata": {"name": name, "namespace": "bench", "uid": name},
                        "spec": {"devices": {"requests": [{"name": "gpu",
                                                           "exactly": exactly}]}}})


@dataclass
class Outcome:
    placed: Counter[str] = field(default_factory=Counter)
    asked: Counter[str] = field(default_factory=Counter)
    timeline: list[str] = field(default_factory=list)
    seconds: float = 0.0


def stream(arrivals: int, lifetime: float, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    sizes = [s for s, _ in MIX]
    weights = [w for _, w in MIX]
    return [(rng.choices(sizes, weights)[0], max(1, round(rng.expovariate(1 / lifetime))))
            for _ in range(arrivals)]


def largest(snapshot: Snapshot, nodes: list[NodeInfo]) -> str:
    for mark, sizes in LADDER:
        for size in sizes:
            probe = claim("probe", size)
            if any(allocate([probe], snapshot, node) is not None for node in nodes):
                return mark
    return "."


def run(contender: str, nodes: list[NodeInfo], requests: list[tuple[str, int]],
        sample: int, seed: int) -> Outcome:
    slices = [parse_slice(s) for n in nodes for s in node_slices(n.name, f"{GPUS} x H100-80GB")]
    snapshot = Snapshot.build(slices, classes())  # type: ignore[arg-type]
    rng = random.Random(seed + 1)
    leaving: list[tuple[int, str]] = []
    outcome = Outcome()
    started = time.perf_counter()
    for step, (size, life) in enumerate(requests):
        while leaving and leaving[0][0] <= step:
            snapshot.remove_claim(heapq.heappop(leaving)[1])
        if step % sample == 0:
            outcome.timeline.append(largest(snapshot, nodes))
        wanted = claim(f"c{step}", size)
        outcome.asked[size] += 1
        if contender == "kdra":
            result = place(snapshot, [wanted], nodes)
            choice = best(result.placements, "binpack", [n.name for n in nodes])
        elif contender == "first-fit":
            choice = next(iter(place(snapshot, [wanted], nodes, limit=1,
                                     scoring=False).placements.values()), None)
        else:
            found = place(snapshot, [wanted], nodes, scoring=False).placements
            choice = found[rng.choice(sorted(found))] if found else None
        if choice is None:
            continue
        outcome.placed[size] += 1
        allocated = wanted.model_copy(update={"status": wanted.status.model_copy(
            update={"allocation": choice.results[0]})})
        snapshot.upsert_claim(allocated)
        heapq.heappush(leaving, (step + life, allocated.key))
    outcome.seconds = time.perf_counter() - started
    return outcome


GPUS = 8


def main(argv: list[str] | None = None) -> int:
    global GPUS
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--arrivals", type=int, default=3000)
    parser.add_argument("--lifetime", type=float, default=140.0)
    parser.add_argument("--sample", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="4 nodes, 800 arrivals")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    args = parser.parse_args(argv)
    if args.quick:
        args.nodes, args.arrivals, args.lifetime = 4, 800, 70.0
    GPUS = args.gpus
    nodes = [NodeInfo(f"node-{i:02d}", {}) for i in range(args.nodes)]
    requests = stream(args.arrivals, args.lifetime, args.seed)
    print(f"{args.nodes} nodes x {args.gpus} H100-80GB (partitionable), {args.arrivals} "
          f"arrivals, mean lifetime {args.lifetime:g} steps, seed {args.seed}")
    print("mix: " + ", ".join(f"{s} {w}%" for s, w in MIX))
    results = {}
    for contender in args.contenders.split(","):
        results[contender] = outcome = run(contender, nodes, requests, args.sample, args.seed)
        total = sum(outcome.placed.values())
        asked = sum(outcome.asked.values())
        per = "  ".join(f"{s} {outcome.placed[s] / max(outcome.asked[s], 1):.0%}"
                        for s, _ in MIX)
        big = sum(1 for mark in outcome.timeline if mark == "W") / max(len(outcome.timeline), 1)
        print(f"\n{contender}: placed {total}/{asked} = {total / asked:.1%} "
              f"({outcome.seconds:.1f}s)")
        print(f"  per size: {per}")
        print(f"  7g/whole still allocatable in {big:.0%} of samples")
        print(f"  largest allocatable every {args.sample} steps: {''.join(outcome.timeline)}")
    if "kdra" in results and "first-fit" in results:
        kdra, ff = results["kdra"], results["first-fit"]
        gain = sum(kdra.placed.values()) - sum(ff.placed.values())
        print(f"\nkdra placed {gain:+d} requests vs first-fit "
              f"({sum(kdra.placed.values()) / max(sum(ff.placed.values()), 1) - 1:+.1%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
