"""SASL terminated by the bridge (no upstream), and the listener rules every SASL mode shares.

A real ``BridgeServer`` (in a thread, ``test_server.Running``) with ``sasl.mode: terminated`` over a
credentials file written by ``connect-bridge credentials add``; clients are kafka-python's own
(``KafkaAdminClient`` with SCRAM-SHA-256/512 and PLAIN) and the bridge's ``KafkaConnection`` with
its ``upstream_sasl`` login (kafka-python's mechanisms) or hand-made SASL frames. Kafka's rules
checked: only ApiVersions/SaslHandshake/SaslAuthenticate before authentication (anything else
closes), ILLEGAL_SASL_STATE for SaslAuthenticate without SaslHandshake, UNSUPPORTED_SASL_MECHANISM
with the enabled list, SASL_AUTHENTICATION_FAILED and a close for a wrong password, KIP-368
session lifetime (re-authentication keeps the connection, expiry closes it, a change of principal
is refused), and the connection's principal. The Java client against terminated SASL is in
``tests/test_sasl_kafka.py`` (it needs a JVM).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.sasl_client import SaslLoginError, sasl_login, upstream_login
from connect_bridge.bridge.security.sasl_settings import SaslSettings, UpstreamSasl
from connect_bridge.bridge.settings import SettingsError, load_settings
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.wire.client import ClientError, KafkaConnection
from test_server import HOST, Running, run, running

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
ALL = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def add_user(path: Path, user: str, password: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``connect-bridge credentials add``, the password on stdin (never in argv)."""
    command = [sys.executable, "-m", "connect_bridge.cli", "credentials", "add", "--file", str(path)]
    return subprocess.run(
        [*command, "--user", user, *extra], input=password + "\n", capture_output=True, text=True, timeout=60
    )


def credentials_file(path: Path, users: dict[str, str]) -> Path:
    """A credentials file at ``path`` with ``users`` (name: password), written by the real CLI."""
    for user, password in users.items():
        done = add_user(path, user, password)
        assert done.returncode == 0, done.stderr
    return path


