"""Real Apache Kafka 4.3.1 for tests: a KRaft broker, Java Connect workers, the bridge in front.

The jars come from ``tests/kafka_jars.py`` (fetched by Maven on first use, docs/real-kafka.md).

- ``start_kafka_broker(workdir)`` formats a KRaft storage directory (``kafka.tools.StorageTool
  format --standalone``) and runs one combined broker + controller (``kafka.Kafka``) on two free
  loopback ports; it returns once kafka-python reads the cluster metadata from it. The session
  fixture ``kafka_broker`` shares one broker for the whole run (a JVM start costs seconds on two
  cores): tests isolate themselves by topic and group names.
- ``start_connect_worker(...)`` runs ``org.apache.kafka.connect.cli.ConnectDistributed`` with a
  generated ``worker.properties`` and returns once its REST API answers ``GET /`` and
  ``GET /connectors`` (which a distributed worker answers only after it joined its group and read
  the config topic). The factory fixture ``connect_worker`` starts workers and stops them all at
  teardown.
- ``start_bridge(upstream, workdir)`` runs ``connect-bridge serve --upstream`` as a process; the
  factory fixture ``bridge_proxy`` stops it at teardown.

Every process writes its output to its own log file (``log_path``; ``log_tail()`` for messages),
has ``stop()`` (SIGTERM, SIGKILL after a timeout) and ``kill()`` (SIGKILL, a crash), and exposes
its ``process``. A process that cannot start fails the test with its log; it never skips, because
a skipped integration test reads as a passing one.

The fixtures are registered once for the whole session in ``tests/conftest.py`` (so every module
shares one broker); test modules import the helper classes from here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kafka_jars import KafkaJarsError, java_binary, kafka_classpath, log4j_config
from tansu import accepts, broker_answers

__all__ = [
    "BridgeProcess",
    "ConnectWorker",
    "KafkaBroker",
    "KafkaStartError",
    "accepts",
    "bridge_proxy",
    "connect_worker",
    "kafka_broker",
    "start_bridge",
    "start_connect_worker",
    "start_kafka_broker",
]

HOST = "127.0.0.1"
BROKER_NODE_ID = 1
BROKER_START_TIMEOUT_S = 90.0
WORKER_START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
HEAP = "512m"
SCHEDULED_DELAY_MS = 10_000
"""``scheduled.rebalance.max.delay.ms`` of the test workers and the bridge's
``coordinator.scheduled_rebalance_max_delay_ms`` (both default to 5 minutes). They must agree: when
a classic group's leader leaves, the bridge holds its work for its own delay, not the workers'."""
CONNECT_PROTOCOLS = ("eager", "compatible", "sessioned")
VERIFIABLE_SOURCE = "org.apache.kafka.connect.tools.VerifiableSourceConnector"
VERIFIABLE_SINK = "org.apache.kafka.connect.tools.VerifiableSinkConnector"
MOCK_SOURCE = "org.apache.kafka.connect.tools.MockSourceConnector"
JOINED_MARK = "Joined group at generation"
JOINED_LINE = re.compile(r"Joined group at generation (-?\d+) ")
LEADER_URL = re.compile(r"Joined group at generation -?\d+ .*?leaderUrl='([^']*)'")
"""The leader's REST URL in a worker's ``Joined group at generation N ... Assignment{...}`` line."""


class KafkaStartError(RuntimeError):
    """Java/Maven missing, a JVM exited, or it was not ready in time."""


def jvm_command(main_class: str, *args: str, heap: str = HEAP) -> list[str]:
    """``java`` with a small heap, Kafka's GC settings and the tests' log4j2 config."""
    return [
        java_binary(),
        "-Xms64m",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        # Log timestamps in UTC: drills compare them with the test's time.time() (java_timeline).
        "-Duser.timezone=UTC",
        f"-Dlog4j2.configurationFile={log4j_config()}",
        "-cp",
        kafka_classpath(),
        main_class,
        *args,
    ]


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct free ports (all bound at once, so they differ)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


def kafka_uuid() -> str:
    """A random Kafka ``Uuid`` string (URL-safe base64 of 16 bytes, no padding), like
    ``kafka-storage.sh random-uuid`` without starting a JVM."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def write_properties(path: Path, props: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    return path


