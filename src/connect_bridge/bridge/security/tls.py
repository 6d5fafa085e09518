"""TLS for the bridge's listeners and its upstream connections: settings, contexts, certificate reload.

Why a module of its own: a TLS mistake (wrong path, a key that belongs to another certificate, a
wrong key password) must stop ``serve`` at start with one line naming the file, not surface as an
OpenSSL "PEM lib" on the first connection; and certificates are rotated under a running process
(cert-manager, certbot), so the listener must pick up new files without a restart.

Interface (the server and settings wire these; nothing here opens a socket):

- ``ListenerTls`` / ``UpstreamTls``: pydantic models of one YAML block each (``extra="forbid"``,
  frozen; ``key_password`` is a ``SecretStr`` so it never shows in a repr or a log line).
- ``server_context(settings, name="listener") -> ssl.SSLContext`` and
  ``client_context(settings, name="upstream") -> ssl.SSLContext``: build a context or raise
  ``TlsError`` (a ``ValueError`` whose message is one operator-readable line starting ``TLS <name>:``).
- ``ReloadingServerContext(settings, name="listener")``: ``.context`` is what to hand to
  ``asyncio.start_server(ssl=...)``. Every TLS handshake on it first calls ``.current()``, which
  rebuilds the context when the certificate, key or CA file changed (mtime, size or inode), and
  switches that handshake to the newest good context: new connections get the new certificate, open
  ones keep the one they negotiated. A rotation that does not load (half-written files, a mismatched
  pair) keeps the previous context, logs one warning and records ``.last_error``; it is retried on
  the next change of any file. ``.check() -> bool`` does the same on demand (e.g. from a timer, to
  log a broken rotation before any client connects).
- ``certificate_principal(ssl_object.getpeercert())``: the principal Kafka gives a verified client
  certificate (``User:`` + the subject DN in RFC 2253 form), for ``Connection.principal``.

Semantics chosen (mirroring Kafka's ``ssl.*`` listener settings): ``client_auth`` is Kafka's
``ssl.client.auth`` (``none``/``requested``/``required``); ``min_version`` defaults to TLSv1.2 as
Kafka's ``ssl.enabled.protocols`` does; upstream hostname verification is on by default, as Kafka's
``ssl.endpoint.identification.algorithm=https`` is, and with no ``cafile`` the system CAs are used.
"""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, SecretStr, model_validator

__all__ = [
    "ListenerTls",
    "ReloadingServerContext",
    "TlsError",
    "UpstreamTls",
    "certificate_principal",
    "client_context",
    "server_context",
]

log = logging.getLogger("connect_bridge.bridge.security.tls")

TlsVersion = Literal["TLSv1.2", "TLSv1.3"]
_VERSIONS: dict[str, ssl.TLSVersion] = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH: dict[str, ssl.VerifyMode] = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_ENCRYPTED_MARKERS = ("ENCRYPTED PRIVATE KEY", "Proc-Type: 4,ENCRYPTED")


class TlsError(ValueError):
    """A TLS setting that cannot work, as one line: ``TLS <name>: <what> (<what to do>)``."""


class ListenerTls(BaseModel):
    """TLS of one of our listeners (worker or metrics)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    certfile: Path
    """PEM certificate chain the bridge presents (leaf first)."""
    keyfile: Path
    """PEM private key of ``certfile``; may be encrypted (then set ``key_password``)."""
    key_password: SecretStr | None = None
    cafile: Path | None = None
    """CAs that client certificates must chain to; required unless ``client_auth`` is ``none``."""
    client_auth: Literal["none", "requested", "required"] = "none"
    min_version: TlsVersion = "TLSv1.2"

    @model_validator(mode="after")
    def _ca_for_client_auth(self) -> ListenerTls:
        if self.client_auth != "none" and self.cafile is None:
            raise ValueError(
                f"client_auth {self.client_auth!r} needs cafile (the CAs client certificates chain to)"
            )
        return self


class UpstreamTls(BaseModel):
    """TLS of the bridge's connections to the upstream brokers."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cafile: Path | None = None
    """CAs the brokers' certificates chain to; the system's default CAs when unset."""
    certfile: Path | None = None
    """Client certificate, for brokers with ``ssl.client.auth=required``."""
    keyfile: Path | None = None
    key_password: SecretStr | None = None
    check_hostname: bool = True
    min_version: TlsVersion = "TLSv1.2"

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> UpstreamTls:
        if (self.certfile is None) != (self.keyfile is None):
            raise ValueError("certfile and keyfile go together (a client certificate needs its key)")
        return self


