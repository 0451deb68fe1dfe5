"""Issue 36, point 3: no claim-creation storm. A pod deleted while the operator was busy (its
deletion missed by the caches) got ~13 claims/s: the garbage collector deleted each claim (its
owner is gone), and each deletion made the controller create the next. Now the first watch
LIST converges the primed caches, a claim is created only for a pod the API server still has,
what was created is remembered, and re-creating one entry's claim backs off."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION, POD_CLAIM_NAME_ANNOTATION
from kdra.kube.errors import NotFound
from kdra.kube.events import EventRecorder
from kdra.kube.informer import Informer
from kdra.kube.resources import PODS, Resource
from kdra.kube.store import Store
from kdra.kube.workqueue import Retry
from kdra.operator.claim_controller import ClaimController, claim_store, pod_store
from kdra.operator.core import claim_births
from kdra.operator.core.claim_births import Births

NS = "ns"


def pod(uid: str = "uid-p", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": NS, "uid": uid, "resourceVersion": "5",
                         "annotations": {CLAIMS_ANNOTATION: json.dumps(
                             [{"name": "gpu", "resourceClaimTemplateName": "t"}])}, **meta},
            "spec": {"schedulerName": "kdra-scheduler"}}


class Api:
    """The API server: the pods it has, the claims it has, what was created and read."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.claims: dict[str, dict[str, Any]] = {}
        self.created: list[str] = []
        self.gets: list[str] = []

    async def get(self, res: Resource, name: str, namespace: str) -> dict[str, Any]:
        self.gets.append(f"{res.plural}/{name}")
        found = (self.pods if res.plural == "pods" else self.claims).get(name)
        if found is None:
            raise NotFound(404, "NotFound", f"{name} not found")
        return found

    async def create(self, res: Resource, body: dict[str, Any], namespace: str
                     ) -> dict[str, Any]:
        name = f"p-gpu-{len(self.created)}"
        self.created.append(name)
        claim = {**body, "metadata": {**body["metadata"], "name": name, "uid": f"uid-{name}",
                                      "resourceVersion": str(10 + len(self.created))}}
        self.claims[name] = claim
        return claim

    async def patch(self, res: Resource, name: str, body: dict[str, Any], namespace: str,
                    **_: Any) -> dict[str, Any]:
        if res.plural == "pods":
            current = self.pods[name]
            annotations = {**current["metadata"]["annotations"],
                           **body["metadata"]["annotations"]}
            self.pods[name] = {**current, "metadata": {**current["metadata"],
                                                        "annotations": annotations}}
            return self.pods[name]
        return body  # an Event's count


def controller(api: Api, cached_pods: list[dict[str, Any]]) -> ClaimController:
    templates = Store("ResourceClaimTemplate")
    templates.upsert({"metadata": {"name": "t", "namespace": NS, "resourceVersion": "1"},
                      "spec": {"spec": {"devices": {"requests": []}}}})
    pods = pod_store()
    pods.prime(cached_pods)
    claims = claim_store()
    ctrl = ClaimController(api, EventRecorder(api),  # type: ignore[arg-type]
                           pods=pods, claims=claims, templates=templates)
    claims.subscribe(ctrl.on_claim)  # as the operator's composition subscribes it
    return ctrl


