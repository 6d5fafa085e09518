"""KIP-368 re-authentication and session lifetime through a pass-through bridge, against a real
Apache Kafka 4.3.1 broker (issue 15 item 2).

The shared ``secure_kafka`` broker never expires a session (``connections.max.reauth.ms`` 0), so it
can only show a refusal. This module starts its own short-lived secured broker with
``connections.max.reauth.ms`` = ``SESSION_MS`` and one ``connect-bridge serve`` (``sasl.mode:
passthrough``, ``upstream_sasl`` = the super user) in front of its SASL_PLAINTEXT listener:

- Kafka's own Java producer and consumer tools run through the bridge for about three session
  lifetimes: a Java client re-authenticates by itself at 85-95% of the lifetime the broker announced,
  on the same connection; every record arrives and the bridge logged the re-authentications;
- a raw client sees the broker's session lifetime relayed in SaslAuthenticate v1, re-authenticates
  by hand and keeps being served past its first session's end; one that does not re-authenticate is
  closed at the first request after its session expired, as Kafka's broker does; and a change of
  principal on re-authentication is refused.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.admin import NewTopic

import java_tools as jt
from connect_bridge.bridge.security.sasl_client import SaslLoginError, sasl_login
from connect_bridge.bridge.security.sasl_settings import UpstreamSasl
from connect_bridge.codecs import messages as m
from connect_bridge.wire.client import ClientError, KafkaConnection
from kafka_fixtures import BridgeProcess, start_bridge
from kafka_processes import HOST, KafkaStartError, free_ports
from kafka_secure import SecureKafka, start_secure_kafka
from tansu import session_process

SESSION_MS = 4000
"""``connections.max.reauth.ms`` of this module's broker: short, so a test sees several sessions."""
RECORDS = 600
THROUGHPUT = 50
"""Records per second: ``RECORDS`` take 12 s, three session lifetimes."""


@pytest.fixture(scope="module")
def reauth_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """A secured broker whose SASL sessions last ``SESSION_MS`` (the shared one's never expire)."""
    start = lambda: start_secure_kafka(tmp_path_factory.mktemp("reauth-kafka"), reauth_ms=SESSION_MS)  # noqa: E731
    yield from session_process(start, KafkaStartError, "secured Apache Kafka broker (short sessions)")


@pytest.fixture(scope="module")
def reauth_bridge(
    reauth_kafka: SecureKafka, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BridgeProcess]:
    admin = reauth_kafka.admin_user
    [metrics_port] = free_ports(1)
    bridge = start_bridge(
        reauth_kafka.sasl_plaintext,
        tmp_path_factory.mktemp("reauth-bridge"),
        metrics_listen=f"{HOST}:{metrics_port}",
        settings={
            "sasl": {"mode": "passthrough"},
            "upstream_sasl": {
                "mechanism": "SCRAM-SHA-256",
                "username": admin,
                "password": reauth_kafka.password(admin),
            },
        },
    )
    yield bridge
    bridge.stop()


def bridge_log(bridge: BridgeProcess) -> str:
    return bridge.log_path.read_text(encoding="utf-8", errors="replace")


