"""``adopt``, ``release`` and ``describe --admin`` against a real ``connect-bridge serve`` whose
metrics listener (which serves the admin endpoint) is HTTPS (``metrics_tls``, docs/security.md).

``--admin https://HOST:PORT`` with ``--ca-file`` (and ``--cert``/``--key`` when ``metrics_tls``
requires client certificates) reaches the endpoint; every way of getting it wrong (no CA for a
private certificate, plain HTTP to the HTTPS port and the reverse, no or a foreign client
certificate, a scheme that is not http/https, TLS options next to a plain-HTTP address) is one
``connect-bridge: ...`` line and exit 1 (``tests/test_cli_errors.py`` style). The bridge runs as a
process in front of a tansu broker with ``adoption`` on; certificates from ``tests/certs.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from certs import TlsMaterial, tls_material
from tansu import TansuBroker, free_port, tansu
from test_cli_errors import Runner, cli_process, one_error_line

__all__ = ["cli_process", "tansu", "tls_material"]  # re-exported fixtures

GROUP = "connect-cluster"
LISTENING = "connect-bridge listening on "


class Bridge:
    """``connect-bridge serve --config FILE`` as a process; its log goes to a file."""

    def __init__(self, config: dict[str, object], directory: Path) -> None:
        path = directory / "bridge.yaml"
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        self._log = (directory / "serve.log").open("ab")
        argv = [sys.executable, "-m", "connect_bridge.cli", "serve", "--config", str(path)]
        self.process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith(LISTENING), (line, (directory / "serve.log").read_text()[-2000:])
        self.bootstrap = line[len(LISTENING) :].strip()

    def close(self) -> None:
        self.process.kill()
        self.process.wait(10)
        assert self.process.stdout is not None
        self.process.stdout.close()
        self._log.close()


def settings(tmp: Path, broker: TansuBroker, metrics: int, metrics_tls: dict[str, str] | None) -> dict:
    doc: dict[str, object] = {
        "listen": "127.0.0.1:0",
        "upstream": broker.bootstrap,
        "state_dir": str(tmp / "state"),
        "metrics_listen": f"127.0.0.1:{metrics}",
        "adoption": {"groups": GROUP, "mode": "command"},
    }
    if metrics_tls is not None:
        doc["metrics_tls"] = metrics_tls
    return doc


@pytest.fixture(scope="module")
def https_bridge(
    tansu: TansuBroker, tls_material: TlsMaterial, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Bridge, str]]:
    """A bridge with TLS on its worker listener and on its metrics listener, which requires a client
    certificate (``client_auth: required``); and the admin address."""
    m = tls_material
    tmp = tmp_path_factory.mktemp("https-bridge")
    metrics = free_port()
    tls = {"certfile": str(m.server_cert), "keyfile": str(m.server_key)}
    doc = settings(tmp, tansu, metrics, {**tls, "cafile": str(m.ca_cert), "client_auth": "required"})
    doc["tls"] = tls
    bridge = Bridge(doc, tmp)
    try:
        yield bridge, f"127.0.0.1:{metrics}"
    finally:
        bridge.close()


def tls_args(m: TlsMaterial, *, cert: bool = True) -> list[str]:
    client = ["--cert", str(m.client_cert), "--key", str(m.client_key)] if cert else []
    return ["--ca-file", str(m.ca_cert), *client]


def test_adopt_release_and_describe_over_https(
    cli_process: Runner, https_bridge: tuple[Bridge, str], tls_material: TlsMaterial
) -> None:
    bridge, admin = https_bridge
    https = f"https://{admin}"
    status = cli_process("adopt", "--status", "--admin", https, *tls_args(tls_material))
    assert status.returncode == 0 and json.loads(status.stdout) == {}, status
    # The answers of the endpoint itself (409: the group is not under adoption) come through as
    # the commands' own one-line refusals.
    adopt = cli_process("adopt", GROUP, "--admin", https + "/", *tls_args(tls_material))
    assert adopt.returncode == 1, adopt
    one_error_line(adopt.stderr, f"group {GROUP} not adopted: group {GROUP} is not relaying")
    release = cli_process("release", GROUP, "--admin", https, *tls_args(tls_material), "--no-wait")
    assert release.returncode == 1, release
    one_error_line(release.stderr, f"group {GROUP} is not adopted (phase none): nothing to hand back")
    # describe: the same --ca-file/--cert/--key serve the worker listener and the admin endpoint.
    argv = ["describe", "--bootstrap", bridge.bootstrap, "--admin", https, *tls_args(tls_material)]
    described = cli_process(*argv, "--json")
    assert described.returncode == 0 and json.loads(described.stdout) == [], described


@pytest.mark.parametrize(
    ("scheme", "options", "fragments"),
    [
        (
            "https://",
            ["--cert", "{client_cert}", "--key", "{client_key}"],
            ["its certificate is not trusted", "pass --ca-file with the CA"],
        ),
        ("https://", ["--ca-file", "{ca_cert}"], ["requires a client certificate", "pass --cert and --key"]),
        (
            "https://",
            ["--ca-file", "{ca_cert}", "--cert", "{rogue_cert}", "--key", "{rogue_key}"],
            ["does not trust the client certificate of --cert"],
        ),
        ("", [], ["gave no HTTP answer", "use --admin https://127.0.0.1:"]),
        ("", ["--ca-file", "{ca_cert}"], ["are for an HTTPS admin endpoint", "use --admin https://"]),
        ("ftp://", [], ["--admin: unknown scheme 'ftp'"]),
        ("https://", ["--ca-file", "{client_key}"], ["TLS --admin: cafile", "no PEM certificate in it"]),
        ("https://", ["--ca-file", "{ca_cert}", "--cert", "{client_cert}"], ["--cert and --key go together"]),
    ],
)
@pytest.mark.parametrize("command", ["adopt", "release"])
def test_https_mistakes_are_one_line(
    cli_process: Runner,
    https_bridge: tuple[Bridge, str],
    tls_material: TlsMaterial,
    command: str,
    scheme: str,
    options: list[str],
    fragments: list[str],
) -> None:
    _, admin = https_bridge
    paths = {name: str(value) for name, value in vars(tls_material).items() if isinstance(value, Path)}
    filled = [option.format(**paths) for option in options]
    done = cli_process(command, GROUP, "--admin", scheme + admin, *filled, "--timeout", "10")
    assert done.returncode == 1 and not done.stdout, done
    one_error_line(done.stderr, *fragments)


def test_https_to_a_plain_http_admin_endpoint(
    cli_process: Runner, tansu: TansuBroker, tls_material: TlsMaterial, tmp_path: Path
) -> None:
    metrics = free_port()
    # A plain listener reads a ClientHello as the start of a request head and closes the connection
    # when the head's deadline passes (metrics_request_timeout_ms, 5 s by default); the CLI's
    # diagnosis comes from that close whatever the deadline, so a short one spares the wait.
    doc = settings(tmp_path, tansu, metrics, None) | {"metrics_request_timeout_ms": 1000}
    bridge = Bridge(doc, tmp_path)
    try:
        https = f"https://127.0.0.1:{metrics}"
        done = cli_process("adopt", "--status", "--admin", https, "--ca-file", str(tls_material.ca_cert))
        assert done.returncode == 1, done
        one_error_line(done.stderr, "does not speak TLS", f"use --admin 127.0.0.1:{metrics} (plain HTTP)")
        described = cli_process("describe", "--bootstrap", bridge.bootstrap, "--admin", https)
        assert described.returncode == 1, described
        one_error_line(described.stderr, "does not speak TLS")
        plain = cli_process("adopt", "--status", "--admin", f"http://127.0.0.1:{metrics}")
        assert plain.returncode == 0 and json.loads(plain.stdout) == {}, plain
    finally:
        bridge.close()
