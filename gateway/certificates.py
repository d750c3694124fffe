"""The gateway's TLS certificate when the operator gives none of their own.

At the first start that serves HTTPS, a certificate authority is made for the state
directory (an EC P-256 key, ten years) and it signs a server certificate for the
address served: its name or IP, plus, for a wildcard address (`0.0.0.0`, `::`), this
host's names and addresses, and loopback. Operators point the CLI at the authority's
certificate (`SYNTH_GATEWAY_CA`); the server certificate is made again when the address
changes or it has less than 30 days left, the authority kept, so a CA file handed out
stays good. Keys are written owner-only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_LIFETIME = timedelta(days=3650)
SERVER_LIFETIME = timedelta(days=365)
RENEW_BEFORE = timedelta(days=30)
WILDCARDS = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class ServerCertificate:
    certificate: Path
    key: Path
    authority: Path
    """The CA certificate clients trust it by (`SYNTH_GATEWAY_CA`)."""


def _names(host: str) -> list[str]:
    """Every name and address the certificate must cover for `host`."""
    found = {host, "localhost", "127.0.0.1", "::1"} - set(WILDCARDS)
    if host in WILDCARDS:
        for name in {socket.gethostname(), socket.getfqdn()}:
            found.add(name)
            with contextlib.suppress(OSError):
                found |= {str(entry[4][0]) for entry in socket.getaddrinfo(name, None)}
    return sorted(found)


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _write(path: Path, content: bytes) -> None:
    pending = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as sink:
        sink.write(content)
    pending.replace(path)


def _key_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _authority(
    directory: Path, now: datetime
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    certificate_path, key_path = directory / "ca.pem", directory / "ca.key"
    if certificate_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(certificate_path.read_bytes()), key
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "synth gateway CA")])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + CA_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write(key_path, _key_bytes(key))
    _write(certificate_path, certificate.public_bytes(serialization.Encoding.PEM))
    return certificate, key


def _covers(path: Path, names: list[str], now: datetime) -> bool:
    if not path.exists():
        return False
    certificate = x509.load_pem_x509_certificate(path.read_bytes())
    if certificate.not_valid_after_utc - now < RENEW_BEFORE:
        return False
    alternative = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return {_general_name(name) for name in names} <= set(alternative.value)


def generated_certificate(directory: Path, host: str) -> ServerCertificate:
    """The generated certificate for serving on `host`, made (or made again) as needed."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = datetime.now(UTC)
    found = ServerCertificate(
        directory / "server.pem", directory / "server.key", directory / "ca.pem"
    )
    names = _names(host)
    authority, authority_key = _authority(directory, now)
    if _covers(found.certificate, names, now) and found.key.exists():
        return found
    key = ec.generate_private_key(ec.SECP256R1())
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(authority.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + SERVER_LIFETIME)
        .add_extension(
            x509.SubjectAlternativeName([_general_name(name) for name in names]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(authority_key, hashes.SHA256())
    )
    _write(found.key, _key_bytes(key))
    _write(found.certificate, certificate.public_bytes(serialization.Encoding.PEM))
    return found
