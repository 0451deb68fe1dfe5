"""``python -m kdra_devenv demo``: the seed article's example, and GPUs, on a local control plane of
real binaries.

Starts etcd + kube-apiserver + kube-controller-manager (with the Deployment and ReplicaSet
controllers) on loopback, installs kdra's CRDs and the users' roles (kdra-user), runs
``kdra operator`` (claim controller, binder, webhooks — conversion included, for clients that
write v1alpha3 once it is served; the examples are v1 — slice GC) and three ``kdra agent``
processes — one simulating three GPU nodes with two GPU models, one simulating ``gpu-node-3``
with a partitioned H100 and an H100 shared by memory (manifests/examples/partitions and
sharing get partitions and shares there, not whole GPUs), one serving the seed's cats on
``worker-1`` — applies the seed's cats example plus a few GPU pods (the GPUs' DeviceClass
from manifests/examples/gpu, so the user guide's examples work as written), waits until the
pods are bound, and prints ``pod → node → devices``.

The API flavour is native by default (``resource.k8s.io/v1`` objects, the pods'
``spec.resourceClaims``; the namespace is labelled so that the mutating webhook gives its pods
with claims ``schedulerName: kdra-scheduler``); ``--flavour kdra`` runs the same on kdra's
CRDs and pod annotations. With ``interactive`` it keeps everything running
until Ctrl-C and prints a KUBECONFIG and the metrics URLs (operator and agents, for a
Prometheus to scrape); otherwise it stops (what CI runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from kdra_devenv.controlplane import (
    CONTROLLERS,
    ControlPlane,
    ControlPlaneError,
    binaries,
    free_port,
    repo_root,
)
from kdra_devenv.process import spawn, terminate

GPU_NODES = "gpu-node-{0..2}"
SHARED_NODE = "gpu-node-3"
"""The node whose GPUs are partitioned (gpu-0) and shared by memory (gpu-1)."""
CATS_NODE = "worker-1"

GPU_CLASS = repo_root() / "manifests" / "examples" / "gpu" / "deviceclass.yaml"
"""The GPUs' DeviceClass, as the examples define it (one definition: the guide's examples,
manifests/examples/extended's extended resource included, work on the demo as written)."""
SEED = {"native": repo_root() / "manifests" / "examples" / "native",
        "kdra": repo_root() / "manifests" / "examples" / "seed"}
"""The seed's cats example the demo applies as written, by API flavour (the native one is the
user guide's manifests/examples/native)."""
USER_ROLES = repo_root() / "manifests" / "base" / "user-roles.yaml"
"""kdra-user / kdra-user-view, aggregated into admin/edit/view: the guide's ``--as`` walkthrough
works as on an installed cluster."""
DEMO_CONTROLLERS = (*CONTROLLERS, "deployment-controller", "replicaset-controller")
"""kube-controller-manager's controllers in the demo: the e2e set plus Deployments and
ReplicaSets (manifests/examples/extended is a Deployment)."""

GPU_OBJECTS = """
apiVersion: {api}
kind: ResourceClaimTemplate
metadata: {{name: one-h100, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.kdra.dev
          selectors:
          - cel: {{expression: 'device.attributes["gpu.kdra.dev"].productName.contains("H100")'}}
---
apiVersion: {api}
kind: ResourceClaimTemplate
metadata: {{name: a100-pair, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly:
          deviceClassName: gpu.kdra.dev
          count: 2
          selectors:
          - cel: {{expression: 'device.attributes["gpu.kdra.dev"].productName.contains("A100")'}}
      constraints:
      - matchAttribute: gpu.kdra.dev/pcieRoot
"""


def _gpu_pod(name: str, template: str, flavour: str) -> dict[str, Any]:
    entries = [{"name": "gpu", "resourceClaimTemplateName": template}]
    container: dict[str, Any] = {"name": "cuda", "image": "nvidia/cuda:12.4.0-base-ubuntu22.04",
                                 "command": ["nvidia-smi", "-L"]}
    if flavour == "native":  # no schedulerName: the labelled namespace's webhook sets it
        container["resources"] = {"claims": [{"name": "gpu"}]}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"containers": [container], "resourceClaims": entries}}
    claims = yaml.safe_dump(entries)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"resource.kdra.dev/claims": claims}},
            "spec": {"containers": [container]}}


DEMO_PODS = [("pod-with-cats", None)] + [(f"train-{i}", "one-h100") for i in range(3)] + [
    ("pair-0", "a100-pair")]


