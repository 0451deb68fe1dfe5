"""The binder with a DeviceQuota: a pod whose allocation would exceed it is reported with the
quota's numbers; an allocation in flight counts; a shared claim already allocated costs
nothing more; a release or a raised quota wakes the pod; the status writer reports usage."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings
from kdra.operator.scheduler.quota import QuotaStatusWriter
from tests.unit.operator.binder_objects import gpu_claim

NS = "team-a"
DRIVER = "gpu.kdra.dev"
NODE = {"metadata": {"name": "worker-1", "labels": {"kubernetes.io/hostname": "worker-1"}},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
SLICE = {"metadata": {"name": "worker-1-gpu"},
         "spec": {"driver": DRIVER, "nodeName": "worker-1",
                  "pool": {"name": "worker-1", "generation": 0, "resourceSliceCount": 1},
                  "devices": [{"name": f"gpu-{i}", "attributes": {},
                               "capacity": {"memory": {"value": "80Gi"}}} for i in range(4)]}}
CLASS = {"metadata": {"name": DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def quota(devices: int, rv: str = "1") -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
            "metadata": {"name": "gpus", "namespace": NS, "resourceVersion": rv,
                         "generation": 1},
            "spec": {"limits": [{"deviceClassName": DRIVER, "devices": devices,
                                 "capacity": {"memory": "400Gi"}}]}}


def pod(name: str, claim: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": {CLAIMS_ANNOTATION: json.dumps(
                             [{"name": "gpu", "resourceClaimName": claim}])}},
            "spec": {"schedulerName": "kdra-scheduler", "containers": [{"name": "c"}]}}


def claim(name: str, rv: str, *, device: str | None = None,
          owners: tuple[str, ...] = ()) -> dict[str, Any]:
    return gpu_claim(name, rv, namespace=NS, device=device, owners=owners)


class Recording:
    """Records pod conditions, events and DeviceQuota status patches. Claim writes hang
    (the allocation stays in flight for as long as a test needs)."""

    def __init__(self) -> None:
        self.conditions: list[dict[str, Any]] = []
        self.events: list[str] = []
        self.quota_status: list[dict[str, Any]] = []
        self.hang = asyncio.Event()

    async def patch(self, res: Resource, name: str, body: dict[str, Any], *_: Any,
                    **__: Any) -> dict[str, Any]:
        if res.kind == "DeviceQuota":
            self.quota_status.append(body["status"])
            return {**quota(1), "status": body["status"]}
        self.conditions.append(body["status"]["conditions"][0])
        return {**pod(name, f"{name}-gpu"), "status": body["status"]}

    async def replace_status(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        await self.hang.wait()
        raise AssertionError("not reached")

    async def create(self, res: Resource, body: dict[str, Any], *_: Any) -> dict[str, Any]:
        self.events.append(f"{body['reason']}: {body.get('message', '')}")
        return body


def binder_with(*claims: dict[str, Any], devices: int) -> tuple[Binder, Recording]:
    client = Recording()
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(wake_delay=0.001, flush_interval=3600))
    for raw in claims:
        binder.claims.upsert(raw)
    binder.prime(nodes=[NODE], slices=[SLICE], classes=[CLASS], pods=[])
    binder.on_quota(None, quota(devices))
    return binder, client


async def attempt(binder: Binder, name: str, claim_name: str) -> str:
    p = pod(name, claim_name)
    binder.on_pod(None, p)
    assert await binder.queue.pop() == (NS, name)
    return await binder._schedule((NS, name), p)


def test_over_quota_in_flight_and_shared() -> None:
    # Quota 2: a's claim holds gpu-0 (reserved by pod a); b and c want one GPU each.
    binder, client = binder_with(claim("a-gpu", "10", device="gpu-0", owners=("a",)),
                                 claim("b-gpu", "11"), claim("c-gpu", "12"), devices=2)

    async def scenario() -> list[str]:
        results = [await attempt(binder, "b", "b-gpu")]  # 1 used + 1 asked: fits
        # b's allocation is in flight (its write hangs): it counts for c.
        results.append(await attempt(binder, "c", "c-gpu"))
        # A second pod of a's (shared) claim needs no new device: fits although full.
        results.append(await attempt(binder, "a2", "a-gpu"))
        await binder.stop()
        return results

    assert asyncio.run(scenario()) == ["allocated", "over-quota", "allocated"]
    [condition] = client.conditions
    assert condition["reason"] == "DeviceQuotaExceeded"
    assert condition["message"] == ("DeviceQuota team-a/gpus: class 'gpu.kdra.dev' devices: "
                                    "2 used + 1 asked > 2 hard")
    assert client.events == [f"FailedScheduling: {condition['message']}"]


def test_a_release_or_a_raised_quota_wakes_the_pod() -> None:
    binder, _ = binder_with(claim("a-gpu", "10", device="gpu-0", owners=("a",)),
                                 claim("b-gpu", "11"), devices=1)

    async def scenario() -> list[str]:
        results = [await attempt(binder, "b", "b-gpu")]
        assert (NS, "b") in binder.parked
        released = claim("a-gpu", "13")  # the claim controller deallocated a's claim
        binder.claims.upsert(released)
        binder.on_claim("MODIFIED", released)
        assert await asyncio.wait_for(binder.queue.pop(), 1.0) == (NS, "b")
        results.append(await binder._schedule((NS, "b"), binder.pending[(NS, "b")]))
        await binder.stop()
        return results

    assert asyncio.run(scenario()) == ["over-quota", "allocated"]

    binder, _ = binder_with(claim("a-gpu", "10", device="gpu-0", owners=("a",)),
                                 claim("b-gpu", "11"), devices=1)

    async def raised() -> str:
        assert await attempt(binder, "b", "b-gpu") == "over-quota"
        binder.on_quota("MODIFIED", quota(2, rv="2"))
        assert await asyncio.wait_for(binder.queue.pop(), 1.0) == (NS, "b")
        result = await binder._schedule((NS, "b"), binder.pending[(NS, "b")])
        await binder.stop()
        return result

    assert asyncio.run(raised()) == "allocated"


def test_status_writer_reports_usage_in_flight_included() -> None:
    binder, client = binder_with(claim("a-gpu", "10", device="gpu-0", owners=("a", "a2")),
                                 claim("b-gpu", "11"), devices=4)

    async def scenario() -> None:
        writer = QuotaStatusWriter(client, binder.quotas)  # type: ignore[arg-type]
        await writer.write(NS)
        assert await attempt(binder, "b", "b-gpu") == "allocated"  # in flight
        await writer.write(NS)
        await writer.write(NS)  # nothing changed: not written again
        await binder.stop()

    asyncio.run(scenario())
    assert [s["usedSummary"] for s in client.quota_status] == [
        "gpu.kdra.dev: 1 devices, memory 80Gi", "gpu.kdra.dev: 2 devices, memory 160Gi"]
    assert client.quota_status[-1]["hardSummary"] == "gpu.kdra.dev: 4 devices, memory 400Gi"
    assert client.quota_status[-1]["used"] == [
        {"deviceClassName": DRIVER, "devices": 2, "capacity": {"memory": "160Gi"}}]
    assert client.quota_status[-1]["conditions"][0]["message"] == (
        "2 allocated claim(s) counted (1 being allocated)")


def test_a_placement_over_a_memory_quota_gives_way_to_another_nodes() -> None:
    """spread prefers worker-1 (more GPUs left free), whose GPUs have 80Gi: over a 50Gi quota;
    worker-2's 10Gi GPU fits, and the pod goes there. With no node that fits, the numbers of
    the policy's first choice."""
    small = {"metadata": {"name": "worker-2-gpu"},
             "spec": {**SLICE["spec"], "nodeName": "worker-2",
                      "pool": {"name": "worker-2", "generation": 0, "resourceSliceCount": 1},
                      "devices": [{"name": "gpu-0", "attributes": {},
                                   "capacity": {"memory": {"value": "10Gi"}}}]}}
    node2 = {**NODE, "metadata": {"name": "worker-2",
                                  "labels": {"kubernetes.io/hostname": "worker-2"}}}
    for limit, expected in (("50Gi", ["allocated", "worker-2"]), ("5Gi", ["over-quota", None])):
        client = Recording()
        binder = Binder(client, EventRecorder(client),  # type: ignore[arg-type]
                        claims=claim_store(),
                        settings=BinderSettings(policy="spread", wake_delay=0.001,
                                                flush_interval=3600))
        binder.claims.upsert(claim("b-gpu", "11"))
        binder.prime(nodes=[NODE, node2], slices=[SLICE, small], classes=[CLASS], pods=[])
        binder.on_quota(None, {**quota(4), "spec": {"limits": [
            {"deviceClassName": DRIVER, "capacity": {"memory": limit}}]}})

        async def scenario(binder: Binder) -> list[str | None]:
            result = await attempt(binder, "b", "b-gpu")
            attempt_ = binder.binding.get((NS, "b"))
            await binder.stop()
            return [result, attempt_.node if attempt_ else None]

        assert asyncio.run(scenario(binder)) == expected
        if expected[0] == "over-quota":
            assert client.conditions[-1]["message"] == (
                "DeviceQuota team-a/gpus: class 'gpu.kdra.dev' memory: 0 used + 80Gi asked > "
                "5Gi hard")


