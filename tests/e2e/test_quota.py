"""DeviceQuota end to end: real API server, operator (binder + webhooks) and a node agent.

A quota of 4 GPUs in a namespace with 8 free GPUs: four pods bind, the fifth stays pending with
the quota's message and binds when one of the four ends; a claim shared by two pods counts
once; a claim that alone exceeds the quota is refused at creation; ``kubectl get
kdevicequota`` shows used and hard; the operator's metrics count the usage and the denials.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import AgentFactory
from tests.e2e.conftest import get_json
from tests.e2e.procs import wait_for
from tests.e2e.test_binder import apply, events, gpu_class, gpu_pod, kdra, pods, template

agents = agent_helpers.agents  # the node-agent fixture
__all__ = ["agents", "kdra"]  # fixtures used by name
GPU = "gpu.kdra.dev"
QUOTA_MESSAGE = "DeviceQuota {ns}/gpus: class 'gpu.kdra.dev' devices: 4 used + 1 asked > 4 hard"


def device_quota(namespace: str, devices: int) -> dict[str, Any]:
    return {"apiVersion": "resource.kdra.dev/v1alpha1", "kind": "DeviceQuota",
            "metadata": {"name": "gpus", "namespace": namespace},
            "spec": {"limits": [{"deviceClassName": GPU, "devices": devices,
                                 "capacity": {"memory": "400Gi"}}]}}


def scheduled(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    pod = get_json(plane, "pod", name, "-n", namespace)
    return next((c for c in pod.get("status", {}).get("conditions") or ()
                 if c.get("type") == "PodScheduled"), {})


def bound(plane: ControlPlane, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in pods(plane, namespace) if p["spec"].get("nodeName")}


def quota_row(plane: ControlPlane, namespace: str) -> str:
    return str(plane.kubectl("get", "kdevicequota", "gpus", "-n", namespace,
                             "--no-headers").stdout)


def test_quota_of_four_gpus(control_plane: ControlPlane, agents: AgentFactory, kdra: Any,
                            namespace: str) -> None:
    node = f"q-{namespace[-8:]}".strip("-")
    agents(node, "gpus: ['8 x H100-80GB']\n")
    operator = kdra(webhooks=True)
    one_gpu = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}
    apply(control_plane, gpu_class(), device_quota(namespace, 4),
          template("one-gpu", namespace, [{"name": "gpu", "deviceClassName": GPU}]))
    apply(control_plane, *[gpu_pod(f"p{i}", namespace, [one_gpu]) for i in range(1, 6)])

    # Four bind (the allocation of one may still be in flight while another is decided: it
    # counts), the fifth stays pending with the quota's message.
    def four_and_one() -> tuple[set[str], str] | None:
        done = bound(control_plane, namespace)
        waiting = [p for p in sorted({f"p{i}" for i in range(1, 6)} - done)
                   if scheduled(control_plane, namespace, p).get("reason") ==
                   "DeviceQuotaExceeded"]
        return (done, waiting[0]) if len(done) == 4 and len(waiting) == 1 else None

    done, fifth = wait_for(four_and_one, timeout=120, interval=0.5,
                           what="four pods bound, the fifth held back by the quota")
    message = QUOTA_MESSAGE.format(ns=namespace)
    assert scheduled(control_plane, namespace, fifth)["message"] == message
    assert message in events(control_plane, namespace, fifth, "FailedScheduling")
    # `kubectl get kdevicequota` shows used and hard.
    row = wait_for(lambda: (r := quota_row(control_plane, namespace)) and
                   "4 devices, memory 320Gi" in r and r, timeout=30, what="quota status")
    assert re.match(r"gpus\s+gpu\.kdra\.dev: 4 devices, memory 320Gi\s+"
                    r"gpu\.kdra\.dev: 4 devices, memory 400Gi\s", row), row

    # One of the four ends: the fifth binds.
    control_plane.kubectl("delete", "pod", sorted(done)[0], "-n", namespace,
                          "--grace-period=0", "--force")
    wait_for(lambda: fifth in bound(control_plane, namespace), timeout=90, interval=0.5,
             what="the fifth pod bound after one of the four ended")
    assert len(bound(control_plane, namespace)) == 4

    # A shared claim counts once: held back while the quota is full, then two pods use it.
    apply(control_plane, {"apiVersion": "resource.kdra.dev/v1alpha3", "kind": "ResourceClaim",
                          "metadata": {"name": "shared", "namespace": namespace},
                          "spec": {"devices": {"requests": [{"name": "gpu",
                                                             "deviceClassName": GPU}]}}})
    shared = {"name": "gpu", "resourceClaimName": "shared"}
    apply(control_plane, gpu_pod("s1", namespace, [shared]))
    wait_for(lambda: scheduled(control_plane, namespace, "s1").get("message") == message,
             timeout=60, what="the shared claim's first pod held back by the quota")
    control_plane.kubectl("delete", "pod", sorted(bound(control_plane, namespace))[0],
                          "-n", namespace, "--grace-period=0", "--force")
    wait_for(lambda: "s1" in bound(control_plane, namespace), timeout=90, interval=0.5,
             what="s1 bound once a GPU of the quota was released")
    apply(control_plane, gpu_pod("s2", namespace, [shared]))
    wait_for(lambda: "s2" in bound(control_plane, namespace), timeout=90, interval=0.5,
             what="s2 bound on the shared claim although the quota is full")
    wait_for(lambda: "4 devices, memory 320Gi" in quota_row(control_plane, namespace),
             timeout=30, what="the quota's status: the shared claim counted once")

    # A claim that alone exceeds the quota is refused when it is created.
    refused = control_plane.kubectl("create", "-f", "-", check=False, input=json.dumps({
        "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
        "metadata": {"name": "five", "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": GPU, "count": 5}}]}}}))
    assert refused.returncode != 0
    assert (f"DeviceQuota {namespace}/gpus: class 'gpu.kdra.dev' devices: 5 asked > 4 hard"
            in refused.stderr), refused.stderr

    # The metrics: usage and hard per resource, and the denials.
    samples = metric_samples(operator.metrics(), namespace)
    assert samples[("kdra_quota_used", "devices")] == 4
    assert samples[("kdra_quota_used", "capacity/memory")] == 4 * 80 * 2**30
    assert samples[("kdra_quota_hard", "devices")] == 4
    assert samples[("kdra_quota_denials_total", "devices")] >= 2  # the fifth pod, s1


def metric_samples(text: str, namespace: str) -> dict[tuple[str, str], float]:
    """``(metric, resource) → value`` of the kdra_quota_* samples of the namespace's quota."""
    from prometheus_client.parser import text_string_to_metric_families

    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name.startswith("kdra_quota_") and labels.get("namespace") == namespace \
                    and (labels.get("quota"), labels.get("class")) == ("gpus", GPU):
                found[(sample.name, labels["resource"])] = sample.value
    return found
