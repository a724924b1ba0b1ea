"""Certificates the apiserver (a Go TLS client) will accept."""

import datetime
import ipaddress
import os
import stat

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from certs import files, pki


def test_serving_certificate_names_the_service_and_ips():
    ca = pki.new_ca("test-ca")
    leaf = pki.issue(ca, "svc", dns_names=pki.service_dns_names("wh", "ns"), ip_addresses=["127.0.0.1", "::1"])
    cert = leaf.certificate
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["wh", "wh.ns", "wh.ns.svc", "wh.ns.svc.cluster.local"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"
    cert.verify_directly_issued_by(ca.certificate)


def test_ca_is_a_ca_and_valid_now():
    ca = pki.new_ca("test-ca").certificate
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert constraints.ca is True
    now = datetime.datetime.now(datetime.timezone.utc)
    assert ca.not_valid_before_utc <= now < ca.not_valid_after_utc


def test_client_certificate_carries_user_and_groups():
    ca = pki.new_ca()
    cert = pki.issue(ca, "alice", organizations=["system:masters", "devs"], usage="client").certificate
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters",
        "devs",
    ]


def test_bad_ip_is_a_value_error():
    import pytest

    with pytest.raises(ValueError):
        pki.issue(pki.new_ca(), "x", ip_addresses=["not-an-ip"])


def test_bundle_files_and_modes(tmp_path):
    ca = pki.new_ca()
    files.write_serving_bundle(tmp_path / "out", ca, pki.issue(ca, "x", dns_names=["x"]))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE(os.stat(tmp_path / "out" / "tls.key").st_mode) == 0o600
    assert pki.ca_bundle((tmp_path / "out" / "ca.crt").read_bytes()) == pki.ca_bundle(ca.cert_pem)
