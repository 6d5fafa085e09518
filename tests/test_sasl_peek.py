"""SASL passed through (``bridge/security/sasl_peek.py``): the principal read from real clients' messages, the
broker-confirmation contract, KIP-368 lifetimes, and that no secret survives in anything returned.

The client messages come from kafka-python's own mechanism classes (``kafka.net.sasl``), the bytes
its clients put in SaslAuthenticate, wherever it can make them.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth
from kafka.net.sasl.plain import SaslMechanismPlain
from kafka.net.sasl.scram import ScramClient

from connect_bridge.bridge.security.sasl_peek import (
    ClaimedPrincipal,
    PassThroughSasl,
    SaslPeekError,
    SessionLifetime,
    peek_principal,
)

PASSWORD = "hunter2-very-secret"
SASL_AUTHENTICATION_FAILED = 58


def b64url(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def jwt(claims: dict[str, Any], signature: str = "c2lnbmF0dXJl") -> str:
    return f"{b64url({'alg': 'RS256', 'typ': 'JWT'})}.{b64url(claims)}.{signature}"


TOKEN = jwt({"sub": "svc-connect", "exp": 4102444800, "scope": "kafka"})


def unsecured_jws(payload: str) -> str:
    """An ``alg: none`` token around a payload given as JSON text (which ``jwt`` could not write,
    e.g. a claim named twice)."""
    body = base64.urlsafe_b64encode(payload.encode()).decode().rstrip("=")
    return f"{b64url({'alg': 'none'})}.{body}."


class Tokens(AbstractTokenProvider):
    def __init__(self, token: str, extensions: dict[str, str] | None = None) -> None:
        self._token, self._extensions = token, extensions or {}

    def token(self) -> str:
        return self._token

    def extensions(self) -> dict[str, str]:
        return self._extensions


def plain(user: str, password: str = PASSWORD) -> bytes:
    return SaslMechanismPlain(sasl_plain_username=user, sasl_plain_password=password).auth_bytes()


def oauth(token: str = TOKEN, extensions: dict[str, str] | None = None) -> bytes:
    return SaslMechanismOAuth(sasl_oauth_token_provider=Tokens(token, extensions)).auth_bytes()


def scram_first(user: str) -> bytes:
    return ScramClient(user, PASSWORD, "SCRAM-SHA-256").first_message()


CLAIMS = [
    ("PLAIN", plain("alice"), "alice"),
    ("PLAIN", b"\x00alice\x00" + PASSWORD.encode(), "alice"),
    ("SCRAM-SHA-256", scram_first("alice"), "alice"),
    ("SCRAM-SHA-512", ScramClient("bob", PASSWORD, "SCRAM-SHA-512").first_message(), "bob"),
    ("SCRAM-SHA-256", scram_first("a=2Cb=3Dc"), "a,b=c"),
    ("SCRAM-SHA-256", b"n,a=alice,n=alice,r=abc", "alice"),
    ("OAUTHBEARER", oauth(), "svc-connect"),
    ("OAUTHBEARER", oauth(extensions={"logicalCluster": "lkc-1"}), "svc-connect"),
    ("OAUTHBEARER", oauth(jwt({"sub": "unsecured"}, signature="")), "unsecured"),
    ("OAUTHBEARER", b"n,a=svc-connect,\x01auth=Bearer " + TOKEN.encode() + b"\x01\x01", "svc-connect"),
]


@pytest.mark.parametrize(("mechanism", "message", "user"), CLAIMS)
def test_claimed_principal(mechanism: str, message: bytes, user: str) -> None:
    claimed = peek_principal(mechanism, message)
    assert claimed == ClaimedPrincipal(mechanism, user)
    assert claimed.principal == f"User:{user}"
    assert PASSWORD not in repr(claimed) and TOKEN not in repr(claimed)


def test_the_oauth_principal_claim_is_configurable() -> None:
    message = oauth(jwt({"sub": "client-id-123", "preferred_username": "alice"}))
    assert peek_principal("OAUTHBEARER", message, oauth_claim="preferred_username").user == "alice"


REFUSED = [
    ("PLAIN", b"bob\x00alice\x00" + PASSWORD.encode(), "authorization id differs"),
    ("PLAIN", b"alice\x00" + PASSWORD.encode(), "expected 3 NUL-separated tokens, got 2"),
    ("PLAIN", b"\x00alice\x00" + PASSWORD.encode() + b"\x00x", "got 4"),
    ("PLAIN", b"\x00\x00" + PASSWORD.encode(), "username not specified"),
    ("PLAIN", b"\x00alice\x00", "password not specified"),
    ("PLAIN", b"\x00al\xffice\x00" + PASSWORD.encode(), "not UTF-8"),
    ("SCRAM-SHA-256", b"n,a=bob,n=alice,r=abc", "authorization id differs"),
    ("SCRAM-SHA-256", b"n,,n=alice,r=abc,tokenauth=true", "delegation token"),
    ("SCRAM-SHA-256", b"n,,n=al=ice,r=abc", "client-first"),  # a bare "=" is outside Kafka's grammar
    ("SCRAM-SHA-256", b"p=tls-unique,,n=alice,r=abc", "client-first"),
    ("SCRAM-SHA-256", b"c=biws,r=abc,p=" + PASSWORD.encode(), "client-first"),
    ("OAUTHBEARER", oauth(jwt({"name": "no subject"})), "no 'sub' claim"),
    ("OAUTHBEARER", oauth(jwt({"sub": ""})), "no 'sub' claim"),
    ("OAUTHBEARER", oauth(jwt({"sub": " \t"})), "no 'sub' claim"),
    ("OAUTHBEARER", oauth(jwt({"sub": " alice"})), "leading or trailing whitespace"),
    ("OAUTHBEARER", oauth(jwt({"sub": "alice\n"})), "leading or trailing whitespace"),
    ("OAUTHBEARER", oauth(jwt({"sub": 42})), "no 'sub' claim"),
    ("OAUTHBEARER", oauth(unsecured_jws('{"sub": "bob", "sub": "alice"}')), "more than once"),
    ("OAUTHBEARER", oauth("opaque-token-" + PASSWORD), "not a JWT"),
    ("OAUTHBEARER", oauth("a.!!!notbase64.c"), "auth=Bearer"),
    ("OAUTHBEARER", b"n,,auth=Bearer " + TOKEN.encode(), "not a client initial response"),
    ("OAUTHBEARER", oauth("aaaa.bm90IGpzb24.c"), "not base64url JSON"),
    ("OAUTHBEARER", b"n,,\x01auth=Basic " + TOKEN.encode() + b"\x01\x01", "auth=Bearer"),
    (
        "OAUTHBEARER",
        b"n,a=mallory,\x01auth=Bearer " + TOKEN.encode() + b"\x01\x01",
        "authorization id differs",
    ),
    ("GSSAPI", b"\x60\x82", "cannot read a principal"),
]


@pytest.mark.parametrize(("mechanism", "message", "error"), REFUSED)
def test_unreadable_or_refused_claims(mechanism: str, message: bytes, error: str) -> None:
    with pytest.raises(SaslPeekError, match=error) as caught:
        peek_principal(mechanism, message)
    text = str(caught.value) + repr(caught.value)
    assert PASSWORD not in text and TOKEN not in text and "\n" not in text


def test_session_lifetime() -> None:
    forever = SessionLifetime(authenticated_at_ms=1_000, lifetime_ms=0)
    assert forever.expires_at_ms is None and forever.reauth_due_ms is None and not forever.expired(10**15)
    hour = SessionLifetime(authenticated_at_ms=1_000, lifetime_ms=3_600_000)
    assert hour.expires_at_ms == 3_601_000
    assert hour.reauth_due_ms == 1_000 + 3_060_000
    assert not hour.expired(3_600_999) and hour.expired(3_601_000)


def scram_rounds(tracker: PassThroughSasl, user: str, now_ms: int, lifetime_ms: int = 0) -> Any:
    tracker.handshake("SCRAM-SHA-512")
    tracker.client_bytes(ScramClient(user, PASSWORD, "SCRAM-SHA-512").first_message())
    first = tracker.server_reply(0, b"r=abc,s=c2FsdA==,i=4096", 0, now_ms)
    tracker.client_bytes(b"c=biws,r=abcdef,p=cHJvb2Y=")
    return first, tracker.server_reply(0, b"v=c2ln", lifetime_ms, now_ms)


def test_scram_is_confirmed_only_by_the_second_round() -> None:
    tracker = PassThroughSasl()
    first, final = scram_rounds(tracker, "alice", now_ms=5_000, lifetime_ms=60_000)
    assert first is None
    assert final is not None and final.principal == "User:alice" and final.mechanism == "SCRAM-SHA-512"
    assert final.lifetime == SessionLifetime(5_000, 60_000) and tracker.session == final


def test_plain_confirmed_or_refused_by_the_broker() -> None:
    tracker = PassThroughSasl()
    tracker.handshake("PLAIN")
    tracker.client_bytes(plain("alice"))
    assert tracker.session is None  # claimed, not confirmed
    assert tracker.server_reply(SASL_AUTHENTICATION_FAILED, b"", 0, 1) is None
    assert tracker.session is None and "refused" in (tracker.failure or "")

    tracker.handshake("PLAIN")
    tracker.client_bytes(plain("alice"))
    session = tracker.server_reply(0, b"", 0, 2)
    assert (
        session is not None and session.principal == "User:alice" and session.lifetime.expires_at_ms is None
    )
    assert PASSWORD not in repr(tracker.__dict__) and PASSWORD not in repr(session)


def test_oauthbearer_error_document_is_not_a_success() -> None:
    tracker = PassThroughSasl()
    tracker.handshake("OAUTHBEARER")
    tracker.client_bytes(oauth())
    assert tracker.server_reply(0, b'{"status":"invalid_token"}', 0, 1) is None
    tracker.client_bytes(b"\x01")
    assert tracker.server_reply(SASL_AUTHENTICATION_FAILED, b"", 0, 2) is None
    assert tracker.session is None

    tracker.handshake("OAUTHBEARER")
    tracker.client_bytes(oauth())
    session = tracker.server_reply(0, b"", 900_000, 3)
    assert session is not None and session.principal == "User:svc-connect"
    assert session.lifetime.expires_at_ms == 900_003
    assert TOKEN not in repr(tracker.__dict__) and TOKEN not in repr(session)


def test_oauthbearer_reauthentication_with_a_new_token() -> None:
    """KIP-368 with OAUTHBEARER: a Java client re-authenticates with a fresh token before the session
    (the broker's ``min(connections.max.reauth.ms, token exp)``) ends; same ``sub``, renewed; another
    ``sub``, dropped, as the broker refuses it."""
    tracker = PassThroughSasl()
    tracker.handshake("OAUTHBEARER")
    tracker.client_bytes(oauth(jwt({"sub": "alice", "exp": 1})))
    first = tracker.server_reply(0, b"", 60_000, 0)
    assert first is not None and first.lifetime.expires_at_ms == 60_000
    tracker.handshake("OAUTHBEARER")
    tracker.client_bytes(oauth(jwt({"sub": "alice", "exp": 2})))
    renewed = tracker.server_reply(0, b"", 60_000, 55_000)
    assert renewed is not None and renewed.principal == "User:alice"
    assert renewed.lifetime.expires_at_ms == 115_000
    tracker.handshake("OAUTHBEARER")
    tracker.client_bytes(oauth(jwt({"sub": "mallory"})))
    assert tracker.server_reply(0, b"", 60_000, 100_000) is None
    assert tracker.session is None and "another principal" in (tracker.failure or "")


def test_reauthentication_renews_and_may_not_change_the_principal() -> None:
    tracker = PassThroughSasl()
    _, first = scram_rounds(tracker, "alice", now_ms=0, lifetime_ms=10_000)
    tracker.handshake("SCRAM-SHA-512")
    assert tracker.session == first  # valid while the re-authentication runs
    _, renewed = scram_rounds(tracker, "alice", now_ms=9_000, lifetime_ms=10_000)
    assert renewed is not None and renewed.lifetime.expires_at_ms == 19_000

    _, changed = scram_rounds(tracker, "mallory", now_ms=15_000, lifetime_ms=10_000)
    assert changed is None and tracker.session is None and "another principal" in (tracker.failure or "")


@pytest.mark.parametrize(
    ("mechanism", "message", "failure"),
    [
        ("GSSAPI", b"\x60\x82", "cannot read a principal"),
        ("SCRAM-SHA-256", b"n,,n=alice,r=abc,tokenauth=true", "delegation token"),
    ],
)
def test_a_success_without_a_readable_principal_gives_none(
    mechanism: str, message: bytes, failure: str
) -> None:
    tracker = PassThroughSasl()
    tracker.handshake(mechanism)
    tracker.client_bytes(message)
    assert tracker.server_reply(0, b"", 0, 1) is None
    tracker.client_bytes(b"c=biws,r=abc,p=cHJvb2Y=")
    assert tracker.server_reply(0, b"v=c2ln", 0, 2) is None
    assert tracker.session is None and failure in (tracker.failure or "")


def test_authenticate_without_handshake_and_extra_rounds_fail_closed() -> None:
    tracker = PassThroughSasl()
    tracker.client_bytes(plain("alice"))
    assert tracker.server_reply(0, b"", 0, 1) is None and tracker.session is None
    tracker.handshake("PLAIN")
    tracker.client_bytes(plain("alice"))
    tracker.client_bytes(plain("alice"))
    assert tracker.server_reply(0, b"", 0, 1) is None and tracker.session is None
