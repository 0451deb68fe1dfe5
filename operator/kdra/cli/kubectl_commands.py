"""The commands of ``kubectl kdra``: read the cluster as the user, build a view, print it.

Each command reads what it needs with :class:`kdra.kube.reader.Reader` (the user's
kubeconfig and RBAC) — the DRA kinds where the cluster's API flavour has them (native
``resource.k8s.io/v1`` or kdra's CRDs: :meth:`Reader.flavour`; ``--flavour`` to choose) —,
hands plain dicts to a pure view (``kdra.cli.core``, ``kdra.dra.usage``)
and prints a table (default), JSON or YAML:

- ``free`` — :func:`kdra.dra.usage.utilisation.utilisation`: per class, node and pool;
- ``describe`` — :func:`kdra.cli.core.describe.describe`: per device, and each claim;
- ``why POD`` — :func:`kdra.cli.core.why.explain_pod`, within kdra-scheduler's search budget
  (:class:`kdra.dra.scheduling.SearchBudget`, default or ``--search-steps``), with the
  namespace's DeviceQuotas (the binder's check) and templates (a missing one is named);
- ``top`` — :func:`kdra.dra.usage.utilisation.top`: per namespace and pod;
- ``check`` — ``kdra check`` (:mod:`kdra.cli.check`), as is.

Invariants:
- A kind the user may not read never stops a command that can do without it: the command
  prints what it could build and, on stderr (and under ``notes`` in JSON/YAML), one line per
  kind it could not read and what that means for the figures. Only a kind the view cannot do
  without (the slices for ``free``, the pod for ``why``) makes it fail (exit 1).
- ``free`` and ``why`` see the slices kdra-scheduler sees: a node's slice in another node's
  pool is left out, with a note naming it (:mod:`kdra.kube.core.pool_ownership`).
- Nothing from the cluster reaches the terminal raw: the views' text escapes control
  sequences (:mod:`kdra.kube.core.printable`), and so do the notes and error lines printed here;
  JSON and YAML escape them by their own rules.
- Colour only when asked for or when stdout is a terminal (and ``NO_COLOR`` is unset); the
  layout is the same either way.
- Exit codes: 0 shown, 1 could not (cluster unreachable, essential kind unreadable — for
  ``why`` the pod's namespace's claims too —, pod or ``free --class`` not found), 2 a bad
  argument (argparse); ``check`` keeps its own (0 / 1 violations / 2 cannot read).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from kdra.cli.core.describe import describe, render
from kdra.cli.core.tables import Painter, table
from kdra.cli.core.why import explain_pod
from kdra.cli.core.why_render import render_why
from kdra.dra.allocator import Snapshot
from kdra.dra.errors import InvalidObject
from kdra.dra.models import parse_class, parse_slice
from kdra.dra.scheduling import SearchBudget
from kdra.dra.usage.claims import claims_of
from kdra.dra.usage.utilisation import NO_CLASS, top, utilisation
from kdra.kube.core.flavours import KDRA, Flavour
from kdra.kube.core.pool_ownership import foreign_pool
from kdra.kube.core.printable import MAX_LINE, printable
from kdra.kube.reader import (
    NODES,
    PODS,
    QUOTAS,
    ClusterError,
    DraKinds,
    Kind,
    NotFound,
    Reader,
    Unreadable,
)

JSON = dict[str, Any]
GREEN, RED, YELLOW = "32", "31", "33"


class Session:
    """One command's reads, with the notes on what could not be read."""

    def __init__(self, reader: Reader, flavour: Flavour = KDRA) -> None:
        self.reader = reader
        self.flavour = flavour
        self.kinds = DraKinds.of(flavour)
        """Where the DRA kinds are read (the cluster's API flavour, or ``--flavour``)."""
        self.notes: list[str] = []

    def optional(self, kind: Kind, namespace: str | None = None, *,
                 meaning: str = "") -> list[JSON] | None:
        """The list, or None (with a note saying what is missing and what it means)."""
        try:
            return self.reader.list(kind, namespace)
        except Unreadable as exc:
            self.notes.append(f"{exc}" + (f" — {meaning}" if meaning else ""))
            return None

    def own_pools(self, slices: list[JSON] | None) -> list[JSON] | None:
        """``slices`` without those of a node in another node's pool, which kdra-scheduler
        ignores (:mod:`kdra.kube.core.pool_ownership`), each named in a note."""
        if slices is None:
            return None
        nodes = {str((n.get("metadata") or {}).get("name"))
                 for n in self.optional(NODES, meaning="no slice is judged by its pool") or []}
        kept = []
        for obj in slices:
            why = foreign_pool(obj, nodes.__contains__)
            if why is None:
                kept.append(obj)
            else:
                self.notes.append(f"ignored {why}")
        return kept

    def claims(self, namespace: str | None = None, fallback: str | None = None, *,
               need_fallback: bool = False) -> list[JSON]:
        """The claims of ``namespace`` (unreadable: the command fails), or of every namespace
        — falling back, for a user who may not list them all, to ``fallback`` (default: the
        context's namespace), with a note: devices held by claims the user cannot see then
        count as free. ``need_fallback``: the fallback namespace's claims are essential (a
        pod's own claims): unreadable, the command fails saying so."""
        if namespace is not None:
            return self.reader.list(self.kinds.claims, namespace)
        own = fallback or self.reader.namespace
        found = self.optional(self.kinds.claims,
                              meaning=f"only namespace {own}'s claims are counted; "
                              "devices held by claims of other namespaces show as free")
        if found is not None:
            return found
        if need_fallback:
            return self.reader.list(self.kinds.claims, own)
        return self.optional(self.kinds.claims, own) or []


