r"""Scale benchmark: kdra vs the real kube-scheduler on scheduler_perf's DRA workloads.

    .venv/bin/python bench/scale.py --workloads all --rounds 2 --sweep 100,2000  # ~50 min
    .venv/bin/python bench/scale.py --quick                     # smoke run, ~8 min
    .venv/bin/python bench/scale.py --quick --workloads template --profile
    .venv/bin/python bench/scale.py --workloads steady-empty --duration 30 --audit --pprof 25
    .venv/bin/python bench/scale.py --contenders kdra,kdra-kopf --compare kdra-kopf/kdra \
        --workloads template,steady-empty --rounds 2

Diagnosis (not for the report's figures: both cost the server CPU): ``--audit`` turns on
kube-apiserver's audit log and prints the requests per bound pod by client (User-Agent, or
the controller's service account), verb, resource and answer code; ``--pprof N`` saves the
server's CPU profile of the workload's first N seconds (``go tool pprof -top``).

Workloads (test/integration/scheduler_perf/dra/performance-config.yaml, re-created here):
- ``template``: SchedulingWithResourceClaimTemplate — N nodes x 10 devices (one driver, one
  DeviceClass ``device.driver == ...``, a template asking for 1 device); init pods are created
  and scheduled first, then the measured pods (2,500 + 2,500 on 500 nodes).
- ``steady-empty`` / ``steady-half`` / ``steady-full``: SteadyStateClusterResourceClaimTemplate —
  0 / N*5 / N*10-10 claims pre-allocated, then 10 pods kept in flight for a fixed duration: each
  bound pod is force-deleted and replaced.
- ``ceiling``: no scheduler at all; a minimal async client issues per pod the writes a DRA
  scheduler needs (pod create, claim create, claim status, pod status, binding) with 16
  workers: what this API server allows. Run twice, on fresh control planes: with native
  ``resource.k8s.io`` claims (the ceiling the targets use) and with kdra's objects (its
  custom-resource claims; the claim names in a pod annotation, as kdra records them), which
  separates the cost of kdra's storage format from the cost of its decisions.

Contenders, each on a fresh control plane (same binaries) per workload:
- ``kdra``: ``python -m kdra operator`` + one ``python -m kdra agent --simulate-nodes``
  serving every node (publishes the ResourceSlices, creates the Nodes; writes CDI specs to a
  tmpfs, as the DaemonSet's /var/run/cdi, and its checkpoints to disk). Each authenticates as
  deployed: its ServiceAccount's token, authorized by manifests/base's RBAC and admission
  policies (the simulating agent: manifests/simulation's own account and role, which also
  creates the Nodes); upstream's controller-manager also uses ServiceAccount
  tokens (``--use-service-account-credentials``), kube-scheduler a client certificate (as
  kubeadm sets it up);
- ``kdra-kopf``: ``kdra``, its operator started with ``KDRA_WATCH=kopf`` (the operator routes
  its hot watches through kopf handlers; one without that mode ignores the variable);
- ``upstream``: kube-scheduler + kube-controller-manager's resourceclaim-controller with native
  resource.k8s.io/v1 objects; the harness creates Nodes and ResourceSlices, as scheduler_perf.
Both the scheduler and the controller-manager get client QPS/burst 5000 (scheduler_perf runs
them unthrottled too; the defaults, 50 and 20 QPS, would cap upstream far below the API server).

Rounds (``--rounds N``): each 500-node workload runs N times per contender, the order
alternating (kdra, upstream, then upstream, kdra, ...), so a slow spell of this shared machine
that lasts minutes hits both alike. Every run is a row of the first table; the ratios and
targets use each contender's runs pooled (pods summed over seconds summed; p50/p99 and peak
RSS: the mean and the maximum over the rounds), and list the ratio of each round.
``--compare A/B`` picks the two contenders the ratio table compares (default
``kdra/upstream``; e.g. ``kdra-kopf/kdra``); the targets are printed for kdra/upstream only.

Measured: pods/s over the measured phase (pods bound / (last binding - first create)),
create->bound latency from client-side timestamps (create call returned; first watch event
with spec.nodeName), CPU seconds of the contender's processes during the measured phase
(/proc utime+stime) and their peak RSS (VmHWM). Prints tables; asserts nothing.
"""

from __future__ import annotations

import argparse
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
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kapi import (
    JSON,
    Api,
    PodTracker,
    bounded,
    cpu_seconds,
    group_pids,
    percentile,
    rss_mib,
)
from kdra.devenv.controlplane import CONTROLLERS, ControlPlane, binaries, free_port
from kdra.devenv.process import spawn
from kdra.domain.podclaims import CLAIM_STATUSES_ANNOTATION

ROOT = Path(__file__).resolve().parents[1]
DRIVER = "test-driver.cdi.k8s.io"
CLASS = "test-class"
TEMPLATE = "test-claim-template"
DEVICES_PER_NODE = 10
KDRA_GROUP = "resource.kdra.dev"
KDRA_VERSION = "v1"
CLAIMS_ANNOTATION = f"{KDRA_GROUP}/claims"
MANIFESTS = ROOT / "manifests" / "base"
PAUSE = "registry.k8s.io/pause:3.10.1"
QPS = "5000"
CREATE_CONCURRENCY = 20
STEADY_IN_FLIGHT = 10
CEILING_WORKERS = 16
SWEEP_MAX_PODS = 2500  # per phase: the 500-node size of scheduler_perf's template workload


def node_name(i: int) -> str:
    return f"scheduler-perf-dra-{i}"


def device_attrs(index: int) -> JSON:
    return {"model": {"string": "A100"}, "family": {"string": "GPU"},
            "driverVersion": {"version": "1.2.3"}, "pciRoot": {"string": str(index)}}


# ------------------------------------------------------------------ processes


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