@pytest.fixture(scope="module")
def credentials(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return credentials_file(tmp_path_factory.mktemp("sasl") / "credentials.yaml", USERS)


@pytest.fixture
def bridge(credentials: Path) -> Iterator[Running]:
    settings = SaslSettings(mode="terminated", mechanisms=ALL, credentials_file=credentials)
    with running(sasl=settings) as srv:
        yield srv


class Clock:
    """The SASL gate's clock, moved by the test (KIP-368 expiry without waiting)."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def login(user: str, mechanism: str = "SCRAM-SHA-256", password: str | None = None) -> UpstreamSasl:
    return UpstreamSasl(mechanism=mechanism, username=user, password=password or USERS[user])


async def describe(conn: KafkaConnection) -> Any:
    return await conn.request(m.ConnectGroupDescribeRequest(group_ids=["g"]), 0, timeout=5)


async def closed(conn: KafkaConnection, request: Any = None, version: int = 0) -> bool:
    """True when the bridge closes instead of answering ``request`` (a ConnectGroupDescribe)."""
    try:
        if request is None:
            await describe(conn)
        else:
            await conn.request(request, version, timeout=5)
    except ClientError:
        return True
    return False


def principals(srv: Running) -> list[str]:
    return srv.on_loop(lambda: sorted(c.principal for c in srv.server.open_connections))


# ------------------------------------------------------------------------------- kafka-python clients


@pytest.mark.parametrize("mechanism", ALL)
def test_kafka_python_authenticates_with_each_mechanism(bridge: Running, mechanism: str) -> None:
    admin = KafkaAdminClient(
        bootstrap_servers=f"{HOST}:{bridge.port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"],
        request_timeout_ms=5000,
    )
    try:
        assert list(admin.list_groups()) == []  # ListGroups answered after authenticating
        assert "User:alice" in principals(bridge)
    finally:
        admin.close()


def test_kafka_python_with_a_wrong_password_is_refused(bridge: Running) -> None:
    with pytest.raises(Exception) as refused:
        KafkaAdminClient(
            bootstrap_servers=f"{HOST}:{bridge.port}",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice",
            sasl_plain_password="wrong",
            request_timeout_ms=5000,
            api_version_auto_timeout_ms=5000,
        )
    assert "alice-secret" not in str(refused.value)
    assert "User:alice" not in principals(bridge)


# ------------------------------------------------------------------------------- the listener's rules


def test_nothing_but_api_versions_and_sasl_before_authentication(bridge: Running) -> None:
    async def scenario() -> None:
        conn = await KafkaConnection.connect(HOST, bridge.port)
        versions = await conn.request(m.ApiVersionsRequest(), 0)
        advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert advertised[17] == (1, 1) and advertised[36] == (0, 2)
        assert await closed(conn)  # a group API before authenticating: closed, no answer
        conn = await KafkaConnection.connect(HOST, bridge.port)
        assert await closed(conn, m.MetadataRequest(topics=[]), 1)
        conn = await KafkaConnection.connect(HOST, bridge.port)
        early = await conn.request(SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=x"), 1)
        assert early.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert await closed(conn)
        # Once authenticated, a stray SaslAuthenticate (no new SaslHandshake) is answered and the
        # connection kept, as Kafka's KafkaApis does (the 1,000,000-frame fuzz campaign met it).
        conn = await KafkaConnection.connect(HOST, bridge.port)
        await sasl_login(conn, login("alice", "SCRAM-SHA-256"))
        stray = await conn.request(SaslAuthenticateRequest(auth_bytes=b"n,,n=alice,r=x"), 1)
        assert stray.error_code == ErrorCode.ILLEGAL_SASL_STATE
        assert stray.error_message == "SaslAuthenticate request received after successful authentication"
        assert (await conn.request(m.MetadataRequest(topics=[]), 1)).brokers  # still served
        await conn.close()
        conn = await KafkaConnection.connect(HOST, bridge.port)
        unknown = await conn.request(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
        assert unknown.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert unknown.mechanisms == ALL
        assert await closed(conn)

    run(scenario())


def test_a_wrong_password_is_answered_then_closed_and_unknown_users_look_the_same(bridge: Running) -> None:
    async def refused(user: str, mechanism: str) -> str:
        conn = await KafkaConnection.connect(HOST, bridge.port)
        with pytest.raises(SaslLoginError) as failure:
            await sasl_login(conn, login(user, mechanism, password="not-it"))
        assert await closed(conn)
        return str(failure.value)

    async def scenario() -> None:
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            known, unknown = await refused("alice", mechanism), await refused("mallory", mechanism)
            assert "SASL_AUTHENTICATION_FAILED" in known
            assert known.replace("alice", "USER") == unknown.replace("mallory", "USER")
        assert "SASL_AUTHENTICATION_FAILED" in await refused("alice", "PLAIN")

    run(scenario())


def test_authenticated_connections_carry_their_principal(bridge: Running) -> None:
    async def scenario() -> None:
        alice = await KafkaConnection.connect(
            HOST, bridge.port, login=upstream_login(login("alice", "SCRAM-SHA-512"))
        )
        bob = await KafkaConnection.connect(HOST, bridge.port, login=upstream_login(login("bob", "PLAIN")))
        for conn in (alice, bob):
            described = await describe(conn)
            assert [g.error_code for g in described.groups] == [ErrorCode.GROUP_ID_NOT_FOUND]
        assert principals(bridge) == ["User:alice", "User:bob"]
        await alice.close()
        await bob.close()

    run(scenario())


# ------------------------------------------------------------------------------- KIP-368


def test_session_lifetime_reauthentication_and_expiry(credentials: Path) -> None:
    settings = SaslSettings(
        mode="terminated", mechanisms=ALL, credentials_file=credentials, session_lifetime_ms=10_000
    )
    clock = Clock()
    metrics = Metrics()
    with running(sasl=settings, metrics=metrics) as srv:
        srv.on_loop(lambda: setattr(srv.server.sasl, "clock", clock))

        async def scenario() -> None:
            conn = await KafkaConnection.connect(HOST, srv.port)
            assert await sasl_login(conn, login("alice")) == 10_000
            clock.now += 9_000  # within the session: served
            await describe(conn)
            assert await sasl_login(conn, login("alice", "SCRAM-SHA-512")) == 10_000  # KIP-368
            clock.now += 9_000  # 18 s after the first login, 9 s after the second: still served
            await describe(conn)
            clock.now += 1_000  # the second session is over
            assert await closed(conn)

            other = await KafkaConnection.connect(HOST, srv.port, login=upstream_login(login("alice")))
            with pytest.raises(SaslLoginError, match="Cannot change principals"):
                await sasl_login(other, login("bob"))  # re-authenticating as someone else
            assert await closed(other)

        run(scenario())
    # connect_bridge_sasl_authentications_total: the re-authentication is counted as such.
    counted = {
        (s.labels["mechanism"], s.labels["result"]): s.value
        for family in metrics.registry.collect()
        if family.name == "connect_bridge_sasl_authentications"
        for s in family.samples
        if s.name.endswith("_total") and s.labels["mode"] == "terminated"
    }
    assert counted == {
        ("SCRAM-SHA-256", "authenticated"): 2,
        ("SCRAM-SHA-512", "reauthenticated"): 1,
        ("SCRAM-SHA-256", "failed"): 1,
    }


def test_a_session_without_lifetime_never_expires(bridge: Running) -> None:
    clock = Clock()
    bridge.on_loop(lambda: setattr(bridge.server.sasl, "clock", clock))

    async def scenario() -> None:
        conn = await KafkaConnection.connect(HOST, bridge.port)
        assert await sasl_login(conn, login("alice")) == 0
        clock.now += 10 * 365 * 86_400_000
        await describe(conn)
        await conn.close()

    run(scenario())


# ------------------------------------------------------------------------------- settings and the CLI


def test_settings_refuse_what_cannot_work(tmp_path: Path) -> None:
    cases = [
        ({"sasl.mode": "terminated"}, "needs credentials_file"),
        ({"sasl.mode": "passthrough"}, "passthrough needs upstream"),
        ({"sasl.mode": "passthrough", "upstream": "k:9092"}, "needs upstream_sasl"),
        ({"sasl.mode": "terminated", "sasl.credentials_file": "c", "upstream": "k:9092"}, "without upstream"),
        ({"upstream_sasl.username": "u", "upstream_sasl.password": "p"}, "upstream_sasl needs upstream"),
        ({"sasl.mode": "kerberos"}, "sasl.mode"),
        ({"sasl.mechanisms": "GSSAPI"}, "sasl.mechanisms"),
    ]
    for overrides, expected in cases:
        with pytest.raises(SettingsError, match=expected) as refused:
            load_settings(None, overrides)
        assert "\n" not in str(refused.value)
    settings = load_settings(
        None,
        {
            "upstream": "k:9092",
            "sasl.mode": "passthrough",
            "upstream_sasl.username": "bridge",
            "upstream_sasl.password": "bridge-secret",
        },
    )
    assert "bridge-secret" not in repr(settings)
    assert settings.upstream_sasl is not None
    assert settings.upstream_sasl.kafka_python_options()["sasl_plain_password"] == "bridge-secret"


def test_serve_with_a_bad_credentials_file_stops_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "creds.yaml"
    bad.write_text("users: {alice: {SCRAM-SHA-256: {salt: '!!', iterations: 1}}}\n", encoding="utf-8")
    config = tmp_path / "bridge.yaml"
    config.write_text(f"sasl: {{mode: terminated, credentials_file: {bad}}}\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "connect_bridge.cli", "serve", "--config", str(config), "--listen",
         f"{HOST}:0", "--metrics-listen", "off", "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("connect-bridge: cannot start: sasl.credentials_file:") and str(bad) in last
    assert "Traceback" not in done.stderr


def test_credentials_add_reads_the_password_from_stdin_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "creds.yaml"
    assert add_user(path, "carol", "carol-secret", "--mechanism", "SCRAM-SHA-512").returncode == 0
    text = path.read_text(encoding="utf-8")
    assert "carol-secret" not in text and "SCRAM-SHA-512" in text and "SCRAM-SHA-256" not in text
    assert path.stat().st_mode & 0o777 == 0o600
    env_run = subprocess.run(
        [sys.executable, "-m", "connect_bridge.cli", "credentials", "add", "--file", str(path),
         "--user", "dave", "--password-env", "DAVE_PASSWORD"],
        capture_output=True, text=True, timeout=60, env={"DAVE_PASSWORD": "dave-secret", "PATH": ""},
    )  # fmt: skip
    assert env_run.returncode == 0, env_run.stderr
    assert "dave-secret" not in env_run.stdout + env_run.stderr
    missing = add_user(path, "erin", "", "--password-env", "NOT_SET_ANYWHERE")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "connect-bridge: --password-env: the environment variable NOT_SET_ANYWHERE is not set"
    )
    empty = add_user(path, "erin", "")
    assert (empty.returncode, empty.stderr.strip()) == (1, "connect-bridge: the password must not be empty")

    async def logs_in() -> None:
        settings = SaslSettings(mode="terminated", credentials_file=path)
        with running(sasl=settings) as srv:
            dave = upstream_login(login_as("dave", "dave-secret"))
            conn = await KafkaConnection.connect(HOST, srv.port, login=dave)
            await describe(conn)
            await conn.close()

    asyncio.run(logs_in())


def login_as(user: str, password: str) -> UpstreamSasl:
    return UpstreamSasl(mechanism="SCRAM-SHA-256", username=user, password=password)


def test_describe_logs_in_with_sasl(bridge: Running) -> None:
    """``connect-bridge describe --sasl-user``: the operator's view of a SASL listener."""

    def describe(password: str | None, *extra: str) -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable,
            "-m",
            "connect_bridge.cli",
            "describe",
            "--bootstrap",
            f"{HOST}:{bridge.port}",
        ]
        login = ["--sasl-user", "alice", "--sasl-mechanism", "SCRAM-SHA-256"] if password is not None else []
        return subprocess.run(
            [*command, *login, "--json", *extra],
            input=f"{password}\n",
            capture_output=True,
            text=True,
            timeout=60,
        )

    ok = describe(USERS["alice"])
    assert (ok.returncode, ok.stdout.strip()) == (0, "[]"), ok.stderr
    wrong = describe("not-it")
    assert wrong.returncode == 1
    assert wrong.stderr.strip().startswith("connect-bridge: --sasl-user: the broker refused user 'alice'")
    anonymous = describe(None)  # the bridge closes the connection before answering ListGroups
    assert anonymous.returncode == 1
    assert anonymous.stderr.strip().startswith(
        f"connect-bridge: cannot describe through {HOST}:{bridge.port}"
    )
