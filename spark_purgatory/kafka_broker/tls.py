"""The ``SASL_SSL`` listener's certificates: a certificate authority of the broker's own.

``KafkaBroker(tls=True)`` serves SCRAM over TLS with a certificate for 127.0.0.1 and
localhost signed by a CA made at its first start: ``ca.pem`` (what a client trusts) and
``broker.pem``.  The CA's private key is never written.

Invariant: a kept data directory keeps its certificates.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from .admin import KafkaBrokerError

_VALID_DAYS = 3650


@dataclass(frozen=True)
class BrokerCertificates:
    """The PEM files of a broker's TLS listener."""

    ca_file: Path  #: the CA's certificate: what a client trusts (``ssl.truststore.location``)
    keystore_file: Path  #: the broker's key and certificate chain (``ssl.keystore.location``)

    def pkcs12_truststore(self, path: str | Path, password: str) -> Path:
        """The CA's certificate in a password-protected PKCS12 truststore at ``path``."""
        from cryptography import x509
        from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

        ca = x509.load_pem_x509_certificate(self.ca_file.read_bytes())
        store = pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca, b"ca")], BestAvailableEncryption(password.encode())
        )
        Path(path).write_bytes(store)
        return Path(path)


def certificates_in(directory: Path) -> BrokerCertificates:
    """The certificates in ``directory``, made there first if it has none."""
    found = BrokerCertificates(directory / "ca.pem", directory / "broker.pem")
    if not (found.ca_file.is_file() and found.keystore_file.is_file()):
        _make(found)
    return found


def _make(into: BrokerCertificates) -> None:
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError as missing:
        raise KafkaBrokerError(
            "the broker's TLS listener needs the cryptography package (pip install cryptography, "
            "or the project's dev extra)"
        ) from missing

    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=_VALID_DAYS)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("spark-purgatory test CA"))
        .issuer_name(name("spark-purgatory test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
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
        .sign(ca_key, hashes.SHA256())
    )
    served = (
        x509.CertificateBuilder()
        .subject_name(name("localhost"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    private = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    into.keystore_file.write_bytes(private + served.public_bytes(pem) + ca.public_bytes(pem))
    into.keystore_file.chmod(0o600)
    into.ca_file.write_bytes(ca.public_bytes(pem))