class Usage:
    """CPU seconds over a phase and peak RSS of a set of process groups."""

    def __init__(self, procs: list[Proc]) -> None:
        self.procs = procs
        self.start = self._cpu()
        self.by_proc: dict[str, float] = {}  # CPU seconds per process (after finish())

    def _cpu(self) -> dict[int, float]:
        return {pid: cpu_seconds(pid) for p in self.procs for pid in p.pids()}

    def finish(self) -> tuple[float, float]:
        end = self._cpu()
        cpu = sum(end[pid] - self.start.get(pid, 0.0) for pid in end)
        peak = sum(rss_mib(pid)[1] for p in self.procs for pid in p.pids())
        self.by_proc = {p.name: round(sum(end.get(pid, 0.0) - self.start.get(pid, 0.0)
                                          for pid in p.pids()), 2) for p in self.procs}
        return cpu, peak


class ServerUsage:
    """CPU seconds of the control plane's processes over a phase that the contender does not
    count as its own: kube-apiserver and etcd (what its API traffic costs the server; same
    binaries for both contenders, so per pod they compare) and, for kdra, the
    kube-controller-manager, whose garbage collector deletes kdra's generated claims too
    (upstream counts it: its resourceclaim controller runs there). With them a run's notes
    account for the whole machine."""

    NAMES = ("kube-apiserver", "etcd", "kube-controller-manager")

    def __init__(self, plane: ControlPlane, counted: Iterable[Proc] = ()) -> None:
        own = {p.name for p in counted}
        self.pids = {p.name: p.popen.pid for p in plane.processes
                     if p.name in self.NAMES and p.name not in own}
        self.start = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def finish(self) -> dict[str, float]:
        return {f"cpu_{name}": round(cpu_seconds(pid) - self.start[name], 2)
                for name, pid in self.pids.items()}


# ------------------------------------------------------------------ contenders


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
        return {"KUBECONFIG": str(path), "KDRA_WEBHOOK_PORT": "0"}

    async def setup(self, api: Api) -> None:
        install_crds(self.plane)
        await api.create("/api/v1/namespaces", {"metadata": {"name": "kdra-system"}},
                         ok_conflict=True)
        for component in ("operator", "agent"):
            for part in ("serviceaccount.yaml", "rbac.yaml", "admission-policy.yaml"):
                self.plane.kubectl("apply", "-f", str(MANIFESTS / component / part))
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


class Upstream(Contender):
    name = "upstream"

    def claims_path(self, ns: str) -> str:
        return f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"

    def template(self, ns: str) -> JSON:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": TEMPLATE, "namespace": ns},
                "spec": {"spec": {"devices": {"requests": [
                    {"name": "req-0", "exactly": {"deviceClassName": CLASS}}]}}}}

    def pod(self, ns: str, name: str) -> JSON:
        return native_pod(ns, name)

    def claim(self, ns: str, name: str) -> JSON:
        return native_claim(ns, name)

    def allocation(self, node: str, device: str) -> JSON:
        return native_allocation(node, device)

    async def setup(self, api: Api) -> None:
        await create_native_nodes(api, self.nodes, slices=True)
        await api.create("/apis/resource.k8s.io/v1/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})
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


def _kcm_proc(plane: ControlPlane) -> Proc:
    """A view of the control plane's kube-controller-manager as a measured process."""
    (kcm,) = [p for p in plane.processes if p.name == "kube-controller-manager"]
    proc = Proc("kube-controller-manager", [], kcm.log)
    proc.popen = kcm.popen
    return proc


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


# ------------------------------------------------------------------ profiling


class Profiler:
    """py-spy attached to the kdra processes during a measured phase (``--profile``)."""

    def __init__(self, enabled: bool, out: Path) -> None:
        self.enabled = enabled and shutil.which("py-spy", path=str(Path(sys.executable)
                                                                   .parent)) is not None
        self.out = out
        self.running: list[tuple[str, subprocess.Popen[bytes], Path]] = []

    def start(self, tag: str, procs: list[Proc]) -> None:
        if not self.enabled:
            return
        spy = str(Path(sys.executable).parent / "py-spy")
        for proc in procs:
            if not proc.name.startswith("kdra") or not proc.alive():
                continue
            path = self.out / f"{tag}-{proc.name}.txt"
            popen = spawn(
                [spy, "record", "--pid", str(proc.pid), "--format", "raw", "--rate", "50",
                 "--nonblocking", "--gil", "-o", str(path)],  # GIL holders: ~CPU, not I/O waits
                run_dir=self.out, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.running.append((proc.name, popen, path))

    def stop(self) -> list[tuple[str, Path]]:
        done = []
        for name, popen, path in self.running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGINT)
            try:
                popen.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                popen.wait()
            done.append((name, path))
        self.running.clear()
        return done


def summarize_profile(path: Path, top: int = 15) -> str:
    """Top functions of a py-spy raw (collapsed) profile: self and inclusive share."""
    if not path.exists():
        return f"(no profile at {path})"
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f for f in stack.split(";") if f]
        # py-spy raw frames: "function (file:line)"; drop line numbers to aggregate
        names = [f.rsplit(":", 1)[0] + ")" if ":" in f else f for f in frames]
        names = [n_.replace("/work/main/operator/", "").replace(str(Path(sys.prefix)), "venv")
                 for n_ in names]
        if names:
            own[names[-1]] += n
        for name in set(names):
            incl[name] += n
    if not total:
        return f"(empty profile {path})"
    lines = [f"{path.name}: {total} samples"]
    lines.append("  self%   function")
    lines += [f"  {100 * c / total:5.1f}  {name}" for name, c in own.most_common(top)]
    lines.append("  incl%   function")
    lines += [f"  {100 * c / total:5.1f}  {name}" for name, c in incl.most_common(top + 10)]
    return "\n".join(lines)


# ------------------------------------------------------------------ workloads


