"""The binder when the API server goes away in the middle of a pod's writes: the roll-back or
the event fails too, yet the pod goes back to the queue and is retried after a growing,
jittered delay; an unschedulable condition the server could not take is written on the retry."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

from kdra.dra.models import parse_claim
from kdra.kube.core.podclaims import FINALIZER, PodClaim
from kdra.kube.errors import ApiError, Unreachable
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings
from kdra.operator.scheduler.pending import Attempt as _Attempt

NS = "ns"


def raw_claim(name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.kdra.dev"}}]}},
            # Allocated (a shared claim, say), not yet prepared: the pod only reserves it.
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "gpu.kdra.dev", "pool": "node-1",
                 "device": f"gpu-{name}"}]}}}}


POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": NS, "uid": "uid-p", "resourceVersion": "1"},
       "spec": {"schedulerName": "kdra-scheduler"}}


class FailingAfter:
    """A client whose first ``good`` status writes succeed; then the API server is gone."""

    def __init__(self, good: int) -> None:
        self.good = good
        self.writes = 0

    async def replace_status(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        if self.writes > self.good:
            raise Unreachable("PUT ...: ServerDisconnectedError()")
        updated = copy.deepcopy(body)
        updated["metadata"]["resourceVersion"] = str(1 + self.writes)
        return updated

    async def create(self, *_: Any, **__: Any) -> dict[str, Any]:
        raise OSError("connection refused")  # (events)

    async def patch(self, *_: Any, **__: Any) -> dict[str, Any]:
        raise OSError("connection refused")


def test_a_failed_roll_back_still_requeues_the_pod_with_backoff() -> None:
    # Claim a is reserved for the pod; then the API server goes away: claim b's write fails,
    # and so does undoing a's reservation.
    client = FailingAfter(good=1)
    binder = Binder(client, EventRecorder(client),  # type: ignore[arg-type]
                    claims=claim_store(),
                    settings=BinderSettings(retry_delay=0.02, max_retry_delay=0.05))
    claims = [raw_claim("a"), raw_claim("b")]
    for claim in claims:
        binder.claims.upsert(claim)
    entries = [PodClaim(name=c["metadata"]["name"], resource_claim_name=c["metadata"]["name"])
               for c in claims]
    resolved = [(e, c["metadata"]["name"], c) for e, c in zip(entries, claims, strict=True)]
    parsed = [parse_claim(c) for c in claims]
    key = (NS, "p")

    async def scenario() -> _Attempt:
        binder.on_pod(None, POD)
        assert await binder.queue.pop() == key
        attempt = _Attempt(POD, "node-1", [(e, n) for e, n, _ in resolved])
        binder.binding[key] = attempt
        await binder.writes.allocate_and_bind(key, attempt, resolved, parsed, {})
        return attempt

    attempt = asyncio.run(scenario())
    assert client.writes == 3  # a reserved, b failed, undoing a failed
    assert attempt.reserved_here == ["a"]
    # The pod is not left behind in "binding" (which would keep it out of the queue for
    # the rest of this binder's life): it is queued again, one failure counted.
    assert key not in binder.binding
    assert len(binder.queue) == 1
    assert binder.failures[key] == 1

    binder.on_pod("DELETED", POD)  # the per-pod backoff is forgotten with the pod
    assert key not in binder.failures


def test_a_watch_event_older_than_the_pod_held_is_ignored() -> None:
    # The claim controller hands its patch response (rv 7) to the binder; the watch events
    # of rv 5 (before the patch) and rv 7 (the same) that follow leave rv 7 in place.
    binder = Binder(FailingAfter(good=0), EventRecorder(FailingAfter(good=0)),  # type: ignore[arg-type]
                    claims=claim_store())
    newer = copy.deepcopy(POD)
    newer["metadata"]["resourceVersion"] = "7"
    older = copy.deepcopy(POD)
    older["metadata"]["resourceVersion"] = "5"
    binder.on_pod("MODIFIED", newer)
    binder.on_pod("MODIFIED", older)
    assert binder.pending[(NS, "p")] is newer
    same = copy.deepcopy(newer)
    binder.on_pod("MODIFIED", same)  # the watch event of the patch: nothing new, not taken
    assert binder.pending[(NS, "p")] is newer and len(binder.queue) == 1
    binder.on_pod("DELETED", older)  # a deletion always counts
    assert (NS, "p") not in binder.pending


def test_an_unbound_version_of_a_pod_this_binder_bound_is_stale(monkeypatch: Any) -> None:
    client = FailingAfter(good=0)
    binder = Binder(client, EventRecorder(client), claims=claim_store())  # type: ignore[arg-type]
    binder.pods.remember_bound("uid-p")
    binder.on_pod("MODIFIED", POD)  # the watch event of the claim-statuses patch, late
    assert (NS, "p") not in binder.pending and len(binder.queue) == 0
    bound = copy.deepcopy(POD)
    bound["spec"]["nodeName"] = "node-1"
    binder.on_pod("MODIFIED", bound)
    assert "uid-p" in binder.usage["node-1"]  # a bound version counts
    binder.on_pod("DELETED", bound)
    binder.on_pod("ADDED", POD)  # forgotten with the deletion
    assert (NS, "p") in binder.pending
    monkeypatch.setattr("kdra.operator.scheduler.pending.BOUND_REMEMBERED", 2)
    for uid in ("a", "b", "c"):
        binder.pods.remember_bound(uid)
    assert list(binder.pods.bound) == ["b", "c"]


class Recorder:
    """Events that fail in a way nobody planned for."""

    def __init__(self) -> None:
        self.calls = 0

    async def warn(self, *_: Any) -> None:
        self.calls += 1
        raise RuntimeError("unplanned")


class Unavailable:
    """Every write answers 503 (the API server shutting down)."""

    async def replace_status(self, *_: Any) -> dict[str, Any]:
        raise ApiError(503, "ServiceUnavailable", "apiserver is shutting down")


def test_a_failing_handler_of_a_failed_write_still_requeues_the_pod() -> None:
    recorder = Recorder()
    binder = Binder(Unavailable(), recorder, claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(retry_delay=0.01, max_retry_delay=0.02))
    claim = raw_claim("a")
    binder.claims.upsert(claim)
    entry = PodClaim(name="a", resource_claim_name="a")
    key = (NS, "p")

    async def scenario() -> None:
        binder.on_pod(None, POD)
        assert await binder.queue.pop() == key
        attempt = _Attempt(POD, "node-1", [(entry, "a")])
        binder.binding[key] = attempt
        with contextlib.suppress(RuntimeError):
            await binder.writes.allocate_and_bind(key, attempt, [(entry, "a", claim)],
                                                   [parse_claim(claim)], {})

    asyncio.run(scenario())
    assert recorder.calls == 1
    # Stuck in "binding" the pod would never be scheduled again by this binder.
    assert key not in binder.binding
    assert len(binder.queue) == 1


class StatusFlaky:
    """The first pod-status PATCH answers 503, the next ones succeed; events work."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []

    async def patch(self, res: Resource, name: str, body: dict[str, Any], *_: Any,
                    **kwargs: Any) -> dict[str, Any]:
        if res.plural == "pods":
            self.patches.append((kwargs.get("subresource", ""), body))
            if len(self.patches) == 1:
                raise ApiError(503, "ServiceUnavailable", "apiserver is shutting down")
            pod = copy.deepcopy(POD)
            pod["status"] = body["status"]
            return pod
        return {}

    async def create(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}


def test_an_unschedulable_condition_the_server_refused_is_written_on_the_retry() -> None:
    client = StatusFlaky()
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(retry_delay=0.01, max_retry_delay=0.02,
                                            flush_interval=3600))
    key = (NS, "p")

    async def scenario() -> None:
        binder.start()
        binder.on_pod(None, POD)  # no nodes: unschedulable
        for _ in range(200):
            if len(client.patches) >= 2:
                break
            await asyncio.sleep(0.01)
        await binder.stop()

    asyncio.run(scenario())
    assert len(client.patches) == 2, client.patches  # refused, then written (no flush)
    subresource, body = client.patches[1]
    assert subresource == "status"
    condition = body["status"]["conditions"][0]
    assert (condition["type"], condition["status"]) == ("PodScheduled", "False")
    assert condition["message"] == "no nodes available to schedule pods"
    assert binder.pending[key]["status"]["conditions"] == [condition]
