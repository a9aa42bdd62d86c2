"""Throwaway certificates: a CA and server certificates it signs, or one self-signed.

For tests of clients that verify a server (``sslmode=verify-full``): the
client trusts the CA's certificate, the server serves a certificate the CA
signed for ``127.0.0.1`` and ``localhost``. :func:`self_signed_loopback` is
the one certificate tests/support/loopback_tls.py serves. EC keys (fast to
make), valid for two days from an hour ago.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from typing import NamedTuple, Tuple

__all__ = ["CertAuthority", "make_ca", "self_signed_loopback"]


def _pem_key(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate(common_name: str, key, *, ca: bool, loopback: bool,
                 issuer=None, signing_key=None) -> bytes:
    """PEM of a certificate for ``key`` (self-signed unless ``issuer``/``signing_key``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID

    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _dt.datetime.now(_dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(issuer or subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _dt.timedelta(hours=1))
        .not_valid_after(now + _dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if loopback:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    cert = builder.sign(signing_key or key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM)


def _new_key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())  # fast, unlike RSA key generation


class CertAuthority(NamedTuple):
    """A CA: its certificate (PEM, what clients trust) and its signing key."""

    cert_pem: bytes
    key: object

    def issue(self, common_name: str = "localhost") -> Tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a server at 127.0.0.1 / localhost."""
        from cryptography import x509

        key = _new_key()
        issuer = x509.load_pem_x509_certificate(self.cert_pem).subject
        cert = _certificate(common_name, key, ca=False, loopback=True, issuer=issuer,
                            signing_key=self.key)
        return cert, _pem_key(key)


def make_ca(name: str = "goodput test CA") -> CertAuthority:
    """A new self-signed CA certificate and key."""
    key = _new_key()
    return CertAuthority(_certificate(name, key, ca=True, loopback=False), key)


def self_signed_loopback(common_name: str = "localhost") -> Tuple[bytes, bytes]:
    """(key PEM, certificate PEM): one self-signed certificate for 127.0.0.1 /
    localhost that is its own root."""
    key = _new_key()
    return _pem_key(key), _certificate(common_name, key, ca=True, loopback=True)
