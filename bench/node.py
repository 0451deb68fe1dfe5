"""kdra as deployed on the real node of this machine: how long the set-up takes, how fast pods
with devices start, and how long the agent's NRI plugin takes per container.

    .venv/bin/python bench/node.py                    # root; ~3 min once the image is cached
    .venv/bin/python bench/node.py --pods 50 --rebuild-images

Starts kdra_devenv.realcluster.RealCluster (control plane, kubelet node, kdra's image from the
Dockerfile, manifests/overlays/node applied, operator and agent as pods) and prints:

- the set-up time by step (``--rebuild-images``: kdra's image and its Python base image are
  built again, as on a machine without the cache; the Kubernetes and containerd binaries are
  not rebuilt - hack/build-*.sh say how long that takes);
- create → Running for ``--pods`` pods created at once, each with its own claim (from a
  template) for one device: p50, p99, max, the time until all run, and the split at the
  binding (create → bound is kdra: webhook, claim controller, binder, the agent's prepare;
  bound → Running is the node: kubelet, containerd, CNI, NRI). The devices are 64
  fake ``slot`` devices of driver ``bench.kdra.dev`` that the bench adds to the node's
  inventory (ConfigMap kdra-inventory, then the agent's pod is restarted to read it);
- the agent's NRI adjustment time per container (``kdra_agent_nri_adjustment_seconds``,
  scraped from the agent pod's /metrics): count, mean and the bucket of p50/p99.

Asserts nothing (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes

from kdra_devenv.imagebuild import _cache as image_cache
from kdra_devenv.node import NODE_NAME
from kdra_devenv.realcluster import NAMESPACE, RealCluster

DRIVER = "bench.kdra.dev"
SLOTS = 64
OBJECTS = f"""
apiVersion: resource.kdra.dev/v1
kind: DeviceClass
metadata: {{name: {DRIVER}}}
spec:
  selectors:
  - cel: {{expression: 'device.driver == "{DRIVER}"'}}
---
apiVersion: resource.kdra.dev/v1
kind: ResourceClaimTemplate
metadata: {{name: one-slot, namespace: default}}
spec:
  spec:
    devices:
      requests:
      - name: slot
        exactly:
          deviceClassName: {DRIVER}
"""


def _say(line: str) -> None:
    print(line, flush=True)


def add_slots(cluster: RealCluster) -> None:
    """64 bench devices in the node's inventory; the agent's pod restarted to publish them."""
    configmap = cluster.get_json("configmap", "-n", NAMESPACE, "kdra-inventory")
    inventory = configmap["data"][f"{NODE_NAME}.yaml"]
    inventory += f"- name: slot\n  count: {SLOTS}\n  driver: {DRIVER}\n"
    cluster.kubectl("patch", "configmap", "-n", NAMESPACE, "kdra-inventory", "--type",
                    "merge", "-p", json.dumps({"data": {f"{NODE_NAME}.yaml": inventory}}))
    cluster.kubectl("-n", NAMESPACE, "rollout", "restart", "daemonset/kdra-agent")
    cluster.kubectl("-n", NAMESPACE, "rollout", "status", "daemonset/kdra-agent",
                    "--timeout=180s")

    def published() -> bool:
        slices = cluster.get_json("resourceslices.resource.kdra.dev")["items"]
        return sum(len(s["spec"].get("devices", [])) for s in slices
                   if s["spec"]["driver"] == DRIVER) == SLOTS

    cluster.wait_for(published, "the bench devices' slices", 180)
    cluster.kubectl("apply", "-f", "-", input=OBJECTS)


def _pod(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"bench-{index:03d}", "namespace": "default",
                     "labels": {"kdra-bench": "node"},
                     "annotations": {"resource.kdra.dev/claims":
                                     "- name: slot\n  resourceClaimTemplateName: one-slot\n"}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "localhost/busybox:static",
                                 "command": ["sh", "-c", "env | grep ^KDRA_; sleep 3600"]}]},
    }


def start_latency(cluster: RealCluster, pods: int) -> dict[str, float]:
    """Create ``pods`` pods one after another as fast as the API takes them; the time from
    each create call's return to the watch event showing it Running."""
    assert cluster.plane is not None
    api = kubernetes.config.new_client_from_config(config_file=str(cluster.plane.kubeconfig))
    core = kubernetes.client.CoreV1Api(api)
    running: dict[str, float] = {}
    bound: dict[str, float] = {}
    done = threading.Event()
    watching = threading.Event()

    def watch() -> None:
        watcher = kubernetes.watch.Watch()
        watching.set()
        for event in watcher.stream(core.list_namespaced_pod, "default",
                                    label_selector="kdra-bench=node", timeout_seconds=600):
            pod = event["object"]
            if pod.spec and pod.spec.node_name:
                bound.setdefault(pod.metadata.name, time.monotonic())
            if pod.status and pod.status.phase == "Running":
                running.setdefault(pod.metadata.name, time.monotonic())
            if len(running) >= pods or done.is_set():
                watcher.stop()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    watching.wait()
    time.sleep(1)  # the watch is established
    created: dict[str, float] = {}
    first = time.monotonic()
    for index in range(pods):
        body = _pod(index)
        core.create_namespaced_pod("default", body)
        created[body["metadata"]["name"]] = time.monotonic()
    thread.join(timeout=600)
    done.set()
    latencies = sorted(running[name] - created[name] for name in created if name in running)
    if not latencies:
        return {"running": 0.0}
    to_bind = sorted(bound[name] - created[name] for name in created if name in bound)
    to_run = sorted(running[name] - bound[name] for name in running if name in bound)
    return {
        "running": float(len(latencies)),
        "p50": statistics.median(latencies),
        "p99": _p99(latencies),
        "max": latencies[-1],
        "all created after": max(created.values()) - first,
        "all running after": max(running.values()) - first,
        "create -> bound p50": statistics.median(to_bind),
        "create -> bound p99": _p99(to_bind),
        "bound -> Running p50": statistics.median(to_run),
        "bound -> Running p99": _p99(to_run),
    }


