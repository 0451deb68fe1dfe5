"""Credentials for kdra's API clients, read by kdra itself: kubeconfig files (kubectl's merge
of ``$KUBECONFIG``, contexts, inline or file certificates and keys, bearer tokens, token files,
exec plugins, basic credentials, ``proxy-url``, ``tls-server-name``) and the in-cluster
service account.

:func:`load` turns a kubeconfig (or the pod's service account) into :class:`Credentials`;
:mod:`kdra.kube.credentials` makes them TLS settings and request headers (refreshing what
expires). The async client (:mod:`kdra.kube.client`) uses both; ``kubectl kdra``'s reader
(:mod:`kdra.kube.reader`, pykube-ng) takes the same merged kubeconfig (:func:`merged`), so
both read a kubeconfig the same way.

Invariants:
- A kubeconfig that cannot be used is a :class:`ConfigError` naming the file, the context and
  the field — never a ``KeyError``/``TypeError`` — and never showing a token, a password or a
  key (``Credentials``' repr leaves them out too).
- Relative file paths (and an exec command given as a relative path) resolve against the
  kubeconfig file that names them; the first definition of a name wins (kubectl's merge).
- Not supported, with a clear error: the ``auth-provider`` plugins Kubernetes removed (gcp,
  oidc: their exec plugins replace them).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")

# Fields holding a file path, resolved against the kubeconfig file that names them (kubectl).
_PATH_FIELDS = (("clusters", "cluster", ("certificate-authority",)),
                ("users", "user", ("client-certificate", "client-key", "tokenFile")))


class ConfigError(Exception):
    """A kubeconfig, or the pod's service account, that cannot be used (the message says
    which file, context and field, and why)."""


@dataclass(frozen=True)
class Credentials:
    """Where the API server is and how to prove who this client is."""

    server: str
    source: str
    """Where these came from, for messages (``kubeconfig F, context C`` or in-cluster)."""
    namespace: str = "default"
    ca_file: str | None = None
    ca_data: bytes | None = field(default=None, repr=False)
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    cert_data: bytes | None = field(default=None, repr=False)
    key_data: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    exec_plugin: JSON | None = field(default=None, repr=False)


def kubeconfig_paths(kubeconfig: str | None) -> list[Path]:
    """The files to read: ``kubeconfig`` (a path, or several joined like ``$KUBECONFIG``),
    else ``$KUBECONFIG``, else ``~/.kube/config``."""
    source = kubeconfig or os.environ.get("KUBECONFIG") or ""
    if source:
        return [Path(p).expanduser() for p in source.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def merged(paths: Sequence[Path]) -> JSON:
    """kubectl's merge of several kubeconfig files: the first definition of a name (and the
    first ``current-context``) wins; relative file paths (and an exec plugin's command given
    as a relative path) resolve against the file naming them."""
    result: JSON = {"clusters": [], "users": [], "contexts": []}
    seen: dict[str, set[str]] = {"clusters": set(), "users": set(), "contexts": set()}
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"kubeconfig {path}: {exc}") from exc
        if not isinstance(doc, dict):
            raise ConfigError(f"kubeconfig {path}: not a mapping")
        if not result.get("current-context") and doc.get("current-context"):
            result["current-context"] = doc["current-context"]
        for section, inner_key, names in _PATH_FIELDS:
            for entry in _entries(doc, section, path):
                inner = entry.get(inner_key)
                if not isinstance(inner, dict):
                    continue
                for name in names:
                    value = inner.get(name)
                    if isinstance(value, str) and value and not os.path.isabs(value):
                        inner[name] = str((path.parent / value).resolve())
                plugin = inner.get("exec")
                if not isinstance(plugin, dict):
                    continue
                command = plugin.get("command")
                if isinstance(command, str) and os.sep in command \
                        and not os.path.isabs(command):  # client-go: a path, not a name
                    plugin["command"] = str((path.parent / command).resolve())
        for section in ("clusters", "users", "contexts"):
            for entry in _entries(doc, section, path):
                entry_name = entry.get("name")
                if isinstance(entry_name, str) and entry_name not in seen[section]:
                    seen[section].add(entry_name)
                    result[section].append(entry)
    return result


def _entries(doc: JSON, section: str, path: Path) -> list[JSON]:
    entries = doc.get(section) or []
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"kubeconfig {path}: {section} is not a list of mappings")
    return entries


def load(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """Credentials from ``kubeconfig`` (:func:`kubeconfig_paths`) and its ``context`` (default:
    the current one); without any kubeconfig file, and none asked for, the pod's service
    account (:func:`in_cluster`)."""
    paths = kubeconfig_paths(kubeconfig)
    existing = [p for p in paths if p.is_file()]
    if existing:
        return from_kubeconfig(merged(existing), context,
                               os.pathsep.join(str(p) for p in existing))
    if kubeconfig:
        raise ConfigError(f"kubeconfig {kubeconfig} not found")
    if context:
        raise ConfigError(f"context {context!r} asked for, but there is no kubeconfig "
                          f"({os.pathsep.join(str(p) for p in paths)})")
    return in_cluster()


def named(doc: JSON, section: str, name: object, where: str) -> JSON:
    """The inner mapping of the entry ``name`` of ``section`` (``contexts``, ``clusters``,
    ``users``); a :class:`ConfigError` naming the known ones when it is not there."""
    key = section[:-1]
    for entry in doc.get(section) or ():
        if entry.get("name") == name:
            inner = entry.get(key)
            if inner is None:
                return {}
            if not isinstance(inner, dict):
                raise ConfigError(f"{where}: {key} {name!r} is not a mapping")
            return inner
    known = sorted(str(e.get("name")) for e in doc.get(section) or ())
    raise ConfigError(f"{where}: {key} {name!r} not found ({section}: "
                      f"{', '.join(known) or 'none'})")


def text(mapping: JSON, key: str, where: str) -> str | None:
    """A string field (None when absent or empty); a :class:`ConfigError` otherwise."""
    value = mapping.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string")
    return value


def _data(mapping: JSON, key: str, where: str) -> bytes | None:
    value = text(mapping, key, where)
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise ConfigError(f"{where}: {key} is not base64") from exc


def from_kubeconfig(doc: JSON, context: str | None, source: str) -> Credentials:
    """The credentials of ``context`` (default: ``current-context``) of a merged kubeconfig."""
    name = context or doc.get("current-context")
    if not name:
        raise ConfigError(f"kubeconfig {source}: no current-context, and no context given")
    where = f"kubeconfig {source}, context {name!r}"
    ctx = named(doc, "contexts", name, f"kubeconfig {source}")
    cluster = named(doc, "clusters", ctx.get("cluster"), where)
    user = named(doc, "users", ctx.get("user"), where) if ctx.get("user") else {}
    server = text(cluster, "server", f"{where}, cluster")
    if not server or not server.startswith(("https://", "http://")):
        raise ConfigError(f"{where}: the cluster's server must be an http(s) URL")
    if user.get("auth-provider"):
        raise ConfigError(f"{where}: user's auth-provider is not supported (Kubernetes "
                          "removed the gcp/oidc auth providers): use the provider's exec plugin")
    exec_plugin = user.get("exec")
    if exec_plugin is not None and not isinstance(exec_plugin, dict):
        raise ConfigError(f"{where}: user's exec must be a mapping")
    u, c = f"{where}, user", f"{where}, cluster"
    return Credentials(
        server=server.rstrip("/"), source=where,
        namespace=text(ctx, "namespace", where) or "default",
        ca_file=text(cluster, "certificate-authority", c),
        ca_data=_data(cluster, "certificate-authority-data", c),
        insecure=cluster.get("insecure-skip-tls-verify") is True,
        tls_server_name=text(cluster, "tls-server-name", c),
        proxy_url=text(cluster, "proxy-url", c),
        cert_file=text(user, "client-certificate", u),
        key_file=text(user, "client-key", u),
        cert_data=_data(user, "client-certificate-data", u),
        key_data=_data(user, "client-key-data", u),
        token=text(user, "token", u), token_file=text(user, "tokenFile", u),
        username=text(user, "username", u), password=text(user, "password", u),
        exec_plugin=exec_plugin)


def in_cluster(root: Path = SERVICE_ACCOUNT,
               environ: Callable[[str], str | None] = os.environ.get) -> Credentials:
    """The pod's service account: the API server at ``$KUBERNETES_SERVICE_HOST:PORT``, its CA
    and the projected token (re-read as it rotates) under ``root``."""
    host, port = environ("KUBERNETES_SERVICE_HOST"), environ("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("no kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a "
                          "pod (KUBERNETES_SERVICE_HOST/PORT unset)")
    token, ca = root / "token", root / "ca.crt"
    for path in (token, ca):
        if not path.is_file():
            raise ConfigError(f"in-cluster: {path} not found (is a service account token "
                              "mounted?)")
    try:
        namespace = (root / "namespace").read_text().strip() or "default"
    except OSError:
        namespace = "default"
    if ":" in host:
        host = f"[{host}]"
    return Credentials(server=f"https://{host}:{port}", source="in-cluster service account",
                       namespace=namespace, ca_file=str(ca), token_file=str(token))