def sasl_authentications(bridge: BridgeProcess, mechanism: str, result: str) -> float:
    """``connect_bridge_sasl_authentications_total`` for pass-through ``mechanism`` and ``result``."""
    with urllib.request.urlopen(f"http://{bridge.metrics_listen}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    labels = f'mechanism="{mechanism}",mode="passthrough",result="{result}"'
    found = re.search(rf"^connect_bridge_sasl_authentications_total\{{{labels}\}} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def java_tool(main_class: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        jt.tool_command(main_class, *args),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(tool: subprocess.Popen[str], timeout_s: float) -> tuple[str, str]:
    """The tool's stdout and stderr once it exited 0 within ``timeout_s``."""
    what = next(arg for arg in tool.args if str(arg).startswith("org.apache.kafka.tools."))
    try:
        out, err = tool.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        tool.kill()
        out, err = tool.communicate()
        raise AssertionError(f"{what} did not finish:\n{out[-2000:]}\n{err[-3000:]}") from None
    assert tool.returncode == 0, f"{what} exited {tool.returncode}:\n{out[-2000:]}\n{err[-3000:]}"
    return out, err


def test_java_clients_reauthenticate_through_the_bridge(
    reauth_kafka: SecureKafka, reauth_bridge: BridgeProcess, tmp_path: Path
) -> None:
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    admin = reauth_kafka.admin()
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    props = reauth_kafka.java_client_properties(
        "SASL_PLAINTEXT", user="alice", mechanism="SCRAM-SHA-512", bootstrap=reauth_bridge.bootstrap
    )
    config = tmp_path / "client.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    before = bridge_log(reauth_bridge).count("re-authenticated as User:alice")
    expired_before = bridge_log(reauth_bridge).count("expired without re-authentication")
    counted_before = sasl_authentications(reauth_bridge, "SCRAM-SHA-512", "reauthenticated")
    consumer = java_tool(
        jt.CONSOLE_CONSUMER, "--bootstrap-server", reauth_bridge.bootstrap, "--command-config", str(config),
        "--topic", topic, "--from-beginning", "--max-messages", str(RECORDS), "--timeout-ms", "30000",
    )  # fmt: skip
    producer = java_tool(
        jt.PRODUCER_PERF, "--bootstrap-server", reauth_bridge.bootstrap, "--command-config", str(config),
        "--topic", topic, "--num-records", str(RECORDS), "--throughput", str(THROUGHPUT),
        "--payload-monotonic", "--command-property", "acks=all",
    )  # fmt: skip
    try:
        produced, producer_err = finished(producer, 90)
        consumed, consumer_err = finished(consumer, 60)
    finally:
        for tool in (producer, consumer):
            if tool.poll() is None:
                tool.kill()
                tool.communicate()
    assert jt.producer_perf_summary(produced)["records"] == RECORDS
    values = [line for line in consumed.splitlines() if line.strip()]
    assert sorted(int(v) for v in values) == list(range(RECORDS)), consumed[-500:]
    for err in (producer_err, consumer_err):  # no authentication trouble, not even a retried one
        assert "AuthenticationException" not in err and "ILLEGAL_SASL_STATE" not in err, err[-3000:]
    log = bridge_log(reauth_bridge)
    # Two clients for ~3 lifetimes each: each connection in use re-authenticated at least twice.
    reauthenticated = log.count("re-authenticated as User:alice") - before
    assert reauthenticated >= 4, log[-3000:]
    counted = sasl_authentications(reauth_bridge, "SCRAM-SHA-512", "reauthenticated") - counted_before
    assert counted == reauthenticated
    assert sasl_authentications(reauth_bridge, "SCRAM-SHA-512", "authenticated") >= 2
    assert f"session {SESSION_MS} ms" in log
    assert log.count("expired without re-authentication") == expired_before  # none was cut off
    for secret in reauth_kafka.users.values():
        assert secret not in log


def as_user(kafka: SecureKafka, user: str, mechanism: str = "SCRAM-SHA-256") -> UpstreamSasl:
    return UpstreamSasl(mechanism=mechanism, username=user, password=kafka.password(user))


async def served(conn: KafkaConnection) -> bool:
    return bool((await conn.request(m.MetadataRequest(topics=[]), 1, timeout=10)).brokers)


async def reauthenticates(kafka: SecureKafka, host: str, port: int) -> None:
    """Re-authenticate by hand halfway through each session: served past the first session's end."""
    conn = await KafkaConnection.connect(host, port)
    try:
        await conn.request(m.ApiVersionsRequest(), 0)
        lifetime = await sasl_login(conn, as_user(kafka, "alice", "PLAIN"))
        assert 0 < lifetime <= SESSION_MS  # the broker's session_lifetime_ms, relayed
        first_session_ends = time.monotonic() + lifetime / 1000
        while time.monotonic() < first_session_ends + 1.0:
            await asyncio.sleep(lifetime / 2000)  # the test: time passing within the session
            assert 0 < await sasl_login(conn, as_user(kafka, "alice", "PLAIN")) <= SESSION_MS
            assert await served(conn)
        # Kafka's broker refuses a re-authentication within a second of the previous one (the bridge
        # relays its answer) and keeps serving the session.
        with pytest.raises(SaslLoginError, match="ILLEGAL_SASL_STATE"):
            await sasl_login(conn, as_user(kafka, "alice", "PLAIN"))
        assert await served(conn)
        await asyncio.sleep(1.0)  # the test: past Kafka's one-second minimum between re-authentications
        # Another user on the same connection: refused, and the connection is closed.
        with pytest.raises(SaslLoginError, match="SASL_AUTHENTICATION_FAILED"):
            await sasl_login(conn, as_user(kafka, "bob", "PLAIN"))
        with pytest.raises((ClientError, OSError)):
            await served(conn)
    finally:
        await conn.close()


async def expires(kafka: SecureKafka, host: str, port: int) -> tuple[float, int]:
    """Authenticate once and keep asking: served until the session ends, then closed. Returns how
    long it was served (seconds) and the session lifetime (ms)."""
    conn = await KafkaConnection.connect(host, port)
    try:
        await conn.request(m.ApiVersionsRequest(), 0)
        started = time.monotonic()
        lifetime = await sasl_login(conn, as_user(kafka, "bob"))
        assert 0 < lifetime <= SESSION_MS
        deadline = started + lifetime / 1000 + 10
        while time.monotonic() < deadline:
            try:
                await served(conn)
            except (ClientError, OSError):
                return time.monotonic() - started, lifetime
            await asyncio.sleep(0.1)
        raise AssertionError("the connection was still served 10 s after its session expired")
    finally:
        await conn.close()


def test_raw_clients_session_lifetime_reauthentication_and_expiry(
    reauth_kafka: SecureKafka, reauth_bridge: BridgeProcess
) -> None:
    host, port = reauth_bridge.bootstrap.rsplit(":", 1)

    async def scenario() -> Any:
        return await asyncio.gather(
            reauthenticates(reauth_kafka, host, int(port)), expires(reauth_kafka, host, int(port))
        )

    _, (served_s, lifetime) = asyncio.run(scenario())
    # Served for the whole session, closed at the first request after it (polled every 0.1 s).
    assert lifetime / 1000 <= served_s <= lifetime / 1000 + 2, served_s
    log = bridge_log(reauth_bridge)
    assert "re-authenticated as User:alice" in log
    assert "expired without re-authentication" in log
    assert sasl_authentications(reauth_bridge, "PLAIN", "reauthenticated") >= 2
    assert sasl_authentications(reauth_bridge, "PLAIN", "failed") == 1  # alice -> bob refused