@dataclass
class _Process:
    """A subprocess with its log file: stop (SIGTERM, then SIGKILL) and kill (SIGKILL)."""

    process: subprocess.Popen[bytes]
    log_path: Path
    _log_file: Any = field(repr=False, default=None)

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

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, wait ``timeout_s``, SIGKILL if still running. Idempotent; the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        self._close_log()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL (a crash). Idempotent."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait(STOP_TIMEOUT_S)
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            with contextlib.suppress(OSError):
                self._log_file.close()
            self._log_file = None


def _spawn(command: list[str], log_path: Path, cwd: Path) -> tuple[subprocess.Popen[bytes], Any]:
    log_file = open(log_path, "ab")  # owned by the _Process, closed in stop()/kill()
    try:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd
        )
    except OSError as exc:
        log_file.close()
        raise KafkaStartError(f"cannot run {command[0]}: {exc}") from exc
    return process, log_file


# ---------------------------------------------------------------------------------------- broker


@dataclass
class KafkaBroker(_Process):
    """A running single-node KRaft broker (combined broker and controller, node id 1)."""

    host: str = HOST
    port: int = 0
    controller_port: int = 0
    workdir: Path = Path()
    cluster_id: str = ""
    node_id: int = BROKER_NODE_ID

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def broker_properties(workdir: Path, port: int, controller_port: int) -> dict[str, Any]:
    """server.properties for one node that is its own controller quorum, tuned for tests."""
    return {
        "process.roles": "broker,controller",
        "node.id": BROKER_NODE_ID,
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller_port}",
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": workdir / "data",
        "num.partitions": 1,
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "share.coordinator.state.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "true",
        "log.flush.interval.messages": 9223372036854775807,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
    }


