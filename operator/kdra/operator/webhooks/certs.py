"""Certificates for the admission webhooks: a private CA, the serving certificate, rotation.

The operator generates them unless it is given a directory with ``tls.crt``, ``tls.key`` and
``ca.crt`` (what cert-manager mounts). Generated material lives in the Secret
``kdra-webhook-tls`` (type ``kubernetes.io/tls``, plus ``ca.crt`` and ``ca.key``) so that every
replica serves the same certificate; this module only computes — reading and writing the
Secret is :mod:`kdra.operator.webhooks.server`'s job — and takes the current time as an argument.

Invariants:
- A certificate is renewed when less than a third of its validity is left (CA: 1 year, serving
  certificate: 90 days, never beyond its CA), when it does not cover a required host name, or
  when it was not issued by the current CA.
- A renewed CA does not invalidate the one it replaces: ``ca.crt`` is a *trust bundle*, the
  current CA first, followed by earlier CAs until they expire, so API servers that still hold
  the previous bundle, and replicas still serving the previous certificate, keep working.
- Keys are EC P-256; certificates are built by :mod:`kdra.operator.webhooks.pki` (shared with
  kdra_devenv).
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from kdra.operator.webhooks import pki

__all__ = [
    "CA_VALIDITY",
    "SERVING_VALIDITY",
    "TlsBundle",
    "due",
    "from_directory",
    "from_secret_data",
    "generate",
    "renew",
    "to_secret_data",
]

CA_VALIDITY = dt.timedelta(days=365)
SERVING_VALIDITY = dt.timedelta(days=90)


@dataclass(frozen=True)
class TlsBundle:
    """PEM material for serving: the certificate and key, and the CA bundle clients trust.

    ``ca_key_pem`` is the current CA's key when kdra generated the CA (empty when supplied).
    """

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes
    ca_key_pem: bytes = b""

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    @property
    def authorities(self) -> list[x509.Certificate]:
        return x509.load_pem_x509_certificates(self.ca_pem) if self.ca_pem.strip() else []

    @property
    def hosts(self) -> frozenset[str]:
        return _hosts(self.certificate)

    def not_after(self) -> dt.datetime:
        return self.certificate.not_valid_after_utc


def due(cert: x509.Certificate, now: dt.datetime) -> bool:
    """Whether ``cert`` should be replaced: less than a third of its validity is left."""
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return end - now < (end - start) / 3


def generate(hosts: Iterable[str], now: dt.datetime) -> TlsBundle:
    """A fresh CA and a serving certificate for ``hosts`` (DNS names and IP addresses)."""
    ca_cert, ca_key = _new_ca(now)
    return _issue(ca_cert, ca_key, [ca_cert], sorted(set(hosts)), now)


def renew(bundle: TlsBundle, hosts: Iterable[str], now: dt.datetime) -> TlsBundle | None:
    """The bundle to switch to, or None when ``bundle`` is still good for ``hosts`` at ``now``.

    Only a generated bundle (with ``ca_key_pem``) can be renewed; for a supplied one this
    returns None (whoever supplied it rotates it). Raises ValueError for unreadable material.
    """
    if not bundle.ca_key_pem:
        return None
    authorities = bundle.authorities
    if not authorities:
        raise ValueError("the bundle has a CA key but no CA certificate")
    ca_cert, ca_key = authorities[0], _load_key(bundle.ca_key_pem)
    if not _matches(ca_cert, ca_key):
        raise ValueError("ca.key does not belong to the first certificate of ca.crt")
    trusted = [ca for ca in authorities if ca.not_valid_after_utc > now]
    rotate_ca = due(ca_cert, now)
    if rotate_ca:
        ca_cert, ca_key = _new_ca(now)
        trusted = [ca_cert, *trusted[:1]]  # the new CA, and the one it replaces until it expires
    serving = bundle.certificate
    wanted = set(hosts)
    if (not rotate_ca and wanted <= _hosts(serving) and not due(serving, now)
            and _issued_by(serving, ca_cert)):
        if len(trusted) == len(authorities):
            return None
        return TlsBundle(bundle.cert_pem, bundle.key_pem, _pem(trusted), bundle.ca_key_pem)
    return _issue(ca_cert, ca_key, trusted, sorted(wanted | _hosts(serving)), now)


# --------------------------------------------------------------------------- storage


def to_secret_data(bundle: TlsBundle) -> dict[str, str]:
    """The ``data`` of a ``kubernetes.io/tls`` Secret holding ``bundle``."""
    data = {"tls.crt": bundle.cert_pem, "tls.key": bundle.key_pem, "ca.crt": bundle.ca_pem}
    if bundle.ca_key_pem:
        data["ca.key"] = bundle.ca_key_pem
    return {key: base64.b64encode(value).decode() for key, value in data.items()}


def from_secret_data(data: Mapping[str, str]) -> TlsBundle:
    """Read :func:`to_secret_data`'s output back. Raises ValueError when it is damaged."""
    try:
        raw = {key: base64.b64decode(value, validate=True) for key, value in data.items()}
        bundle = TlsBundle(raw["tls.crt"], raw["tls.key"], raw.get("ca.crt", b""),
                           raw.get("ca.key", b""))
    except (KeyError, ValueError, TypeError) as exc:
        raise ValueError(f"not a usable TLS Secret: {exc}") from exc
    check(bundle)
    return bundle


