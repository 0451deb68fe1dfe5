"""The binder on a full node: a new pod that arrives before its predecessor's device is
released waits for the release without being reported unschedulable (for a bounded time),
and the snapshot never shows a device free on a stale claim event."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings
from tests.unit.operator.binder_objects import gpu_claim

NS = "ns"
DRIVER = "gpu.kdra.dev"
DEVICE = ("gpu.kdra.dev", "worker-1", "gpu-0")

NODE = {"metadata": {"name": "worker-1", "labels": {"kubernetes.io/hostname": "worker-1"}},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
SLICE = {"metadata": {"name": "worker-1-gpu"},
         "spec": {"driver": DRIVER, "nodeName": "worker-1",
                  "pool": {"name": "worker-1", "generation": 0, "resourceSliceCount": 1},
                  "devices": [{"name": "gpu-0", "attributes": {}}]}}
CLASS = {"metadata": {"name": DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {CLAIMS_ANNOTATION: json.dumps(
                             [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}])}},
            "spec": {"schedulerName": "kdra-scheduler", "containers": [{"name": "c"}]}}


def claim(name: str, rv: str, owner: str | None = None) -> dict[str, Any]:
    """Claim ``name``; allocated to gpu-0 and reserved for pod ``owner`` if given."""
    return gpu_claim(name, rv, namespace=NS, device=None if owner is None else "gpu-0",
                     owners=() if owner is None else (owner,))


class Recording:
    """Records the pod status patches and events; claim writes are not expected."""

    def __init__(self) -> None:
        self.condition_patches: list[dict[str, Any]] = []
        self.events: list[str] = []

    async def patch(self, res: Resource, name: str, body: dict[str, Any], *_: Any,
                    **__: Any) -> dict[str, Any]:
        self.condition_patches.append(body)
        return {**pod(name), "status": body["status"]}

    async def create(self, res: Resource, body: dict[str, Any], *_: Any) -> dict[str, Any]:
        self.events.append(body["reason"])
        return body


def full_node(release_wait: float = 5.0) -> tuple[Binder, Recording]:
    """One node, one device, held by pod a's claim; pod b's claim waits for it."""
    client = Recording()
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(release_wait=release_wait, wake_delay=0.001,
                                            flush_interval=3600))
    for raw in (claim("a-gpu", "10", owner="a"), claim("b-gpu", "11")):
        binder.claims.upsert(raw)
    binder.prime(nodes=[NODE], slices=[SLICE], classes=[CLASS], pods=[])
    assert DEVICE in binder.snapshot.devices_in_use
    return binder, client


def test_a_pod_waits_unreported_for_a_device_being_released_then_gets_it() -> None:
    binder, client = full_node()
    b = pod("b")

    async def scenario() -> list[str]:
        gone = copy.deepcopy(pod("a"))
        gone["spec"]["nodeName"] = "worker-1"
        binder.on_pod("DELETED", gone)  # a's claim will be released by the claim controller
        binder.on_pod(None, b)
        assert await binder.queue.pop() == (NS, "b")
        results = [await binder._schedule((NS, "b"), b)]
        assert (NS, "b") in binder.parked and len(binder.queue) == 0
        # The claim controller deallocates a's claim and hands the response over.
        released = claim("a-gpu", "12")
        binder.claims.upsert(released)
        binder.on_claim("MODIFIED", released)
        assert await asyncio.wait_for(binder.queue.pop(), 1.0) == (NS, "b")  # woken
        return results

    results = asyncio.run(scenario())
    assert results == ["releasing"]
    assert client.condition_patches == [] and client.events == []
    assert DEVICE not in binder.snapshot.devices_in_use
    assert binder.releasing == {}


def test_the_wait_ends_and_the_pod_is_reported_when_the_release_does_not_come() -> None:
    binder, client = full_node(release_wait=0.05)
    b = pod("b")

    async def scenario() -> list[str]:
        binder.on_pod("DELETED", pod("a"))
        binder.on_pod(None, b)
        assert await binder.queue.pop() == (NS, "b")
        first = await binder._schedule((NS, "b"), b)
        assert len(binder.queue) == 0
        # No release (the claim controller is down): the end of the wait wakes the pod.
        assert await asyncio.wait_for(binder.queue.pop(), 1.0) == (NS, "b")
        return [first, await binder._schedule((NS, "b"), b)]

    assert asyncio.run(scenario()) == ["releasing", "unschedulable"]
    assert client.events == ["FailedScheduling"]
    (patch,) = client.condition_patches
    assert patch["status"]["conditions"][0]["reason"] == "Unschedulable"


def test_nothing_being_released_means_reported_at_once() -> None:
    binder, client = full_node()
    b = pod("b")

    async def scenario() -> str:
        binder.on_pod(None, b)  # a is alive: its device is not coming back
        return await binder._schedule((NS, "b"), b)

    assert asyncio.run(scenario()) == "unschedulable"
    assert client.events == ["FailedScheduling"]


def test_a_shared_claim_with_a_consumer_left_is_not_being_released() -> None:
    binder, _ = full_node()
    shared = claim("a-gpu", "13", owner="a")
    shared["status"]["reservedFor"].append({"resource": "pods", "name": "c", "uid": "uid-c"})
    binder.claims.upsert(shared)
    binder.on_pod("DELETED", pod("a"))
    assert binder.releasing == {}


def test_a_stale_claim_event_does_not_free_a_device_a_newer_version_holds() -> None:
    binder, _ = full_node()
    # The binder's (or the claim controller's) write response, rv 20, is in the store; the
    # watch then delivers rv 11, written before it, with no allocation.
    newer = claim("b-gpu", "20", owner="b")
    newer["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-0"
    binder.claims.upsert(newer)
    binder.on_claim("MODIFIED", newer)
    binder.claims.delete((NS, "a-gpu"))
    binder.on_claim("DELETED", claim("a-gpu", "21", owner="a"))
    assert DEVICE in binder.snapshot.devices_in_use  # held by b's claim now
    binder.on_claim("MODIFIED", claim("b-gpu", "11"))
    assert DEVICE in binder.snapshot.devices_in_use


def test_a_late_write_response_of_a_deleted_claim_is_ignored() -> None:
    binder, _ = full_node()
    binder.claims.delete((NS, "a-gpu"))
    binder.on_claim("DELETED", claim("a-gpu", "30", owner="a"))
    assert DEVICE not in binder.snapshot.devices_in_use
    binder.on_claim("MODIFIED", claim("a-gpu", "29", owner="a"))  # e.g. a finalizer PATCH
    assert DEVICE not in binder.snapshot.devices_in_use
