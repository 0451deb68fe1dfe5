"""kdra's own credential loading (:mod:`kdra.kube.kubeconfig`, :mod:`kdra.kube.credentials`):
kubectl's merge of several files, contexts, inline and file TLS material, tokens from files
and exec plugins (refreshed as they expire), the in-cluster service account, and clear errors
that show no secret."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import ssl
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kdra.kube import credentials as cred
from kdra.kube import kubeconfig as kc
from kdra.kube.credentials import Authorizer
from kdra.kube.kubeconfig import ConfigError, Credentials


def _pair() -> tuple[bytes, bytes]:
    """A self-signed certificate and its key, PEM."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kdra-test")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def _write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(doc))
    return path


def _config(cluster: dict[str, Any], user: dict[str, Any], name: str = "c",
            current: str | None = "c", namespace: str | None = None) -> dict[str, Any]:
    context: dict[str, Any] = {"cluster": name, "user": name}
    if namespace:
        context["namespace"] = namespace
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": context}]}
    if current:
        doc["current-context"] = current
    return doc


def test_files_merge_as_kubectl_does_and_relative_paths_follow_their_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a").mkdir()
    first = _write(tmp_path / "a" / "config", _config(
        {"server": "https://first:6443", "certificate-authority": "ca.crt"},
        {"client-certificate": "me.crt", "client-key": "/abs/me.key"}, namespace="team"))
    second = _write(tmp_path / "second", {
        **_config({"server": "https://second:6443"}, {"token": "t2"}, current="other"),
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}},
                     {"name": "other", "context": {"cluster": "c", "user": "c"}}]})
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(first), str(second)]))
    creds = kc.load()
    assert creds.server == "https://first:6443"  # the first definition of "c" wins
    assert creds.ca_file == str(tmp_path / "a" / "ca.crt")
    assert creds.cert_file == str(tmp_path / "a" / "me.crt")
    assert creds.key_file == "/abs/me.key"
    assert creds.namespace == "team"
    assert creds.token is None
    # the first current-context wins too; another context is one argument away
    assert kc.load(context="other").namespace == "default"


def test_errors_name_file_context_and_field_never_a_secret(tmp_path: Path) -> None:
    path = _write(tmp_path / "config", _config({"server": "https://x"},
                                               {"token": "s3cret-token", "password": "pw"}))
    with pytest.raises(ConfigError, match=r"context 'nope' not found \(contexts: c\)"):
        kc.load(str(path), "nope")
    missing_user = _config({"server": "https://x"}, {"token": "s3cret-token"})
    missing_user["contexts"][0]["context"]["user"] = "ghost"
    with pytest.raises(ConfigError, match=r"context 'c'.*user 'ghost' not found"):
        kc.load(str(_write(tmp_path / "ghost", missing_user)))
    bad = _config({"server": "ftp://x"}, {"token": "s3cret-token"})
    with pytest.raises(ConfigError, match="server must be an http"):
        kc.load(str(_write(tmp_path / "ftp", bad)))
    with pytest.raises(ConfigError, match="auth-provider is not supported"):
        kc.load(str(_write(tmp_path / "oidc", _config(
            {"server": "https://x"}, {"auth-provider": {"name": "oidc"}}))))
    with pytest.raises(ConfigError, match="client-key-data is not base64"):
        kc.load(str(_write(tmp_path / "b64", _config(
            {"server": "https://x"}, {"client-key-data": "not base64!"}))))
    with pytest.raises(ConfigError, match="not a list of mappings"):
        kc.load(str(_write(tmp_path / "list", {"clusters": "x"})))
    with pytest.raises(ConfigError, match="not found"):
        kc.load(str(tmp_path / "absent"))
    creds = kc.load(str(path))
    assert "s3cret" not in repr(creds) and "pw" not in repr(creds).replace("proxy", "")