class _Procs:
    """kdra processes started by the demo; all stopped on exit."""

    def __init__(self, directory: Path, kubeconfig: Path) -> None:
        self.directory = directory
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self, name: str, *args: str, ready: str, timeout: float = 90) -> None:
        log = self.directory / f"{name}.log"
        with log.open("ab") as out:
            proc = spawn([sys.executable, "-m", "kdra", *args], run_dir=self.directory,
                         stdout=out, stderr=subprocess.STDOUT, env=self.env)
        self.procs.append((name, proc))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ControlPlaneError(f"{name} exited: {log.read_text()[-2000:]}")
            if ready in log.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise ControlPlaneError(f"{name} not ready after {timeout:.0f}s; see {log}")

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            terminate(proc, grace=15)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def run_demo(interactive: bool = True, workdir: str | None = None, timeout: float = 180,
             flavour: str = "native") -> int:
    root = repo_root()
    crds = root / "crds"
    seed = SEED["native" if flavour == "native" else "kdra"]
    api = "resource.k8s.io/v1" if flavour == "native" else "resource.kdra.dev/v1"
    inventories = root / "manifests" / "examples" / "inventory"
    if not crds.is_dir() or not seed.is_dir():
        print(f"kdra demo: run from a source checkout ({crds} / {seed} missing)",
              file=sys.stderr)
        return 2
    # SIGTERM (a supervisor, `timeout`, `kill`) stops the demo as Ctrl-C does: the processes
    # it started run in sessions of their own and would outlive it otherwise.
    signal.signal(signal.SIGTERM, _exit_on_signal)
    owned = workdir is None
    directory = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kdra-demo-"))
    _step("starting etcd, kube-apiserver, kube-controller-manager (real binaries)")
    try:
        plane = ControlPlane(directory, binaries(), controllers=DEMO_CONTROLLERS).start()
    except ControlPlaneError as exc:
        print(f"kdra demo: {exc}", file=sys.stderr)
        return 1
    sockets = Path(tempfile.mkdtemp(prefix="kdra-dra-"))
    procs = _Procs(directory, plane.kubeconfig)
    metrics_port = free_port()
    agent_ports = [free_port(), free_port(), free_port()]
    try:
        _step("installing CRDs")
        plane.kubectl("apply", "--server-side", "-k", str(crds))
        plane.kubectl("wait", "--for", "condition=Established", "--timeout", "60s",
                      "-f", str(crds))
        plane.kubectl("create", "namespace", "kdra-system")
        plane.kubectl("apply", "--server-side", "-f", str(USER_ROLES))
        _step(f"starting kdra agents: simulated GPU nodes {GPU_NODES} (H100 + A100), "
              f"{SHARED_NODE} (a partitioned H100, a shared H100), cats on {CATS_NODE}")
        agents = [  # name, the node(s) it serves, inventory, flags of its own
            ("agent-gpus", ["--simulate-nodes", GPU_NODES], "mixed-gpus.yaml", []),
            ("agent-shared", ["--simulate-nodes", SHARED_NODE], "partitioned-shared-gpus.yaml",
             []),
            # The native flavour's DRA sockets in a short directory of the demo's own (a socket
            # path has at most 108 bytes), not the host's /var/lib/kubelet: no kubelet runs
            # here, and nothing is left on the host.
            ("agent-cats", ["--node-name", CATS_NODE], "cats.yaml",
             ["--kubelet-registry-dir", str(sockets / "reg"),
              "--kubelet-plugins-dir", str(sockets / "plugins")])]
        for (name, nodes, inventory, extra), port in zip(agents, agent_ports, strict=True):
            procs.start(name, "agent", "--flavour", flavour, *nodes, "--create-nodes",
                        "--inventory", str(inventories / inventory),
                        "--cdi-dir", str(directory / "cdi"), "--state-dir",
                        str(directory / "state"), "--metrics-port", str(port), *extra,
                        ready="kdra agent started")
        webhook_port = free_port()
        _step(f"starting kdra operator, {flavour} flavour (claim controller, binder, webhooks, "
              "slice GC)")
        procs.start("operator", "operator", "--flavour", flavour,
                    "--metrics-port", str(metrics_port),
                    "--health-port", "0", "--webhook-port", str(webhook_port),
                    "--webhook-host", "127.0.0.1",
                    "--webhook-url", f"https://127.0.0.1:{webhook_port}",
                    ready="kdra operator started")
        _step("applying the seed's cats (class, shared claim, template, pod-with-cats) and "
              "GPU pods")
        if flavour == "native":  # the webhook gives this namespace's pods kdra-scheduler
            plane.kubectl("label", "namespace", "default",
                          "resource.kdra.dev/scheduler=kdra-scheduler")
        print(plane.kubectl("apply", "-n", "default", "-k", str(seed)).stdout, end="")
        # One definition of the class (manifests/examples/gpu), in the flavour's API group.
        gpu_class = GPU_CLASS.read_text().replace("apiVersion: resource.kdra.dev/v1",
                                                  f"apiVersion: {api}")
        print(plane.kubectl("apply", "-f", "-", input=gpu_class).stdout, end="")
        print(plane.kubectl("apply", "-f", "-", input=GPU_OBJECTS.format(api=api)).stdout,
              end="")
        pods = [_gpu_pod(name, template, flavour) for name, template in DEMO_PODS if template]
        print(plane.kubectl("apply", "-f", "-",
                            input="\n---\n".join(json.dumps(p) for p in pods)).stdout, end="")
        _step("waiting for the pods to be bound")
        table = _wait_table(plane, [name for name, _ in DEMO_PODS], timeout, api)
        print(_format(table))
        print(f"\nmetrics: http://127.0.0.1:{metrics_port}/metrics (operator), "
              + ", ".join(f"http://127.0.0.1:{port}/metrics" for port in agent_ports)
              + " (agents)")
        if any(node == "-" for _, node, _ in table):
            print("kdra demo: not every pod was bound in time; see "
                  f"{directory}/operator.log", file=sys.stderr)
            return 1
        if interactive:
            print(f"export KUBECONFIG={plane.kubeconfig}\n"
                  "try: kubectl get kdra -A; kubectl kdra free; kubectl kdra top; "
                  "kubectl kdra why pod-with-cats\n"
                  f"(kubectl runs the plugin kubectl-kdra from PATH: it is in "
                  f"{Path(sys.executable).parent})\n"
                  "Ctrl-C stops everything.", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
    except ControlPlaneError as exc:
        print(f"kdra demo: {exc}", file=sys.stderr)
        return 1
    finally:
        procs.stop()
        plane.stop()
        shutil.rmtree(sockets, ignore_errors=True)
        if owned:
            shutil.rmtree(directory, ignore_errors=True)
    return 0


def _wait_table(plane: ControlPlane, names: list[str], timeout: float,
                api: str) -> list[tuple[str, str, str]]:
    deadline = time.monotonic() + timeout
    group = api.split("/")[0]
    while True:
        pods = {p["metadata"]["name"]: p for p in json.loads(
            plane.kubectl("get", "pods", "-n", "default", "-o", "json").stdout)["items"]}
        claims = {c["metadata"]["name"]: c for c in json.loads(
            plane.kubectl("get", f"resourceclaims.{group}", "-n", "default", "-o",
                          "json").stdout)["items"]}
        table = []
        for name in names:
            pod = pods.get(name, {})
            node = pod.get("spec", {}).get("nodeName") or "-"
            devices = []
            for claim_name in _claim_names(pod):
                allocation = (claims.get(claim_name, {}).get("status") or {}).get(
                    "allocation") or {}
                devices += [r["device"] for r in allocation.get("devices", {}).get("results", [])]
            table.append((name, node, ",".join(devices) or "-"))
        if all(node != "-" for _, node, _ in table) or time.monotonic() > deadline:
            return table
        time.sleep(0.5)


def _claim_names(pod: dict[str, Any]) -> list[str]:
    """The pod's claims in the order of its entries: ``spec.resourceClaims`` with the names
    kdra recorded in ``status.resourceClaimStatuses`` (native), or the claim-statuses
    annotation (kdra)."""
    entries = (pod.get("spec") or {}).get("resourceClaims")
    if entries:
        recorded = {s["name"]: s.get("resourceClaimName")
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
        names = [e.get("resourceClaimName") or recorded.get(e["name"]) for e in entries]
        return [n for n in names if n]
    return list(json.loads(pod.get("metadata", {}).get("annotations", {}).get(
        "resource.kdra.dev/claim-statuses", "{}")).values())


def _format(table: list[tuple[str, str, str]]) -> str:
    rows = [("POD", "NODE", "DEVICES"), *table]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))
                     .rstrip() for row in rows)


def _step(text: str) -> None:
    print(f"==> {text}", flush=True)
