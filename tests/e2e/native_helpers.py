"""Helpers of the native-flavour end-to-end tests (issue 38): native objects
(``resource.k8s.io/v1``), nodes and slices as a driver publishes them, the operator in the
native flavour, and reading pods and claims.

The slices here are published the way any DRA driver does — ResourceSlices of the built-in
kind, created by the test — under drivers no kdra agent serves: kdra's operator reads them
and must never write or delete them (its slice GC acts on its agents' drivers only).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kdra_devenv.controlplane import ControlPlane
from tests.e2e.conftest import get_json, operator_with_webhooks
from tests.e2e.conversion import ConversionServer
from tests.e2e.procs import KdraProcess, wait_for

API = "resource.k8s.io/v1"
CLAIMS = "resourceclaims.resource.k8s.io"
SLICES = "resourceslices.resource.k8s.io"
CLASSES = "deviceclasses.resource.k8s.io"
TEMPLATES = "resourceclaimtemplates.resource.k8s.io"
FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
PAUSE = "registry.k8s.io/pause:3.10"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def apply(plane: ControlPlane, *objects: dict[str, Any], namespace: str | None = None) -> None:
    args = ("-n", namespace) if namespace else ()
    plane.kubectl("apply", *args, "-f", "-", input="\n---\n".join(json.dumps(o)
                                                                   for o in objects))


def make_node(plane: ControlPlane, name: str) -> None:
    """A Node as its kubelet registers it, Ready, with room for pods."""
    plane.kubectl("create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}))
    plane.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p",
                  json.dumps({"status": {
                      "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                      "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                      "conditions": [{"type": "Ready", "status": "True",
                                      "reason": "KubeletReady", "message": "ready"}]}}))
    plane.kubectl("taint", "node", name, "node.kubernetes.io/not-ready:NoSchedule-",
                  check=False)


def device_class(name: str, driver: str) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]}}


def slices(node: str, driver: str, *specs: dict[str, Any]) -> list[dict[str, Any]]:
    """The pool ``node`` of ``driver`` on ``node``: one slice per spec part (devices, or
    shared counters), all in generation 0."""
    return [{"apiVersion": API, "kind": "ResourceSlice",
             "metadata": {"name": f"{node}-{driver.replace('.', '-')}-{i}"},
             "spec": {"driver": driver, "nodeName": node, **spec,
                      "pool": {"name": node, "generation": 0,
                               "resourceSliceCount": len(specs)}}}
            for i, spec in enumerate(specs)]


def gpus(count: int, model: str = "H100", start: int = 0) -> list[dict[str, Any]]:
    return [{"name": f"gpu-{i}", "attributes": {"model": {"string": model}},
             "capacity": {"memory": {"value": "80Gi"}}} for i in range(start, start + count)]


def request(name: str, device_class_name: str, *, count: int = 1,
            selector: str | None = None, **extra: Any) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class_name, "count": count, **extra}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return {"name": name, "exactly": exactly}


def template(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def claim(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": list(requests)}}}


def pod(name: str, *, claims: dict[str, str] | None = None, templates: dict[str, str] | None = None,
        scheduler: str | None = "kdra-scheduler", **spec: Any) -> dict[str, Any]:
    """A pod whose container uses every entry: ``claims`` entry → claim name, ``templates``
    entry → template name."""
    entries = [{"name": e, "resourceClaimName": c} for e, c in (claims or {}).items()]
    entries += [{"name": e, "resourceClaimTemplateName": t}
                for e, t in (templates or {}).items()]
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": PAUSE, "resources": {
            "claims": [{"name": e["name"]} for e in entries]}}],
            "resourceClaims": entries, **spec}}
    if scheduler:
        body["spec"]["schedulerName"] = scheduler
    return body


def get_pod(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_json(plane, "pod", name, "-n", namespace))


def bound(plane: ControlPlane, namespace: str, name: str, timeout: float = 90) -> dict[str, Any]:
    return dict(wait_for(
        lambda: (p := get_pod(plane, namespace, name))["spec"].get("nodeName") and p,
        timeout=timeout, what=f"pod {namespace}/{name} bound"))


def statuses(obj: dict[str, Any]) -> dict[str, str]:
    """A pod's ``status.resourceClaimStatuses`` as entry → claim name."""
    return {s["name"]: s.get("resourceClaimName", "")
            for s in (obj.get("status") or {}).get("resourceClaimStatuses") or ()}


def claim_obj(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_json(plane, CLAIMS, name, "-n", namespace))


def claims_in(plane: ControlPlane, namespace: str) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c
            for c in get_json(plane, CLAIMS, "-n", namespace)["items"]}


def generated(plane: ControlPlane, namespace: str, pod_name: str, entry: str,
              timeout: float = 60) -> dict[str, Any]:
    """The claim recorded for the pod's ``entry`` (once recorded), as stored."""
    name = wait_for(lambda: statuses(get_pod(plane, namespace, pod_name)).get(entry),
                    timeout=timeout, what=f"{pod_name}'s claim for {entry} recorded")
    return claim_obj(plane, namespace, name)


def results(obj: dict[str, Any]) -> list[dict[str, Any]]:
    allocation = (obj.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def events(plane: ControlPlane, namespace: str, name: str) -> list[tuple[str, str]]:
    return [(e["reason"], e.get("message") or e.get("note") or "")
            for e in get_json(plane, "events", "-n", namespace,
                              "--field-selector", f"involvedObject.name={name}")["items"]]


def pod_scheduled(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or ()
                 if c.get("type") == "PodScheduled"), None)


def force_delete(plane: ControlPlane, namespace: str, *names: str) -> None:
    """Delete pods as a kubelet finishes it (no kubelet serves the simulated nodes)."""
    plane.kubectl("delete", "pod", *names, "-n", namespace, "--grace-period=0", "--force",
                  "--ignore-not-found")


@contextmanager
def native_operator(plane: ControlPlane, conversion: ConversionServer, log: Path,
                    *extra: str) -> Iterator[KdraProcess]:
    """``kdra operator --flavour native`` with its webhooks (their configurations removed
    afterwards)."""
    with operator_with_webhooks(plane, conversion, log, "--flavour", "native",
                                "--scheduler-for-claims", "namespaces", *extra) as (proc, _):
        assert "flavour native" in proc.tail(400), proc.tail(40)
        yield proc
