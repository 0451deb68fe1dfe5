"""The binder's preemption (kdra.operator.scheduler.preemption) without a cluster: a recording
client stands in for the API server, the binder and its snapshot are real.

One node with two GPUs, held by bound pods of priority 0 and 500. A pod of priority 1000
that needs one GPU evicts exactly the priority-0 pod, is nominated to the node, and the freed
GPU is held for it against a pod of lower priority; with ``preemptionPolicy: Never`` nothing
is evicted; a PodDisruptionBudget steers the choice; a refusal (429) is reported and the
eviction retried.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.kube.errors import ApiError
from kdra.kube.events import EventRecorder
from kdra.kube.resources import Resource
from kdra.operator import metrics
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings
from tests.unit.operator.binder_objects import gpu_claim

NS = "ns"
DRIVER = "gpu.kdra.dev"
NODE = {"metadata": {"name": "worker-1", "labels": {"kubernetes.io/hostname": "worker-1"}},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}
SLICE = {"metadata": {"name": "worker-1-gpu"},
         "spec": {"driver": DRIVER, "nodeName": "worker-1",
                  "pool": {"name": "worker-1", "generation": 0, "resourceSliceCount": 1},
                  "devices": [{"name": "gpu-0", "attributes": {}},
                              {"name": "gpu-1", "attributes": {}}]}}
CLASS = {"metadata": {"name": DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def pod(name: str, priority: int, *, node: str | None = None,
        policy: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "kdra-scheduler", "containers": [{"name": "c"}],
                            "priority": priority}
    if node:
        spec["nodeName"] = node
    if policy:
        spec["preemptionPolicy"] = policy
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}",
                         "resourceVersion": "1", "creationTimestamp": "2026-01-01T00:00:00Z",
                         "labels": {"app": name},
                         "annotations": {CLAIMS_ANNOTATION: json.dumps(
                             [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}])}},
            "spec": spec,
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:01Z"} if node
            else {}}


def claim(name: str, rv: str, owner: str | None = None, device: str = "gpu-0"
          ) -> dict[str, Any]:
    return gpu_claim(name, rv, namespace=NS, device=None if owner is None else device,
                     owners=() if owner is None else (owner,))


class Recording:
    """Records pod status patches, events and evictions; lists ``pdbs``."""

    def __init__(self, pdbs: list[dict[str, Any]] | None = None,
                 refuse: int | None = None) -> None:
        self.status_patches: list[tuple[str, dict[str, Any]]] = []
        self.events: list[tuple[str, str, str]] = []  # (object, reason, message)
        self.evictions: list[str] = []
        self.pdbs = pdbs or []
        self.refuse = refuse
        self.refused = 0

    async def patch(self, res: Resource, name: str, body: dict[str, Any], *_: Any,
                    **__: Any) -> dict[str, Any]:
        self.status_patches.append((name, body))
        return {**pod(name, 0), "status": body.get("status", {})}

    async def create(self, res: Resource, body: dict[str, Any], *_: Any) -> dict[str, Any]:
        self.events.append((body["involvedObject"]["name"], body["reason"], body["message"]))
        return body

    async def request(self, method: str, path: str, *, body: Any = None,
                      **_: Any) -> dict[str, Any]:
        assert method == "POST" and path.endswith("/eviction"), path
        assert body["deleteOptions"]["preconditions"]["uid"] == f"uid-{body['metadata']['name']}"
        if self.refuse is not None:
            self.refused += 1
            raise ApiError(self.refuse, "TooManyRequests", "Cannot evict pod as it would "
                           "violate the pod's disruption budget.")
        self.evictions.append(body["metadata"]["name"])
        return {}

    async def list(self, res: Resource, *_: Any, **__: Any) -> list[dict[str, Any]]:
        assert res.plural == "poddisruptionbudgets"
        return self.pdbs

    def reasons(self, reason: str) -> list[tuple[str, str]]:
        return [(obj, message) for obj, r, message in self.events if r == reason]

    def preempted_nobody(self) -> bool:
        """No eviction, no ``Preempting`` event, no nominated node written."""
        return self.evictions == [] and self.reasons("Preempting") == [] and not any(
            "nominatedNodeName" in body.get("status", {}) for _, body in self.status_patches)

    def messages(self, pod: str) -> list[str]:
        """The PodScheduled messages written on ``pod``, in order."""
        return [body["status"]["conditions"][0]["message"]
                for name, body in self.status_patches
                if name == pod and "conditions" in body.get("status", {})]


def full_node(client: Recording) -> Binder:
    """worker-1: gpu-0 held by "low" (priority 0), gpu-1 by "mid" (priority 500)."""
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(release_wait=0.0, wake_delay=0.001,
                                            flush_interval=3600))
    for raw in (claim("low-gpu", "10", owner="low", device="gpu-0"),
                claim("mid-gpu", "11", owner="mid", device="gpu-1"),
                claim("top-gpu", "12"), claim("other-gpu", "13")):
        binder.claims.upsert(raw)
    binder.prime(nodes=[NODE], slices=[SLICE], classes=[CLASS],
                 pods=[pod("low", 0, node="worker-1"), pod("mid", 500, node="worker-1")])
    return binder


def attempts(result: str) -> float:
    value = metrics.REGISTRY.get_sample_value("kdra_preemption_attempts_total",
                                              {"result": result})
    return value or 0.0


def victims() -> float:
    return metrics.REGISTRY.get_sample_value("kdra_preemption_victims_total") or 0.0


def test_preempts_the_lowest_pod_and_holds_its_device() -> None:
    client = Recording()
    binder = full_node(client)
    top, other = pod("top", 1000), pod("other", 100)
    before = attempts("preempted"), victims()

    async def scenario() -> list[str]:
        results = [await binder._schedule((NS, "top"), top)]
        # Again before the victim is gone: it waits, evicts nothing more.
        results.append(await binder._schedule((NS, "top"), top))
        # The victim goes; the claim controller releases its claim.
        binder.on_pod("DELETED", pod("low", 0, node="worker-1"))
        released = claim("low-gpu", "20")
        binder.claims.upsert(released)
        binder.on_claim("MODIFIED", released)
        # A lower-priority pod cannot take the held device (and preempts nobody: "mid" is
        # more important than it).
        results.append(await binder._schedule((NS, "other"), other))
        results.append(await binder._schedule((NS, "top"), top))
        placed = binder.binding[(NS, "top")].node
        await binder.stop()
        return [*results, placed]

    results = asyncio.run(scenario())
    assert results == ["unschedulable", "unschedulable", "unschedulable", "allocated",
                       "worker-1"]
    assert client.evictions == ["low"]  # exactly the lowest, once
    assert ("top", {"status": {"nominatedNodeName": "worker-1"}}) in client.status_patches
    assert client.reasons("Preempted") == [("low", "Preempted by ns/top on node worker-1")]
    assert client.reasons("Preempting") == [
        ("top", "Preempting 1 pod(s) on node worker-1: ns/low (priority 0)")]
    conditions = [body["status"]["conditions"][0]["message"]
                  for name, body in client.status_patches if name == "other"]
    assert conditions and "preempting" not in conditions[-1]
    assert attempts("preempted") - before[0] == 1
    assert victims() - before[1] == 1


def test_preemption_policy_never_does_not_preempt() -> None:
    client = Recording()
    binder = full_node(client)
    never = pod("top", 1000, policy="Never")
    before = attempts("never")

    async def scenario() -> str:
        result = await binder._schedule((NS, "top"), never)
        await binder.stop()
        return result

    assert asyncio.run(scenario()) == "unschedulable"
    assert client.preempted_nobody()
    assert attempts("never") - before == 1


def test_a_pod_that_would_still_not_fit_preempts_nobody() -> None:
    client = Recording()
    binder = full_node(client)
    # Priority 400 may evict "low" only (priority 0), which frees one GPU; the pod needs
    # two, and "mid" (500) is more important: no node where preemption helps.
    two = claim("top-gpu", "30")
    two["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    binder.claims.upsert(two)
    binder.on_claim("MODIFIED", two)
    before = attempts("no-candidates")

    async def scenario() -> str:
        result = await binder._schedule((NS, "top"), pod("top", 400))
        await binder.stop()
        return result

    assert asyncio.run(scenario()) == "unschedulable"
    assert client.evictions == [] and client.reasons("Preempting") == []
    assert attempts("no-candidates") - before == 1


def test_a_disruption_budget_steers_the_choice() -> None:
    """Budget-aware: "low" is protected (no disruption allowed), so "mid" (also of lower
    priority) goes instead, though "low" is the least important."""
    client = Recording(pdbs=[{
        "metadata": {"name": "low", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "low"}}},
        "status": {"disruptionsAllowed": 0}}])
    binder = full_node(client)

    async def scenario() -> str:
        result = await binder._schedule((NS, "top"), pod("top", 1000))
        await binder.stop()
        return result

    assert asyncio.run(scenario()) == "unschedulable"
    assert client.evictions == ["mid"]
    assert client.reasons("Preempted") == [("mid", "Preempted by ns/top on node worker-1")]


def test_an_eviction_refused_is_reported_and_retried_later() -> None:
    client = Recording(refuse=429)
    binder = full_node(client)
    top = pod("top", 1000)

    async def scenario() -> list[str]:
        results = [await binder._schedule((NS, "top"), top)]
        results.append(await binder._schedule((NS, "top"), top))  # within RETRY: not again
        nomination = binder.preemption.nominations[(NS, "top")]
        nomination.tried = {uid: 0.0 for uid in nomination.tried}  # RETRY has passed
        results.append(await binder._schedule((NS, "top"), top))
        await binder.stop()
        return results

    assert asyncio.run(scenario()) == ["unschedulable"] * 3
    assert client.evictions == []
    blocked = client.reasons("PreemptionBlocked")
    assert [obj for obj, _ in blocked] == ["top"]  # deduplicated by the recorder: one Event
    assert "cannot evict ns/low on node worker-1 yet" in blocked[0][1]
    assert client.refused == 2
    assert client.reasons("Preempted") == []
    assert (NS, "top") in binder.preemption.nominations


def test_a_nomination_overtaken_by_a_more_important_pod_preempts_anew() -> None:
    """The freed GPU is held against pods of the same or lower priority only: a more
    important pod takes it. Once the victim's claim is released and the pod still fits
    nowhere, its nomination ends; after the backoff (its preemption did not get it bound)
    it preempts again (here: "mid")."""
    client = Recording()
    binder = full_node(client)
    top = pod("top", 1000)

    async def scenario() -> list[str]:
        results = [await binder._schedule((NS, "top"), top)]
        binder.on_pod("DELETED", pod("low", 0, node="worker-1"))
        released = claim("low-gpu", "20")
        binder.claims.upsert(released)
        binder.on_claim("MODIFIED", released)
        assert binder.preemption.reserved_against((NS, "boss"), pod("boss", 2000)) == set()
        taken = claim("boss-gpu", "21", owner="boss", device="gpu-0")
        binder.claims.upsert(taken)
        binder.on_claim("ADDED", taken)
        binder.on_pod(None, pod("boss", 2000, node="worker-1"))
        results.append(await binder._schedule((NS, "top"), top))  # backing off
        assert client.evictions == ["low"]
        binder.preemption.rounds[(NS, "top")].not_before = 0.0  # the backoff has passed
        results.append(await binder._schedule((NS, "top"), top))
        await binder.stop()
        return results

    assert asyncio.run(scenario()) == ["unschedulable"] * 3
    assert client.evictions == ["low", "mid"]
    assert [obj for obj, _ in client.reasons("Preempting")] == ["top", "top"]
    assert any("not preempting again for" in c for c in client.messages("top"))


# --------------------------------------------------------------------------- issue 36


def tenants(client: Recording, *, quota_devices: int, mine_priority: int = 2000) -> Binder:
    """worker-1: gpu-0 held by tenant "a"'s pod "mine", gpu-1 by tenant "b"'s "theirs"
    (priority 0); tenant "a" has a DeviceQuota of ``quota_devices`` GPUs."""
    binder = Binder(client, EventRecorder(client), claims=claim_store(),  # type: ignore[arg-type]
                    settings=BinderSettings(release_wait=0.0, wake_delay=0.001,
                                            flush_interval=3600))
    mine = {**pod("mine", mine_priority, node="worker-1")}
    mine["metadata"] = {**mine["metadata"], "namespace": "a"}
    theirs = {**pod("theirs", 0, node="worker-1")}
    theirs["metadata"] = {**theirs["metadata"], "namespace": "b"}
    for raw in (gpu_claim("mine-gpu", "10", namespace="a", device="gpu-0", owners=("mine",)),
                gpu_claim("theirs-gpu", "11", namespace="b", device="gpu-1",
                          owners=("theirs",)),
                gpu_claim("top-gpu", "12", namespace="a")):
        binder.claims.upsert(raw)
    binder.prime(nodes=[NODE], slices=[SLICE], classes=[CLASS], pods=[mine, theirs])
    binder.on_quota(None, {
        "apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
        "metadata": {"name": "gpus", "namespace": "a", "resourceVersion": "1",
                     "generation": 1},
        "spec": {"limits": [{"deviceClassName": DRIVER, "devices": quota_devices}]}})
    return binder


def urgent() -> dict[str, Any]:
    top = pod("top", 1000)
    top["metadata"] = {**top["metadata"], "namespace": "a"}
    return top


def test_a_pod_over_its_quota_preempts_nobody() -> None:
    """Issue 36, point 5: tenant a is at its quota (1 GPU, held by a more important pod of
    its own); its urgent pod fits nowhere. Before: it evicted tenant b's pod, was refused by
    the quota once the GPU was free, and did it again at every attempt. Now: nobody is
    evicted, and the pod says why."""
    client = Recording()
    binder = tenants(client, quota_devices=1)
    before = attempts("over-quota")

    async def scenario() -> list[str]:
        results = [await binder._schedule(("a", "top"), urgent()) for _ in range(3)]
        await binder.stop()
        return results

    assert asyncio.run(scenario()) == ["unschedulable"] * 3
    assert client.evictions == [] and client.reasons("Preempting") == []
    message = client.messages("top")[-1]
    assert "not preempting: DeviceQuota a/gpus: class 'gpu.kdra.dev' devices: 1 used + 1 " \
           "asked > 1 hard" in message
    assert attempts("over-quota") - before == 3


def test_a_pod_may_preempt_its_own_tenants_pods_to_stay_within_its_quota() -> None:
    """The quota counts what the victims of the pod's own namespace free: at its quota, the
    urgent pod of tenant a evicts a's own less important pod, never b's."""
    client = Recording()
    binder = tenants(client, quota_devices=1, mine_priority=0)

    async def scenario() -> str:
        result = await binder._schedule(("a", "top"), urgent())
        await binder.stop()
        return result

    assert asyncio.run(scenario()) == "unschedulable"
    assert client.evictions == ["mine"]


def test_evictions_per_preemptor_are_bounded() -> None:
    """A preemptor whose nominations end without it being bound (here the freed GPU goes to
    a more important pod each time) preempts again only after a backoff, and at most
    ``max_rounds`` times."""
    client = Recording()
    binder = full_node(client)
    top = pod("top", 1000)
    rounds = binder.preemption.settings.max_rounds

    async def scenario() -> None:
        for n in range(rounds + 2):
            await binder._schedule((NS, "top"), top)
            nomination = binder.preemption.nominations.get((NS, "top"))
            if nomination is None:
                continue
            for uid, victim in nomination.victims.items():  # the victims go, their GPUs are
                binder.on_pod("DELETED", pod(victim.name, victim.priority, node="worker-1"))
                for raw in binder.claims.index("reserved", uid):  # taken by another pod
                    taken = claim(raw["metadata"]["name"], str(30 + n), owner=f"boss{n}",
                                  device=raw["status"]["allocation"]["devices"]["results"][0][
                                      "device"])
                    binder.claims.upsert(taken)
                    binder.on_claim("MODIFIED", taken)
                binder.on_pod(None, pod(f"boss{n}", 0, node="worker-1"))
            await binder._schedule((NS, "top"), top)  # its nomination ends: back off
            binder.preemption.rounds[(NS, "top")].not_before = 0.0  # backoff over
        await binder.stop()

    asyncio.run(scenario())
    assert len(client.reasons("Preempting")) == rounds
    assert binder.preemption.rounds[(NS, "top")].count == rounds
    assert f"not preempting again: {rounds} preemption(s) for this pod did not get it " \
           "bound" in client.messages("top")[-1]


def test_binding_forgets_the_rounds() -> None:
    client = Recording()
    binder = full_node(client)

    async def scenario() -> None:
        await binder._schedule((NS, "top"), pod("top", 1000))
        await binder.stop()

    asyncio.run(scenario())
    assert binder.preemption.rounds[(NS, "top")].count == 1
    binder.on_pod("MODIFIED", pod("top", 1000, node="worker-1"))
    assert (NS, "top") not in binder.preemption.rounds


def test_malformed_claim_status_holds_nothing() -> None:
    from kdra.operator.core.preemption import hold_of

    for status in ({"allocation": "x"}, {"allocation": {"devices": "x"}},
                   {"allocation": {"devices": {"results": "x"}}, "reservedFor": [{"uid": "u"}]},
                   {"allocation": {"devices": {"results": [1, {"driver": DRIVER}]}},
                    "reservedFor": "x"}, "x"):
        assert hold_of({"status": status}) is None
    held = hold_of(claim("c", "1", owner="a"))
    assert held is not None and held.consumers == {"uid-a"} and len(held.devices) == 1
