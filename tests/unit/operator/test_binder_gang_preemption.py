"""A gang's preemption in the binder (kdra.operator.scheduler.gang_preemption) without a
cluster: a recording client stands in for the API server; the binder, its snapshot and the
gang's joint search are real.

Three nodes of two GPUs: w1 held by "low-a" (priority 0, both GPUs), w2 by "low-b" (priority
0, one GPU), w3 by "mid" (priority 500, both). A gang of two pods x 2 GPUs at priority 1000
fits nowhere; it evicts exactly low-a and low-b (the least important pods whose eviction
lets the whole gang fit: two nodes, across nodes), nominates each member to its node, holds
the freed GPUs against a less important pod, and is placed whole there once they are
released. A gang that would not fit even with every lower-priority pod gone evicts nobody.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION, FINALIZER
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator.claim_controller import claim_store
from kdra.operator.core.gangs import MIN_MEMBER_ANNOTATION, POD_GROUP_LABEL
from kdra.operator.scheduler import Binder, BinderSettings
from tests.unit.operator.test_binder_preemption import CLASS, DRIVER, NS, Recording, attempts

NODES = ("w1", "w2", "w3")


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}


def gpus(name: str) -> dict[str, Any]:
    return {"metadata": {"name": f"{name}-gpu"},
            "spec": {"driver": DRIVER, "nodeName": name,
                     "pool": {"name": name, "generation": 0, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0", "attributes": {}},
                                 {"name": "gpu-1", "attributes": {}}]}}


def claim(name: str, rv: str, count: int, *, owner: str | None = None, node: str = "",
          devices: tuple[str, ...] = ()) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if owner is not None:
        status = {"allocation": {"devices": {"results": [
                      {"request": "gpu", "driver": DRIVER, "pool": node, "device": d}
                      for d in devices]}},
                  "reservedFor": [{"resource": "pods", "name": owner, "uid": f"uid-{owner}"}]}
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": rv, "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": DRIVER, "count": count}}]}},
            "status": status}


def pod(name: str, priority: int, *, node: str | None = None, gang: str | None = None,
        size: int = 2) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "kdra-scheduler", "containers": [{"name": "c"}],
                            "priority": priority}
    if node:
        spec["nodeName"] = node
    labels = {POD_GROUP_LABEL: gang} if gang else {"app": name}
    annotations = {CLAIMS_ANNOTATION: json.dumps(
        [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}])}
    if gang:
        annotations[MIN_MEMBER_ANNOTATION] = str(size)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": f"2026-01-01T00:00:0{size}Z",
                         "labels": labels, "annotations": annotations},
            "spec": spec,
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:01Z"} if node
            else {}}


class GangRecording(Recording):
    """:class:`Recording` whose status patches answer with the gang's pods as created."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        super().__init__()
        self.pods = {p["metadata"]["name"]: p for p in pods}

    async def patch(self, res: Resource, name: str, body: dict[str, Any], *args: Any,
                    **kwargs: Any) -> dict[str, Any]:
        await super().patch(res, name, body, *args, **kwargs)
        return {**self.pods.get(name, pod(name, 0)), "status": body.get("status", {})}


def cluster(client: Recording) -> Binder:
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(release_wait=0.0, wake_delay=0.001,
                                            flush_interval=3600))
    for raw in (claim("low-a-gpu", "10", 2, owner="low-a", node="w1",
                      devices=("gpu-0", "gpu-1")),
                claim("low-b-gpu", "11", 1, owner="low-b", node="w2", devices=("gpu-0",)),
                claim("mid-gpu", "12", 2, owner="mid", node="w3", devices=("gpu-0", "gpu-1")),
                claim("t-0-gpu", "13", 2), claim("t-1-gpu", "14", 2), claim("other-gpu", "15", 1),
                claim("u-0-gpu", "16", 2), claim("u-1-gpu", "17", 2), claim("u-2-gpu", "18", 2)):
        binder.claims.upsert(raw)
    binder.prime(nodes=[node(n) for n in NODES], slices=[gpus(n) for n in NODES],
                 classes=[CLASS],
                 pods=[pod("low-a", 0, node="w1"), pod("low-b", 0, node="w2"),
                       pod("mid", 500, node="w3")])
    return binder


async def settle(binder: Binder) -> None:
    """Until the runner of long searches has nothing left (the gang's victims are chosen
    there, beside the scheduling loop)."""
    for _ in range(2000):
        if not len(binder.searches):
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the preemption decision did not end")


def attempt_once(binder: Binder, members: list[dict[str, Any]]) -> str:
    """The gang of ``members`` tried once (its preemption decision, if any, run to its end);
    the attempt's result."""
    async def scenario() -> str:
        for member in members:
            binder.on_pod(None, member)
        result = await binder.gangs.schedule((NS, members[0]["metadata"]["name"]), members[0])
        await settle(binder)
        await binder.stop()
        return result

    return asyncio.run(scenario())


