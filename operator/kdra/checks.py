"""``kdra check`` whole: the cluster's invariants (the CLI's, :mod:`kdra.cli.core.invariants`)
and, for the nodes whose directories are given, the node agents' disks (the agent's,
:mod:`kdra.agent.core.node_check` over what :mod:`kdra.agent.check` reads).

The programs do not import each other: this module, beside the ``kdra`` command
(:mod:`kdra.main`), is where the two halves meet. The fault-injection tests and the soak
benchmark check through it too.

Invariants:
- :func:`check` with ``local=None`` is the cluster's check alone; with ``local`` it adds the
  node-local rules for ``local.nodes`` only. The result is sorted (rule, then message).
- :func:`run_check` keeps ``kdra check``'s exit codes: 0 clean, 1 violations, 2 could not read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from kdra.agent.check import CHECKPOINT_PREFIX, read_local
from kdra.agent.core.node_check import RULES as NODE_RULES
from kdra.agent.core.node_check import NodeLocal, node_violations
from kdra.cli import check as cluster
from kdra.cli.check import read_cluster
from kdra.cli.core import invariants
from kdra.cli.core.forged import Sources
from kdra.cli.core.invariants import NodeRules, Violation
from kdra.kube.core.flavours import KDRA, Flavour

JSON = Mapping[str, Any]

RULES = (*invariants.RULES, *NODE_RULES)
"""Every rule ``kdra check`` knows: the cluster's, then the node-local ones."""

__all__ = ["CHECKPOINT_PREFIX", "RULES", "NodeLocal", "Violation", "check", "read_cluster",
           "read_local", "run_check", "violations"]


def _rules(local: NodeLocal | None) -> NodeRules | None:
    return None if local is None else partial(node_violations, local=local)


def check(*, pods: Iterable[JSON] = (), claims: Iterable[JSON] = (),
          slices: Iterable[JSON] = (), nodes: Iterable[JSON] = (), leases: Iterable[JSON] = (),
          local: NodeLocal | None = None, now: dt.datetime | None = None,
          lease_grace: float = 40.0, env_sources: Sources | None = None,
          flavour: Flavour = KDRA) -> list[Violation]:
    """Every violated invariant of the given cluster state (read in ``flavour``) and
    node-local state."""
    return invariants.check(pods=pods, claims=claims, slices=slices, nodes=nodes,
                            leases=leases, node_rules=_rules(local), now=now,
                            lease_grace=lease_grace, env_sources=env_sources, flavour=flavour)


def violations(api: Any, *, local: NodeLocal | None = None, namespace: str = "kdra-system",
               lease_grace: float | None = None, unreadable: list[str] | None = None,
               notes: list[str] | None = None) -> list[Violation]:
    """Read the cluster through ``api`` and check it, with ``local``'s nodes."""
    return cluster.violations(api, node_rules=_rules(local), namespace=namespace,
                              lease_grace=lease_grace, unreadable=unreadable, notes=notes)


def run_check(*, kubeconfig: str | None, cdi_dirs: Sequence[str], state_dirs: Sequence[str],
              nodes: Sequence[str], namespace: str, lease_grace: float | None,
              output: str, context: str | None = None, flavour: str = "auto") -> int:
    """``kdra check``: the cluster, plus the nodes on disk when directories are given."""
    local = None
    if cdi_dirs or state_dirs:
        found = read_local([Path(d) for d in cdi_dirs], [Path(d) for d in state_dirs], nodes)
        local = cluster.LocalCheck(found.nodes, partial(node_violations, local=found))
    return cluster.run_check(kubeconfig=kubeconfig, namespace=namespace,
                             lease_grace=lease_grace, output=output, context=context,
                             local=local, flavour=flavour)
