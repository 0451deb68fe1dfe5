"""Using kdra's credentials (:class:`kdra.kube.kubeconfig.Credentials`): TLS settings
(:func:`ssl_context`), the ``Authorization`` header of each request (:class:`Authorizer`:
static tokens, token files re-read as they rotate, exec plugins re-run as their tokens
expire, basic credentials), and a kubeconfig made static for a one-shot synchronous client
(:func:`static_credentials`: the command-line tools' pykube-ng).

Invariants:
- Inline key material (``client-key-data``, ``client-certificate-data``) touches the disk
  only for the moment :mod:`ssl` loads it: a 0600 file in a 0700 temporary directory,
  removed at once (``ssl`` loads a certificate chain from files only).
- A token file (the in-cluster projected token, or a kubeconfig's ``tokenFile``) is re-read
  at most every :data:`TOKEN_FILE_REFRESH` seconds, off the event loop; an exec plugin's
  token is kept until :data:`EXEC_EXPIRY_MARGIN` seconds before its
  ``expirationTimestamp`` (for ever without one). One refresh at a time: concurrent
  requests that find the token stale wait for one refresh.
- Exec plugins (API ``v1``, ``v1beta1``, ``v1alpha1``) run bounded: at most
  :data:`EXEC_TIMEOUT` seconds and :data:`EXEC_OUTPUT_LIMIT` bytes of output, with no
  stdin; their stderr is the caller's (as kubectl does). The async client takes a token from
  them; client certificates from an exec plugin are a clear error there (the one-shot client
  takes them).
- Errors are :class:`kdra.kube.kubeconfig.ConfigError`, naming the file, context and field,
  never a secret.
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
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from kdra.kube.kubeconfig import JSON, ConfigError, Credentials, named, text

TOKEN_FILE_REFRESH = 60.0
"""Seconds a token read from a file is used before the file is read again (client-go: one
minute; the kubelet rotates a projected token well before it expires)."""
EXEC_TIMEOUT = 60.0
EXEC_OUTPUT_LIMIT = 1 << 20
EXEC_EXPIRY_MARGIN = 30.0
EXEC_API_VERSIONS = tuple(f"client.authentication.k8s.io/{version}"
                          for version in ("v1", "v1beta1", "v1alpha1"))


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
    user_name = named(doc, "contexts", name, f"kubeconfig {source}").get("user")
    if not user_name:
        return
    user = named(doc, "users", user_name, where)
    if user.get("token"):
        return
    if user.get("tokenFile"):
        path = text(user, "tokenFile", f"{where}, user") or ""
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
