"""Certificates for the test bed's TLS endpoints, made in process with ``cryptography``:
the status server's self-signed certificate, and the API-only control plane's CA with
the server and client certificates it signs. One way for both, so neither needs the
``openssl`` command."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Issued", "issue", "key_pair"]


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key, PEM-encoded."""

    cert: bytes
    key: bytes


def key_pair() -> tuple[bytes, bytes]:
    """A new P-256 key: (private key, public key), PEM-encoded."""
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _private_pem(key), public


def issue(
    common_name: str,
    *,
    hosts: Sequence[str] = (),
    organization: str | None = None,
    signer: Issued | None = None,
    usage: x509.ObjectIdentifier | None = None,
    days: int = 1,
) -> Issued:
    """A certificate for ``common_name`` (and ``organization``: Kubernetes reads it as
    the user's group) valid for ``hosts`` (IP addresses or DNS names), signed by
    ``signer``; without one it signs itself and is a CA. ``usage`` is its extended key
    usage (``ExtendedKeyUsageOID.SERVER_AUTH`` or ``CLIENT_AUTH``); a CA has none."""
    key = ec.generate_private_key(ec.SECP256R1())
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    subject = x509.Name(attributes)
    if signer is None:
        issuer_name, signing_key = subject, key
    else:
        issuer_name = x509.load_pem_x509_certificate(signer.cert).subject
        loaded = serialization.load_pem_private_key(signer.key, password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        signing_key = loaded
    now = dt.datetime.now(dt.timezone.utc)
    is_ca = signer is None
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=not is_ca,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signing_key.public_key()),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False
        )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    cert = builder.sign(signing_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
