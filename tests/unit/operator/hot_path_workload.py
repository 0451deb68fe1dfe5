"""A fixed, small scheduling workload driven through the real binder in one process, counting
the per-pod work of the hot path (tests/unit/operator/test_hot_path_counts.py is the guard;
bench/hotpath.py profiles the same workload).

The workload is scheduler_perf's SchedulingWithResourceClaimTemplate in miniature: ``nodes``
nodes with 10 devices each of one driver (one pool per node, named after it), one DeviceClass
``device.driver == ...``, one claim per pod asking for 1 device of that class, and ``pods``
pods, each naming its own claim. Everything runs through kdra's own code from the watch
events on: :class:`~kdra.operator.scheduler.Binder` (its loop, snapshot, allocator, quota book,
preemption hooks, writes and prepare wait). The API server's side is a recorder, as in the
binder's other unit tests: it answers each write with the body it was sent and a new
resourceVersion, and counts it by (verb, resource). The node agent's side is one line: a
claim written with an allocation comes back as a watch event with every device ``Ready``
(what the agent writes after preparing). A bound pod comes back as a watch event with its
``nodeName``.

What is counted (:class:`Counts`), per pod: API writes by verb and resource, allocator
placements (``Placing`` objects: one per scheduling attempt that searches), allocator
search passes (``Placing.advance`` calls), CEL evaluations (device selector runs, after the
allocator's memo), claim parses (``parse_claim``) and quota charge computations
(``claim_charge``). These are counts, not times: they do not depend on the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import kdra.dra.allocator.cluster
import kdra.dra.cel._selector
import kdra.dra.models
import kdra.operator.core.quota
import kdra.operator.scheduler.cluster
import kdra.operator.scheduler.quota
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION, FINALIZER, SCHEDULER_NAME
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings

DRIVER = "test-driver.kdra.dev"
CLASS = "test-class"
DEVICES_PER_NODE = 10
NAMESPACE = "bench"

JSON = dict[str, Any]


def node_object(name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                         "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def slice_object(node: str) -> JSON:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}", "uid": f"uid-slice-{node}",
                         "resourceVersion": "1"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"dev-{i}"} for i in range(DEVICES_PER_NODE)]}}


def class_object() -> JSON:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS, "uid": "uid-class", "resourceVersion": "1"},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def claim_object(index: int) -> JSON:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"claim-{index}", "namespace": NAMESPACE,
                         "uid": f"uid-claim-{index}", "resourceVersion": str(100 + index),
                         "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [
                {"name": "req-0", "exactly": {"deviceClassName": CLASS}}]}}}


def pod_object(index: int) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{index}", "namespace": NAMESPACE,
                         "uid": f"uid-pod-{index}", "resourceVersion": str(100_000 + index),
                         "annotations": {CLAIMS_ANNOTATION: (
                             f'[{{"name": "dev", "resourceClaimName": "claim-{index}"}}]')}},
            "spec": {"schedulerName": SCHEDULER_NAME,
                     "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Pending"}}


@dataclass
class Counts:
    """What the workload did, in total; :meth:`per_pod` divides by the pods bound."""

    pods: int = 0
    bound: int = 0
    writes: Counter[str] = field(default_factory=Counter)  # "verb resource" → count
    placements: int = 0
    search_passes: int = 0
    cel_evaluations: int = 0
    claim_parses: int = 0
    quota_charges: int = 0

    def per_pod(self) -> dict[str, float]:
        n = max(self.bound, 1)
        return {"api writes": sum(self.writes.values()) / n,
                **{f"  {k}": v / n for k, v in sorted(self.writes.items())},
                "allocator placements": self.placements / n,
                "allocator search passes": self.search_passes / n,
                "CEL evaluations": self.cel_evaluations / n,
                "claim parses": self.claim_parses / n,
                "quota charges": self.quota_charges / n}


class Recorder:
    """The API server's side of the binder's writes: answers each with the body sent and a
    new resourceVersion, counts it, and (through ``on_write``) plays the watch events the
    write would cause."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self.version = 1_000_000
        self.on_write: Callable[[str, JSON], None] = lambda verb, body: None

    def _answer(self, verb: str, resource: Resource, body: JSON) -> JSON:
        self.counts.writes[f"{verb} {resource.plural}"] += 1
        self.version += 1
        answer = copy.copy(body)
        answer["metadata"] = {**body.get("metadata", {}), "resourceVersion": str(self.version)}
        self.on_write(f"{verb} {resource.plural}", answer)
        return answer

    async def replace_status(self, resource: Resource, body: JSON) -> JSON:
        self.counts.writes[f"PUT {resource.plural}/status"] += 1
        self.version += 1
        answer = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
        self.on_write(f"PUT {resource.plural}/status", answer)
        return answer

    async def replace(self, resource: Resource, body: JSON) -> JSON:
        return self._answer("PUT", resource, body)

    async def create(self, resource: Resource, body: JSON, namespace: str | None = None) -> JSON:
        return self._answer("POST", resource, body)

    async def patch(self, resource: Resource, name: str, body: JSON,
                    namespace: str | None = None, **_: Any) -> JSON:
        return self._answer("PATCH", resource, {"metadata": {"name": name}, **body})

    async def bind(self, namespace: str, name: str, uid: str, node: str,
                   annotations: dict[str, str] | None = None) -> None:
        self.counts.writes["POST pods/binding"] += 1
        self.on_write("POST pods/binding", {"metadata": {"namespace": namespace, "name": name,
                                                        "uid": uid}, "node": node})


