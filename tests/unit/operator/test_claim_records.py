"""A pod's claim-name record rides on its Binding in kdra's flavour (issue 42): the names the
claim controller decided (kdra.operator.core.claim_records), the Binding that writes them with
the pod's resourceVersion as its precondition (kdra.operator.scheduler.writes), and what
happens when the pod changed meanwhile."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from kdra.kube.core.flavours import KDRA, NATIVE
from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION, PodClaim
from kdra.kube.errors import Conflict
from kdra.kube.events import EventRecorder
from kdra.operator.claim_controller import claim_store
from kdra.operator.core.claim_records import ClaimRecords
from kdra.operator.scheduler import Binder
from kdra.operator.scheduler.pending import Attempt
from kdra.operator.scheduler.writes import PodChanged

KEY = ("ns", "p")
ENTRY = PodClaim("gpu", resource_claim_template_name="one-gpu")
CLAIMS = json.dumps([{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# ---------------------------------------------------------------------- the book


def test_held_names_are_the_pods_own_and_fall_due_after_the_grace() -> None:
    clock = Clock()
    records = ClaimRecords(grace=10.0, clock=clock)
    assert records.due(KEY, "u1")  # nothing held: a record would be written at once
    assert records.put(KEY, "u1", {"gpu": "p-gpu-abcde"})
    assert not records.put(KEY, "u1", {"gpu": "p-gpu-abcde"})  # nothing new
    assert records.names(KEY, "u1") == {"gpu": "p-gpu-abcde"}
    assert records.names(KEY, "u2") is None  # another pod under the same name
    assert not records.due(KEY, "u1")
    assert records.remaining(KEY) == pytest.approx(10.0)
    clock.now += 6
    assert records.put(KEY, "u1", {"gpu": "p-gpu-fghij"})  # changed names...
    clock.now += 4
    assert records.due(KEY, "u1")  # ...do not postpone the record
    assert records.remaining(KEY) == 0.0
    assert records.due(KEY, "u2")
    assert records.put(KEY, "u2", {"gpu": "p-gpu-klmno"})  # the pod replaced: afresh
    assert not records.due(KEY, "u2") and records.names(KEY, "u1") is None
    records.drop(KEY)
    assert len(records) == 0 and records.names(KEY, "u2") is None


def test_a_pod_reported_unschedulable_has_its_record_written_at_once() -> None:
    records = ClaimRecords(grace=10.0, clock=Clock())
    woken: list[tuple[str, str]] = []
    records.wake = woken.append
    records.request(KEY)  # nothing held: nothing to write
    assert woken == []
    records.put(KEY, "u1", {"gpu": "p-gpu-abcde"})
    records.request(KEY)
    records.request(KEY)
    assert woken == [KEY]  # the claim controller is queued once
    assert records.due(KEY, "u1")


def test_only_kdras_flavour_records_in_the_binding() -> None:
    pod = {"metadata": {"annotations": {}}}
    names = {"gpu": "p-gpu-abcde"}
    assert KDRA.binding_record(pod, names) == {
        CLAIM_STATUSES_ANNOTATION: json.dumps(names)}
    recorded = {"metadata": {"annotations": {CLAIM_STATUSES_ANNOTATION: json.dumps(names)}}}
    assert KDRA.binding_record(recorded, names) == {}
    assert NATIVE.binding_record(pod, names) == {}  # pods/status: never in a Binding


# ---------------------------------------------------------------------- the Binding


def pod(version: str, *, claims: str = CLAIMS, labels: dict[str, str] | None = None,
        record: str | None = None) -> dict[str, Any]:
    annotations = {CLAIMS_ANNOTATION: claims}
    if record is not None:
        annotations[CLAIM_STATUSES_ANNOTATION] = record
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p",
                         "resourceVersion": version, "annotations": annotations,
                         "labels": labels or {}},
            "spec": {"schedulerName": "kdra-scheduler",
                     "containers": [{"name": "c", "image": "x"}]}}


class Server:
    """The pods/binding subresource as the API server has it (pkg/registry/core/pod/storage:
    the UID and resourceVersion preconditions, then "already assigned")."""

    def __init__(self, stored: dict[str, Any]) -> None:
        self.stored = stored
        self.bindings: list[dict[str, Any]] = []
        self.reads = 0

    async def get(self, *_: Any, **__: Any) -> dict[str, Any]:
        self.reads += 1
        return copy.deepcopy(self.stored)

    async def bind(self, namespace: str, name: str, uid: str, node: str, *,
                   annotations: dict[str, str] | None = None,
                   resource_version: str | None = None) -> dict[str, Any]:
        self.bindings.append({"node": node, "annotations": dict(annotations or {}),
                              "resourceVersion": resource_version})
        meta = self.stored["metadata"]
        if resource_version and resource_version != meta["resourceVersion"]:
            raise Conflict(409, "Conflict", 'Operation cannot be fulfilled on pods/binding "p": '
                           "Precondition failed: ResourceVersion in precondition: "
                           f"{resource_version}, ResourceVersion in object meta: "
                           f"{meta['resourceVersion']}")
        if self.stored["spec"].get("nodeName"):
            raise Conflict(409, "Conflict", 'Operation cannot be fulfilled on pods/binding "p": '
                           f"pod p is already assigned to node {self.stored['spec']['nodeName']!r}")
        self.stored["spec"]["nodeName"] = node
        meta["annotations"].update(annotations or {})
        return {}


def bind(server: Server, decided: dict[str, Any]) -> None:
    binder = Binder(server, EventRecorder(server), claims=claim_store())  # type: ignore[arg-type]
    binder.pods.pending[KEY] = decided
    binder.pods.records.put(KEY, "uid-p", {"gpu": "p-gpu-abcde"})
    attempt = Attempt(pod=decided, node="node-1", claims=[(ENTRY, "p-gpu-abcde")])
    asyncio.run(binder.writes.bind(KEY, decided, "node-1", attempt))
    assert binder.pods.records.names(KEY, "uid-p") is None  # written: dropped


RECORD = json.dumps({"gpu": "p-gpu-abcde"})


def test_the_binding_records_the_names_on_the_pod_version_decided_on() -> None:
    decided = pod("7")
    server = Server(copy.deepcopy(decided))
    bind(server, decided)
    assert server.bindings[0]["resourceVersion"] == "7" and server.reads == 0
    assert server.bindings[0]["annotations"][CLAIM_STATUSES_ANNOTATION] == RECORD
    assert server.stored["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION] == RECORD
    assert server.stored["spec"]["nodeName"] == "node-1"


def test_a_recorded_pod_is_bound_without_a_precondition() -> None:
    decided = pod("7", record=RECORD)
    server = Server(copy.deepcopy(decided))
    bind(server, decided)
    assert server.bindings[0]["resourceVersion"] is None
    assert CLAIM_STATUSES_ANNOTATION not in server.bindings[0]["annotations"]


def test_a_pod_changed_only_elsewhere_is_bound_on_its_new_version() -> None:
    decided = pod("7")
    relabelled = pod("8", labels={"team": "a"})
    server = Server(copy.deepcopy(relabelled))
    bind(server, decided)
    assert [b["resourceVersion"] for b in server.bindings] == ["7", "8"]
    assert server.stored["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION] == RECORD


def test_a_record_written_meanwhile_lets_the_binding_go_without_precondition() -> None:
    decided = pod("7")
    recorded = pod("8", record=RECORD)  # the claim controller's record fell due meanwhile
    server = Server(copy.deepcopy(recorded))
    bind(server, decided)
    assert [b["resourceVersion"] for b in server.bindings] == ["7", None]
    assert server.stored["spec"]["nodeName"] == "node-1"


@pytest.mark.parametrize("changed", [
    pod("8", claims=json.dumps([{"name": "gpu", "resourceClaimName": "someone-elses"}])),
    pod("8", record=json.dumps({"gpu": "another-claim"})),
], ids=["claims annotation", "record"])
def test_a_pod_whose_claims_changed_is_not_bound_on_the_old_decision(
        changed: dict[str, Any]) -> None:
    decided = pod("7")
    server = Server(copy.deepcopy(changed))
    with pytest.raises(PodChanged):
        bind(server, decided)
    assert not server.stored["spec"].get("nodeName")
    assert len(server.bindings) == 1


def test_a_pod_already_bound_is_not_an_error() -> None:
    decided = pod("7", record=RECORD)
    stored = copy.deepcopy(decided)
    stored["spec"]["nodeName"] = "node-1"
    server = Server(stored)
    bind(server, decided)  # a previous attempt's Binding went through
    assert len(server.bindings) == 1


def test_a_pod_another_binder_bound_on_other_claims_rolls_this_attempt_back() -> None:
    decided = pod("7")
    stored = pod("8", record=json.dumps({"gpu": "another-claim"}))
    stored["spec"]["nodeName"] = "node-2"  # a second replica's binder, its own claim
    server = Server(stored)
    with pytest.raises(PodChanged):
        bind(server, decided)


def test_an_unrecorded_pod_a_previous_binding_bound_is_not_an_error() -> None:
    decided = pod("7")
    stored = pod("8", record=RECORD)
    stored["spec"]["nodeName"] = "node-1"
    server = Server(stored)
    bind(server, decided)  # the precondition fails first; the pod is bound: done
    assert len(server.bindings) == 1 and server.reads == 1