def test_inline_tls_material_loads_and_leaves_no_file(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _pair()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    creds = kc.from_kubeconfig(_config(
        {"server": "https://x", "certificate-authority-data": base64.b64encode(cert).decode()},
        {"client-certificate-data": base64.b64encode(cert).decode(),
         "client-key-data": base64.b64encode(key).decode()}), None, "test")
    context = cred.ssl_context(creds)
    assert context is not None and context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "kdra-test"),),)]
    assert list(tmp_path.iterdir()) == []  # the key's temporary file is gone
    # a wrong key for the certificate is a clear error
    _, other = _pair()
    wrong = Credentials(server="https://x", source="test", cert_data=cert, key_data=other)
    with pytest.raises(ConfigError, match="client certificate and key cannot be loaded"):
        cred.ssl_context(wrong)
    with pytest.raises(ConfigError, match="not both"):
        cred.ssl_context(Credentials(server="https://x", source="test", cert_data=cert))
    insecure = cred.ssl_context(Credentials(server="https://x", source="t", insecure=True))
    assert insecure is not None and insecure.verify_mode == ssl.CERT_NONE
    assert cred.ssl_context(Credentials(server="http://x", source="t")) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_token_file_is_reread_as_it_rotates(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    clock = Clock()
    auth = Authorizer(Credentials(server="https://x", source="t", token_file=str(token)),
                      clock=clock)

    async def headers() -> str:
        return (await auth.headers())["Authorization"]

    assert asyncio.run(headers()) == "Bearer one"
    token.write_text("two")
    clock.now += cred.TOKEN_FILE_REFRESH - 1
    assert asyncio.run(headers()) == "Bearer one"  # still fresh: not read again
    clock.now += 1
    assert asyncio.run(headers()) == "Bearer two"
    assert auth.refreshes == 2
    token.write_text("")
    clock.now += cred.TOKEN_FILE_REFRESH
    with pytest.raises(ConfigError, match="is empty"):
        asyncio.run(headers())


def test_static_and_basic_credentials_and_none() -> None:
    def headers(creds: Credentials) -> dict[str, str]:
        return asyncio.run(Authorizer(creds).headers())

    assert headers(Credentials(server="https://x", source="t", token="abc")) == {
        "Authorization": "Bearer abc"}
    assert headers(Credentials(server="https://x", source="t", username="u",
                               password="p")) == {
        "Authorization": "Basic " + base64.b64encode(b"u:p").decode()}
    assert headers(Credentials(server="https://x", source="t")) == {}


def _plugin(tmp_path: Path, status: dict[str, Any], code: int = 0) -> dict[str, Any]:
    """An exec plugin (a Python script) that counts its runs and prints ``status``."""
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, os, pathlib, sys\n"
        "runs = pathlib.Path(sys.argv[1])\n"
        "runs.write_text(str(int(runs.read_text() or 0) + 1) if runs.exists() else '1')\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['apiVersion'] == 'client.authentication.k8s.io/v1', info\n"
        "assert os.environ['EXTRA'] == 'yes'\n"
        f"print(json.dumps({{'apiVersion': info['apiVersion'], 'kind': 'ExecCredential', "
        f"'status': {status!r}}}))\n"
        f"sys.exit({code})\n")
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
            "args": [str(script), str(tmp_path / "runs")],
            "env": [{"name": "EXTRA", "value": "yes"}]}


def test_an_exec_plugin_token_is_kept_until_it_expires(tmp_path: Path) -> None:
    expiry = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    spec = _plugin(tmp_path, {"token": "from-exec",
                              "expirationTimestamp": expiry.strftime("%Y-%m-%dT%H:%M:%SZ")})
    clock, wall = Clock(), Clock()
    wall.now = expiry.timestamp() - 100
    auth = Authorizer(Credentials(server="https://x", source="t", exec_plugin=spec),
                      clock=clock, wall=wall)

    async def twice() -> list[dict[str, str]]:  # concurrent requests: one run
        return list(await asyncio.gather(auth.headers(), auth.headers()))

    assert asyncio.run(twice()) == [{"Authorization": "Bearer from-exec"}] * 2
    assert (tmp_path / "runs").read_text() == "1"
    clock.now += 100 - cred.EXEC_EXPIRY_MARGIN - 1
    asyncio.run(auth.headers())
    assert (tmp_path / "runs").read_text() == "1"
    clock.now += 1  # within the margin of its expiry: run again
    asyncio.run(auth.headers())
    assert (tmp_path / "runs").read_text() == "2"


