"""Certificate authority and leaf certificates, as bytes in and bytes out.

Pure: no files, no network. The webhook needs a serving certificate whose SANs name the
Service (the apiserver verifies DNS names and ignores the CN) or, on loopback, an IP SAN;
the test control plane needs client certificates whose CN is the user and O the groups.
Keys are ECDSA P-256: small, fast to make, accepted by Go's TLS and the apiserver.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

Usage = Literal["server", "client", "both"]

CLOCK_SKEW = datetime.timedelta(minutes=5)  # certificates start this much before their issue time


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a Service is reached by inside a cluster, shortest first."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def new_ca(
    common_name: str = "gpu-scheduler-ca",
    *,
    valid_days: int = 3650,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = (now or datetime.datetime.now(datetime.timezone.utc)) - CLOCK_SKEW
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(signs_certificates=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(_cert_pem(cert), _key_pem(key))


def issue(
    ca: KeyPair,
    common_name: str,
    *,
    dns_names: Iterable[str] = (),
    ip_addresses: Iterable[str] = (),
    organizations: Sequence[str] = (),
    usage: Usage = "server",
    valid_days: int = 365,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A leaf certificate signed by `ca`.

    `organizations` become O= entries, which the apiserver reads as a client's groups.
    Raises ValueError for an IP address that does not parse.
    """
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key")
    ca_cert = ca.certificate
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    purposes = {
        "server": [ExtendedKeyUsageOID.SERVER_AUTH],
        "client": [ExtendedKeyUsageOID.CLIENT_AUTH],
        "both": [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
    }[usage]
    start = (now or datetime.datetime.now(datetime.timezone.utc)) - CLOCK_SKEW
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(attributes))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=valid_days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(signs_certificates=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(purposes), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(_cert_pem(cert), _key_pem(key))


def new_signing_key() -> bytes:
    """A bare ECDSA P-256 private key, PEM (service-account token signing)."""
    return _key_pem(ec.generate_private_key(ec.SECP256R1()))


def ca_bundle(ca_cert_pem: bytes) -> str:
    """The base64 form a MutatingWebhookConfiguration's `caBundle` takes."""
    return base64.b64encode(ca_cert_pem).decode("ascii")


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    """Digital signatures (ECDSA TLS), plus certificate and CRL signing for a CA."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