def test_a_gang_preempts_exactly_the_victims_it_needs_across_nodes() -> None:
    members = [pod("t-0", 1000, gang="t"), pod("t-1", 1000, gang="t")]
    client = GangRecording(*members)
    binder = cluster(client)
    before = attempts("gang-preempted")

    async def scenario() -> tuple[list[str], dict[str, str], int, int]:
        for member in members:
            binder.on_pod(None, member)
        results = [await binder.gangs.schedule((NS, "t-0"), members[0])]
        choosing = len(binder.searches)  # the victims are chosen beside the loop
        await settle(binder)
        # Again before the victims are gone: it waits, evicts nothing more.
        binder.gangs.failed.clear()
        results.append(await binder.gangs.schedule((NS, "t-0"), members[0]))
        # The victims go; the claim controller releases their claims.
        for name, where in (("low-a", "w1"), ("low-b", "w2")):
            binder.on_pod("DELETED", pod(name, 0, node=where))
            released = claim(f"{name}-gpu", "20", 2 if name == "low-a" else 1)
            binder.claims.upsert(released)
            binder.on_claim("MODIFIED", released)
        # A less important pod cannot take the held GPUs (nor preempt: "mid" is more
        # important than it).
        other = pod("other", 100)
        binder.on_pod(None, other)
        results.append(await binder._schedule((NS, "other"), other))
        results.append(await binder.gangs.schedule((NS, "t-0"), members[0]))
        placed = {key[1]: attempt.node for key, attempt in binder.binding.items()}
        assert len(binder.preemption.nominations) == 1  # the gang's, until it is bound
        # A member bound (its pod event): the gang's hold ends.
        binder.preemption.on_pod("MODIFIED", {**members[0], "spec": {
            **members[0]["spec"], "nodeName": placed["t-0"]}})
        held = len(binder.preemption.nominations)
        await binder.stop()
        return results, placed, held, choosing

    results, placed, held, choosing = asyncio.run(scenario())
    assert results == ["unschedulable", "unschedulable", "unschedulable", "allocated"]
    assert choosing == 1
    assert sorted(client.evictions) == ["low-a", "low-b"]  # exactly those, once each
    assert sorted(placed.values()) == ["w1", "w2"] and set(placed) == {"t-0", "t-1"}
    nominated = {name: body["status"]["nominatedNodeName"]
                 for name, body in client.status_patches
                 if "nominatedNodeName" in body.get("status", {})}
    assert nominated == placed  # each member nominated to the node it then got
    assert sorted(client.reasons("Preempted")) == [
        ("low-a", "Preempted by gang ns/t on node w1"),
        ("low-b", "Preempted by gang ns/t on node w2")]
    (preempting,) = client.reasons("Preempting")
    assert preempting[0] == "t-0"
    assert preempting[1].startswith("Preempting 2 pod(s) on nodes w1, w2 for gang ns/t: ")
    said = client.messages("t-1")
    assert "preemption: choosing lower-priority pods to preempt for the whole gang" in said[0]
    assert "preemption: preempting 2 lower-priority pod(s) on nodes w1, w2" in said[1], said
    assert "waiting for 2 preempted pod(s) on nodes w1, w2" in said[2], said
    assert all("preempting" not in m for m in client.messages("other"))
    assert attempts("gang-preempted") - before == 1
    assert held == 0


def too_big() -> list[dict[str, Any]]:
    """Three pods x 2 GPUs at priority 400: low-a and low-b may go, mid (500) may not — two
    nodes at most, the gang needs three."""
    return [pod(f"u-{i}", 400, gang="u", size=3) for i in range(3)]


def never() -> list[dict[str, Any]]:
    """Two pods x 2 GPUs at priority 1000, one of them with preemptionPolicy Never."""
    members = [pod("t-0", 1000, gang="t"), pod("t-1", 1000, gang="t")]
    members[1]["spec"]["preemptionPolicy"] = "Never"
    return members


@pytest.mark.parametrize(("members", "result"), [(too_big, "gang-no-candidates"),
                                                 (never, "gang-never")])
def test_a_gang_preempts_nobody(members: Callable[[], list[dict[str, Any]]],
                                result: str) -> None:
    """A gang that would still not fit with every lower-priority pod gone, or with a member
    that never preempts: nobody evicted, nobody nominated, its members told the gang's
    message alone."""
    gang = members()
    client = GangRecording(*gang)
    binder = cluster(client)
    before = attempts(result)
    assert attempt_once(binder, gang) == "unschedulable"
    assert client.preempted_nobody()
    assert attempts(result) - before == 1
    last = client.messages(gang[0]["metadata"]["name"])[-1]
    assert "placed together" in last and "preemption" not in last, last
    assert binder.preemption.nominations == {}