def start_kafka_broker(
    workdir: Path,
    *,
    timeout_s: float = BROKER_START_TIMEOUT_S,
    heap: str = HEAP,
    overrides: dict[str, Any] | None = None,
) -> KafkaBroker:
    """Format storage in ``workdir`` and start a broker on free ports; wait until it is usable.

    Raises ``KafkaStartError`` (with the log tail) when it exits or is not ready in time; ports
    taken between picking and binding are retried with others."""
    try:
        java_binary()
        kafka_classpath()
    except KafkaJarsError as exc:
        raise KafkaStartError(str(exc)) from exc
    last_error = ""
    for attempt in range(3):
        attempt_dir = Path(workdir) / f"broker-{attempt}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        port, controller_port = free_ports(2)
        props = broker_properties(attempt_dir, port, controller_port) | (overrides or {})
        config = write_properties(attempt_dir / "server.properties", props)
        cluster_id = kafka_uuid()
        fmt = subprocess.run(
            jvm_command(
                "kafka.tools.StorageTool",
                "format",
                "--config",
                str(config),
                "--cluster-id",
                cluster_id,
                "--standalone",
                heap="256m",
            ),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=attempt_dir,
        )
        (attempt_dir / "format.log").write_text(fmt.stdout + fmt.stderr, encoding="utf-8")
        if fmt.returncode != 0:
            raise KafkaStartError(
                f"kafka.tools.StorageTool format failed (exit {fmt.returncode}):\n{fmt.stdout}{fmt.stderr}"
            )
        log_path = attempt_dir / "broker.log"
        process, log_file = _spawn(jvm_command("kafka.Kafka", str(config), heap=heap), log_path, attempt_dir)
        broker = KafkaBroker(
            process,
            log_path,
            log_file,
            port=port,
            controller_port=controller_port,
            workdir=attempt_dir,
            cluster_id=cluster_id,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and broker.running:
            if accepts(HOST, port) and broker_answers(broker.bootstrap, "kafka-probe", 5000):
                return broker
            time.sleep(0.2)
        if broker.running:
            broker.stop()
            raise KafkaStartError(
                f"Kafka broker on {broker.bootstrap} not ready after {timeout_s:.0f}s; log {log_path}:\n"
                f"{broker.log_tail()}"
            )
        broker.stop()
        last_error = (
            f"Kafka broker on {broker.bootstrap} exited with code {process.returncode}; log {log_path}:\n"
            f"{broker.log_tail()}"
        )
        if "address already in use" not in last_error.lower():
            break
    raise KafkaStartError(last_error)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One Apache Kafka 4.3.1 broker for the session; fails (never skips) when it cannot start."""
    try:
        broker = start_kafka_broker(tmp_path_factory.mktemp("kafka"))
    except KafkaStartError as exc:
        pytest.fail(f"Apache Kafka broker unavailable: {exc}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()


# ---------------------------------------------------------------------------------------- workers


class RestError(RuntimeError):
    """A Connect REST call answered an error status (``status``, ``body``)."""

    def __init__(self, method: str, url: str, status: int, body: Any) -> None:
        super().__init__(f"{method} {url}: HTTP {status}: {body}")
        self.status = status
        self.body = body


@dataclass
class ConnectWorker(_Process):
    """A running Java Connect worker in distributed mode."""

    name: str = ""
    rest_port: int = 0
    bootstrap: str = ""
    group_id: str = ""
    protocol: str = ""
    config_topic: str = ""
    offset_topic: str = ""
    status_topic: str = ""
    config_path: Path = Path()
    log_offset: int = 0
    """Where this process's output starts in ``log_path``."""

    @property
    def url(self) -> str:
        """REST base URL (also the URL this worker advertises to its group)."""
        return f"http://{HOST}:{self.rest_port}"

    @property
    def worker_id(self) -> str:
        """How the REST status names this worker (``host:port``)."""
        return f"{HOST}:{self.rest_port}"

    def rest(self, method: str, path: str, body: Any = None, timeout_s: float = 10.0) -> Any:
        """One REST call; the decoded JSON answer (None when empty), ``RestError`` on 4xx/5xx."""
        url = self.url + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            exc.close()
            try:
                detail: Any = json.loads(raw) if raw else None
            except ValueError:
                detail = raw.decode(errors="replace")
            raise RestError(method, url, exc.code, detail) from None
        return json.loads(raw) if raw else None

    def create_connector(self, name: str, config: dict[str, Any], timeout_s: float = 30.0) -> Any:
        """``POST /connectors``, retried while the group rebalances (409) or the worker starts (5xx)."""
        body = {"name": name, "config": {k: str(v) for k, v in config.items()}}
        return self._retry(lambda: self.rest("POST", "/connectors", body), timeout_s)

    def connector_status(self, name: str) -> Any:
        return self.rest("GET", f"/connectors/{name}/status")

    def wait_running(
        self,
        name: str,
        tasks: int,
        timeout_s: float = 40.0,
        on: Iterable[ConnectWorker | str] | None = None,
    ) -> dict[str, Any]:
        """Poll ``GET /connectors/<name>/status`` until the connector and ``tasks`` tasks are
        RUNNING (on the workers ``on`` only, when given: workers or worker ids); the last status.
        A FAILED connector or task fails at once with its trace.

        The status comes from the status topic, written by the workers themselves: a worker that
        stopped or died may still be shown RUNNING its tasks for a while, so after a departure
        pass ``on`` with the workers that are left."""
        allowed = None if on is None else {w.worker_id if isinstance(w, ConnectWorker) else w for w in on}
        deadline = time.monotonic() + timeout_s
        status: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RestError, OSError):
                status = self.connector_status(name)
            if status is not None:
                failed = [t for t in status.get("tasks", []) if t.get("state") == "FAILED"]
                if status.get("connector", {}).get("state") == "FAILED" or failed:
                    raise AssertionError(f"connector {name} failed: {json.dumps(status, indent=1)}")
                units = [status.get("connector", {}), *status.get("tasks", [])]
                if (
                    len(units) == tasks + 1
                    and all(u.get("state") == "RUNNING" for u in units)
                    and (allowed is None or all(u.get("worker_id") in allowed for u in units))
                ):
                    return status
            if not self.running:
                break
            time.sleep(0.25)
        raise AssertionError(
            f"connector {name} not RUNNING with {tasks} tasks"
            f"{'' if allowed is None else f' on {sorted(allowed)}'} within {timeout_s:.0f}s (worker "
            f"{'running' if self.running else 'exited'}); last status {status}; log {self.log_path}:\n"
            f"{self.log_tail()}"
        )

    def _retry(self, call: Callable[[], Any], timeout_s: float) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return call()
            except RestError as exc:
                if exc.status not in (409, 500, 503) or time.monotonic() > deadline:
                    raise
            except OSError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.25)

    def own_log(self) -> str:
        """This process's part of ``log_path`` (a worker restarted in the same directory appends)."""
        with contextlib.suppress(OSError), open(self.log_path, "rb") as handle:
            handle.seek(self.log_offset)
            return handle.read().decode("utf-8", errors="replace")
        return ""

    def generations(self) -> list[int]:
        """The generations this worker joined, from its ``Joined group at generation N`` lines."""
        return [int(m.group(1)) for m in JOINED_LINE.finditer(self.own_log())]

    def joined(self) -> bool:
        """Ready: the worker logged ``Joined group at generation`` (it is a member with an
        assignment) and ``GET /`` and ``GET /connectors`` answer 200. A worker answers
        ``GET /connectors`` before its first join completes (its herder serves requests between
        polls), so the REST API alone does not tell."""
        if JOINED_MARK not in self.own_log():
            return False
        try:
            self.rest("GET", "/", timeout_s=5)
            self.rest("GET", "/connectors", timeout_s=5)
            return True
        except (RestError, OSError, ValueError):
            return False

    # --- config changes as an operator's script makes them (issue 12 drill (f)) -------------------

    def put_connector_config(
        self,
        name: str,
        config: dict[str, Any],
        timeout_s: float = 60.0,
        retries: list[str] | None = None,
    ) -> Any:
        """``PUT /connectors/<name>/config`` (create or update), retried until ``timeout_s`` on 409
        (rebalance in progress, stale config), 5xx (a forward to a leader that is gone) and
        connection errors; each retried answer is appended to ``retries``. Idempotent, so a retry
        after an answer that was lost is harmless."""
        body = {k: str(v) for k, v in config.items()}
        path = f"/connectors/{name}/config"
        return self._retry_noted(lambda: self.rest("PUT", path, body, 30.0), timeout_s, retries)

    def delete_connector(self, name: str, timeout_s: float = 60.0, retries: list[str] | None = None) -> None:
        """``DELETE /connectors/<name>``, retried like :meth:`put_connector_config`. A 404 after a
        failed attempt counts as done (that attempt may have been applied before its answer was lost)."""
        tried: list[str] = []

        def call() -> Any:
            try:
                return self.rest("DELETE", f"/connectors/{name}", timeout_s=30.0)
            except RestError as exc:
                if exc.status == 404 and tried:
                    return None
                raise

        self._retry_noted(call, timeout_s, tried)
        if retries is not None:
            retries.extend(tried)

    def connector_config(self, name: str) -> dict[str, str]:
        """``GET /connectors/<name>/config``."""
        return dict(self.rest("GET", f"/connectors/{name}/config"))

    def connector_names(self) -> list[str]:
        """``GET /connectors``."""
        return sorted(self.rest("GET", "/connectors"))

    def _retry_noted(self, call: Callable[[], Any], timeout_s: float, retries: list[str] | None) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return call()
            except RestError as exc:
                if exc.status not in (409, 500, 503) or time.monotonic() > deadline:
                    raise
                note = f"HTTP {exc.status}: {exc.body}"
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise
                note = f"{type(exc).__name__}: {exc}"
            if retries is not None:
                retries.append(note)
            time.sleep(0.25)

    def leader_url(self) -> str | None:
        """The ``leaderUrl`` of the last assignment this process logged (``Joined group at
        generation ... Assignment{..., leaderUrl='http://...'}``), None before its first join."""
        found = LEADER_URL.findall(self.own_log())
        return found[-1] if found else None


