"""What one Prometheus scrape of the utilisation gauges costs the operator's event loop.

The operator computes ``kdra_devices`` & co. when scraped (kdra.operator.utilisation), on its
event loop, from its caches: the binder's snapshot (slices, classes, selector memos) and the
claim store. This builds those caches for a cluster of N nodes with 8 GPUs each, two
DeviceClasses and half the GPUs allocated to one-GPU claims, and times the computation:
cold (the first scrape evaluates every class selector on every device), warm (nothing changed
since the last scrape) and churn (between two scrapes 1 % of the claims moved to another GPU of
their node: new versions, other devices held).

    .venv/bin/python bench/utilisation.py [--nodes 500] [--repeat 20]

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from kdra.dra.allocator import Snapshot
from kdra.dra.models import parse_class, parse_slice
from kdra.operator.utilisation import ClaimRows, figures

GPU = "gpu.kdra.dev"


def gpu_slice(node: str, count: int) -> dict[str, Any]:
    return {"metadata": {"name": f"{node}-gpu"},
            "spec": {"driver": GPU, "nodeName": node,
                     "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {
                         "productName": {"string": "NVIDIA H100 80GB HBM3"},
                         "index": {"int": i}}} for i in range(count)]}}


def claim(index: int, node: str, device: int) -> dict[str, Any]:
    return {"metadata": {"name": f"c{index}", "namespace": f"team-{index % 20}",
                         "uid": f"uid-{index}", "resourceVersion": "1"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": GPU}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": GPU, "pool": node, "device": f"gpu-{device}"}]}},
                "reservedFor": [{"resource": "pods", "name": f"p{index}", "uid": f"u{index}"}]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    from kdra.dra import cel

    cel.warm_up()  # the operator does at start-up
    classes = [
        {"metadata": {"name": GPU}, "spec": {"selectors": [
            {"cel": {"expression": f'device.driver == "{GPU}"'}}]}},
        {"metadata": {"name": "h100"}, "spec": {"selectors": [{"cel": {"expression":
            f'device.attributes["{GPU}"].productName.contains("H100")'}}]}},
    ]
    snapshot = Snapshot.build(
        slices=[parse_slice(gpu_slice(f"node-{n}", args.gpus)) for n in range(args.nodes)],
        classes=[parse_class(c) for c in classes])
    claims = [claim(n * args.gpus + g, f"node-{n}", g)
              for n in range(args.nodes) for g in range(args.gpus // 2)]
    rows = ClaimRows()  # as the operator keeps it between scrapes
    started = time.process_time()  # CPU time: what the event loop gives up, even when busy
    found = figures(snapshot, claims, rows)
    cold = time.process_time() - started
    warm = []
    for _ in range(args.repeat):
        started = time.process_time()
        figures(snapshot, claims, rows)
        warm.append(time.process_time() - started)
    churn = []
    for round_ in range(args.repeat):
        for i in range(round_ % 100, len(claims), 100):  # 1 %: a claim moves to another GPU
            old = claims[i]
            node = old["status"]["allocation"]["devices"]["results"][0]["pool"]
            moved = claim(i, node, (i % (args.gpus // 2)) + (args.gpus // 2) * (round_ % 2 == 0))
            moved["metadata"]["resourceVersion"] = str(round_ + 2)
            claims[i] = moved
        started = time.process_time()
        figures(snapshot, claims, rows)
        churn.append(time.process_time() - started)
    series = len(found.devices) * 3 + len(found.pools) + len(found.namespaces)
    print(f"{args.nodes} nodes x {args.gpus} GPUs, 2 classes, {len(claims)} allocated claims: "
          f"{series} series before the label limits")
    print(f"scrape computation (CPU time): cold {cold * 1000:.1f} ms, warm median "
          f"{statistics.median(warm) * 1000:.1f} ms (max {max(warm) * 1000:.1f} ms) "
          f"over {args.repeat} scrapes")
    print(f"scrape computation after 1 % of the claims changed: median "
          f"{statistics.median(churn) * 1000:.1f} ms (max {max(churn) * 1000:.1f} ms)")


if __name__ == "__main__":
    main()
