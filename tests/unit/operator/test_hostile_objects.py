"""The operator's services against objects nobody should have written (issue 22): caches and
start-up never raise on a stored object; kdra-owned values kdra did not write are ignored; a
generated claim serves only the pod that owns it (upstream's IsForPod)."""

from __future__ import annotations

import asyncio
import json
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
from kdra.kube.informer import Informer
from kdra.kube.resources import PODS, Resource
from kdra.kube.store import Store
from kdra.operator.claim_controller import ClaimController, claim_store, pod_store
from kdra.operator.scheduler import Binder, BinderSettings

NS = "ns"


def pod(name: str, uid: str, annotations: dict[str, str], node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "kdra-scheduler",
                            "containers": [{"name": "main", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid, "resourceVersion": "5",
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "annotations": annotations},
            "spec": spec, "status": {"phase": "Pending"}}


def generated(name: str, owner: str, owner_uid: str, *, allocated: bool = True,
              reserved: tuple[str, ...] = ()) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "3",
                     "finalizers": [FINALIZER],
                     "annotations": {POD_CLAIM_NAME_ANNOTATION: "gpu"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": owner,
                                          "uid": owner_uid, "controller": True}]},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu.kdra.dev"}}]}},
        "status": {}}
    if allocated:
        claim["status"]["allocation"] = {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.kdra.dev", "pool": "node-1", "device": "gpu-0"}]}}
        claim["status"]["reservedFor"] = [{"resource": "pods", "name": owner, "uid": uid}
                                          for owner, uid in zip(reserved[::2], reserved[1::2],
                                                                strict=True)]
    return claim


TEMPLATE_ENTRY = json.dumps([{"name": "gpu", "resourceClaimTemplateName": "t"}])
VICTIM = generated("victim-gpu-abcde", "victim", "uid-victim",
                   reserved=("victim", "uid-victim"))


# --------------------------------------------------------------------------- caches


@pytest.mark.parametrize("annotation", [
    "[" * 1000 + "]" * 1000,
    "- {name: a, resourceClaimName: b, 1: x}",
    "- &a {name: a, resourceClaimName: b}\n- *a",
])
def test_pod_store_indexes_never_raise(annotation: str) -> None:
    """Attack 1: these annotations made _template_refs raise in Store.prime at start-up."""
    store = pod_store()
    bad = pod("bad", "uid-bad", {CLAIMS_ANNOTATION: annotation})
    good = pod("good", "uid-good", {CLAIMS_ANNOTATION: TEMPLATE_ENTRY})
    store.prime([bad, good])
    assert len(store) == 2
    assert store.index("template", "t") == [good]
    assert store.index("uid", "uid-bad") == [bad]


def test_an_index_function_that_raises_indexes_the_object_under_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(obj: dict[str, Any]) -> list[str]:
        raise RecursionError("maximum recursion depth exceeded")

    store = Store("Thing", {"x": broken, "name": lambda o: [o["metadata"]["name"]]})
    obj = {"metadata": {"name": "a", "resourceVersion": "1"}}
    store.prime([obj])
    assert store.get(("", "a")) is obj and store.index("name", "a") == [obj]
    assert store.delete(("", "a")) is obj
    assert "not indexed by x" in caplog.text


def test_a_relist_keeps_objects_it_could_not_decode() -> None:
    """A skipped (undecodable) list item is not a deletion: caches keep what they had."""
    seen: list[tuple[str | None, str]] = []
    informer = Informer(None, Resource("", "v1", "pods", True, "Pod"),  # type: ignore[arg-type]
                        lambda event, obj: seen.append((event, obj["metadata"]["name"])))
    a = {"metadata": {"name": "a", "namespace": NS, "resourceVersion": "1"}}
    b = {"metadata": {"name": "b", "namespace": NS, "resourceVersion": "1"}}
    informer.relist([a, b])
    seen.clear()
    informer.relist([a], skipped=[{"metadata": {"name": "b", "namespace": NS}}])
    assert seen == [(None, "a")]
    informer.relist([a])
    assert seen[-1] == ("DELETED", "b")


# --------------------------------------------------------------------------- claim controller


class Api:
    """The API server as far as these tests need."""

    def __init__(self, claims: dict[str, dict[str, Any]] | None = None) -> None:
        self.stored = claims or {}
        self.pods: dict[str, dict[str, Any]] = {}  # the pods the API server has
        self.gets: list[str] = []
        self.patches: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []

    async def get(self, res: Resource, name: str, namespace: str) -> dict[str, Any]:
        self.gets.append(res.path(namespace, name))
        if res.plural == "pods":
            if name not in self.pods:
                raise NotFound(404, "NotFound", f"pod {name} not found")
            return self.pods[name]
        if name not in self.stored:
            raise NotFound(404, "NotFound", f"{name} not found")
        return self.stored[name]

    async def patch(self, res: Resource, name: str, body: dict[str, Any],
                    namespace: str, **_: Any) -> dict[str, Any]:
        self.patches.append(body)
        return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "99"}}

    async def create(self, res: Resource, body: dict[str, Any], namespace: str
                     ) -> dict[str, Any]:
        self.created.append(body)
        return {**body, "metadata": {**body["metadata"], "name": "thief-gpu-new",
                                     "uid": "uid-new", "resourceVersion": "9"}}

    async def replace_status(self, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
        self.statuses.append(body)
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "11"}}


