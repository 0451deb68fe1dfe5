"""What kdra tells users about their pods (issue 41): the binder's ``PodScheduled=False``
condition with kube-scheduler's transition time (it used to be ``null``), a pod naming a claim
that does not exist, and the warning events for claims kdra would not see."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kdra.kube.events import EventRecorder
from kdra.operator.scheduler.pending import PendingPods
from kdra.operator.scheduler.reporting import Reporter
from kdra.operator.scheduler.settings import BinderSettings

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {}, "status": {}}


class Client:
    """Applies the binder's strategic-merge patches of ``status.conditions`` (merged by
    ``type``, as the API server does) and records them."""

    def __init__(self) -> None:
        self.pod = copy.deepcopy(POD)
        self.patches: list[dict[str, Any]] = []

    async def patch(self, _: Any, name: str, body: dict[str, Any], *__: Any,
                    **___: Any) -> dict[str, Any]:
        if "status" not in body:
            return {}  # an Event's count
        self.patches.append(body)
        conditions = self.pod["status"].setdefault("conditions", [])
        for new in body["status"]["conditions"]:
            old = next((c for c in conditions if c["type"] == new["type"]), None)
            if old is None:
                conditions.append(dict(new))
            else:
                old.update(new)
        return copy.deepcopy(self.pod)

    async def create(self, *_: Any, **__: Any) -> dict[str, Any]:
        return {}


def report(client: Client, message: str, reason: str = "Unschedulable") -> dict[str, Any]:
    reporter = Reporter(client, EventRecorder(client),  # type: ignore[arg-type]
                        PendingPods(BinderSettings()))
    asyncio.run(reporter.unschedulable(copy.deepcopy(client.pod), message, reason=reason))
    (condition,) = client.pod["status"]["conditions"]
    return dict(condition)


def test_the_condition_has_a_transition_time_kept_while_it_stays_false() -> None:
    client = Client()
    first = report(client, "0/1 nodes are available: 1 a.")
    assert first["lastTransitionTime"], first  # was null before issue 41
    assert first["lastTransitionTime"].endswith("Z")
    client.pod["status"]["conditions"][0]["lastTransitionTime"] = "2020-01-01T00:00:00Z"
    second = report(client, "0/1 nodes are available: 1 b.", reason="DeviceQuotaExceeded")
    assert second["lastTransitionTime"] == "2020-01-01T00:00:00Z"  # still False: no transition
    assert (second["reason"], second["message"]) == ("DeviceQuotaExceeded",
                                                     "0/1 nodes are available: 1 b.")
    client.pod["status"]["conditions"][0].update(status="True",
                                                 lastTransitionTime="2020-01-01T00:00:00Z")
    third = report(client, "0/1 nodes are available: 1 c.")
    assert third["status"] == "False"
    assert third["lastTransitionTime"] != "2020-01-01T00:00:00Z"  # True -> False: now


class Recorder(Client):
    """Also records the Events created."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    async def create(self, _: Any, body: dict[str, Any], *__: Any, **___: Any) -> dict[str, Any]:
        self.events.append(body)
        return body


def test_a_pod_naming_a_claim_that_does_not_exist_is_told_so() -> None:
    """Issue 41: such a pod used to wait without condition or event. A template entry whose
    claim is not recorded yet is the claim controller's to make: nothing is written."""
    import yaml

    from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
    from kdra.operator.claim_controller import claim_store
    from kdra.operator.scheduler import Binder

    def scheduled(entries: list[dict[str, str]]) -> Recorder:
        client = Recorder()
        client.pod["metadata"]["annotations"] = {CLAIMS_ANNOTATION: yaml.safe_dump(entries)}
        client.pod["spec"]["schedulerName"] = "kdra-scheduler"
        binder = Binder(client, EventRecorder(client),  # type: ignore[arg-type]
                        claims=claim_store(), settings=BinderSettings(flush_interval=3600))

        async def scenario() -> None:
            binder.start()
            binder.on_pod(None, copy.deepcopy(client.pod))
            for _ in range(100):
                await asyncio.sleep(0.01)
                if client.events:
                    break
            await binder.stop()

        asyncio.run(scenario())
        return client

    named = scheduled([{"name": "gpu", "resourceClaimName": "nope"}])
    (condition,) = named.pod["status"]["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"] == ('0/0 nodes are available: resourceclaim.resource.kdra.dev '
                                    '"nope" not found (entry "gpu"): the pod waits until it '
                                    'is created.')
    assert condition["lastTransitionTime"]
    assert [e["reason"] for e in named.events] == ["FailedScheduling"]
    templated = scheduled([{"name": "gpu", "resourceClaimTemplateName": "t"}])
    assert "conditions" not in templated.pod["status"] and not templated.events


def test_a_pod_whose_claims_kdra_would_not_see_gets_one_warning_event() -> None:
    from kdra.operator.notices import PodNotices

    client = Recorder()
    notices = PodNotices(EventRecorder(client))  # type: ignore[arg-type]
    typo = copy.deepcopy(POD)
    typo["metadata"]["annotations"] = {"resource.kdra.dev/claim": "- name: gpu"}
    done = copy.deepcopy(typo)
    done["metadata"]["uid"], done["status"] = "done", {"phase": "Succeeded"}
    fine = copy.deepcopy(POD)
    fine["metadata"]["uid"] = "fine"

    async def scenario() -> None:
        notices.on_pod(None, typo)  # listed
        notices.on_pod("ADDED", typo)  # seen again: once is enough
        notices.on_pod("MODIFIED", typo)
        notices.on_pod("ADDED", done)  # finished: nothing to fix
        notices.on_pod("ADDED", fine)
        await asyncio.sleep(0.05)
        await notices.stop()

    asyncio.run(scenario())
    assert [(e["reason"], e["involvedObject"]["kind"], e["involvedObject"]["uid"])
            for e in client.events] == [("UnknownKdraAnnotation", "Pod", "u")]
    assert "did you mean 'resource.kdra.dev/claims'?" in client.events[0]["message"]
