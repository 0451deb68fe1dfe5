"""kdra's NRI plugin against a real containerd 2.2 (with runc): containers get exactly the
CDI devices of their pod's prepared claims, user-set device env is overridden, and a
container whose claim is not prepared fails to create with the claim named.

containerd runs isolated under a temporary directory (kdra_devenv.containerd), with NRI on a
socket of its own and CDI specs read from a temporary directory; pods use host networking
(no CNI). The agent's state is made by its own prepare code (``Preparer``, a claim object,
a fake inventory), and its NRI plugin runs in this process on that state: no API server.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kdra.agent.backends.registry import make_backends
from kdra.agent.cdi import CdiDir
from kdra.agent.checkpoint import CheckpointFile
from kdra.agent.core.nodeprep import our_results
from kdra.agent.exposure import ExposurePolicy
from kdra.agent.nri.plugin import NriPlugin
from kdra.agent.prepare import Preparer
from kdra.agent.settings import AgentSettings
from kdra_devenv.containerd import SANDBOX_IMAGE, Containerd, missing_prerequisites
from kdra_devenv.images import BUSYBOX, busybox_files, oci_archive, static_pause

pytestmark = pytest.mark.node

NODE = "nri-node"
GPU = "gpu.kdra.dev"
CATS = "resource-driver.example.com"
IMAGE = "kdra.dev/nri-test:1"
TOLERATE = "tolerate-missing-plugins.kdra.dev"
INVENTORY = f"""
gpus: ['2 x H100-80GB']
devices:
- name: kitten-0
  driver: {CATS}
  attributes: {{color: white, size: small}}
"""
T = TypeVar("T")


def _why_not() -> str:
    problems = missing_prerequisites()
    if not BUSYBOX.exists():
        problems.append(f"no static busybox at {BUSYBOX} (apt-get install -y busybox-static)")
    if shutil.which("gcc") is None:
        problems.append("no gcc for the static pause binary (apt-get install -y gcc "
                        "libc6-dev)")
    return "; ".join(problems)


class NoApi:
    """The Preparer reports status.devices through the API; here the claim is not stored
    anywhere: the write's answer is the claim as written."""

    async def replace_status(self, resource: Any, body: dict[str, Any]) -> dict[str, Any]:
        return body


class Agent:
    """The agent's node state and its NRI plugin, on an event loop in a thread."""

    def __init__(self, home: Path, socket: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        (home / "inventory.yaml").write_text(INVENTORY)
        backends = make_backends(AgentSettings(inventory=str(home / "inventory.yaml")), [NODE])
        self.inventory = backends.discover(NODE)
        self.claims: list[dict[str, Any]] = []
        self.preparer = Preparer(NoApi(), NODE, cdi=CdiDir(home / "cdi"),  # type: ignore[arg-type]
                                 checkpoint_file=CheckpointFile(home / "state", NODE),
                                 inventory=lambda: self.inventory,
                                 drivers=lambda: (GPU, CATS), backends=backends)
        self.plugin = NriPlugin(str(socket), ExposurePolicy(
            NODE, claims=lambda: self.claims, checkpoint=lambda: self.preparer.checkpoint,
            drivers=lambda: (GPU, CATS), backends=backends), first_delay=0.1, max_delay=1.0)
        self.task: Future[None] = asyncio.run_coroutine_threadsafe(self.plugin.run(), self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def add_claim(self, name: str, uid: str, pod_uid: str, devices: list[tuple[str, str]],
                  *, prepare: bool = True, pod_claim_name: str = "") -> None:
        claim: dict[str, Any] = {
            "metadata": {"namespace": "ns", "name": name, "uid": uid, "generation": 1,
                         "annotations": ({"resource.kdra.dev/pod-claim-name": pod_claim_name}
                                         if pod_claim_name else {})},
            "status": {"allocation": {"devices": {"results": [
                {"request": "req", "driver": driver, "pool": NODE, "device": device}
                for driver, device in devices]}},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": pod_uid}]}}
        if prepare:
            self.call(self.preparer.prepare(claim, our_results(claim, NODE, (GPU, CATS))))
        self.claims.append(claim)

    def stop(self) -> None:
        if self.loop.is_closed():
            return

        async def cancel() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.call(cancel())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Containerd, Agent, Path]]:
    reason = _why_not()
    if reason:
        pytest.skip(f"cannot run containers on this machine: {reason}")
    home = Path(str(tmp_path_factory.mktemp("nri")))
    images = home / "images"
    oci_archive(images / "pause.tar", SANDBOX_IMAGE, {"pause": static_pause()},
                entrypoint=["/pause"])
    oci_archive(images / "test.tar", IMAGE, busybox_files(), entrypoint=["/bin/sh"])
    containerd = Containerd(home / "containerd", nri_socket=home / "nri" / "nri.sock",
                            cdi_spec_dirs=[home / "cdi"], nri_required_plugins=["kdra"],
                            nri_tolerate_missing_annotation=TOLERATE)
    agent: Agent | None = None
    try:
        containerd.start()
        containerd.import_image(images / "pause.tar")
        containerd.import_image(images / "test.tar")
        agent = Agent(home, home / "nri" / "nri.sock")
        agent.call(asyncio.wait_for(agent.plugin.synchronized.wait(), 30))
        yield containerd, agent, home
    except BaseException:
        print(containerd.logs()[-5000:])
        raise
    finally:
        if agent is not None:
            agent.stop()
        containerd.stop()
    leftovers = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
                 if str(home) in line]
    assert leftovers == [], "mounts left behind"
    assert not any(Path("/sys/fs/cgroup").glob(f"*/{containerd.cgroup_parent}"))
    address = str(containerd.address).encode()
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline")
                if address in _read(p)], "processes of this containerd left behind"


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def run_pod(containerd: Containerd, home: Path, name: str, uid: str,
            annotations: dict[str, str]) -> str:
    config = {"metadata": {"name": name, "namespace": "ns", "uid": uid, "attempt": 0},
              "annotations": annotations,
              "log_directory": str(home / "logs" / name),
              "linux": {"cgroup_parent": f"/{containerd.cgroup_parent}",
                        "security_context": {"namespace_options": {"network": 2}}}}
    path = home / f"{name}-pod.json"
    path.write_text(json.dumps(config))
    return containerd.crictl("runp", str(path)).stdout.strip()