# --------------------------------------------------------------------------- output


def wants_colour(mode: str, stream: TextIO) -> bool:
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def emit(args: argparse.Namespace, data: JSON, text: Callable[[Painter | None], str],
         notes: list[str]) -> None:
    """Print ``data`` as JSON/YAML (with the notes), or ``text`` (notes on stderr)."""
    if args.output == "json":
        print(json.dumps({**data, "notes": notes}, indent=2))
        return
    if args.output == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump({**data, "notes": notes}, sort_keys=False))
        return
    paint = _painter if wants_colour(args.color, sys.stdout) else None
    sys.stdout.write(text(paint))
    for note in notes:
        print(f"warning: {printable(note, MAX_LINE)}", file=sys.stderr)


def _painter(column: str, cell: str) -> str:
    if column == "FREE":
        return GREEN if cell not in ("0", "-") else RED
    if column == "UNHEALTHY":
        return RED if cell not in ("0", "-") else ""
    if column == "STATE":
        return {"free": GREEN, "pending": YELLOW, "missing": RED, "invalid": RED}.get(cell, "")
    return ""


# --------------------------------------------------------------------------- commands


def cmd_free(session: Session, args: argparse.Namespace) -> int:
    slices = session.own_pools(session.reader.list(session.kinds.slices)) or []
    classes = session.optional(session.kinds.classes,
                               meaning="every device is shown under no class ('-')")
    claims = session.claims(fallback=args.namespace)
    snapshot = _snapshot(slices, classes or [], session.notes)
    wanted = NO_CLASS if args.device_class == "-" else args.device_class
    known = {str((c.get("metadata") or {}).get("name")) for c in classes or []}
    if wanted not in (None, NO_CLASS) and classes is not None and wanted not in known:
        raise NotFound(f"DeviceClass {wanted!r} not found (DeviceClasses: "
                       f"{', '.join(sorted(known)) or 'none'})")
    rows = [row for row in utilisation(snapshot, claims_of(claims))
            if (wanted is None or row.device_class == wanted)
            and (args.node is None or row.node == args.node)]
    totals: dict[str, list[int]] = {}
    for row in rows:
        total = totals.setdefault(row.device_class, [0, 0, 0, 0, 0])
        for i, value in enumerate((row.total, row.allocated, row.free, row.blocked,
                                   row.unhealthy)):
            total[i] += value

    def text(paint: Painter | None) -> str:
        if not rows:
            return "No devices: no node agent publishes any (yet).\n"
        pools = table(("CLASS", "NODE", "POOL", "TOTAL", "ALLOCATED", "FREE", "BLOCKED",
                       "UNHEALTHY"),
                      [(r.device_class or "-", r.node or "-", f"{r.driver}/{r.pool}",
                        str(r.total), str(r.allocated), str(r.free), str(r.blocked),
                        str(r.unhealthy))
                       for r in rows], paint)
        summary = table(("CLASS", "TOTAL", "ALLOCATED", "FREE", "BLOCKED", "UNHEALTHY"),
                        [(name or "-", *map(str, values)) for name, values in totals.items()],
                        paint)
        return pools + "\n\n" + summary + "\n"

    data = {"pools": [row.to_json() for row in rows],
            "classes": [{"class": name, "total": v[0], "allocated": v[1], "free": v[2],
                         "blocked": v[3], "unhealthy": v[4]} for name, v in totals.items()]}
    emit(args, data, text, session.notes)
    return 0