@dataclass
class Result:
    workload: str
    contender: str
    pods: int = 0
    seconds: float = 0.0
    p50: float = float("nan")
    p99: float = float("nan")
    cpu: float = 0.0
    rss: float = 0.0
    complete: bool = True
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)
    writes: dict[str, int] = field(default_factory=dict)  # API writes in the measured phase
    window: tuple[float, float] = (0.0, 0.0)  # the measured phase, wall clock (time.time())
    round: int = 1

    @property
    def rate(self) -> float:
        return self.pods / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Params:
    nodes: int
    init_pods: int
    measure_pods: int
    duration: float
    stall: float
    audit: bool = False  # kube-apiserver audit log; a per-client summary per run
    pprof: int = 0  # seconds of kube-apiserver CPU profile taken as the workload starts


SUMMED_EXTRAS = ("cpu_", "create_s", "alloc_calls")  # totals; the other extras are averages


def pooled(runs: list[Result]) -> Result:
    """One contender's rounds of one workload as one result: pods, seconds, CPU, writes and
    the totals among the extras summed (so every per-pod figure is pooled); p50/p99 the mean
    of the rounds, peak RSS the maximum. One run is returned as it is."""
    if len(runs) == 1:
        return runs[0]
    done = [r for r in runs if r.pods]
    extra: dict[str, float] = {}
    for key in {k for r in done for k in r.extra}:
        values = [r.extra[key] for r in done if key in r.extra]
        extra[key] = (sum(values) if key.startswith(SUMMED_EXTRAS)
                      else sum(values) / len(values))
    writes: Counter[str] = Counter()
    for r in done:
        writes.update(r.writes)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    return Result(
        runs[0].workload, runs[0].contender, pods=sum(r.pods for r in runs),
        seconds=sum(r.seconds for r in runs), p50=mean([r.p50 for r in done]),
        p99=mean([r.p99 for r in done]), cpu=sum(r.cpu for r in runs),
        rss=max((r.rss for r in runs), default=0.0),
        complete=all(r.complete for r in runs), note="; ".join(r.note for r in runs if r.note),
        extra=extra, writes=dict(writes), round=0)


def by_workload(results: list[Result]) -> dict[str, dict[str, list[Result]]]:
    """workload -> contender -> its runs, in the order they ran."""
    by: dict[str, dict[str, list[Result]]] = {}
    for r in results:
        by.setdefault(r.workload, {}).setdefault(r.contender, []).append(r)
    return by


COMPARE = ("kdra", "upstream")  # the default pair of --compare: the targets are for it


def head_to_head(results: list[Result], compare: tuple[str, str] = COMPARE,
                 ) -> Iterator[tuple[str, Result, Result, str]]:
    """(workload, A pooled, B pooled, ratio of each round) for every workload both contenders
    of ``compare`` (A, B) ran."""
    a, b = compare
    for workload, pair in by_workload(results).items():
        if a in pair and b in pair:
            yield (workload, pooled(pair[a]), pooled(pair[b]), round_ratios(pair[a], pair[b]))


def round_ratios(ours: list[Result], others: list[Result]) -> str:
    """pods/s ratio of each round (runs paired by round), e.g. "0.93, 1.08"."""
    theirs = {r.round: r for r in others}
    return ", ".join(f"{k.rate / theirs[k.round].rate:.2f}" for k in ours
                     if k.round in theirs and theirs[k.round].rate)


async def create_pods(api: Api, contender: Contender, tracker: PodTracker, ns: str,
                      names: list[str]) -> None:
    async def one(name: str) -> None:
        await api.create(f"/api/v1/namespaces/{ns}/pods", contender.pod(ns, name))
        tracker.created[f"{ns}/{name}"] = time.monotonic()

    await bounded(CREATE_CONCURRENCY, [lambda n=n: one(n) for n in names])


