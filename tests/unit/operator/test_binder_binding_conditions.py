"""Issue 39: the binder waits for binding conditions (upstream KEP-5007) the way it waits for
kdra's own prepare-before-bind: one mechanism (kdra.dra.binding_conditions).

A device whose allocation result declares ``bindingConditions`` lets the pod bind once those
are True in the claim's ``status.devices`` (kdra's ``Ready`` is not needed for it); a
``bindingFailureConditions`` entry turning True fails the attempt at once (the node's fault:
the pod goes elsewhere); the wait gives up after ``binding_timeout`` from the allocation's
``allocationTimestamp``. A device without binding conditions still waits for ``Ready``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from kdra.dra.binding_conditions import has_binding_conditions, pending, readiness
from kdra.dra.timestamps import api_time
from kdra.kube.core.podclaims import FINALIZER, PodClaim
from kdra.kube.events import EventRecorder
from kdra.operator.claim_controller import claim_store
from kdra.operator.scheduler import Binder, BinderSettings
from kdra.operator.scheduler.pending import Attempt

NS = "ns"
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": NS, "uid": "uid-p", "resourceVersion": "1"},
       "spec": {"schedulerName": "kdra-scheduler"}}
REF = {"resource": "pods", "name": "p", "uid": "uid-p"}


def result(device: str, conditions: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"request": "gpu", "driver": "fabric.example.com",
                           "pool": "fabric", "device": device}
    if conditions:
        out["bindingConditions"] = conditions
        out["bindingFailureConditions"] = ["AttachFailed"]
    return out


def device_status(device: str, **conditions: str) -> dict[str, Any]:
    return {"driver": "fabric.example.com", "pool": "fabric", "device": device,
            "conditions": [{"type": k, "status": v, "reason": "Test", "message": k}
                           for k, v in conditions.items()]}


def claim(results: list[dict[str, Any]], devices: list[dict[str, Any]],
          allocated: str | None = None) -> dict[str, Any]:
    allocation: dict[str, Any] = {"devices": {"results": results}}
    if allocated is not None:
        allocation["allocationTimestamp"] = allocated
    return {"apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": NS, "uid": "uid-c", "resourceVersion": "7",
                         "finalizers": [FINALIZER]},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "fabric"}}]}},
            "status": {"allocation": allocation, "reservedFor": [REF], "devices": devices}}


def waiting(raw: dict[str, Any], **settings: float) -> Any:
    binder = Binder(None, EventRecorder(None),  # type: ignore[arg-type]
                    claims=claim_store(), settings=BinderSettings(**settings))
    binder.claims.upsert(raw)
    attempt = Attempt(POD, "node-1", [(PodClaim(name="gpu", resource_claim_name="c"), "c")])
    attempt.expected["c"] = raw["status"]["allocation"]
    return asyncio.run(binder.prepare.wait(NS, attempt))


def test_a_device_with_binding_conditions_binds_once_they_are_true() -> None:
    raw = claim([result("nic-0", ["Attached"])], [device_status("nic-0", Attached="True")])
    assert readiness(raw) is True
    assert waiting(raw, prepare_timeout=0.1, binding_timeout=0.1) is None


def test_a_device_with_binding_conditions_does_not_need_kdra_s_ready() -> None:
    raw = claim([result("nic-0", ["Attached"])],
                [device_status("nic-0", Attached="True", Ready="False")])
    assert readiness(raw) is True


def test_a_binding_failure_condition_fails_the_attempt_on_the_node() -> None:
    raw = claim([result("nic-0", ["Attached"])],
                [device_status("nic-0", Attached="False", AttachFailed="True")])
    failure = waiting(raw, binding_timeout=30)
    assert failure is not None and failure.node_fault
    assert "binding failed: AttachFailed" in failure.message


def test_pending_binding_conditions_time_out_after_the_binding_timeout() -> None:
    raw = claim([result("nic-0", ["Attached"])], [device_status("nic-0", Attached="False")])
    assert readiness(raw) is None and pending(raw) == (False, True)
    failure = waiting(raw, prepare_timeout=0.05, binding_timeout=0.2)
    assert failure is not None and failure.node_fault
    assert "device binding timeout" in failure.message


def test_the_binding_timeout_counts_from_the_allocation() -> None:
    """A binder that restarts does not wait another full timeout: upstream's
    allocationTimestamp is when it started."""
    long_ago = api_time(dt.datetime.now(dt.UTC) - dt.timedelta(seconds=700))
    raw = claim([result("nic-0", ["Attached"])], [], allocated=long_ago)
    failure = waiting(raw, binding_timeout=600)
    assert failure is not None and "device binding timeout" in failure.message


def test_a_device_without_binding_conditions_still_waits_for_ready() -> None:
    raw = claim([result("gpu-0"), result("nic-0", ["Attached"])],
                [device_status("nic-0", Attached="True")])
    assert readiness(raw) is None and pending(raw) == (True, False)
    failure = waiting(raw, prepare_timeout=0.1, binding_timeout=600)
    assert failure is not None and "Ready" in failure.message
    ready = claim([result("gpu-0"), result("nic-0", ["Attached"])],
                  [device_status("nic-0", Attached="True"), device_status("gpu-0", Ready="True")])
    assert waiting(ready, prepare_timeout=0.1) is None


def test_binding_conditions_are_recognised() -> None:
    assert has_binding_conditions(claim([result("nic-0", ["Attached"])], []))
    assert not has_binding_conditions(claim([result("gpu-0")], []))