def _p99(values: list[float]) -> float:
    return values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]


def nri_adjustments(cluster: RealCluster) -> dict[str, Any]:
    pods = cluster.get_json("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=agent")
    ip = pods["items"][0]["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:8082/metrics", timeout=10) as response:
        text = response.read().decode()
    buckets = [(float(m.group(1)), float(m.group(2))) for m in re.finditer(
        r'^kdra_agent_nri_adjustment_seconds_bucket\{le="([0-9.e+-]+)"\} ([0-9.e+]+)$',
        text, re.M)]
    count = float(re.search(r"^kdra_agent_nri_adjustment_seconds_count ([0-9.e+]+)$", text,
                            re.M).group(1))  # type: ignore[union-attr]
    total = float(re.search(r"^kdra_agent_nri_adjustment_seconds_sum ([0-9.e+-]+)$", text,
                            re.M).group(1))  # type: ignore[union-attr]

    def quantile(q: float) -> float:
        return next((le for le, n in buckets if n >= q * count), float("inf"))

    return {"count": count, "mean": total / count if count else 0.0,
            "p50 <=": quantile(0.5), "p99 <=": quantile(0.99)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--rebuild-images", action="store_true",
                        help="build kdra's image and the Python base image again")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    if args.rebuild_images:
        for archive in image_cache().glob("kdra-*.oci.tar"):
            archive.unlink()
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="kdra-bench-node-"))
    with RealCluster(workdir, progress=lambda line: _say(f"  {line}")) as cluster:
        started = time.monotonic()
        cluster.start(deploy=True)
        _say(f"set-up ({'image cached' if cluster.image_cached else 'image built'}): "
             f"{time.monotonic() - started:.1f} s")
        for step, seconds in cluster.timings.items():
            _say(f"  {step:45s} {seconds:7.1f} s")
        add_slots(cluster)
        figures = start_latency(cluster, args.pods)
        _say(f"create -> Running, {args.pods} pods with a claim each (created at once):")
        for key, value in figures.items():
            _say(f"  {key:20s} {value:7.2f}" + ("" if key == "running" else " s"))
        nri = nri_adjustments(cluster)
        _say("agent NRI adjustment per container (kdra_agent_nri_adjustment_seconds): "
             f"{nri['count']:.0f} containers, mean {nri['mean'] * 1000:.2f} ms, "
             f"p50 <= {nri['p50 <='] * 1000:g} ms, p99 <= {nri['p99 <='] * 1000:g} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