@contextlib.contextmanager
def counting(counts: Counts) -> Iterator[None]:
    """Count placements, search passes, CEL evaluations, claim parses and quota charges."""
    placing = kdra.dra.allocator.cluster.Placing
    selector = kdra.dra.cel._selector.DeviceSelector

    def spy(attribute: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            setattr(counts, attribute, getattr(counts, attribute) + 1)
            return original(*args, **kwargs)
        return wrapped

    with mock.patch.object(placing, "__init__", spy("placements", placing.__init__)), \
            mock.patch.object(placing, "advance", spy("search_passes", placing.advance)), \
            mock.patch.object(selector, "matches", spy("cel_evaluations", selector.matches)), \
            mock.patch.object(kdra.operator.scheduler.cluster, "parse_claim",
                              spy("claim_parses", kdra.dra.models.parse_claim)), \
            mock.patch.object(kdra.operator.scheduler.quota, "claim_charge",
                              spy("quota_charges", kdra.operator.core.quota.claim_charge)):
        yield


async def run(nodes: int = 10, pods: int = 50, *, count: bool = True,
              limit: float = 60.0) -> Counts:
    """Schedule ``pods`` pods on ``nodes`` nodes (see the module doc) and return the counts."""
    counts = Counts(pods=pods)
    recorder = Recorder(counts)
    binder = Binder(recorder, EventRecorder(recorder),  # type: ignore[arg-type]
                    claims=claim_store(), settings=BinderSettings(wake_delay=0.0))
    done = asyncio.Event()
    pending: list[tuple[str, JSON]] = []  # watch events the writes cause, played in order

    def on_write(what: str, body: JSON) -> None:
        if what == "PUT resourceclaims/status" and (body.get("status") or {}).get("allocation"):
            # The agent prepares the devices and reports them Ready.
            status = body["status"]
            ready = copy.copy(body)
            ready["status"] = {**status, "devices": [
                {"driver": r["driver"], "pool": r["pool"], "device": r["device"],
                 "conditions": [{"type": "Ready", "status": "True"}]}
                for r in status["allocation"]["devices"]["results"]]}
            recorder.version += 1
            ready["metadata"] = {**ready["metadata"], "resourceVersion": str(recorder.version)}
            pending.append(("claim", body))
            pending.append(("claim", ready))
        elif what == "POST pods/binding":
            pending.append(("bound", body))

    recorder.on_write = on_write
    pods_by_name = {f"pod-{i}": pod_object(i) for i in range(pods)}

    async def play() -> None:
        while True:
            while pending:
                kind, body = pending.pop(0)
                if kind == "claim":
                    binder.claims.upsert(body)
                    binder.on_claim("MODIFIED", body)
                else:
                    pod = pods_by_name[body["metadata"]["name"]]
                    recorder.version += 1
                    bound = {**pod, "metadata": {**pod["metadata"],
                                                 "resourceVersion": str(recorder.version)},
                             "spec": {**pod["spec"], "nodeName": body["node"]}}
                    binder.on_pod("MODIFIED", bound)
                    counts.bound += 1
                    if counts.bound == pods:
                        done.set()
            await asyncio.sleep(0)

    with counting(counts) if count else contextlib.nullcontext():
        for i in range(pods):
            binder.claims.upsert(claim_object(i))
        binder.prime(nodes=[node_object(f"node-{n}") for n in range(nodes)],
                     slices=[slice_object(f"node-{n}") for n in range(nodes)],
                     classes=[class_object()], pods=[])
        binder.start()
        player = asyncio.create_task(play())
        try:
            for pod in pods_by_name.values():
                binder.on_pod("ADDED", pod)
                await asyncio.sleep(0)
            await asyncio.wait_for(done.wait(), limit)
        finally:
            player.cancel()
            await binder.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await player
    return counts
