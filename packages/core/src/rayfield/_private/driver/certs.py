"""Throwaway certificates for trying mutual TLS on one machine (tests, local trials)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path
from typing import Any


def make_test_certificates(tmp: Path) -> dict[str, Path]:
    """Write a CA, a server certificate for 127.0.0.1/localhost, a client one, and the same
    three of a second ("rogue-") CA into ``tmp``; returns ``{"ca.crt": path, ...}``.

    Needs the ``cryptography`` package (a test dependency, not a runtime one).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> Any:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def cert(cn: str, key: Any, issuer: Any, issuer_key: Any, ca: bool) -> Any:
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return builder.sign(issuer_key, hashes.SHA256())

    out: dict[str, Path] = {}

    def write(stem: str, crt: Any, key: Any) -> None:
        out[f"{stem}.crt"] = tmp / f"{stem}.crt"
        out[f"{stem}.crt"].write_bytes(crt.public_bytes(serialization.Encoding.PEM))
        out[f"{stem}.key"] = tmp / f"{stem}.key"
        out[f"{stem}.key"].write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    for prefix in ("", "rogue-"):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = cert(f"{prefix}ca", ca_key, name(f"{prefix}ca"), ca_key, ca=True)
        write(f"{prefix}ca", ca, ca_key)
        for role in ("server", "client"):
            key = ec.generate_private_key(ec.SECP256R1())
            write(f"{prefix}{role}", cert(f"{prefix}{role}", key, ca.subject, ca_key, False), key)
    return out
