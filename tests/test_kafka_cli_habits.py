"""Kafka's command-line habits in ``connect-bridge`` (docs/cli.md "Kafka's spellings"):
``--bootstrap-server`` (``--bootstrap`` kept), ``--group``, ``--command-config FILE`` with Kafka client
properties, ``-V``, ``describe --members [--verbose]``, and ``describe`` aimed at an HTTP port."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from certs import TlsMaterial, tls_material
from connect_bridge.bridge.describe_view import render_members, running
from connect_bridge.bridge.security.sasl_settings import SaslSettings
from connect_bridge.bridge.security.tls import ListenerTls, ReloadingServerContext, TlsError
from connect_bridge.cli_client_config import CommandConfigError, client_security, read_properties
from connect_bridge.codecs.ids import ConnectorTaskId
from test_sasl_terminated import USERS, credentials_file
from test_server import HOST, Running
from test_server import running as running_bridge

__all__ = ["tls_material"]  # re-exported fixture

CLI = (sys.executable, "-m", "connect_bridge.cli")
PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="{}";'
)
SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{}";'
)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def properties(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "client.properties"
    path.write_text(text)
    return path


def test_dash_capital_v_prints_the_version() -> None:
    short, long = cli("-V"), cli("--version")
    assert (
        short.returncode == 0 and short.stdout == long.stdout and short.stdout.startswith("connect-bridge ")
    )


def test_read_properties_follows_javas_format(tmp_path: Path) -> None:
    path = properties(
        tmp_path,
        "# a comment\n! another\nsecurity.protocol=SASL_SSL\nsasl.mechanism : PLAIN\nclient.id  tool\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        '    username="alice" \\\n    password="a=b";\n',
    )
    assert read_properties(path) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "client.id": "tool",
        "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="a=b";',
    }


def test_command_config_pem_stores_make_the_tls_context(tmp_path: Path, tls_material: TlsMaterial) -> None:
    m = tls_material
    client_pem = tmp_path / "client.pem"  # Kafka's PEM keystore: the key and its chain in one file
    client_pem.write_text(m.client_key.read_text() + m.client_cert.read_text())
    path = properties(
        tmp_path,
        f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={m.ca_cert}\n"
        f"ssl.keystore.type=PEM\nssl.keystore.location={client_pem}\nssl.endpoint.identification.algorithm=\n",
    )
    security = client_security(path)
    assert security.sasl is None and security.ssl is not None
    assert security.ssl.check_hostname is False  # the empty endpoint identification algorithm
    assert [c["serialNumber"] for c in security.ssl.get_ca_certs()]  # the truststore, not the system CAs
    assert client_security(properties(tmp_path, "security.protocol=PLAINTEXT\n")).ssl is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "security.protocol=SSL\nssl.truststore.location=/x/truststore.jks\nssl.truststore.password=p\n",
            "ssl.truststore.type JKS (Kafka's default when ssl.truststore.type is not set) is not supported, "
            "only PEM: export its CAs to PEM",
        ),
        (
            "security.protocol=SSL\nssl.keystore.type=PKCS12\nssl.keystore.location=/x/k.p12\n",
            "ssl.keystore.type PKCS12 is not supported, only PEM: convert it to one PEM file",
        ),
        (
            "security.protocol=SSL\nssl.truststore.type=PEM\n"
            "ssl.truststore.certificates=-----BEGIN CERTIFICATE-----\n",
            "ssl.truststore.certificates (inline PEM) is not supported",
        ),
        ("security.protocol=SASL_PLAINTEXT\n", "sasl.mechanism GSSAPI (Kafka's default) is not supported"),
        ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", "SASL_PLAINTEXT needs sasl.jaas.config"),
        (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
            f"sasl.jaas.config={PLAIN_JAAS.format('x')}\n",
            "names org.apache.kafka.common.security.plain.PlainLoginModule, but sasl.mechanism SCRAM-SHA-256",
        ),
        (
            "security.protocol=SSL_SASL\n",
            "security.protocol SSL_SASL is not one of PLAINTEXT, SSL, SASL_PLAINTEXT",
        ),
        (
            "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location=/nonexistent/ca.pem\n",
            "cafile /nonexistent/ca.pem",
        ),
    ],
)
def test_command_config_refuses_what_it_cannot_honour_in_one_line(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = properties(tmp_path, text)
    with pytest.raises((CommandConfigError, TlsError)) as error:
        client_security(path)
    assert expected in str(error.value) and "\n" not in str(error.value), str(error.value)


@pytest.fixture
def sasl_bridge(tmp_path: Path) -> Iterator[Running]:
    creds = credentials_file(tmp_path / "credentials.yaml", USERS)
    settings = SaslSettings(mode="terminated", mechanisms=["PLAIN", "SCRAM-SHA-512"], credentials_file=creds)
    with running_bridge(sasl=settings) as srv:
        yield srv


@pytest.mark.parametrize(("mechanism", "jaas"), [("PLAIN", PLAIN_JAAS), ("SCRAM-SHA-512", SCRAM_JAAS)])
def test_describe_logs_in_from_a_command_config(
    tmp_path: Path, sasl_bridge: Running, mechanism: str, jaas: str
) -> None:
    def describe(password: str) -> subprocess.CompletedProcess[str]:
        path = properties(
            tmp_path,
            f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\nsasl.jaas.config={jaas.format(password)}\n",
        )
        return cli(
            "describe",
            "--bootstrap-server",
            f"{HOST}:{sasl_bridge.port}",
            "--command-config",
            str(path),
            "--json",
        )

    ok = describe(USERS["alice"])
    assert (ok.returncode, ok.stdout.strip()) == (0, "[]"), ok.stderr
    wrong = describe("not-it")
    assert wrong.returncode == 1
    assert wrong.stderr.startswith("connect-bridge: --command-config: the broker refused user 'alice'"), (
        wrong.stderr
    )


def test_describe_over_tls_from_a_command_config(tmp_path: Path, tls_material: TlsMaterial) -> None:
    m = tls_material
    tls = ReloadingServerContext(ListenerTls(certfile=m.server_cert, keyfile=m.server_key))
    path = properties(
        tmp_path, f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={m.ca_cert}\n"
    )
    with running_bridge(tls=tls) as srv:
        done = cli("describe", "--bootstrap-server", f"localhost:{srv.port}", "--command-config", str(path))
        plain = cli("describe", "--bootstrap-server", f"localhost:{srv.port}")
    assert (done.returncode, done.stdout.strip()) == (0, "(no groups)"), done.stderr
    assert plain.returncode == 1  # without the file's truststore there is no TLS towards the listener


def test_command_config_and_the_command_line_security_options_exclude_each_other(tmp_path: Path) -> None:
    path = properties(tmp_path, "security.protocol=PLAINTEXT\n")
    done = cli("describe", "--bootstrap-server", "127.0.0.1:1", "--command-config", str(path), "--tls")
    assert done.returncode == 1
    assert done.stderr.startswith("connect-bridge: --command-config and --tls both say how to connect")


def test_bootstrap_server_group_option_and_the_old_spellings(sasl_bridge: Running, tmp_path: Path) -> None:
    path = properties(
        tmp_path,
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={PLAIN_JAAS.format(USERS['alice'])}\n",
    )
    address = f"{HOST}:{sasl_bridge.port}"
    for spelling in (("--bootstrap-server", address, "--group", "nope"), ("--bootstrap", address, "nope")):
        done = cli("describe", *spelling, "--command-config", str(path))
        assert done.returncode == 1
        assert done.stderr == (
            f"connect-bridge: group 'nope' not found on the bridge at {address}; "
            "`connect-bridge describe` without a group lists every group\n"
        )
    both = cli("describe", "--bootstrap-server", address, "a", "--group", "b")
    assert both.returncode == 1 and "two groups given, 'a' and --group 'b'" in both.stderr


def test_describe_aimed_at_an_http_port_says_so_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        metrics_port = probe.getsockname()[1]
    # The metrics listener reads the Kafka request as the start of an HTTP head with no line end and
    # closes the connection at the head's deadline (metrics_request_timeout_ms, 5 s by default);
    # describe then finds an HTTP server there. A short deadline spares the wait, nothing else.
    settings = tmp_path / "bridge.yaml"
    settings.write_text("listen: 127.0.0.1:0\nmetrics_request_timeout_ms: 1000\n", encoding="utf-8")
    serve = subprocess.Popen(
        [*CLI, "serve", "--config", str(settings), "--metrics-listen", f"127.0.0.1:{metrics_port}"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert serve.stdout is not None and serve.stdout.readline().startswith("connect-bridge listening on ")
        done = cli("describe", "--bootstrap-server", f"127.0.0.1:{metrics_port}")
    finally:
        serve.terminate()
        serve.wait(30)
    assert done.returncode == 1
    assert done.stderr == (
        f"connect-bridge: 127.0.0.1:{metrics_port} is an HTTP port (the bridge's metrics_listen?), not its "
        "Kafka listener: --bootstrap-server is the bridge's listen address (default 127.0.0.1:9092)\n"
    )


def _member(member_id: str, url: str, items: list[tuple[str, int]]) -> dict[str, Any]:
    return {
        "member_id": member_id,
        "url": url,
        "client_id": member_id[:2],
        "client_host": "/10.0.0.1",
        **running(ConnectorTaskId(*i) for i in items),
    }


def test_members_verbose_lists_each_workers_connectors_and_tasks() -> None:
    groups = [
        {
            "group_id": "connect-cluster",
            "members": [
                _member("w1-abc", "http://w1:8083/", [("a", -1), ("a", 10), ("a", 2), ("b", 0)]),
                _member("w2-def", "http://w2:8083/", [("b", -1), ("a-0", -1)]),
                _member("w3-ghi", "http://w3:8083/", []),
            ],
        },
    ]
    plain = render_members(groups).splitlines()
    assert plain[0].split() == [
        "GROUP",
        "MEMBER",
        "WORKER",
        "URL",
        "CLIENT",
        "ID",
        "CLIENT",
        "HOST",
        "#CONNECTORS",
        "#TASKS",
    ]
    assert plain[1].split() == ["connect-cluster", "w1-abc", "http://w1:8083/", "w1", "/10.0.0.1", "1", "3"]
    verbose = render_members(groups, verbose=True).splitlines()
    assert verbose[0].split()[-2:] == ["CONNECTORS", "TASKS"]
    assert verbose[1].split()[-2:] == ["a", "a-2,a-10,b-0"]  # tasks in task order, not string order
    assert verbose[2].split()[-3:] == ["0", "a-0,b", "-"]  # a connector named a-0 stays a connector
    assert verbose[3].split()[-2:] == ["-", "-"]
    assert render_members([]) == "(no groups)"


def test_members_verbose_is_the_view_not_debug_logs() -> None:
    from connect_bridge.cli import build_parser, main

    parsed = build_parser().parse_args(["describe", "--bootstrap-server", "h:1", "--members", "--verbose"])
    assert parsed.verbose_last is True
    with pytest.raises(SystemExit):
        main(["describe", "--bootstrap-server", "h:1", "--members", "--verbose", "--help"])
    done = cli("describe", "--bootstrap-server", "127.0.0.1:1", "--members", "--verbose")
    assert "DEBUG" not in done.stderr  # the verbose members view does not turn on debug logs
    debug = cli("describe", "--bootstrap-server", "127.0.0.1:1", "--verbose")
    assert "DEBUG" in debug.stderr