def from_directory(directory: Path) -> TlsBundle:
    """A supplied bundle: ``tls.crt``, ``tls.key`` and (optional) ``ca.crt`` in ``directory``.

    Raises OSError when a required file is missing, ValueError when it is unreadable.
    """
    ca = directory / "ca.crt"
    bundle = TlsBundle((directory / "tls.crt").read_bytes(), (directory / "tls.key").read_bytes(),
                       ca.read_bytes() if ca.exists() else b"")
    check(bundle)
    return bundle


def check(bundle: TlsBundle) -> None:
    """Raise ValueError unless the certificate, its key and the CA bundle can be read and the
    key belongs to the certificate."""
    try:
        cert = bundle.certificate
        key = serialization.load_pem_private_key(bundle.key_pem, password=None)
        _ = bundle.authorities
    except (ValueError, TypeError) as exc:
        raise ValueError(f"unreadable certificate or key: {exc}") from exc
    if _public_bytes(cert.public_key()) != _public_bytes(key.public_key()):
        raise ValueError("tls.key does not belong to tls.crt")


# --------------------------------------------------------------------------- issuing


def _new_ca(now: dt.datetime) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    # A distinct subject per generation keeps old and new CA apart in a trust bundle.
    subject = pki.name(f"kdra-webhook-ca@{int(now.timestamp())}", "kdra")
    return pki.new_ca(subject, now, CA_VALIDITY, path_length=0)


def _issue(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey,
           trusted: list[x509.Certificate], hosts: list[str], now: dt.datetime) -> TlsBundle:
    if not hosts:
        raise ValueError("a serving certificate needs at least one host name")
    cert, key = pki.issue(ca_cert, ca_key, pki.name(hosts[0]), now, SERVING_VALIDITY,
                          hosts=hosts)
    return TlsBundle(pki.cert_pem(cert), _key_pem(key), _pem(trusted), _key_pem(ca_key))


def _hosts(cert: x509.Certificate) -> frozenset[str]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return frozenset()
    names = [str(n) for n in sans.get_values_for_type(x509.DNSName)]
    names += [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    return frozenset(names)


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _matches(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> bool:
    return _public_bytes(cert.public_key()) == _public_bytes(key.public_key())


def _public_bytes(key: object) -> bytes:
    public_bytes = getattr(key, "public_bytes", None)
    if public_bytes is None:
        return b""
    result: bytes = public_bytes(serialization.Encoding.PEM,
                                 serialization.PublicFormat.SubjectPublicKeyInfo)
    return result


def _load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("ca.key is not an EC private key")
    return key


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return pki.key_pem(key)


def _pem(certs: list[x509.Certificate]) -> bytes:
    return pki.cert_pem(*certs)
