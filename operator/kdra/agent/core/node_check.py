"""The node-local invariants of ``kdra check``: what a node agent keeps on disk (checkpoints,
CDI spec files) agrees with the claims in the API server — the agent's side of
:mod:`kdra.checks` (the cluster's side is :mod:`kdra.cli.core.invariants`).

The rules (the first element of each violation):

``not-prepared``
    Every claim allocated to the node's pool and reserved has a checkpoint entry
    ``prepared``, recording the allocation's devices, and its CDI spec file(s).
``stale-checkpoint``
    No checkpoint entry exists for a claim that is gone or not allocated to the node and
    reserved.
``unfinished-prepare``
    No entry of a claim that should be prepared is left ``preparing``.
``orphan-cdi``
    No CDI spec file of the node belongs to a claim not prepared there.

Invariants: pure (the files are read by :mod:`kdra.agent.check`); it never raises on
malformed objects or files (a malformed piece is skipped or reported); only the nodes in
:class:`NodeLocal` are checked.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kdra.agent.core.cdi import CLAIM_UID_ANNOTATION, NODE_ANNOTATION, cdi_file_name
from kdra.agent.core.nodeprep import our_results, wants_prepared
from kdra.kube.core.objects import allocation_results, metadata, object_name

JSON = Mapping[str, Any]

RULES = ("not-prepared", "stale-checkpoint", "unfinished-prepare", "orphan-cdi")


@dataclass(frozen=True)
class NodeLocal:
    """What node agents keep on disk, for the nodes in ``nodes``.

    ``cdi_specs``: CDI spec file name → parsed spec (kdra's specs carry ``kdra.dev/node`` and
    ``kdra.dev/claim-uid`` annotations; files of nodes outside ``nodes`` are ignored).
    ``checkpoints``: node → the checkpoint's ``claims`` mapping (claim UID → entry with
    ``namespace``, ``name``, ``state``, ``devices``, ``cdiFiles``); a node without a checkpoint
    file has prepared nothing.
    """

    nodes: frozenset[str]
    cdi_specs: Mapping[str, JSON] = field(default_factory=dict)
    checkpoints: Mapping[str, Mapping[str, JSON]] = field(default_factory=dict)


def node_violations(claims: Sequence[JSON], local: NodeLocal) -> list[tuple[str, str]]:
    """(rule, message) of every broken node-local rule, for the nodes of ``local``."""
    found: list[tuple[str, str]] = []
    by_uid = {metadata(c).get("uid"): c for c in claims}
    wanted: dict[tuple[str, str], JSON] = {}  # (node, claim uid) → claim
    for claim in claims:
        pools = {(str(r.get("driver")), str(r.get("pool"))) for r in allocation_results(claim)}
        for driver, node in pools:
            if node in local.nodes and wants_prepared(claim, node, [driver]):
                wanted[(node, str(metadata(claim).get("uid")))] = claim
    for (node, uid), claim in sorted(wanted.items(), key=lambda kv: kv[0]):
        drivers = {str(r.get("driver")) for r in allocation_results(claim) if r.get("pool") == node}
        entry = (local.checkpoints.get(node) or {}).get(uid)
        who = f"claim {object_name(claim)} on node {node}"
        if not isinstance(entry, Mapping) or entry.get("state") != "prepared":
            state = "no checkpoint entry" if entry is None else f"entry {entry.get('state')!r}"
            found.append(("not-prepared", f"{who} is allocated and reserved but its "
                          f"checkpoint has {state}"))
        expected = {cdi_file_name(driver, uid) for driver in drivers}
        results = {r.key for r in our_results(claim, node, drivers)}
        if isinstance(entry, Mapping):
            recorded = {(str(d.get("driver")), str(d.get("pool")), str(d.get("device")))
                        for d in entry.get("devices") or () if isinstance(d, Mapping)}
            if entry.get("state") == "prepared" and recorded != results:
                found.append(("not-prepared", f"{who}: the checkpoint records "
                              f"devices {sorted('/'.join(d) for d in recorded)}, the "
                              f"allocation {sorted('/'.join(d) for d in results)}"))
        for file in sorted(expected):
            cdi_spec = local.cdi_specs.get(file)
            annotations = (cdi_spec or {}).get("annotations") or {}
            if cdi_spec is None or annotations.get(NODE_ANNOTATION) != node:
                found.append(("not-prepared", f"{who} has no CDI spec file {file}"))
    for node in sorted(local.nodes):
        for uid, entry in sorted((local.checkpoints.get(node) or {}).items()):
            if not isinstance(entry, Mapping):
                continue
            ref = f"{entry.get('namespace')}/{entry.get('name')} (uid {uid})"
            if (node, uid) not in wanted:
                why = ("is gone" if by_uid.get(uid) is None
                       else "is not allocated to the node and reserved")
                found.append(("stale-checkpoint", f"node {node}'s checkpoint holds "
                              f"claim {ref}, which {why}"))
            elif entry.get("state") != "prepared":
                found.append(("unfinished-prepare", f"node {node}'s checkpoint holds "
                              f"claim {ref} in state {entry.get('state')!r}"))
    for file, cdi_spec in sorted(local.cdi_specs.items()):
        annotations = cdi_spec.get("annotations") if isinstance(cdi_spec, Mapping) else None
        if not isinstance(annotations, Mapping):
            continue
        owner = str(annotations.get(NODE_ANNOTATION))
        uid = str(annotations.get(CLAIM_UID_ANNOTATION))
        if owner not in local.nodes:
            continue
        held = (local.checkpoints.get(owner) or {}).get(uid)
        files = (held.get("cdiFiles") or ()) if isinstance(held, Mapping) else ()
        if (owner, uid) not in wanted or file not in files:
            found.append(("orphan-cdi", f"CDI spec file {file} of node {owner} "
                          f"belongs to claim uid {uid}, which is not prepared there"))
    return found