SCRIPT = "env | sort; ls -ln /dev/kdra 2>&1 | sed 1d; echo END; sleep 3600"


def create(containerd: Containerd, home: Path, pod: str, pod_name: str, container: str,
           env: dict[str, str]) -> tuple[int, str]:
    config = {"metadata": {"name": container}, "image": {"image": IMAGE},
              "command": ["/bin/sh", "-c", SCRIPT], "log_path": f"{container}.log",
              "envs": [{"key": k, "value": v} for k, v in env.items()]}
    path = home / f"{pod_name}-{container}.json"
    path.write_text(json.dumps(config))
    result = containerd.crictl("create", pod, str(path), str(home / f"{pod_name}-pod.json"),
                               check=False)
    return result.returncode, (result.stdout if result.returncode == 0
                               else result.stdout + result.stderr).strip()


def started(containerd: Containerd, home: Path, pod: str, pod_name: str, container: str,
            env: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """Create and start ``container``; its env and ``/dev/kdra`` listing as it prints them."""
    code, out = create(containerd, home, pod, pod_name, container, env)
    assert code == 0, out
    containerd.crictl("start", out)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        logs = containerd.crictl("logs", out, check=False).stdout
        if "END" in logs:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"container {container} printed no END: {logs!r}")
    lines = logs.split("END")[0].splitlines()
    env_out = dict(line.split("=", 1) for line in lines if "=" in line and " " not in
                   line.split("=", 1)[0])
    devices = [line for line in lines if line.startswith("c")]
    return env_out, devices


def device_names(listing: list[str]) -> list[str]:
    """``/dev/kdra`` entries that are character devices 1:3, by name."""
    return sorted(line.split()[-1] for line in listing
                  if re.match(r"^c\S+\s+\d+\s+\d+\s+\d+\s+1,\s+3\s", line))


def test_containers_get_exactly_their_devices(node: tuple[Containerd, Agent, Path]) -> None:
    containerd, agent, home = node
    gpus = {d.name: d.attribute("uuid") for d in agent.inventory.for_driver(GPU)}
    agent.add_claim("shared-gpu", "uid-gpu", "pod-uid-1", [(GPU, "gpu-1")])
    agent.add_claim("pod1-cat-x1y2z", "uid-cat", "pod-uid-1", [(CATS, "kitten-0")],
                    pod_claim_name="cat")
    claims = [{"name": "gpu", "resourceClaimName": "shared-gpu"},
              {"name": "cat", "resourceClaimTemplateName": "cats", "containers": ["main"]}]
    pod = run_pod(containerd, home, "pod1", "pod-uid-1", {
        "resource.kdra.dev/claims": json.dumps(claims),
        "resource.kdra.dev/claim-statuses": json.dumps({"cat": "pod1-cat-x1y2z"})})

    env, listing = started(containerd, home, pod, "pod1", "main",
                           {"NVIDIA_VISIBLE_DEVICES": "all", "KDRA_DEVICES": "forged"})
    assert env["NVIDIA_VISIBLE_DEVICES"] == gpus["gpu-1"]  # not "all"
    assert env["KDRA_DEVICES"] == f"{GPU}/{NODE}/gpu-1,{CATS}/{NODE}/kitten-0"
    assert env["KDRA_DEVICE_GPU_1_UUID"] == gpus["gpu-1"]
    assert env["KDRA_DEVICE_GPU_1_CLAIM"] == "ns/shared-gpu"
    assert env["KDRA_DEVICE_KITTEN_0_COLOR"] == "white"
    assert env["KDRA_NODE_NAME"] == NODE
    assert sorted(k for k in env if k.startswith("KDRA_DEVICE_") and k.count("_") == 3) == \
        ["KDRA_DEVICE_GPU_1", "KDRA_DEVICE_KITTEN_0"]  # exactly its two devices
    assert device_names(listing) == ["gpu-1"]

    # a container the cat entry does not list: the GPU only, no cat
    env, listing = started(containerd, home, pod, "pod1", "sidecar", {})
    assert env["KDRA_DEVICES"] == f"{GPU}/{NODE}/gpu-1"
    assert "KDRA_DEVICE_KITTEN_0" not in env
    assert device_names(listing) == ["gpu-1"]


