"""Two binders active at once (two operators without leader election): a binder's roll-back
never undoes a claim another binder may be binding on, and a binder never binds on an
allocation it did not expect. The claim's resourceVersion serialises the two: a roll-back
writes only where the claim still has the attempt's allocation and is not Ready."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kdra.kube.core.podclaims import FINALIZER, PodClaim
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings
from kdra.operator.scheduler.pending import Attempt as _Attempt

NS = "ns"
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": NS, "uid": "uid-p", "resourceVersion": "1"},
       "spec": {"schedulerName": "kdra-scheduler"}}
REF = {"resource": "pods", "name": "p", "uid": "uid-p"}


def allocation(device: str) -> dict[str, Any]:
    return {"devices": {"results": [{"request": "gpu", "driver": "gpu.kdra.dev",
                                     "pool": "node-1", "device": device}]}}


def ready(device: str) -> list[dict[str, Any]]:
    return [{"driver": "gpu.kdra.dev", "pool": "node-1", "device": device,
             "conditions": [{"type": "Ready", "status": "True"}]}]


def claim(status: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": NS, "uid": "uid-c", "resourceVersion": "7",
                         "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.kdra.dev"}}]}},
            "status": status}


class Recording:
    """Records status writes; events go nowhere."""

    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    async def replace_status(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        self.written.append(copy.deepcopy(body["status"]))
        return body

    async def create(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}


def binder_with(raw: dict[str, Any]) -> tuple[Binder, Recording]:
    client = Recording()
    binder = Binder(client, EventRecorder(client),  # type: ignore[arg-type]
                    claims=claim_store(), settings=BinderSettings(prepare_timeout=0.2))
    binder.claims.upsert(raw)
    return binder, client


def attempt_on(device: str) -> _Attempt:
    attempt = _Attempt(POD, "node-1", [(PodClaim(name="gpu", resource_claim_name="c"), "c")])
    attempt.allocated_here.append("c")
    attempt.reserved_here.append("c")
    attempt.expected["c"] = allocation(device)
    return attempt


def test_a_roll_back_deallocates_its_own_unprepared_allocation() -> None:
    binder, client = binder_with(claim({"allocation": allocation("gpu-0"),
                                        "reservedFor": [REF]}))
    asyncio.run(binder.writes.roll_back(attempt_on("gpu-0"), every_claim=True))
    assert client.written == [{}]  # no reservedFor field left (upstream: omitempty), not []


def test_a_roll_back_leaves_a_prepared_claim_to_its_pod() -> None:
    # Another binder may have seen it Ready and be binding the pod right now.
    binder, client = binder_with(claim({"allocation": allocation("gpu-0"),
                                        "reservedFor": [REF], "devices": ready("gpu-0")}))
    asyncio.run(binder.writes.roll_back(attempt_on("gpu-0"), every_claim=True))
    assert client.written == []


def test_a_roll_back_leaves_another_writers_allocation_alone() -> None:
    # The other binder released ours and allocated gpu-1 for the same pod meanwhile.
    binder, client = binder_with(claim({"allocation": allocation("gpu-1"),
                                        "reservedFor": [REF]}))
    asyncio.run(binder.writes.roll_back(attempt_on("gpu-0"), every_claim=True))
    assert client.written == []


def test_the_wait_fails_when_the_allocation_is_not_the_attempts() -> None:
    # Ready, but on another allocation: binding to this attempt's node could be wrong.
    binder, _ = binder_with(claim({"allocation": allocation("gpu-1"), "reservedFor": [REF],
                                   "devices": ready("gpu-1")}))
    failure = asyncio.run(binder.prepare.wait(NS, attempt_on("gpu-0")))
    assert failure is not None and "allocated anew" in failure.message
    assert not failure.node_fault


def test_the_wait_fails_when_the_pod_is_no_longer_reserved() -> None:
    binder, _ = binder_with(claim({"allocation": allocation("gpu-0"), "reservedFor": [],
                                   "devices": ready("gpu-0")}))
    failure = asyncio.run(binder.prepare.wait(NS, attempt_on("gpu-0")))
    assert failure is not None and "released" in failure.message


def test_the_wait_succeeds_on_the_expected_prepared_allocation() -> None:
    binder, _ = binder_with(claim({"allocation": allocation("gpu-0"), "reservedFor": [REF],
                                   "devices": ready("gpu-0")}))
    assert asyncio.run(binder.prepare.wait(NS, attempt_on("gpu-0"))) is None


def test_device_busy_is_not_the_nodes_fault_but_a_timeout_is() -> None:
    busy = [{"driver": "gpu.kdra.dev", "pool": "node-1", "device": "gpu-0",
             "conditions": [{"type": "Ready", "status": "False", "reason": "DeviceBusy"}]}]
    binder, _ = binder_with(claim({"allocation": allocation("gpu-0"), "reservedFor": [REF],
                                   "devices": busy}))
    failure = asyncio.run(binder.prepare.wait(NS, attempt_on("gpu-0")))
    assert failure is not None and not failure.node_fault
    binder, _ = binder_with(claim({"allocation": allocation("gpu-0"), "reservedFor": [REF]}))
    failure = asyncio.run(binder.prepare.wait(NS, attempt_on("gpu-0")))
    assert failure is not None and failure.node_fault and "timed out" in failure.message
