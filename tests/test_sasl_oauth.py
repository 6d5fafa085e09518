"""OAUTHBEARER passed through the bridge to a real Apache Kafka 4.3.1 broker (issue 15 item 2).

The shared secured broker (``tests/kafka_secure.py``) validates Kafka's *unsecured* JWS tokens
(``alg: none``; the ``sub`` claim is the principal) on its SASL listeners. One ``connect-bridge
serve`` in pass-through mode stands in front of its SASL_PLAINTEXT listener, with the bridge's own
group authorization on (an ACL file: alice and bob may READ ``connect-oauth-*``, bob nothing of
``connect-oauth-secret``), so every decision below depends on the principal the bridge read from the
token the broker accepted:

- kafka-python (``sasl_mechanism="OAUTHBEARER"``, a token provider with an extension) produces and
  fetches through the bridge, and the bridge logs ``User:alice``;
- over the wire, alice (``sub=alice``) joins her groups, bob (``sub=bob``) is refused the secret
  group with GROUP_AUTHORIZATION_FAILED and cannot act on alice's member;
- an expired token gets the broker's SASL_AUTHENTICATION_FAILED (RFC 7628's error round relayed),
  a token the bridge cannot read the bridge's own refusal, and after either nothing passes;
- Kafka's own ``kafka-topics`` (a Java AdminClient with the unsecured ``OAuthBearerLoginModule``)
  works through the bridge as ``User:carol``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

import java_tools as jt
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.wire.client import ClientError, KafkaConnection
from kafka_fixtures import BridgeProcess, start_bridge
from kafka_secure import OAUTHBEARER, SecureKafka
from test_authorization import DENIED, UNKNOWN, GroupApis
from test_sasl_kafka import bridge_settings, log_has

OPEN, SECRET = "connect-oauth-open", "connect-oauth-secret"
FAILED = int(ErrorCode.SASL_AUTHENTICATION_FAILED)
ACLS = f"""\
Current ACLs for resource `ResourcePattern(resourceType=GROUP, name=connect-oauth-, patternType=PREFIXED)`:
 \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)
 \t(principal=User:bob, host=*, operation=READ, permissionType=ALLOW)

Current ACLs for resource `ResourcePattern(resourceType=GROUP, name={SECRET}, patternType=LITERAL)`:
 \t(principal=User:bob, host=*, operation=ALL, permissionType=DENY)
"""


class UnsecuredTokens(AbstractTokenProvider):
    """kafka-python's token provider, giving one fixed token (and SASL extensions, RFC 7628 kvpairs)."""

    def __init__(self, token: str, extensions: dict[str, str] | None = None) -> None:
        super().__init__()
        self._token, self._extensions = token, extensions or {}

    def token(self) -> str:
        return self._token

    def extensions(self) -> dict[str, str]:
        return self._extensions


@pytest.fixture(scope="module")
def oauth_bridge(
    secure_kafka: SecureKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BridgeProcess]:
    """Pass-through bridge in front of SASL_PLAINTEXT, authorizing its groups from an ACL file."""
    workdir = tmp_path_factory.mktemp("oauth-bridge")
    acl_file = workdir / "acls.txt"
    acl_file.write_text(ACLS, encoding="utf-8")
    settings = bridge_settings(secure_kafka, authorization={"enabled": True, "acl_file": str(acl_file)})
    bridge = start_bridge(secure_kafka.sasl_plaintext, workdir, settings=settings)
    yield bridge
    bridge.stop()


def address(bridge: BridgeProcess) -> tuple[str, int]:
    host, port = bridge.bootstrap.rsplit(":", 1)
    return host, int(port)


async def oauth_login(bridge: BridgeProcess, token: str) -> tuple[KafkaConnection, Any]:
    """A raw connection through the bridge and the final SaslAuthenticate answer for ``token``: the
    client side of RFC 7628 as Kafka's clients speak it (a non-empty first answer is the server's
    error document, acknowledged with ``\\x01``; the refusal comes back on that round)."""
    conn = await KafkaConnection.connect(*address(bridge))
    handshake = await conn.request(SaslHandshakeRequest(mechanism=OAUTHBEARER), 1)
    assert handshake.error_code == 0 and OAUTHBEARER in handshake.mechanisms, handshake
    first = SaslMechanismOAuth(sasl_oauth_token_provider=UnsecuredTokens(token)).auth_bytes()
    reply = await conn.request(SaslAuthenticateRequest(auth_bytes=first), 1)
    if reply.error_code == 0 and reply.auth_bytes:
        reply = await conn.request(SaslAuthenticateRequest(auth_bytes=b"\x01"), 1)
    return conn, reply


