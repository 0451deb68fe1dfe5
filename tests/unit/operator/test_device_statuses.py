"""A claim's device statuses (issue 36): the data a driver writes is bounded at admission
(kdra.operator.core.admission_objects.device_status_errors, through the validating webhook's
``validate-claim-status``), and kdra writes back only entries of allocated devices whose data
it could read (kdra.kube.core.podclaims.drop_stray_device_statuses)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kdra.kube.core.jsonscan import UNDECODABLE_KEY
from kdra.kube.core.podclaims import drop_stray_device_statuses
from kdra.operator.core.admission import validate
from tests.unit.operator.admission_helpers import API, request_for

GPU = "gpu.kdra.dev"


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def entry(device: str, data: Any = None, pool: str = "node-1") -> dict[str, Any]:
    out: dict[str, Any] = {"driver": GPU, "pool": pool, "device": device}
    if data is not None:
        out["data"] = data
    return out


def claim(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": GPU}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": GPU, "pool": "node-1", "device": "gpu-0"},
                {"request": "gpu", "driver": GPU, "pool": "node-1", "device": "gpu-1"}]}},
                "devices": list(entries)}}


def status_update(new: dict[str, Any], old: dict[str, Any]) -> list[str]:
    request = {**request_for(new, "UPDATE", old), "subResource": "status"}
    return [f"{e.field}: {e.message}" for e in validate(request).errors]


@pytest.mark.parametrize(("data", "errors"), [
    ({"uuid": "GPU-1", "cdiDeviceIDs": ["kdra.dev/gpu=x"]}, []),
    (nested(32), []),
    (nested(33), ["status.devices[0].data: may nest at most 32 levels"]),
    ({"blob": "x" * 10_300},
     ["status.devices[0].data: must be at most 10240 bytes of JSON (has more)"]),
])
def test_a_drivers_device_data_is_bounded(data: Any, errors: list[str]) -> None:
    assert status_update(claim(entry("gpu-0", data)), claim()) == errors


def test_only_new_or_changed_data_is_measured() -> None:
    """Ratcheting: an oversized entry already stored does not block the others' updates."""
    old = claim(entry("gpu-0", nested(40)))
    assert status_update(claim(entry("gpu-0", nested(40)), entry("gpu-1", {"uuid": "x"})),
                         old) == []
    assert status_update(claim(entry("gpu-0", nested(41))), old) == []  # deep and deep
    assert status_update(claim(entry("gpu-0", {"uuid": "y"}), entry("gpu-1", nested(50))),
                         old) == ["status.devices[1].data: may nest at most 32 levels"]


def test_a_spec_unchanged_status_update_of_other_kinds_is_still_allowed() -> None:
    """Only claims' status is measured here; a class or template update without a spec
    change stays a metadata-only update."""
    cls = {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": "x"},
           "spec": {}, "status": {"devices": [entry("gpu-0", nested(60))]}}
    request = {**request_for(cls, "UPDATE", copy.deepcopy(cls)), "subResource": "status"}
    assert validate(request).allowed


def test_kdra_writes_back_only_readable_entries_of_allocated_devices() -> None:
    status = claim(entry("gpu-0", {"uuid": "a"}), entry("gpu-1", {UNDECODABLE_KEY: "deep"}),
                   entry("gpu-0", {"uuid": "forged"}, pool="node-2"))["status"]
    drop_stray_device_statuses(status)
    assert status["devices"] == [entry("gpu-0", {"uuid": "a"})]
    deallocated = {"devices": [entry("gpu-0", {"uuid": "a"})]}
    drop_stray_device_statuses(deallocated)
    assert deallocated == {}
    untouched = claim(entry("gpu-0"), entry("gpu-1"))["status"]
    before = copy.deepcopy(untouched)
    drop_stray_device_statuses(untouched)
    assert untouched == before
