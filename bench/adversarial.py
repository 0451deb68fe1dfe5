"""The adversarial allocation shape against kdra's binder (``bench/allocator.py --adversarial``).

Hostile pods: five one-device claims ahead of a claim for every GPU of a node (allocation mode
All), which the one-device claims take first — no placement exists, and an unbounded search
tries every assignment of the five claims on every node before it says so. Between them, a
stream of one-device pods, of another driver on the same nodes (were they to take GPUs, the
hostile searches would end sooner: upstream's early stop for All sees a GPU in use). kdra's
real :class:`~kdra.operator.scheduler.Binder` schedules them all;
its writes go to :class:`InstantApi`, an in-memory stand-in that answers at once and reports
every allocated device Ready (as the node agent would), so what is measured is the scheduling
loop alone. Prints figures; asserts nothing.
"""

from __future__ import annotations

import asyncio
import copy
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.dra.allocator import NodeInfo, Snapshot, place
from kdra.dra.models import parse_claim, parse_class, parse_slice
from kdra.dra.scheduling import SEARCH_EXHAUSTED, SearchBudget
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION, FINALIZER
from kdra.kube.events import EventRecorder
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings

DRIVER = "gpu.kdra.dev"
OTHER = "nic.kdra.dev"
NS = "bench"
HOSTILE_CLAIMS = 5
JSON = dict[str, Any]


def gpu_slice(node: str, count: int, driver: str = DRIVER) -> JSON:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}", "uid": f"uid-{node}-{driver}",
                         "resourceVersion": "1"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {
                         "index": {"int": i}}} for i in range(count)]}}


def gpu_class(driver: str = DRIVER) -> JSON:
    return {"metadata": {"name": driver}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def claim(name: str, *, all_devices: bool = False, driver: str = DRIVER) -> JSON:
    exactly: JSON = {"deviceClassName": driver}
    if all_devices:
        exactly["allocationMode"] = "All"
    request: JSON = {"name": "gpu", "exactly": exactly}
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [request]}}}


def pod(name: str, claims: Sequence[str], created: float) -> JSON:
    entries = [{"name": c, "resourceClaimName": c} for c in claims]
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + "Z"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": stamp,
                         "annotations": {CLAIMS_ANNOTATION: json.dumps(entries)}},
            "spec": {"schedulerName": "kdra-scheduler", "containers": [{"name": "c"}]}}


def hostile_claims(index: int) -> list[str]:
    return [*(f"h{index}-one-{i}" for i in range(HOSTILE_CLAIMS)), f"h{index}-all"]


class InstantApi:
    """Answers the binder's writes at once: a claim status write comes back with a new
    resourceVersion and every allocated device Ready; bindings are recorded with the time."""

    def __init__(self) -> None:
        self.bound: dict[str, float] = {}
        self.conditions: dict[str, list[str]] = {}
        self.pods: dict[str, JSON] = {}

    async def replace_status(self, _: Any, body: JSON) -> JSON:
        updated = copy.deepcopy(body)
        meta = updated["metadata"]
        meta["resourceVersion"] = str(int(meta.get("resourceVersion") or 0) + 1)
        allocation = updated["status"].get("allocation")
        if allocation:
            updated["status"]["devices"] = [
                {"driver": r["driver"], "pool": r["pool"], "device": r["device"],
                 "conditions": [{"type": "Ready", "status": "True"}]}
                for r in allocation["devices"]["results"]]
        return updated

    async def bind(self, namespace: str, name: str, uid: str, node: str, **_: Any) -> JSON:
        self.bound[name] = time.monotonic()
        return {}

    async def patch(self, _: Any, name: str, body: JSON, namespace: str = "", **__: Any) -> JSON:
        """Only pods' conditions are patched here (claims carry the finalizer already)."""
        updated = copy.deepcopy(self.pods[name])
        for condition in (body.get("status") or {}).get("conditions") or []:
            self.conditions.setdefault(name, []).append(condition.get("reason", ""))
            updated.setdefault("status", {})["conditions"] = [condition]
        return updated

    async def create(self, *_: Any, **__: Any) -> JSON:
        return {}  # events


@dataclass
class Outcome:
    wall: float
    searches: list[tuple[float, int, str]] = field(default_factory=list)
    """Per hostile search: (seconds, steps, what ended it)."""
    windows: list[tuple[float, float]] = field(default_factory=list)
    """(start, end) of each long search, monotonic."""
    bound: dict[str, float] = field(default_factory=dict)
    created: dict[str, float] = field(default_factory=dict)
    exhausted: int = 0


