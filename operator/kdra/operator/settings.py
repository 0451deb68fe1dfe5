"""Settings of the operator and of the node agent: one frozen object each, built once at
start-up.

Each field comes from a command-line flag, falling back to an environment variable
(``KDRA_<FIELD>`` upper-cased), falling back to the default documented here.
"""

from __future__ import annotations

import argparse
import itertools
import os
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class OperatorSettings:
    kubeconfig: str | None = None
    """Path of a kubeconfig; unset: ``$KUBECONFIG``, ``~/.kube/config``, then in-cluster."""

    namespace: str = "kdra-system"
    """Namespace of kdra's own objects (leader Lease, agents' Leases, webhook Secret)."""

    metrics_port: int = 8080
    """Port of the Prometheus ``/metrics`` endpoint; 0 turns it off."""

    metrics_max_nodes: int = 100
    """Above this many nodes, the utilisation gauges (kdra_devices, kdra_pool_devices_total)
    sum over nodes and pools (their node and pool labels become <all>) instead of one series
    per node: bounded label cardinality on large clusters."""

    metrics_max_namespaces: int = 50
    """kdra_namespace_devices_allocated keeps a series for the namespaces holding the most
    devices, at most this many; the others are summed under namespace <all>."""

    malloc_trim_interval: float = 60.0
    """Seconds between returns of the C heap's free pages to the kernel (``malloc_trim``;
    glibc only): without them RSS creeps up under a steady stream of objects although live
    memory does not (kdra.kube.memory). 0 turns it off."""

    event_loop: str = "uvloop"
    """Event loop: uvloop (libuv, the default: the loop and TLS in C) or asyncio (the
    standard library's, e.g. for asyncio's debug mode). See kdra.kube.loops."""

    health_port: int = 8081
    """Port of the liveness endpoint (``/healthz``) kopf serves; 0 turns it off."""

    watch: str = "informers"
    """What delivers the watch events of the kinds the operator watches to its services:
    informers (kdra's own, one watch per kind; the default, chosen on the figures in
    bench/RESULTS.md) or kopf (the same routes as kopf event handlers). See
    kdra.operator.handlers.routes."""

    workers: int = 10
    """Concurrent reconciles per controller queue (10, as kube-controller-manager's
    resourceclaim controller)."""

    leader_elect: bool = False
    """Run several replicas with exactly one active: replicas elect a leader on the Lease
    ``kdra-operator`` in ``namespace``; standbys serve the admission webhooks only and take
    over when the leader's Lease expires."""

    leader_lease_duration: float = 15.0
    """Seconds a leader's Lease stays valid without renewal (renewed every third of it). A
    standby honours at most four times this (at least 60 s) of whatever duration a Lease
    claims, so a Lease written with an absurd one does not keep it waiting for ever."""

    identity: str = ""
    """This replica's identity in the leader Lease; empty: '<hostname>-<pid>'."""

    policy: str = "binpack"
    """Default device placement policy: binpack (fill nodes, keep others whole), spread, or
    first-fit. A pod may override it with annotation resource.kdra.dev/placement-policy."""

    prepare_timeout: float = 120.0
    """Seconds the binder waits for the node agent to report a pod's devices Ready before it
    undoes the allocation and tries another node."""

    binding_timeout: float = 600.0
    """Seconds the binder waits, from the allocation, for devices with binding conditions
    (bindingConditions in their ResourceSlice) to report them all True in the claim's
    status.devices before it undoes the allocation and tries another node (upstream's
    scheduler: bindingTimeout, 600 s). A binding failure condition that turns True undoes it
    at once."""

    preemption: bool = True
    """A pod with claims that fits nowhere may preempt (evict, through the Eviction API)
    lower-priority pods holding devices on one node, as kube-scheduler does
    (docs/tenancy.md#preemption); pods with preemptionPolicy Never never do."""

    preemption_hold: float = 120.0
    """Seconds the devices freed by a preemption stay held for the preempting pod (nominated
    to the node) before other pods may take them, unless it binds first."""

    allocation_search_steps: int = 1_000_000
    """Search steps (devices tried) the binder may spend on one pod's attempt to place its
    claims; each node's search gets at most an eighth of it (a half with two candidate nodes,
    all of it with one). A pod that finds no placement
    within it gets PodScheduled=False with reason AllocationSearchExhausted and is retried
    after a backoff. Normal pods need tens of steps; the budget only bounds adversarial
    shapes (many claims competing for the same devices), which would otherwise try every
    combination."""

    allocation_search_timeout: float = 10.0
    """Seconds one pod's allocation search may run (as upstream's scheduler filter timeout,
    DRASchedulerFilterTimeout, 10 s). A long search runs in slices beside the scheduling
    loop, so other pods are scheduled meanwhile."""

    slice_gc_grace: float = 40.0
    """Seconds a node agent's Lease may stay expired before the slice garbage collector
    deletes that agent's ResourceSlices (a restarting agent returns within it)."""

    # Admission webhooks (kdra.operator.webhooks.server).

    webhook_port: int = 8443
    """Port of the admission webhooks' HTTPS server (paths /validate, /mutate-pods,
    /healthz); 0 turns the webhooks off."""

    webhook_host: str = "0.0.0.0"
    """Address the webhook server binds to. A specific address (not 0.0.0.0 or ::) is also
    written into a generated serving certificate."""

    webhook_url: str | None = None
    """Base URL the API server calls the webhooks at, for an operator outside the cluster
    (e.g. https://127.0.0.1:8443; its host goes into a generated certificate). Unset: the
    webhook configurations name the Service kdra-webhook (port 443) in the namespace."""

    webhook_cert_dir: str | None = None
    """Directory with tls.crt, tls.key and ca.crt (as cert-manager mounts them), re-read
    periodically. Unset: the operator generates a CA and a serving certificate, keeps them in
    the Secret kdra-webhook-tls in the namespace (shared by replicas) and rotates them when
    less than a third of their validity is left."""

    webhook_client_ca: str | None = None
    """PEM file of the CA that issued the API server's client certificate for webhook calls
    (kube-apiserver's --admission-control-config-file gives the webhook admission plugins a
    kubeconfig with it; docs/security.md). Set: /validate and /mutate-pods answer only
    callers with a certificate it issued (and named in webhook_client_names); others get 403
    before their body is read. Unset: anyone who reaches the port may call them (the
    NetworkPolicy kdra-operator limits who can). /convert never asks: the API server sends
    conversion webhooks no credentials."""

    webhook_client_names: str = ""
    """Names (comma-separated) a client certificate must carry, as its common name or a DNS
    name, to call the admission webhooks. Empty: any certificate webhook_client_ca issued."""

    webhook_manage_config: bool = True
    """Create and keep up to date the MutatingWebhookConfiguration kdra-mutating and the
    ValidatingWebhookConfiguration kdra-validating, with the serving CA bundle. Where the
    operator may change only their CA bundle (in a cluster: manifests/base's policy
    kdra-operator-webhooks), it keeps that current and warns when the rest differs from its
    version (re-apply manifests/webhooks). Off: install them yourself and keep their
    caBundle current."""

    trusted_users: str = ""
    """Usernames (comma-separated) whose pod writes are kdra's own: only they may write the
    kdra-owned pod annotations (resource.kdra.dev/claim-statuses, devices.resource.kdra.dev/*,
    gpus.resource.kdra.dev/*), which the validating webhook denies to everyone else. Empty:
    system:serviceaccount:<namespace>:kdra-operator (the Deployment's ServiceAccount, which
    manifests/webhooks names) plus the operator's own username, asked of the API server at
    start-up (a SelfSubjectReview). Set it when replicas run under other identities."""


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
    """Fake inventory file (YAML: GPU profiles like '8 x H100-80GB' and arbitrary devices);
    empty: discover real GPUs through NVML."""

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

    nri_socket: str = "/var/run/nri/nri.sock"
    """The container runtime's NRI socket: the agent registers there as NRI plugin
    '10-kdra' and gives each container exactly the CDI devices of its pod's prepared claims
    (and refuses containers whose claims are not prepared). Empty turns it off; a missing
    socket is retried in the background. Never used for simulated nodes (--simulate-nodes,
    --create-nodes: there is no runtime). Without it, containers see their devices only
    through the webhook's env (not tamper-proof)."""


