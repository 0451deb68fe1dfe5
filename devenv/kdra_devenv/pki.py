"""Certificates for a local control plane: one CA, the API server's serving certificate, and
client certificates for the admin and the controllers, written as PEM files.

Everything is generated fresh per control plane (short-lived, loopback only); the certificates
themselves are built by :mod:`kdra.operator.webhooks.pki`, kdra's one certificate builder.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from kdra.operator.webhooks import pki

_VALIDITY = dt.timedelta(days=30)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _write_key(data: bytes, path: Path) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


class CertificateAuthority:
    """A throw-away CA that signs serving and client certificates into ``directory``."""

    def __init__(self, directory: Path, common_name: str = "kdra-local-ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._now = dt.datetime.now(dt.UTC)
        self._cert, self._key = pki.new_ca(pki.name(common_name), self._now, _VALIDITY)
        self.cert_path = directory / "ca.crt"
        self.cert_path.write_bytes(pki.cert_pem(self._cert))
        _write_key(pki.key_pem(self._key), directory / "ca.key")

    @property
    def pem(self) -> bytes:
        return pki.cert_pem(self._cert)

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organization: str | None = None,
        server_names: tuple[str, ...] = (),
        client: bool = False,
    ) -> KeyPair:
        """Sign a certificate for a server (``server_names``: DNS names and IPs) or a client."""
        cert, key = pki.issue(self._cert, self._key, pki.name(common_name, organization),
                              self._now, _VALIDITY, hosts=server_names, client=client)
        pair = KeyPair(self.directory / f"{name}.crt", self.directory / f"{name}.key")
        pair.cert.write_bytes(pki.cert_pem(cert))
        _write_key(pki.key_pem(key), pair.key)
        return pair


def service_account_key(directory: Path) -> Path:
    """An RSA key the API server signs (and verifies) service-account tokens with."""
    path = directory / "sa.key"
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.TraditionalOpenSSL,
                                 serialization.NoEncryption()), path)
    return path
