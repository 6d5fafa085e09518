"""SASL terminated by the bridge: SCRAM-SHA-256/512 (RFC 5802/7677) and PLAIN over SCRAM credentials.

In local mode there is no broker to authenticate against, so the bridge verifies clients itself,
from credentials stored as Kafka stores SCRAM credentials (salt, iterations, StoredKey, ServerKey;
never the password). Both servers are sans-I/O state machines: the caller feeds each
SaslAuthenticate request's bytes to ``evaluate`` and answers with what it returns.

Interface:

- ``ScramCredential(salt, iterations, stored_key, server_key)``; ``make_credential(mechanism,
  password, iterations=4096, salt=None)``; ``verify_password(mechanism, credential, password)``.
- ``CredentialLookup = Callable[[str, str], ScramCredential | None]``: ``(mechanism, user)`` to the
  stored credential (``credentials.CredentialStore.lookup`` is one).
- ``sasl_server(mechanism, lookup) -> SaslServer`` for ``SUPPORTED_MECHANISMS`` (raises
  ``UnsupportedMechanism``, whose ``str`` is what SaslHandshake's UNSUPPORTED_SASL_MECHANISM should
  say). ``SaslServer.evaluate(client_bytes) -> bytes`` returns the server's reply, or raises
  ``SaslAuthenticationFailed`` carrying ``error_code`` (58, SASL_AUTHENTICATION_FAILED),
  ``error_message`` (what to put in SaslAuthenticate's error_message) and ``server_final`` (the RFC
  5802 ``e=...`` message; Kafka sends empty auth bytes with the error, and so should the bridge, as
  Kafka clients do not read them). Once ``.complete`` is True, ``.principal`` is ``User:<name>``.
  One server object per exchange (a new one for each KIP-368 re-authentication).

Semantics (Kafka's ``ScramSaslServer``, ``ScramMessages`` and ``PlainSaslServer``): messages in
Kafka's grammar (gs2 header ``n`` only, usernames ``=2C``/``=3D`` encoded, an ``a=`` authorization id
must equal the user); the client-final nonce must equal client nonce + server nonce; the channel
binding ``c=`` must be the base64 of the client's own gs2 header (``biws`` for ``n,,``); the proof is
checked by recomputing StoredKey and comparing in constant time; credentials must have 4096..16384
iterations, as Kafka's ``ScramMechanism`` requires. Failures say no more than Kafka does
("invalid credentials"), and an unknown user goes through the whole exchange with a salt derived
from a per-process secret, so the reply cannot tell an unknown user from a wrong password. PLAIN
checks the password against the user's SCRAM-SHA-512 credential, else its SCRAM-SHA-256 one, and
an unknown user's against a decoy derived with the same hash and iteration count (``PlainCheck``),
so the time of a refusal does not tell an unknown user from a wrong password either.
Delegation tokens (``tokenauth=true``) are refused: the bridge issues none.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from typing import Protocol

__all__ = [
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "PLAIN_CHECK_ORDER",
    "SASL_AUTHENTICATION_FAILED",
    "SCRAM_MECHANISMS",
    "SUPPORTED_MECHANISMS",
    "ClientFirst",
    "CredentialLookup",
    "PlainCheck",
    "PlainServer",
    "SaslAuthenticationFailed",
    "SaslServer",
    "ScramCredential",
    "ScramServer",
    "UnsupportedMechanism",
    "make_credential",
    "parse_client_first",
    "sasl_server",
    "scram_username",
    "verify_password",
]

SCRAM_MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
"""Mechanism name to hashlib name."""
SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
"""Kafka's ``ScramMechanism`` bounds (``kafka-configs`` refuses credentials outside them)."""
SALT_BYTES = 16
SASL_AUTHENTICATION_FAILED = 58
"""Kafka's error code for a failed SaslAuthenticate."""

