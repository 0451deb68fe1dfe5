"""Credentials for kdra's API clients, read by kdra itself: kubeconfig files (kubectl's merge
of ``$KUBECONFIG``, contexts, inline or file certificates and keys, bearer tokens, token files,
exec plugins) and the in-cluster service account (its projected token re-read as the kubelet
rotates it).

:func:`load` turns a kubeconfig (or the pod's service account) into :class:`Credentials`;
:func:`ssl_context` makes their TLS settings an :class:`ssl.SSLContext`; an
:class:`Authorizer` gives the ``Authorization`` header of each request, refreshing what
expires. The async client (:mod:`kdra.kube.client`) uses all three; ``kubectl kdra``'s
reader (:mod:`kdra.kube.reader`, pykube-ng) takes the same merged kubeconfig
(:func:`merged`), so both read a kubeconfig the same way.

Invariants:
- A kubeconfig that cannot be used is a :class:`ConfigError` naming the file, the context and
  the field — never a ``KeyError``/``TypeError`` — and never showing a token, a password or a
  key (``Credentials``' repr leaves them out too).
- Inline key material (``client-key-data``, ``client-certificate-data``) touches the disk
  only for the moment :mod:`ssl` loads it: a 0600 file in a 0700 temporary directory,
  removed at once (``ssl`` loads a certificate chain from files only).
- A token file (the in-cluster projected token, or a kubeconfig's ``tokenFile``) is re-read
  at most every :data:`TOKEN_FILE_REFRESH` seconds, off the event loop; an exec plugin's
  token is kept until :data:`EXEC_EXPIRY_MARGIN` seconds before its
  ``expirationTimestamp`` (for ever without one). Exec plugins run bounded: at most
  :data:`EXEC_TIMEOUT` seconds and :data:`EXEC_OUTPUT_LIMIT` bytes of output, with no stdin;
  their stderr is the caller's (as kubectl does).
- One refresh at a time: concurrent requests that find the token stale wait for one refresh.
- The command-line tools' one-shot client (pykube-ng) gets the same credentials: a token
  file read and an exec plugin run once, by kdra (:func:`static_credentials`), so both
  clients support the same kubeconfigs (exec API ``v1``, ``v1beta1``, ``v1alpha1``).
- Not supported, with a clear error: the removed ``auth-provider`` plugins (gcp, oidc: use
  their exec plugins) in the async client, and client certificates returned by an exec
  plugin in the async client (the one-shot client takes them).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_FILE_REFRESH = 60.0
"""Seconds a token read from a file is used before the file is read again (client-go: one
minute; the kubelet rotates a projected token well before it expires)."""
EXEC_TIMEOUT = 60.0
EXEC_OUTPUT_LIMIT = 1 << 20
EXEC_EXPIRY_MARGIN = 30.0
EXEC_API_VERSIONS = tuple(f"client.authentication.k8s.io/{version}"
                          for version in ("v1", "v1beta1", "v1alpha1"))

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


def _named(doc: JSON, section: str, name: object, where: str) -> JSON:
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


def _text(mapping: JSON, key: str, where: str) -> str | None:
    value = mapping.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{where}: {key} must be a string")
    return value


def _data(mapping: JSON, key: str, where: str) -> bytes | None:
    value = _text(mapping, key, where)
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
    ctx = _named(doc, "contexts", name, f"kubeconfig {source}")
    cluster = _named(doc, "clusters", ctx.get("cluster"), where)
    user = _named(doc, "users", ctx.get("user"), where) if ctx.get("user") else {}
    server = _text(cluster, "server", f"{where}, cluster")
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
        namespace=_text(ctx, "namespace", where) or "default",
        ca_file=_text(cluster, "certificate-authority", c),
        ca_data=_data(cluster, "certificate-authority-data", c),
        insecure=cluster.get("insecure-skip-tls-verify") is True,
        tls_server_name=_text(cluster, "tls-server-name", c),
        proxy_url=_text(cluster, "proxy-url", c),
        cert_file=_text(user, "client-certificate", u),
        key_file=_text(user, "client-key", u),
        cert_data=_data(user, "client-certificate-data", u),
        key_data=_data(user, "client-key-data", u),
        token=_text(user, "token", u), token_file=_text(user, "tokenFile", u),
        username=_text(user, "username", u), password=_text(user, "password", u),
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


def ssl_context(creds: Credentials) -> ssl.SSLContext | None:
    """The TLS settings of ``creds`` (None for a plain-HTTP server): the cluster's CA (or
    the system's), client certificate and key, ``insecure-skip-tls-verify``."""
    if creds.server.startswith("http://"):
        return None
    try:
        context = ssl.create_default_context(
            cafile=creds.ca_file, cadata=creds.ca_data.decode() if creds.ca_data else None)
    except (OSError, ssl.SSLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{creds.source}: the cluster's certificate authority cannot be "
                          f"loaded: {exc}") from exc
    if creds.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    cert = creds.cert_data or creds.cert_file
    key = creds.key_data or creds.key_file
    if cert or key:
        if not (cert and key):
            raise ConfigError(f"{creds.source}: the user has a client certificate or a client "
                              "key, not both")
        _load_chain(context, cert, key, creds.source)
    return context