def test_an_invalid_quota_limits_nothing_and_says_why() -> None:
    binder, client = binder_with(claim("b-gpu", "11"), devices=0)
    binder.on_quota("MODIFIED", {**quota(0, rv="2"), "spec": {"limits": [
        {"deviceClassName": DRIVER, "capacity": {"memory": "lots"}}]}})

    async def scenario() -> str:
        result = await attempt(binder, "b", "b-gpu")
        await QuotaStatusWriter(client, binder.quotas).write(NS)  # type: ignore[arg-type]
        await binder.stop()
        return result

    assert asyncio.run(scenario()) == "allocated"
    [condition] = client.quota_status[-1]["conditions"]
    assert (condition["status"], condition["reason"]) == ("Unknown", "InvalidSpec")
    assert "spec.limits[0].capacity[memory]" in condition["message"]


def test_quota_gauges_follow_the_limits() -> None:
    from prometheus_client import REGISTRY

    from kdra.operator import metrics

    def value(name: str, resource: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"namespace": "gauges", "quota": "q",
                                                "class": DRIVER, "resource": resource})

    metrics.set_quota("gauges", "q", [(DRIVER, "devices", 3, 4),
                                      (DRIVER, "capacity/memory", 240.0, 320.0)])
    assert (value("kdra_quota_used", "devices"), value("kdra_quota_hard", "devices")) == (3, 4)
    metrics.set_quota("gauges", "q", [(DRIVER, "devices", 2, 4)])  # the memory limit went
    assert value("kdra_quota_used", "capacity/memory") is None
    assert value("kdra_quota_used", "devices") == 2
    metrics.forget_quota("gauges", "q")
    assert value("kdra_quota_used", "devices") is None and value("kdra_quota_hard",
                                                                   "devices") is None


