"""Receivers that fail the TLS handshake in every way a delivery client can see (SPEC Q3, D5).

`TlsReceiver` is a small TCP server on 127.0.0.1 (an ephemeral port, a background thread per
connection) that answers each connection with one `Handshake` behaviour:

==============  =========================================================================
``reset``       reads the ClientHello, then resets the connection (RST)
``eof``         reads the ClientHello, then closes cleanly (FIN) with no ServerHello
``plaintext``   answers the ClientHello with a plain-HTTP 400, as a server not speaking TLS
``alert``       answers the ClientHello with a fatal TLS handshake_failure alert
``serve``       completes the handshake with ``certificate`` and answers HTTP 200
==============  =========================================================================

`mint_ca` and `mint_leaf` make the certificates with ``cryptography``: a CA a client can be told
to trust, and leaves for chosen names and validity (a wrong hostname, an expired one).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

HOST = "127.0.0.1"
Handshake = Literal["reset", "eof", "plaintext", "alert", "serve"]

#: A TLS record: alert (21), TLS 1.2, two bytes long: fatal (2) handshake_failure (40).
HANDSHAKE_FAILURE_ALERT = b"\x15\x03\x03\x00\x02\x02\x28"
_OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
_PLAIN_400 = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


@dataclass(frozen=True)
class Minted:
    """A certificate and its key as PEM files, and the certificate object itself."""

    cert: Path
    key: Path
    certificate: x509.Certificate
    private_key: ec.EllipticCurvePrivateKey

    def server_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert, self.key)
        return context

    def trusting_client(self) -> ssl.SSLContext:
        """A client context that trusts this (CA) certificate and nothing else."""
        return ssl.create_default_context(cafile=str(self.cert))


def _write(
    directory: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Minted:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return Minted(cert_path, key_path, cert, key)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def mint_ca(directory: Path) -> Minted:
    """A CA certificate valid for a day, with key usage fit for signing leaves."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("hookstream test CA"))
        .issuer_name(_name("hookstream test CA"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    return _write(directory, "ca", cert, key)


def mint_leaf(
    directory: Path,
    ca: Minted | None,
    *,
    names: tuple[str, ...] = ("localhost", HOST),
    expired: bool = False,
    label: str = "leaf",
) -> Minted:
    """A server certificate for ``names``, signed by ``ca`` (self-signed when None)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    start, end = (
        (now - datetime.timedelta(days=30), now - datetime.timedelta(days=1))
        if expired
        else (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))
    )
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    issuer, signing_key = (
        (_name(label), key) if ca is None else (ca.certificate.subject, ca.private_key)
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(label))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=True)
    )
    if ca is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.private_key.public_key()),
            critical=False,
        )
    return _write(directory, label, builder.sign(signing_key, hashes.SHA256()), key)


class TlsReceiver:
    """A TCP server answering every connection with one `Handshake` behaviour (see module)."""

    def __init__(self, behaviour: Handshake, certificate: Minted | None = None) -> None:
        if (behaviour == "serve") != (certificate is not None):
            raise ValueError("a certificate is needed to serve, and only then")
        self.behaviour = behaviour
        self._context = None if certificate is None else certificate.server_context()
        self._listener = socket.create_server((HOST, 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self.connections = 0
        self.requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"https://{HOST}:{self.port}{path}"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        with contextlib.suppress(OSError), conn:
            if self.behaviour == "serve":
                self._serve(conn)
                return
            conn.recv(4096)  # the ClientHello
            if self.behaviour == "reset":
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            elif self.behaviour == "plaintext":
                conn.sendall(_PLAIN_400)
            elif self.behaviour == "alert":
                conn.sendall(HANDSHAKE_FAILURE_ALERT)
            # "eof": nothing; every behaviour ends by closing (an RST with linger 0)

    def _serve(self, conn: socket.socket) -> None:
        assert self._context is not None
        with self._context.wrap_socket(conn, server_side=True) as tls:  # raises on a failure
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = tls.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next(
                (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")),
                0,
            )  # fmt: skip
            while len(body) < length:
                chunk = tls.recv(65536)
                if not chunk:
                    return
                body += chunk
            self.requests += 1
            tls.sendall(_OK)


@pytest.fixture
def tls_receiver() -> Iterator[type[TlsReceiver]]:
    """Factory of `TlsReceiver`s, closed after the test."""
    made: list[TlsReceiver] = []

    class Tracked(TlsReceiver):
        def __init__(self, behaviour: Handshake, certificate: Minted | None = None) -> None:
            super().__init__(behaviour, certificate)
            made.append(self)

    yield Tracked
    for receiver in made:
        receiver.close()
