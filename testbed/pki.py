"""The test bed's credentials, made at every start and deleted with it: one CA, serving
certificates for 127.0.0.1, client certificates (the CN is the user, each O a group, as the API
server's x509 authenticator reads them), the service-account signing key, and bearer tokens for
test users (the API server's static token file).

EC P-256 keys throughout: quick to make, accepted by every component (ES256 for service-account
tokens).
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALID = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    path.chmod(0o600)


def _name(cn: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)] + [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs])


class Authority:
    """A throwaway CA in `folder`; every certificate it signs is written beside it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._key = _key()
        now = datetime.datetime.now(datetime.UTC)
        name = _name("nemo-rl-gke test bed CA")
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._key, hashes.SHA256())
        )
        self.ca = folder / "ca.crt"
        self.ca.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))

    @property
    def ca_pem(self) -> bytes:
        return self.ca.read_bytes()

    def _issue(self, stem: str, subject: x509.Name, server: bool) -> KeyPair:
        key = _key()
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALID)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            sans = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            usage = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
        else:
            usage = [ExtendedKeyUsageOID.CLIENT_AUTH]
        cert = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False).sign(self._key, hashes.SHA256())
        pair = KeyPair(self.folder / f"{stem}.crt", self.folder / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(key, pair.key)
        return pair

    def serving(self, stem: str) -> KeyPair:
        """A serving certificate for 127.0.0.1 and localhost."""
        return self._issue(stem, _name(stem), server=True)

    def client(self, stem: str, user: str, groups: tuple[str, ...] = ()) -> KeyPair:
        return self._issue(stem, _name(user, groups), server=False)


def service_account_key(folder: Path) -> KeyPair:
    """The key the API server signs service-account tokens with (`cert` holds its public half)."""
    key = _key()
    pair = KeyPair(folder / "sa.pub", folder / "sa.key")
    _write_key(key, pair.key)
    pair.cert.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return pair


def token() -> str:
    return secrets.token_urlsafe(24)
