"""Defaults that fail closed (issue 15 item 5), and authorization wired end to end in ``serve``.

- The metrics endpoint listens on loopback unless configured (a settings default, checked here).
- A worker listener reachable from the network with neither TLS nor SASL gets one WARNING line
  at start (a real ``connect-bridge serve`` on 0.0.0.0); loopback, TLS or SASL silence it.
- Secrets are never logged: a ``connect-bridge serve`` at DEBUG in front of the secure Kafka
  broker, with its own ``upstream_sasl`` password, SASL passed through for its clients and
  ``authorization.from_upstream``, is used by clients with passwords; none of the passwords is
  anywhere in its log. The same run checks the wiring: the group ACLs the test creates on the
  broker (Kafka's admin API) are what the bridge enforces for the principals the clients
  authenticated as upstream.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

from connect_bridge.bridge.client import KafkaConnection
from connect_bridge.bridge.exposure import is_loopback, listener_exposure_warning
from connect_bridge.bridge.sasl_settings import UpstreamSasl
from connect_bridge.bridge.settings import load_settings
from connect_bridge.codecs.error_codes import ErrorCode
from kafka_secure import SecureKafka
from polling import wait_until
from test_authorization import GroupApis
from test_serve_cli import PREFIX

WARNING = "reachable from the network without TLS or SASL"


@pytest.mark.parametrize(
    ("host", "tls", "sasl", "warned"),
    [
        ("0.0.0.0", False, False, True),
        ("::", False, False, True),
        ("bridge.example.com", False, False, True),
        ("10.1.2.3", False, False, True),
        ("127.0.0.1", False, False, False),
        ("::1", False, False, False),
        ("localhost", False, False, False),
        ("0.0.0.0", True, False, False),
        ("0.0.0.0", False, True, False),
    ],
)
def test_the_exposure_warning_names_what_closes_it(host: str, tls: bool, sasl: bool, warned: bool) -> None:
    warning = listener_exposure_warning(host, 9092, tls, sasl)
    assert (warning is not None) == warned
    if warning is not None:
        assert WARNING in warning and "set tls and sasl" in warning and "\n" not in warning
    assert is_loopback(host) == (host in ("127.0.0.1", "::1", "localhost"))


def test_metrics_listen_on_loopback_unless_configured() -> None:
    settings = load_settings(None, {})
    assert settings.metrics_address is not None and is_loopback(settings.metrics_address[0])
    assert is_loopback(settings.listen_address[0])


class ServeProcess:
    """``connect-bridge serve --config FILE`` with its stderr in a file (read after it stopped)."""

    def __init__(self, config: Path, log: Path, *extra: str) -> None:
        self.log_path = log
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "connect_bridge.cli", *extra, "serve", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith(PREFIX), (line, log.read_text())
        self.port = int(line[len(PREFIX) :].strip().rsplit(":", 1)[1])

    def stop(self) -> str:
        """Stop (SIGTERM, as an orchestrator does) and return everything it logged."""
        self.proc.terminate()
        self.proc.wait(20)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self.log.close()
        return self.log_path.read_text(encoding="utf-8")


def write_config(path: Path, settings: dict) -> Path:
    path.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return path


def test_a_listener_open_to_the_network_without_tls_or_sasl_is_warned_about(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "bridge.yaml",
        {"listen": "0.0.0.0:0", "state_dir": str(tmp_path / "state"), "metrics_listen": "off"},
    )
    bridge = ServeProcess(config, tmp_path / "serve.log")
    log = bridge.stop()
    warnings = [line for line in log.splitlines() if WARNING in line]
    assert len(warnings) == 1 and " WARNING " in warnings[0], log
    assert "Traceback" not in log


@pytest.fixture
def passwords_bridge(secure_kafka: SecureKafka, tmp_path: Path) -> Iterator[tuple[ServeProcess, str]]:
    """A bridge in front of the secure broker's SASL_PLAINTEXT listener, logging at DEBUG, with the
    group ``connect-authz-<random>`` readable by alice only (ACLs created on the broker first)."""
    group = f"connect-authz-{uuid.uuid4().hex[:8]}"
    admin = secure_kafka.admin()
    try:
        pattern = ResourcePattern(ResourceType.GROUP, group)
        read = ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW, pattern)
        assert not admin.create_acls([read])["failed"]
    finally:
        admin.close()
    upstream = secure_kafka.bootstrap("SASL_PLAINTEXT")
    config = write_config(
        tmp_path / "bridge.yaml",
        {
            "listen": "127.0.0.1:0",
            "state_dir": str(tmp_path / "state"),
            "metrics_listen": "127.0.0.1:0",
            "upstream": [upstream],
            "coordinated_groups": ["connect-authz-.*"],
            "sasl": {"mode": "passthrough"},
            "upstream_sasl": {
                "mechanism": "SCRAM-SHA-512",
                "username": secure_kafka.admin_user,
                "password": secure_kafka.password(secure_kafka.admin_user),
            },
            "authorization": {"enabled": True, "from_upstream": True, "refresh_ms": 500},
        },
    )
    bridge = ServeProcess(config, tmp_path / "serve.log", "--log-level", "debug")
    try:
        yield bridge, group
    finally:
        if bridge.proc.poll() is None:
            bridge.stop()


def test_serve_enforces_the_upstream_acls_and_never_logs_a_secret(
    secure_kafka: SecureKafka, passwords_bridge: tuple[ServeProcess, str]
) -> None:
    bridge, group = passwords_bridge

    async def as_user(user: str) -> GroupApis:
        sasl = UpstreamSasl(mechanism="SCRAM-SHA-256", username=user, password=secure_kafka.password(user))
        return GroupApis(await KafkaConnection.connect("127.0.0.1", bridge.port, client_id=user, sasl=sasl))

    async def scenario() -> None:
        alice, bob = await as_user("alice"), await as_user("bob")
        # The first upstream read may still be on its way: until then nobody gets in (fail closed).
        while (joined := await alice.beat(group, "", 0)).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
            await asyncio.sleep(0.1)
        assert joined.error_code == 0, joined
        assert (await bob.beat(group, "", 0)).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert (await bob.beat(group, joined.member_id, joined.member_epoch)).error_code == (
            ErrorCode.GROUP_AUTHORIZATION_FAILED
        )
        assert await bob.describe_groups(group) == [(group, ErrorCode.GROUP_AUTHORIZATION_FAILED)]
        assert (await alice.beat(group, joined.member_id, joined.member_epoch)).error_code == 0
        await alice.conn.close()
        await bob.conn.close()

    asyncio.run(asyncio.wait_for(scenario(), 60))
    wait_until(lambda: "authorization_denied" in bridge.log_path.read_text(encoding="utf-8"), 10)
    log = bridge.stop()
    assert "group ACLs from upstream" in log and "User:bob" in log
    for user in ("admin", "alice", "bob"):
        assert secure_kafka.password(user) not in log, f"{user}'s password is in the log"
    assert "Traceback" not in log
