"""Settings of the operator (``kdra operator``, and ``kdra webhooks``): one frozen object,
built once at start-up.

Each field comes from a command-line flag, falling back to an environment variable
(``KDRA_<FIELD>`` upper-cased), falling back to the default documented here
(:mod:`kdra.kube.flags`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from kdra.kube import flags


@dataclass(frozen=True)
class OperatorSettings:
    kubeconfig: str | None = None
    """Path of a kubeconfig; unset: ``$KUBECONFIG``, ``~/.kube/config``, then in-cluster."""

    namespace: str = "kdra-system"
    """Namespace of kdra's own objects (leader Lease, agents' Leases, webhook Secret)."""

    flavour: str = ""
    """API flavour: native (resource.k8s.io/v1 objects, pods' spec.resourceClaims and
    status.resourceClaimStatuses) or kdra (kdra's CRDs in resource.kdra.dev and the pod
    annotations resource.kdra.dev/claims, claim-statuses). Unset or auto: native where the
    API server serves resource.k8s.io/v1, else kdra (kdra.kube.flavour)."""

    claim_controller: str = "auto"
    """Native flavour: whether kdra generates pods' claims from templates and releases them
    (the drop-in replacement of kube-controller-manager's resourceclaim-controller; on), leaves
    both to kube-controller-manager's controller (off), or does it unless that controller is
    seen running (auto: its ServiceAccount kube-system/resource-claim-controller exists, or a
    claim generated since start-up was created by someone else), in which case kdra says so
    once and leaves it. The kdra flavour always runs kdra's controller."""

    metrics_port: int = 8080
    """Port of the Prometheus ``/metrics`` endpoint; 0 turns it off."""

    metrics_max_nodes: int = 100
    """Above this many nodes, the utilisation gauges (kdra_devices, kdra_pool_devices)
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

    kopf_reconcile_period: float = 60.0
    """With ``watch`` kopf: seconds between two LISTs of every watched kind compared with
    the caches, which deliver the deletions kopf's watches do not (a kopf re-list delivers
    the objects listed, never the ones gone meanwhile); the first runs a few seconds after
    the start. Ignored with the informers (their re-lists deliver deletions themselves)."""

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

    scheduler_for_claims: str = "namespaces"
    """Native flavour: which pods with spec.resourceClaims the mutating webhook gives
    schedulerName kdra-scheduler (when unset or default-scheduler): all, namespaces (only in
    namespaces labelled resource.kdra.dev/scheduler=kdra-scheduler; the default) or none
    (kube-scheduler keeps them; pods ask for kdra-scheduler themselves). In the kdra flavour
    every pod with the claims annotation gets it."""

    trusted_users: str = ""
    """Usernames (comma-separated) whose pod writes are kdra's own: only they may write the
    kdra-owned pod annotations (resource.kdra.dev/claim-statuses, devices.resource.kdra.dev/*,
    gpus.resource.kdra.dev/*), which the validating webhook denies to everyone else. Empty:
    system:serviceaccount:<namespace>:kdra-operator (the Deployment's ServiceAccount, which
    manifests/webhooks names) plus the operator's own username, asked of the API server at
    start-up (a SelfSubjectReview). Set it when replicas run under other identities."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per field of :class:`OperatorSettings`."""
    flags.add_arguments(parser, OperatorSettings)


def from_args(args: argparse.Namespace) -> OperatorSettings:
    settings: OperatorSettings = flags.settings_from_args(args, OperatorSettings)
    return settings
