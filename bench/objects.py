"""The API objects of scheduler_perf's DRA workloads (test/integration/scheduler_perf/dra),
for bench/scale.py and the benchmarks built on it: native resource.k8s.io/v1 ones and kdra's.

Invariant: both flavours have the same shapes: one driver (DRIVER), one DeviceClass (CLASS)
selecting it, DEVICES_PER_NODE devices per node named ``basic-device-<i>`` in a pool named after
the node (``node_name``), a claim template (TEMPLATE) asking for one device by the request
``req-0``; only the API group and, for kdra, where a pod names its claims (an annotation) differ.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from kapi import JSON, Api, bounded
from kdra_devenv.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[1]
DRIVER = "test-driver.cdi.k8s.io"
CLASS = "test-class"
TEMPLATE = "test-claim-template"
DEVICES_PER_NODE = 10
KDRA_GROUP = "resource.kdra.dev"
KDRA_VERSION = "v1"
CLAIMS_ANNOTATION = f"{KDRA_GROUP}/claims"
PAUSE = "registry.k8s.io/pause:3.10.1"
CREATE_CONCURRENCY = 20


def node_name(i: int) -> str:
    return f"scheduler-perf-dra-{i}"


def device_attrs(index: int) -> JSON:
    return {"model": {"string": "A100"}, "family": {"string": "GPU"},
            "driverVersion": {"version": "1.2.3"}, "pciRoot": {"string": str(index)}}


def install_crds(plane: ControlPlane) -> None:
    crds = str(ROOT / "crds")
    plane.kubectl("apply", "--server-side", "-k", crds)
    plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s", "-f", crds)


def native_pod(ns: str, name: str, scheduler: str | None = None) -> JSON:
    spec: JSON = {"containers": [{"name": "pause", "image": PAUSE,
                                  "resources": {"claims": [{"name": "resource"}]}}],
                  "resourceClaims": [{"name": "resource", "resourceClaimTemplateName": TEMPLATE}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": spec}


def native_claim(ns: str, name: str) -> JSON:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": [
                {"name": "req-0", "exactly": {"deviceClassName": CLASS}}]}}}


def native_allocation(node: str, device: str) -> JSON:
    return {"devices": {"results": [{"request": "req-0", "driver": DRIVER, "pool": node,
                                     "device": device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


def kdra_pod(ns: str, name: str) -> JSON:
    claims = [{"name": "resource", "resourceClaimTemplateName": TEMPLATE}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {CLAIMS_ANNOTATION: yaml.safe_dump(claims)}},
            "spec": {"schedulerName": "kdra-scheduler",
                     "containers": [{"name": "pause", "image": PAUSE}]}}


def kdra_claim(ns: str, name: str) -> JSON:
    return {"apiVersion": f"{KDRA_GROUP}/{KDRA_VERSION}", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "req-0",
                                               "exactly": {"deviceClassName": CLASS}}]}}}


async def create_native_nodes(api: Api, count: int, slices: bool) -> None:
    """Nodes as scheduler_perf's template (capacity, Ready), schedulable (the API server's
    not-ready taint removed), and one native ResourceSlice per node."""

    async def one(i: int) -> None:
        name = node_name(i)
        await api.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": name}}}, ok_conflict=True)
        await api.call("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}},
                       ctype="application/merge-patch+json")
        resources = {"pods": "110", "cpu": "4", "memory": "32Gi"}
        await api.patch_status(f"/api/v1/nodes/{name}", {"status": {
            "capacity": resources, "allocatable": resources, "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "simulated",
                            "lastHeartbeatTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime())}]}})
        if slices:
            await api.create("/apis/resource.k8s.io/v1/resourceslices", {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"resourceslice-{i}"},
                "spec": {"pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                         "driver": DRIVER, "nodeName": name,
                         "devices": [{"name": f"basic-device-{d}",
                                      "attributes": {**device_attrs(d)},
                                      "capacity": {"memory": {"value": "1Gi"}}}
                                     for d in range(DEVICES_PER_NODE)]}})

    await bounded(CREATE_CONCURRENCY, [lambda i=i: one(i) for i in range(count)])
