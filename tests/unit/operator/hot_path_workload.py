"""A fixed, small scheduling workload driven through the real binder in one process, counting
the per-pod work of the hot path (tests/unit/operator/test_hot_path_counts.py is the guard;
bench/hotpath.py profiles the same workload).

The workload is scheduler_perf's SchedulingWithResourceClaimTemplate in miniature: ``nodes``
nodes with 10 devices each of one driver (one pool per node, named after it), one DeviceClass
``device.driver == ...``, one ResourceClaimTemplate asking for 1 device of that class, and
``pods`` pods, each with one template entry. Everything runs through kdra's own code from the
watch events on, routed as the operator routes them (kdra.operator.handlers.routes): the
:class:`~kdra.operator.claim_controller.ClaimController` (the pod's claim from the template,
the claim-statuses record) and :class:`~kdra.operator.scheduler.Binder` (its loop, snapshot,
allocator, quota book, preemption hooks, writes and prepare wait). The API server's side is a
recorder, as in the binder's other unit tests: it answers each request with the object as the
server would (a generated name, a new resourceVersion, a merge patch applied), counts it by
(verb, resource), and plays the watch event every write causes (the echo of a controller's
own write included). The node agent's side is one line: a claim written with an allocation
comes back as a watch event with every device ``Ready`` (what the agent writes after
preparing). A bound pod comes back as a watch event with its ``nodeName``.

Then the release (``release=True``): every pod is deleted (its DELETED event, as the harness's
delete causes it), and the claim controller releases each claim until none is allocated or
holds kdra's finalizer; the recorder answers a claim's DELETE as the API server does (a
finalizer holds it: terminating, ``generation`` bumped) and ends an object being deleted when
its last finalizer is patched away. Requests in this phase are counted apart
(``release ...``).

What is counted (:class:`Counts`), per pod: API requests by verb and resource (reads too),
allocator placements (``Placing`` objects: one per scheduling attempt that searches), allocator
search passes (``Placing.advance`` calls), CEL evaluations (device selector runs, after the
allocator's memo), claim parses (``parse_claim``) and quota charge computations
(``claim_charge``). These are counts, not times: they do not depend on the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import kdra.dra.allocator.cluster
import kdra.dra.cel._selector
import kdra.dra.models
import kdra.dra.quota
import kdra.kube.resources
import kdra.operator.caches
import kdra.operator.scheduler.quota
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION, SCHEDULER_NAME
from kdra.kube.errors import Conflict, NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.kube.store import Store, key_of
from kdra.operator.claim_controller import ClaimController, claim_store, pod_store
from kdra.operator.composition import share_claim_records
from kdra.operator.scheduler import Binder, BinderSettings

DRIVER = "test-driver.kdra.dev"
CLASS = "test-class"
TEMPLATE = "test-claim-template"
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


def template_object() -> JSON:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": NAMESPACE, "uid": "uid-template",
                         "resourceVersion": "1"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "req-0", "exactly": {"deviceClassName": CLASS}}]}}}}


def pod_object(index: int, flavour: Flavour = KDRA) -> JSON:
    pod: JSON = {"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"pod-{index}", "namespace": NAMESPACE,
                              "uid": f"uid-pod-{index}",
                              "resourceVersion": str(100_000 + index)},
                 "spec": {"schedulerName": SCHEDULER_NAME,
                          "containers": [{"name": "c", "image": "busybox"}]},
                 "status": {"phase": "Pending"}}
    entry = {"name": "dev", "resourceClaimTemplateName": TEMPLATE}
    if flavour.device_annotations:  # the kdra flavour: the claims annotation
        pod["metadata"]["annotations"] = {CLAIMS_ANNOTATION: (
            f'[{{"name": "dev", "resourceClaimTemplateName": "{TEMPLATE}"}}]')}
    else:  # native: spec.resourceClaims, the container's resources.claims
        pod["spec"]["resourceClaims"] = [entry]
        pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "dev"}]}
    return pod


@dataclass
class Counts:
    """What the workload did, in total; :meth:`per_pod` divides by the pods bound."""

    pods: int = 0
    bound: int = 0
    requests: Counter[str] = field(default_factory=Counter)  # "verb resource" → count
    releases: Counter[str] = field(default_factory=Counter)  # the same, while releasing
    release_parses: int = 0  # claim parses while releasing (not in claim_parses)
    placements: int = 0
    search_passes: int = 0
    cel_evaluations: int = 0
    claim_parses: int = 0
    quota_charges: int = 0

    def per_pod(self) -> dict[str, float]:
        n = max(self.bound, 1)
        writes = {k: v for k, v in self.requests.items() if not k.startswith("GET ")}
        reads = {k: v for k, v in self.requests.items() if k.startswith("GET ")}
        return {"api writes": sum(writes.values()) / n,
                **{f"  {k}": v / n for k, v in sorted(writes.items())},
                "api reads": sum(reads.values()) / n,
                **{f"  {k}": v / n for k, v in sorted(reads.items())},
                "allocator placements": self.placements / n,
                "allocator search passes": self.search_passes / n,
                "CEL evaluations": self.cel_evaluations / n,
                "claim parses": self.claim_parses / n,
                "quota charges": self.quota_charges / n,
                **self._release(n)}

    def _release(self, n: int) -> dict[str, float]:
        if not self.releases:
            return {}
        writes = {k: v for k, v in self.releases.items() if not k.startswith("GET ")}
        reads = {k: v for k, v in self.releases.items() if k.startswith("GET ")}
        return {"release writes": sum(writes.values()) / n,
                **{f"  release {k}": v / n for k, v in sorted(writes.items())},
                "release reads": sum(reads.values()) / n,
                "release claim parses": self.release_parses / n}


class Recorder:
    """The API server's side (see the module doc): the pods and claims it holds, the
    answers to the controllers' requests, and the watch events the writes cause (``events``,
    played in order by :func:`run`)."""

    def __init__(self, counts: Counts) -> None:
        self.counts = counts
        self.version = itertools.count(1_000_000)
        self.objects: dict[tuple[str, str, str], JSON] = {}  # (plural, ns, name) → object
        self.events: list[tuple[str, JSON]] = []  # (plural, object) in the order written
        self.deleted: list[JSON] = []  # claims gone (their DELETED events), in order
        self.suffix = itertools.count()
        self.releasing = False

    def _count(self, request: str) -> None:
        (self.counts.releases if self.releasing else self.counts.requests)[request] += 1

    def _stored(self, resource: Resource, obj: JSON) -> JSON:
        obj["metadata"]["resourceVersion"] = str(next(self.version))
        self.objects[(resource.plural, obj["metadata"].get("namespace", ""),
                      obj["metadata"]["name"])] = obj
        self.events.append((resource.plural, obj))
        return copy.deepcopy(obj)

    def hold(self, plural: str, obj: JSON) -> None:
        """An object that exists before the workload starts."""
        self.objects[(plural, obj["metadata"].get("namespace", ""), obj["metadata"]["name"])] = \
            copy.deepcopy(obj)

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> JSON:
        self._count(f"GET {resource.plural}")
        held = self.objects.get((resource.plural, namespace or "", name))
        if held is None:
            raise NotFound(404, "NotFound", f"{resource.plural} {name} not found")
        return copy.deepcopy(held)

    async def create(self, resource: Resource, body: JSON, namespace: str | None = None) -> JSON:
        self._count(f"POST {resource.plural}")
        obj = copy.deepcopy(body)
        meta = obj["metadata"]
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', '')}{next(self.suffix):05d}"
        meta.setdefault("uid", f"uid-{resource.plural}-{meta['name']}")
        if resource.plural == "events":
            return obj
        return self._stored(resource, obj)

    async def patch(self, resource: Resource, name: str, body: JSON,
                    namespace: str | None = None, **_: Any) -> JSON:
        self._count(f"PATCH {resource.plural}")
        held = copy.deepcopy(self.objects[(resource.plural, namespace or "", name)])
        patch = body.get("metadata") or {}
        for key, value in patch.items():
            if key == "annotations":
                held["metadata"]["annotations"] = {**held["metadata"].get("annotations", {}),
                                                   **value}
            elif key != "resourceVersion":
                held["metadata"][key] = value
        if "status" in body:  # the native flavour's status.resourceClaimStatuses
            held["status"] = {**held.get("status", {}), **body["status"]}
        if held["metadata"].get("deletionTimestamp") and not held["metadata"].get("finalizers"):
            del self.objects[(resource.plural, namespace or "", name)]  # its last finalizer
            self.deleted.append(held)
            return copy.deepcopy(held)
        return self._stored(resource, held)

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, *,
                     uid: str | None = None, **_: Any) -> JSON:
        self._count(f"DELETE {resource.plural}")
        key = (resource.plural, namespace or "", name)
        held = self.objects.get(key)
        if held is None or (uid and held["metadata"].get("uid") != uid):
            raise NotFound(404, "NotFound", f"{resource.plural} {name} not found")
        if not held["metadata"].get("finalizers"):
            del self.objects[key]
            self.deleted.append(held)
            return {"kind": "Status", "status": "Success"}
        held = copy.deepcopy(held)
        held["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z"
        held["metadata"]["generation"] = held["metadata"].get("generation", 1) + 1
        return self._stored(resource, held)

    async def replace_status(self, resource: Resource, body: JSON) -> JSON:
        self._count(f"PUT {resource.plural}/status")
        return self._stored(resource, copy.deepcopy(body))

    async def bind(self, namespace: str, name: str, uid: str, node: str,
                   annotations: dict[str, str] | None = None,
                   resource_version: str | None = None) -> None:
        self._count("POST pods/binding")
        pod = copy.deepcopy(self.objects[("pods", namespace, name)])
        if resource_version and pod["metadata"]["resourceVersion"] != resource_version:
            raise Conflict(409, "Conflict", "Precondition failed: ResourceVersion")
        pod["spec"]["nodeName"] = node
        pod["metadata"]["annotations"] = {**pod["metadata"].get("annotations", {}),
                                          **(annotations or {})}
        self._stored(Resource("", "v1", "pods", True, "Pod"), pod)


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
            mock.patch.object(selector, "evaluate", spy("cel_evaluations", selector.evaluate)), \
            mock.patch.object(kdra.operator.caches, "parse_claim",  # the typed claim cache's
                              spy("claim_parses", kdra.dra.models.parse_claim)), \
            mock.patch.object(kdra.operator.scheduler.quota, "claim_charge",
                              spy("quota_charges", kdra.dra.quota.claim_charge)), \
            mock.patch.object(kdra.dra.quota, "claim_charge",  # the shared check's own calls
                              spy("quota_charges", kdra.dra.quota.claim_charge)):
        yield


async def run(nodes: int = 10, pods: int = 50, *, count: bool = True,
              limit: float = 60.0, flavour: Flavour = KDRA, release: bool = False) -> Counts:
    """Schedule ``pods`` pods on ``nodes`` nodes (see the module doc) and return the counts;
    ``flavour``: the API flavour the controllers serve (native: no agent step, the kubelet
    prepares after binding); ``release``: then delete every pod and wait until the claim
    controller has released (and deleted) every claim."""
    counts = Counts(pods=pods)
    api = Recorder(counts)
    events = EventRecorder(api)  # type: ignore[arg-type]
    claims = claim_store()
    binder = Binder(api, events, claims=claims,  # type: ignore[arg-type]
                    settings=BinderSettings(wake_delay=0.0), flavour=flavour)
    controller = ClaimController(api, events, pods=pod_store(flavour),  # type: ignore[arg-type]
                                 claims=claims, templates=Store("ResourceClaimTemplate"),
                                 workers=1, pod_written=lambda p: binder.on_pod("MODIFIED", p),
                                 flavour=flavour)
    controller.pods_synced = lambda: True  # the pod informer listed, as in the operator
    share_claim_records(controller, binder)  # as the composition does
    for subscriber in (controller.on_claim, binder.on_claim):  # as the composition does
        claims.subscribe(subscriber)
    done = asyncio.Event()
    released = asyncio.Event()  # the release: no claim allocated or finalized any more

    def deliver(plural: str, obj: JSON) -> None:
        """A watch event, routed as kdra.operator.handlers.routes routes it."""
        obj = copy.deepcopy(obj)
        if plural == "pods":
            controller.on_pod("MODIFIED", obj)
            binder.on_pod("MODIFIED", obj)
            if obj["spec"].get("nodeName") and key_of(obj) not in bound:
                bound.add(key_of(obj))
                counts.bound += 1
                if counts.bound == pods:
                    done.set()
        elif plural == "resourceclaims":
            claims.apply("MODIFIED", obj)  # the typed cache hands it to its subscribers
            status = obj.get("status") or {}
            if flavour.agent_prepares and status.get("allocation") and not status.get(
                    "devices") and not obj["metadata"].get("deletionTimestamp"):
                # The node agent prepares the devices and reports them Ready.
                ready = copy.deepcopy(obj)
                ready["status"]["devices"] = [
                    {"driver": r["driver"], "pool": r["pool"], "device": r["device"],
                     "conditions": [{"type": "Ready", "status": "True"}]}
                    for r in status["allocation"]["devices"]["results"]]
                api._stored(kdra.kube.resources.CLAIMS, ready)

    bound: set[tuple[str, str]] = set()

    async def watch() -> None:
        while True:
            while api.events:
                deliver(*api.events.pop(0))
            while api.deleted:
                claims.apply("DELETED", api.deleted.pop(0))
            if api.releasing and not any(
                    plural == "resourceclaims" and (obj["metadata"].get("finalizers") or (
                        obj.get("status") or {}).get("allocation"))
                    for (plural, _, _), obj in api.objects.items()):
                released.set()
            await asyncio.sleep(0)

    async def release_all() -> None:
        api.releasing = True
        parsed = counts.claim_parses
        for key in sorted(bound):
            pod = api.objects.pop(("pods", *key))
            controller.on_pod("DELETED", pod)
            binder.on_pod("DELETED", pod)
            await asyncio.sleep(0)
        await released.wait()
        counts.release_parses, counts.claim_parses = counts.claim_parses - parsed, parsed

    with counting(counts) if count else contextlib.nullcontext():
        template = template_object()
        controller.templates.upsert(template)
        binder.prime(nodes=[node_object(f"node-{n}") for n in range(nodes)],
                     slices=[slice_object(f"node-{n}") for n in range(nodes)],
                     classes=[class_object()], pods=[])
        binder.start()
        controller.start()
        watcher = asyncio.create_task(watch())
        try:
            for index in range(pods):
                pod = pod_object(index, flavour)
                api.hold("pods", pod)
                deliver("pods", pod)  # the harness's create, as its watch event
                await asyncio.sleep(0)
            await asyncio.wait_for(done.wait(), limit)
            if release:
                await asyncio.wait_for(release_all(), limit)
        finally:
            watcher.cancel()
            await controller.stop()
            await binder.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    return counts
