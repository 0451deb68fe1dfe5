"""Building X.509 certificates: a private CA and the certificates it issues.

One implementation for everything kdra signs: the webhook's serving certificate
(:mod:`kdra.operator.webhooks.certs`) and the local control plane's CA, serving and client
certificates (:mod:`kdra_devenv.pki`). Pure computation over ``cryptography``: no files, no
clocks (callers pass ``now``), no API calls — so both the layers and ``kdra_devenv`` may use it.

Invariants:
- Keys are EC P-256: fast to generate, accepted by Go's TLS stack and every client.
- Certificates start ``BACKDATE`` before ``now`` (clock skew between machines) and a
  certificate never outlives its issuer.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BACKDATE = dt.timedelta(minutes=5)
Key = ec.EllipticCurvePrivateKey


def name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def new_key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def new_ca(subject: x509.Name, now: dt.datetime, validity: dt.timedelta, *,
           path_length: int | None = None) -> tuple[x509.Certificate, Key]:
    """A self-signed CA certificate and its key."""
    key = new_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue(ca_cert: x509.Certificate, ca_key: Key, subject: x509.Name, now: dt.datetime,
          validity: dt.timedelta, *, hosts: Sequence[str] = (),
          client: bool = False) -> tuple[x509.Certificate, Key]:
    """A certificate signed by the CA: for a server (``hosts``: DNS names and IP addresses
    in its SubjectAlternativeName) or, with ``client``, for TLS client authentication."""
    key = new_key()
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName(_alt_names(hosts)),
                                        critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def cert_pem(*certs: x509.Certificate) -> bytes:
    return b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)


def key_pem(key: Key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _alt_names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False,
        key_encipherment=False, data_encipherment=False, key_agreement=False,
        encipher_only=False, decipher_only=False,
    )