async def as_user(bridge: BridgeProcess, sub: str) -> GroupApis:
    conn, reply = await oauth_login(bridge, SecureKafka.unsecured_jws(sub))
    assert reply.error_code == 0, reply
    return GroupApis(conn)


def test_kafka_python_produces_and_fetches_with_an_unsecured_token(
    secure_kafka: SecureKafka, oauth_bridge: BridgeProcess
) -> None:
    tokens = UnsecuredTokens(secure_kafka.unsecured_jws("alice"), {"traceId": "connect-bridge-test"})
    cfg = {
        "bootstrap_servers": oauth_bridge.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": OAUTHBEARER,
        "sasl_oauth_token_provider": tokens,
        "request_timeout_ms": 15000,
    }
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(**cfg)
    try:
        for i in range(3):
            producer.send(topic, f"record-{i}".encode())
        producer.flush(30)
    finally:
        producer.close()
    consumer = KafkaConsumer(**cfg, consumer_timeout_ms=15000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        values = [record.value for _, record in zip(range(3), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [b"record-0", b"record-1", b"record-2"]
    assert log_has(oauth_bridge, "authenticated as User:alice")


def test_group_decisions_follow_the_tokens_principal(oauth_bridge: BridgeProcess) -> None:
    async def scenario() -> None:
        alice, bob = await as_user(oauth_bridge, "alice"), await as_user(oauth_bridge, "bob")
        member, generation = await alice.classic_member(OPEN)
        assert await alice.sync(OPEN, member, generation) == 0
        # bob: refused where only his principal is denied, and alice's members are not his.
        assert await alice.join(SECRET) == ErrorCode.MEMBER_ID_REQUIRED  # allowed: a first join's answer
        assert await bob.join(SECRET) == DENIED
        assert await bob.heartbeat(SECRET, member) == DENIED
        assert await bob.heartbeat(OPEN, member) == UNKNOWN
        assert await bob.join(OPEN, member) == UNKNOWN
        assert await bob.leave(OPEN, member) == (0, [UNKNOWN])
        assert await bob.describe_groups(OPEN, SECRET) == [(OPEN, 0), (SECRET, DENIED)]
        assert await alice.heartbeat(OPEN, member) == 0  # untouched, and hers
        for apis in (alice, bob):
            await apis.conn.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert log_has(oauth_bridge, "authenticated as User:bob")


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (SecureKafka.unsecured_jws("alice", lifetime_s=-60), "invalid_token"),  # the broker's refusal
        ("opaque-not-a-jwt", "connect-bridge cannot read the principal"),  # the bridge's, not relayed
    ],
    ids=["expired-token", "unreadable-token"],
)
def test_a_refused_token_gets_sasl_authentication_failed_and_nothing_passes(
    oauth_bridge: BridgeProcess, token: str, says: str
) -> None:
    async def scenario() -> None:
        conn, reply = await oauth_login(oauth_bridge, token)
        assert (reply.error_code, says in (reply.error_message or "")) == (FAILED, True), reply
        with pytest.raises(ClientError):
            await conn.request(m.MetadataRequest(topics=[]), 1, timeout=10)
        await conn.close()

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert token not in oauth_bridge.log_path.read_text(encoding="utf-8", errors="replace")


def test_a_java_admin_client_with_kafkas_unsecured_login_module(
    secure_kafka: SecureKafka, oauth_bridge: BridgeProcess, tmp_path: Path
) -> None:
    props = secure_kafka.java_client_properties("SASL_PLAINTEXT", bootstrap=oauth_bridge.bootstrap) | {
        "sasl.mechanism": OAUTHBEARER,
        "sasl.jaas.config": secure_kafka.oauth_jaas("carol"),
    }
    config = tmp_path / "oauth.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    topic = f"oauth-java-{uuid.uuid4().hex[:8]}"
    jt.run_tool(
        jt.TOPICS, "--bootstrap-server", oauth_bridge.bootstrap, "--command-config", str(config),
        "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1",
    )  # fmt: skip
    admin = secure_kafka.admin()
    try:
        assert topic in admin.list_topics()  # created on the broker, through the bridge
    finally:
        admin.close()
    assert log_has(oauth_bridge, "authenticated as User:carol")