def worker_properties(
    *,
    bootstrap: str,
    group_id: str,
    protocol: str,
    rest_port: int,
    topics_prefix: str,
    scheduled_rebalance_max_delay_ms: int,
) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "connect.protocol": protocol,
        "scheduled.rebalance.max.delay.ms": scheduled_rebalance_max_delay_ms,
        "config.storage.topic": f"{topics_prefix}-configs",
        "offset.storage.topic": f"{topics_prefix}-offsets",
        "status.storage.topic": f"{topics_prefix}-status",
        "config.storage.replication.factor": 1,
        "offset.storage.replication.factor": 1,
        "status.storage.replication.factor": 1,
        "offset.storage.partitions": 1,
        "status.storage.partitions": 1,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
        "listeners": f"http://{HOST}:{rest_port}",
        "rest.advertised.host.name": HOST,
        "rest.advertised.port": rest_port,
        "rest.advertised.listener": "http",
        "offset.flush.interval.ms": 1000,
        # The built-in and test connectors are on the classpath and list themselves in
        # META-INF/services: no plugin.path, no slow reflective scan of ~95 jars.
        "plugin.discovery": "service_load",
    }


def start_connect_worker(
    workdir: Path,
    *,
    bootstrap: str,
    group_id: str = "connect-cluster",
    protocol: str = "sessioned",
    name: str | None = None,
    rest_port: int | None = None,
    topics_prefix: str | None = None,
    scheduled_rebalance_max_delay_ms: int = SCHEDULED_DELAY_MS,
    overrides: dict[str, Any] | None = None,
    timeout_s: float = WORKER_START_TIMEOUT_S,
    heap: str = HEAP,
) -> ConnectWorker:
    """Start a distributed Connect worker and wait until it joined its group.

    Topics are ``<topics_prefix>-configs/-offsets/-status`` (default prefix: the group id), with
    replication factor 1. ``protocol`` is ``connect.protocol`` (eager, compatible, sessioned).
    ``name`` (default ``worker-<port>``) names its directory under ``workdir``; a worker restarted
    with the same ``name`` and ``rest_port`` keeps its worker id (``127.0.0.1:<port>``) and appends
    to the same log (``own_log()`` is the new process's part)."""
    if protocol not in CONNECT_PROTOCOLS:
        raise ValueError(f"connect.protocol must be one of {CONNECT_PROTOCOLS}, got {protocol!r}")
    try:
        java_binary()
        kafka_classpath()
    except KafkaJarsError as exc:
        raise KafkaStartError(str(exc)) from exc
    last_error = ""
    for _attempt in range(3):
        port = rest_port or free_ports(1)[0]
        worker_name = name or f"worker-{port}"
        wdir = Path(workdir) / worker_name
        wdir.mkdir(parents=True, exist_ok=True)
        props = worker_properties(
            bootstrap=bootstrap,
            group_id=group_id,
            protocol=protocol,
            rest_port=port,
            topics_prefix=topics_prefix or group_id,
            scheduled_rebalance_max_delay_ms=scheduled_rebalance_max_delay_ms,
        ) | (overrides or {})
        config = write_properties(wdir / "worker.properties", props)
        log_path = wdir / "worker.log"
        log_offset = log_path.stat().st_size if log_path.exists() else 0
        process, log_file = _spawn(
            jvm_command("org.apache.kafka.connect.cli.ConnectDistributed", str(config), heap=heap),
            log_path,
            wdir,
        )
        worker = ConnectWorker(
            process,
            log_path,
            log_file,
            name=worker_name,
            rest_port=port,
            bootstrap=bootstrap,
            group_id=group_id,
            protocol=protocol,
            config_topic=str(props["config.storage.topic"]),
            offset_topic=str(props["offset.storage.topic"]),
            status_topic=str(props["status.storage.topic"]),
            config_path=config,
            log_offset=log_offset,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and worker.running:
            if worker.joined():
                return worker
            time.sleep(0.25)
        if worker.running:
            worker.stop()
            raise KafkaStartError(
                f"Connect worker {worker_name} ({worker.url}, group {group_id}, {protocol}, bootstrap "
                f"{bootstrap}) not ready after {timeout_s:.0f}s; log {log_path}:\n{worker.log_tail()}"
            )
        worker.stop()
        last_error = (
            f"Connect worker {worker_name} exited with code {process.returncode}; log {log_path}:\n"
            f"{worker.log_tail()}"
        )
        if "address already in use" not in last_error.lower():
            break
    raise KafkaStartError(last_error)


@pytest.fixture
def connect_worker(tmp_path: Path) -> Iterator[Callable[..., ConnectWorker]]:
    """Factory: ``connect_worker(bootstrap=..., group_id=..., protocol=...)`` starts a worker
    (``start_connect_worker``'s keywords); every worker it started is stopped at teardown."""
    started: list[ConnectWorker] = []

    def start(**kwargs: Any) -> ConnectWorker:
        try:
            worker = start_connect_worker(tmp_path / "connect", **kwargs)
        except KafkaStartError as exc:
            pytest.fail(f"Connect worker unavailable: {exc}", pytrace=False)
        started.append(worker)
        return worker

    yield start
    for worker in reversed(started):
        worker.stop()


# ---------------------------------------------------------------------------------------- bridge

BRIDGE_PREFIX = "connect-bridge listening on "


@dataclass
class BridgeProcess(_Process):
    """``connect-bridge serve --upstream`` as a process. ``bootstrap`` is the bootstrap listener;
    upstream broker N is relayed on ``proxy_base_port + N``. ``restart()`` starts it again on the
    same ports, configuration and state directory (after a ``kill()``, a crash)."""

    host: str = HOST
    port: int = 0
    proxy_base_port: int = 0
    config_path: Path = Path()
    upstream: str = ""
    workdir: Path = Path()
    restarts: int = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        code = super().stop(timeout_s)
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code

    def kill(self) -> None:
        super().kill()
        if self.process.stdout is not None:
            self.process.stdout.close()

    def restart(self, timeout_s: float = 30.0) -> None:
        """Kill the process if it still runs, then start ``serve`` again with the same
        ``bridge.yaml``, listen port and ``--state-dir`` (its log appends to ``bridge.log``). The
        relay ports are in ``bridge.yaml``, so clients that cached the relayed broker address
        reconnect to the same place. Raises ``KafkaStartError`` when it does not come back (a port
        still taken is retried until ``timeout_s``)."""
        self.kill()
        deadline = time.monotonic() + timeout_s
        while True:
            process, log_file = _spawn_bridge(self.config_path, self.upstream, self.workdir, self.port)
            line = _readline(process, max(1.0, deadline - time.monotonic()))
            if line.startswith(BRIDGE_PREFIX):
                break
            _terminate(process)
            log_file.close()
            if time.monotonic() > deadline:
                raise KafkaStartError(
                    f"connect-bridge serve did not restart on port {self.port} (first line {line!r}); "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.2)
        self.process, self._log_file = process, log_file
        self.restarts += 1


def _terminate(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(STOP_TIMEOUT_S)
    if process.stdout is not None:
        process.stdout.close()


def _spawn_bridge(
    config: Path, upstream: str, workdir: Path, port: int = 0
) -> tuple[subprocess.Popen[str], Any]:
    log_file = open(workdir / "bridge.log", "ab")  # owned by the BridgeProcess, closed in stop()/kill()
    command = [
        sys.executable,
        "-m",
        "connect_bridge.cli",
        "serve",
        "--config",
        str(config),
        "--upstream",
        upstream,
        "--listen",
        f"{HOST}:{port}",
        "--metrics-listen",
        "off",
        "--state-dir",
        str(workdir / "state"),
    ]
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log_file, text=True, cwd=workdir
    )
    return process, log_file


def start_bridge(
    upstream: str,
    workdir: Path,
    *,
    config_topic: str | None = None,
    group: str | None = None,
    scheduled_rebalance_max_delay_ms: int = SCHEDULED_DELAY_MS,
    settings: dict[str, Any] | None = None,
    timeout_s: float = 30.0,
) -> BridgeProcess:
    """``connect-bridge serve --upstream UPSTREAM --listen 127.0.0.1:0 --metrics-listen off
    --state-dir WORKDIR/state`` with a ``bridge.yaml`` giving ``proxy_base_port`` (a free port
    minus the broker's node id), the scheduled rebalance delay of the test workers and, with
    ``config_topic``, the config view from that topic (``settings`` adds or replaces top-level keys).
    Returns once it prints where it listens."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    [proxy_port] = free_ports(1)
    doc: dict[str, Any] = {
        "proxy_base_port": proxy_port - BROKER_NODE_ID,
        "coordinator": {"scheduled_rebalance_max_delay_ms": scheduled_rebalance_max_delay_ms},
    }
    if config_topic is not None:
        doc["config_view"] = {"topic": config_topic, **({"group": group} if group else {})}
    doc |= settings or {}
    config = workdir / "bridge.yaml"
    config.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")  # JSON is YAML
    process, log_file = _spawn_bridge(config, upstream, workdir)
    bridge = BridgeProcess(
        process,  # type: ignore[arg-type]
        workdir / "bridge.log",
        log_file,
        proxy_base_port=int(doc["proxy_base_port"]),
        config_path=config,
        upstream=upstream,
        workdir=workdir,
    )
    assert process.stdout is not None
    line = _readline(process, timeout_s)
    if not line.startswith(BRIDGE_PREFIX):
        bridge.stop()
        raise KafkaStartError(
            f"connect-bridge serve did not start (first line {line!r}); log {bridge.log_path}:\n"
            f"{bridge.log_tail()}"
        )
    host, port = line[len(BRIDGE_PREFIX) :].strip().rsplit(":", 1)
    bridge.host, bridge.port = host, int(port)
    return bridge


def _readline(process: subprocess.Popen[str], timeout_s: float) -> str:
    """The first stdout line, or "" when the process exits or stays silent for ``timeout_s``."""
    import selectors

    assert process.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(process.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            return ""
    return process.stdout.readline()


@pytest.fixture
def bridge_proxy(tmp_path: Path) -> Iterator[Callable[..., BridgeProcess]]:
    """Factory: ``bridge_proxy(upstream, config_topic=..., group=...)`` starts ``connect-bridge
    serve --upstream`` (``start_bridge``'s keywords); each one is stopped at teardown."""
    started: list[BridgeProcess] = []

    def start(upstream: str, **kwargs: Any) -> BridgeProcess:
        try:
            bridge = start_bridge(upstream, tmp_path / f"bridge-{len(started)}", **kwargs)
        except KafkaStartError as exc:
            pytest.fail(f"connect-bridge unavailable: {exc}", pytrace=False)
        started.append(bridge)
        return bridge

    yield start
    for bridge in reversed(started):
        bridge.stop()
