"""Settings from flags: one flag per field of a frozen settings dataclass, falling back to an
environment variable, falling back to the field's default — for every kdra process
(:mod:`kdra.operator.settings`, :mod:`kdra.agent.settings`).

Each field comes from a command-line flag (``--<field-with-dashes>``), falling back to an
environment variable (``KDRA_<FIELD>`` upper-cased, then the names a field lists in its
``env`` metadata), falling back to the default its class documents. A field's docstring is
its flag's ``--help``, followed by its default and environment variable(s); a field's
``aliases`` metadata adds short flags (``-v``).

Invariants:
- Built once at start-up: :func:`settings_from_args` returns a frozen object.
- ``bool`` fields take true/false (1/0, yes/no, on/off); anything else is an error, never
  silently false. A field with ``multi`` metadata takes several words, joined by spaces.
"""

from __future__ import annotations

import argparse
import itertools
import os
from dataclasses import MISSING, fields
from typing import Any


def add_arguments(parser: argparse.ArgumentParser, settings_class: type[Any]) -> None:
    """Add one flag per settings field (defaults resolved later, see
    :func:`settings_from_args`)."""
    docs = _docs(settings_class)
    for item in fields(settings_class):
        flag = "--" + item.name.replace("_", "-")
        extra: dict[str, Any] = {}
        if str(item.type) == "bool":
            extra = {"nargs": "?", "const": "true", "metavar": "BOOL"}
        elif item.metadata.get("multi"):
            extra = {"nargs": "+"}
        if "metavar" in item.metadata:
            extra["metavar"] = item.metadata["metavar"]
        help_text = " ".join(filter(None, (docs.get(item.name), _default_text(item))))
        parser.add_argument(*item.metadata.get("aliases", ()), flag, dest=item.name,
                            default=None, help=help_text.replace("%", "%%"), **extra)


def _default_text(item: Any) -> str:
    """``(default: X; env KDRA_X)`` for a field's help: what applies without the flag."""
    envs = ", ".join((f"KDRA_{item.name.upper()}", *item.metadata.get("env", ())))
    default = item.default
    if default is MISSING or default is None or default == "":
        shown = "unset"
    elif isinstance(default, bool):
        shown = str(default).lower()
    else:
        shown = str(default)
    return f"(default: {shown}; env {envs})"


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"{raw!r} is not a boolean (true/false)")


def settings_from_args(args: argparse.Namespace, settings_class: type[Any]) -> Any:
    """The settings object of ``settings_class`` from parsed ``args`` (flags added by
    :func:`add_arguments`), the environment and the defaults."""
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


def _docs(settings_class: type[Any]) -> dict[str, str]:
    """Field docstrings, read from the settings class's source (for ``--help``)."""
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