def _load_chain(context: ssl.SSLContext, cert: bytes | str, key: bytes | str,
                source: str) -> None:
    try:
        if isinstance(cert, str) and isinstance(key, str):
            context.load_cert_chain(cert, key)
            return
        with tempfile.TemporaryDirectory(prefix="kdra-tls-") as directory:
            paths = []
            for name, value in (("cert.pem", cert), ("key.pem", key)):
                if isinstance(value, str):
                    paths.append(value)
                    continue
                path = os.path.join(directory, name)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(value)
                paths.append(path)
            context.load_cert_chain(paths[0], paths[1])
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{source}: the user's client certificate and key cannot be loaded:"
                          f" {exc}") from exc


class Authorizer:
    """The ``Authorization`` header for each request of one client: a bearer token (static,
    from a file, or from an exec plugin) or basic credentials; nothing for client
    certificates alone."""

    def __init__(self, creds: Credentials, *,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self._creds = creds
        self._clock = clock
        self._wall = wall
        self._token: str | None = creds.token
        self._fresh_until = float("inf") if creds.token else float("-inf")
        self._lock = asyncio.Lock()
        self.refreshes = 0
        """How often a token was read from its file or exec plugin (tests count it)."""

    async def headers(self) -> dict[str, str]:
        creds = self._creds
        if creds.token_file or creds.exec_plugin:
            if self._clock() >= self._fresh_until:
                async with self._lock:
                    if self._clock() >= self._fresh_until:
                        await self._refresh()
            return {"Authorization": f"Bearer {self._token}"}
        if creds.token:
            return {"Authorization": f"Bearer {creds.token}"}
        if creds.username is not None and creds.password is not None:
            basic = base64.b64encode(f"{creds.username}:{creds.password}".encode()).decode()
            return {"Authorization": f"Basic {basic}"}
        return {}

    async def _refresh(self) -> None:
        self.refreshes += 1
        if self._creds.token_file:
            path = self._creds.token_file
            try:
                token = (await asyncio.to_thread(Path(path).read_text)).strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{self._creds.source}: token file {path}: {exc}") from exc
            if not token:
                raise ConfigError(f"{self._creds.source}: token file {path} is empty")
            self._token, self._fresh_until = token, self._clock() + TOKEN_FILE_REFRESH
            return
        token, expires = await run_exec_plugin(self._creds.exec_plugin or {},
                                               self._creds.source)
        self._token = token
        self._fresh_until = float("inf") if expires is None else (
            self._clock() + max(0.0, expires - self._wall() - EXEC_EXPIRY_MARGIN))


def _exec_command(spec: JSON, where: str) -> tuple[list[str], dict[str, str]]:
    """An exec plugin's command line and environment, checked."""
    api_version, command = spec.get("apiVersion"), spec.get("command")
    if api_version not in EXEC_API_VERSIONS:
        raise ConfigError(f"{where}: apiVersion {api_version!r} is not supported "
                          f"({', '.join(EXEC_API_VERSIONS)})")
    args = spec.get("args") or []
    if not isinstance(command, str) or not command or not isinstance(args, list) \
            or not all(isinstance(a, str) for a in args):
        raise ConfigError(f"{where}: command must be a string and args a list of strings")
    env = dict(os.environ)
    for entry in spec.get("env") or []:
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str)
                and isinstance(entry.get("value"), str)):
            raise ConfigError(f"{where}: env must be a list of {{name, value}} strings")
        env[entry["name"]] = entry["value"]
    env["KUBERNETES_EXEC_INFO"] = json.dumps({
        "apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}})
    return [command, *args], env


async def run_exec_plugin(spec: JSON, source: str) -> tuple[str, float | None]:
    """Run a kubeconfig's exec credential plugin: its token, and when it expires (a Unix
    time; None: never)."""
    where = f"{source}: exec plugin"
    argv, env = _exec_command(spec, where)
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env)
    except OSError as exc:
        raise ConfigError(f"{where}: {argv[0]} cannot be run: {exc}") from exc
    try:
        output = await asyncio.wait_for(_read_capped(proc), EXEC_TIMEOUT)
    except TimeoutError as exc:
        raise ConfigError(f"{where}: {argv[0]} did not answer within {EXEC_TIMEOUT:.0f} s") \
            from exc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise ConfigError(f"{where}: {argv[0]} exited with status {proc.returncode}")
    return _exec_token(_exec_status(output, where), where)


def run_exec_plugin_sync(spec: JSON, source: str) -> JSON:
    """Run a kubeconfig's exec credential plugin once, without an event loop: the ``status``
    of its ExecCredential (a token, or a client certificate and key)."""
    where = f"{source}: exec plugin"
    argv, env = _exec_command(spec, where)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                env=env)
    except OSError as exc:
        raise ConfigError(f"{where}: {argv[0]} cannot be run: {exc}") from exc
    with proc:
        try:
            output, _ = proc.communicate(timeout=EXEC_TIMEOUT)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.wait()
            raise ConfigError(f"{where}: {argv[0]} did not answer within "
                              f"{EXEC_TIMEOUT:.0f} s") from exc
    if proc.returncode != 0:
        raise ConfigError(f"{where}: {argv[0]} exited with status {proc.returncode}")
    if len(output) > EXEC_OUTPUT_LIMIT:
        raise ConfigError(f"{where}: more than {EXEC_OUTPUT_LIMIT} bytes of output")
    status = _exec_status(output, where)
    if not status.get("token") and not (status.get("clientCertificateData")
                                         and status.get("clientKeyData")):
        raise ConfigError(f"{where}: its ExecCredential has no status.token and no client "
                          "certificate and key")
    return status


