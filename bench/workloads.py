"""The workloads of bench/scale.py, run against a contender that is set up and started:
template (init pods, then the measured pods), steady (STEADY_IN_FLIGHT pods kept in flight,
each bound one force-deleted and replaced), preallocate (the steady workloads' pre-allocated
claims) and the ceiling (the API writes of a DRA scheduler, no scheduler).

Invariant: the harness's own requests (pod creates, force-deletes, pre-allocated claims) are
the same for every contender, only the objects' API group differs (Contender.pod, claim,
allocation); times are client-side (the create call returned; the first watch event with
spec.nodeName). ``STEADY_IN_FLIGHT`` is read when a steady workload runs (bench/soak.py sets it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from contenders import Contender, Kdra
from kapi import Api, PodTracker, bounded, percentile
from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION
from measurement import Profiler, ServerUsage, Usage
from objects import (
    CREATE_CONCURRENCY,
    DEVICES_PER_NODE,
    KDRA_GROUP,
    KDRA_VERSION,
    create_native_nodes,
    kdra_claim,
    kdra_pod,
    native_allocation,
    native_claim,
    native_pod,
    node_name,
)
from report import Result

STEADY_IN_FLIGHT = 10
CEILING_WORKERS = 16


@dataclass
class Params:
    nodes: int
    init_pods: int
    measure_pods: int
    duration: float
    stall: float
    audit: bool = False  # kube-apiserver audit log; a per-client summary per run
    pprof: int = 0  # seconds of kube-apiserver CPU profile taken as the workload starts


async def create_pods(api: Api, contender: Contender, tracker: PodTracker, ns: str,
                      names: list[str]) -> None:
    async def one(name: str) -> None:
        await api.create(f"/api/v1/namespaces/{ns}/pods", contender.pod(ns, name))
        tracker.created[f"{ns}/{name}"] = time.monotonic()

    await bounded(CREATE_CONCURRENCY, [lambda n=n: one(n) for n in names])


async def preallocate(api: Api, contender: Contender, count: int) -> None:
    """scheduler_perf's createAny resourceclaim + allocResourceClaims: claims in ``init``
    allocated node by node, device by device (not reserved)."""

    async def one(i: int) -> None:
        name = f"claim-{i}"
        path = contender.claims_path("init")
        await api.create(path, contender.claim("init", name))
        node, device = node_name(i // DEVICES_PER_NODE), f"basic-device-{i % DEVICES_PER_NODE}"
        await api.patch_status(f"{path}/{name}",
                               {"status": {"allocation": contender.allocation(node, device)}})

    await bounded(CREATE_CONCURRENCY, [lambda i=i: one(i) for i in range(count)])


async def template_workload(api: Api, contender: Contender, params: Params,
                            profiler: Profiler, tag: str) -> Result:
    tracker = PodTracker()
    rv = await api.resource_version("/api/v1/pods")
    watcher = asyncio.create_task(api.watch("/api/v1/pods", rv, tracker.handle))
    result = Result(tag, contender.name)
    try:
        init = [f"init-{i}" for i in range(params.init_pods)]
        await create_pods(api, contender, tracker, "init", init)
        if not await tracker.wait_bound("init", len(init), params.stall):
            result.note = f"init stalled at {tracker.bound_in('init')}/{len(init)}"
        alloc0 = contender.allocator_seconds() if isinstance(contender, Kdra) else (0.0, 0)
        writes0, watch0 = await api.server_counters()
        usage = Usage(contender.measured)
        server = ServerUsage(contender.plane, contender.measured)
        profiler.start(tag, contender.measured)
        start = time.monotonic()
        wall = time.time()
        names = [f"test-{i}" for i in range(params.measure_pods)]
        creator = asyncio.create_task(create_pods(api, contender, tracker, "test", names))
        done = await tracker.wait_bound("test", len(names), params.stall)
        await creator
        result.extra["create_s"] = max(
            (tracker.created[f"test/{n}"] for n in names if f"test/{n}" in tracker.created),
            default=start) - start
        keys = [f"test/{n}" for n in names]
        last = max((tracker.bound[k] for k in keys if k in tracker.bound), default=start)
        result.cpu, result.rss = usage.finish()
        result.extra.update({f"cpu_{name}": cpu for name, cpu in usage.by_proc.items()})
        result.extra.update(server.finish())
        writes1, watch1 = await api.server_counters()
        result.writes, result.watch = dict(writes1 - writes0), dict(watch1 - watch0)
        result.window = (wall, time.time())
        profiler.stop()
        result.pods = sum(1 for k in keys if k in tracker.bound)
        result.seconds = last - start
        lat = tracker.latencies(keys)
        result.p50, result.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
        result.complete = done
        if not done:
            result.note = (result.note + f" measured stalled at {result.pods}/{len(names)}"
                           ).strip()
        if isinstance(contender, Kdra):
            alloc1 = contender.allocator_seconds()
            if alloc1[1] > alloc0[1]:
                result.extra["alloc_ms_per_call"] = (
                    1000 * (alloc1[0] - alloc0[0]) / (alloc1[1] - alloc0[1]))
                result.extra["alloc_calls"] = alloc1[1] - alloc0[1]
        per_node = Counter(tracker.nodes.values())
        result.extra["max_pods_per_node"] = max(per_node.values(), default=0)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        dump_timeline(tracker, contender.work / "pods-timeline.json")
    return result


def dump_timeline(tracker: PodTracker, path: Path) -> None:
    """Per pod: wall-clock time the create returned and the binding was seen (to line up
    with the contenders' logs)."""
    offset = time.time() - time.monotonic()
    path.write_text(json.dumps({
        key: {"created": created + offset, "bound": tracker.bound.get(key, 0.0) + offset,
              "node": tracker.nodes.get(key, "")}
        for key, created in tracker.created.items()}, indent=0))


async def steady_workload(api: Api, contender: Contender, params: Params,
                          profiler: Profiler, tag: str) -> Result:
    tracker = PodTracker()
    rv = await api.resource_version("/api/v1/pods")
    result = Result(tag, contender.name)
    counter = iter(range(10**9))
    deadline = 0.0
    tasks: set[asyncio.Task[None]] = set()

    async def replace(key: str) -> None:
        ns, name = key.split("/")
        await api.force_delete(f"/api/v1/namespaces/{ns}/pods/{name}")
        if time.monotonic() < deadline:
            await create_pods(api, contender, tracker, "test", [f"test-{next(counter)}"])

    def on_bound(key: str) -> None:
        if key.startswith("test/"):
            task = asyncio.create_task(replace(key))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    tracker.on_bound = on_bound
    watcher = asyncio.create_task(api.watch("/api/v1/pods", rv, tracker.handle))
    try:
        writes0, watch0 = await api.server_counters()
        usage = Usage(contender.measured)
        server = ServerUsage(contender.plane, contender.measured)
        profiler.start(tag, contender.measured)
        start = time.monotonic()
        wall = time.time()
        deadline = start + params.duration
        await create_pods(api, contender, tracker, "test",
                          [f"test-{next(counter)}" for _ in range(STEADY_IN_FLIGHT)])
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        result.cpu, result.rss = usage.finish()
        result.extra.update({f"cpu_{name}": cpu for name, cpu in usage.by_proc.items()})
        result.extra.update(server.finish())
        writes1, watch1 = await api.server_counters()
        result.writes, result.watch = dict(writes1 - writes0), dict(watch1 - watch0)
        result.window = (wall, time.time())
        profiler.stop()
        keys = [k for k, t in tracker.bound.items() if k.startswith("test/") and t <= deadline]
        result.pods = len(keys)
        result.seconds = params.duration
        lat = tracker.latencies(keys)
        result.p50, result.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
        if result.pods == 0:
            result.complete = False
            result.note = "nothing bound"
    finally:
        watcher.cancel()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(watcher, *tasks, return_exceptions=True)
        dump_timeline(tracker, contender.work / "pods-timeline.json")
    return result


async def ceiling_workload(api: Api, params: Params, workers: int,
                           kdra_objects: bool = False) -> Result:
    """The API writes a DRA scheduler + claim controller issue per pod, no decisions.

    With ``kdra_objects`` the same writes on kdra's objects: the claim is kdra's custom
    resource and the claim names go into the pod's annotation (kdra's pod patch) instead of
    ``status.resourceClaimStatuses``: what the API server allows kdra's storage format."""
    await create_native_nodes(api, params.nodes, slices=False)
    tracker = PodTracker()
    rv = await api.resource_version("/api/v1/pods")
    watcher = asyncio.create_task(api.watch("/api/v1/pods", rv, tracker.handle))
    ns = "test"
    group = f"{KDRA_GROUP}/{KDRA_VERSION}" if kdra_objects else "resource.k8s.io/v1"
    claims = f"/apis/{group}/namespaces/{ns}/resourceclaims"
    pods = f"/api/v1/namespaces/{ns}/pods"
    result = Result(f"ceiling ({workers} workers)",
                    "api-writes, kdra objects" if kdra_objects else "api-writes")
    await api.call("GET", claims, params={"limit": "1"})  # storage ready (a new CRD's is not)

    async def one(i: int) -> None:
        name = f"test-{i}"
        pod = await api.create(pods, kdra_pod(ns, name) if kdra_objects
                               else native_pod(ns, name, "none"))
        tracker.created[f"{ns}/{name}"] = time.monotonic()
        uid = pod["metadata"]["uid"]
        claim_name = f"{name}-resource"
        node = node_name(i % params.nodes)
        device = f"basic-device-{(i // params.nodes) % DEVICES_PER_NODE}"
        claim = kdra_claim(ns, claim_name) if kdra_objects else native_claim(ns, claim_name)
        claim["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}]
        await api.create(claims, claim)
        await api.patch_status(f"{claims}/{claim_name}", {"status": {
            "allocation": native_allocation(node, device),
            "reservedFor": [{"resource": "pods", "name": name, "uid": uid}]}})
        if kdra_objects:
            await api.call("PATCH", f"{pods}/{name}", {"metadata": {"annotations": {
                CLAIM_STATUSES_ANNOTATION: json.dumps({"resource": claim_name})}}},
                ctype="application/merge-patch+json")
        else:
            await api.patch_status(f"{pods}/{name}", {"status": {"resourceClaimStatuses": [
                {"name": "resource", "resourceClaimName": claim_name}]}})
        await api.create(f"/api/v1/namespaces/{ns}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    try:
        start = time.monotonic()
        await bounded(workers, [lambda i=i: one(i) for i in range(params.measure_pods)])
        await tracker.wait_bound(ns, params.measure_pods, 30)
        keys = [f"{ns}/test-{i}" for i in range(params.measure_pods)]
        last = max((tracker.bound[k] for k in keys if k in tracker.bound), default=start)
        result.pods = sum(1 for k in keys if k in tracker.bound)
        result.seconds = last - start
        lat = tracker.latencies(keys)
        result.p50, result.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return result