def controller(api: Api, claims: list[dict[str, Any]]) -> ClaimController:
    store = claim_store()
    store.prime(claims)
    templates = Store("ResourceClaimTemplate")
    templates.upsert({"metadata": {"name": "t", "namespace": NS, "resourceVersion": "1"},
                      "spec": {"spec": {"devices": {"requests": []}}}})
    return ClaimController(api, EventRecorder(api),  # type: ignore[arg-type]
                           pods=pod_store(), claims=store, templates=templates)


def test_a_forged_claim_status_of_another_pods_claim_is_replaced_not_used() -> None:
    """Attack 6: claim-statuses naming the victim's generated claim, on a pod bound to a
    node: the victim's claim is not reserved for the thief; the thief gets its own claim."""
    api = Api({VICTIM["metadata"]["name"]: VICTIM})
    ctrl = controller(api, [VICTIM])
    thief = pod("thief", "uid-thief", {
        CLAIMS_ANNOTATION: TEMPLATE_ENTRY,
        CLAIM_STATUSES_ANNOTATION: json.dumps({"gpu": VICTIM["metadata"]["name"],
                                               "extra": VICTIM["metadata"]["name"]})},
        node="node-1")
    api.pods["thief"] = thief
    asyncio.run(ctrl.sync_pod(thief))
    assert api.statuses == []  # nothing added to the victim's reservedFor
    assert len(api.created) == 1  # the thief's own claim
    recorded = json.loads(api.patches[0]["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION])
    assert recorded == {"gpu": "thief-gpu-new"}  # the forged extra key is gone too


def test_a_bound_pod_is_reserved_on_its_own_claim() -> None:
    own = generated("own-gpu-abcde", "owner", "uid-owner")
    api = Api()
    ctrl = controller(api, [own])
    owner = pod("owner", "uid-owner", {
        CLAIMS_ANNOTATION: TEMPLATE_ENTRY,
        CLAIM_STATUSES_ANNOTATION: json.dumps({"gpu": own["metadata"]["name"]})}, node="node-1")
    asyncio.run(ctrl.sync_pod(owner))
    (written,) = api.statuses
    assert [r["uid"] for r in written["status"]["reservedFor"]] == ["uid-owner"]


def test_a_dotted_path_in_claim_statuses_never_becomes_a_request() -> None:
    """Attack 6: ``../`` in claim-statuses made the operator GET arbitrary API paths."""
    api = Api()
    ctrl = controller(api, [])
    forged = pod("p", "uid-p", {
        CLAIMS_ANNOTATION: TEMPLATE_ENTRY,
        CLAIM_STATUSES_ANNOTATION: json.dumps(
            {"gpu": "../../../../api/v1/namespaces/kdra-system/secrets/kdra-webhook-tls"})})
    api.pods["p"] = forged
    asyncio.run(ctrl.sync_pod(forged))
    assert api.gets == [PODS.path(NS, "p")]  # only the pod itself (is it still there?)
    assert len(api.created) == 1


def test_reservations_with_unusable_names_are_dropped_without_a_request() -> None:
    claim = generated("c", "owner", "uid-owner", reserved=("../../secrets/x", "uid-x"))
    api = Api()
    ctrl = controller(api, [claim])
    asyncio.run(ctrl.sync_claim(claim))
    assert api.gets == []
    (written,) = api.statuses
    assert "reservedFor" not in written["status"]  # no reservation left: no field (upstream)
    assert "allocation" not in written["status"]  # kdra's allocation nobody reserves: freed


# --------------------------------------------------------------------------- binder


class Recorded:
    """Records the binder's pod-status patches and events; nothing else is called."""

    def __init__(self) -> None:
        self.conditions: list[dict[str, Any]] = []

    async def patch(self, res: Resource, name: str, body: dict[str, Any], *_: Any,
                    **__: Any) -> dict[str, Any]:
        self.conditions.extend(body.get("status", {}).get("conditions", []))
        return {"metadata": {"name": name, "namespace": NS, "resourceVersion": "6"}}

    async def create(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}


def schedule(binder: Binder, obj: dict[str, Any]) -> str:
    async def run() -> str:
        binder.on_pod(None, obj)
        return await binder._schedule(("ns", obj["metadata"]["name"]), obj)

    return asyncio.run(run())


@pytest.mark.parametrize("annotations", [
    {"devices.resource.kdra.dev/main": "gpu.kdra.dev/node-1/gpu-0"},
    {"gpus.resource.kdra.dev/main": "GPU-victim", CLAIMS_ANNOTATION: "[]"},
])
def test_the_binder_refuses_pods_with_forged_device_annotations(
        annotations: dict[str, str]) -> None:
    """Attack 7: kdra-scheduler bound a pod with no claims but forged device annotations."""
    client = Recorded()
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(flush_interval=3600))
    assert schedule(binder, pod("p", "uid-p", annotations)) == "invalid"
    (condition,) = client.conditions
    assert condition["reason"] == "InvalidPod"
    assert "is written by kdra only" in condition["message"]


def test_the_binder_does_not_use_another_pods_generated_claim() -> None:
    client = Recorded()
    claims = claim_store()
    claims.upsert(VICTIM)
    binder = Binder(client, EventRecorder(client), claims=claims,  # type: ignore[arg-type]
                    settings=BinderSettings(flush_interval=3600))
    thief = pod("thief", "uid-thief", {
        CLAIMS_ANNOTATION: TEMPLATE_ENTRY,
        CLAIM_STATUSES_ANNOTATION: json.dumps({"gpu": VICTIM["metadata"]["name"]})})
    assert schedule(binder, thief) == "unschedulable"
    (condition,) = client.conditions
    assert "belongs to another pod" in condition["message"]
    assert ("ns", "thief") not in binder.binding


def test_the_binder_refuses_another_pods_generated_claim_named_directly() -> None:
    """Issue 36, point 7: ``resourceClaimName`` naming the claim generated for another pod
    got it reserved and bound. Now: refused (InvalidPod), naming the claim and its pod."""
    client = Recorded()
    claims = claim_store()
    claims.upsert(VICTIM)
    binder = Binder(client, EventRecorder(client), claims=claims,  # type: ignore[arg-type]
                    settings=BinderSettings(flush_interval=3600))
    name = VICTIM["metadata"]["name"]
    thief = pod("thief", "uid-thief", {CLAIMS_ANNOTATION: json.dumps(
        [{"name": "gpu", "resourceClaimName": name}])})
    assert schedule(binder, thief) == "invalid"
    (condition,) = client.conditions
    assert condition["reason"] == "InvalidPod"
    owner = VICTIM["metadata"]["ownerReferences"][0]["name"]
    assert f"claim {name!r} (entry 'gpu') was generated for pod {owner!r} and serves only " \
        "that pod" in condition["message"]
    assert ("ns", "thief") not in binder.binding


@pytest.mark.parametrize(("container", "env"), [
    ("initContainers", [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
    ("ephemeralContainers", [{"name": "KDRA_DEVICES", "value": "gpu.kdra.dev/node-1/gpu-0"}]),
])
def test_the_binder_refuses_device_variables_set_by_the_user(
        container: str, env: list[dict[str, Any]]) -> None:
    """Issue 36, point 7, stored without the webhook: a claimless kdra-scheduler pod whose
    init (or ephemeral) container sets the variables is not bound."""
    client = Recorded()
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(flush_interval=3600))
    obj = pod("p", "uid-p", {})
    obj["spec"][container] = [{"name": "sneaky", "image": "busybox", "env": env}]
    assert schedule(binder, obj) == "invalid"
    (condition,) = client.conditions
    assert condition["reason"] == "InvalidPod"
    assert condition["message"].startswith(f"spec.{container}[0].env[0]: {env[0]['name']} is "
                                           "set by kdra only")


def test_an_api_error_is_retried_with_one_log_line_not_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """Attack 6's 403 target was retried forever, each time with a traceback."""
    from kdra.kube.errors import Forbidden
    from kdra.kube.workqueue import WorkQueue

    calls: list[str] = []

    async def handler(key: str) -> None:
        calls.append(key)
        if len(calls) < 3:
            raise Forbidden(403, "Forbidden", "secrets is forbidden")

    async def run() -> None:
        queue: WorkQueue[str] = WorkQueue("test", handler, workers=1, base_delay=0.01)
        queue.start()
        queue.add("k")
        for _ in range(200):
            if len(calls) >= 3:
                break
            await asyncio.sleep(0.01)
        await queue.stop()

    asyncio.run(run())
    assert calls == ["k", "k", "k"]
    failures = [r for r in caplog.records if "reconciling" in r.getMessage()]
    assert len(failures) == 2 and all(r.exc_info is None for r in failures)
    assert "403 Forbidden: secrets is forbidden" in failures[0].getMessage()