def cmd_describe(session: Session, args: argparse.Namespace) -> int:
    slices = session.reader.list(session.kinds.slices)
    claims = session.claims(None if args.all_namespaces else args.namespace)
    view = describe(slices, claims, node=args.node, driver=args.driver)
    emit(args, view.to_json(), lambda _: render(view, devices=not args.summary), session.notes)
    return 0


def cmd_why(session: Session, args: argparse.Namespace) -> int:
    namespace = args.namespace or session.reader.namespace
    pod = session.reader.get(PODS, args.pod, namespace)
    claims = session.claims(fallback=namespace, need_fallback=True)
    classes = session.optional(session.kinds.classes,
                               meaning="requests whose class is unknown cannot fit")
    slices = session.own_pools(
        session.optional(session.kinds.slices, meaning="no devices are known: nothing can fit"))
    nodes = session.optional(NODES)
    pods = session.optional(PODS, meaning="the nodes' cpu/memory/pod capacity is not checked")
    quotas = session.optional(QUOTAS, namespace, meaning="DeviceQuotas are not checked")
    templates = session.optional(session.kinds.templates, namespace)
    budget = SearchBudget() if args.search_steps is None else \
        SearchBudget(steps=max(1, args.search_steps))
    explanation = explain_pod(pod, claims=claims, classes=classes or [], slices=slices or [],
                              nodes=nodes, pods=pods, steps=budget.steps,
                              node_steps=budget.node_steps, quotas=quotas or [],
                              templates=templates, flavour=session.flavour)
    emit(args, explanation.to_json(), lambda paint: render_why(explanation, bold=bool(paint)),
         [*session.notes, *explanation.notes])
    return 0


def cmd_top(session: Session, args: argparse.Namespace) -> int:
    claims = session.claims(None if args.all_namespaces else args.namespace)
    rows = top(claims_of(claims))

    def text(paint: Painter | None) -> str:
        if not rows:
            return "No ResourceClaims.\n"
        namespaces = table(
            ("NAMESPACE", "DEVICES", "CLAIMS", "PENDING", "BY CLASS"),
            [(n.namespace, str(n.devices), str(n.claims), str(n.pending),
              ", ".join(f"{name or '-'}={count}" for name, count in n.by_class.items()) or "-")
             for n in rows], paint)
        pods = [(p.namespace, p.pod, str(p.devices), ",".join(p.claims))
                for n in rows for p in n.pods]
        out = namespaces + "\n"
        if pods:
            out += "\n" + table(("NAMESPACE", "POD", "DEVICES", "CLAIMS"), pods, paint) + "\n"
        return out

    emit(args, {"namespaces": [n.to_json() for n in rows]}, text, session.notes)
    return 0


def _snapshot(slices: list[JSON], classes: list[JSON], notes: list[str]) -> Snapshot:
    snapshot = Snapshot()
    for raw in slices:
        try:
            snapshot.upsert_slice(parse_slice(raw))
        except InvalidObject as exc:
            notes.append(f"ResourceSlice {(raw.get('metadata') or {}).get('name')!r} is "
                         f"invalid and not counted: {exc}")
    for raw in classes:
        try:
            snapshot.upsert_class(parse_class(raw))
        except InvalidObject as exc:
            notes.append(f"DeviceClass {(raw.get('metadata') or {}).get('name')!r} is invalid "
                         f"and not used: {exc}")
    return snapshot


COMMANDS: dict[str, Callable[[Session, argparse.Namespace], int]] = {
    "free": cmd_free, "describe": cmd_describe, "why": cmd_why, "top": cmd_top,
}


def run(args: argparse.Namespace) -> int:
    """Run one command; returns the exit code."""
    if args.command == "check":
        from kdra.cli.check import run_check

        return run_check(kubeconfig=args.kubeconfig,
                         namespace=args.system_namespace, lease_grace=args.lease_grace,
                         output="json" if args.output == "json" else "text",
                         context=args.context, flavour=args.flavour)
    try:
        reader = Reader(args.kubeconfig, args.context, as_user=args.as_user,
                        as_group=args.as_group)
    except ClusterError as exc:
        print(f"kubectl kdra: {printable(exc, MAX_LINE)}", file=sys.stderr)
        return 1
    notes: list[str] = []
    try:
        session = Session(reader, reader.flavour(args.flavour))
        notes = session.notes
        return COMMANDS[args.command](session, args)
    except (ClusterError, Unreadable, NotFound) as exc:
        for note in notes:
            print(f"warning: {printable(note, MAX_LINE)}", file=sys.stderr)
        print(f"kubectl kdra {args.command}: {printable(exc, MAX_LINE)}", file=sys.stderr)
        return 1
    finally:
        reader.close()
