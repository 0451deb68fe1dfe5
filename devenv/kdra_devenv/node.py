"""A real Kubernetes node on this machine: containerd 2.x (NRI and CDI on) with runc, a CNI
bridge network, and a kubelet joined to a local control plane (:mod:`kdra_devenv.controlplane`).

What it sets up, each change recorded first in the host ledger (:mod:`kdra_devenv.hostledger`):

- the node's IP, ``10.254.0.1/32`` on ``lo`` (kubelet refuses a loopback node IP, and this
  VM cannot create dummy links), where kubelet serves (its healthz on 127.0.0.1);
- the pod network: bridge ``kdra0`` (10.244.0.1/24) with CNI's bridge + host-local + portmap
  plugins (Debian's ``containernetworking-plugins``); an nftables table ``ip kdra-node`` that
  sends pods' connections to the ``kubernetes`` Service (10.96.0.1:443) to the API server on
  127.0.0.1 (``route_localnet`` on the bridge) and keeps pod traffic off the machine's uplink;
- sysctls kubelet (``vm.overcommit_memory``, ``kernel.panic`` ...) and the bridge plugin
  (``net.ipv4.ip_forward``) set, restored at the end;
- cgroup ``/kdra-node`` in every hierarchy, kubelet's ``cgroupRoot``;
- containerd (:class:`kdra_devenv.containerd.Containerd`) with NRI on the standard socket
  ``/var/run/nri/nri.sock`` and CDI specs read from ``/var/run/cdi`` - the paths the agent's
  DaemonSet mounts - and network namespaces under its state directory; NRI's validator
  requires kdra's plugin for every container not annotated :data:`TOLERATE_ANNOTATION`
  (docs/architecture.md: fail closed);
- kubelet: client certificate ``system:node:kdra-node`` and a serving certificate from the
  control plane's CA, x509 + webhook authorization, cgroupfs, the fixes this machine needs
  (``oomScoreAdj: 0``, ``failCgroupV1: false``; docs/architecture.md, "What a real node
  needs"), no iptables chains of its own, every directory of its own under the runtime
  directory except ``/var/log/containers`` (links into it, removed at the end).

Logs and certificates go to the caller's work directory; containerd's and kubelet's state
(sockets among it) to a short runtime directory beside the ledger (``~/.cache/kdra/node/rt``),
emptied at start and removed at the end.

:func:`control_plane` makes the matching control plane: kube-scheduler, the controllers that
Deployments, DaemonSets, Services and node lifecycle need, webhooks called at their pods'
addresses (``--enable-aggregator-routing``), kubelets reached at their InternalIP.

Invariants:
- One node per host, named ``kdra-node``: the ledger's lock is held from :meth:`Node.start`
  to :meth:`Node.stop`; a start while another node runs fails (``python -m kdra_devenv node down``
  stops it); a previous holder's changes are undone first, also when it was SIGKILLed.
- :meth:`Node.stop` (also after a failed start) leaves the host as it was found: kubelet, then
  every pod and containerd, then the ledger's undo (processes, cgroups, mounts, network,
  sysctls, files in the watched directories).
- Every process is started by :func:`kdra_devenv.process.spawn` (it dies with its starter).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from kdra.kube.core.podclaims import NRI_TOLERATE_ANNOTATION
from kdra_devenv.containerd import Containerd, ContainerdError
from kdra_devenv.controlplane import CONTROLLERS, ControlPlane, free_port
from kdra_devenv.hostledger import HostLedger, LedgerError
from kdra_devenv.pki import KeyPair
from kdra_devenv.process import spawn, terminate

__all__ = [
    "CDI_DIR",
    "NODE_IP",
    "NODE_NAME",
    "NRI_SOCKET",
    "TOLERATE_ANNOTATION",
    "Node",
    "NodeError",
    "control_plane",
    "down",
    "ensure_packages",
    "ledger",
    "missing_packages",
]

NODE_NAME = "kdra-node"
NODE_IP = "10.254.0.1"
POD_GATEWAY = "10.244.0.1/24"
POD_SUBNET = "10.244.0.0/24"
SERVICE_IP = "10.96.0.1"
BRIDGE = "kdra0"
NFT_TABLE = "kdra-node"
CGROUP_ROOT = "kdra-node"
NETWORK = "kdra-node"
NRI_SOCKET = Path("/var/run/nri/nri.sock")
CDI_DIR = Path("/var/run/cdi")
AGENT_STATE_DIR = Path("/var/lib/kdra")
"""The agent DaemonSet's hostPath for its checkpoints (manifests/base/agent)."""
TOLERATE_ANNOTATION = NRI_TOLERATE_ANNOTATION
"""containerd's NRI validator requires kdra's plugin at every container creation (fail
closed: no container starts without its devices while the agent restarts); a pod annotated
``tolerate-missing-plugins.kdra.dev: "true"`` is created without it (kdra's own pods)."""
CONTAINER_LOGS = Path("/var/log/containers")
"""kubelet links each container's log here (a fixed path in kubelet)."""