def test_a_cached_pod_that_is_gone_gets_no_claim_and_leaves_the_caches() -> None:
    stale = pod()
    api = Api([])  # deleted while the operator was busy: only the cache has it
    ctrl = controller(api, [stale])
    gone: list[dict[str, Any]] = []
    ctrl.pod_gone = gone.append
    asyncio.run(ctrl.sync_pod(stale))
    assert api.created == []
    assert api.gets == ["pods/p"]
    assert ctrl.pods.get((NS, "p")) is None and ctrl.pods.was_deleted("uid-p")
    assert gone == [stale]  # the binder drops it too
    # A claim event naming it as owner (the garbage collector deleting a claim) now finds
    # nothing to do: the key is not even queued.
    ctrl.claims.apply("DELETED", {"metadata": {"name": "x", "namespace": NS, "ownerReferences": [
        {"kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}]}})
    assert len(ctrl.pod_queue) == 0


@pytest.mark.parametrize("current", [
    pod(uid="uid-other"),  # replaced by a pod of the same name
    pod(deletionTimestamp="2026-12-04T00:00:00Z"),  # being deleted
    {**pod(), "status": {"phase": "Failed"}},  # done
])
def test_no_claim_for_a_pod_replaced_deleting_or_done(current: dict[str, Any]) -> None:
    api = Api([current])
    ctrl = controller(api, [pod()])
    asyncio.run(ctrl.sync_pod(pod()))
    assert api.created == []


def test_the_garbage_collector_loop_of_the_issue_cannot_start() -> None:
    """The storm, replayed: the cache holds a pod the API server no longer has; every claim
    deletion re-enqueues it. Before: one claim per deletion, for ever. Now: none."""
    stale = pod()
    api = Api([])
    ctrl = controller(api, [stale])
    for _ in range(50):
        asyncio.run(ctrl._sync_pod_key((NS, "p")))
        for name in list(api.claims):  # the garbage collector deletes claims of a gone pod
            claim = api.claims.pop(name)
            ctrl.claims.apply("DELETED", claim)
    assert api.created == []


def test_a_claim_created_but_not_cached_is_asked_for_not_created_twice() -> None:
    live = pod()
    api = Api([live])
    ctrl = controller(api, [live])
    asyncio.run(ctrl.sync_pod(live))
    assert api.created == ["p-gpu-0"]
    # The cache loses it (say, a relist raced the write) and the pod's annotation update
    # has not been seen: the controller asks for the claim it made instead of creating.
    ctrl.claims.delete((NS, "p-gpu-0"))
    asyncio.run(ctrl.sync_pod(live))
    assert api.created == ["p-gpu-0"]
    assert "resourceclaims/p-gpu-0" in api.gets


def test_recreating_a_deleted_claim_backs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    live = pod()
    api = Api([live])
    ctrl = controller(api, [live])
    ctrl.births = Births(clock=lambda: now[0])

    def claim_deleted() -> None:
        for name in list(api.claims):
            ctrl.claims.apply("DELETED", api.claims.pop(name))

    asyncio.run(ctrl.sync_pod(api.pods["p"]))
    claim_deleted()  # a user deletes the pod's claim: it comes back at once
    asyncio.run(ctrl.sync_pod(api.pods["p"]))
    assert len(api.created) == 2
    claim_deleted()  # and again: now after a backoff, not at once
    with pytest.raises(Retry) as retry:
        asyncio.run(ctrl.sync_pod(api.pods["p"]))
    assert retry.value.delay == pytest.approx(claim_births.BASE)
    assert len(api.created) == 2
    now[0] += claim_births.BASE
    asyncio.run(ctrl.sync_pod(api.pods["p"]))
    assert len(api.created) == 3
    claim_deleted()
    with pytest.raises(Retry) as retry:
        asyncio.run(ctrl.sync_pod(api.pods["p"]))
    assert retry.value.delay == pytest.approx(2 * claim_births.BASE)  # doubling
    created = api.claims  # the claims carry the entry (upstream's orphan lookup key)
    assert all(c["metadata"]["annotations"][POD_CLAIM_NAME_ANNOTATION] == "gpu"
               for c in created.values())


def test_births_are_bounded_and_forgotten_with_their_pod(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    monkeypatch.setattr(claim_births, "MAX_PODS", 3)
    births = Births(clock=lambda: 0.0)
    for n in range(5):
        births.created(f"uid-{n}", "gpu", f"c-{n}")
    assert len(births) == 3 and births.name("uid-0", "gpu") is None
    assert births.name("uid-4", "gpu") == "c-4"
    births.forget("uid-4")
    assert births.name("uid-4", "gpu") is None and births.delay("uid-4", "gpu") == 0.0


def test_the_first_list_delivers_deletions_of_what_was_primed() -> None:
    """The root cause: the caches were primed from a start-up LIST, the watch's first LIST
    came seconds later (a busy start-up), and nothing compared the two."""
    seen: list[tuple[str | None, str]] = []
    gone, kept = pod(), {**pod(), "metadata": {**pod()["metadata"], "name": "q"}}
    informer = Informer(None, PODS, lambda event, obj: seen.append(  # type: ignore[arg-type]
        (event, obj["metadata"]["name"])), known=[gone, kept])
    informer.relist([kept])
    assert seen == [(None, "q"), ("DELETED", "p")]


def test_a_pod_newer_at_the_api_server_is_synced_again_not_written_over() -> None:
    """Two operator replicas: the other one recorded its claim on the pod after this one's
    cache saw it. The live check finds a newer pod: no claim is created from the stale view
    and no name is written over (tests/e2e/test_chaos.py, two operators at once)."""
    cached = pod()
    newer = pod()
    newer["metadata"] = {**newer["metadata"], "resourceVersion": "9", "annotations": {
        **newer["metadata"]["annotations"],
        "resource.kdra.dev/claim-statuses": json.dumps({"gpu": "theirs"})}}
    api = Api([newer])
    ctrl = controller(api, [cached])
    with pytest.raises(Retry):
        asyncio.run(ctrl.sync_pod(cached))
    assert api.created == []
    assert ctrl.pods.get((NS, "p")) == newer  # the next sync starts from it