# Kafka's ScramMessages grammar, Java character classes spelled out for Python.
_VALUE = r"[\x01-\x2B\x2D-\x7F]+"  # [\x01-\x7F&&[^,]]
_VALUE_SAFE = r"[\x01-\x2B\x2D-\x3C\x3E-\x7F]"  # [\x01-\x7F&&[^=,]]
_SASLNAME = rf"(?:{_VALUE_SAFE}|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"  # [\x21-\x7E&&[^,]]
_B64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)(?:m={_VALUE},)?"
    rf"(?P<bare>n=(?P<saslname>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_B64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_B64})"
)


class SaslAuthenticationFailed(Exception):
    """A refused exchange; see the module docstring for how to answer it."""

    error_code = SASL_AUTHENTICATION_FAILED

    def __init__(self, error_message: str, rfc_error: str = "other-error") -> None:
        super().__init__(error_message)
        self.error_message = error_message
        self.server_final = f"e={rfc_error}".encode()


class UnsupportedMechanism(ValueError):
    """SaslHandshake named a mechanism the bridge does not terminate."""


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    """What Kafka stores per user and mechanism; enough to verify, not to recover the password."""

    salt: bytes = dataclasses.field(repr=False)
    iterations: int
    stored_key: bytes = dataclasses.field(repr=False)
    server_key: bytes = dataclasses.field(repr=False)


CredentialLookup = Callable[[str, str], "ScramCredential | None"]


def _hmac(hash_name: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, hash_name).digest()


def _keys(hash_name: str, salted_password: bytes) -> tuple[bytes, bytes, bytes]:
    """(ClientKey, StoredKey, ServerKey) from SaltedPassword, RFC 5802 section 3."""
    client_key = _hmac(hash_name, salted_password, b"Client Key")
    stored_key = hashlib.new(hash_name, client_key).digest()
    return client_key, stored_key, _hmac(hash_name, salted_password, b"Server Key")


def _salted_password(hash_name: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(hash_name, password.encode("utf-8"), salt, iterations)


def make_credential(
    mechanism: str, password: str, iterations: int = MIN_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """The credential Kafka would store for ``password`` (``kafka-configs --add-config
    'SCRAM-SHA-256=[iterations=...,password=...]'``), with a fresh random salt unless given."""
    hash_name = SCRAM_MECHANISMS[mechanism]
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations must be in {MIN_ITERATIONS}..{MAX_ITERATIONS}, got {iterations}")
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    _, stored_key, server_key = _keys(hash_name, _salted_password(hash_name, password, salt, iterations))
    return ScramCredential(salt, iterations, stored_key, server_key)


def verify_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` yields ``credential``'s StoredKey (constant-time comparison)."""
    hash_name = SCRAM_MECHANISMS[mechanism]
    salted = _salted_password(hash_name, password, credential.salt, credential.iterations)
    return hmac.compare_digest(_keys(hash_name, salted)[1], credential.stored_key)


def scram_username(saslname: str) -> str:
    """RFC 5802 saslname decoding as Kafka's ``ScramFormatter.username``: ``=2C`` is ``,``, ``=3D``
    is ``=``, any other ``=`` is invalid (``ValueError``)."""
    name = saslname.replace("=2C", ",")
    if "=" in name.replace("=3D", ""):
        raise ValueError("invalid username encoding")
    return name.replace("=3D", "=")


@dataclasses.dataclass(frozen=True)
class ClientFirst:
    """A parsed client-first message (shared with ``sasl_peek``, which reads the user from it)."""

    gs2_header: str
    authzid: str
    user: str
    nonce: str
    bare: str
    extensions: dict[str, str]

    @property
    def token_auth(self) -> bool:
        return self.extensions.get("tokenauth", "").lower() == "true"


def parse_client_first(message: bytes) -> ClientFirst:
    """Parse with Kafka's grammar; ``ValueError`` (no secrets in it) when it does not match."""
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("client-first message is not UTF-8") from None
    match = _CLIENT_FIRST.fullmatch(text)
    if match is None:
        raise ValueError("invalid SCRAM client-first message (expected 'n,,n=<user>,r=<nonce>')")
    extensions = dict(kv.split("=", 1) for kv in match["extensions"].split(",") if kv)
    return ClientFirst(
        gs2_header=match["gs2"],
        authzid=match["authzid"] or "",
        user=scram_username(match["saslname"]),
        nonce=match["nonce"],
        bare=match["bare"],
        extensions=extensions,
    )


class SaslServer(Protocol):
    """What the bridge's SaslAuthenticate handler drives."""

    mechanism: str
    complete: bool

    @property
    def principal(self) -> str | None: ...

    def evaluate(self, client_bytes: bytes) -> bytes: ...


_PROCESS_SECRET = secrets.token_bytes(32)
"""Keys the made-up salts of unknown users: stable within a process (a probing client sees the same
salt twice), unpredictable across processes."""


def _decoy(user: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
    """A credential no password matches, with a salt stable for ``user`` (for unknown users)."""
    salt = _hmac("sha256", _PROCESS_SECRET, user.encode("utf-8"))[:SALT_BYTES]
    return ScramCredential(salt, iterations, secrets.token_bytes(64), secrets.token_bytes(64))


@dataclasses.dataclass(frozen=True)
class PlainCheck:
    """Which stored credential a PLAIN password is checked against: its mechanism and iterations.

    An unknown user must cost what a known one costs, or the answer's timing tells which users
    exist: PLAIN checks an unknown user's password with the same KDF (hash and iteration count) as
    a typical known user's (``credentials.CredentialStore.plain_check`` picks the store's most
    common), never a cheaper one."""

    mechanism: str = "SCRAM-SHA-512"
    iterations: int = MIN_ITERATIONS


PLAIN_CHECK_ORDER = ("SCRAM-SHA-512", "SCRAM-SHA-256")
"""PLAIN checks the password against the user's SCRAM-SHA-512 credential, else its SCRAM-SHA-256 one."""


class _Exchange:
    """What every mechanism's exchange shares: the credential lookup, and the user that is the
    principal only once the exchange is ``complete`` (a user named in a failed or unfinished
    exchange authenticates nobody)."""

    def __init__(self, lookup: CredentialLookup) -> None:
        self._lookup = lookup
        self._user: str | None = None
        self.complete = False

    @property
    def principal(self) -> str | None:
        """``User:<name>`` once the exchange succeeded."""
        return f"User:{self._user}" if self.complete and self._user is not None else None


class ScramServer(_Exchange):
    """One SCRAM exchange: client-first, server-first, client-final, server-final."""

    def __init__(self, mechanism: str, lookup: CredentialLookup, server_nonce: str | None = None) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise UnsupportedMechanism(f"unsupported SASL mechanism {mechanism}")
        super().__init__(lookup)
        self.mechanism = mechanism
        self._hash = SCRAM_MECHANISMS[mechanism]
        self._server_nonce = server_nonce if server_nonce is not None else secrets.token_urlsafe(24)
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self._known_user = False

    def _refuse(self, rfc_error: str) -> SaslAuthenticationFailed:
        self._credential = None
        return SaslAuthenticationFailed(
            f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
            f"{self.mechanism}",
            rfc_error,
        )

    def evaluate(self, client_bytes: bytes) -> bytes:
        """The reply to the next client message, or ``SaslAuthenticationFailed``."""
        if self.complete:
            raise self._refuse("other-error")
        if self._first is None:
            return self._on_client_first(client_bytes)
        return self._on_client_final(client_bytes)

    def _on_client_first(self, client_bytes: bytes) -> bytes:
        try:
            first = parse_client_first(client_bytes)
        except ValueError:
            raise self._refuse("invalid-encoding") from None
        if first.authzid and first.authzid != first.user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        if first.token_auth:
            raise self._refuse("extensions-not-supported")
        credential = self._lookup(self.mechanism, first.user)
        self._known_user = credential is not None
        if credential is None or not MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS:
            credential, self._known_user = _decoy(first.user), False
        self._first, self._credential = first, credential
        salt = base64.b64encode(credential.salt).decode("ascii")
        self._server_first = f"r={first.nonce}{self._server_nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode("ascii")

    def _on_client_final(self, client_bytes: bytes) -> bytes:
        first, credential = self._first, self._credential
        if first is None or credential is None:
            raise self._refuse("other-error")
        try:
            match = _CLIENT_FINAL.fullmatch(client_bytes.decode("utf-8"))
        except UnicodeDecodeError:
            match = None
        if match is None:
            raise self._refuse("invalid-encoding")
        if match["nonce"] != first.nonce + self._server_nonce:
            raise self._refuse("other-error")
        try:
            channel = base64.b64decode(match["channel"], validate=True)
            proof = base64.b64decode(match["proof"], validate=True)
        except binascii.Error:
            raise self._refuse("invalid-encoding") from None
        if channel != first.gs2_header.encode("utf-8"):
            raise self._refuse("channel-bindings-dont-match")
        auth_message = f"{first.bare},{self._server_first},{match['without_proof']}".encode()
        client_signature = _hmac(self._hash, credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise self._refuse("invalid-proof")
        client_key = bytes(p ^ s for p, s in zip(proof, client_signature, strict=True))
        computed = hashlib.new(self._hash, client_key).digest()
        if not hmac.compare_digest(computed, credential.stored_key) or not self._known_user:
            raise self._refuse("invalid-proof")
        signature = _hmac(self._hash, credential.server_key, auth_message)
        self._credential, self._user, self.complete = None, first.user, True
        return b"v=" + base64.b64encode(signature)


class PlainServer(_Exchange):
    """PLAIN (RFC 4616) as Kafka's ``PlainSaslServer``, checked against the stored SCRAM credential.

    ``evaluate`` runs the password KDF (PBKDF2, milliseconds): the SASL gate calls it off the event
    loop (``edge.sasl_gate.PasswordChecks``)."""

    mechanism = "PLAIN"
    expensive = True
    """``evaluate`` derives a key from the password (the gate runs it in its bounded executor)."""

    def __init__(self, lookup: CredentialLookup, decoy: PlainCheck = PlainCheck()) -> None:
        super().__init__(lookup)
        self._decoy_check = decoy

    def evaluate(self, client_bytes: bytes) -> bytes:
        """Empty bytes when the password is right, else ``SaslAuthenticationFailed``."""
        if self.complete:
            raise SaslAuthenticationFailed("Authentication failed: the PLAIN exchange is already complete")
        try:
            tokens = client_bytes.decode("utf-8").split("\x00")
        except UnicodeDecodeError:
            tokens = []
        if len(tokens) != 3:
            raise SaslAuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
            )
        authzid, user, password = tokens
        if not user:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        if not self._password_matches(user, password):
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self._user, self.complete = user, True
        return b""

    def _password_matches(self, user: str, password: str) -> bool:
        for mechanism in PLAIN_CHECK_ORDER:
            credential = self._lookup(mechanism, user)
            if credential is not None:
                return verify_password(mechanism, credential, password)
        # No such user: the same KDF as a known user's check (PlainCheck), so timing does not tell.
        decoy = self._decoy_check
        verify_password(decoy.mechanism, _decoy(user, decoy.iterations), password)
        return False


def sasl_server(
    mechanism: str, lookup: CredentialLookup, plain_check: PlainCheck = PlainCheck()
) -> SaslServer:
    """A fresh server for one exchange of ``mechanism`` (the one SaslHandshake accepted);
    ``plain_check``: what PLAIN spends on an unknown user (``PlainCheck``)."""
    if mechanism == "PLAIN":
        return PlainServer(lookup, plain_check)
    if mechanism in SCRAM_MECHANISMS:
        return ScramServer(mechanism, lookup)
    raise UnsupportedMechanism(
        f"Unsupported SASL mechanism {mechanism}; the bridge offers {', '.join(SUPPORTED_MECHANISMS)}"
    )
