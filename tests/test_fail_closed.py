"""Defaults that fail closed (issue 15 item 5), and authorization wired end to end in ``serve``.

- The metrics endpoint listens on loopback unless configured (a settings default, checked here).
- A worker listener that lets anyone who reaches it join (not loopback, no SASL, no TLS with
  ``client_auth: required``) gets one WARNING line at start (a real ``connect-bridge serve`` on
  0.0.0.0) saying who can connect and what to set; TLS without client certificates has its own.
- The admin endpoint answers loopback peers and verified client certificates only (or everyone
  with ``admin_allow_remote``): checked over a real non-loopback address of this machine (skipped,
  saying why, where there is none), in process and through ``connect-bridge drain`` against the
  ``serve`` above; /metrics and /readyz stay readable.
- Secrets are never logged: a ``connect-bridge serve`` at DEBUG in front of the secure Kafka
  broker, with its own ``upstream_sasl`` password, SASL passed through for its clients and
  ``authorization.from_upstream``, is used by clients with passwords; none of the passwords is
  anywhere in its log. The same run checks the wiring: the group ACLs the test creates on the
  broker (Kafka's admin API) are what the bridge enforces for the principals the clients
  authenticated as upstream.
"""

from __future__ import annotations

import asyncio
import fcntl
import ipaddress
import json
import logging
import socket
import ssl as ssl_module
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

from certs import TlsMaterial, tls_material
from connect_bridge.bridge.admin import DRAIN_PATH, HA_PATH, admin_handler
from connect_bridge.bridge.edge.http import start_http
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.admin_access import AdminAccess
from connect_bridge.bridge.security.exposure import (
    admin_exposure_warning,
    is_loopback,
    listener_exposure_warning,
)
from connect_bridge.bridge.security.sasl_client import upstream_login
from connect_bridge.bridge.security.sasl_settings import UpstreamSasl
from connect_bridge.bridge.security.tls import ListenerTls, ReloadingServerContext
from connect_bridge.bridge.settings import load_settings
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.wire.client import KafkaConnection
from kafka_secure import SecureKafka
from polling import wait_until
from test_authorization import GroupApis
from test_cli_errors import Runner, cli_process, one_error_line
from test_serve_cli import PREFIX

__all__ = ["cli_process", "tls_material"]  # re-exported fixtures

WARNING = "reachable from the network without TLS or SASL"
TLS_ONLY = "has TLS but neither required client certificates nor SASL"


@pytest.mark.parametrize(
    ("host", "tls", "sasl", "certs", "warned"),
    [
        ("0.0.0.0", False, False, False, WARNING),
        ("::", False, False, False, WARNING),
        ("bridge.example.com", False, False, False, WARNING),
        ("10.1.2.3", False, False, False, WARNING),
        ("127.0.0.1", False, False, False, None),
        ("::1", False, False, False, None),
        ("localhost", False, False, False, None),
        ("0.0.0.0", True, False, False, TLS_ONLY),  # encrypted, but anyone who trusts the cert joins
        ("127.0.0.1", True, False, False, None),
        ("0.0.0.0", True, False, True, None),  # client_auth: required
        ("0.0.0.0", False, True, False, None),
        ("0.0.0.0", True, True, False, None),
    ],
)
def test_the_exposure_warning_names_who_can_connect_and_what_closes_it(
    host: str, tls: bool, sasl: bool, certs: bool, warned: str | None
) -> None:
    warning = listener_exposure_warning(host, 9092, tls, sasl, certs)
    assert (warning is None) == (warned is None)
    if warning is not None:
        assert warned in warning and "anyone who" in warning and "\n" not in warning
        assert "client_auth: required" in warning and "sasl" in warning
        # the docs command a pip install has, not a repository path it has not
        assert "`connect-bridge docs security`" in warning and "docs/" not in warning
    assert is_loopback(host) == (host in ("127.0.0.1", "::1", "localhost"))