async def schedule(nodes: int, per_node: int, hostile: int, small: int, budget: SearchBudget,
                   interval: float) -> Outcome:
    api = InstantApi()
    binder = Binder(api, EventRecorder(api),  # type: ignore[arg-type]
                    claims=claim_store(),
                    settings=BinderSettings(policy="spread", search=budget, max_retry_delay=60))
    names = [f"node-{i:03d}" for i in range(nodes)]
    for h in range(hostile):
        for name in hostile_claims(h):
            binder.claims.upsert(claim(name, all_devices=name.endswith("-all")))
    for i in range(small):
        binder.claims.upsert(claim(f"s{i}", driver=OTHER))
    now = time.time()
    hostile_pods = [pod(f"hostile-{h}", hostile_claims(h), now) for h in range(hostile)]
    api.pods.update((p["metadata"]["name"], p) for p in hostile_pods)
    others = -(-small // nodes)  # the one-device pods' devices per node
    binder.prime(nodes=[{"metadata": {"name": n, "labels": {}}, "status": {"allocatable": {
                     "cpu": "256", "memory": "1Ti", "pods": "1000"}}} for n in names],
                 slices=[*(gpu_slice(n, per_node) for n in names),
                         *(gpu_slice(n, others, OTHER) for n in names)],
                 classes=[gpu_class(), gpu_class(OTHER)], pods=hostile_pods)
    outcome = Outcome(0.0)
    original = binder.searches.start

    def start(key: Any, placing: Any, done: Any) -> None:
        async def timed(result: Any, limit: str, seconds: float) -> None:
            end = time.monotonic()
            how = limit or ("node-steps" if result.exhausted else "finished")
            outcome.searches.append((seconds, result.steps, how))
            outcome.windows.append((end - seconds, end))
            await done(result, limit, seconds)
        original(key, placing, timed)

    binder.searches.start = start  # type: ignore[method-assign]
    began = time.monotonic()
    binder.start()
    try:
        for i in range(small):  # the stream of one-device pods
            name = f"small-{i}"
            outcome.created[name] = time.monotonic()
            api.pods[name] = pod(name, [f"s{i}"], now + 1 + i)
            binder.on_pod("ADDED", api.pods[name])
            await asyncio.sleep(interval)
        deadline = time.monotonic() + budget.timeout * 3 + 30
        while time.monotonic() < deadline:
            if len(api.bound) >= small and all(f"hostile-{h}" in api.conditions
                                                for h in range(hostile)):
                break
            await asyncio.sleep(0.05)
    finally:
        await binder.stop()
    outcome.wall = time.monotonic() - began
    outcome.bound = api.bound
    outcome.exhausted = sum(r.count(SEARCH_EXHAUSTED) for r in api.conditions.values())
    return outcome


def unbounded(nodes: int, per_node: int, *, held_elsewhere: bool) -> tuple[float, int]:
    """One hostile pod through ``place`` without a budget: (seconds, steps)."""
    names = [NodeInfo(f"node-{i:03d}", {}) for i in range(nodes)]
    claims = [parse_claim(claim(n, all_devices=n.endswith("-all"))) for n in hostile_claims(0)]
    held = []
    if held_elsewhere:  # one GPU per node held by another claim: upstream stops at once
        for node in names:
            other = claim(f"other-{node.name}")
            other["status"] = {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": node.name,
                 "device": f"gpu-{per_node - 1}"}]}}}
            held.append(parse_claim(other))
    snapshot = Snapshot.build([parse_slice(gpu_slice(n.name, per_node)) for n in names],
                              [parse_class(gpu_class())], held)
    place(snapshot, claims[:1], names[:1])  # CEL warm-up
    before = snapshot.stats.search_steps
    started = time.perf_counter()
    outcome = place(snapshot, claims, names)
    assert not outcome.placements
    return time.perf_counter() - started, snapshot.stats.search_steps - before


def run_adversarial(quick: bool) -> None:
    nodes, per_node = (4, 14) if quick else (20, 12)
    hostile, small, interval = (2, 200, 0.002) if quick else (3, 1000, 0.002)
    budget = SearchBudget()
    print(f"adversarial shape: {HOSTILE_CLAIMS} one-GPU claims ahead of an All claim, "
          f"{nodes} nodes x {per_node} GPUs")
    seconds, steps = unbounded(nodes, per_node, held_elsewhere=True)
    print(f"  a GPU held elsewhere (upstream's early stop): place() {1000 * seconds:.1f} ms, "
          f"{steps} steps")
    seconds, steps = unbounded(nodes, per_node, held_elsewhere=False)
    print(f"  nothing held elsewhere, no budget: place() {seconds:.1f} s, {steps} steps "
          "(before the budget, the scheduling loop served nobody meanwhile)")
    print(f"binder, budget {budget.steps} steps ({budget.node_steps(nodes)} per node), "
          f"{budget.timeout:g} s, slices of {budget.slice} steps; {hostile} hostile pods, then "
          f"{small} one-device pods arriving every {1000 * interval:g} ms")
    result = asyncio.run(schedule(nodes, per_node, hostile, small, budget, interval))
    worst = max((s for s, _, _ in result.searches), default=0.0)
    ends = sorted({how for _, _, how in result.searches})
    print(f"  hostile searches: {len(result.searches)}, worst {worst:.2f} s (deadline "
          f"{budget.timeout:g} s), steps {min(s for _, s, _ in result.searches)}.."
          f"{max(s for _, s, _ in result.searches)}, ended by {', '.join(ends)}; "
          f"AllocationSearchExhausted reported {result.exhausted} times")
    during = [n for n, t in result.bound.items() if n.startswith("small-")
              and any(a <= t <= b for a, b in result.windows)]
    latency = sorted(result.bound[n] - result.created[n] for n in result.bound
                     if n in result.created)
    searching = sum(b - a for a, b in result.windows)
    created = max(result.created.values()) - min(result.created.values())
    last = max((t for n, t in result.bound.items() if n.startswith("small-")), default=0.0)
    print(f"  one-device pods: {small} created over {created:.1f} s, {len(latency)} bound "
          f"{last - min(result.created.values()):.1f} s after the first was created; "
          f"{len(during)} of them while a hostile search ran (searching {searching:.1f} s of "
          f"the run's {result.wall:.1f} s)")
    if latency:
        p99 = latency[min(len(latency) - 1, int(0.99 * len(latency)))]
        print(f"  create -> bound: median {1000 * statistics.median(latency):.1f} ms, "
              f"p99 {1000 * p99:.1f} ms, max {1000 * latency[-1]:.1f} ms")
