"""Real X.509 material for the TLS tests, made with the ``openssl`` CLI (no checked-in keys).

A test certificate that expires or was made by a library we also test proves little, so each run
builds its own: a CA, a server certificate for ``localhost``/``127.0.0.1`` (SAN, as hostname checks
need), a second server certificate with another serial (to see a reload), a client certificate, an
encrypted copy of the server key, and a certificate from a second, unrelated CA (a client that must
be refused). EC P-256 keys: generated in milliseconds, so one session-scoped fixture serves all tests.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

__all__ = ["KEY_PASSWORD", "TlsMaterial", "make_tls_material", "tls_material"]

KEY_PASSWORD = "s3cret-key-pass"
"""Password of ``TlsMaterial.server_key_encrypted``."""


@dataclasses.dataclass(frozen=True)
class TlsMaterial:
    """Paths of the generated PEM files, and the serials the reload test looks for."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    server_key_encrypted: Path
    server_serial: int
    server2_cert: Path
    server2_key: Path
    server2_serial: int
    client_cert: Path
    client_key: Path
    rogue_cert: Path
    rogue_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _key(path: Path) -> Path:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    return path


def _self_signed_ca(directory: Path, name: str) -> tuple[Path, Path]:
    key = _key(directory / f"{name}.key")
    cert = directory / f"{name}.pem"
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    return cert, key


def _issue(
    directory: Path, name: str, ca: tuple[Path, Path], serial: int, extensions: str
) -> tuple[Path, Path]:
    """A certificate for ``name`` signed by ``ca`` with the given serial and v3 extensions."""
    key = _key(directory / f"{name}.key")
    csr = directory / f"{name}.csr"
    cert = directory / f"{name}.pem"
    ext = directory / f"{name}.ext"
    ext.write_text(extensions, encoding="utf-8")
    _openssl("req", "-new", "-key", str(key), "-out", str(csr), "-subj", f"/CN={name}")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-set_serial", str(serial),
        "-days", "2", "-out", str(cert), "-extfile", str(ext),
    )  # fmt: skip
    return cert, key


_SERVER_EXT = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
_CLIENT_EXT = "extendedKeyUsage=clientAuth\n"


def make_tls_material(directory: Path) -> TlsMaterial:
    """Generate every file of ``TlsMaterial`` under ``directory``."""
    ca = _self_signed_ca(directory, "test-ca")
    rogue_ca = _self_signed_ca(directory, "rogue-ca")
    server_cert, server_key = _issue(directory, "server", ca, 1001, _SERVER_EXT)
    server2_cert, server2_key = _issue(directory, "server2", ca, 2002, _SERVER_EXT)
    client_cert, client_key = _issue(directory, "client", ca, 3003, _CLIENT_EXT)
    rogue_cert, rogue_key = _issue(directory, "rogue-client", rogue_ca, 4004, _CLIENT_EXT)
    encrypted = directory / "server-encrypted.key"
    _openssl(
        "pkey", "-in", str(server_key), "-aes256", "-passout", f"pass:{KEY_PASSWORD}", "-out", str(encrypted)
    )
    return TlsMaterial(
        ca_cert=ca[0],
        server_cert=server_cert,
        server_key=server_key,
        server_key_encrypted=encrypted,
        server_serial=1001,
        server2_cert=server2_cert,
        server2_key=server2_key,
        server2_serial=2002,
        client_cert=client_cert,
        client_key=client_key,
        rogue_cert=rogue_cert,
        rogue_key=rogue_key,
    )


@pytest.fixture(scope="session")
def tls_material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    """One set of certificates for the whole run (tests that rewrite files copy them first)."""
    return make_tls_material(tmp_path_factory.mktemp("tls"))
