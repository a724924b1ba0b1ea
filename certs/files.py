"""Writing certificate bundles to disk, with the file modes Kubernetes tooling expects."""

from __future__ import annotations

import os
from pathlib import Path

from certs import pki


def write_key_pair(pair: pki.KeyPair, cert_path: Path, key_path: Path) -> None:
    """Write a certificate (0644) and its key (0600, never readable by others, even briefly)."""
    cert_path.parent.mkdir(parents=True, exist_ok=True)
    cert_path.write_bytes(pair.cert_pem)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pair.key_pem)
    os.chmod(key_path, 0o600)


def write_serving_bundle(out_dir: Path, ca: pki.KeyPair, serving: pki.KeyPair) -> None:
    """`ca.crt`, `tls.crt`, `tls.key`: the names a kubernetes.io/tls Secret uses."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ca.crt").write_bytes(ca.cert_pem)
    write_key_pair(serving, out_dir / "tls.crt", out_dir / "tls.key")
