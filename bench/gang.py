"""Gang benchmark (issue 40): kdra's joint placement of gangs, in one run.

    .venv/bin/python bench/gang.py [--quick] [--markdown bench/RESULTS.md]

1. **Placement time** of gangs of 8, 16, 32 and 64 pods x 4 GPUs at 500 nodes x 8 GPUs, with
   the cluster a third full of one-GPU pods (spread at random): the joint search
   (``kdra.dra.allocator.gangplace.gang_search``, run to its end as the binder runs it in
   slices), each gang then assumed as the binder does; median and p99 per gang. Also with a
   gang-wide ``matchAttribute`` (an NVLink-like domain of 64 nodes): the search per domain.
2. **GPUs left idle by partial gangs** under a mixed arrival stream (gangs of 2-8 pods x 1-8
   GPUs and single pods, arriving in random order, each running a fixed number of ticks once
   whole): kdra's joint placement against pod-by-pod placement as upstream allocates a gang's
   devices (each pod placed alone when it fits, binpack). A pod of a gang not yet whole holds
   its GPUs and runs nothing: those GPUs are *idle*. Reported: the mean share of GPUs idle
   that way, the share busy with running work, and the pods completed.

In process, over the real allocator (``kdra.dra.allocator``: snapshot, Placing, assume); no
API server (the binder's writes per pod are the same either way). Prints figures; asserts
nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from kdra.dra import models
from kdra.dra.allocator import NodeInfo, Snapshot, place
from kdra.dra.allocator.gang import GangOutcome, GangSearch
from kdra.dra.allocator.gangplace import GangPod, Pick, gang_search

DRIVER = "gpu.kdra.dev"
DOMAIN = f"{DRIVER}/nvlinkDomain"
STEPS = 1_000_000  # the binder's default per-pod budget (a gang gets it times its pods)


def gpu_class() -> models.DeviceClass:
    return models.parse_class({"metadata": {"name": DRIVER}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})


def slice_for(node: str, count: int, domain: str) -> models.ResourceSlice:
    return models.parse_slice({
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {"driver": DRIVER, "nodeName": node,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {
                     "productName": {"string": "NVIDIA H100 80GB HBM3"},
                     "nvlinkDomain": {"string": domain}}} for i in range(count)]}})


def claim(name: str, gpus: int) -> models.ResourceClaim:
    return models.parse_claim({"metadata": {"name": name, "namespace": "bench"},
                        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                            "deviceClassName": DRIVER, "count": gpus}}]}}})


def cluster(nodes: int, per_node: int) -> tuple[Snapshot, list[NodeInfo]]:
    infos = [NodeInfo(f"node-{i:04d}", {"kubernetes.io/hostname": f"node-{i:04d}"})
             for i in range(nodes)]
    snapshot = Snapshot.build([slice_for(n.name, per_node, f"nv-{i // 64}")
                               for i, n in enumerate(infos)], [gpu_class()])
    return snapshot, infos


def search_as_the_binder(search: GangSearch[Pick], pods: int) -> GangOutcome[Pick]:
    """Run a gang search as the binder does: in slices, within its budget (steps and the
    deadline: the pod's 10 s times its pods, at most 60 s)."""
    deadline = time.monotonic() + min(10.0 * pods, 60.0)
    while True:
        outcome = search.advance(1_000)
        if outcome is not None:
            return outcome
        if search.steps >= STEPS * pods or time.monotonic() >= deadline:
            return search.give_up()


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --------------------------------------------------------------------------- 1. time


def placement_times(sizes: list[int], gangs: int, nodes: int, match: bool
                    ) -> list[tuple[int, int, float, float, int, int]]:
    """(gang size, gangs placed, median s, p99 s, mean search steps, searches out of budget)
    per size; the sizes' runs stop at the first gang that does not fit."""
    rows = []
    for size in sizes:
        snapshot, infos = cluster(nodes, 8)
        rng = random.Random(size)
        for i in range(nodes * 8 // 3):  # a third full, at random
            single = claim(f"fill-{i}", 1)
            node = infos[rng.randrange(nodes)]
            filled = place(snapshot, [single], [node])
            if filled.placements:
                snapshot.assume(single, filled.placements[node.name].results[0])
        seconds: list[float] = []
        steps: list[int] = []
        exhausted = 0
        for g in range(gangs):
            claims = [claim(f"g{g}-p{p}", 4) for p in range(size)]
            began = time.perf_counter()
            search = gang_search(snapshot, [GangPod([c], infos) for c in claims],
                                 steps=STEPS * size, match_attribute=DOMAIN if match else "")
            outcome = search_as_the_binder(search, size)
            elapsed = time.perf_counter() - began
            if outcome.choices is None:
                exhausted += outcome.exhausted
                break
            seconds.append(elapsed)
            steps.append(outcome.steps)
            for c, choice in zip(claims, outcome.choices, strict=True):
                snapshot.assume(c, choice.payload.placement.results[0])
        rows.append((size, len(seconds), statistics.median(seconds) if seconds else 0.0,
                     quantile(seconds, 0.99) if seconds else 0.0,
                     int(statistics.mean(steps)) if steps else 0, exhausted))
    return rows


# --------------------------------------------------------------------------- 2. idle


@dataclass
class Job:
    name: str
    pods: int
    gpus: int
    placed: dict[int, models.ResourceClaim] = field(default_factory=dict)
    left: int = 0  # ticks left once running


def stream(count: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    for i in range(count):
        if rng.random() < 0.4:
            jobs.append(Job(f"s{i}", 1, rng.choice([1, 2, 4])))
        else:
            jobs.append(Job(f"g{i}", rng.randint(2, 8), rng.choice([1, 2, 4, 8])))
    return jobs


def simulate(joint: bool, jobs: list[Job], nodes: int, ticks: int, duration: int,
             arrivals: int) -> tuple[float, float, int]:
    """(mean idle share, mean busy share, pods completed)."""
    snapshot, infos = cluster(nodes, 8)
    total = nodes * 8
    queue: deque[Job] = deque()
    running: list[Job] = []
    waiting = [Job(j.name, j.pods, j.gpus) for j in jobs]
    idle_shares, busy_shares = [], []
    completed = 0
    for _ in range(ticks):
        for _ in range(arrivals):
            if waiting:
                queue.append(waiting.pop(0))
        for job in list(running):  # finish
            job.left -= 1
            if job.left <= 0:
                running.remove(job)
                completed += job.pods
                for c in job.placed.values():
                    snapshot.forget(c.key)
        for job in list(queue):
            if joint:
                claims = [claim(f"{job.name}-p{p}", job.gpus) for p in range(job.pods)]
                outcome = search_as_the_binder(gang_search(
                    snapshot, [GangPod([c], infos) for c in claims], steps=STEPS * job.pods),
                    job.pods)
                if outcome.choices is not None:
                    for p, (c, choice) in enumerate(zip(claims, outcome.choices, strict=True)):
                        snapshot.assume(c, choice.payload.placement.results[0])
                        job.placed[p] = c
            else:  # pod by pod, as upstream: each pod alone, binpack
                for p in range(job.pods):
                    if p in job.placed:
                        continue
                    c = claim(f"{job.name}-p{p}", job.gpus)
                    alone = place(snapshot, [c], infos)
                    if not alone.placements:
                        break
                    best = min(alone.placements.values(),
                               key=lambda pl: (sum(pl.free_after.values()), pl.node))
                    snapshot.assume(c, best.results[0])
                    job.placed[p] = c
            if len(job.placed) == job.pods:
                queue.remove(job)
                job.left = duration
                running.append(job)
        partial = sum(len(j.placed) * j.gpus for j in queue)
        busy = sum(j.pods * j.gpus for j in running)
        idle_shares.append(partial / total)
        busy_shares.append(busy / total)
    return statistics.mean(idle_shares), statistics.mean(busy_shares), completed


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer gangs and ticks")
    parser.add_argument("--markdown", type=Path, help="append the figures to this file")
    args = parser.parse_args()
    gangs, ticks = (2, 30) if args.quick else (5, 80)
    lines = [f"Run: `.venv/bin/python bench/gang.py{' --quick' if args.quick else ''}` — "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, python "
             f"{sys.version.split()[0]}.", "",
             "| gangs of | GPUs/pod | constraint | gangs placed | median s | p99 s | "
             "steps/gang | out of budget |", "|---:|---:|---|---:|---:|---:|---:|---:|"]
    print(lines[0])
    for match in (False, True):
        for size, placed, median, p99, steps, exhausted in placement_times(
                [8, 16, 32, 64], gangs, 500, match):
            row = (f"| {size} | 4 | {'nvlinkDomain' if match else '-'} | {placed} | "
                   f"{median:.3f} | {p99:.3f} | {steps} | {exhausted} |")
            lines.append(row)
            print(row, flush=True)
    lines += ["", "| placement | idle GPUs (partial gangs) | busy GPUs (running) | "
              "pods completed |", "|---|---:|---:|---:|"]
    jobs = stream(400, seed=40)
    for joint in (True, False):
        idle, busy, done = simulate(joint, jobs, nodes=32, ticks=ticks, duration=6,
                                    arrivals=4)
        row = (f"| {'kdra joint' if joint else 'pod by pod (upstream)'} | {100 * idle:.1f}% "
               f"| {100 * busy:.1f}% | {done} |")
        lines.append(row)
        print(row, flush=True)
    if args.markdown:
        with args.markdown.open("a") as out:
            out.write("\n".join(["", "## Gangs (bench/gang.py)", "", *lines, ""]))


if __name__ == "__main__":
    main()