def test_over_quota_while_a_claim_is_being_released_waits_unreported() -> None:
    """Pod a is gone; its claim still holds the quota's only GPU until the claim controller
    releases it: b waits for that, unreported (as for devices being released), then binds."""
    binder, client = binder_with(claim("a-gpu", "10", device="gpu-0", owners=("a",)),
                                 claim("b-gpu", "11"), devices=1)

    async def scenario() -> list[str]:
        binder.on_pod("DELETED", pod("a", "a-gpu"))
        results = [await attempt(binder, "b", "b-gpu")]
        released = claim("a-gpu", "13")
        binder.claims.upsert(released)
        binder.on_claim("MODIFIED", released)
        assert await asyncio.wait_for(binder.queue.pop(), 1.0) == (NS, "b")
        results.append(await binder._schedule((NS, "b"), binder.pending[(NS, "b")]))
        await binder.stop()
        return results

    assert asyncio.run(scenario()) == ["releasing", "allocated"]
    assert client.conditions == [] and client.events == []


def test_a_quota_created_later_counts_allocations_made_and_in_flight_before_it() -> None:
    """Without a quota the book charges nothing (issue 42: what quota costs when unused is
    zero); the namespace's first quota charges what its claims already hold and have in
    flight, its last quota's deletion drops the charges, a new one counts them again."""
    client = Recording()
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(wake_delay=0.001, flush_interval=3600))
    binder.claims.upsert(claim("a-gpu", "10", device="gpu-0", owners=("a",)))
    binder.claims.upsert(claim("b-gpu", "11"))
    binder.prime(nodes=[NODE], slices=[SLICE], classes=[CLASS], pods=[])
    book = binder.quotas

    async def scenario() -> None:
        assert await attempt(binder, "b", "b-gpu") == "allocated"  # in flight, no quota yet
        assert book.ledger.used(NS) == {}
        binder.on_quota(None, quota(4))
        assert book.ledger.used(NS)[DRIVER].devices == 2
        assert book.ledger.in_flight(NS) == 1
        binder.on_quota("DELETED", quota(4))
        assert book.ledger.used(NS) == {} and book.ledger.claims(NS) == 0
        binder.on_quota("ADDED", quota(4, rv="2"))
        assert book.ledger.used(NS)[DRIVER].devices == 2
        await binder.stop()

    asyncio.run(scenario())