def static_credentials(doc: JSON, context: str | None, source: str) -> None:
    """Make the credentials of ``context``'s user (default: the current context's) in a
    merged kubeconfig static, in place, for a one-shot synchronous client: a ``tokenFile``
    is read and an exec plugin run once (:func:`run_exec_plugin_sync`), their token (or the
    plugin's client certificate and key) written into the user."""
    name = context or doc.get("current-context")
    if not name:
        return
    where = f"kubeconfig {source}, context {name!r}"
    user_name = _named(doc, "contexts", name, f"kubeconfig {source}").get("user")
    if not user_name:
        return
    user = _named(doc, "users", user_name, where)
    if user.get("token"):
        return
    if user.get("tokenFile"):
        path = _text(user, "tokenFile", f"{where}, user") or ""
        try:
            user["token"] = Path(path).read_text().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{where}: token file {path}: {exc}") from exc
        return
    spec = user.get("exec")
    if spec is None:
        return
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: user's exec must be a mapping")
    status = run_exec_plugin_sync(spec, where)
    del user["exec"]
    if status.get("token"):
        user["token"] = str(status["token"])
        return
    for field_name, key in (("client-certificate-data", "clientCertificateData"),
                            ("client-key-data", "clientKeyData")):
        user[field_name] = base64.b64encode(str(status[key]).encode()).decode()


async def _read_capped(proc: asyncio.subprocess.Process) -> bytes:
    assert proc.stdout is not None
    output = b""
    while chunk := await proc.stdout.read(65536):
        output += chunk
        if len(output) > EXEC_OUTPUT_LIMIT:
            raise ConfigError(f"exec plugin: more than {EXEC_OUTPUT_LIMIT} bytes of output")
    await proc.wait()
    return output


def _exec_status(output: bytes, where: str) -> JSON:
    """The ``status`` of an ExecCredential printed by a plugin."""
    try:
        doc = json.loads(output)
    except (ValueError, RecursionError) as exc:
        raise ConfigError(f"{where}: its output is not an ExecCredential (JSON)") from exc
    status = doc.get("status") if isinstance(doc, dict) else None
    if not isinstance(status, dict):
        raise ConfigError(f"{where}: its ExecCredential has no status")
    return status


def _exec_token(status: JSON, where: str) -> tuple[str, float | None]:
    """The token and expiry of an ExecCredential's status."""
    token = status.get("token")
    if not isinstance(token, str) or not token:
        if status.get("clientCertificateData"):
            raise ConfigError(f"{where}: client certificates from an exec plugin are not "
                              "supported here (kdra's async client); a token is")
        raise ConfigError(f"{where}: its ExecCredential has no status.token")
    expiry = status.get("expirationTimestamp")
    if expiry is None:
        return token, None
    try:
        return token, datetime.fromisoformat(str(expiry)).timestamp()
    except ValueError as exc:
        raise ConfigError(f"{where}: expirationTimestamp {expiry!r} is not RFC 3339") from exc
