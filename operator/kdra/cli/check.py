"""``kdra check``: read the cluster (and optionally a node agent's directories) and report
every broken invariant (:mod:`kdra.cli.core.invariants`).

A one-shot command, so it uses the official ``kubernetes`` client synchronously (no event
loop, no caches): LIST pods, ResourceClaims, ResourceSlices, Nodes and the agents' Leases,
page by page, as plain dicts; then GET the ConfigMaps and Secrets that pods on kdra's nodes
read their environment from (``envFrom``: a source that sets ``NVIDIA_VISIBLE_DEVICES`` is a
``forged-env`` violation), at most :data:`MAX_ENV_SOURCES`. The node-local part reads CDI
spec files (``kdra.dev-*.json``) and checkpoints (``checkpoint-<node>.json``) from the
directories given.

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
from pathlib import Path
from typing import Any

from kdra import GROUP, VERSION
from kdra.agent.core.cdi import CDI_FILE_PREFIX, NODE_ANNOTATION
from kdra.checks import NodeLocal
from kdra.cli.core.forged import Sources, env_sources
from kdra.cli.core.invariants import Violation, check
from kdra.kube.core.printable import MAX_LINE, printable
from kdra.kube.readers import UnreadableList, api_client, list_all

JSON = dict[str, Any]
CHECKPOINT_PREFIX = "checkpoint-"
MAX_ENV_SOURCES = 500
"""ConfigMaps and Secrets read for the device variables they may give pods (one GET each)."""


def read_cluster(api: Any, namespace: str = "kdra-system",
                 unreadable: list[str] | None = None) -> dict[str, list[JSON]]:
    """Pods, claims, slices, nodes and agent Leases, as :func:`check` takes them. Objects
    that cannot be decoded are left out and described in ``unreadable`` (kind first)."""
    import kubernetes

    from kdra.kube.core.agent_leases import AGENT_LEASE_LABEL

    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    coordination = kubernetes.client.CoordinationV1Api(api)
    bad: dict[str, list[str]] = {}

    def read(kind: str, call: Any, *args: str, **kwargs: Any) -> list[JSON]:
        return list_all(call, *args, unreadable=bad.setdefault(kind, []), **kwargs)

    state = {
        "pods": read("Pod", core.list_pod_for_all_namespaces),
        "claims": read("ResourceClaim", custom.list_cluster_custom_object, GROUP, VERSION,
                       "resourceclaims"),
        "slices": read("ResourceSlice", custom.list_cluster_custom_object, GROUP, VERSION,
                       "resourceslices"),
        "nodes": read("Node", core.list_node),
        "leases": read("Lease", coordination.list_namespaced_lease, namespace,
                       label_selector=f"{AGENT_LEASE_LABEL}=true"),
    }
    if unreadable is not None:
        unreadable.extend(f"{kind} {what}" for kind, items in bad.items() for what in items)
    return state


def read_local(cdi_dirs: Iterable[Path], state_dirs: Iterable[Path],
               nodes: Iterable[str] = ()) -> NodeLocal:
    """CDI specs and checkpoints found in the directories. The nodes checked are ``nodes``
    plus every node with a checkpoint file or a CDI spec there."""
    specs: dict[str, JSON] = {}
    for directory in cdi_dirs:
        for path in sorted(Path(directory).glob(f"{CDI_FILE_PREFIX}*.json")):
            try:
                data = json.loads(path.read_bytes())
            except (OSError, ValueError):
                data = {"annotations": {}}
            specs[path.name] = data if isinstance(data, dict) else {"annotations": {}}
    checkpoints: dict[str, dict[str, JSON]] = {}
    for directory in state_dirs:
        for path in sorted(Path(directory).glob(f"{CHECKPOINT_PREFIX}*.json")):
            node = path.name.removeprefix(CHECKPOINT_PREFIX).removesuffix(".json")
            try:
                data = json.loads(path.read_bytes())
            except (OSError, ValueError):
                data = {}
            claims = data.get("claims") if isinstance(data, dict) else None
            checkpoints[node] = dict(claims) if isinstance(claims, dict) else {}
    named = {str((spec.get("annotations") or {}).get(NODE_ANNOTATION))
             for spec in specs.values() if (spec.get("annotations") or {}).get(NODE_ANNOTATION)}
    return NodeLocal(frozenset({*nodes, *checkpoints, *named}), specs, checkpoints)


def read_env_sources(api: Any, pods: Iterable[JSON], slices: Iterable[JSON],
                     notes: list[str] | None = None) -> Sources:
    """The data of the ConfigMaps and Secrets that can set a device variable in a pod bound
    to a node kdra's slices name (``envFrom``, ``valueFrom``: :func:`env_sources`), at most
    :data:`MAX_ENV_SOURCES` of them. One that does not exist is skipped (the container could
    not start with it); one that cannot be read is said in ``notes``."""
    import kubernetes

    nodes = {str((s.get("spec") or {}).get("nodeName")) for s in slices}
    wanted: set[tuple[str, str, str]] = set()
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") in nodes and \
                (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            wanted |= env_sources(pod)
    core = kubernetes.client.CoreV1Api(api)
    sources: dict[tuple[str, str, str], dict[str, str]] = {}
    for namespace, kind, name in sorted(wanted)[:MAX_ENV_SOURCES]:
        read: Any = core.read_namespaced_config_map if kind == "ConfigMap" \
            else core.read_namespaced_secret
        try:
            obj = json.loads(read(name, namespace, _preload_content=False).data)
        except kubernetes.client.exceptions.ApiException as exc:
            if exc.status != 404 and notes is not None:
                notes.append(f"cannot read {kind} {namespace}/{name} ({exc.status} "
                             f"{exc.reason}): the environment it gives pods is not checked")
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


def violations(api: Any, *, local: NodeLocal | None = None, namespace: str = "kdra-system",
               lease_grace: float | None = None, unreadable: list[str] | None = None,
               notes: list[str] | None = None) -> list[Violation]:
    """Read the cluster through ``api`` and check it (see :func:`read_cluster` for
    ``unreadable``, :func:`read_env_sources` for ``notes``)."""
    state = read_cluster(api, namespace, unreadable)
    now = dt.datetime.now(dt.UTC) if lease_grace is not None else None
    sources = read_env_sources(api, state["pods"], state["slices"], notes)
    return check(**state, local=local, now=now, lease_grace=lease_grace or 0.0,
                 env_sources=sources)


def run_check(*, kubeconfig: str | None, cdi_dirs: list[str], state_dirs: list[str],
              nodes: list[str], namespace: str, lease_grace: float | None,
              output: str, context: str | None = None) -> int:
    import kubernetes
    import urllib3

    try:
        api = api_client(kubeconfig, context)
    except Exception as exc:  # any kubeconfig / in-cluster configuration problem
        print(f"kdra check: no cluster configuration: {printable(exc, MAX_LINE)}",
              file=sys.stderr)
        return 2
    local = None
    if cdi_dirs or state_dirs:
        local = read_local([Path(d) for d in cdi_dirs], [Path(d) for d in state_dirs], nodes)
    unreadable: list[str] = []
    notes: list[str] = []
    try:
        found = violations(api, local=local, namespace=namespace, lease_grace=lease_grace,
                           unreadable=unreadable, notes=notes)
    except kubernetes.client.exceptions.ApiException as exc:
        print(f"kdra check: the API server answered {exc.status} "
              f"{printable(exc.reason, MAX_LINE)}",
              file=sys.stderr)
        return 2
    except (UnreadableList, OSError, ValueError, urllib3.exceptions.HTTPError) as exc:
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
