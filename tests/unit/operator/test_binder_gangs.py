"""A gang's writes (kdra.operator.scheduler.gang_writes) when one member's claim write fails:
what the other members wrote is rolled back, no member is bound, every member goes back to
the queue with a backoff — nothing of the gang is held or bound alone."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kdra.dra.models import parse_claim
from kdra.kube.core.podclaims import PodClaim
from kdra.kube.errors import Conflict
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator.claim_controller import claim_store
from kdra.operator.core.gangs import MIN_MEMBER_ANNOTATION, POD_GROUP_LABEL
from kdra.operator.scheduler import Binder, BinderSettings
from kdra.operator.scheduler.gang_writes import GangMember
from kdra.operator.scheduler.pending import Attempt
from tests.unit.operator.test_binder_retry import NS, raw_claim


def member_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "labels": {POD_GROUP_LABEL: "g"},
                         "annotations": {MIN_MEMBER_ANNOTATION: "2"}},
            "spec": {"schedulerName": "kdra-scheduler"}}


class SecondWriteConflicts:
    """Status writes succeed, but the second (the second member's claim) meets a Conflict;
    bindings are recorded."""

    def __init__(self) -> None:
        self.writes: list[dict[str, Any]] = []
        self.bound: list[str] = []

    async def replace_status(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        self.writes.append(copy.deepcopy(body))
        if len(self.writes) == 2:
            raise Conflict(409, "Conflict", "the object has been modified")
        updated = copy.deepcopy(body)
        updated["metadata"]["resourceVersion"] = str(1 + len(self.writes))
        return updated

    async def bind(self, namespace: str, name: str, *_: Any, **__: Any) -> None:
        self.bound.append(name)

    async def create(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}

    async def patch(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}


def test_a_failed_write_rolls_back_every_member_and_binds_none() -> None:
    client = SecondWriteConflicts()
    binder = Binder(client, EventRecorder(client),  # type: ignore[arg-type]
                    claims=claim_store(),
                    settings=BinderSettings(retry_delay=0.01, max_retry_delay=0.02))
    members = []
    for name in ("a", "b"):
        raw = raw_claim(name)
        binder.claims.upsert(raw)
        entry = PodClaim(name="gpu", resource_claim_name=name)
        pod = member_pod(f"p-{name}")
        binder.on_pod(None, pod)
        attempt = Attempt(pod, "node-1", [(entry, name)])
        key = (NS, pod["metadata"]["name"])
        binder.binding[key] = attempt
        members.append(GangMember(key, attempt, [(entry, name, raw)], [parse_claim(raw)], {}))

    async def scenario() -> None:
        await binder.gangs.writes.run((NS, "g"), members)

    asyncio.run(scenario())
    # a reserved (1), b refused (2), a's reservation undone (3); nobody bound.
    assert len(client.writes) == 3
    assert [r["name"] for r in client.writes[0]["status"]["reservedFor"]] == ["p-a"]
    assert "reservedFor" not in client.writes[2]["status"]  # p-a dropped again
    assert client.writes[2]["metadata"]["name"] == "a"
    assert client.bound == []
    assert not binder.binding  # both members back in the queue, each with a failure counted
    assert len(binder.queue) == 2
    assert binder.failures == {(NS, "p-a"): 1, (NS, "p-b"): 1}
    assert not binder.pods.in_flight
