"""Gangs sized by scheduler-plugins' PodGroup objects in the binder (kdra.operator.scheduler
.gangs ``on_pod_group``) without a cluster: the binder, its snapshot and the joint search are
real, a recording client stands in for the API server.

Two pods labelled for gang "t" without the ``gang-min-member`` annotation: invalid until a
PodGroup "t" sizes the gang (the message says how); a PodGroup of 3 makes them wait for a
third; changed to 2, the waiting members are tried again at once and placed together; a bad
PodGroup makes the gang invalid naming its field; deleted, the gang is unsized again.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from kdra.kube.core.flavours import KDRA
from kdra.kube.errors import ApiError, Forbidden, NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.resources import POD_GROUPS
from kdra.operator.claim_controller import claim_store
from kdra.operator.composition import Operator
from kdra.operator.core.gangs import MIN_MEMBER_ANNOTATION
from kdra.operator.handlers.routes import watches
from kdra.operator.scheduler import Binder, BinderSettings
from tests.unit.operator.test_binder_gang_preemption import (
    CLASS,
    NS,
    GangRecording,
    claim,
    gpus,
    node,
    pod,
)


def member(name: str) -> dict[str, Any]:
    body = pod(name, 0, gang="t")
    del body["metadata"]["annotations"][MIN_MEMBER_ANNOTATION]
    return body


def group(min_member: Any) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "t", "namespace": NS, "resourceVersion": "1"},
            "spec": {"minMember": min_member, "scheduleTimeoutSeconds": 30}}


def test_a_pod_group_sizes_its_gang() -> None:
    members = [member("t-0"), member("t-1")]
    client = GangRecording(*members)
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(release_wait=0.0, wake_delay=0.001,
                                            flush_interval=3600))
    for raw in (claim("t-0-gpu", "1", 2), claim("t-1-gpu", "2", 2)):
        binder.claims.upsert(raw)
    binder.prime(nodes=[node("w1"), node("w2")], slices=[gpus("w1"), gpus("w2")],
                 classes=[CLASS], pods=[])

    async def scenario() -> tuple[list[str], set[str], int]:
        for body in members:
            binder.on_pod(None, body)
        key = (NS, "t-0")
        results = [await binder.gangs.schedule(key, members[0])]  # no size anywhere
        binder.on_pod_group(None, group(3))
        queued = len(binder.queue)  # the members were tried again
        results.append(await binder.gangs.schedule(key, members[0]))  # 2 of 3 pending
        binder.on_pod_group("MODIFIED", group("three"))
        results.append(await binder.gangs.schedule(key, members[0]))  # bad PodGroup
        binder.on_pod_group("MODIFIED", group(2))
        results.append(await binder.gangs.schedule(key, members[0]))
        placed = {k[1]: attempt.node for k, attempt in binder.binding.items()}
        await binder.stop()
        return results, set(placed.values()), queued

    results, nodes, queued = asyncio.run(scenario())
    assert results == ["invalid", "waiting", "invalid", "allocated"]
    assert queued == 2
    assert nodes == {"w1", "w2"}  # both members placed, together
    first, waiting, bad = (client.messages("t-1")[0], client.messages("t-0")[1],
                           client.messages("t-1")[-1])
    assert "or create a PodGroup (scheduling.x-k8s.io/v1alpha1)" in first, first
    assert "gang 't' waits for its pods: 2 of 3 (minMember) pending" in waiting, waiting
    assert "PodGroup 't': spec.minMember: 'three' is not a whole number" in bad, bad


def test_a_deleted_pod_group_unsizes_its_gang() -> None:
    binder = Binder(GangRecording(), EventRecorder(GangRecording()),  # type: ignore[arg-type]
                    claims=claim_store(), settings=BinderSettings(flush_interval=3600))
    binder.on_pod_group(None, group(2))
    assert binder.gangs.groups == {(NS, "t"): 2}
    binder.on_pod_group("DELETED", group(2))
    assert binder.gangs.groups == {}


class Lister:
    """The operator's client, for its start-up LIST of PodGroups."""

    def __init__(self, answer: list[dict[str, Any]] | ApiError) -> None:
        self.answer = answer

    async def list(self, res: Any, *_: Any, **__: Any) -> list[dict[str, Any]]:
        assert res is POD_GROUPS
        if isinstance(self.answer, ApiError):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(("answer", "served"), [
    ([group(2)], True),
    (NotFound(404, "NotFound", "the server could not find the requested resource"), False),
    (Forbidden(403, "Forbidden", "cannot list resource \"podgroups\""), False),
])
def test_the_operator_reads_pod_groups_where_served_and_allowed(answer: Any,
                                                                served: bool) -> None:
    """Operator.prime_pod_groups: served and allowed, the PodGroups reach the binder (and are
    watched); not installed, or not allowed by an older ClusterRole, the operator starts all
    the same and sizes gangs by the annotation."""
    binder = Binder(GangRecording(), EventRecorder(GangRecording()),  # type: ignore[arg-type]
                    claims=claim_store(), settings=BinderSettings(flush_interval=3600))
    operator = SimpleNamespace(client=Lister(answer), binder=binder, primed={},
                               pod_groups=None)
    asyncio.run(Operator.prime_pod_groups(operator))  # type: ignore[arg-type]
    assert operator.pod_groups is served
    assert binder.gangs.groups == ({(NS, "t"): 2} if served else {})
    assert (POD_GROUPS.plural in operator.primed) is served
    assert ("podgroups" in {w.resource.plural for w in watches(
        KDRA, pod_groups=operator.pod_groups)}) is served
