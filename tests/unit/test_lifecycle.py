"""The certificate plan: create, reuse, renew, rotate the CA without a moment of distrust."""

import datetime

import pytest
from cryptography import x509

from certs import lifecycle, pki

NOW = datetime.datetime(2026, 11, 29, 12, 0, tzinfo=datetime.timezone.utc)
POLICY = lifecycle.Policy(dns_names=lifecycle.dns_names_for("wh", "ns"), ip_addresses=("127.0.0.1",))


def later(days=0, minutes=0):
    return NOW + datetime.timedelta(days=days, minutes=minutes)


def fresh():
    return lifecycle.plan(None, POLICY, now=NOW, common_name="wh.ns.svc").bundle


def trusted(bundle):
    return [c.fingerprint(c.signature_hash_algorithm) for c in x509.load_pem_x509_certificates(bundle.trusted_pem)]


def test_nothing_yet_creates_a_ca_and_a_serving_certificate_for_the_service():
    result = lifecycle.plan(None, POLICY, now=NOW, common_name="wh.ns.svc")
    assert result.action == "create"
    serving = result.bundle.serving.certificate
    serving.verify_directly_issued_by(result.bundle.ca.certificate)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "wh.ns.svc" in sans.get_values_for_type(x509.DNSName)
    assert result.bundle.trusted_pem == result.bundle.ca.cert_pem


def test_valid_certificates_are_reused_unchanged():
    bundle = fresh()
    result = lifecycle.plan(bundle, POLICY, now=later(days=100), common_name="wh.ns.svc")
    assert result.action == "reuse" and result.bundle is bundle


def test_the_serving_certificate_is_renewed_inside_the_margin_under_the_same_ca():
    bundle = fresh()
    result = lifecycle.plan(bundle, POLICY, now=later(days=340), common_name="wh.ns.svc")
    assert result.action == "renew"
    assert result.bundle.ca == bundle.ca and result.bundle.serving != bundle.serving
    assert result.bundle.trusted_pem == bundle.trusted_pem  # the caBundle does not change


def test_changed_service_names_reissue_the_serving_certificate():
    policy = lifecycle.Policy(dns_names=lifecycle.dns_names_for("other", "ns"))
    assert lifecycle.plan(fresh(), policy, now=later(days=1), common_name="x").action == "renew"


def test_a_serving_certificate_from_another_ca_is_reissued():
    bundle = fresh()
    stranger = pki.issue(pki.new_ca("other"), "wh", dns_names=POLICY.dns_names, ip_addresses=POLICY.ip_addresses)
    mixed = lifecycle.Bundle(bundle.ca, stranger)
    assert lifecycle.plan(mixed, POLICY, now=later(days=1), common_name="wh").action == "renew"


def test_a_ca_near_its_end_is_rotated_with_both_cas_trusted_then_the_old_one_dropped():
    short = lifecycle.Policy(dns_names=POLICY.dns_names, ip_addresses=POLICY.ip_addresses, ca_days=400)
    bundle = lifecycle.plan(None, short, now=NOW, common_name="wh").bundle
    rotating = lifecycle.plan(bundle, short, now=later(days=20), common_name="wh")
    assert rotating.action == "rotate-ca"
    old_ca, new_ca = bundle.ca.certificate, rotating.bundle.ca.certificate
    assert trusted(rotating.bundle) == [c.fingerprint(c.signature_hash_algorithm) for c in (old_ca, new_ca)]
    rotating.bundle.serving.certificate.verify_directly_issued_by(new_ca)
    # before the grace period the old CA stays; after it, it goes
    assert lifecycle.plan(rotating.bundle, short, now=later(days=20, minutes=5), common_name="wh").action == "reuse"
    done = lifecycle.plan(rotating.bundle, short, now=later(days=20, minutes=11), common_name="wh")
    assert done.action == "finish-rotation" and done.bundle.trusted_pem == rotating.bundle.ca.cert_pem


@pytest.mark.parametrize("missing", ["ca.crt", "ca.key", "tls.crt", "tls.key"])
def test_an_incomplete_secret_starts_afresh(missing):
    data = fresh().as_secret_data()
    del data[missing]
    assert lifecycle.read_bundle(data) is None


def test_garbage_in_the_secret_starts_afresh():
    data = fresh().as_secret_data()
    data["ca.crt"] = b"not a certificate"
    assert lifecycle.read_bundle(data) is None


def test_secret_data_round_trips():
    bundle = fresh()
    assert lifecycle.read_bundle(bundle.as_secret_data()) == bundle
