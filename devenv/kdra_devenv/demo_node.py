"""``python -m kdra_devenv demo --node real`` (``make demo NODE=real``): the seed's cats and the GPU
examples on a real kubelet node of this machine, printing what each container sees of its devices.

Builds (or reuses) kdra's image from the Dockerfile, starts a control plane and the node
(:class:`kdra_devenv.realcluster.RealCluster`: containerd 2.x with NRI and CDI, runc, CNI,
kubelet), deploys kdra with its manifests (the operator and the agent run as pods), applies
``manifests/overlays/node/examples`` and, once the pods run, prints per pod and container the
node, the allocated devices and the container's own output: its device env and device files,
as the agent's NRI plugin had containerd inject them. Needs root. Interactive: keeps running
until Ctrl-C (or SIGTERM), which stops everything and undoes every host change.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from kdra_devenv.controlplane import ControlPlaneError
from kdra_devenv.hostledger import LedgerError
from kdra_devenv.imagebuild import ImageBuildError
from kdra_devenv.node import NodeError
from kdra_devenv.realcluster import RealCluster

PODS = ("pod-with-cats", "single-gpu-pod", "shared-gpu-pod-a", "shared-gpu-pod-b",
        "gpu-pair-pod", "all-a100-pod")


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def _step(text: str) -> None:
    print(f"==> {text}", flush=True)


def run_node_demo(interactive: bool = True, workdir: str | None = None,
                  timeout: float = 300) -> int:
    if os.geteuid() != 0:
        print("kdra demo --node real: needs root (containerd, runc, kubelet, the pod network)",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _exit_on_signal)
    owned = workdir is None
    directory = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kdra-demo-node-"))
    _step("kdra on a real node: image from the Dockerfile (buildah), control plane, containerd "
          "+ kubelet, kdra's manifests (first run: packages, binaries and images, minutes)")
    cluster = RealCluster(directory, progress=lambda line: print(f"    {line}", flush=True))
    try:
        cluster.start(deploy=True)
        _step("applying manifests/overlays/node/examples (GPU examples, the seed's cats)")
        cluster.apply_examples()
        _step("waiting for the pods to run")
        deadline = time.monotonic() + timeout
        while not _all_running(cluster) and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(2)  # the containers print at once; let them
        ok = _print_pods(cluster)
        assert cluster.plane is not None
        if interactive:
            print(f"\nexport KUBECONFIG={cluster.plane.kubeconfig}\n"
                  "try: kubectl logs gpu-pair-pod; kubectl get kdra -A; "
                  "kubectl -n kdra-system get pods\nCtrl-C stops everything.", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                signal.pause()
        return 0 if ok else 1
    except (NodeError, ControlPlaneError, ImageBuildError, LedgerError) as exc:
        print(f"kdra demo: {exc}", file=sys.stderr)
        return 1
    finally:
        cluster.stop()
        if owned:
            shutil.rmtree(directory, ignore_errors=True)


def _all_running(cluster: RealCluster) -> bool:
    pods = json.loads(cluster.kubectl("get", "pods", "-n", "default", "-o", "json").stdout)
    phases = {p["metadata"]["name"]: p.get("status", {}).get("phase") for p in pods["items"]}
    return all(phases.get(name) == "Running" for name in PODS)


def _print_pods(cluster: RealCluster) -> bool:
    pods = {p["metadata"]["name"]: p for p in json.loads(cluster.kubectl(
        "get", "pods", "-n", "default", "-o", "json").stdout)["items"]}
    ok = True
    for name in PODS:
        pod = pods.get(name, {})
        phase = pod.get("status", {}).get("phase", "absent")
        node = pod.get("spec", {}).get("nodeName") or "-"
        print(f"\n{name}  ({phase} on {node})")
        ok = ok and phase == "Running"
        for container in pod.get("spec", {}).get("containers", []):
            annotation = f"devices.resource.kdra.dev/{container['name']}"
            devices = pod["metadata"].get("annotations", {}).get(annotation, "-")
            print(f"  {container['name']}: devices {devices}; it sees:")
            out = cluster.kubectl("logs", "-n", "default", name, "-c", container["name"],
                                  check=False)
            for line in (out.stdout or out.stderr).splitlines():
                print(f"    {line}")
    return ok
