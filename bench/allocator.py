"""Allocator benchmark: place pods one after another until the cluster is ~80% full; and the
adversarial shape (issue 22, attack 9) against the binder's search budget.

    .venv/bin/python bench/allocator.py [--quick] [--profile]
    .venv/bin/python bench/allocator.py --adversarial [--quick]

Clusters of GPU nodes (one pool per node; attributes like NVIDIA's: productName, uuid, index,
pcieRoot, driverVersion; capacity memory), a DeviceClass with a CEL selector, and pods of
- one device (request selector on driverVersion), or
- four devices sharing a pcieRoot (matchAttribute constraint).

Each pod goes through the cluster entry point (``place``) over all nodes; the placement is
then assumed (marked in use) in the snapshot, as the binder does. Policies:
- ``rotate``: first fit, starting where the previous pod's scan stopped (kube-scheduler's
  rotating start index), ``limit=1``;
- ``first``: first fit always from node 0 (worst case for skipping full nodes), ``limit=1``;
- ``binpack``: the binder's default: among the first ``feasible_nodes_to_find(nodes)``
  feasible nodes from node 0 (kube-scheduler's adaptive window: 230 of 500), the one with the
  fewest free matching devices left.

Prints figures; asserts nothing. Timings include ``place`` and picking the node, not the
``assume`` bookkeeping.

``--adversarial``: pods whose search would try every combination — five one-device claims
ahead of a claim for *all* of a node's GPUs, which those claims take first — among a stream
of one-GPU pods, scheduled by kdra's real binder (``kdra.operator.scheduler``: its loop, its
long-search slices, its budget). The binder's writes go to an in-memory stand-in for the API
server that answers at once and reports every allocated device Ready (as the node agent
would), so the figures are the scheduling loop's alone: the worst hostile search (it must end
within its deadline), and how many one-GPU pods were bound while hostile searches ran. For
comparison it first times the same pod with ``place`` unbounded (the loop before the budget:
nobody else is scheduled meanwhile), and the shape upstream stops at once (a device held
elsewhere).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import pstats
import sys
import time
from dataclasses import dataclass

from kdra.dra.allocator import NodeInfo, Placement, Snapshot, place
from kdra.dra.models import (
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    parse_claim,
    parse_class,
    parse_slice,
)
from kdra.dra.scheduling import feasible_nodes_to_find

DRIVER = "gpu.kdra.dev"
CLASS_SELECTOR = (
    f'device.driver == "{DRIVER}" && '
    f'device.attributes["{DRIVER}"].productName.startsWith("NVIDIA")'
)
ONE_GPU_SELECTOR = f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("535.0.0"))'


def gpu_slice(node: str, count: int) -> ResourceSlice:
    roots = 2
    devices = []
    for i in range(count):
        uuid = "GPU-" + hashlib.sha1(f"{node}/{i}".encode()).hexdigest()[:32]
        devices.append({
            "name": f"gpu-{i}",
            "attributes": {
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
                "uuid": {"string": uuid},
                "index": {"int": i},
                "pcieRoot": {"string": f"pci0000:{i * roots // count:02x}"},
                "driverVersion": {"version": "550.54.15"},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        })
    return parse_slice({
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    })


def gpu_class() -> DeviceClass:
    return parse_class({"metadata": {"name": DRIVER},
                        "spec": {"selectors": [{"cel": {"expression": CLASS_SELECTOR}}]}})


def pod_claim(index: int, size: int) -> ResourceClaim:
    exactly: dict[str, object] = {"deviceClassName": DRIVER}
    devices: dict[str, object] = {"requests": [{"name": "gpu", "exactly": exactly}]}
    if size == 1:
        exactly["selectors"] = [{"cel": {"expression": ONE_GPU_SELECTOR}}]
    else:
        exactly["count"] = size
        devices["constraints"] = [{"matchAttribute": f"{DRIVER}/pcieRoot"}]
    return parse_claim({"metadata": {"name": f"pod-{index}-gpu", "namespace": "bench"},
                        "spec": {"devices": devices}})


@dataclass
class Run:
    placed: int
    seconds: list[float]
    cel: list[int]
    wall: float
    warmup: int
    """Pods placed until every node had been evaluated once (every device's CEL memo warm)."""


def run(node_count: int, per_node: int, size: int, policy: str, fill: float) -> Run:
    nodes = [NodeInfo(f"node-{i:05d}", {"kubernetes.io/hostname": f"node-{i:05d}"})
             for i in range(node_count)]
    snapshot = Snapshot.build([gpu_slice(n.name, per_node) for n in nodes], [gpu_class()])
    target = int(node_count * per_node * fill) // size
    start = 0
    seconds: list[float] = []
    cel: list[int] = []
    placed = 0
    seen: set[str] = set()
    warmup = 0
    began = time.perf_counter()
    for index in range(target):
        claim = pod_claim(index, size)
        before = snapshot.stats.cel_evaluations
        t0 = time.perf_counter()
        outcome = place(snapshot, [claim], nodes,
                        limit=feasible_nodes_to_find(node_count) if policy == "binpack" else 1,
                        start=start if policy == "rotate" else 0)
        chosen: Placement | None = None
        if outcome.placements:
            if policy == "binpack":
                chosen = min(outcome.placements.values(),
                             key=lambda p: sum(p.free_after.values()))
            else:
                chosen = next(iter(outcome.placements.values()))
        t1 = time.perf_counter()
        seconds.append(t1 - t0)
        cel.append(snapshot.stats.cel_evaluations - before)
        if not warmup:
            seen.update(outcome.placements, outcome.reasons)
            if len(seen) == node_count:
                warmup = index + 1
        if chosen is None:
            break
        start = outcome.next_start
        snapshot.assume(claim, chosen.results[0])
        placed += 1
    wall = time.perf_counter() - began
    return Run(placed, seconds, cel, wall, warmup=warmup or len(seconds))


def report(name: str, result: Run) -> None:
    def ms(values: list[float], q: float) -> str:
        ordered = sorted(values)
        return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.2f} ms"

    warm = result.seconds[result.warmup:]
    cel_cold, cel_warm = result.cel[:result.warmup], result.cel[result.warmup:]
    print(f"{name}: {result.placed} pods in {result.wall:.1f} s = "
          f"{result.placed / result.wall:.0f} placements/s")
    print(f"    per pod, all:            median {ms(result.seconds, 0.5)}, "
          f"p99 {ms(result.seconds, 0.99)}, max {ms(result.seconds, 1.0)}")
    if warm:
        print(f"    per pod, after warm-up:  median {ms(warm, 0.5)}, p99 {ms(warm, 0.99)}, "
              f"max {ms(warm, 1.0)}")
    print(f"    CEL evaluations/placement: warm-up ({result.warmup} pods, until every node "
          f"was seen) {sum(cel_cold) / max(1, len(cel_cold)):.1f}, after "
          + (f"{sum(cel_warm) / len(cel_warm):.3f}" if cel_warm else "n/a")
          + f"; total {sum(result.cel)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller clusters, fewer runs")
    parser.add_argument("--profile", action="store_true", help="cProfile the 5000-node run")
    parser.add_argument("--adversarial", action="store_true",
                        help="the search budget against hostile pods (issue 22, attack 9)")
    args = parser.parse_args()
    if args.adversarial:
        from adversarial import run_adversarial

        run_adversarial(quick=args.quick)
        return
    if args.quick:
        scenarios = [(100, 10, 1, "rotate"), (100, 10, 4, "rotate"), (1000, 8, 1, "rotate"),
                     (100, 10, 1, "binpack")]
    else:
        scenarios = [(500, 10, 1, "rotate"), (500, 10, 4, "rotate"), (500, 10, 1, "first"),
                     (500, 10, 1, "binpack"), (5000, 8, 1, "rotate"), (5000, 8, 4, "rotate"),
                     (5000, 8, 1, "first")]
    print(f"python {sys.version.split()[0]}; fill to 80%; times per pod (place + choose)")
    for nodes, per_node, size, policy in scenarios:
        name = f"{nodes} nodes x {per_node}, {size}-GPU pods, {policy}"
        if args.profile and nodes >= 1000 and policy == "rotate" and size == 1:
            profiler = cProfile.Profile()
            profiler.enable()
            result = run(nodes, per_node, size, policy, 0.8)
            profiler.disable()
            report(name, result)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        else:
            report(name, run(nodes, per_node, size, policy, 0.8))


if __name__ == "__main__":
    main()
