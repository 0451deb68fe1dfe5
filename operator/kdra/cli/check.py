"""``kdra check`` (and ``kubectl kdra check``): read the cluster and report every broken
invariant (:mod:`kdra.cli.core.invariants`).

A one-shot command, so it reads synchronously, as the user (no event loop, no caches;
:class:`kdra.kube.reader.Reader`, as ``kubectl kdra``): LIST pods, ResourceClaims,
ResourceSlices, Nodes and the agents' Leases, page by page, as plain dicts; then GET the
ConfigMaps and Secrets that pods on kdra's nodes read their environment from (``envFrom``: a
source that sets ``NVIDIA_VISIBLE_DEVICES`` is a ``forged-env`` violation), at most
:data:`MAX_ENV_SOURCES`. A node agent's directories (CDI spec files, checkpoints) are the
agent's to read and check: ``kdra check --cdi-dir/--state-dir`` brings their rules in as a
:class:`LocalCheck` (:mod:`kdra.checks`).

Violations name objects by what the cluster says (names, values), so every line printed
goes through :func:`kdra.kube.core.printable.printable` (JSON escapes by its own rules).

Exit code: 0 when every invariant holds, 1 when any is violated, 2 when the cluster could not
be read or held objects that cannot be decoded (the check cannot vouch for them; the
violations found among the rest are printed all the same).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kdra.cli.core.forged import Sources, env_sources
from kdra.cli.core.invariants import NodeRules, Violation, check
from kdra.kube.core.agent_leases import AGENT_LEASE_LABEL
from kdra.kube.core.flavours import KDRA, Flavour, flavour_named
from kdra.kube.core.native_pods import CLAIM_CONTROLLER_ACCOUNT
from kdra.kube.core.printable import MAX_LINE, printable
from kdra.kube.reader import (
    CONFIGMAPS,
    LEASES,
    NODES,
    PODS,
    SECRETS,
    SERVICEACCOUNTS,
    ClusterError,
    DraKinds,
    NotFound,
    Reader,
    Unreadable,
)

JSON = dict[str, Any]
MAX_ENV_SOURCES = 500
"""ConfigMaps and Secrets read for the device variables they may give pods (one GET each)."""


@dataclass(frozen=True)
class LocalCheck:
    """The node-local part of a check: the nodes whose disks it covers, and its rules."""

    nodes: frozenset[str]
    rules: NodeRules


def read_cluster(api: Reader, namespace: str = "kdra-system",
                 unreadable: list[str] | None = None,
                 flavour: Flavour = KDRA) -> dict[str, list[JSON]]:
    """Pods, claims, slices, nodes and agent Leases, as :func:`check` takes them (claims
    and slices of the ``flavour``'s kinds). Objects that cannot be decoded are left out and
    described in ``unreadable`` (kind first)."""
    bad: dict[str, list[str]] = {}
    kinds = DraKinds.of(flavour)
    state = {
        "pods": api.list(PODS, unreadable=bad.setdefault("Pod", [])),
        "claims": api.list(kinds.claims, unreadable=bad.setdefault("ResourceClaim", [])),
        "slices": api.list(kinds.slices, unreadable=bad.setdefault("ResourceSlice", [])),
        "nodes": api.list(NODES, unreadable=bad.setdefault("Node", [])),
        "leases": api.list(LEASES, namespace, label_selector=f"{AGENT_LEASE_LABEL}=true",
                           unreadable=bad.setdefault("Lease", [])),
    }
    if unreadable is not None:
        unreadable.extend(f"{kind} {what}" for kind, items in bad.items() for what in items)
    return state


def read_env_sources(api: Reader, pods: Iterable[JSON], slices: Iterable[JSON],
                     notes: list[str] | None = None) -> Sources:
    """The data of the ConfigMaps and Secrets that can set a device variable in a pod bound
    to a node kdra's slices name (``envFrom``, ``valueFrom``: :func:`env_sources`), at most
    :data:`MAX_ENV_SOURCES` of them. One that does not exist is skipped (the container could
    not start with it); one that cannot be read is said in ``notes``."""
    nodes = {str((s.get("spec") or {}).get("nodeName")) for s in slices}
    wanted: set[tuple[str, str, str]] = set()
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") in nodes and \
                (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            wanted |= env_sources(pod)
    sources: dict[tuple[str, str, str], dict[str, str]] = {}
    for namespace, kind, name in sorted(wanted)[:MAX_ENV_SOURCES]:
        try:
            obj = api.get(CONFIGMAPS if kind == "ConfigMap" else SECRETS, name, namespace)
        except NotFound:
            continue
        except Unreadable as exc:
            if notes is not None:
                notes.append(f"cannot read {kind} {namespace}/{name} ({exc.status}: "
                             f"{exc.message}): the environment it gives pods is not checked")
            continue
        data = obj.get("data") if isinstance(obj, dict) else None
        sources[(namespace, kind, name)] = {
            str(key): (base64.b64decode(str(value)).decode(errors="replace")
                       if kind == "Secret" else str(value))
            for key, value in (data if isinstance(data, dict) else {}).items()}
    if len(wanted) > MAX_ENV_SOURCES and notes is not None:
        notes.append(f"{len(wanted) - MAX_ENV_SOURCES} more ConfigMaps/Secrets that pods' "
                     "environment reads are not checked")
    return sources


def violations(api: Reader, *, node_rules: NodeRules | None = None, namespace: str = "kdra-system",
               lease_grace: float | None = None, unreadable: list[str] | None = None,
               notes: list[str] | None = None, flavour: Flavour | None = None) -> list[Violation]:
    """Read the cluster through ``api`` and check it (see :func:`read_cluster` for
    ``unreadable``, :func:`read_env_sources` for ``notes``), in ``flavour`` (None: the one
    the cluster has, :meth:`kdra.kube.reader.Reader.flavour`, said in ``notes``)."""
    if flavour is None:
        flavour = api.flavour()
        if notes is not None:
            notes.append(f"read the {flavour.name} flavour ({flavour.api_version})")
    if notes is not None and flavour.upstream_controllers:
        notes.extend(upstream_claim_controller(api))
    state = read_cluster(api, namespace, unreadable, flavour)
    now = dt.datetime.now(dt.UTC) if lease_grace is not None else None
    sources = read_env_sources(api, state["pods"], state["slices"], notes)
    return check(**state, node_rules=node_rules, now=now, lease_grace=lease_grace or 0.0,
                 env_sources=sources, flavour=flavour)


def upstream_claim_controller(api: Reader) -> list[str]:
    """A note when kube-controller-manager's resourceclaim-controller looks active (its
    ServiceAccount exists): kdra's operator (``--claim-controller=auto``) then leaves claim
    generation and clean-up to it (kdra.operator.claim_owner)."""
    namespace, name = CLAIM_CONTROLLER_ACCOUNT
    try:
        api.get(SERVICEACCOUNTS, name, namespace)
    except (NotFound, Unreadable):
        return []  # absent, or not readable here: nothing to say
    return [f"kube-controller-manager's resourceclaim-controller appears to run (its "
            f"ServiceAccount {namespace}/{name} exists): kdra's operator, with "
            "--claim-controller=auto, leaves claim generation and clean-up to it"]


def run_check(*, kubeconfig: str | None, namespace: str, lease_grace: float | None,
              output: str, context: str | None = None, local: LocalCheck | None = None,
              flavour: str = "auto") -> int:
    try:
        api = Reader(kubeconfig, context)
    except Exception as exc:  # any kubeconfig / in-cluster configuration problem
        print(f"kdra check: no cluster configuration: {printable(exc, MAX_LINE)}",
              file=sys.stderr)
        return 2
    unreadable: list[str] = []
    notes: list[str] = []
    try:
        found = violations(api, node_rules=local.rules if local else None, namespace=namespace,
                           lease_grace=lease_grace, unreadable=unreadable, notes=notes,
                           flavour=None if flavour in ("", "auto") else flavour_named(flavour))
    except Unreadable as exc:
        print(f"kdra check: the API server answered: {printable(exc, MAX_LINE)}",
              file=sys.stderr)
        return 2
    except (ClusterError, OSError, ValueError) as exc:
        print(f"kdra check: cannot read the cluster: {printable(exc, MAX_LINE)}",
              file=sys.stderr)
        return 2
    except Exception as exc:  # bad data nobody foresaw: still "could not check", not 1
        print(f"kdra check: checking failed ({type(exc).__name__}: {printable(exc, 300)})",
              file=sys.stderr)
        return 2
    finally:
        api.close()
    if output == "json":
        print(json.dumps([{"rule": v.rule, "message": v.message} for v in found], indent=2))
    else:
        for violation in found:
            print(printable(violation, MAX_LINE))
        checked = "cluster" + (f" and {len(local.nodes)} node(s) on disk" if local else "")
        print(f"{len(found)} violation(s) in the {checked}", file=sys.stderr)
    for note in notes:
        print(f"kdra check: {printable(note, MAX_LINE)}", file=sys.stderr)
    for what in unreadable:
        print(f"kdra check: cannot decode {printable(what, MAX_LINE)}; not checked",
              file=sys.stderr)
    if unreadable:
        return 2
    return 1 if found else 0