#: Sysctls kubelet sets at start (its "kernel tunables") and the CNI bridge plugin's
#: forwarding switch: restored when the node stops.
CHANGED_SYSCTLS = (
    "vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
)

#: kube-controller-manager's controllers for a cluster with a real node: the e2e set plus
#: workloads (Deployments, ReplicaSets, DaemonSets), Services' endpoints and node lifecycle.
NODE_CONTROLLERS = (
    *CONTROLLERS,
    "deployment-controller", "replicaset-controller", "daemonset-controller",
    "endpoints-controller", "endpointslice-controller", "node-lifecycle-controller",
    "taint-eviction-controller", "pod-garbage-collector-controller", "disruption-controller",
)

#: Debian packages the node needs: the file that shows each is installed.
PACKAGES = {
    "runc": Path("/usr/sbin/runc"),
    "containernetworking-plugins": Path("/usr/lib/cni/bridge"),
    "nftables": Path("/usr/sbin/nft"),
    "buildah": Path("/usr/bin/buildah"),
    "debootstrap": Path("/usr/sbin/debootstrap"),
    "busybox-static": Path("/bin/busybox"),
    "gcc": Path("/usr/bin/gcc"),
    "libc6-dev": Path("/usr/include/stdio.h"),
}


class NodeError(RuntimeError):
    """The node could not be set up; the message says which part and why."""


def ledger() -> HostLedger:
    """The host's node ledger, in kdra's cache (it must outlive any work directory)."""
    cache = Path(os.environ.get("KDRA_CACHE", Path.home() / ".cache" / "kdra"))
    return HostLedger(cache / "node")


def missing_packages() -> list[str]:
    return [name for name, path in PACKAGES.items() if not path.exists()]


