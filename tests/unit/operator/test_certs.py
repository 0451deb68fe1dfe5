"""Webhook certificates (kdra.operator.webhooks.certs): generation, rotation, storage."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from cryptography import x509

from kdra.operator.webhooks import certs

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
HOSTS = ["kdra-webhook.kdra-system.svc", "127.0.0.1"]


def issuer_cn(bundle: certs.TlsBundle) -> str:
    return bundle.certificate.issuer.rfc4514_string()


def test_generate_covers_hosts_and_chains_to_the_ca() -> None:
    bundle = certs.generate(HOSTS, T0)
    assert bundle.hosts == set(HOSTS)
    (ca,) = bundle.authorities
    bundle.certificate.verify_directly_issued_by(ca)
    assert bundle.not_after() == T0 + certs.SERVING_VALIDITY
    assert ca.not_valid_after_utc == T0 + certs.CA_VALIDITY
    usage = bundle.certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usage


# (days after T0, what renew must do: None = keep, "cert" = new serving cert, same CA,
#  "ca" = new CA too)
@pytest.mark.parametrize(("days", "expected"), [
    (0, None),
    (59, None),       # 31 of 90 days left: more than a third
    (61, "cert"),     # 29 days left: less than a third
    (200, "cert"),    # expired serving certificate, CA fine
    (244, "ca"),      # CA: 121 of 365 days left (< a third)
])
def test_rotation_when_a_third_is_left(days: int, expected: str | None) -> None:
    bundle = certs.generate(HOSTS, T0)
    renewed = certs.renew(bundle, HOSTS, T0 + dt.timedelta(days=days))
    if expected is None:
        assert renewed is None
        return
    assert renewed is not None
    assert renewed.cert_pem != bundle.cert_pem
    assert renewed.hosts >= set(HOSTS)
    now = T0 + dt.timedelta(days=days)
    assert renewed.certificate.not_valid_before_utc <= now < renewed.not_after()
    if expected == "cert":
        assert renewed.ca_pem == bundle.ca_pem and renewed.ca_key_pem == bundle.ca_key_pem
    else:
        new_ca, old_ca = renewed.authorities  # the old CA stays trusted until it expires
        assert old_ca == bundle.authorities[0]
        renewed.certificate.verify_directly_issued_by(new_ca)
        # ... and the next check keeps the new bundle as it is.
        assert certs.renew(renewed, HOSTS, now + dt.timedelta(days=1)) is None


def test_old_ca_is_dropped_once_expired() -> None:
    bundle = certs.generate(HOSTS, T0)
    rotated = certs.renew(bundle, HOSTS, T0 + dt.timedelta(days=250))
    assert rotated is not None and len(rotated.authorities) == 2
    later = T0 + dt.timedelta(days=366)  # the first CA has expired
    pruned = certs.renew(rotated, HOSTS, later)
    assert pruned is not None
    assert pruned.authorities == rotated.authorities[:1]
    assert pruned.cert_pem == rotated.cert_pem or pruned.hosts >= set(HOSTS)


def test_new_host_reissues_and_keeps_the_old_names() -> None:
    bundle = certs.generate(HOSTS, T0)
    renewed = certs.renew(bundle, ["10.0.0.7"], T0)
    assert renewed is not None
    assert renewed.hosts == {*HOSTS, "10.0.0.7"}
    assert certs.renew(renewed, HOSTS, T0) is None


def test_supplied_bundles_are_never_renewed(tmp_path: Path) -> None:
    bundle = certs.generate(HOSTS, T0)
    for name, data in (("tls.crt", bundle.cert_pem), ("tls.key", bundle.key_pem),
                       ("ca.crt", bundle.ca_pem)):
        (tmp_path / name).write_bytes(data)
    supplied = certs.from_directory(tmp_path)
    assert supplied.ca_key_pem == b""
    assert certs.renew(supplied, ["other"], T0 + dt.timedelta(days=1000)) is None


def test_secret_round_trip_and_damage() -> None:
    bundle = certs.generate(HOSTS, T0)
    data = certs.to_secret_data(bundle)
    assert set(data) == {"tls.crt", "tls.key", "ca.crt", "ca.key"}
    assert certs.from_secret_data(data) == bundle
    with pytest.raises(ValueError, match="usable"):
        certs.from_secret_data({"tls.crt": data["tls.crt"]})
    other = certs.generate(HOSTS, T0)
    with pytest.raises(ValueError, match="does not belong"):
        certs.from_secret_data({**data, "tls.key": certs.to_secret_data(other)["tls.key"]})
    with pytest.raises(ValueError, match="does not belong"):
        certs.renew(certs.TlsBundle(bundle.cert_pem, bundle.key_pem, bundle.ca_pem,
                                    other.ca_key_pem), HOSTS, T0)


def test_missing_supplied_file(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        certs.from_directory(tmp_path)
