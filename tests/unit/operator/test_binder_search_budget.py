"""The binder's bounded allocation search (issue 22, attack 9): a pod whose search would try
every combination runs in slices beside the scheduling loop — the pods queued behind it get
their claims allocated meanwhile — and, out of budget, is reported
``AllocationSearchExhausted`` and retried later. The client records writes; nothing here
talks to an API server (tests/e2e/test_hostile_privilege_operator.py does)."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import REGISTRY

from kdra.dra.allocator import Placing
from kdra.dra.scheduling import SEARCH_EXHAUSTED, SearchBudget
from kdra.kube.core.podclaims import CLAIMS_ANNOTATION, FINALIZER
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings
from kdra.operator.scheduler.searches import Searches
from tests.unit.builders import DRIVER, claim_with, devices, gpu_class, nodes, request, slice_with

NS = "ns"
NODE = "node-1"
OTHER = "other.kdra.dev"
"""The small pods' driver and class, on node-2: what they take never touches the devices
the hostile pod's search is about (so nothing shortens that search)."""


def raw_claim(name: str, *, all_devices: bool = False, cls: str = DRIVER,
              prioritized: bool = False) -> dict[str, Any]:
    """``prioritized``: the All request is the first alternative of a prioritized list whose
    second (two devices) would fit."""
    mode = {"allocationMode": "All"} if all_devices else {}
    request: dict[str, Any] = {"name": "gpu", "exactly": {"deviceClassName": cls, **mode}}
    if prioritized:
        request = {"name": "gpu", "firstAvailable": [
            {"name": "all", "deviceClassName": cls, **mode},
            {"name": "two", "deviceClassName": cls, "count": 2}]}
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [request]}}}


def raw_pod(name: str, claims: list[str], created: str) -> dict[str, Any]:
    entries = [{"name": claim, "resourceClaimName": claim} for claim in claims]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": created,
                         "annotations": {CLAIMS_ANNOTATION: json.dumps(entries)}},
            "spec": {"schedulerName": "kdra-scheduler", "containers": [{"name": "c"}]}}


def raw_class(driver: str) -> dict[str, Any]:
    return {"metadata": {"name": driver}, "spec": {"selectors": [
        {"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def raw_node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}


def raw_slice(node: str = NODE, driver: str = DRIVER) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"s-{node}", "uid": f"uid-{node}", "resourceVersion": "1"},
            "spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}", "attributes": {
                         "index": {"int": i}}} for i in range(12)]}}


class Recording:
    """Answers writes as the API server would, in order: ("claim", name, devices) for a
    status write, ("pod-status", name, reason) for a condition."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str, Any]] = []

    async def replace_status(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        updated = copy.deepcopy(body)
        updated["metadata"]["resourceVersion"] = str(int(body["metadata"]["resourceVersion"]) + 1)
        results = (body["status"].get("allocation") or {}).get("devices", {}).get("results", [])
        self.log.append(("claim", body["metadata"]["name"], [r["device"] for r in results]))
        return updated

    async def patch(self, res: Resource, name: str, body: dict[str, Any], namespace: str = "",
                    **_: Any) -> dict[str, Any]:
        for condition in body.get("status", {}).get("conditions", []):
            self.log.append(("pod-status", name, condition))
        return {"metadata": {"name": name, "namespace": namespace}, **body}

    async def create(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}  # events


def budget_binder(client: Recording) -> Binder:
    """A binder whose pods have 80,000 search steps, stepped 200 at a time."""
    budget = SearchBudget(steps=80_000, timeout=60.0, slice=200)
    return Binder(client, EventRecorder(client),  # type: ignore[arg-type]
                  claims=claim_store(), settings=BinderSettings(prepare_timeout=30, search=budget))


async def run_until(binder: Binder, pods: list[dict[str, Any]], client: Recording,
                    done: Callable[[tuple[str, str, Any]], bool]) -> None:
    """Prime ``binder`` with node-1 (the hostile driver's devices), node-2 (the small pods'
    driver) and ``pods``; run it until an entry of the client's log is ``done`` (at most 30 s)."""
    binder.prime(nodes=[raw_node(NODE), raw_node("node-2")],
                 slices=[raw_slice(), raw_slice("node-2", OTHER)],
                 classes=[raw_class(DRIVER), raw_class(OTHER)], pods=pods)
    binder.start()
    try:
        for _ in range(3000):
            await asyncio.sleep(0.01)
            if any(done(entry) for entry in client.log):
                break
    finally:
        await binder.stop()


def exhausted_count(limit: str) -> float:
    value = REGISTRY.get_sample_value("kdra_allocator_search_exhausted_total", {"limit": limit})
    return value or 0.0