def _readable(name: str, field: str, path: Path) -> str:
    """The file's text, or ``TlsError`` saying why it cannot be read."""
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        raise TlsError(f"TLS {name}: {field} {path}: no such file") from None
    except IsADirectoryError:
        raise TlsError(f"TLS {name}: {field} {path}: is a directory, expected a PEM file") from None
    except OSError as exc:
        raise TlsError(f"TLS {name}: {field} {path}: cannot read ({exc.strerror})") from None


def _no_prompt() -> bytes:
    """Password callback for keys without a configured password: OpenSSL would otherwise prompt on
    the terminal of a service. We check encryption first, so this only runs on odd PEM files."""
    raise TlsError("key needs a password")


def _load_chain(
    context: ssl.SSLContext, name: str, certfile: Path, keyfile: Path, password: SecretStr | None
) -> None:
    """``load_cert_chain`` with each OpenSSL failure turned into a line naming the file and the fix."""
    if "-----BEGIN CERTIFICATE-----" not in _readable(name, "certfile", certfile):
        raise TlsError(f"TLS {name}: certfile {certfile}: no PEM certificate in it")
    key_text = _readable(name, "keyfile", keyfile)
    if "PRIVATE KEY-----" not in key_text:
        raise TlsError(f"TLS {name}: keyfile {keyfile}: no PEM private key in it")
    encrypted = any(marker in key_text for marker in _ENCRYPTED_MARKERS)
    if encrypted and password is None:
        raise TlsError(f"TLS {name}: keyfile {keyfile} is encrypted (set key_password)")
    secret: str | Callable[[], bytes] = password.get_secret_value() if password is not None else _no_prompt
    try:
        context.load_cert_chain(certfile, keyfile, secret)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise TlsError(f"TLS {name}: keyfile {keyfile} is not the key of certfile {certfile}") from None
        if encrypted:
            raise TlsError(
                f"TLS {name}: keyfile {keyfile}: cannot decrypt it (wrong key_password?)"
            ) from None
        raise TlsError(f"TLS {name}: cannot load certfile {certfile} with keyfile {keyfile}: {exc}") from None
    except TlsError:
        raise TlsError(f"TLS {name}: keyfile {keyfile} is encrypted (set key_password)") from None


def _load_cas(context: ssl.SSLContext, name: str, cafile: Path) -> None:
    if "-----BEGIN CERTIFICATE-----" not in _readable(name, "cafile", cafile):
        raise TlsError(f"TLS {name}: cafile {cafile}: no PEM certificate in it")
    try:
        context.load_verify_locations(cafile=cafile)
    except ssl.SSLError as exc:
        raise TlsError(f"TLS {name}: cafile {cafile}: cannot load it ({exc.reason or exc})") from None


def server_context(settings: ListenerTls, name: str = "listener") -> ssl.SSLContext:
    """A server-side context for ``settings``, or ``TlsError``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[settings.min_version]
    _load_chain(context, name, settings.certfile, settings.keyfile, settings.key_password)
    if settings.cafile is not None:
        _load_cas(context, name, settings.cafile)
    context.verify_mode = _CLIENT_AUTH[settings.client_auth]
    return context


def client_context(settings: UpstreamTls, name: str = "upstream") -> ssl.SSLContext:
    """A client-side context for ``settings``, or ``TlsError``. Pass the broker's host as
    ``server_hostname`` when connecting: that is what ``check_hostname`` checks."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = _VERSIONS[settings.min_version]
    if settings.cafile is not None:
        _load_cas(context, name, settings.cafile)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = settings.check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if settings.certfile is not None and settings.keyfile is not None:
        _load_chain(context, name, settings.certfile, settings.keyfile, settings.key_password)
    return context


Fingerprint = tuple[tuple[int, int, int] | None, ...]


def _fingerprint(paths: tuple[Path, ...]) -> Fingerprint:
    """(mtime_ns, size, inode) per file; None for a file that is missing right now (mid-rotation)."""
    prints: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            prints.append(None)
        else:
            prints.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
    return tuple(prints)