@pytest.mark.parametrize(("status", "code", "error"), [
    ({"token": "x"}, 3, "exited with status 3"),
    ({"clientCertificateData": "pem"}, 0, "client certificates from an exec plugin"),
    ({}, 0, "no status.token"),
    ({"token": "x", "expirationTimestamp": "soon"}, 0, "is not RFC 3339"),
])
def test_exec_plugin_failures_are_clear(tmp_path: Path, status: dict[str, Any], code: int,
                                        error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        asyncio.run(cred.run_exec_plugin(_plugin(tmp_path, status, code), "kubeconfig k"))


def test_exec_plugin_spec_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"apiVersion 'client\.authentication\.k8s\.io/v2'"):
        asyncio.run(cred.run_exec_plugin({"apiVersion": "client.authentication.k8s.io/v2",
                                        "command": "x"}, "k"))
    with pytest.raises(ConfigError, match="cannot be run"):
        asyncio.run(cred.run_exec_plugin({"apiVersion": "client.authentication.k8s.io/v1",
                                        "command": "/nonexistent/plugin"}, "k"))
    with pytest.raises(ConfigError, match="args a list of strings"):
        asyncio.run(cred.run_exec_plugin({"apiVersion": "client.authentication.k8s.io/v1",
                                        "command": "x", "args": [1]}, "k"))


def test_in_cluster_reads_the_service_account(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_bytes(_pair()[0])
    (tmp_path / "namespace").write_text("kdra-system\n")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    creds = kc.in_cluster(tmp_path, env.get)
    assert creds.server == "https://[fd00::1]:443"
    assert creds.namespace == "kdra-system"
    assert creds.token_file == str(tmp_path / "token") and creds.token is None
    assert cred.ssl_context(creds) is not None
    headers = asyncio.run(Authorizer(creds).headers())
    assert headers == {"Authorization": "Bearer sa-token"}
    with pytest.raises(ConfigError, match="not running in a pod"):
        kc.in_cluster(tmp_path, {}.get)
    (tmp_path / "token").unlink()
    with pytest.raises(ConfigError, match="token not found"):
        kc.in_cluster(tmp_path, env.get)


def test_no_kubeconfig_falls_back_to_the_service_account(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="not running in a pod"):
        kc.load()
    with pytest.raises(ConfigError, match="context 'x' asked for, but there is no kubeconfig"):
        kc.load(context="x")


def test_a_one_shot_client_gets_the_token_file_and_exec_plugin_resolved_once(
        tmp_path: Path) -> None:
    """What the command-line tools' pykube-ng client is given (kdra.kube.reader): the token
    file read, the exec plugin (any API version) run once, their result written in."""
    token = tmp_path / "token"
    token.write_text("from-file\n")
    doc = {**_config({"server": "https://x"}, {"tokenFile": str(token)}),
           "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}},
                        {"name": "e", "context": {"cluster": "c", "user": "e"}},
                        {"name": "k", "context": {"cluster": "c", "user": "k"}}]}
    (tmp_path / "k").mkdir()
    doc["users"] += [{"name": "e", "user": {"exec": _plugin(tmp_path, {"token": "from-exec"})}},
                     {"name": "k", "user": {"exec": _plugin(
                         tmp_path / "k", {"clientCertificateData": "CERT",
                                          "clientKeyData": "KEY"})}}]
    cred.static_credentials(doc, None, "f")
    assert doc["users"][0]["user"]["token"] == "from-file"
    cred.static_credentials(doc, "e", "f")
    assert doc["users"][1]["user"] == {"token": "from-exec"}
    assert (tmp_path / "runs").read_text() == "1"
    cred.static_credentials(doc, "e", "f")  # a token now: not run again
    assert (tmp_path / "runs").read_text() == "1"
    cred.static_credentials(doc, "k", "f")
    assert doc["users"][2]["user"] == {
        "client-certificate-data": base64.b64encode(b"CERT").decode(),
        "client-key-data": base64.b64encode(b"KEY").decode()}
    with pytest.raises(ConfigError, match="context 'nope' not found"):
        cred.static_credentials(doc, "nope", "f")
    failing = _config({"server": "https://x"}, {"exec": _plugin(tmp_path, {}, code=0)})
    with pytest.raises(ConfigError, match=r"no status\.token and no client certificate"):
        cred.static_credentials(failing, None, "f")


def test_an_exec_commands_relative_path_follows_its_file(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    path = _write(tmp_path / "d" / "config", _config({"server": "https://x"}, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "./bin/plugin"}}))
    other = _write(tmp_path / "other", _config({"server": "https://x"}, {"exec": {
        "apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}}, name="o"))
    doc = kc.merged([path, other])
    assert doc["users"][0]["user"]["exec"]["command"] == str(tmp_path / "d" / "bin" / "plugin")
    assert doc["users"][1]["user"]["exec"]["command"] == "aws"  # a name: looked up on $PATH