def non_loopback_address() -> str | None:
    """An IPv4 address of one of this machine's own interfaces that is not loopback, or None.
    A connection to it never leaves the machine (the kernel delivers it locally), yet the server
    sees it come from that address, not from 127.0.0.1: what a remote admin client looks like."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:  # SIOCGIFADDR: the interface's IPv4 address (OSError: it has none)
                packed = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            address = socket.inet_ntoa(packed[20:24])
            if ipaddress.ip_address(address).is_loopback:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as own:
                try:
                    own.bind((address, 0))  # assigned here, so traffic to it stays here
                except OSError:
                    continue
            return address
    return None


REMOTE = non_loopback_address()
needs_remote = pytest.mark.skipif(
    REMOTE is None, reason="this machine has no non-loopback interface address to be a remote peer from"
)


async def http_get(
    host: str, port: int, path: str, method: str = "GET", ssl: ssl_module.SSLContext | None = None
) -> tuple[int, bytes]:
    """One HTTP/1.1 request (the endpoint closes after it): (status, body)."""
    reader, writer = await asyncio.open_connection(
        host, port, ssl=ssl, server_hostname="localhost" if ssl else None
    )
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def refused_count(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("connect_bridge_admin_requests_refused_total") or 0.0


@needs_remote
def test_the_admin_endpoint_answers_loopback_only_unless_allowed(caplog: pytest.LogCaptureFixture) -> None:
    """The metrics listener on every interface (deploy/bridge.yaml): /metrics and the probes answer a
    peer on a non-loopback address, the admin endpoint does not (403, one line, counted, one log line
    however often it is tried); from loopback it answers, and ``admin_allow_remote`` lets everyone in."""
    assert REMOTE is not None
    caplog.set_level(logging.WARNING, logger="connect_bridge.admin")

    async def scenario(allow_remote: bool) -> tuple[Metrics, list[tuple[int, bytes]]]:
        metrics = Metrics()
        access = AdminAccess(allow_remote, metrics.admin_refused.inc)
        admin = admin_handler(lambda: None, lambda: None)
        http = await start_http("0.0.0.0", 0, metrics, lambda: True, admin=admin, admin_access=access)
        port = http.sockets[0].getsockname()[1]
        try:
            return metrics, [
                await http_get(REMOTE, port, "/metrics"),
                await http_get(REMOTE, port, "/readyz"),
                await http_get(REMOTE, port, HA_PATH),
                await http_get(REMOTE, port, DRAIN_PATH, "POST"),
                await http_get(REMOTE, port, "/admin/groups/g/adopt", "POST"),
                await http_get("127.0.0.1", port, HA_PATH),
            ]
        finally:
            http.close()

    metrics, answers = asyncio.run(scenario(allow_remote=False))
    assert [status for status, _ in answers] == [200, 200, 403, 403, 403, 409]
    message = json.loads(answers[2][1])["message"]
    assert REMOTE in message and "client_auth: required" in message and "admin_allow_remote" in message
    assert "\n" not in message and "`connect-bridge docs security`" in message
    assert json.loads(answers[5][1])["message"] == "this bridge runs alone (ha.enabled is off)"
    assert refused_count(metrics) == 3
    lines = [r for r in caplog.records if r.name == "connect_bridge.admin"]
    assert len(lines) == 1 and REMOTE in lines[0].getMessage()  # rate-limited per peer

    # Everyone may reach it, yet a change still needs the admin token (test_admin_guard.py).
    metrics, answers = asyncio.run(scenario(allow_remote=True))
    assert [status for status, _ in answers] == [200, 200, 409, 401, 401, 409]
    assert refused_count(metrics) == 2


@needs_remote
@pytest.mark.parametrize(
    ("client_auth", "with_cert", "status"), [("required", True, 409), ("none", False, 403)]
)
def test_a_verified_client_certificate_opens_the_admin_endpoint_from_anywhere(
    tls_material: TlsMaterial, client_auth: str, with_cert: bool, status: int
) -> None:
    """``metrics_tls`` with ``client_auth: required``: the CA says who may, from any address; HTTPS
    alone (no client certificate) is not a login, so a remote peer is refused as over plain HTTP."""
    assert REMOTE is not None
    m = tls_material
    cafile = {"cafile": m.ca_cert} if client_auth != "none" else {}
    settings = ListenerTls(certfile=m.server_cert, keyfile=m.server_key, client_auth=client_auth, **cafile)
    client = ssl_module.create_default_context(cafile=str(m.ca_cert))
    if with_cert:
        client.load_cert_chain(m.client_cert, m.client_key)

    async def scenario() -> int:
        metrics = Metrics()
        admin = admin_handler(lambda: None, lambda: None)
        context = ReloadingServerContext(settings, "metrics_tls").context
        http = await start_http("0.0.0.0", 0, metrics, lambda: True, ssl=context, admin=admin)
        try:
            return (await http_get(REMOTE, http.sockets[0].getsockname()[1], HA_PATH, ssl=client))[0]
        finally:
            http.close()

    assert asyncio.run(scenario()) == status


@pytest.mark.parametrize(
    ("host", "allow_remote", "warned"),
    [("0.0.0.0", True, True), ("0.0.0.0", False, False), ("127.0.0.1", True, False)],
)
def test_admin_allow_remote_on_an_open_listener_is_warned_about(
    host: str, allow_remote: bool, warned: bool
) -> None:
    warning = admin_exposure_warning(host, 9404, allow_remote)
    assert (warning is not None) == warned
    if warning is not None:
        assert "anyone who can connect may adopt, release and drain" in warning and "\n" not in warning
        assert "client_auth: required" in warning and "`connect-bridge docs security`" in warning


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


def test_a_listener_open_to_the_network_without_tls_or_sasl_is_warned_about(
    tmp_path: Path, cli_process: Runner
) -> None:
    """The deployed shape (deploy/bridge.yaml): both listeners on every interface. The start warns
    once; ``connect-bridge drain`` from another address is refused in one line, from loopback it
    reaches the endpoint (which answers that this bridge runs alone)."""
    config = write_config(
        tmp_path / "bridge.yaml",
        {"listen": "0.0.0.0:0", "state_dir": str(tmp_path / "state"), "metrics_listen": "0.0.0.0:0"},
    )
    bridge = ServeProcess(config, tmp_path / "serve.log")
    try:
        wait_until(lambda: "metrics on http://" in bridge.log_path.read_text(encoding="utf-8"), 10)
        shown = bridge.log_path.read_text(encoding="utf-8").split("metrics on http://", 1)[1]
        port = shown.split("/", 1)[0].rsplit(":", 1)[1]
        local = cli_process("drain", "--admin", f"127.0.0.1:{port}")
        assert local.returncode == 1, local
        one_error_line(local.stderr, "this bridge runs alone")
        if REMOTE is not None:  # else the in-process tests above say why they skipped
            remote = cli_process("drain", "--admin", f"{REMOTE}:{port}")
            assert remote.returncode == 1, remote
            one_error_line(remote.stderr, "refused the admin request", "admin_allow_remote")
    finally:
        log = bridge.stop()
    warnings = [line for line in log.splitlines() if WARNING in line]
    assert len(warnings) == 1 and " WARNING " in warnings[0], log
    assert "Traceback" not in log
    assert (REMOTE is None) or f"refused an admin request from {REMOTE}" in log


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
        login = upstream_login(sasl)
        return GroupApis(await KafkaConnection.connect("127.0.0.1", bridge.port, client_id=user, login=login))

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
