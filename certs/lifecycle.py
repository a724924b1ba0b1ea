"""When to create, keep, renew or rotate the webhook's certificates: a pure plan.

`gpu-scheduler certs ensure` reads the Secret, asks `plan()` what to do, and writes the
result. The CA signs a serving certificate for the Service's names. Renewal replaces the
serving certificate under the same CA, so the apiserver's caBundle stays valid throughout.
A CA near its end is rotated: the new CA joins the bundle *beside* the old one, so the
serving certificate in use (old CA) and its replacement (new CA) are both trusted while
webhook pods reload; a later run, once the new serving certificate has been out for the
grace period, drops the old CA. No admission call fails along the way.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from certs import pki

Action = Literal["create", "reuse", "renew", "rotate-ca", "finish-rotation"]
SECRET_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")
PREVIOUS_CA_KEY = "ca-previous.crt"


@dataclass(frozen=True)
class Bundle:
    """What the Secret holds."""

    ca: pki.KeyPair
    serving: pki.KeyPair
    previous_ca_pem: bytes | None = None  # during a CA rotation

    def as_secret_data(self) -> dict[str, bytes]:
        data = {"ca.crt": self.ca.cert_pem, "ca.key": self.ca.key_pem,
                "tls.crt": self.serving.cert_pem, "tls.key": self.serving.key_pem}
        if self.previous_ca_pem:
            data[PREVIOUS_CA_KEY] = self.previous_ca_pem
        return data

    @property
    def trusted_pem(self) -> bytes:
        """The caBundle: the CA, and the previous CA while a rotation is under way."""
        return (self.previous_ca_pem or b"") + self.ca.cert_pem


@dataclass(frozen=True)
class Plan:
    action: Action
    bundle: Bundle
    reason: str


@dataclass(frozen=True)
class Policy:
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = ()
    margin: datetime.timedelta = datetime.timedelta(days=30)  # renew when less validity than this is left
    serving_days: int = 365
    ca_days: int = 3650
    grace: datetime.timedelta = datetime.timedelta(minutes=10)  # for webhook pods to load a new certificate


def read_bundle(data: Mapping[str, bytes]) -> Bundle | None:
    """The Secret's contents, or None when a key is missing or does not parse (then: start afresh)."""
    if not all(data.get(key) for key in SECRET_KEYS):
        return None
    bundle = Bundle(pki.KeyPair(data["ca.crt"], data["ca.key"]), pki.KeyPair(data["tls.crt"], data["tls.key"]),
                    data.get(PREVIOUS_CA_KEY) or None)
    try:
        bundle.ca.certificate
        bundle.serving.certificate
    except ValueError:
        return None
    return bundle


def plan(current: Bundle | None, policy: Policy, *, now: datetime.datetime, common_name: str) -> Plan:
    if current is None:
        ca = pki.new_ca(f"{common_name} CA", valid_days=policy.ca_days, now=now)
        return Plan("create", Bundle(ca, _serving(ca, policy, now, common_name)), "no usable certificates yet")
    ca_cert = current.ca.certificate
    if ca_cert.not_valid_after_utc - now < policy.margin + datetime.timedelta(days=policy.serving_days):
        ca = pki.new_ca(f"{common_name} CA", valid_days=policy.ca_days, now=now)
        bundle = Bundle(ca, _serving(ca, policy, now, common_name), previous_ca_pem=current.ca.cert_pem)
        return Plan("rotate-ca", bundle, f"CA expires {ca_cert.not_valid_after_utc:%Y-%m-%d}: rotating")
    problem = _serving_problem(current, policy, now)
    if problem:
        bundle = Bundle(current.ca, _serving(current.ca, policy, now, common_name), current.previous_ca_pem)
        return Plan("renew", bundle, problem)
    issued = current.serving.certificate.not_valid_before_utc + pki.CLOCK_SKEW
    if current.previous_ca_pem and now - issued >= policy.grace:
        return Plan("finish-rotation", Bundle(current.ca, current.serving), "new CA in use: old CA dropped")
    return Plan("reuse", current, f"valid until {current.serving.certificate.not_valid_after_utc:%Y-%m-%d}")


def _serving(ca: pki.KeyPair, policy: Policy, now: datetime.datetime, common_name: str) -> pki.KeyPair:
    return pki.issue(ca, common_name, dns_names=policy.dns_names, ip_addresses=policy.ip_addresses,
                     valid_days=policy.serving_days, now=now)


def _serving_problem(current: Bundle, policy: Policy, now: datetime.datetime) -> str | None:
    cert = current.serving.certificate
    if cert.not_valid_after_utc - now < policy.margin:
        return f"serving certificate expires {cert.not_valid_after_utc:%Y-%m-%d}: renewing"
    try:
        cert.verify_directly_issued_by(current.ca.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return "serving certificate not signed by the CA: reissuing"
    if _names(cert) != (set(policy.dns_names), {ipaddress.ip_address(ip) for ip in policy.ip_addresses}):
        return "serving certificate names differ from the Service's: reissuing"
    return None


def _names(cert: x509.Certificate) -> tuple[set[str], set[object]]:
    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set(), set()
    return set(sans.get_values_for_type(x509.DNSName)), set(sans.get_values_for_type(x509.IPAddress))


def dns_names_for(service: str, namespace: str, extra: Sequence[str] = ()) -> tuple[str, ...]:
    return tuple(pki.service_dns_names(service, namespace)) + tuple(extra)
