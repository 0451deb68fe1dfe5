"""Settings of the node agent (``kdra agent``): one frozen object, built once at start-up.

Each field comes from a command-line flag, falling back to an environment variable
(``KDRA_<FIELD>`` upper-cased, or the names a field lists in its ``env`` metadata), falling
back to the default documented here (:mod:`kdra.kube.flags`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from kdra.kube import flags


@dataclass(frozen=True)
class AgentSettings:
    """Settings of ``kdra agent`` (the node agent); flags fall back to ``KDRA_<FIELD>``."""

    kubeconfig: str | None = None
    """Path of a kubeconfig; unset: ``$KUBECONFIG``, ``~/.kube/config``, then in-cluster."""

    node_name: str = field(default="", metadata={"env": ("NODE_NAME",)})
    """The node this agent serves (its pool name); falls back to ``$NODE_NAME`` (set from the
    downward API in the DaemonSet). Ignored with ``--simulate-nodes``."""

    namespace: str = "kdra-system"
    """Namespace of the agents' heartbeat Leases."""

    inventory: str = ""
    """Fake inventory file (YAML: GPU profiles like '8 x H100-80GB' and arbitrary devices),
    read by the fake-gpu and generic backends; empty: discover real GPUs through NVML."""

    backends: str = field(default="", metadata={"multi": True})
    """Device backends, in order, separated by commas or spaces: nvml (real NVIDIA GPUs),
    fake-gpu (the --inventory's GPU profiles), generic (the --inventory's other devices), or
    a vendor's 'module:Class' (importable by the agent, called with these settings). Empty:
    'fake-gpu generic' with --inventory, else 'nvml'. Only whoever deploys the agent sets it
    (kdra.agent.backends.registry)."""

    driver: str = "gpu.kdra.dev"
    """Driver name of the GPUs NVML discovers (and the default driver of inventory entries)."""

    cdi_dir: str = "/var/run/cdi"
    """Directory where the agent writes CDI spec files for prepared claims."""

    state_dir: str = "/var/lib/kdra"
    """Directory of the agent's checkpoints (one file per node)."""

    metrics_port: int = 8082
    """Port of the Prometheus ``/metrics`` endpoint; 0 turns it off."""

    malloc_trim_interval: float = 60.0
    """Seconds between returns of the C heap's free pages to the kernel (``malloc_trim``;
    glibc only): without them RSS creeps up under a steady stream of objects although live
    memory does not (kdra.kube.memory). 0 turns it off."""

    event_loop: str = "uvloop"
    """Event loop: uvloop (libuv, the default: the loop and TLS in C) or asyncio (the
    standard library's, e.g. for asyncio's debug mode). See kdra.kube.loops."""

    lease_duration: int = 40
    """Seconds a heartbeat Lease stays valid without renewal."""

    renew_interval: float = 10.0
    """Seconds between heartbeat Lease renewals."""

    inventory_poll: float = 5.0
    """Seconds between checks of the inventory (file modification time, or NVML health);
    SIGHUP re-reads at once."""

    resync_period: float = 60.0
    """Seconds between checks that the published slices still exist as published."""

    health_poll: float = 2.0
    """Seconds between health checks: the sources (NVML, the marks file, the inventory's
    verdict) are asked and the debounce advances."""

    health_debounce: float = 10.0
    """Seconds a device must be seen unhealthy (or lost) without interruption before its
    slice gets the gpu.kdra.dev/unhealthy taint (NoSchedule when degraded, NoExecute when
    lost). Checked every --inventory-poll seconds."""

    health_settle: float = 120.0
    """Seconds a tainted device must be seen healthy without interruption before its taint is
    removed (the settled period: a flapping device does not thrash its slice)."""

    health_marks: str = ""
    """The marks file `kdra agent health mark` writes (devices an administrator declared
    unhealthy or lost); empty: <state-dir>/health-marks.json."""

    nvml_xid_hold: float = 300.0
    """Seconds an NVML XID critical error keeps its GPU degraded (lost for XID 79) after it
    was seen; the settled period follows before the taint goes."""

    simulate_nodes: str = field(default="", metadata={"multi": True})
    """Serve many simulated nodes from one process, each with its own pool, Lease and
    checkpoint: 'node-{0..99}' (quoted), or names separated by commas or spaces."""

    create_nodes: bool = False
    """Create the served Node objects (capacity, Ready condition) when they do not exist:
    there is no kubelet for simulated nodes."""

    identity: str = ""
    """Holder identity written into the Leases; empty: '<hostname>-<pid>'."""

    workers: int = 4
    """Concurrent claim prepare/unprepare operations per process."""

    flavour: str = "kdra"
    """The API the agent serves: ``kdra`` (kdra's resource.kdra.dev objects: it prepares the
    claims allocated to its node from a claim watch, reports status.devices and gives
    containers their devices through NRI) or ``native`` (resource.k8s.io/v1: it publishes
    native ResourceSlices and is the kubelet's DRA plugin — the kubelet asks it to prepare
    each pod's claims and has the runtime inject their CDI devices; no NRI); ``auto``:
    native when the API server serves resource.k8s.io/v1, else kdra. The operator's flag of
    the same name (KDRA_FLAVOUR) must agree."""

    kubelet_registry_dir: str = "/var/lib/kubelet/plugins_registry"
    """(native) The kubelet's plugin registration directory: the agent's registration socket
    for each driver is <dir>/<driver>-reg.sock (the kubelet's root directory +
    /plugins_registry)."""

    kubelet_plugins_dir: str = "/var/lib/kubelet/plugins"
    """(native) Where the agent's DRA service sockets go: <dir>/<driver>/dra.sock, the path
    the registration gives the kubelet (the same inside and outside the agent's container)."""

    nri_socket: str = "/var/run/nri/nri.sock"
    """The container runtime's NRI socket: the agent registers there as NRI plugin
    '10-kdra' and gives each container exactly the CDI devices of its pod's prepared claims
    (and refuses containers whose claims are not prepared). Empty turns it off; a missing
    socket is retried in the background. Never used for simulated nodes (--simulate-nodes,
    --create-nodes: there is no runtime) nor in the native flavour (the kubelet has the
    runtime inject the devices). Without it, containers see their devices only through the
    webhook's env (not tamper-proof)."""


FLAVOURS = ("kdra", "native", "auto")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per field of :class:`AgentSettings`."""
    flags.add_arguments(parser, AgentSettings)


def agent_from_args(args: argparse.Namespace) -> AgentSettings:
    settings: AgentSettings = flags.settings_from_args(args, AgentSettings)
    return settings