def ensure_packages() -> list[str]:
    """Install the missing Debian packages (apt-get); returns what was installed."""
    missing = missing_packages()
    if not missing:
        return []
    if shutil.which("apt-get") is None:
        raise NodeError(f"missing packages {', '.join(missing)} and no apt-get to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    if subprocess.run(install, capture_output=True, env=env, check=False).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, check=False)
        result = subprocess.run(install, capture_output=True, text=True, env=env, check=False)
        if result.returncode != 0:
            raise NodeError(f"apt-get install {' '.join(missing)} failed:\n"
                            f"{result.stderr[-2000:]}")
    return missing


#: Feature gates of a native node (``native=True``): device taints (alpha in 1.35) so that the
#: API server keeps and kube-scheduler honours the agent's health taints in native slices,
#: and the kubelet's resource health (alpha) so that pods report their devices' health in
#: ``allocatedResourcesStatus`` (the API server drops the field while the gate is off).
NATIVE_GATES = "DRADeviceTaints=true,ResourceHealthStatus=true"


def control_plane(workdir: Path, bin_dir: Path, *, native: bool = False) -> ControlPlane:
    """A control plane for a real node (see the module docstring); not started. ``native``:
    DRA on ``resource.k8s.io/v1`` as upstream runs it — kube-controller-manager's
    resourceclaim-controller makes the pods' claims, kube-scheduler allocates them — with
    :data:`NATIVE_GATES`."""
    gates = ("--feature-gates", NATIVE_GATES) if native else ()
    return ControlPlane(
        workdir, bin_dir, with_scheduler=True,
        controllers=(*NODE_CONTROLLERS, "resourceclaim-controller") if native
        else NODE_CONTROLLERS,
        apiserver_args=("--enable-aggregator-routing=true",
                        "--kubelet-preferred-address-types=InternalIP", *gates),
        scheduler_args=gates,
    )


def _cni_config(ipam_dir: Path) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                      "ranges": [[{"subnet": POD_SUBNET}]],
                      "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def _nft_rules(api_port: int) -> str:
    return (
        "  chain prerouting {\n"
        "    type nat hook prerouting priority dstnat; policy accept;\n"
        f"    iifname \"{BRIDGE}\" ip daddr {SERVICE_IP} tcp dport 443 "
        f"dnat to 127.0.0.1:{api_port}\n"
        "  }\n"
        "  chain forward {\n"
        "    type filter hook forward priority filter; policy accept;\n"
        f"    iifname \"{BRIDGE}\" oifname != \"{BRIDGE}\" drop\n"
        "  }"
    )


class Node:
    """One kubelet node; :meth:`start` and :meth:`stop` (or use it as a context manager)."""

    def __init__(self, plane: ControlPlane, workdir: Path, *,
                 images: Sequence[Path] = (), host: HostLedger | None = None,
                 native: bool = False) -> None:
        """``images``: OCI archives imported into containerd before kubelet starts.
        ``native``: the kubelet gives containers their devices (kdra's agent is its DRA
        plugin): containerd requires no NRI plugin, and the kubelet reports device health
        (gate ResourceHealthStatus)."""
        self.plane = plane
        self.workdir = workdir
        self.images = tuple(images)
        self.native = native
        self.host = host or ledger()
        # containerd's and kubelet's state, sockets included: a short path (a unix socket's
        # is at most 104 bytes) of its own on the host, as there is one node per host.
        self.runtime_dir = self.host.directory / "rt"
        self.containerd: Containerd | None = None
        self.kubelet: subprocess.Popen[bytes] | None = None
        self._kubelet_log: IO[bytes] | None = None
        self._locked = False
        self.timings: dict[str, float] = {}

    @property
    def name(self) -> str:
        return NODE_NAME

    @property
    def kubelet_dir(self) -> Path:
        return self.runtime_dir / "kubelet"

    @property
    def kubelet_log(self) -> Path:
        return self.workdir / "kubelet.log"

    def __enter__(self) -> Node:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ start

    def start(self, timeout: float = 120.0) -> Node:
        if not self.host.held:  # else the caller holds it (and undoes and releases it)
            try:
                self.host.acquire(take_over=False)  # a running node is stopped by `down` only
            except LedgerError as exc:
                raise NodeError(str(exc)) from exc
            self._locked = True
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _timed(self, what: str, started: float) -> None:
        self.timings[what] = round(time.monotonic() - started, 2)

    def _start(self, timeout: float) -> None:
        if self.plane.ca is None:
            raise NodeError("start the control plane before the node")
        host = self.host
        self.workdir.mkdir(parents=True, exist_ok=True)
        host.workdir(self.workdir)
        host.workdir(self.runtime_dir, remove=self.runtime_dir)
        shutil.rmtree(self.runtime_dir, ignore_errors=True)
        self.runtime_dir.mkdir(parents=True)
        host.watch_directory(Path("/run/containerd"))
        host.watch_directory(Path("/run/containerd/s"), stale_sockets=True)
        host.watch_directory(Path("/var/lib/kubelet"))  # kubelet's device-plugin socket
        host.watch_directory(Path("/var/lib/kubelet/device-plugins"), stale_sockets=True)
        # The DRA plugin directories at the kubelet's standard root, which the native
        # flavour's agent (its defaults) or a hostPath volume may create on the host although
        # this node's kubelet has its own --root-dir: removed when this run created them.
        for name in ("plugins", "plugins_registry"):
            host.watch_directory(Path("/var/lib/kubelet") / name, owned_if_created=True)
        host.watch_directory(Path("/var/lib/cni"))
        # libcni's cache of each pod's networks (this node's name its netns, under runtime_dir)
        host.watch_directory(Path("/var/lib/cni/results"), mentions=str(self.runtime_dir))
        host.watch_directory(CDI_DIR, owned=True)
        host.watch_directory(NRI_SOCKET.parent, owned=True)
        host.watch_directory(AGENT_STATE_DIR, owned=True)
        host.watch_directory(CONTAINER_LOGS, links_into=self.runtime_dir)
        for key in CHANGED_SYSCTLS:
            host.keep_sysctl(key)

        started = time.monotonic()
        host.add_address("lo", f"{NODE_IP}/32")
        host.add_bridge(BRIDGE, POD_GATEWAY)
        Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1")
        host.add_nft_table(NFT_TABLE, _nft_rules(self.plane.api_port))
        host.add_cgroup(CGROUP_ROOT)
        cni_dir = self.runtime_dir / "cni"
        (cni_dir / "net.d").mkdir(parents=True)
        (cni_dir / "net.d" / f"10-{NETWORK}.conflist").write_text(
            json.dumps(_cni_config(cni_dir / "ipam"), indent=2))
        self._timed("network", started)

        started = time.monotonic()
        containerd_dir = self.runtime_dir / "containerd"
        host.containerd(containerd_dir)
        self.containerd = Containerd(containerd_dir, nri_socket=NRI_SOCKET,
                                     cdi_spec_dirs=(CDI_DIR,), cni_conf_dir=cni_dir / "net.d",
                                     nri_required_plugins=() if self.native else ("kdra",),
                                     nri_tolerate_missing_annotation=TOLERATE_ANNOTATION)
        try:
            self.containerd.start()
        except ContainerdError as exc:
            raise NodeError(str(exc)) from exc
        self._timed("containerd", started)
        started = time.monotonic()
        for archive in self.images:
            self.containerd.import_image(archive)
        self._timed("image import", started)

        started = time.monotonic()
        self._start_kubelet()
        self._wait_ready(timeout)
        self._timed("kubelet to node Ready", started)

    def _certificates(self) -> tuple[KeyPair, KeyPair]:
        ca = self.plane.ca
        assert ca is not None
        client = ca.issue(f"kubelet-{NODE_NAME}-client", f"system:node:{NODE_NAME}",
                          organization="system:nodes", client=True)
        serving = ca.issue(f"kubelet-{NODE_NAME}-serving", f"system:node:{NODE_NAME}",
                           server_names=(NODE_IP, NODE_NAME))
        return client, serving

    @property
    def plugins_registry(self) -> Path:
        """Where the kubelet's plugin watcher looks for registration sockets."""
        return self.kubelet_dir / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """The kubelet's own plugins directory (kdra's DRA sockets go below it)."""
        return self.kubelet_dir / "plugins"

    def restart_kubelet(self, timeout: float = 120.0) -> None:
        """Stop the kubelet (SIGTERM) and start it again with the same configuration, as a
        kubelet upgrade or crash would: the pods keep running; it finds its plugins again."""
        assert self.kubelet is not None and self._kubelet_log is not None
        terminate(self.kubelet, grace=10)
        self._spawn_kubelet()
        self._wait_ready(timeout)

    def _start_kubelet(self) -> None:
        assert self.containerd is not None
        client, serving = self._certificates()
        root = self.kubelet_dir
        root.mkdir(parents=True)
        kubeconfig = root / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "local", "cluster": {
                "server": self.plane.server, "certificate-authority": str(self.plane.ca_file)}}],
            "users": [{"name": "kubelet", "user": {
                "client-certificate": str(client.cert), "client-key": str(client.key)}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "kubelet"}}],
            "current-context": "local",
        }))
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "tlsCertFile": str(serving.cert),
            "tlsPrivateKeyFile": str(serving.key),
            "authentication": {"anonymous": {"enabled": False},
                               "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.plane.ca_file)}},
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{CGROUP_ROOT}",
            "failCgroupV1": False,
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.containerd.address}",
            "oomScoreAdj": 0,
            "makeIPTablesUtilChains": False,
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "podLogsDir": str(root / "pod-logs"),
            "volumePluginDir": str(root / "volume-plugins"),
            "resolvConf": "/etc/resolv.conf",
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "5s",
            "maxPods": 110,
        }
        if self.native:
            config["featureGates"] = {"ResourceHealthStatus": True}
        (root / "config.yaml").write_text(json.dumps(config, indent=2))
        self._kubelet_log = self.kubelet_log.open("ab")
        self._spawn_kubelet()

    def _spawn_kubelet(self) -> None:
        root = self.kubelet_dir
        self.kubelet = spawn([
            self.plane.bin_dir / "kubelet", "--config", root / "config.yaml",
            "--kubeconfig", root / "kubeconfig", "--root-dir", root, "--cert-dir", root / "pki",
            "--hostname-override", NODE_NAME, "--node-ip", NODE_IP, "--v=1",
        ], run_dir=self.workdir, stdout=self._kubelet_log, stderr=subprocess.STDOUT)

    def _wait_ready(self, timeout: float) -> None:
        assert self.kubelet is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.kubelet.poll() is not None:
                raise NodeError(f"kubelet exited ({self.kubelet.returncode}); last lines of "
                                f"{self.kubelet_log}:\n{self.logs(40)}")
            node = self.plane.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
            if node.returncode == 0:
                conditions = json.loads(node.stdout).get("status", {}).get("conditions", [])
                if any(c.get("type") == "Ready" and c.get("status") == "True"
                       for c in conditions):
                    return
            time.sleep(0.5)
        raise NodeError(f"node {NODE_NAME} not Ready after {timeout:.0f} s; last lines of "
                        f"{self.kubelet_log}:\n{self.logs(40)}")

    def logs(self, lines: int = 60) -> str:
        try:
            text = self.kubelet_log.read_text(errors="replace")
        except OSError:
            return "<no kubelet log>"
        return "\n".join(text.splitlines()[-lines:])

    # ------------------------------------------------------------------ stop

    def stop(self) -> list[str]:
        """Stop everything and undo every host change; returns what could not be undone
        (also printed: the ledger keeps it for the next start or
        ``python -m kdra_devenv node down``)."""
        if self.kubelet is not None:
            terminate(self.kubelet, grace=10)
            self.kubelet = None
        if self._kubelet_log is not None:
            self._kubelet_log.close()
            self._kubelet_log = None
        if self.containerd is not None:
            self.containerd.stop()
            # The runtime directory goes with the host changes; its log stays beside kubelet's.
            with contextlib.suppress(OSError):
                shutil.copyfile(self.containerd.log_path, self.workdir / "containerd.log")
            self.containerd = None
        errors: list[str] = []
        if self.host.held:
            errors = self.host.undo()
        if self._locked:
            self.host.release()
            self._locked = False
        for error in errors:
            print(f"kdra node: not undone: {error}", flush=True)
        return errors


def down(*, take_over: bool = True) -> list[str]:
    """Stop the node running on this host (it is asked to stop and waited for) or undo what
    a node that was killed left behind; returns what could not be undone. ``take_over``
    False: a node still running is left alone (NodeError) - only a killed one's changes go."""
    host = ledger()
    try:
        errors = host.acquire(take_over=take_over, timeout=90.0 if take_over else 0)
    except LedgerError as exc:
        raise NodeError(str(exc)) from exc
    try:
        return errors + host.undo()
    finally:
        host.release()
