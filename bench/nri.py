"""How long kdra's NRI plugin takes to answer CreateContainer, and what it adds to a
container's creation, on a real containerd 2.2.

    .venv/bin/python bench/nri.py                 # ~1 min; root, runc, busybox-static, gcc
    .venv/bin/python bench/nri.py --containers 100 --claims 200

Starts an isolated containerd (kdra_devenv.containerd) with NRI on a socket of its own, the
agent's prepare code for ``--claims`` claims in its cache (two of them reserved for the
measured pod: a GPU and a cat), its NRI plugin on an event loop of this process, and creates
``--containers`` containers in one pod with ``crictl create``, twice: with kdra's plugin
registered, and with it stopped (containerd then skips NRI for them). Prints:

- the plugin's answer time per CreateContainer (decode, decide, encode: measured around the
  plugin's handler, p50/p99/max), which is what ``kdra_agent_nri_adjustment_seconds``
  records on a node;
- ``crictl create`` wall time with and without the plugin (p50/p99): what the adjustment
  costs a container's creation end to end (NRI round trip + CDI injection).

Asserts nothing (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from kdra.agent.backends.registry import make_backends
from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.core.nodeprep import our_results
from kdra.agent.exposure import ExposurePolicy
from kdra.agent.nri.plugin import NriPlugin
from kdra.agent.prepare import Preparer
from kdra.agent.settings import AgentSettings
from kdra_devenv.containerd import SANDBOX_IMAGE, Containerd, missing_prerequisites
from kdra_devenv.images import busybox_files, oci_archive, static_pause

NODE = "bench-node"
GPU = "gpu.kdra.dev"
CATS = "resource-driver.example.com"
IMAGE = "kdra.dev/nri-bench:1"
T = TypeVar("T")


class NoApi:
    async def replace_status(self, resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        return body


def claim(name: str, pod_uid: str, driver: str, device: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}",
                         "generation": 1},
            "status": {"allocation": {"devices": {"results": [
                {"request": "req", "driver": driver, "pool": NODE, "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": pod_uid}]}}


def quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (f"p50 {statistics.median(ordered) * 1000:7.3f} ms   p99 {p99 * 1000:7.3f} ms   "
            f"max {ordered[-1] * 1000:7.3f} ms   (n={len(ordered)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--containers", type=int, default=40)
    parser.add_argument("--claims", type=int, default=100,
                        help="claims in the agent's cache (two belong to the pod)")
    args = parser.parse_args()
    problems = missing_prerequisites()
    if problems:
        print("cannot run containers here: " + "; ".join(problems), file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="kdra-bench-nri-"))
    oci_archive(home / "pause.tar", SANDBOX_IMAGE, {"pause": static_pause()},
                entrypoint=["/pause"])
    oci_archive(home / "image.tar", IMAGE, busybox_files(), entrypoint=["/bin/sh"])
    (home / "inventory.yaml").write_text(
        "gpus: ['8 x H100-80GB']\ndevices:\n- name: kitten\n  count: 200\n"
        f"  driver: {CATS}\n  attributes: {{color: white}}\n")
    backends = make_backends(AgentSettings(inventory=str(home / "inventory.yaml")), [NODE])
    inventory = backends.discover(NODE)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def call(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    preparer = Preparer(NoApi(), NODE, cdi=CdiDir(home / "cdi"),  # type: ignore[arg-type]
                        checkpoint_file=CheckpointFile(home / "state", NODE),
                        inventory=lambda: inventory, drivers=lambda: (GPU, CATS),
                        backends=backends)
    claims = [claim("gpu", "pod-uid", GPU, "gpu-0"), claim("cat", "pod-uid", CATS, "kitten-0")]
    claims += [claim(f"other-{i}", f"other-pod-{i}", CATS, f"kitten-{i + 1}")
               for i in range(max(0, args.claims - 2))]
    for obj in claims:
        call(preparer.prepare(obj, our_results(obj, NODE, (GPU, CATS))))
    policy = ExposurePolicy(NODE, claims=lambda: claims,
                            checkpoint=lambda: preparer.checkpoint,
                            drivers=lambda: (GPU, CATS), backends=backends)
    plugin = NriPlugin(str(home / "nri.sock"), policy, first_delay=0.05, max_delay=0.5)
    answers: list[float] = []
    handler = plugin._create_container  # timed around the plugin's own handler

    def timed(payload: bytes) -> bytes:
        started = time.perf_counter()
        try:
            return handler(payload)
        finally:
            answers.append(time.perf_counter() - started)

    plugin._create_container = timed  # type: ignore[method-assign]
    containerd = Containerd(home / "containerd", nri_socket=home / "nri.sock",
                            cdi_spec_dirs=[home / "cdi"], log_level="warn")
    try:
        containerd.start()
        containerd.import_image(home / "pause.tar")
        containerd.import_image(home / "image.tar")
        task = asyncio.run_coroutine_threadsafe(plugin.run(), loop)
        call(asyncio.wait_for(plugin.synchronized.wait(), 30))
        pod_config = home / "pod.json"
        pod_config.write_text(json.dumps({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid", "attempt": 0},
            "annotations": {"resource.kdra.dev/claims": json.dumps([
                {"name": "gpu", "resourceClaimName": "gpu"},
                {"name": "cat", "resourceClaimName": "cat"}])},
            "log_directory": str(home / "logs"),
            "linux": {"cgroup_parent": f"/{containerd.cgroup_parent}",
                      "security_context": {"namespace_options": {"network": 2}}}}))
        pod = containerd.crictl("runp", str(pod_config)).stdout.strip()

        def create_all(tag: str) -> list[float]:
            times = []
            for i in range(args.containers):
                config = home / f"{tag}-{i}.json"
                config.write_text(json.dumps({
                    "metadata": {"name": f"{tag}-{i}"}, "image": {"image": IMAGE},
                    "command": ["/bin/sh", "-c", "sleep 3600"], "log_path": f"{tag}-{i}.log"}))
                started = time.perf_counter()
                containerd.crictl("create", pod, str(config), str(pod_config))
                times.append(time.perf_counter() - started)
            return times

        with_plugin = create_all("with")
        task.cancel()
        deadline = time.monotonic() + 10
        while plugin.registered.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        without = create_all("without")
        print(f"kdra NRI plugin, containerd 2.2, {args.claims} claims cached, pod with a GPU "
              f"and a cat; {args.containers} containers each way")
        print(f"  plugin's CreateContainer answer : {quantiles(answers)}")
        print(f"  crictl create, plugin on        : {quantiles(with_plugin)}")
        print(f"  crictl create, plugin off       : {quantiles(without)}")
        print(f"  difference of the medians       : "
              f"{(statistics.median(with_plugin) - statistics.median(without)) * 1000:.2f} ms")
    finally:
        containerd.stop()
        loop.call_soon_threadsafe(loop.stop)
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