class ReloadingServerContext:
    """A listener context that follows its certificate files (see the module docstring).

    How: ``.context`` carries an SNI callback, which OpenSSL runs on every ClientHello (with or
    without a server name); it points the handshake's ``SSLObject`` at the newest context, which
    swaps the certificate, key and CA store for that connection only. ``client_auth`` and
    ``min_version`` come from the settings, which do not change, so the front context has them too.
    """

    def __init__(self, settings: ListenerTls, name: str = "listener") -> None:
        self._settings = settings
        self._name = name
        self._paths = tuple(
            p for p in (settings.certfile, settings.keyfile, settings.cafile) if p is not None
        )
        self._seen = _fingerprint(self._paths)
        self._active = server_context(settings, name)
        self.context = server_context(settings, name)
        self.context.sni_callback = self._on_client_hello
        self.generation = 0
        """How many times a rotation was loaded."""
        self.last_error: str | None = None
        """Why the last rotation did not load, until one does."""

    def check(self) -> bool:
        """Rebuild the context if a file changed; True when a new context was loaded."""
        now = _fingerprint(self._paths)
        if now == self._seen:
            return False
        self._seen = now
        try:
            fresh = server_context(self._settings, self._name)
        except TlsError as exc:
            if str(exc) != self.last_error:
                log.warning("%s; keeping the previous certificate until the files change again", exc)
            self.last_error = str(exc)
            return False
        self._active = fresh
        self.generation += 1
        self.last_error = None
        log.info("TLS %s: loaded the new certificate from %s", self._name, self._settings.certfile)
        return True

    def current(self) -> ssl.SSLContext:
        """The context the next handshake gets (reloaded first if the files changed)."""
        self.check()
        return self._active

    def _on_client_hello(
        self, ssl_object: ssl.SSLObject, _server_name: str | None, _ctx: ssl.SSLContext
    ) -> None:
        try:
            ssl_object.context = self.current()
        except Exception:  # an exception here would abort the handshake with no trace in the log
            log.exception(
                "TLS %s: certificate reload check failed; this connection keeps the old one", self._name
            )


# ------------------------------------------------------------------ the client certificate's principal

_RFC2253_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
"""The keywords Java's ``X500Principal.getName()`` (RFC 2253) prints by name."""
_HEX_ATTRIBUTES = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16)}
"""Attributes Java prints as ``OID=#<hex DER>``, with their OID and DER string tag (IA5String)."""
_SPECIAL = frozenset(',+"\\<>;')


def _escape(value: str) -> str:
    """RFC 2253 section 2.4 escaping, as Java's ``X500Principal`` does it."""
    out = "".join(f"\\{c}" if c in _SPECIAL else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _attribute(name: str, value: str) -> str:
    if name in _RFC2253_KEYWORDS:
        return f"{_RFC2253_KEYWORDS[name]}={_escape(value)}"
    if name in _HEX_ATTRIBUTES:
        oid, tag = _HEX_ATTRIBUTES[name]
        raw = value.encode("utf-8")
        return f"{oid}=#{tag:02x}{len(raw):02x}{raw.hex()}" if len(raw) < 128 else f"{oid}={_escape(value)}"
    return f"{name}={_escape(value)}"  # other attributes: best effort (docs/security.md)


def certificate_principal(peercert: dict[str, object] | None) -> str | None:
    """Kafka's default SSL principal of a verified client certificate: ``User:`` + the subject DN in
    RFC 2253 form (``User:CN=client,O=Acme\\, Inc,C=US``: last RDN first, no spaces, specials
    escaped), as ``DefaultKafkaPrincipalBuilder`` builds it from ``X500Principal.getName()``.

    ``peercert`` is ``SSLObject.getpeercert()``, which holds a certificate only when the handshake
    verified one (``client_auth`` requested or required); None or an empty dict gives None, and the
    connection stays anonymous."""
    if not peercert:
        return None
    subject = peercert.get("subject")
    if not isinstance(subject, tuple) or not subject:
        return None
    rdns = ["+".join(_attribute(str(name), str(value)) for name, value in rdn) for rdn in reversed(subject)]
    return "User:" + ",".join(rdns)