def add_arguments(parser: argparse.ArgumentParser,
                  settings_class: type[OperatorSettings] | type[AgentSettings] = OperatorSettings,
                  ) -> None:
    """Add one flag per settings field (defaults resolved later, see :func:`from_args`)."""
    docs = _docs(settings_class)
    for item in fields(settings_class):
        flag = "--" + item.name.replace("_", "-")
        extra: dict[str, Any] = {}
        if str(item.type) == "bool":
            extra = {"nargs": "?", "const": "true", "metavar": "BOOL"}
        elif item.metadata.get("multi"):
            extra = {"nargs": "+"}
        parser.add_argument(flag, dest=item.name, default=None, help=docs.get(item.name),
                            **extra)


def from_args(args: argparse.Namespace) -> OperatorSettings:
    settings: OperatorSettings = _from_args(args, OperatorSettings)
    return settings


def agent_from_args(args: argparse.Namespace) -> AgentSettings:
    settings: AgentSettings = _from_args(args, AgentSettings)
    return settings


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{raw!r} is not a boolean (true/false)")


def _from_args(args: argparse.Namespace, settings_class: type[Any]) -> Any:
    values: dict[str, Any] = {}
    converters: dict[str, Any] = {"int": int, "float": float, "bool": _bool}
    for item in fields(settings_class):
        raw = getattr(args, item.name, None)
        if isinstance(raw, list):
            raw = " ".join(raw)
        for env in (f"KDRA_{item.name.upper()}", *item.metadata.get("env", ())):
            if raw is None:
                raw = os.environ.get(env)
        if raw is None:
            continue
        convert = converters.get(str(item.type))
        values[item.name] = convert(raw) if convert else raw
    return settings_class(**values)


def _docs(settings_class: type[Any] = OperatorSettings) -> dict[str, str]:
    """Field docstrings, read from this module's source (for ``--help``)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(settings_class))
    docs: dict[str, str] = {}
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    for node, nxt in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs
