"""SASL passed through: learn who a client claims to be, and when the broker has confirmed it.

In proxy mode the client authenticates against the real cluster: the bridge relays SaslHandshake and
SaslAuthenticate on the client's own upstream connection and never sees a verdict of its own. To
authorize the group requests it answers itself, it still needs the principal, and the only place it
can read it is the mechanism's own messages. This module reads them, and keeps nothing else: no
password, SCRAM proof or OAuth token is stored, returned or logged (the tests check the reprs).

Interface (pure: no I/O, no clock; the caller passes ``now_ms``):

- ``peek_principal(mechanism, auth_bytes, oauth_claim="sub") -> ClaimedPrincipal`` reads the client's
  *first* SaslAuthenticate bytes for ``mechanism`` (the one named in SaslHandshake v1) or raises
  ``SaslPeekError`` (malformed, unsupported mechanism, or a principal the bridge cannot see).
- ``SessionLifetime(authenticated_at_ms, lifetime_ms)``: KIP-368 ``session_lifetime_ms`` of the final
  SaslAuthenticate response (v1+), with ``expires_at_ms``, ``expired(now_ms)`` and ``reauth_due_ms``.
- ``PassThroughSasl``: one per client connection. Call ``handshake(mechanism)`` on each SaslHandshake
  the broker accepted (error 0), ``client_bytes(auth_bytes)`` on each SaslAuthenticate request and
  ``server_reply(error_code, auth_bytes, session_lifetime_ms, now_ms)`` on each response. It returns
  an ``Authenticated(principal, mechanism, lifetime)`` exactly when the broker has completed the
  exchange successfully, and ``.session`` holds the last one.

The contract: **a claimed principal is never to be trusted on its own.** It becomes the connection's
principal only when the broker completed that exchange with error 0: after the one round of PLAIN,
after the second round of SCRAM (the first round's error 0 only carries the server-first message),
and after an OAUTHBEARER round whose response is empty (a non-empty one is the RFC 7628 error
document; the failure follows on the next round). A client whose principal cannot be read
(GSSAPI, a SCRAM delegation token, a malformed message the broker accepted anyway) completes with no
principal: ``server_reply`` returns None and ``.failure`` says why, and the caller fails closed.
Re-authentication (KIP-368) goes through the same calls; as Kafka's SaslServerAuthenticator refuses
a change of principal on re-authentication, so does this tracker (the session is dropped).

Kafka rules followed: PLAIN as ``PlainSaslServer`` (exactly three NUL-separated tokens, user and
password non-empty, an authorization id must equal the user); SCRAM as ``ScramSaslServer`` with
``ScramMessages.ClientFirstMessage`` (gs2 header ``n,`` only; ``=2C``/``=3D`` decoding; an ``a=``
authorization id must equal the user; ``tokenauth=true`` marks a delegation token, whose owner is not
in the message); OAUTHBEARER as ``OAuthBearerClientInitialResponse`` with the principal from the
token's ``sub`` claim (``sasl.oauthbearer.sub.claim.name``'s default); the JWT is *not* verified
here, the broker does that. Where Kafka's two validators could make different principals from one
token (a subject with leading or trailing whitespace: the OIDC one trims it, the unsecured one does
not; the claim named twice: jose4j refuses, Jackson keeps the last) the principal is unreadable.
The principal is ``User:<name>``, as Kafka's default principal builder makes it for SASL; a cluster
with a custom ``principal.builder.class`` needs the same mapping here.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any

from connect_bridge.bridge.security.scram import SCRAM_MECHANISMS, parse_client_first

__all__ = [
    "Authenticated",
    "ClaimedPrincipal",
    "PassThroughSasl",
    "SaslPeekError",
    "SessionLifetime",
    "peek_principal",
]

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
REAUTH_EARLIEST_FRACTION = 0.85
"""Kafka clients re-authenticate at a random 85-95% of the session lifetime (KIP-368)."""

_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"  # Kafka's (?:[\x01-\x7F&&[^=,]]|=2C|=3D)+
_OAUTH_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7E \t\r\n]+\x01)*)\x01",
    re.DOTALL,
)
_BEARER = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)")
_JAVA_TRIM = "".join(map(chr, range(0x21)))
"""What Java's ``String.trim`` removes (every char up to U+0020), as Kafka's validators trim."""


class SaslPeekError(ValueError):
    """The principal cannot be read from these bytes; the message never contains secrets."""


@dataclasses.dataclass(frozen=True)
class ClaimedPrincipal:
    """Who the client says it is (unverified until the broker says so)."""

    mechanism: str
    user: str

    @property
    def principal(self) -> str:
        """``User:<name>``, the form Kafka's ACLs use."""
        return f"User:{self.user}"


@dataclasses.dataclass(frozen=True)
class SessionLifetime:
    """KIP-368: how long the broker keeps this authentication valid (``lifetime_ms`` 0: forever)."""

    authenticated_at_ms: int
    lifetime_ms: int

    @property
    def expires_at_ms(self) -> int | None:
        """When the broker stops accepting requests other than SaslHandshake without a re-authentication."""
        return self.authenticated_at_ms + self.lifetime_ms if self.lifetime_ms > 0 else None

    @property
    def reauth_due_ms(self) -> int | None:
        """The earliest time a Kafka client re-authenticates (85% of the lifetime)."""
        if self.lifetime_ms <= 0:
            return None
        return self.authenticated_at_ms + int(self.lifetime_ms * REAUTH_EARLIEST_FRACTION)

    def expired(self, now_ms: int) -> bool:
        """True once requests must be refused until the client re-authenticates."""
        expires = self.expires_at_ms
        return expires is not None and now_ms >= expires


@dataclasses.dataclass(frozen=True)
class Authenticated:
    """A principal the broker confirmed, and for how long."""

    principal: str
    mechanism: str
    lifetime: SessionLifetime


def _utf8(data: bytes, mechanism: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslPeekError(f"{mechanism}: the client message is not UTF-8") from None


def _peek_plain(data: bytes) -> str:
    tokens = _utf8(data, PLAIN).split("\x00")
    if len(tokens) != 3:
        raise SaslPeekError(f"PLAIN: expected 3 NUL-separated tokens, got {len(tokens)}")
    authzid, user, password = tokens
    if not user:
        raise SaslPeekError("PLAIN: username not specified")
    if not password:
        raise SaslPeekError("PLAIN: password not specified")
    if authzid and authzid != user:
        raise SaslPeekError("PLAIN: authorization id differs from the username")
    return user


def _peek_scram(mechanism: str, data: bytes) -> str:
    try:
        first = parse_client_first(data)
    except ValueError as exc:
        raise SaslPeekError(f"{mechanism}: {exc}") from None
    if first.token_auth:
        raise SaslPeekError(f"{mechanism}: a delegation token; its owner is not in the message")
    if first.authzid and first.authzid != first.user:
        raise SaslPeekError(f"{mechanism}: authorization id differs from the username")
    return first.user


def _b64url(segment: str) -> bytes:
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def _peek_oauthbearer(data: bytes, claim: str) -> str:
    match = _OAUTH_FIRST.fullmatch(_utf8(data, OAUTHBEARER))
    if match is None:
        raise SaslPeekError("OAUTHBEARER: not a client initial response (RFC 7628)")
    pairs = dict(kv.split("=", 1) for kv in match["kvpairs"].split("\x01") if kv)
    bearer = _BEARER.fullmatch(pairs.get("auth", ""))
    if bearer is None or bearer["scheme"].lower() != "bearer":
        raise SaslPeekError("OAUTHBEARER: no 'auth=Bearer <token>' in the initial response")
    parts = bearer["token"].split(".")
    if len(parts) != 3:
        raise SaslPeekError("OAUTHBEARER: the token is not a JWT (expected header.payload.signature)")
    try:
        payload = json.loads(_b64url(parts[1]), object_pairs_hook=_claims_once(claim))
    except (binascii.Error, ValueError):
        raise SaslPeekError("OAUTHBEARER: the JWT payload is not base64url JSON") from None
    except _RepeatedClaim:
        raise SaslPeekError(f"OAUTHBEARER: the JWT names the {claim!r} claim more than once") from None
    subject = payload.get(claim) if isinstance(payload, dict) else None
    if not isinstance(subject, str) or not subject.strip(_JAVA_TRIM):
        raise SaslPeekError(f"OAUTHBEARER: the JWT has no {claim!r} claim")
    if subject != subject.strip(_JAVA_TRIM):
        # Kafka's OIDC validator (BrokerJwtValidator) trims the subject, its unsecured one does not:
        # which principal the broker made is unknowable here, so neither is believed.
        raise SaslPeekError(f"OAUTHBEARER: the JWT's {claim!r} claim has leading or trailing whitespace")
    if match["authzid"] and match["authzid"] != subject:
        raise SaslPeekError("OAUTHBEARER: authorization id differs from the token's principal")
    return subject


class _RepeatedClaim(Exception):
    pass


def _claims_once(claim: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A ``json.loads`` hook refusing a repeated principal claim: Python and Jackson (Kafka's unsecured
    validator) keep the last, jose4j (its OIDC validator) refuses the token, so fail closed."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if sum(key == claim for key, _ in items) > 1:
            raise _RepeatedClaim
        return dict(items)

    return pairs


def peek_principal(mechanism: str, auth_bytes: bytes, oauth_claim: str = "sub") -> ClaimedPrincipal:
    """The principal the client's first SaslAuthenticate bytes claim (see the module's contract)."""
    if mechanism == PLAIN:
        user = _peek_plain(auth_bytes)
    elif mechanism in SCRAM_MECHANISMS:
        user = _peek_scram(mechanism, auth_bytes)
    elif mechanism == OAUTHBEARER:
        user = _peek_oauthbearer(auth_bytes, oauth_claim)
    else:
        raise SaslPeekError(f"{mechanism}: the bridge cannot read a principal from this mechanism")
    return ClaimedPrincipal(mechanism, user)


_ROUNDS = {PLAIN: 1, OAUTHBEARER: 1} | dict.fromkeys(SCRAM_MECHANISMS, 2)


class PassThroughSasl:
    """Follows one connection's relayed SASL exchanges; see the module docstring for the calls."""

    def __init__(self, oauth_claim: str = "sub") -> None:
        self._oauth_claim = oauth_claim
        self._mechanism: str | None = None
        self._claimed: ClaimedPrincipal | None = None
        self._round = 0
        self.session: Authenticated | None = None
        """The last exchange the broker completed with a readable principal (None before, or after
        a failure or a refused change of principal)."""
        self.failure: str | None = None
        """Why the last exchange gave no principal (never contains secrets)."""

    def handshake(self, mechanism: str) -> None:
        """A SaslHandshake the broker accepted: a new exchange (first or re-authentication) starts."""
        self._mechanism = mechanism
        self._claimed = None
        self._round = 0
        self.failure = None

    def client_bytes(self, auth_bytes: bytes) -> None:
        """A SaslAuthenticate request; only the first of an exchange names the principal."""
        if self._mechanism is None:
            self.failure = "SaslAuthenticate before SaslHandshake"
            return
        if self._round == 0:
            try:
                self._claimed = peek_principal(self._mechanism, auth_bytes, self._oauth_claim)
            except SaslPeekError as exc:
                self.failure = str(exc)
        self._round += 1

    def server_reply(
        self, error_code: int, auth_bytes: bytes, session_lifetime_ms: int, now_ms: int
    ) -> Authenticated | None:
        """A SaslAuthenticate response; the confirmed session when this completes the exchange."""
        mechanism = self._mechanism
        if mechanism is None:
            return None
        if error_code != 0:
            self._end(f"the broker refused the authentication (error {error_code})")
            return None
        needed = _ROUNDS.get(mechanism)
        if needed is None or self._round < needed:
            return None  # a mechanism we cannot follow (failure says so), or SCRAM's server-first
        if self._round > needed:
            self._end(f"{mechanism}: more rounds than the mechanism has")
            return None
        if mechanism == OAUTHBEARER and auth_bytes:
            return None  # RFC 7628 error document; the refusal follows on the client's next round
        claimed, self._mechanism = self._claimed, None
        if claimed is None:
            self.session = None
            self.failure = self.failure or f"{mechanism}: no principal could be read"
            return None
        if self.session is not None and self.session.principal != claimed.principal:
            self._end("re-authentication with another principal (Kafka refuses that too)")
            return None
        self.session = Authenticated(
            claimed.principal, mechanism, SessionLifetime(now_ms, max(0, session_lifetime_ms))
        )
        return self.session

    def _end(self, why: str) -> None:
        self._mechanism = None
        self._claimed = None
        self.session = None
        self.failure = why
