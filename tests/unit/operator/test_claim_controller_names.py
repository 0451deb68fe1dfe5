"""The claim controller never replaces the claim name a pod already records: another
operator replica may have generated that claim a moment ago (so this replica's cache lacks it),
and a binder may be binding the pod on it."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest

from kdra.kube.core.podclaims import (
    CLAIM_STATUSES_ANNOTATION,
    CLAIMS_ANNOTATION,
    FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
)
from kdra.kube.errors import NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.kube.store import Store
from kdra.operator.claim_controller import ClaimController, claim_store, pod_store

NS = "ns"
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": NS, "uid": "uid-p", "resourceVersion": "5",
                    "annotations": {
                        CLAIMS_ANNOTATION: json.dumps([{"name": "gpu",
                                                        "resourceClaimTemplateName": "t"}]),
                        CLAIM_STATUSES_ANNOTATION: json.dumps({"gpu": "p-gpu-one"})}},
       "spec": {"schedulerName": "kdra-scheduler"}}


def generated(name: str) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "3",
                         "annotations": {POD_CLAIM_NAME_ANNOTATION: "gpu"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                              "uid": "uid-p", "controller": True}]},
            "spec": {"devices": {"requests": []}}, "status": {}}


class Server:
    """The API server as far as this test needs: it has ``claims``; pod patches are recorded."""

    def __init__(self, claims: dict[str, dict[str, Any]]) -> None:
        self.stored = claims
        self.pods = {POD["metadata"]["name"]: POD}  # still there: it may get claims
        self.patches: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []

    async def get(self, res: Resource, name: str, namespace: str) -> dict[str, Any]:
        if res.plural == "pods" and name in self.pods:
            return self.pods[name]  # a claim is created only for a pod still there
        if name not in self.stored:
            raise NotFound(404, "NotFound", f"{name} not found")
        return self.stored[name]

    async def patch(self, res: Resource, name: str, body: dict[str, Any],
                    namespace: str) -> dict[str, Any]:
        self.patches.append(body)
        return POD

    async def create(self, res: Resource, body: dict[str, Any], namespace: str
                     ) -> dict[str, Any]:
        self.created.append(body)
        return {**body, "metadata": {**body["metadata"], "name": "p-gpu-new",
                                     "uid": "uid-new", "resourceVersion": "9"}}


def controller(server: Server, cached: list[dict[str, Any]]) -> ClaimController:
    claims = claim_store()
    for claim in cached:
        claims.upsert(claim)
    templates = Store("ResourceClaimTemplate")
    templates.upsert({"metadata": {"name": "t", "namespace": NS, "resourceVersion": "1"},
                      "spec": {"spec": {"devices": {"requests": []}}}})
    ctrl = ClaimController(server, EventRecorder(server),  # type: ignore[arg-type]
                           pods=pod_store(), claims=claims, templates=templates)
    claims.subscribe(ctrl.on_claim)  # as the operator's composition subscribes it
    return ctrl


def test_a_recorded_claim_missing_from_the_cache_is_asked_for_not_replaced() -> None:
    # This replica's cache has only its own duplicate (p-gpu-two); the pod records p-gpu-one,
    # which the other replica created and the API server has.
    server = Server({"p-gpu-one": generated("p-gpu-one")})
    ctrl = controller(server, [generated("p-gpu-two")])
    asyncio.run(ctrl.sync_pod(POD))
    assert server.patches == []
    assert server.created == []


def test_a_recorded_claim_that_is_gone_is_generated_again() -> None:
    server = Server({})
    ctrl = controller(server, [])
    asyncio.run(ctrl.sync_pod(POD))
    assert len(server.created) == 1
    recorded = json.loads(server.patches[0]["metadata"]["annotations"][
        CLAIM_STATUSES_ANNOTATION])
    assert recorded == {"gpu": "p-gpu-new"}


def test_the_recorded_pod_is_handed_over_as_the_api_server_returned_it() -> None:
    # The binder starts on the pod from the patch response, not a watch hop later.
    server = Server({})
    handed: list[dict[str, Any]] = []
    ctrl = controller(server, [])
    ctrl.pod_written = handed.append
    asyncio.run(ctrl.sync_pod(POD))
    assert len(server.patches) == 1
    assert handed == [POD]  # Server.patch returns POD


def test_nothing_is_handed_over_when_no_names_change() -> None:
    server = Server({"p-gpu-one": generated("p-gpu-one")})
    handed: list[dict[str, Any]] = []
    ctrl = controller(server, [generated("p-gpu-one")])
    ctrl.pod_written = handed.append
    asyncio.run(ctrl.sync_pod(POD))
    assert server.patches == [] and handed == []


class Releasing(Server):
    """Also takes status writes, deletes and finalizer patches of claims; counts GETs. A
    claim with finalizers is left terminating by a delete, as the API server does."""

    def __init__(self, claim: dict[str, Any]) -> None:
        super().__init__({})
        self.claim = claim
        self.gets: list[str] = []
        self.statuses: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.calls: list[str] = []

    async def get(self, res: Resource, name: str, namespace: str) -> dict[str, Any]:
        self.gets.append(name)
        raise NotFound(404, "NotFound", f"{name} not found")

    async def replace_status(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append("status")
        self.statuses.append(body)
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "11"}}

    async def delete(self, res: Resource, name: str, namespace: str, *,
                     uid: str) -> dict[str, Any]:
        self.calls.append("delete")
        self.deleted.append(name)
        if self.claim["metadata"].get("finalizers"):
            self.claim = {**self.claim, "metadata": {**self.claim["metadata"],
                                                     "deletionTimestamp": "2026-12-01T00:00:00Z",
                                                     "resourceVersion": "10"}}
            return self.claim
        return {"kind": "Status", "status": "Success"}

    async def patch(self, res: Resource, name: str, body: dict[str, Any],
                    namespace: str) -> dict[str, Any]:
        self.calls.append("patch")
        self.patches.append(body)
        version = str(int(body["metadata"]["resourceVersion"]) + 1)
        self.claim = {**self.claim, "metadata": {**self.claim["metadata"], **body["metadata"],
                                                 "resourceVersion": version}}
        return self.claim


def reserved_claim(finalizers: list[str]) -> dict[str, Any]:
    claim = generated("p-gpu-one")
    claim["metadata"]["finalizers"] = finalizers
    claim["status"] = {"allocation": {"devices": {"results": []}},
                       "reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}]}
    return claim


def test_a_pod_whose_deletion_was_seen_is_gone_without_asking_the_api_server() -> None:
    claim = reserved_claim([FINALIZER])
    for seen_deleted, gets in ((True, 0), (False, 1)):
        server = Releasing(claim)
        ctrl = controller(server, [claim])
        if seen_deleted:
            ctrl.on_pod("DELETED", POD)
        asyncio.run(ctrl.sync_claim(claim))
        assert len(server.gets) == gets  # the reserving pod, unless its deletion was seen
        if not seen_deleted:
            assert "reservedFor" not in server.statuses[0]["status"]  # no field, not []


def test_the_claim_of_a_pod_whose_deletion_was_watched_is_released_then_deleted(
        caplog: pytest.LogCaptureFixture) -> None:
    # Issue 42: two writes — the finalizer removed, then (on that version's watch event, so
    # the API server serves it from its watch cache) the claim deleted, which ends it at once
    # with its allocation; no status write, no GET, and no DELETE left for the garbage
    # collector (which sent 1.9 per claim at 500 nodes). One log line says both.
    caplog.set_level(logging.INFO, logger="kdra.operator.claim_release")
    claim = reserved_claim([FINALIZER])
    server = Releasing(claim)
    ctrl = controller(server, [claim])
    ctrl.on_pod("DELETED", POD)
    asyncio.run(ctrl.sync_claim(claim))
    assert server.calls == ["patch"]
    assert server.patches[0]["metadata"] == {"resourceVersion": "3", "finalizers": []}
    asyncio.run(ctrl.sync_claim(claim))  # an older version's event on its way: nothing more
    assert server.calls == ["patch"]
    ctrl.claims.apply("MODIFIED", server.claim)  # the watch event of the finalizer-free version
    asyncio.run(ctrl.sync_claim(ctrl.claims.get((NS, "p-gpu-one")) or {}))
    assert server.calls == ["patch", "delete"]
    assert server.statuses == []
    assert server.gets == []
    assert ctrl.claims.get((NS, "p-gpu-one")) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"released and deleted claim {NS}/p-gpu-one: its pod is done, replaced or gone"]


def test_the_claim_of_a_pod_never_seen_is_released_and_left_to_the_garbage_collector() -> None:
    # As upstream: a pod the controller does not see may be one it has not seen yet. Its
    # reservation goes only after a live GET says it is gone; unreserve and deallocate, drop
    # the finalizer; the garbage collector deletes the claim (its ownerReference names the pod).
    claim = reserved_claim([FINALIZER])
    server = Releasing(claim)
    ctrl = controller(server, [claim])
    asyncio.run(ctrl.sync_claim(claim))
    assert server.calls == ["status", "patch"]
    written = server.statuses[0]["status"]
    assert "allocation" not in written and "reservedFor" not in written
    assert server.patches[0]["metadata"]["finalizers"] == []
    assert server.gets == ["p"]


def test_a_claim_deleted_while_in_use_is_released_by_its_finalizer_alone() -> None:
    # A user deleted the claim while its pod ran; once the pod is gone the finalizer's
    # removal ends it — its allocation goes with the object, no status write first.
    claim = reserved_claim([FINALIZER])
    claim["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    server = Releasing(claim)
    ctrl = controller(server, [claim])
    ctrl.on_pod("DELETED", POD)
    asyncio.run(ctrl.sync_claim(claim))
    assert server.calls == ["patch"]
    assert ctrl.claims.get((NS, "p-gpu-one")) is None


def test_each_release_write_is_handed_to_the_binder_as_written() -> None:
    # The binder sees the device freed from the DELETE's answer, not a watch hop later: the
    # claim cache hands it to its other subscribers (not back to the controller).
    for pod in (None, {**POD, "status": {"phase": "Succeeded"}}):  # gone; done
        claim = reserved_claim([FINALIZER])
        server = Releasing(claim)
        ctrl = controller(server, [claim])
        handed: list[tuple[str, dict[str, Any]]] = []
        ctrl.claims.subscribe(
            lambda event, obj, old: handed.append((event, obj)))  # noqa: B023
        ctrl.on_pod("DELETED" if pod is None else "MODIFIED", pod or POD)
        asyncio.run(ctrl.sync_claim(claim))
        assert handed == []  # the finalizer off: that version's watch event is awaited
        ctrl.claims.apply("MODIFIED", server.claim)  # the watch event (handed on as well)
        asyncio.run(ctrl.sync_claim(ctrl.claims.get((NS, "p-gpu-one")) or {}))
        # Deleted, which ends it: handed on from the DELETE's answer.
        assert [event for event, _ in handed] == ["MODIFIED", "DELETED"]
        assert handed[0][1]["metadata"]["finalizers"] == []
        assert handed[0][1]["metadata"]["resourceVersion"] == "4"
        assert ctrl.claims.get((NS, "p-gpu-one")) is None


def test_the_claim_of_a_done_or_replaced_pod_is_deleted() -> None:
    done = {**POD, "status": {"phase": "Succeeded"}}
    replaced = {**POD, "metadata": {**POD["metadata"], "uid": "uid-other"}}
    for pod in (done, replaced):
        for finalizers, calls in (([FINALIZER], ["patch", "delete"]), ([], ["delete"])):
            claim = reserved_claim(finalizers)
            server = Releasing(claim)
            ctrl = controller(server, [claim])
            ctrl.on_pod("MODIFIED", pod)
            asyncio.run(ctrl.sync_claim(claim))
            assert server.calls == calls[:1], pod
            # An older version's watch event finds nothing more to do; the finalizer-free
            # version's has the claim deleted (where the finalizer came off first).
            ctrl.claims.apply("MODIFIED", claim)
            asyncio.run(ctrl._sync_claim_key((NS, "p-gpu-one")))
            assert server.calls == calls[:1], pod
            if finalizers:
                ctrl.claims.apply("MODIFIED", server.claim)
                asyncio.run(ctrl._sync_claim_key((NS, "p-gpu-one")))
            assert server.calls == calls, pod


def test_a_duplicate_claim_the_pods_record_does_not_name_is_released_and_deleted() -> None:
    # Two replicas at once: each claim controller generated a claim for the pod's entry and
    # each binder allocated (and had prepared) its own; one Binding won and recorded
    # p-gpu-one with nodeName. The other claim, p-gpu-two, is reserved for the pod but not its
    # claim: released (finalizer off, then DELETE on that version's event), devices freed.
    bound = {**POD, "spec": {**POD["spec"], "nodeName": "node-1"}}
    duplicate = reserved_claim([FINALIZER])
    duplicate["metadata"] = {**duplicate["metadata"], "name": "p-gpu-two",
                             "uid": "uid-p-gpu-two"}
    duplicate["status"]["devices"] = [{"driver": "gpu.kdra.dev", "pool": "node-1",
                                       "device": "gpu-0", "conditions": [
                                           {"type": "Ready", "status": "True"}]}]
    recorded = reserved_claim([FINALIZER])  # p-gpu-one, the pod's own
    server = Releasing(duplicate)
    ctrl = controller(server, [recorded, duplicate])
    ctrl.on_pod("MODIFIED", bound)
    asyncio.run(ctrl.sync_claim(recorded))
    assert server.calls == []  # the recorded claim stays reserved and allocated
    asyncio.run(ctrl.sync_claim(duplicate))
    assert server.calls == ["patch"] and server.gets == []
    ctrl.claims.apply("MODIFIED", server.claim)
    asyncio.run(ctrl.sync_claim(ctrl.claims.get((NS, "p-gpu-two")) or {}))
    assert server.calls == ["patch", "delete"] and server.deleted == ["p-gpu-two"]
    # Unbound, its record final all the same (written apart when it was reported
    # unschedulable): the duplicate would hold its devices while the pod waits for them.
    unbound = {**POD, "metadata": {**POD["metadata"], "resourceVersion": "6"}}
    server = Releasing(duplicate)
    ctrl = controller(server, [recorded, duplicate])
    ctrl.on_pod("MODIFIED", unbound)
    asyncio.run(ctrl.sync_claim(duplicate))
    assert server.calls == ["patch"]
    unrecorded = {**POD, "metadata": {**POD["metadata"], "resourceVersion": "7",
                                      "annotations": {CLAIMS_ANNOTATION: POD["metadata"][
                                          "annotations"][CLAIMS_ANNOTATION]}}}
    server = Releasing(duplicate)
    ctrl = controller(server, [recorded, duplicate])
    ctrl.on_pod("MODIFIED", unrecorded)  # no record yet: nothing is superseded
    asyncio.run(ctrl.sync_claim(duplicate))
    assert server.calls == []


def test_a_claim_only_made_to_look_generated_for_the_pod_is_left_to_the_scheduler() -> None:
    # A tenant's object with the pod's owner reference and pod-claim-name but none of a claim
    # controller's finalizer is not a duplicate to delete: the scheduler refuses it to others.
    bound = {**POD, "spec": {**POD["spec"], "nodeName": "node-1"}}
    decoy = generated("decoy")
    server = Releasing(decoy)
    ctrl = controller(server, [reserved_claim([FINALIZER]), decoy])
    ctrl.on_pod("MODIFIED", bound)
    asyncio.run(ctrl.sync_claim(decoy))
    assert server.calls == []
