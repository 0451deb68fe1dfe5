"""A node agent's disk, read for ``kdra check --cdi-dir/--state-dir``: its CDI spec files and
checkpoints, as the node-local rules take them (:mod:`kdra.agent.core.node_check`).

Invariants: reading never fails on a file: one that cannot be read or parsed counts as empty
(a CDI spec without annotations, a checkpoint without claims), so the rules report what is
missing instead of the check stopping.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kdra.agent.core.cdi import CDI_FILE_PREFIX, NODE_ANNOTATION
from kdra.agent.core.node_check import NodeLocal

JSON = dict[str, Any]
CHECKPOINT_PREFIX = "checkpoint-"


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
