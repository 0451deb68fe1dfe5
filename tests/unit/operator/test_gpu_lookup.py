"""Which claims of a pod may get GPUs (kdra.operator.webhooks.gpu_lookup), against a fake API."""

from __future__ import annotations

import asyncio
from typing import Any

import yaml

from kdra.kube.core.podclaims import CLAIMS_ANNOTATION
from kdra.kube.errors import NotFound
from kdra.kube.resources import Resource
from kdra.operator.webhooks.gpu_lookup import MAX_LOOKUPS, GpuClaimLookup

CATS = 'device.driver == "resource-driver.example.com"'
GPUS = 'device.driver == "gpu.kdra.dev"'


def spec(*classes: str) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": f"r{i}", "exactly": {"deviceClassName": c}}
                                     for i, c in enumerate(classes)]}}


class FakeApi:
    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects
        self.gets: list[tuple[str, str]] = []

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        self.gets.append((res.plural, name))
        if (res.plural, name) not in self.objects:
            raise NotFound(404, "NotFound", name)
        return self.objects[(res.plural, name)]


API = FakeApi({
    ("deviceclasses", "cats"): {"spec": {"selectors": [{"cel": {"expression": CATS}}]}},
    ("deviceclasses", "gpus"): {"spec": {"selectors": [{"cel": {"expression": GPUS}}]}},
    ("resourceclaims", "white-cat"): {"spec": spec("cats")},
    ("resourceclaimtemplates", "black-cat"): {"spec": {"spec": spec("cats")}},
    ("resourceclaimtemplates", "one-gpu"): {"spec": {"spec": spec("gpus")}},
    ("resourceclaimtemplates", "cat-or-gpu"): {"spec": {"spec": spec("cats", "gpus")}},
    ("resourceclaimtemplates", "no-class"): {"spec": {"spec": spec("missing")}},
})


def review(entries: list[dict[str, Any]], operation: str = "CREATE") -> dict[str, Any]:
    pod = {"metadata": {"name": "p", "namespace": "ns",
                        "annotations": {CLAIMS_ANNOTATION: yaml.safe_dump(entries)}},
           "spec": {"containers": [{"name": "main"}]}}
    return {"request": {"uid": "u", "operation": operation, "namespace": "ns", "object": pod}}


def gpu_claims(body: Any, api: FakeApi = API) -> frozenset[str] | None:
    return asyncio.run(GpuClaimLookup(api).gpu_claims(body))  # type: ignore[arg-type]


def test_only_entries_whose_classes_can_select_gpus() -> None:
    body = review([
        {"name": "cat-0", "resourceClaimName": "white-cat"},
        {"name": "cat-1", "resourceClaimTemplateName": "black-cat"},
        {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
        {"name": "either", "resourceClaimTemplateName": "cat-or-gpu"},
        {"name": "only-cats", "resourceClaimTemplateName": "cat-or-gpu", "request": "r0"},
        {"name": "later", "resourceClaimName": "not-created-yet"},
        {"name": "no-class", "resourceClaimTemplateName": "no-class"},
    ])
    assert gpu_claims(body) == {"gpu", "either", "later", "no-class"}


def test_each_object_is_read_once_and_the_reads_are_bounded() -> None:
    api = FakeApi(API.objects)
    entries = [{"name": f"c{i}", "resourceClaimTemplateName": "black-cat"} for i in range(3)]
    assert gpu_claims(review(entries), api) == frozenset()
    assert api.gets == [("resourceclaimtemplates", "black-cat"), ("deviceclasses", "cats")]
    many = [{"name": f"c{i}", "resourceClaimName": f"claim-{i}"} for i in range(MAX_LOOKUPS + 5)]
    api = FakeApi(API.objects)
    assert gpu_claims(review(many), api) == {entry["name"] for entry in many}
    assert len(api.gets) == MAX_LOOKUPS


def test_unreadable_pods_mean_every_entry() -> None:
    assert gpu_claims({"request": {"operation": "CREATE", "object": "x"}}) is None
    assert gpu_claims(review([{"name": "a", "resourceClaimName": "white-cat"}],
                             operation="UPDATE")) is None
    bad = review([])
    bad["request"]["object"]["metadata"]["annotations"][CLAIMS_ANNOTATION] = "- {name: x"
    assert gpu_claims(bad) is None


def test_a_claim_generated_for_another_pod_is_noted() -> None:
    """Issue 36, point 7: the lookup reads the claims a pod names, so it notes those
    generated for another pod (the webhook then denies the pod)."""
    generated = {"metadata": {"name": "victim-gpu-x", "annotations": {
        "resource.kdra.dev/pod-claim-name": "gpu"}, "ownerReferences": [
        {"kind": "Pod", "name": "victim", "uid": "uid-victim", "controller": True}]},
        "spec": spec("gpus")}
    api = FakeApi({**API.objects, ("resourceclaims", "victim-gpu-x"): generated})
    lookup = GpuClaimLookup(api)  # type: ignore[arg-type]
    body = review([{"name": "stolen", "resourceClaimName": "victim-gpu-x"},
                   {"name": "own", "resourceClaimName": "white-cat"}])
    assert asyncio.run(lookup.gpu_claims(body)) == {"stolen"}
    assert lookup.foreign == {"stolen": ("victim-gpu-x", "victim")}
