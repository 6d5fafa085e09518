"""Terminated SASL (``bridge/security/scram.py``): the SCRAM and PLAIN servers against a real client.

The client side is kafka-python's own SCRAM implementation (``kafka.net.sasl.scram.ScramClient``,
the code its consumers and admin clients run), driven message by message; no network is needed to
exercise the exchange. RFC 7677's published SCRAM-SHA-256 exchange pins the arithmetic.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

import pytest
from kafka.net.sasl.scram import ScramClient

from connect_bridge.bridge.security.credentials import CredentialStore
from connect_bridge.bridge.security.scram import (
    SASL_AUTHENTICATION_FAILED,
    PlainServer,
    SaslAuthenticationFailed,
    ScramCredential,
    ScramServer,
    UnsupportedMechanism,
    make_credential,
    sasl_server,
    verify_password,
)

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
Tamper = Callable[[bytes], bytes]


def untouched(message: bytes) -> bytes:
    return message


PASSWORD = "alice-secret-pw"


@pytest.fixture(scope="module")
def store() -> CredentialStore:
    return (
        CredentialStore()
        .with_user("alice", PASSWORD)
        .with_user("a,b=c", "odd-name-pw")
        .with_user("sha256-only", "short-pw", mechanisms=["SCRAM-SHA-256"], iterations=8192)
    )


def exchange(server: ScramServer, client: ScramClient, tamper_final: Tamper = untouched) -> bytes:
    """Run both rounds; returns the server-final message after the client has checked it."""
    client.process_server_first_message(server.evaluate(client.first_message()))
    server_final = server.evaluate(tamper_final(client.final_message()))
    client.process_server_final_message(server_final)
    return server_final


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_client_authenticates(store: CredentialStore, mechanism: str) -> None:
    server = ScramServer(mechanism, store.lookup)
    assert server.principal is None
    assert exchange(server, ScramClient("alice", PASSWORD, mechanism)).startswith(b"v=")
    assert server.complete and server.principal == "User:alice"
    with pytest.raises(SaslAuthenticationFailed):
        server.evaluate(b"n,,n=alice,r=again")  # one exchange per server object


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_saslname_encoding_is_decoded(store: CredentialStore, mechanism: str) -> None:
    # kafka-python sends the name as given, so give it the RFC 5802 saslname of "a,b=c".
    server = ScramServer(mechanism, store.lookup)
    exchange(server, ScramClient("a=2Cb=3Dc", "odd-name-pw", mechanism))
    assert server.principal == "User:a,b=c"


def _refusal(
    mechanism: str, store: CredentialStore, user: str, password: str, tamper: Tamper
) -> SaslAuthenticationFailed:
    server = ScramServer(mechanism, store.lookup)
    with pytest.raises(SaslAuthenticationFailed) as caught:
        exchange(server, ScramClient(user, password, mechanism), tamper)
    assert not server.complete and server.principal is None
    return caught.value


def _swap_nonce(message: bytes) -> bytes:
    return re.sub(
        rb"r=([^,]+)",
        lambda m: b"r=" + m.group(1)[:-1] + (b"A" if m.group(1)[-1:] != b"A" else b"B"),
        message,
    )


def _flip_proof(message: bytes) -> bytes:
    head, proof = message.rsplit(b",p=", 1)
    raw = bytearray(base64.b64decode(proof))
    raw[0] ^= 0x01
    return head + b",p=" + base64.b64encode(bytes(raw))


def _rebind(message: bytes) -> bytes:
    return message.replace(b"c=biws,", b"c=" + base64.b64encode(b"y,,") + b",")


REFUSALS = [
    ("wrong password", "alice", "not-the-password", None, "invalid-proof"),
    ("unknown user", "mallory", PASSWORD, None, "invalid-proof"),
    ("tampered proof", "alice", PASSWORD, _flip_proof, "invalid-proof"),
    ("nonce mismatch", "alice", PASSWORD, _swap_nonce, "other-error"),
    ("channel binding", "alice", PASSWORD, _rebind, "channel-bindings-dont-match"),
]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize(
    ("case", "user", "password", "tamper", "rfc_error"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
def test_refusals(
    store: CredentialStore,
    mechanism: str,
    case: str,
    user: str,
    password: str,
    tamper: Tamper | None,
    rfc_error: str,
) -> None:
    failure = _refusal(mechanism, store, user, password, tamper or untouched)
    assert failure.error_code == SASL_AUTHENTICATION_FAILED
    assert failure.server_final == f"e={rfc_error}".encode()
    # As Kafka: one generic message, whatever the reason, so a client learns nothing about users.
    generic = "Authentication failed during authentication due to invalid credentials with SASL mechanism"
    assert failure.error_message == f"{generic} {mechanism}"
    assert password not in repr(failure) and password not in failure.error_message


def test_unknown_user_gets_a_stable_made_up_salt(store: CredentialStore) -> None:
    def salt(user: str) -> str:
        reply = ScramServer("SCRAM-SHA-256", store.lookup).evaluate(f"n,,n={user},r=abc".encode())
        return dict(kv.split("=", 1) for kv in reply.decode().split(","))["s"]

    assert salt("mallory") == salt("mallory") != salt("trudy")
    alice = store.lookup("SCRAM-SHA-256", "alice")
    assert alice is not None and salt("alice") == base64.b64encode(alice.salt).decode()


FIRST_MESSAGE_REFUSALS = [
    (b"n,a=bob,n=alice,r=abc", "authorization id that is different from username", "other-error"),
    (b"n,,n=alice,r=abc,tokenauth=true", "invalid credentials", "extensions-not-supported"),
    (b"y,,n=alice,r=abc", "invalid credentials", "invalid-encoding"),
    (b"n,,n=al=ice,r=abc", "invalid credentials", "invalid-encoding"),
    (b"n,,n=alice", "invalid credentials", "invalid-encoding"),
    (b"\xff\xfe", "invalid credentials", "invalid-encoding"),
]


@pytest.mark.parametrize(("message", "error", "rfc_error"), FIRST_MESSAGE_REFUSALS)
def test_client_first_refusals(store: CredentialStore, message: bytes, error: str, rfc_error: str) -> None:
    with pytest.raises(SaslAuthenticationFailed, match=error) as caught:
        ScramServer("SCRAM-SHA-256", store.lookup).evaluate(message)
    assert caught.value.server_final == f"e={rfc_error}".encode()


def test_authzid_equal_to_the_user_is_accepted(store: CredentialStore) -> None:
    server = ScramServer("SCRAM-SHA-256", store.lookup)
    assert server.evaluate(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")


def test_credentials_below_kafkas_minimum_iterations_never_authenticate() -> None:
    weak = make_credential("SCRAM-SHA-256", PASSWORD)
    weak = ScramCredential(weak.salt, 1000, weak.stored_key, weak.server_key)
    server = ScramServer("SCRAM-SHA-256", lambda mechanism, user: weak)
    with pytest.raises(SaslAuthenticationFailed):
        exchange(server, ScramClient("alice", PASSWORD, "SCRAM-SHA-256"))
    with pytest.raises(ValueError, match=r"4096\.\.16384"):
        make_credential("SCRAM-SHA-256", PASSWORD, iterations=1000)


def test_rfc_7677_scram_sha_256_vector() -> None:
    credential = make_credential("SCRAM-SHA-256", "pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    server = ScramServer(
        "SCRAM-SHA-256",
        lambda mechanism, user: credential if user == "user" else None,
        server_nonce="%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
    )
    nonce = b"rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    assert server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=" + nonce + b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    final = b"c=biws,r=" + nonce + b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    assert server.evaluate(final) == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.principal == "User:user"


PLAIN_CASES = [
    (b"\x00alice\x00" + PASSWORD.encode(), "User:alice", None),
    (b"alice\x00alice\x00" + PASSWORD.encode(), "User:alice", None),
    (b"\x00sha256-only\x00short-pw", "User:sha256-only", None),
    (b"\x00alice\x00wrong", None, "Invalid username or password"),
    (b"\x00mallory\x00" + PASSWORD.encode(), None, "Invalid username or password"),
    (b"bob\x00alice\x00" + PASSWORD.encode(), None, "authorization id that is different"),
    (b"alice\x00" + PASSWORD.encode(), None, "expected 3 tokens, got 2"),
    (b"\x00alice\x00pw\x00x", None, "expected 3 tokens, got 4"),
    (b"\x00\x00" + PASSWORD.encode(), None, "username not specified"),
    (b"\x00alice\x00", None, "password not specified"),
]


@pytest.mark.parametrize(("message", "principal", "error"), PLAIN_CASES)
def test_plain_against_scram_credentials(
    store: CredentialStore, message: bytes, principal: str | None, error: str | None
) -> None:
    server = PlainServer(store.lookup)
    if error is None:
        assert server.evaluate(message) == b""
        assert server.principal == principal
        return
    with pytest.raises(SaslAuthenticationFailed, match=error) as caught:
        server.evaluate(message)
    assert caught.value.error_code == SASL_AUTHENTICATION_FAILED
    assert server.principal is None and PASSWORD not in str(caught.value)


def test_verify_password_and_reprs_keep_secrets(store: CredentialStore) -> None:
    credential = store.lookup("SCRAM-SHA-512", "alice")
    assert credential is not None
    assert verify_password("SCRAM-SHA-512", credential, PASSWORD)
    assert not verify_password("SCRAM-SHA-512", credential, PASSWORD + "x")
    text = repr(credential) + repr(store)
    assert PASSWORD not in text and base64.b64encode(credential.stored_key).decode() not in text


def test_sasl_server_factory() -> None:
    lookup = CredentialStore().lookup
    assert isinstance(sasl_server("PLAIN", lookup), PlainServer)
    assert sasl_server("SCRAM-SHA-512", lookup).mechanism == "SCRAM-SHA-512"
    with pytest.raises(UnsupportedMechanism, match="offers PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"):
        sasl_server("GSSAPI", lookup)