async def preallocate(api: Api, contender: Contender, count: int) -> None:
    """scheduler_perf's createAny resourceclaim + allocResourceClaims: claims in ``init``
    allocated node by node, device by device (not reserved)."""

    async def one(i: int) -> None:
        name = f"claim-{i}"
        path = contender.claims_path("init")
        await api.create(path, contender.claim("init", name))
        node, device = node_name(i // DEVICES_PER_NODE), f"basic-device-{i % DEVICES_PER_NODE}"
        await api.patch_status(f"{path}/{name}",
                               {"status": {"allocation": contender.allocation(node, device)}})

    await bounded(CREATE_CONCURRENCY, [lambda i=i: one(i) for i in range(count)])


async def template_workload(api: Api, contender: Contender, params: Params,
                            profiler: Profiler, tag: str) -> Result:
    tracker = PodTracker()
    rv = await api.resource_version("/api/v1/pods")
    watcher = asyncio.create_task(api.watch("/api/v1/pods", rv, tracker.handle))
    result = Result(tag, contender.name)
    try:
        init = [f"init-{i}" for i in range(params.init_pods)]
        await create_pods(api, contender, tracker, "init", init)
        if not await tracker.wait_bound("init", len(init), params.stall):
            result.note = f"init stalled at {tracker.bound_in('init')}/{len(init)}"
        alloc0 = contender.allocator_seconds() if isinstance(contender, Kdra) else (0.0, 0)
        writes0 = await api.write_requests()
        usage = Usage(contender.measured)
        server = ServerUsage(contender.plane, contender.measured)
        profiler.start(tag, contender.measured)
        start = time.monotonic()
        wall = time.time()
        names = [f"test-{i}" for i in range(params.measure_pods)]
        creator = asyncio.create_task(create_pods(api, contender, tracker, "test", names))
        done = await tracker.wait_bound("test", len(names), params.stall)
        await creator
        result.extra["create_s"] = max(
            (tracker.created[f"test/{n}"] for n in names if f"test/{n}" in tracker.created),
            default=start) - start
        keys = [f"test/{n}" for n in names]
        last = max((tracker.bound[k] for k in keys if k in tracker.bound), default=start)
        result.cpu, result.rss = usage.finish()
        result.extra.update({f"cpu_{name}": cpu for name, cpu in usage.by_proc.items()})
        result.extra.update(server.finish())
        result.writes = dict(await api.write_requests() - writes0)
        result.window = (wall, time.time())
        profiler.stop()
        result.pods = sum(1 for k in keys if k in tracker.bound)
        result.seconds = last - start
        lat = tracker.latencies(keys)
        result.p50, result.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
        result.complete = done
        if not done:
            result.note = (result.note + f" measured stalled at {result.pods}/{len(names)}"
                           ).strip()
        if isinstance(contender, Kdra):
            alloc1 = contender.allocator_seconds()
            if alloc1[1] > alloc0[1]:
                result.extra["alloc_ms_per_call"] = (
                    1000 * (alloc1[0] - alloc0[0]) / (alloc1[1] - alloc0[1]))
                result.extra["alloc_calls"] = alloc1[1] - alloc0[1]
        per_node = Counter(tracker.nodes.values())
        result.extra["max_pods_per_node"] = max(per_node.values(), default=0)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        dump_timeline(tracker, contender.work / "pods-timeline.json")
    return result


def dump_timeline(tracker: PodTracker, path: Path) -> None:
    """Per pod: wall-clock time the create returned and the binding was seen (to line up
    with the contenders' logs)."""
    offset = time.time() - time.monotonic()
    path.write_text(json.dumps({
        key: {"created": created + offset, "bound": tracker.bound.get(key, 0.0) + offset,
              "node": tracker.nodes.get(key, "")}
        for key, created in tracker.created.items()}, indent=0))


async def steady_workload(api: Api, contender: Contender, params: Params,
                          profiler: Profiler, tag: str) -> Result:
    tracker = PodTracker()
    rv = await api.resource_version("/api/v1/pods")
    result = Result(tag, contender.name)
    counter = iter(range(10**9))
    deadline = 0.0
    tasks: set[asyncio.Task[None]] = set()

    async def replace(key: str) -> None:
        ns, name = key.split("/")
        await api.force_delete(f"/api/v1/namespaces/{ns}/pods/{name}")
        if time.monotonic() < deadline:
            await create_pods(api, contender, tracker, "test", [f"test-{next(counter)}"])

    def on_bound(key: str) -> None:
        if key.startswith("test/"):
            task = asyncio.create_task(replace(key))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    tracker.on_bound = on_bound
    watcher = asyncio.create_task(api.watch("/api/v1/pods", rv, tracker.handle))
    try:
        writes0 = await api.write_requests()
        usage = Usage(contender.measured)
        server = ServerUsage(contender.plane, contender.measured)
        profiler.start(tag, contender.measured)
        start = time.monotonic()
        wall = time.time()
        deadline = start + params.duration
        await create_pods(api, contender, tracker, "test",
                          [f"test-{next(counter)}" for _ in range(STEADY_IN_FLIGHT)])
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
        result.cpu, result.rss = usage.finish()
        result.extra.update({f"cpu_{name}": cpu for name, cpu in usage.by_proc.items()})
        result.extra.update(server.finish())
        result.writes = dict(await api.write_requests() - writes0)
        result.window = (wall, time.time())
        profiler.stop()
        keys = [k for k, t in tracker.bound.items() if k.startswith("test/") and t <= deadline]
        result.pods = len(keys)
        result.seconds = params.duration
        lat = tracker.latencies(keys)
        result.p50, result.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
        if result.pods == 0:
            result.complete = False
            result.note = "nothing bound"
    finally:
        watcher.cancel()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(watcher, *tasks, return_exceptions=True)
        dump_timeline(tracker, contender.work / "pods-timeline.json")
    return result


async def ceiling_workload(api: Api, params: Params, workers: int,
                           kdra_objects: bool = False) -> Result:
    """The API writes a DRA scheduler + claim controller issue per pod, no decisions.

    With ``kdra_objects`` the same writes on kdra's objects: the claim is kdra's custom
    resource and the claim names go into the pod's annotation (kdra's pod patch) instead of
    ``status.resourceClaimStatuses``: what the API server allows kdra's storage format."""
    await create_native_nodes(api, params.nodes, slices=False)
    tracker = PodTracker()
    rv = await api.resource_version("/api/v1/pods")
    watcher = asyncio.create_task(api.watch("/api/v1/pods", rv, tracker.handle))
    ns = "test"
    group = f"{KDRA_GROUP}/{KDRA_VERSION}" if kdra_objects else "resource.k8s.io/v1"
    claims = f"/apis/{group}/namespaces/{ns}/resourceclaims"
    pods = f"/api/v1/namespaces/{ns}/pods"
    result = Result(f"ceiling ({workers} workers)",
                    "api-writes, kdra objects" if kdra_objects else "api-writes")
    await api.call("GET", claims, params={"limit": "1"})  # storage ready (a new CRD's is not)

    async def one(i: int) -> None:
        name = f"test-{i}"
        pod = await api.create(pods, kdra_pod(ns, name) if kdra_objects
                               else native_pod(ns, name, "none"))
        tracker.created[f"{ns}/{name}"] = time.monotonic()
        uid = pod["metadata"]["uid"]
        claim_name = f"{name}-resource"
        node = node_name(i % params.nodes)
        device = f"basic-device-{(i // params.nodes) % DEVICES_PER_NODE}"
        claim = kdra_claim(ns, claim_name) if kdra_objects else native_claim(ns, claim_name)
        claim["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}]
        await api.create(claims, claim)
        await api.patch_status(f"{claims}/{claim_name}", {"status": {
            "allocation": native_allocation(node, device),
            "reservedFor": [{"resource": "pods", "name": name, "uid": uid}]}})
        if kdra_objects:
            await api.call("PATCH", f"{pods}/{name}", {"metadata": {"annotations": {
                CLAIM_STATUSES_ANNOTATION: json.dumps({"resource": claim_name})}}},
                ctype="application/merge-patch+json")
        else:
            await api.patch_status(f"{pods}/{name}", {"status": {"resourceClaimStatuses": [
                {"name": "resource", "resourceClaimName": claim_name}]}})
        await api.create(f"/api/v1/namespaces/{ns}/pods/{name}/binding", {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    try:
        start = time.monotonic()
        await bounded(workers, [lambda i=i: one(i) for i in range(params.measure_pods)])
        await tracker.wait_bound(ns, params.measure_pods, 30)
        keys = [f"{ns}/test-{i}" for i in range(params.measure_pods)]
        last = max((tracker.bound[k] for k in keys if k in tracker.bound), default=start)
        result.pods = sum(1 for k in keys if k in tracker.bound)
        result.seconds = last - start
        lat = tracker.latencies(keys)
        result.p50, result.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    return result


# ------------------------------------------------------------------ driver

WORKLOADS = ("template", "steady-empty", "steady-half", "steady-full", "ceiling")


def control_plane(work: Path, native_dra: bool, audit: bool = False,
                  pprof: bool = False) -> ControlPlane:
    controllers = (*CONTROLLERS, "resourceclaim-controller") if native_dra else CONTROLLERS
    server_args = (*(audit_flags(work) if audit else ()), *(("--profiling",) if pprof else ()))
    return ControlPlane(work, binaries(), controllers=controllers,
                        controller_manager_args=("--kube-api-qps", QPS,
                                                 "--kube-api-burst", QPS),
                        apiserver_args=server_args).start()


async def server_profile(api: Api, seconds: int, path: Path) -> None:
    """kube-apiserver's CPU profile over the next ``seconds`` (pprof format) to ``path``;
    read it with ``go tool pprof -top <kube-apiserver binary> <path>``."""
    assert api.session is not None
    async with api.session.get("/debug/pprof/profile", params={"seconds": str(seconds)},
                               timeout=aiohttp.ClientTimeout(total=seconds + 60)) as resp:
        data = await resp.read()
    await asyncio.to_thread(path.write_bytes, data)


AUDIT_LOG = "audit.log"


def audit_flags(work: Path) -> tuple[str, ...]:
    """kube-apiserver flags for a Metadata-level audit log of every request (one line when
    it completes): who asks what, to find the requests a contender could save. The log costs
    the server CPU, so --audit runs are for diagnosis, not for the report's figures."""
    policy = work / "audit-policy.yaml"
    policy.write_text(yaml.safe_dump({
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [{"level": "Metadata"}]}))
    return ("--audit-policy-file", str(policy), "--audit-log-path", str(work / AUDIT_LOG),
            "--audit-log-format", "json", "--audit-log-maxsize", "0")


def client_name(event: JSON) -> str:
    """``kdra-operator``, ``kube-controller-manager:generic-garbage-collector``, ..."""
    agent = str(event.get("userAgent", "")).split("/", 1)[0] or "?"
    user = str(event.get("user", {}).get("username", ""))
    account = "system:serviceaccount:kube-system:"
    return f"{agent}:{user.removeprefix(account)}" if user.startswith(account) else agent


def audit_summary(log: Path, window: tuple[float, float], pods: int, top: int = 40) -> str:
    """Requests per bound pod in the measured phase, by client, verb, resource and code."""
    counts: Counter[tuple[str, str, str, int]] = Counter()
    with log.open() as lines:
        for line in lines:
            event = json.loads(line)
            received = datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
            if not window[0] <= received <= window[1]:
                continue
            ref = event.get("objectRef") or {}
            what = ref.get("resource", event.get("requestURI", "?").split("?")[0])
            if ref.get("subresource"):
                what += "/" + ref["subresource"]
            code = int((event.get("responseStatus") or {}).get("code", 0))
            counts[(client_name(event), event.get("verb", "?"), what, code)] += 1
    per_pod = max(pods, 1)
    by_client: Counter[str] = Counter()
    for (client, *_), n in counts.items():
        by_client[client] += n
    out = [f"requests per bound pod ({pods} pods), by client:"]
    out += [f"  {n / per_pod:7.2f}  {client}" for client, n in by_client.most_common()]
    out.append(f"top {top} (client verb resource code):")
    out += [f"  {n / per_pod:7.2f}  {c} {v} {r} {code}"
            for (c, v, r, code), n in counts.most_common(top)]
    return "\n".join(out)


async def until_idle(contender: Contender, *, below: float = 0.15, window: float = 1.0,
                     limit: float = 120.0) -> float:
    """Wait until the contender's processes together use less than ``below`` of a core over
    ``window`` seconds (at most ``limit``); returns the seconds waited. scheduler_perf starts
    the scheduler before a workload's set-up steps, so it has listed and processed the nodes,
    slices and pre-allocated claims before the measured pods come; a contender started after
    the set-up first catches up on them, and that start-up work is not what a workload
    measures. The same rule for both contenders."""
    started = time.monotonic()
    procs = [p for p in contender.measured if p.alive()]

    def used() -> float:
        return sum(cpu_seconds(pid) for p in procs for pid in p.pids())

    while time.monotonic() - started < limit:
        before = used()
        await asyncio.sleep(window)
        if used() - before < below * window:
            break
    return time.monotonic() - started


async def run_one(kind: type[Contender], workload: str, params: Params, base: Path,
                  profiler: Profiler, tag: str = "", round_: int = 1) -> Result:
    """One contender's run of ``workload`` on a fresh control plane; ``tag`` (default: the
    workload) names its directory and profiles, e.g. ``template-2000`` or ``steady-half-r2``."""
    result = await _run_one(kind, workload, params, base, profiler, tag or workload)
    result.workload, result.round = workload, round_
    return result


async def _run_one(kind: type[Contender], workload: str, params: Params, base: Path,
                   profiler: Profiler, tag: str) -> Result:
    work = base / f"{kind.name}-{tag}"
    work.mkdir(parents=True)
    plane = control_plane(work, native_dra=kind is Upstream, audit=params.audit,
                          pprof=bool(params.pprof))
    contender = kind(plane, work, params.nodes)
    try:
        async with Api(plane.kubeconfig) as api:
            for ns in ("init", "test"):
                await api.create("/api/v1/namespaces", {"metadata": {"name": ns}})
            t = time.monotonic()
            await contender.setup(api)
            for ns in ("init", "test"):
                await api.create(contender.claims_path(ns).replace(
                    "resourceclaims", "resourceclaimtemplates"), contender.template(ns))
            if workload.startswith("steady-"):
                level = workload.removeprefix("steady-")
                count = {"empty": 0, "half": params.nodes * DEVICES_PER_NODE // 2,
                         "full": params.nodes * DEVICES_PER_NODE - STEADY_IN_FLIGHT}[level]
                await preallocate(api, contender, count)
            await contender.start_scheduler(api)
            settled = await until_idle(contender)
            print(f"  [{contender.name} {workload}] ready in {time.monotonic() - t:.0f}s "
                  f"(idle after {settled:.1f}s)", flush=True)
            if params.pprof:
                profile = asyncio.create_task(
                    server_profile(api, params.pprof, work / "kube-apiserver.pprof"))
            if workload == "template":
                result = await template_workload(api, contender, params, profiler, tag)
            else:
                result = await steady_workload(api, contender, params, profiler, tag)
            if params.pprof:
                await profile
            if params.audit and result.window[1]:
                summary = audit_summary(work / AUDIT_LOG, result.window, result.pods)
                (work / "audit-summary.txt").write_text(summary + "\n")
                print(summary, flush=True)
            dead = [p.name for p in contender.measured if not p.alive()]
            if dead:
                result.note = (result.note + f" exited: {', '.join(dead)}").strip()
            if not result.complete or dead:
                tail = contender.logs()
                (base / f"{contender.name}-{workload}-logs.txt").write_text(tail)
                print(f"  [{contender.name} {workload}] INCOMPLETE ({result.note}); "
                      f"log tails:\n{tail[-3000:]}", flush=True)
            return result
    except Exception as exc:  # report and move on: the benchmark asserts nothing
        print(f"  [{contender.name} {workload}] FAILED: {exc!r}\n{contender.logs()[-3000:]}",
              flush=True)
        return Result(workload, contender.name, complete=False, note=f"failed: {exc}"[:200])
    finally:
        profiler.stop()
        contender.stop()
        plane.stop()
        shutil.rmtree(work / "etcd-data", ignore_errors=True)


async def run_ceiling(params: Params, base: Path, kdra_objects: bool) -> Result:
    """The ceiling on a fresh control plane: native objects, or kdra's (CRDs installed)."""
    work = base / ("ceiling-kdra-objects" if kdra_objects else "ceiling")
    work.mkdir(parents=True)
    plane = control_plane(work, native_dra=False)
    try:
        if kdra_objects:
            install_crds(plane)
        async with Api(plane.kubeconfig) as api:
            await api.create("/api/v1/namespaces", {"metadata": {"name": "test"}})
            return await ceiling_workload(api, params, CEILING_WORKERS, kdra_objects)
    finally:
        plane.stop()
        shutil.rmtree(work / "etcd-data", ignore_errors=True)


def fmt(value: float, digits: int = 1) -> str:
    return "-" if value != value else f"{value:.{digits}f}"  # NaN -> "-"


def table(results: list[Result], ceiling: Result | None, own: Result | None = None,
          compare: tuple[str, str] = COMPARE) -> str:
    """The results, the ceilings, and A/B ratios per workload (``compare``: A, B; by default
    kdra/upstream). ``own`` is the ceiling on kdra's objects (custom resources): kdra's share
    of it leaves out the cost of its storage format."""
    left, right = compare
    rows = ["| workload | contender | round | pods bound | s | pods/s | p50 ms | p99 ms | CPU s "
            "| CPU ms/pod | peak RSS MiB | note |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        per_pod = 1000 * r.cpu / r.pods if r.pods else float("nan")
        extra = ", ".join(f"{k}={v:.2f}" for k, v in r.extra.items())
        note = "; ".join(x for x in (r.note, extra) if x)
        rows.append(f"| {r.workload} | {r.contender} | {r.round} | {r.pods} | "
                    f"{fmt(r.seconds)} | {fmt(r.rate)} | {fmt(1000 * r.p50, 0)} | "
                    f"{fmt(1000 * r.p99, 0)} | "
                    f"{fmt(r.cpu)} | {fmt(per_pod)} | {fmt(r.rss, 0)} | {note} |")
    for c, pod_write in ((ceiling, "pod status"), (own, "pod annotation")):
        if c:
            rows.append(f"| {c.workload} | {c.contender} | 1 | {c.pods} | {fmt(c.seconds)} | "
                        f"{fmt(c.rate)} | {fmt(1000 * c.p50, 0)} | {fmt(1000 * c.p99, 0)} | "
                        f"- | - | - | per pod: pod create, claim create, claim status, "
                        f"{pod_write}, binding |")
    rows += ["", f"| workload | {left}/{right} pods/s | by round | {left}/{right} p99 "
             f"| {left}/{right} CPU s | {left}/{right} peak RSS | {left} % of ceiling "
             f"| {right} % of ceiling | {left} % of ceiling on kdra objects "
             f"| API server + etcd CPU ms/pod {left} / {right} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b and a == a and b == b else "-"

    ceil = ceiling.rate if ceiling and ceiling.rate else float("nan")
    own_ceil = own.rate if own and own.rate else float("nan")
    for workload, k, u, rounds in head_to_head(results, compare):
        rows.append(f"| {workload} | {ratio(k.rate, u.rate)} | {rounds} | "
                    f"{ratio(k.p99, u.p99)} | "
                    f"{ratio(k.cpu, u.cpu)} | {ratio(k.rss, u.rss)} | "
                    f"{fmt(100 * k.rate / ceil, 0)}% | {fmt(100 * u.rate / ceil, 0)}% | "
                    f"{fmt(100 * k.rate / own_ceil, 0)}% | "
                    f"{fmt(server_ms(k))} / {fmt(server_ms(u))} |")
    return "\n".join(rows)


def server_ms(r: Result) -> float:
    """kube-apiserver + etcd CPU per bound pod in the measured phase (NaN when unknown)."""
    spent = [r.extra[k] for k in ("cpu_kube-apiserver", "cpu_etcd") if k in r.extra]
    return 1000 * sum(spent) / r.pods if spent and r.pods else float("nan")


def writes_table(results: list[Result]) -> str:
    """API writes per bound pod in the measured phase, by verb and resource (the harness's
    own pod creates and, in steady state, force-deletes included — the same for both); a
    contender's rounds pooled."""
    kinds = sorted({k for r in results for k in r.writes})
    if not kinds:
        return ""
    rows = ["| workload | contender | writes/pod | " + " | ".join(kinds) + " |",
            "|---|---|---:|" + "---:|" * len(kinds)]
    pools = [pooled(runs) for pair in by_workload(results).values() for runs in pair.values()]
    for r in pools:
        if not r.pods:
            continue
        cells = " | ".join(fmt(r.writes.get(k, 0) / r.pods, 2) for k in kinds)
        rows.append(f"| {r.workload} | {r.contender} | "
                    f"{fmt(sum(r.writes.values()) / r.pods, 2)} | {cells} |")
    return "\n".join(rows)


def sweep_table(swept: list[tuple[int, Result]]) -> str:
    """The template workload at several cluster sizes: does the cost per pod grow?"""
    rows = ["| nodes | contender | pods bound | pods/s | p50 ms | p99 ms | CPU ms/pod "
            "| allocator ms/pod |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for nodes, r in swept:
        per_pod = 1000 * r.cpu / r.pods if r.pods else float("nan")
        alloc = r.extra.get("alloc_ms_per_call", float("nan"))
        rows.append(f"| {nodes} | {r.contender} | {r.pods} | {fmt(r.rate)} | "
                    f"{fmt(1000 * r.p50, 0)} | {fmt(1000 * r.p99, 0)} | {fmt(per_pod)} | "
                    f"{fmt(alloc, 2)} |")
    return "\n".join(rows)


BEGIN = "<!-- bench/scale.py report: begin (generated; edits inside are overwritten) -->"
END = "<!-- bench/scale.py report: end -->"


def write_block(path: Path, text: str) -> None:
    """Write the report into ``path`` between the BEGIN/END markers when it has them (the
    rest of the file — prose, history — is kept), else as the whole file."""
    current = path.read_text() if path.exists() else ""
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        path.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    else:
        path.write_text(f"{BEGIN}\n{text}\n{END}\n")


def machine() -> str:
    """Cores, CPU model and memory of this machine, for the report."""
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().splitlines()[0].split()[1])
        memory = f", {kib / 2**20:.0f} GiB memory"
    return f"{os.cpu_count()} cores ({model}){memory}"


def targets(results: list[Result], ceiling: Result | None,
            own: Result | None = None) -> list[str]:
    lines = []
    for workload, k, u, _ in head_to_head(results):
        if not u.rate:
            continue
        lines.append(f"{workload}: pods/s {k.rate / u.rate:.2f}x (target >= 1.0) "
                     f"{'MET' if k.rate >= u.rate else 'MISSED'}; p99 "
                     f"{k.p99 / u.p99 if u.p99 else float('nan'):.2f}x (target <= 2.0) "
                     f"{'MET' if k.p99 <= 2 * u.p99 else 'MISSED'}")
        if ceiling and ceiling.rate and workload == "template":
            share = k.rate / ceiling.rate
            lines.append(f"{workload}: kdra at {100 * share:.0f}% of the ceiling (target >= 60%) "
                         f"{'MET' if share >= 0.6 else 'MISSED'}")
            if own and own.rate:
                lines.append(f"{workload}: kdra at {100 * k.rate / own.rate:.0f}% of the same "
                             f"writes on its own objects ({own.rate:.1f} pods/s; for "
                             f"information, the target is the one above)")
    return lines


def schedule(contenders: list[type[Contender]],
             rounds: int) -> list[tuple[int, type[Contender]]]:
    """(round, contender) in running order: the order reverses every round (A B, B A, A B
    ...), so a drift of the machine's speed hits every contender alike."""
    order: list[tuple[int, type[Contender]]] = []
    for round_ in range(1, rounds + 1):
        kinds = contenders if round_ % 2 else contenders[::-1]
        order += [(round_, kind) for kind in kinds]
    return order


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", default="all",
                        help=f"comma-separated from {', '.join(WORKLOADS)}, or all")
    parser.add_argument("--contenders", default="kdra,upstream",
                        help="comma-separated from kdra, kdra-kopf, upstream")
    parser.add_argument("--compare", default="/".join(COMPARE), metavar="A/B",
                        help="the two contenders the ratio table compares, A/B (default "
                             "%(default)s; the targets are printed for kdra/upstream only)")
    parser.add_argument("--quick", action="store_true",
                        help="100 nodes, 500+500 pods, 20 s steady state")
    parser.add_argument("--nodes", type=int, default=0, help="override the node count")
    parser.add_argument("--duration", type=float, default=0, help="steady-state seconds")
    parser.add_argument("--profile", action="store_true",
                        help="attach py-spy (from the venv) to kdra's processes during "
                             "measured phases; summaries printed and kept in --out")
    parser.add_argument("--pods", type=int, default=0,
                        help="override the init and measured pod counts (default nodes x 5)")
    parser.add_argument("--sweep", default="",
                        help="also run the template workload at these node counts, e.g. "
                             "100,2000 (pods: nodes x 5, at most 2,500 + 2,500)")
    parser.add_argument("--audit", action="store_true",
                        help="kube-apiserver audit log; prints requests per pod by client "
                             "(diagnosis: the log costs the server CPU)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run each 500-node workload this many times per contender, "
                             "alternating the order (kdra first, then upstream first ...); "
                             "ratios pool the rounds")
    parser.add_argument("--pprof", type=int, default=0, metavar="SECONDS",
                        help="kube-apiserver CPU profile of the workload's first SECONDS, "
                             "saved as kube-apiserver.pprof in the run's directory")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for logs, profiles and results.json")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="also write the report (machine, command, tables) to this file")
    args = parser.parse_args(argv)

    nodes = args.nodes or (100 if args.quick else 500)
    pods = args.pods or nodes * DEVICES_PER_NODE // 2
    params = Params(nodes=nodes, init_pods=pods, measure_pods=pods,
                    duration=args.duration or (20.0 if args.quick else 60.0),
                    stall=45.0 if args.quick else 90.0, audit=args.audit,
                    pprof=args.pprof)
    workloads = list(WORKLOADS) if args.workloads == "all" else args.workloads.split(",")
    kinds: dict[str, type[Contender]] = {k.name: k for k in (Kdra, KdraKopf, Upstream)}
    contenders = [kinds[c] for c in args.contenders.split(",")]
    pair = args.compare.split("/")
    if len(pair) != 2 or pair[0] == pair[1] or not set(pair) <= set(kinds):
        parser.error(f"--compare: two different contenders A/B from {', '.join(kinds)}")
    compare = (pair[0], pair[1])
    if compare != COMPARE and not set(compare) <= {k.name for k in contenders}:
        parser.error(f"--compare {args.compare}: both must be among --contenders")
    base = args.out or Path(tempfile.mkdtemp(prefix="kdra-scale-"))
    base.mkdir(parents=True, exist_ok=True)
    profiler = Profiler(args.profile, base)
    if args.profile and not profiler.enabled:
        print("py-spy not found in the venv: pip install py-spy; profiling off")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    print(f"kdra scale benchmark: {nodes} nodes x {DEVICES_PER_NODE} devices, "
          f"{params.init_pods}+{params.measure_pods} pods, steady {params.duration:.0f}s, "
          f"commit {commit}, {os.cpu_count()} cores; work dir {base}", flush=True)

    results: list[Result] = []
    ceiling: Result | None = None
    own_ceiling: Result | None = None  # the same writes on kdra's objects
    started = time.monotonic()
    swept: list[tuple[int, Result]] = []

    def report(final: bool) -> list[str]:
        """The tables so far; written to --markdown after every run (a crash keeps them)."""
        lines = [table(results, ceiling, own_ceiling, compare), ""]
        writes = writes_table(results)
        if writes:
            lines += ["API writes per bound pod (kube-apiserver's apiserver_request_total; the "
                      "harness's pod creates and deletes included):", "", writes, ""]
        if swept:
            lines += ["Template workload by cluster size:", "", sweep_table(swept), ""]
        if compare == COMPARE:
            lines += [line + "  " for line in targets(results, ceiling, own_ceiling)]
        if args.markdown:
            command = "bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
            elapsed = time.monotonic() - started
            write_block(args.markdown, "\n".join([
                f"Run: `.venv/bin/python {command}` — {time.strftime('%Y-%m-%d %H:%M %Z')}, "
                f"commit `{commit}`, {elapsed / 60:.0f} min"
                f"{'' if final else ' so far (still running)'}.  ",
                f"Machine: {machine()}.  ",
                f"Size: {nodes} nodes x {DEVICES_PER_NODE} devices, {params.init_pods} + "
                f"{params.measure_pods} pods (template), steady state {params.duration:.0f} s "
                f"with {STEADY_IN_FLIGHT} pods in flight"
                f"{'' if args.rounds == 1 else f'; {args.rounds} rounds per contender'}.",
                "", *lines, ""]))
        return lines

    for workload in workloads:
        if workload == "ceiling":
            print("ceiling ...", flush=True)
            ceiling = asyncio.run(run_ceiling(params, base, kdra_objects=False))
            print(f"  ceiling: {ceiling.rate:.1f} pods/s", flush=True)
            own_ceiling = asyncio.run(run_ceiling(params, base, kdra_objects=True))
            print(f"  ceiling on kdra's objects: {own_ceiling.rate:.1f} pods/s", flush=True)
            report(final=False)
            continue
        for round_, kind in schedule(contenders, args.rounds):
            tag = workload if args.rounds == 1 else f"{workload}-r{round_}"
            print(f"{workload} / {kind.name}"
                  f"{'' if args.rounds == 1 else f' (round {round_})'} ...", flush=True)
            result = asyncio.run(run_one(kind, workload, params, base, profiler, tag, round_))
            results.append(result)
            report(final=False)
            print(f"  {result.pods} pods in {result.seconds:.1f}s = {result.rate:.1f} pods/s, "
                  f"p50 {1000 * result.p50:.0f} ms, p99 {1000 * result.p99:.0f} ms, "
                  f"CPU {result.cpu:.1f}s, peak RSS {result.rss:.0f} MiB {result.note}",
                  flush=True)
    for count in [int(n) for n in args.sweep.split(",") if n.strip()]:
        each = min(count * DEVICES_PER_NODE // 2, SWEEP_MAX_PODS)
        sweep_params = replace(params, nodes=count, init_pods=each, measure_pods=each)
        for kind in contenders:
            print(f"template at {count} nodes ({each}+{each} pods) / {kind.name} ...",
                  flush=True)
            result = asyncio.run(run_one(kind, "template", sweep_params, base, profiler,
                                         tag=f"template-{count}"))
            swept.append((count, result))
            print(f"  {result.pods} pods in {result.seconds:.1f}s = {result.rate:.1f} pods/s "
                  f"{result.note}", flush=True)
            report(final=False)
    print(f"\ntotal {time.monotonic() - started:.0f}s\n")
    print("\n".join(report(final=True)))
    if args.markdown:
        print(f"report: {args.markdown}")
    profiles = sorted(base.glob("*-kdra-*.txt"))
    for path in profiles:
        print()
        print(summarize_profile(path))
    (base / "results.json").write_text(json.dumps({
        "commit": commit, "nodes": nodes, "params": params.__dict__,
        "results": [r.__dict__ | {"rate": r.rate} for r in results],
        "ceiling": ceiling.__dict__ | {"rate": ceiling.rate} if ceiling else None,
        "ceiling_kdra_objects": (own_ceiling.__dict__ | {"rate": own_ceiling.rate}
                                 if own_ceiling else None),
        "sweep": [r.__dict__ | {"nodes": n, "rate": r.rate} for n, r in swept],
    }, indent=2, default=str))
    print(f"\nresults: {base / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
