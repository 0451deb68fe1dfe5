"""What one claim write costs the API server: kdra's custom resource vs native resource.k8s.io.

    .venv/bin/python bench/writecost.py                  # ~6 min on 2 cores
    .venv/bin/python bench/writecost.py --claims 300 --rounds 3

bench/scale.py shows the API server spending more CPU per pod on kdra than on upstream while
kdra sends fewer writes; this isolates why. One control plane (etcd + kube-apiserver, no
controller-manager, so nothing else writes), kdra's CRDs installed, and each *lifecycle* below
driven for ``--claims`` claims with 8 writes in flight, phase by phase. Each lifecycle's
claims are watched by two clients, as in the benchmark (kdra: operator and agent; upstream:
kube-scheduler and kube-controller-manager). Per phase, the CPU that kube-apiserver and etcd
used (/proc utime+stime, less their idle rate measured just before) is divided by the number
of writes. Lifecycles take turns, ``--rounds`` times, so a slow moment of this shared machine
hits each alike; the table gives medians.

Lifecycles (each: what its contender writes for one pod's generated claim in steady state):
- ``kdra``: create (finalizer included), allocation (binder), Ready (agent), deallocation,
  finalizer removal (merge patch), delete; status writes PUT the whole object, as
  ``KubeClient.replace_status`` does.
- ``native``: what kube-scheduler and the resourceclaim controller write for a
  resource.k8s.io/v1 claim: create, finalizer (update), allocation (status update),
  deallocation (status update), finalizer removal (update), delete.

Prints a table; asserts nothing (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kapi import JSON, MERGE, Api, bounded, cpu_seconds
from kdra_devenv.controlplane import ControlPlane, binaries, repo_root
from objects import CLASS, DRIVER, native_allocation

NAMESPACE = "default"
IN_FLIGHT = 8
WATCHERS = 2
FINALIZER_KDRA = "resource.kdra.dev/delete-protection"
FINALIZER_NATIVE = "resource.kubernetes.io/delete-protection"
REQUEST = "req-0"  # the request name native_allocation uses


def node(i: int) -> str:
    return f"node-{i % 500}"


def pod_ref(i: int) -> JSON:
    return {"resource": "pods", "name": f"pod-{i}",
            "uid": f"00000000-0000-0000-0000-{i:012d}"}


def device(i: int) -> str:
    return f"gpu-{i % 10}"


Write = Callable[[int], Awaitable[None]]


@dataclass
class Lifecycle:
    """One contender's writes for a claim, in order; ``objects[i]`` is claim i as last
    written (the server's answer, as a client keeps it)."""

    name: str
    path: str
    objects: list[JSON] = field(default_factory=list)

    def phases(self, api: Api) -> list[tuple[str, Write]]:
        raise NotImplementedError

    def url(self, i: int, subresource: str = "") -> str:
        url = f"{self.path}/{self.objects[i]['metadata']['name']}"
        return f"{url}/{subresource}" if subresource else url

    async def put(self, api: Api, i: int, subresource: str, body: JSON) -> None:
        self.objects[i] = await api.call("PUT", self.url(i, subresource), body)


def whole(obj: JSON, **changes: Any) -> JSON:
    """``obj`` to PUT back with ``changes`` (``metadata`` merged), without managedFields (kdra's
    client strips them from what it keeps; client-go's informers do too)."""
    meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
    return {**obj, "metadata": {**meta, **changes.pop("metadata", {})}, **changes}


class Kdra(Lifecycle):
    def phases(self, api: Api) -> list[tuple[str, Write]]:
        async def create(i: int) -> None:
            self.objects[i] = await api.call("POST", self.path, {
                "apiVersion": "resource.kdra.dev/v1", "kind": "ResourceClaim",
                "metadata": {"generateName": f"pod-{i}-gpu-", "namespace": NAMESPACE,
                             "annotations": {"resource.kdra.dev/pod-claim-name": "gpu"},
                             "finalizers": [FINALIZER_KDRA]},
                "spec": {"devices": {"requests": [{"name": REQUEST, "exactly": {
                    "deviceClassName": CLASS, "allocationMode": "ExactCount",
                    "count": 1}}]}}})

        async def allocate(i: int) -> None:
            await self.put(api, i, "status", whole(self.objects[i], status={
                "allocation": native_allocation(node(i), device(i)),
                "reservedFor": [pod_ref(i)]}))

        async def ready(i: int) -> None:
            obj = self.objects[i]
            cdi = f"example.com/gpu={obj['metadata']['uid']}-{device(i)}"
            await self.put(api, i, "status", whole(obj, status={**obj["status"], "devices": [{
                "driver": DRIVER, "pool": node(i), "device": device(i),
                "conditions": [{"type": "Ready", "status": "True", "reason": "Prepared",
                                "message": f"CDI devices: {cdi}", "observedGeneration": 1,
                                "lastTransitionTime": "2026-12-01T00:00:00Z"}],
                "data": {"cdiDeviceIDs": [cdi], "uuid": f"GPU-{i:08d}"}}]}))

        async def deallocate(i: int) -> None:
            await self.put(api, i, "status", whole(self.objects[i], status={}))

        async def unfinalize(i: int) -> None:
            meta = self.objects[i]["metadata"]
            self.objects[i] = await api.call("PATCH", self.url(i), {"metadata": {
                "resourceVersion": meta["resourceVersion"], "finalizers": []}}, ctype=MERGE)

        async def delete(i: int) -> None:
            await api.call("DELETE", self.url(i))

        return [("create", create), ("allocate", allocate), ("ready", ready),
                ("deallocate", deallocate), ("finalizer off", unfinalize),
                ("delete", delete)]


class Native(Lifecycle):
    def phases(self, api: Api) -> list[tuple[str, Write]]:
        async def create(i: int) -> None:
            self.objects[i] = await api.call("POST", self.path, {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                "metadata": {"generateName": f"pod-{i}-gpu-", "namespace": NAMESPACE,
                             "annotations": {"resource.kubernetes.io/pod-claim-name": "gpu"}},
                "spec": {"devices": {"requests": [{"name": REQUEST, "exactly": {
                    "deviceClassName": CLASS}}]}}})

        async def finalize(i: int) -> None:
            await self.put(api, i, "", whole(self.objects[i],
                                             metadata={"finalizers": [FINALIZER_NATIVE]}))

        async def allocate(i: int) -> None:
            await self.put(api, i, "status", whole(self.objects[i], status={
                "allocation": native_allocation(node(i), device(i)),
                "reservedFor": [pod_ref(i)]}))

        async def deallocate(i: int) -> None:
            await self.put(api, i, "status", whole(self.objects[i], status={}))

        async def unfinalize(i: int) -> None:
            await self.put(api, i, "", whole(self.objects[i], metadata={"finalizers": []}))

        async def delete(i: int) -> None:
            await api.call("DELETE", self.url(i))

        return [("create", create), ("finalizer on", finalize), ("allocate", allocate),
                ("deallocate", deallocate), ("finalizer off", unfinalize),
                ("delete", delete)]


async def run(plane: ControlPlane, claims: int, rounds: int) -> dict[str, dict[str, float]]:
    pids = [p.popen.pid for p in plane.processes]

    def cpu() -> float:
        return sum(cpu_seconds(pid) for pid in pids)

    kdra_path = f"/apis/resource.kdra.dev/v1/namespaces/{NAMESPACE}/resourceclaims"
    native_path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
    lifecycles: list[Lifecycle] = [Kdra("kdra", kdra_path), Native("native", native_path)]
    samples: dict[str, dict[str, list[float]]] = {lc.name: {} for lc in lifecycles}
    async with Api(plane.kubeconfig) as api:
        watches = [asyncio.create_task(api.watch(path, "0", lambda kind, obj: None))
                   for path in (kdra_path, native_path) for _ in range(WATCHERS)]
        try:
            await asyncio.sleep(2)
            for number in range(rounds):
                for lifecycle in lifecycles:
                    lifecycle.objects = [{} for _ in range(claims)]
                    for phase, write in lifecycle.phases(api):
                        start, began = cpu(), time.monotonic()
                        await asyncio.sleep(1.0)
                        idle = (cpu() - start) / (time.monotonic() - began)
                        start, began = cpu(), time.monotonic()
                        await bounded(IN_FLIGHT, [functools.partial(write, i)
                                                  for i in range(claims)])
                        await asyncio.sleep(0.5)  # the watchers' share of the work
                        used = cpu() - start - idle * (time.monotonic() - began)
                        samples[lifecycle.name].setdefault(phase, []).append(
                            1000 * used / claims)
                    print(f"round {number + 1}/{rounds} {lifecycle.name}: " + ", ".join(
                        f"{p} {v[-1]:.2f}" for p, v in samples[lifecycle.name].items()),
                        flush=True)
        finally:
            for task in watches:
                task.cancel()
    return {name: {phase: statistics.median(v) for phase, v in phases.items()}
            for name, phases in samples.items()}


def report(medians: dict[str, dict[str, float]], claims: int, rounds: int) -> str:
    lines = [f"API server + etcd CPU per write, ms (median of {rounds} rounds, {claims} "
             f"claims each, {IN_FLIGHT} in flight, {WATCHERS} watchers per kind):", ""]
    for name, phases in medians.items():
        total = sum(phases.values())
        cells = " | ".join(f"{phase} {ms:.2f}" for phase, ms in phases.items())
        lines.append(f"| {name} | {cells} | **{total:.1f} per claim** |")
    kdra, native = (sum(medians[n].values()) for n in ("kdra", "native"))
    lines += ["", f"kdra / native per claim lifecycle: {kdra / native:.2f}x "
              f"({kdra - native:+.1f} ms)"]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kdra-writecost-") as work:
        plane = ControlPlane(Path(work), binaries(), with_controller_manager=False).start()
        try:
            plane.kubectl("apply", "-k", str(repo_root() / "crds"))
            plane.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          "crd/resourceclaims.resource.kdra.dev")
            medians = asyncio.run(run(plane, args.claims, args.rounds))
        finally:
            plane.stop()
    print(report(medians, args.claims, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
