"""The services' side of extended resources: the claim controller creates the pod's
extended-resources claim (no template), the webhook's DeviceClass lookup, and the GPU lookup
of a hand-written ``extendedResources`` entry — against fake API servers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION, CLAIMS_ANNOTATION
from kdra.kube.errors import ApiError
from kdra.kube.resources import Resource
from kdra.operator.core.extended import ENTRY_NAME, EXTENDED_CLAIM_ANNOTATION
from kdra.operator.webhooks.extended_lookup import extended_classes
from kdra.operator.webhooks.gpu_lookup import GpuClaimLookup
from tests.unit.operator.test_claim_controller_names import NS, Server, controller
from tests.unit.operator.test_gpu_lookup import API as GPU_API

GPU = "gpu.kdra.dev/gpu"
ENTRY = {"name": ENTRY_NAME, "extendedResources": [
    {"request": "container-0-request-0", "container": "main", "resource": GPU,
     "deviceClassName": "gpu.kdra.dev", "count": 2}]}
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "train-7d9f", "namespace": NS, "uid": "uid-p",
                    "resourceVersion": "5",
                    "annotations": {CLAIMS_ANNOTATION: json.dumps([ENTRY])}},
       "spec": {"schedulerName": "kdra-scheduler", "containers": [{"name": "main"}]}}


def test_the_controller_creates_the_extended_claim_and_records_it() -> None:
    server = Server({})
    server.pods[POD["metadata"]["name"]] = POD
    asyncio.run(controller(server, []).sync_pod(POD))
    (created,) = server.created
    assert created["metadata"]["generateName"] == "train-7d9f-extended-resources-"
    assert created["metadata"]["annotations"][EXTENDED_CLAIM_ANNOTATION] == "true"
    assert created["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    (patch,) = server.patches
    assert json.loads(patch["metadata"]["annotations"][CLAIM_STATUSES_ANNOTATION]) == {
        ENTRY_NAME: "p-gpu-new"}  # the fake server's name for what it created


class Classes:
    def __init__(self, items: list[dict[str, Any]] | Exception) -> None:
        self.items = items
        self.lists = 0

    async def list(self, res: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        self.lists += 1
        if isinstance(self.items, Exception):
            raise self.items
        return self.items


def body(limits: dict[str, str], operation: str = "CREATE") -> dict[str, Any]:
    pod = {"metadata": {"namespace": NS, "generateName": "train-"},
           "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}
    return {"request": {"uid": "u", "operation": operation, "object": pod}}


def test_classes_are_listed_only_for_pods_asking_for_an_extended_resource() -> None:
    api = Classes([{"metadata": {"name": "gpu.kdra.dev"},
                    "spec": {"extendedResourceName": GPU, "selectors": [
                        {"cel": {"expression": 'device.driver == "gpu.kdra.dev"'}}]}},
                   {"metadata": {"name": "cats"}, "spec": {"selectors": [
                       {"cel": {"expression": 'device.driver == "cats.example.com"'}}]}}])
    found = asyncio.run(extended_classes(api, body({GPU: "2"})))  # type: ignore[arg-type]
    assert found.error is None and found.mapping is not None
    assert found.mapping[GPU] == "gpu.kdra.dev"
    assert found.gpu_classes == {"gpu.kdra.dev"}
    for quiet in (body({"cpu": "1"}), body({GPU: "2"}, "UPDATE"), {"request": "junk"}, None):
        nothing = asyncio.run(extended_classes(api, quiet))  # type: ignore[arg-type]
        assert (nothing.mapping, nothing.error) == (None, None)
    assert api.lists == 1


def test_unreadable_classes_give_a_reason() -> None:
    api = Classes(ApiError(403, "Forbidden", "deviceclasses is forbidden"))
    found = asyncio.run(extended_classes(api, body({GPU: "2"})))  # type: ignore[arg-type]
    assert found.mapping is None
    assert found.error is not None and "cannot read DeviceClasses" in found.error
    assert "forbidden" in found.error


def test_a_hand_written_extended_entry_may_get_gpus_by_its_classes() -> None:
    def review(device_class: str) -> dict[str, Any]:
        entry = {"name": "x", "extendedResources": [
            {**ENTRY["extendedResources"][0], "deviceClassName": device_class}]}  # type: ignore[dict-item]
        pod = {"metadata": {"name": "p", "namespace": NS,
                            "annotations": {CLAIMS_ANNOTATION: json.dumps([entry])}},
               "spec": {"containers": [{"name": "main"}]}}
        return {"request": {"uid": "u", "operation": "CREATE", "namespace": NS, "object": pod}}

    lookup = GpuClaimLookup(GPU_API)  # type: ignore[arg-type]
    assert asyncio.run(lookup.gpu_claims(review("gpus"))) == {"x"}
    assert asyncio.run(lookup.gpu_claims(review("cats"))) == frozenset()