@pytest.mark.parametrize("prioritized", [False, True], ids=["exactly", "firstAvailable"])
def test_other_pods_are_allocated_while_one_pods_search_runs_out_of_budget(
        prioritized: bool) -> None:
    """``firstAvailable``: the All request is the first alternative; its search spends the
    node's budget, so the second alternative (which would fit) is never tried — every
    alternative counts against the same budget."""
    async def scenario() -> Recording:
        client = Recording()
        binder = budget_binder(client)
        # The adversarial pod (first in the queue): five one-device claims ahead of a claim
        # for all twelve devices. The others: one device each.
        hostile = [f"one-{i}" for i in range(5)]
        for name in hostile:
            binder.claims.upsert(raw_claim(name))
        binder.claims.upsert(raw_claim("everything", all_devices=True,
                                       prioritized=prioritized))
        for i in range(3):
            binder.claims.upsert(raw_claim(f"small-{i}", cls=OTHER))
        pods = [raw_pod("hostile", [*hostile, "everything"], "2026-01-01T00:00:00Z"),
                *(raw_pod(f"small-{i}", [f"small-{i}"], f"2026-01-01T00:00:0{i + 1}Z")
                  for i in range(3))]
        await run_until(binder, pods, client, lambda entry: entry[0] == "pod-status")
        return client

    before = exhausted_count("node-steps")
    client = asyncio.run(scenario())
    kinds = [(kind, name) for kind, name, _ in client.log]
    # The three small pods' claims were allocated (one device each) before the hostile pod's
    # search gave up, while it was still searching.
    small = [i for i, (kind, name) in enumerate(kinds) if kind == "claim"]
    assert [kinds[i][1] for i in small] == ["small-0", "small-1", "small-2"], client.log
    gave_up = kinds.index(("pod-status", "hostile"))
    assert max(small) < gave_up
    condition = client.log[gave_up][2]
    assert condition["reason"] == SEARCH_EXHAUSTED
    assert condition["message"].startswith(
        "allocation search for claims 'one-0', 'one-1', 'one-2', 'one-3', 'one-4', "
        "'everything' exhausted its budget (80000 steps, 40000 per node, 60s; spent ")
    assert condition["message"].endswith(
        "0/2 nodes are available: 1 allocation search gave up (claims \"one-0\", \"one-1\", "
        "\"one-2\", \"one-3\", \"one-4\", \"everything\"), 1 no device of class "
        "\"gpu.kdra.dev\" matches request \"gpu\" of claim \"one-0\" (selector "
        "device.driver == \"gpu.kdra.dev\").")
    assert exhausted_count("node-steps") == before + 1


def test_one_long_search_at_a_time_and_a_cancelled_one_never_calls_back() -> None:
    slice_ = slice_with(*devices(8))
    snapshot_claims = [*(claim_with(request("gpu"), name=f"one-{i}") for i in range(3)),
                       claim_with(request("all", all=True), name="everything")]

    async def scenario() -> list[tuple[str, str, int]]:
        from kdra.dra.allocator import Snapshot

        snapshot = Snapshot.build([slice_], [gpu_class()])
        searches = Searches(SearchBudget(steps=10**9, timeout=60.0, slice=100))
        done: list[tuple[str, str, int]] = []
        running: list[int] = []
        both = asyncio.Event()

        def callback(name: str) -> Any:
            async def call(outcome: Any, limit: str, seconds: float) -> None:
                running.append(len(searches))
                done.append((name, limit, outcome.steps))
                if len(done) == 2:
                    both.set()
            return call

        for name in ("a", "b", "c"):
            placing = Placing(snapshot, snapshot_claims, nodes(1, prefix="worker"))
            searches.start((NS, name), placing, callback(name))
        searches.cancel((NS, "b"))
        assert (NS, "a") in searches and (NS, "b") not in searches
        # Each slice is followed by a pause as long as the slice took: on a loaded machine
        # that is real time, not a count of loop turns. Wait for both (bounded, generously).
        await asyncio.wait_for(both.wait(), 60)
        await searches.stop()
        assert running == [1, 0]  # "c" waited while "a" ran
        return done

    done = asyncio.run(scenario())
    assert [(name, limit) for name, limit, _ in done] == [("a", ""), ("c", "")]
    assert done[0][2] == done[1][2] > 500  # the whole search, stepped 100 at a time


def test_a_search_out_of_time_gives_up_with_the_deadline() -> None:
    from kdra.dra.allocator import Snapshot

    snapshot = Snapshot.build([slice_with(*devices(12))], [gpu_class()])
    claims = [*(claim_with(request("gpu"), name=f"one-{i}") for i in range(5)),
              claim_with(request("all", all=True), name="everything")]

    async def scenario() -> tuple[str, int]:
        searches = Searches(SearchBudget(steps=10**9, timeout=0.05, slice=50))
        result: list[tuple[str, int]] = []

        async def call(outcome: Any, limit: str, seconds: float) -> None:
            result.append((limit, len(outcome.placements)))

        searches.start((NS, "p"), Placing(snapshot, claims, nodes(1, prefix="worker")), call)
        for _ in range(100_000):
            await asyncio.sleep(0)
            if result:
                break
        await searches.stop()
        return result[0]

    assert asyncio.run(scenario()) == ("deadline", 0)


def test_a_search_that_fails_unexpectedly_has_its_pod_retried() -> None:
    class Broken:
        steps = 0

        def advance(self, steps: int) -> None:
            raise RuntimeError("a bug")

    async def scenario() -> list[Any]:
        failed: list[Any] = []
        searches = Searches(SearchBudget(), on_error=failed.append)

        async def never(*_: Any) -> None:
            raise AssertionError("no outcome for a failed search")

        searches.start((NS, "p"), Broken(), never)  # type: ignore[arg-type]
        for _ in range(100):
            await asyncio.sleep(0)
            if failed:
                break
        await searches.stop()
        assert (NS, "p") not in searches
        return failed

    assert asyncio.run(scenario()) == [(NS, "p")]
