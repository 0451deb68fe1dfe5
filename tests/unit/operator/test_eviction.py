"""Which claims' pods NoExecute device taints evict, and when."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kdra.dra.models import parse_claim
from kdra.dra.taints import Taint, TaintLike
from kdra.operator.core.eviction import claim_eviction, slice_taints

NOW = dt.datetime(2026, 12, 2, 8, 0, 0, tzinfo=dt.UTC)
GPU = "gpu.kdra.dev"
LOST = Taint("gpu.kdra.dev/unhealthy", "XID-79", "NoExecute", "2026-12-02T07:59:50Z")
DEGRADED = Taint("gpu.kdra.dev/unhealthy", "XID-48", "NoSchedule", "2026-12-02T07:59:50Z")


def claim(*, tolerations: list[dict[str, Any]] | None = None,
          result_tolerations: list[dict[str, Any]] | None = None,
          admin: bool = False, reserved: bool = True, devices: tuple[str, ...] = ("gpu-0",),
          ) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": GPU, "count": len(devices)}
    if tolerations:
        exactly["tolerations"] = tolerations
    results = []
    for name in devices:
        result: dict[str, Any] = {"request": "gpu", "driver": GPU, "pool": "n1",
                                  "device": name}
        if result_tolerations:
            result["tolerations"] = result_tolerations
        if admin:
            result["adminAccess"] = True
        results.append(result)
    status: dict[str, Any] = {"allocation": {"devices": {"results": results}}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "u1"}]
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": "cu"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
            "status": status}


def taints_on(mapping: dict[str, list[Taint]]) -> Any:
    def look(driver: str, pool: str, device: str) -> list[TaintLike]:
        return list(mapping.get(device, [])) if (driver, pool) == (GPU, "n1") else []
    return look


def test_untolerated_no_execute_evicts_now() -> None:
    decision = claim_eviction(parse_claim(claim()), taints_on({"gpu-0": [LOST]}), NOW)
    assert decision is not None
    assert decision.decision.at == NOW and decision.pods == (("p", "u1"),)
    assert decision.device == (GPU, "n1", "gpu-0")
    assert decision.reason() == ("device gpu.kdra.dev/n1/gpu-0 has taint "
                                 "gpu.kdra.dev/unhealthy=XID-79:NoExecute (not tolerated)")


def test_no_schedule_never_evicts() -> None:
    assert claim_eviction(parse_claim(claim()), taints_on({"gpu-0": [DEGRADED]}), NOW) is None


def test_spec_tolerations_count_when_the_result_has_none() -> None:
    tolerating = claim(tolerations=[{"key": "gpu.kdra.dev/unhealthy", "operator": "Exists"}])
    assert claim_eviction(parse_claim(tolerating), taints_on({"gpu-0": [LOST]}), NOW) is None
    for_a_while = claim(tolerations=[{"key": "gpu.kdra.dev/unhealthy", "operator": "Exists",
                                      "effect": "NoExecute", "tolerationSeconds": 30}])
    decision = claim_eviction(parse_claim(for_a_while), taints_on({"gpu-0": [LOST]}), NOW)
    assert decision is not None and decision.decision.tolerated
    assert decision.decision.at == dt.datetime(2026, 12, 2, 8, 0, 20, tzinfo=dt.UTC)
    assert "tolerated only for a while" in decision.reason()


def test_result_tolerations_win_over_the_spec() -> None:
    obj = claim(tolerations=[{"key": "gpu.kdra.dev/unhealthy", "operator": "Exists"}],
                result_tolerations=[{"key": "other", "operator": "Exists"}])
    assert claim_eviction(parse_claim(obj), taints_on({"gpu-0": [LOST]}), NOW) is not None


def test_admin_access_unreserved_and_clean_devices_do_not_evict() -> None:
    assert claim_eviction(parse_claim(claim(admin=True)), taints_on({"gpu-0": [LOST]}),
                          NOW) is None
    assert claim_eviction(parse_claim(claim(reserved=False)), taints_on({"gpu-0": [LOST]}),
                          NOW) is None
    assert claim_eviction(parse_claim(claim()), taints_on({"gpu-9": [LOST]}), NOW) is None


def test_the_worst_device_of_the_claim_decides() -> None:
    obj = claim(devices=("gpu-0", "gpu-1"),
                tolerations=[{"key": "maint", "operator": "Exists", "tolerationSeconds": 60}])
    maintenance = Taint("maint", "", "NoExecute", "2026-12-02T07:59:30Z")
    decision = claim_eviction(parse_claim(obj), taints_on(
        {"gpu-0": [maintenance], "gpu-1": [LOST]}), NOW)
    assert decision is not None and decision.device[2] == "gpu-1"
    assert decision.decision.at == NOW


def test_slice_taints_reads_the_newest_generation_only() -> None:
    def slice_(generation: int, taints: list[Any]) -> dict[str, Any]:
        return {"spec": {"driver": GPU, "pool": {"name": "n1", "generation": generation},
                         "devices": [{"name": "gpu-0", "taints": taints}]}}
    found = slice_taints([
        slice_(1, [{"key": "old", "effect": "NoExecute"}]),
        slice_(2, [{"key": "new", "value": 5, "effect": "NoSchedule",
                    "timeAdded": "2026-12-02T07:00:00Z"}, "garbage"]),
    ])
    assert found == {(GPU, "n1", "gpu-0"): [
        Taint("new", "", "NoSchedule", "2026-12-02T07:00:00Z")]}
