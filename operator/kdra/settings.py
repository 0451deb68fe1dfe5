"""The operator's settings: one frozen object, built once at start-up.

Each field comes from a command-line flag, falling back to an environment variable
(``KDRA_<FIELD>`` upper-cased), falling back to the default documented here.
"""

from __future__ import annotations

import argparse
import itertools
import os
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class OperatorSettings:
    kubeconfig: str | None = None
    """Path of a kubeconfig; unset: ``$KUBECONFIG``, ``~/.kube/config``, then in-cluster."""

    namespace: str = "kdra-system"
    """Namespace of kdra's own objects (Leases, peering, webhook Secret)."""

    metrics_port: int = 8080
    """Port of the Prometheus ``/metrics`` endpoint; 0 turns it off."""

    health_port: int = 8081
    """Port of the liveness endpoint (``/healthz``) kopf serves; 0 turns it off."""

    workers: int = 4
    """Concurrent reconciles per controller queue."""

    peering: str = ""
    """kopf peering name for running several replicas with exactly one active; empty:
    standalone (one replica)."""

    priority: int = 0
    """This replica's peering priority: the highest live priority is the active one."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per settings field (defaults resolved later, see :func:`from_args`)."""
    docs = _docs()
    for field in fields(OperatorSettings):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, dest=field.name, default=None, help=docs.get(field.name))


def from_args(args: argparse.Namespace) -> OperatorSettings:
    values: dict[str, Any] = {}
    for field in fields(OperatorSettings):
        raw = getattr(args, field.name, None)
        if raw is None:
            raw = os.environ.get(f"KDRA_{field.name.upper()}")
        if raw is None:
            continue
        values[field.name] = int(raw) if field.type in ("int", int) else raw
    return OperatorSettings(**values)


def _docs() -> dict[str, str]:
    """Field docstrings, read from this module's source (for ``--help``)."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(OperatorSettings))
    docs: dict[str, str] = {}
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    for node, nxt in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    return docs
