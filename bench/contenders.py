"""The contenders of bench/scale.py and the processes they run: ``kdra`` (the operator and
one agent simulating every node), ``kdra-kopf`` (the same, its operator started with
KDRA_WATCH=kopf), ``kdra-native`` (the operator alone in the native flavour, on upstream's
objects and slices) and ``upstream`` (kube-scheduler and kube-controller-manager's
resourceclaim-controller).

Invariant: a contender's ``measured`` processes are exactly those whose CPU and RSS count as
its own; each contender runs on a fresh control plane of the same binaries, and ``stop()``
stops only what the contender started (the control plane's processes are its caller's).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kapi import JSON, Api, group_pids
from kdra_devenv.controlplane import ControlPlane, free_port
from kdra_devenv.process import spawn
from objects import (
    CLASS,
    DEVICES_PER_NODE,
    DRIVER,
    KDRA_GROUP,
    KDRA_VERSION,
    ROOT,
    TEMPLATE,
    create_native_nodes,
    install_crds,
    kdra_claim,
    kdra_pod,
    native_allocation,
    native_claim,
    native_pod,
)

MANIFESTS = ROOT / "manifests" / "base"
QPS = "5000"


@dataclass
class Proc:
    """A process started in its own session (so its process group is its pid)."""

    name: str
    args: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        with self.log.open("ab") as out:
            self.popen = spawn(self.args, run_dir=self.log.parent, stdout=out,
                               stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def pids(self) -> list[int]:
        return group_pids(self.pid) if self.alive() else []

    def stop(self, grace: float = 15.0) -> None:
        if not self.alive():
            return
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "<no log>"

    def log_contains(self, text: str) -> bool:
        try:
            return text.encode() in self.log.read_bytes()
        except FileNotFoundError:
            return False


async def wait_until(what: str, check: Callable[[], Any], limit: float,
                     procs: tuple[Proc, ...] | list[Proc] = ()) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited:\n{proc.tail()}")
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.5)
    raise RuntimeError(f"timed out after {limit:.0f}s waiting for {what}")


class Contender:
    name = ""

    def __init__(self, plane: ControlPlane, work: Path, nodes: int) -> None:
        self.plane = plane
        self.work = work
        self.nodes = nodes
        self.measured: list[Proc] = []  # processes whose CPU/RSS are the contender's
        self.metrics_port = 0

    # objects
    def claims_path(self, ns: str) -> str:
        raise NotImplementedError

    def template(self, ns: str) -> JSON:
        raise NotImplementedError

    def pod(self, ns: str, name: str) -> JSON:
        raise NotImplementedError

    def claim(self, ns: str, name: str) -> JSON:
        raise NotImplementedError

    def allocation(self, node: str, device: str) -> JSON:
        raise NotImplementedError

    # lifecycle
    async def setup(self, api: Api) -> None:
        """Nodes, devices, DeviceClass: everything before claims exist."""

    async def start_scheduler(self, api: Api) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        for proc in reversed(self.measured):
            proc.stop()

    def logs(self) -> str:
        return "\n".join(f"===== {p.name} =====\n{p.tail(60)}" for p in self.measured)


class Kdra(Contender):
    name = "kdra"
    flavour = "kdra"  # KDRA_FLAVOUR of the operator and the agent
    trace_memory: Path | None = None  # run the operator under bench/memtrace.py, dumps here
    operator_env: dict[str, str] = {}  # added to the operator's environment (not the agent's)

    def __init__(self, plane: ControlPlane, work: Path, nodes: int) -> None:
        super().__init__(plane, work, nodes)
        # Where the agent writes CDI specs: on a tmpfs, as deployed (the DaemonSet's
        # /var/run/cdi; container runtimes read specs there, and they need not outlive a
        # reboot: the agent rebuilds a prepared claim's missing spec from its checkpoint, which
        # stays on disk, as /var/lib/kdra). The run's directory without /dev/shm.
        shm = Path("/dev/shm")
        self.cdi = (Path(tempfile.mkdtemp(prefix="kdra-bench-cdi-", dir=shm)) if shm.is_dir()
                    else self.work / "cdi")

    def claims_path(self, ns: str) -> str:
        return f"/apis/{KDRA_GROUP}/{KDRA_VERSION}/namespaces/{ns}/resourceclaims"

    def template(self, ns: str) -> JSON:
        return {"apiVersion": f"{KDRA_GROUP}/{KDRA_VERSION}", "kind": "ResourceClaimTemplate",
                "metadata": {"name": TEMPLATE, "namespace": ns},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "req-0", "exactly": {"deviceClassName": CLASS}}]}}}}

    def pod(self, ns: str, name: str) -> JSON:
        return kdra_pod(ns, name)

    def claim(self, ns: str, name: str) -> JSON:
        return kdra_claim(ns, name)

    def allocation(self, node: str, device: str) -> JSON:
        return native_allocation(node, device)  # kdra's binder writes the same fields

    def _python(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "kdra", *args]

    async def _credentials(self, api: Api, account: str) -> dict[str, str]:
        """The environment of one kdra process, authenticated as it is when deployed: its
        ServiceAccount's token (manifests/base), authorized by the manifests' RBAC."""
        token = await api.create(
            f"/api/v1/namespaces/kdra-system/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 86400}})
        config = json.loads(self.plane.kubeconfig.read_text())
        config["users"] = [{"name": account, "user": {"token": token["status"]["token"]}}]
        config["contexts"][0]["context"]["user"] = account
        path = self.work / f"{account}.kubeconfig"
        path.write_text(json.dumps(config, indent=2))
        path.chmod(0o600)
        # The flavour named, not auto: the cluster serves resource.k8s.io/v1 too, where auto
        # would be native (``kdra`` runs on kdra's CRDs, ``kdra-native`` on the built-in kinds).
        return {"KUBECONFIG": str(path), "KDRA_WEBHOOK_PORT": "0",
                "KDRA_FLAVOUR": self.flavour}

    async def _install(self, api: Api, components: tuple[str, ...]) -> None:
        """kdra's CRDs, namespace, and each component's service account, RBAC and admission
        policies as manifests/base deploys them."""
        install_crds(self.plane)
        await api.create("/api/v1/namespaces", {"metadata": {"name": "kdra-system"}},
                         ok_conflict=True)
        # KDRA_BENCH_NO_POLICIES=1: diagnosis only (bench/RESULTS.md, issue 42) — leave out
        # the components' admission policies, to measure what they cost the API server per
        # pod; never for figures that stand for kdra as deployed.
        policies = os.environ.get("KDRA_BENCH_NO_POLICIES") != "1"
        for component in components:
            for part in ("serviceaccount.yaml", "rbac.yaml", "admission-policy.yaml"):
                if part == "admission-policy.yaml" and not policies:
                    continue
                self.plane.kubectl("apply", "-f", str(MANIFESTS / component / part))

    async def setup(self, api: Api) -> None:
        await self._install(api, ("operator", "agent"))
        # One agent process simulates every node: its own service account and role
        # (manifests/simulation), not the DaemonSet's (confined to one node).
        self.plane.kubectl("apply", "-k", str(MANIFESTS.parent / "simulation"))
        await api.create(f"/apis/{KDRA_GROUP}/{KDRA_VERSION}/deviceclasses", {
            "apiVersion": f"{KDRA_GROUP}/{KDRA_VERSION}", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
        inventory = self.work / "inventory.yaml"
        inventory.write_text(yaml.safe_dump({"driver": DRIVER, "devices": [
            {"name": f"basic-device-{i}", "attributes": {
                "model": "A100", "family": "GPU", "driverVersion": {"version": "1.2.3"},
                "pciRoot": str(i)}, "capacity": {"memory": "1Gi"}}
            for i in range(DEVICES_PER_NODE)]}))
        env = await self._credentials(api, "kdra-agent-simulation")
        agent = Proc("kdra-agent", self._python(
            "agent", "--simulate-nodes", f"scheduler-perf-dra-{{0..{self.nodes - 1}}}",
            "--inventory", str(inventory), "--create-nodes",
            "--cdi-dir", str(self.cdi), "--state-dir", str(self.work / "state"),
            "--metrics-port", "0"), self.work / "kdra-agent.log", env).start()
        self.measured.append(agent)
        slices = f"/apis/{KDRA_GROUP}/{KDRA_VERSION}/resourceslices"
        await wait_until("kdra agent started", lambda: agent.log_contains("kdra agent started"),
                         300, [agent])
        await wait_until(f"{self.nodes} kdra ResourceSlices",
                         lambda: self._at_least(api, slices, self.nodes), 300, [agent])
        await wait_until(f"{self.nodes} Nodes",
                         lambda: self._at_least(api, "/api/v1/nodes", self.nodes), 300, [agent])

    def stop(self) -> None:
        super().stop()
        if self.cdi.is_relative_to("/dev/shm"):
            shutil.rmtree(self.cdi, ignore_errors=True)

    @staticmethod
    async def _at_least(api: Api, path: str, n: int) -> bool:
        return await api.count(path) >= n

    async def start_scheduler(self, api: Api) -> None:
        self.metrics_port = free_port()
        env = {**await self._credentials(api, "kdra-operator"), **self.operator_env}
        command = self._python(
            "operator", "--webhook-port", "0", "--metrics-port", str(self.metrics_port),
            "--health-port", "0")
        if self.trace_memory is not None:  # bench/memtrace.py: tracemalloc, SIGUSR2 dumps
            command = [sys.executable, str(ROOT / "bench" / "memtrace.py"),
                       str(self.trace_memory), *command[3:]]
        operator = Proc("kdra-operator", command, self.work / "kdra-operator.log", env).start()
        self.measured.append(operator)
        await wait_until("kdra operator started",
                         lambda: operator.log_contains("kdra operator started"), 120, [operator])

    def allocator_seconds(self) -> tuple[float, int]:
        """(sum, count) of kdra_allocator_duration_seconds, all series."""
        if not self.metrics_port:
            return 0.0, 0
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                        timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            return 0.0, 0
        total, count = 0.0, 0
        for line in text.splitlines():
            if line.startswith("kdra_allocator_duration_seconds_sum"):
                total += float(line.split()[-1])
            elif line.startswith("kdra_allocator_duration_seconds_count"):
                count += int(float(line.split()[-1]))
        return total, count


class KdraKopf(Kdra):
    """kdra with the operator's hot watches routed through kopf handlers (``KDRA_WATCH=kopf``);
    everything else, the agent included, as :class:`Kdra`."""

    name = "kdra-kopf"
    operator_env = {"KDRA_WATCH": "kopf"}


class NativeObjects(Contender):
    """The workloads' objects in resource.k8s.io/v1, pods naming ``scheduler`` (None: the
    default scheduler), for ``upstream`` and ``kdra-native`` alike."""

    scheduler: str | None = None

    def claims_path(self, ns: str) -> str:
        return f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"

    def template(self, ns: str) -> JSON:
        return native_template(ns)

    def pod(self, ns: str, name: str) -> JSON:
        return native_pod(ns, name, scheduler=self.scheduler)

    def claim(self, ns: str, name: str) -> JSON:
        return native_claim(ns, name)

    def allocation(self, node: str, device: str) -> JSON:
        return native_allocation(node, device)


class KdraNative(NativeObjects, Kdra):
    """kdra in the native flavour on the objects and workloads of ``upstream``: native
    templates, claims and pods (``schedulerName: kdra-scheduler``), the Nodes and
    ResourceSlices created by the harness as for ``upstream`` and scheduler_perf (no agent: no
    kubelet runs, so nothing is prepared; kdra's binder does not wait for preparation in this
    flavour, the kubelet's DRA plugin call is what prepares). kdra's operator generates the
    claims from templates (kube-controller-manager runs without its resourceclaim-controller,
    as runner.control_plane starts it for every contender but ``upstream``), allocates and
    binds. Measured: the operator alone, against kube-scheduler + kube-controller-manager."""

    name = "kdra-native"
    flavour = "native"
    scheduler = "kdra-scheduler"

    async def setup(self, api: Api) -> None:
        # kdra's CRDs too: the native flavour keeps DeviceQuota and DeviceTaintRule there.
        await self._install(api, ("operator",))
        self.plane.kubectl("apply", "-f", str(MANIFESTS.parent / "components" / "native" /
                                              "rbac.yaml"))
        await create_native_nodes(api, self.nodes, slices=True)
        await api.create("/apis/resource.k8s.io/v1/deviceclasses", native_class())


class Upstream(NativeObjects):
    name = "upstream"

    async def setup(self, api: Api) -> None:
        await create_native_nodes(api, self.nodes, slices=True)
        await api.create("/apis/resource.k8s.io/v1/deviceclasses", native_class())
        # kube-controller-manager (resourceclaim-controller) runs with the control plane.
        self.measured.append(_kcm_proc(self.plane))

    async def start_scheduler(self, api: Api) -> None:
        port = free_port()
        config = self.work / "scheduler.yaml"
        kubeconfig = str(self.plane.kubeconfig)
        config.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig, "qps": float(QPS),
                                 "burst": int(QPS)},
            "leaderElection": {"leaderElect": False}}))
        sched = Proc("kube-scheduler", [
            str(self.plane.bin_dir / "kube-scheduler"), "--config", str(config),
            "--authentication-kubeconfig", kubeconfig, "--authorization-kubeconfig", kubeconfig,
            "--bind-address", "127.0.0.1", "--secure-port", str(port), "--v=1",
        ], self.work / "kube-scheduler.log").start()
        self.measured.insert(0, sched)
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2,
                                            context=ctx) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        await wait_until("kube-scheduler healthy", healthy, 120, [sched])

    def stop(self) -> None:
        for proc in self.measured:
            if proc.name == "kube-scheduler":
                proc.stop()  # the controller-manager belongs to the control plane


def native_template(ns: str) -> JSON:
    """The workloads' ResourceClaimTemplate in resource.k8s.io/v1: one device of CLASS."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "req-0", "exactly": {"deviceClassName": CLASS}}]}}}}


def native_class() -> JSON:
    """The workloads' DeviceClass in resource.k8s.io/v1: every device of DRIVER."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def _kcm_proc(plane: ControlPlane) -> Proc:
    """A view of the control plane's kube-controller-manager as a measured process."""
    (kcm,) = [p for p in plane.processes if p.name == "kube-controller-manager"]
    proc = Proc("kube-controller-manager", [], kcm.log)
    proc.popen = kcm.popen
    return proc
