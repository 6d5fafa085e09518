"""SASL through the bridge to a real Apache Kafka 4.3.1 broker (issue 15 item 2), and terminated SASL
with a Java client (item 3).

One ``connect-bridge serve`` process (``sasl.mode: passthrough``, ``upstream_sasl`` = the broker's
super user ``admin``) in front of the shared secured broker's SASL_PLAINTEXT listener
(``tests/kafka_secure.py``), for the whole module:

- kafka-python producers and consumers through the bridge with PLAIN, SCRAM-SHA-256 and
  SCRAM-SHA-512 (the client authenticates against the broker on its own upstream link; the bridge
  learns ``User:alice`` from the relayed exchange);
- a wrong password gets the broker's own refusal, then the connection closes; requests before
  authentication close the connection; re-authentication (KIP-368) is relayed and a change of
  principal refused by both;
- a Java AdminClient tool and a real Connect worker (``ConnectDistributed``) joining a group the
  bridge coordinates, over SASL through the bridge.

A second bridge stands in front of the SASL_SSL listener with TLS on both sides (``tls:`` on its
listener, ``upstream_tls:`` to the broker). Terminated SASL is checked with Kafka's own
``kafka-consumer-groups`` tool (a Java AdminClient over SCRAM) against an embedded bridge.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer

import java_tools as jt
from connect_bridge.bridge.security.sasl_client import SaslLoginError, sasl_login, upstream_login
from connect_bridge.bridge.security.sasl_settings import SaslSettings, UpstreamSasl
from connect_bridge.codecs import messages as m
from connect_bridge.wire.client import ClientError, KafkaConnection
from kafka_fixtures import BridgeProcess, start_bridge
from kafka_secure import SecureKafka
from polling import wait_until
from test_sasl_terminated import add_user
from test_server import HOST, running

pytestmark = pytest.mark.heavy


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


GROUP = unique("connect-sasl")
"""The Connect group of the module's bridge: its config topic is read with the bridge's own SASL login."""
STATE_TOPIC = unique("bridge-state-sasl")


def bridge_settings(kafka: SecureKafka, **extra: Any) -> dict[str, Any]:
    admin = kafka.admin_user
    return {
        "sasl": {"mode": "passthrough"},
        "upstream_sasl": {"mechanism": "SCRAM-SHA-512", "username": admin, "password": kafka.password(admin)},
        **extra,
    }


@pytest.fixture(scope="module")
def sasl_bridge(
    secure_kafka: SecureKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BridgeProcess]:
    """The pass-through bridge in front of the SASL_PLAINTEXT listener."""
    bridge = start_bridge(
        secure_kafka.sasl_plaintext,
        tmp_path_factory.mktemp("sasl-bridge"),
        config_topic=f"{GROUP}-configs",
        group=GROUP,
        settings=bridge_settings(secure_kafka, state_topic=STATE_TOPIC),
    )
    yield bridge
    bridge.stop()


def client_config(
    kafka: SecureKafka, bridge: str, mechanism: str, user: str = "alice", protocol: str = "SASL_PLAINTEXT"
) -> dict[str, Any]:
    cfg = kafka.kafka_python_config(protocol, user=user, mechanism=mechanism)
    return cfg | {"bootstrap_servers": bridge, "request_timeout_ms": 15000}


def round_trip(cfg: dict[str, Any], topic: str, count: int = 5) -> list[bytes]:
    """Produce ``count`` records and read them back with a consumer group (the broker's group)."""
    producer = KafkaProducer(**cfg)
    try:
        for i in range(count):
            producer.send(topic, f"record-{i}".encode())
        producer.flush(30)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic,
        group_id=unique("sasl-consumers"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
        **cfg,
    )
    try:
        values: list[bytes] = []
        for record in consumer:
            values.append(record.value)
            if len(values) == count:
                break
        return values
    finally:
        consumer.close()


def log_has(bridge: BridgeProcess, text: str) -> bool:
    return text in bridge.log_path.read_text(encoding="utf-8", errors="replace")


# ------------------------------------------------------------------------------- pass-through


def test_kafka_python_through_the_bridge_with_each_mechanism(
    secure_kafka: SecureKafka, sasl_bridge: BridgeProcess
) -> None:
    for mechanism in secure_kafka.mechanisms:
        topic = unique(f"sasl-{mechanism.lower()}")
        cfg = client_config(secure_kafka, sasl_bridge.bootstrap, mechanism)
        assert round_trip(cfg, topic) == [f"record-{i}".encode() for i in range(5)], mechanism
    wait_until(lambda: log_has(sasl_bridge, "authenticated as User:alice"), 10)


def test_refusals_are_the_brokers_and_nothing_passes_before_authentication(
    secure_kafka: SecureKafka, sasl_bridge: BridgeProcess
) -> None:
    host, port = sasl_bridge.bootstrap.rsplit(":", 1)

    async def scenario() -> None:
        for mechanism in secure_kafka.mechanisms:
            conn = await KafkaConnection.connect(host, int(port))
            wrong = UpstreamSasl(mechanism=mechanism, username="alice", password="not-alice-secret")
            with pytest.raises(SaslLoginError) as refused:
                await sasl_login(conn, wrong)
            # The broker's own answer, relayed: its error code and its message.
            assert "SASL_AUTHENTICATION_FAILED" in str(refused.value), str(refused.value)
            assert "Authentication failed" in str(refused.value)
            with pytest.raises(ClientError):
                await conn.request(m.MetadataRequest(topics=[]), 1, timeout=10)
        for early in (m.MetadataRequest(topics=[]), m.ConnectGroupDescribeRequest(group_ids=["connect-x"])):
            conn = await KafkaConnection.connect(host, int(port))
            versions = await conn.request(m.ApiVersionsRequest(), 0)  # served before authentication
            assert {17, 36} <= {k.api_key for k in versions.api_keys}
            with pytest.raises(ClientError):
                await conn.request(early, 1 if isinstance(early, m.MetadataRequest) else 0, timeout=10)

    asyncio.run(scenario())


def test_reauthentication_is_relayed_to_the_broker(
    secure_kafka: SecureKafka, sasl_bridge: BridgeProcess
) -> None:
    """The shared broker keeps ``connections.max.reauth.ms`` at 0 (no session expiry), so it refuses
    a re-authentication with ILLEGAL_SASL_STATE and keeps the connection as it was: the bridge
    relays that answer and keeps the connection's principal. Successful re-authentication and
    expiry are checked in ``test_sasl_terminated.py`` (the same gate, the bridge's own lifetime) and
    against a broker with short sessions in ``test_sasl_reauth.py``."""
    host, port = sasl_bridge.bootstrap.rsplit(":", 1)

    def as_user(user: str) -> UpstreamSasl:
        return UpstreamSasl(mechanism="SCRAM-SHA-256", username=user, password=secure_kafka.password(user))

    async def scenario() -> None:
        conn = await KafkaConnection.connect(host, int(port))
        await conn.request(m.ApiVersionsRequest(), 0)
        assert await sasl_login(conn, as_user("alice")) == 0  # no lifetime: the broker's setting
        for user in ("alice", "bob"):
            with pytest.raises(SaslLoginError, match="ILLEGAL_SASL_STATE"):
                await sasl_login(conn, as_user(user))
            assert (await conn.request(m.MetadataRequest(topics=[]), 1)).brokers
        await conn.close()

    asyncio.run(scenario())
    assert not log_has(sasl_bridge, "re-authenticated as")


def test_no_password_reaches_the_bridge_log(secure_kafka: SecureKafka, sasl_bridge: BridgeProcess) -> None:
    """After the tests above (logins with every mechanism, wrong passwords, re-authentications), the
    log of the bridge holds no password: neither its own ``upstream_sasl`` one nor a client's."""
    log = sasl_bridge.log_path.read_text(encoding="utf-8", errors="replace")
    assert "authenticated as User:alice" in log
    for secret in [*secure_kafka.users.values(), "not-alice-secret"]:
        assert secret not in log


def java_client_config(kafka: SecureKafka, path: Path, listener: str, mechanism: str, bootstrap: str) -> Path:
    """A Java client's ``--command-config`` file: ``listener``'s security as alice, to ``bootstrap``."""
    props = kafka.java_client_properties(listener, user="alice", mechanism=mechanism, bootstrap=bootstrap)
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    return path


def test_java_clients_and_a_connect_worker_through_the_bridge(
    secure_kafka: SecureKafka, sasl_bridge: BridgeProcess, connect_worker: Any, tmp_path: Path
) -> None:
    """The worker logs in with SCRAM-SHA-512, the Java AdminClient tool with PLAIN: both mechanisms
    a Java client uses, relayed to the broker by the same bridge."""
    props = secure_kafka.java_client_properties(
        "SASL_PLAINTEXT", user="alice", mechanism="SCRAM-SHA-512", bootstrap=sasl_bridge.bootstrap
    )
    plain = java_client_config(
        secure_kafka, tmp_path / "client.properties", "SASL_PLAINTEXT", "PLAIN", sasl_bridge.bootstrap
    )
    group = GROUP
    security = {k: v for k, v in props.items() if k != "bootstrap.servers"}
    prefixed = {f"{p}.{k}": v for p in ("producer", "consumer", "admin") for k, v in security.items()}
    worker = connect_worker(bootstrap=sasl_bridge.bootstrap, group_id=group, overrides=security | prefixed)
    assert worker.joined()
    # A Java AdminClient over SASL PLAIN through the bridge (ListGroups is answered partly by the
    # bridge; Kafka 4's tool lists consumer groups only, so the Connect group is not in its output).
    jt.run_tool(
        jt.CONSUMER_GROUPS, "--bootstrap-server", sasl_bridge.bootstrap, "--command-config",
        str(plain), "--list",
    )  # fmt: skip
    host, port = sasl_bridge.bootstrap.rsplit(":", 1)

    async def described() -> Any:
        alice = UpstreamSasl(mechanism="PLAIN", username="alice", password=secure_kafka.password("alice"))
        conn = await KafkaConnection.connect(host, int(port), login=upstream_login(alice))
        try:
            return (await conn.request(m.DescribeGroupsRequest(groups=[group]), 5)).groups[0]
        finally:
            await conn.close()

    found = asyncio.run(described())  # the bridge's own coordinator answers for its group
    assert (found.error_code, found.protocol_type, len(found.members)) == (0, "connect", 1)
    # The bridge's own kafka-python clients logged in with upstream_sasl: the state topic it created
    # holds the group's records, and the config topic (the worker's) was read without an error.
    assert log_has(sasl_bridge, f"created state topic {STATE_TOPIC!r}")
    consumer = KafkaConsumer(
        STATE_TOPIC,
        bootstrap_servers=secure_kafka.plaintext,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    try:
        assert any(GROUP.encode() in (record.key or b"") for record in consumer)
    finally:
        consumer.close()
    assert log_has(sasl_bridge, "authenticated as User:alice")


def test_sasl_ssl_on_both_sides_of_the_bridge(secure_kafka: SecureKafka, tmp_path: Path) -> None:
    """kafka-python (SCRAM-SHA-256) and a Java AdminClient (Kafka's ``kafka-topics``, SCRAM-SHA-512,
    hostname verification on) over SASL_SSL through the bridge: the Java client creates the topic
    that kafka-python then writes and reads."""
    tls = secure_kafka.material
    bridge = start_bridge(
        secure_kafka.sasl_ssl,
        tmp_path / "bridge",
        settings=bridge_settings(
            secure_kafka,
            tls={"certfile": str(tls.server_cert), "keyfile": str(tls.server_key)},
            upstream_tls={"cafile": str(tls.ca_cert)},
        ),
    )
    try:
        topic = unique("sasl-ssl")
        java = java_client_config(
            secure_kafka, tmp_path / "java.properties", "SASL_SSL", "SCRAM-SHA-512", bridge.bootstrap
        )
        jt.run_tool(
            jt.TOPICS, "--bootstrap-server", bridge.bootstrap, "--command-config", str(java),
            "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1",
        )  # fmt: skip
        cfg = client_config(secure_kafka, bridge.bootstrap, "SCRAM-SHA-256", protocol="SASL_SSL")
        assert round_trip(cfg, topic, 3) == [b"record-0", b"record-1", b"record-2"]
        assert log_has(bridge, "authenticated as User:alice")
    finally:
        bridge.stop()


# ------------------------------------------------------------------------------- terminated, Java


@pytest.mark.parametrize(
    ("mechanism", "module"),
    [("SCRAM-SHA-512", "scram.ScramLoginModule"), ("PLAIN", "plain.PlainLoginModule")],
)
def test_java_admin_client_against_terminated_sasl(tmp_path: Path, mechanism: str, module: str) -> None:
    """Kafka's ``kafka-topics`` (a Java AdminClient) logs in to the bridge's own SASL: PLAIN is checked
    against the same salted SCRAM credentials as SCRAM is (docs/security.md)."""
    credentials = tmp_path / "credentials.yaml"
    assert add_user(credentials, "alice", "alice-secret").returncode == 0
    settings = SaslSettings(mode="terminated", mechanisms=[mechanism], credentials_file=credentials)
    with running(sasl=settings) as srv:
        bootstrap = f"{HOST}:{srv.port}"

        def tool(password: str) -> Any:
            jaas = f'org.apache.kafka.common.security.{module} required username="alice" '
            jaas += f'password="{password}";'
            config = tmp_path / f"client-{password}.properties"
            config.write_text(
                f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\nsasl.jaas.config={jaas}\n",
                encoding="utf-8",
            )
            return jt.run_tool(
                jt.TOPICS, "--bootstrap-server", bootstrap, "--command-config", str(config), "--list",
                check=False,
            )  # fmt: skip

        listed = tool("alice-secret")
        assert listed.returncode == 0, listed.stderr[-2000:]
        refused = tool("wrong")
        assert refused.returncode != 0
        assert "Authentication failed" in refused.stdout + refused.stderr


def test_a_wrong_upstream_sasl_password_stops_serve_with_one_line(
    secure_kafka: SecureKafka, tmp_path: Path
) -> None:
    """Not retried like an unreachable broker (``upstream_start_timeout_ms``): the broker's refusal
    is final, so ``serve`` stops at once, naming the user, never the password."""
    config = tmp_path / "bridge.yaml"
    settings = bridge_settings(secure_kafka) | {
        "upstream_sasl": {"mechanism": "SCRAM-SHA-256", "username": "admin", "password": "not-the-password"}
    }
    config.write_text(json.dumps(settings), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "connect_bridge.cli", "serve", "--config", str(config), "--upstream",
         secure_kafka.sasl_plaintext, "--listen", f"{HOST}:0", "--metrics-listen", "off",
         "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("connect-bridge: cannot start: upstream_sasl: the broker refused user 'admin'")
    assert "SASL_AUTHENTICATION_FAILED" in last
    assert "not-the-password" not in done.stderr and "Traceback" not in done.stderr