def test_pod_without_claims_sees_no_device_even_if_it_asks(
        node: tuple[Containerd, Agent, Path]) -> None:
    containerd, _, home = node
    pod = run_pod(containerd, home, "plain", "pod-uid-2", {})
    env, listing = started(containerd, home, pod, "plain", "main",
                           {"NVIDIA_VISIBLE_DEVICES": "all"})
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "KDRA_DEVICES" not in env and not any(k.startswith("KDRA_DEVICE_") for k in env)
    assert device_names(listing) == []


def test_unprepared_claim_fails_container_creation_naming_it(
        node: tuple[Containerd, Agent, Path]) -> None:
    containerd, agent, home = node
    agent.add_claim("late-claim", "uid-late", "pod-uid-3", [(GPU, "gpu-0")], prepare=False)
    pod = run_pod(containerd, home, "late", "pod-uid-3", {
        "resource.kdra.dev/claims": json.dumps([{"name": "g",
                                                  "resourceClaimName": "late-claim"}])})
    code, out = create(containerd, home, pod, "late", "main", {})
    assert code != 0
    assert "ResourceClaim ns/late-claim (pod claim 'g') is not prepared on node nri-node" \
        in out, out
    # once prepared, the same container is created (what kubelet's retry does)
    agent.call(agent.preparer.prepare(agent.claims[-1],
                                      our_results(agent.claims[-1], NODE, (GPU, CATS))))
    env, listing = started(containerd, home, pod, "late", "main", {})
    assert env["KDRA_DEVICES"] == f"{GPU}/{NODE}/gpu-0"
    assert device_names(listing) == ["gpu-0"]


def wait_until(condition: Any, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_plugin_reconnects_when_the_runtime_restarts(
        node: tuple[Containerd, Agent, Path]) -> None:
    containerd, agent, home = node
    before = agent.plugin.registrations
    containerd.restart()
    wait_until(lambda: agent.plugin.registrations > before and agent.plugin.registered.is_set(),
               "the plugin to register again")
    pod = run_pod(containerd, home, "after", "pod-uid-1b", {
        "resource.kdra.dev/claims": json.dumps([{"name": "gpu",
                                                  "resourceClaimName": "shared-gpu"}])})
    agent.claims[0]["status"]["reservedFor"].append(
        {"resource": "pods", "name": "after", "uid": "pod-uid-1b"})  # a shared claim
    env, listing = started(containerd, home, pod, "after", "main", {})
    assert env["KDRA_DEVICES"] == f"{GPU}/{NODE}/gpu-1"
    assert device_names(listing) == ["gpu-1"]


def test_without_the_plugin_creation_fails_closed_where_required(
        node: tuple[Containerd, Agent, Path]) -> None:
    """containerd's NRI default validator, required_plugins = ["kdra"]: while kdra's plugin
    is not registered, containers fail to create, except in pods that tolerate it."""
    containerd, agent, home = node
    agent.stop()  # the agent is gone: its plugin's connection closes
    claims = {"resource.kdra.dev/claims": json.dumps([{"name": "gpu",
                                                        "resourceClaimName": "shared-gpu"}])}
    pod = run_pod(containerd, home, "orphan", "pod-uid-4", claims)
    code, out = create(containerd, home, pod, "orphan", "main", {})
    assert code != 0 and re.search(r'required plugin \\?"kdra\\?" not present', out), out
    pod = run_pod(containerd, home, "tolerant", "pod-uid-5", {**claims, TOLERATE: "true"})
    env, listing = started(containerd, home, pod, "tolerant", "main",
                           {"NVIDIA_VISIBLE_DEVICES": "all"})
    # fail open for this pod: created without kdra's adjustment (no devices, env unchanged)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and device_names(listing) == []
