"""Fault injection end to end: bursts of GPU pods while the operator, a node agent or the
kube-apiserver is killed or restarted, the leading replica is stopped (SIGTERM), two operators
run at once, or pods and claims are deleted at random. Real processes against the real API server.

Every scenario ends the same way (:meth:`World.settle_and_release`):

1. settle: every pod that can fit is bound (one GPU per pod: min(live pods, GPUs)), the rest
   are reported unschedulable, and the invariant checker (``kdra.cli.core.invariants``, over the
   namespace's pods and claims, the scenario's slices and the agent's CDI files and
   checkpoints) finds 0 violations;
2. all pods are force-deleted (there is no kubelet) and every allocation is released: the
   generated claims are gone, the checkpoints and the CDI directory are empty, and the checker
   again finds nothing.

Sizes are kept so that a scenario runs in about a minute on a small CI machine;
``KDRA_CHAOS_SCALE=3`` triples the pods and nodes. Each scenario prints one ``chaos:`` line
(pods, faults injected, violations, restarts) — docs/reliability.md records them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kdra.checks import NodeLocal, Violation, check, read_cluster, read_local
from kdra.kube.core.podclaims import CLAIM_STATUSES_ANNOTATION
from kdra.kube.reader import Reader
from kdra_devenv.controlplane import ControlPlane
from tests.e2e import agent_helpers
from tests.e2e.agent_helpers import SYSTEM_NAMESPACE, Agent, AgentFactory
from tests.e2e.procs import KdraProcess, wait_for
from tests.e2e.test_binder import apply, gpu_class, gpu_pod, template

agents = agent_helpers.agents  # the node-agent fixture
GPU = "gpu.kdra.dev"
CLAIMS = "resourceclaims.resource.kdra.dev"
GPUS_PER_NODE = 8
LEASE = 6.0  # seconds: --leader-lease-duration of the leader-election scenario
SCALE = max(1, int(os.environ.get("KDRA_CHAOS_SCALE", "1")))
# `make chaos`: the operator-kill scenario at the size the reliability issue names (300 pods
# on 20 nodes x 8 GPUs, whatever KDRA_CHAOS_SCALE says); CI runs it at 80 pods on 6 nodes.
FULL = os.environ.get("KDRA_CHAOS_FULL") == "1"


@pytest.fixture
def operators(control_plane: ControlPlane, tmp_path: Path,
              request: pytest.FixtureRequest) -> Iterator[Callable[..., KdraProcess]]:
    """Start kdra operators (no webhooks, no peering) as real processes; stopped afterwards,
    their logs printed when the test failed. ``ready_line``: what the log says once the
    process is up (a standby replica says "standing by")."""
    control_plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    started: list[KdraProcess] = []

    def start(*extra: str, ready_line: str = "kdra operator started") -> KdraProcess:
        proc = KdraProcess(["operator", "--health-port", "0", "--prepare-timeout", "60",
                            *extra], tmp_path / f"operator-{len(started)}.log",
                           control_plane.kubeconfig, ready_line=ready_line)
        started.append(proc)
        return proc.start(timeout=120)

    yield start
    for proc in started:
        proc.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for proc in started:
            print(f"===== {proc.log.name} =====\n{proc.tail(120)}")


@dataclass
class World:
    """One scenario: a namespace, simulated GPU nodes served by one agent process, pods."""

    plane: ControlPlane
    api: Any
    namespace: str
    nodes: list[str]
    agent: Agent
    faults: list[str] = field(default_factory=list)
    restarts: int = 0
    deleted: int = 0
    created: int = 0
    creating: list[subprocess.Popen[str]] = field(default_factory=list)

    @property
    def capacity(self) -> int:
        return len(self.nodes) * GPUS_PER_NODE

    def state(self) -> dict[str, list[dict[str, Any]]]:
        """The cluster as the checker sees it, narrowed to this scenario (other tests of the
        session may leave objects behind in their own namespaces)."""
        reader = Reader(str(self.plane.kubeconfig))  # kdra's checker reads through kdra's
        try:
            state = read_cluster(reader)
        finally:
            reader.close()
        ours = set(self.nodes)
        return {
            "pods": [p for p in state["pods"]
                     if p["metadata"].get("namespace") == self.namespace],
            "claims": [c for c in state["claims"]
                       if c["metadata"].get("namespace") == self.namespace],
            "slices": [s for s in state["slices"]
                       if (s["spec"].get("pool") or {}).get("name") in ours],
            "nodes": state["nodes"],
            "leases": state["leases"],
        }

    def local(self) -> NodeLocal:
        return read_local([self.agent.cdi], [self.agent.state], self.nodes)

    def violations(self, state: dict[str, list[dict[str, Any]]] | None = None
                   ) -> list[Violation]:
        return check(**(state or self.state()), local=self.local())

    def pods(self) -> list[dict[str, Any]]:
        import kubernetes

        response = kubernetes.client.CoreV1Api(self.api).list_namespaced_pod(
            self.namespace, _preload_content=False)
        return list(json.loads(response.data)["items"])

    def allocated(self) -> int:
        import kubernetes

        response = kubernetes.client.CustomObjectsApi(self.api).list_namespaced_custom_object(
            "resource.kdra.dev", "v1alpha3", self.namespace, "resourceclaims",
            _preload_content=False)
        return sum(1 for c in json.loads(response.data)["items"]
                   if (c.get("status") or {}).get("allocation"))

    def bound(self) -> int:
        return sum(1 for p in self.pods() if p["spec"].get("nodeName"))

    def burst(self, count: int, prefix: str = "p", wait: bool = True) -> list[str]:
        """Create ``count`` one-GPU pods at once, restricted to this scenario's nodes
        (``wait=False``: kubectl runs in the background, so faults land while pods are still
        being created)."""
        only_ours = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": self.nodes}]}]}}}
        names = [f"{prefix}{self.created + i:03d}" for i in range(count)]
        pods = []
        for name in names:
            pod = gpu_pod(name, self.namespace,
                          [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
            pod["spec"]["affinity"] = only_ours
            pods.append(pod)
        self.created += count
        if wait:
            apply(self.plane, *pods)
        else:
            self.creating.append(self.plane.kubectl_async(
                "create", "-f", "-", input="\n---\n".join(json.dumps(p) for p in pods)))
        return names

    def wait_bound(self, count: int, timeout: float = 90) -> None:
        wait_for(lambda: self.bound() >= count, timeout=timeout, interval=0.1,
                 what=f"{count} pods bound")

    def settle(self, timeout: float = 150, quiet_for: float = 20) -> tuple[int, int]:
        """Wait until every pod that fits is bound, the others are marked unschedulable and
        no invariant is violated. Returns (bound, pending); fails listing the violations
        (early, once the pods have been quiet for ``quiet_for`` seconds with violations)."""
        for proc in self.creating:  # (a create may fail while the API server restarts)
            proc.wait(timeout=timeout)
        deadline = time.monotonic() + timeout
        last: tuple[int, int, int, list[Violation]] = (0, 0, 0, [])
        quiet_since: float | None = None
        while time.monotonic() < deadline:
            state = self.state()
            live = [p for p in state["pods"] if not p["metadata"].get("deletionTimestamp")]
            bound = [p for p in live if p["spec"].get("nodeName")]
            pending = [p for p in live if not p["spec"].get("nodeName")]
            expected = min(len(live), self.capacity)
            marked = all(any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                             for c in (p.get("status") or {}).get("conditions") or [])
                         for p in pending)
            found = self.violations(state)
            last = (len(bound), len(pending), expected, found)
            if len(bound) == expected and marked and not found:
                return len(bound), len(pending)
            quiet = len(bound) >= expected and marked
            quiet_since = (quiet_since or time.monotonic()) if quiet else None
            if quiet_since is not None and time.monotonic() - quiet_since > quiet_for:
                break
            time.sleep(1.0)
        bound_n, pending_n, expected, found = last
        raise AssertionError(
            f"not settled: {bound_n} bound (expected {expected}), "
            f"{pending_n} pending; {len(found)} violation(s):\n" +
            "\n".join(map(str, found[:40])) + "\npending pods:\n" +
            "\n".join(self.describe_pending()))

    def describe_pending(self, limit: int = 5) -> list[str]:
        """Why pods are pending, for a failure message: each pod's scheduling condition,
        recorded claims, and those claims' allocation, reservations and device conditions."""
        state = self.state()
        claims = {c["metadata"]["name"]: c for c in state["claims"]}
        lines = []
        for pod in [p for p in state["pods"] if not p["spec"].get("nodeName")][:limit]:
            meta = pod["metadata"]
            conditions = (pod.get("status") or {}).get("conditions") or []
            condition: dict[str, Any] = next(
                (c for c in conditions if c.get("type") == "PodScheduled"), {})
            recorded = json.loads((meta.get("annotations") or {}).get(
                CLAIM_STATUSES_ANNOTATION, "{}"))
            lines.append(f"  {meta['name']} (deleting: {bool(meta.get('deletionTimestamp'))}) "
                         f"scheduled={condition.get('status')} {condition.get('message', '')!r} "
                         f"claims={recorded}")
            for name in recorded.values():
                claim = claims.get(name)
                if claim is None:
                    lines.append(f"    {name}: missing")
                    continue
                status = claim.get("status") or {}
                devices = [(d.get("device"), [(c.get("reason"), c.get("status"))
                                              for c in d.get("conditions") or []])
                           for d in status.get("devices") or []]
                lines.append(
                    f"    {name}: deleting={bool(claim['metadata'].get('deletionTimestamp'))} "
                    f"finalizers={claim['metadata'].get('finalizers')} "
                    f"allocated={bool(status.get('allocation'))} "
                    f"reservedFor={[r.get('name') for r in status.get('reservedFor') or []]} "
                    f"devices={devices}")
        return lines

    def release_all(self, timeout: float = 150) -> None:
        """Force-delete every pod; wait until all allocations are released."""
        self.plane.kubectl("delete", "pods", "--all", "-n", self.namespace, "--grace-period=0",
                           "--force", "--wait=false")

        def released() -> bool:
            state = self.state()
            local = self.local()
            return (not state["pods"] and not state["claims"]
                    and not any(local.checkpoints.values()) and not local.cdi_specs
                    and not check(**state, local=local))

        try:
            wait_for(released, timeout=timeout, interval=1.0, what="every allocation released")
        except AssertionError:
            state = self.state()
            leftovers = [(c["metadata"]["name"], c.get("status")) for c in state["claims"]]
            raise AssertionError(f"not released: {len(state['pods'])} pods, claims "
                                 f"{leftovers[:5]}, violations "
                                 f"{list(map(str, self.violations(state)))[:10]}") from None

    def cli_check(self) -> list[dict[str, str]]:
        """``kdra check`` as a user runs it (the whole cluster, this agent's directories):
        the violations that concern this scenario's namespace or nodes."""
        result = subprocess.run(
            [sys.executable, "-m", "kdra", "check", "--kubeconfig", str(self.plane.kubeconfig),
             "--cdi-dir", str(self.agent.cdi), "--state-dir", str(self.agent.state),
             "-o", "json"], capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode in (0, 1), result.stderr
        found: list[dict[str, str]] = json.loads(result.stdout)
        assert (result.returncode == 1) == bool(found)
        ours = (self.namespace, *self.nodes)
        return [v for v in found if any(word in v["message"] for word in ours)]

    def settle_and_release(self, scenario: str) -> dict[str, Any]:
        summary = {"scenario": scenario, "pods": self.created, "deleted": self.deleted,
                   "faults": self.faults, "restarts": self.restarts}
        try:
            summary["bound"], summary["pending"] = self.settle()
        except AssertionError as exc:
            summary["violations"] = len(self.violations())
            print("chaos:", json.dumps(summary))
            raise exc from None
        found = self.violations()
        self.release_all()
        after = self.violations()
        from_cli = self.cli_check()
        summary["violations"] = len(found) + len(after) + len(from_cli)
        print("chaos:", json.dumps(summary))
        assert not found and not after and not from_cli, (found, after, from_cli)
        return summary


@pytest.fixture
def world(control_plane: ControlPlane, api: Any, agents: AgentFactory,
          namespace: str) -> Callable[..., World]:
    def make(nodes: int, env: dict[str, str] | None = None) -> World:
        suffix = uuid.uuid4().hex[:5]
        names = [f"chaos-{suffix}-{i}" for i in range(nodes * SCALE)]
        agent = agents(names[0], f"gpus: ['{GPUS_PER_NODE} x H100-80GB']\n",
                       "--simulate-nodes", ",".join(names), env=env)
        apply(control_plane, gpu_class(),
              template("one-gpu", namespace, [{"name": "gpu", "deviceClassName": GPU}]))
        return World(control_plane, api, namespace, names, agent)

    return make


def lease_holder(plane: ControlPlane) -> str:
    """The holderIdentity of the operator's leader-election Lease ("" when released)."""
    result = plane.kubectl("get", "lease", "kdra-operator", "-n", SYSTEM_NAMESPACE, "-o",
                           "jsonpath={.spec.holderIdentity}", check=False)
    return result.stdout.strip()


def logged_at(log: Path, text: str) -> float:
    """When the first line of ``log`` containing ``text`` was logged (epoch seconds; kdra's
    text log lines start with ``2026-01-02 03:04:05,678``)."""
    for line in log.read_text(errors="replace").splitlines():
        if text in line:
            return dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    raise AssertionError(f"{text!r} not in {log}")


def restart_agent(world: World, env: dict[str, str] | None = None) -> None:
    world.agent.proc.env = env or {}
    world.agent.proc.start(timeout=120)
    world.restarts += 1


# --------------------------------------------------------------------------- scenarios


def test_operator_killed_during_a_burst(world: Callable[..., World],
                                        operators: Callable[..., KdraProcess]) -> None:
    """kill -9 the operator three times while 80 pods compete for 48 GPUs (6 nodes x 8);
    with KDRA_CHAOS_FULL=1, 300 pods for 160 GPUs (20 nodes x 8)."""
    w = world(20 if FULL else 6)
    operator = operators()
    w.burst(300 if FULL else 80 * SCALE, wait=False)
    last = 0
    for _ in range(3):
        # Mid-burst: kill once more claims got allocated since the last kill — while their
        # devices are being prepared and their pods are not bound yet.
        target = min(w.capacity, last + w.capacity // 8)
        last = wait_for(lambda t=target: (n := w.allocated()) >= t and n,  # type: ignore[misc]
                        timeout=120, interval=0.05, what="claims allocated")
        operator.kill()
        w.faults.append(f"operator kill -9 at {last} allocated / {w.bound()} bound")
        operator.start(timeout=120)
        w.restarts += 1
    w.settle_and_release("operator kill -9 x3")


def test_agent_killed_in_the_middle_of_prepares(world: Callable[..., World],
                                                operators: Callable[..., KdraProcess]) -> None:
    """The agent stops after writing CDI files (their checkpoint entries not yet on disk),
    is killed there, and restarted: every prepare completes, nothing is left behind."""
    w = world(3, env={"KDRA_AGENT_PAUSE_AFTER": "cdi-written"})
    operators()
    w.burst(30 * SCALE)
    wait_for(lambda: w.agent.proc.tail(200).count("paused after cdi-written") >= 2,
             timeout=90, what="prepares paused after writing CDI files")
    local = w.local()
    recorded = {file for entries in local.checkpoints.values() for e in entries.values()
                for file in e.get("cdiFiles") or ()}
    interrupted = [file for file in local.cdi_specs if file not in recorded]
    w.agent.proc.kill()
    w.faults.append(f"agent kill -9 with {len(interrupted)} prepare(s) paused after "
                    f"cdi-written (CDI file on disk, no checkpoint entry), "
                    f"{len(local.cdi_specs)} CDI file(s) on disk")
    assert interrupted
    restart_agent(w)
    w.settle_and_release("agent kill -9 mid-prepare")


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_control_plane_restarted_during_a_burst(control_plane: ControlPlane,
                                                world: Callable[..., World],
                                                operators: Callable[..., KdraProcess],
                                                component: str) -> None:
    """Restart kube-apiserver (or etcd under it) while 40 pods compete for 32 GPUs; the
    operator and the agent reconnect on their own."""
    w = world(4)
    operator = operators()
    w.burst(40 * SCALE, wait=False)
    w.wait_bound(w.capacity // 4, timeout=120)
    at = f"{w.allocated()} allocated / {w.bound()} bound"
    try:
        control_plane.restart(component)
    finally:
        wait_for(lambda: control_plane.kubectl("get", "--raw", "/readyz",
                                               check=False).returncode == 0,
                 timeout=120, interval=1, what=f"kube-apiserver /readyz after the {component} "
                 "restart")
    w.faults.append(f"{component} restart at {at}")
    w.restarts += 1
    assert operator.alive and w.agent.proc.alive
    w.settle_and_release(f"{component} restart")


def test_leader_stopped_during_a_burst(control_plane: ControlPlane,
                                       world: Callable[..., World],
                                       operators: Callable[..., KdraProcess]) -> None:
    """SIGTERM the leading replica (leader election, 6 s Lease) while 40 pods compete for 32
    GPUs and claims are being allocated: it exits at once and cleanly (code 0, no traceback),
    releasing its Lease, and the standby leads well before the Lease would have expired."""
    w = world(4)
    suffix = w.nodes[0].split("-")[1]
    leader_id, standby_id = f"chaos-leader-{suffix}", f"chaos-standby-{suffix}"
    election = ("--leader-elect", "true", "--leader-lease-duration", str(int(LEASE)))
    leader = operators(*election, "--identity", leader_id)
    standby = operators(*election, "--identity", standby_id, ready_line="standing by")
    assert lease_holder(control_plane) == leader_id
    w.burst(40 * SCALE, wait=False)
    # Mid-burst: the first claims allocated, most pods still to be scheduled and bound (the
    # whole burst takes about 3 s on 2 CPUs: poll the cheap claim list only).
    allocated = wait_for(lambda: (n := w.allocated()) >= 2 and n,  # type: ignore[misc]
                         timeout=120, interval=0.02, what="claims allocated")
    sigterm = time.time()
    code = leader.stop(timeout=30)
    exit_s = time.time() - sigterm
    holder = lease_holder(control_plane)  # right after the exit, before the standby's next try
    wait_for(lambda: "kdra operator started" in standby.tail(400), timeout=60, interval=0.2,
             what="the standby taking over")
    lease_s = logged_at(standby.log, f"{standby_id} leads") - sigterm
    started_s = logged_at(standby.log, "kdra operator started") - sigterm
    w.faults.append(f"leader SIGTERM at {allocated} allocated ({w.bound()} bound once it had "
                    f"exited): exit {code} after {exit_s:.1f}s, Lease holder then {holder!r}; "
                    f"standby led after {lease_s:.1f}s, its controllers ran after "
                    f"{started_s:.1f}s (lease {LEASE:.0f}s)")
    print(w.faults[-1])
    log = leader.log.read_text(errors="replace")
    assert code == 0, leader.tail(80)
    assert exit_s < 15, exit_s
    assert "Traceback" not in log, leader.tail(120)
    assert "leader election: release failed" not in log, leader.tail(80)
    assert holder in ("", standby_id), holder  # released, not left to expire
    # Without the release, the standby would wait for the Lease to expire, 6 s after the
    # leader's last renewal (every 2 s): at least 4 s after the SIGTERM.
    assert lease_s < LEASE * 2 / 3, lease_s
    assert allocated < w.capacity, "the leader was stopped after the burst, not during it"
    w.settle_and_release("leader SIGTERM mid-burst")


def test_two_operator_replicas_at_once(world: Callable[..., World],
                                       operators: Callable[..., KdraProcess]) -> None:
    """Two plain operators (no leader election; one spreads, one packs first-fit, so their
    choices differ) schedule bursts of 64 pods for 32 GPUs, two rounds. Both binders may
    allocate one device to two claims (each claim's write is guarded, not the device); the
    agent prepares a device for one claim only (DeviceBusy for the other), the loser's binder
    rolls back, and no pod ever binds with a device another pod holds."""
    w = world(4)
    operators("--policy", "spread")
    operators("--policy", "first-fit")
    w.faults.append("2 active operators (spread + first-fit)")
    for _ in range(2):
        w.burst(64 * SCALE)
        w.settle_and_release("two operator replicas")


def test_pods_and_claims_deleted_at_random(world: Callable[..., World],
                                           operators: Callable[..., KdraProcess]) -> None:
    """Delete random pods (forced) and random claims while 60 pods compete for 32 GPUs."""
    w = world(4)
    operators()
    rng = random.Random(int(os.environ.get("KDRA_CHAOS_SEED", "7")))
    w.burst(60 * SCALE)
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        state = w.state()
        pods = [p["metadata"]["name"] for p in state["pods"]
                if not p["metadata"].get("deletionTimestamp")]
        claims = [c["metadata"]["name"] for c in state["claims"]
                  if not c["metadata"].get("deletionTimestamp")]
        doomed_pods = rng.sample(pods, min(len(pods), rng.randint(1, 3)))
        doomed_claims = rng.sample(claims, min(len(claims), rng.randint(0, 2)))
        if doomed_pods:
            w.plane.kubectl("delete", "pod", *doomed_pods, "-n", w.namespace,
                            "--grace-period=0", "--force", "--wait=false", check=False)
        if doomed_claims:
            w.plane.kubectl("delete", CLAIMS, *doomed_claims, "-n", w.namespace,
                            "--wait=false", check=False)
        w.deleted += len(doomed_pods) + len(doomed_claims)
        if rng.random() < 0.3:
            w.burst(rng.randint(1, 4))
        time.sleep(rng.uniform(0.2, 1.0))
    w.faults.append(f"{w.deleted} random deletions (pods and claims)")
    w.settle_and_release("random pod/claim deletion")
