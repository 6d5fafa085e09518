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
shares one broker); test modules import the helper classes from here. The Connect worker lives in
``tests/kafka_workers.py`` and what every process shares in ``tests/kafka_processes.py``; both are
re-exported here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from kafka_processes import (
    BROKER_NODE_ID,
    HEAP,
    HOST,
    SCHEDULED_DELAY_MS,
    STOP_TIMEOUT_S,
    KafkaProcess,
    KafkaStartError,
    free_ports,
    jvm_command,
    kafka_uuid,
    require_java,
    spawn,
    write_properties,
)
from kafka_workers import (
    CONNECT_PROTOCOLS,
    JOINED_LINE,
    JOINED_MARK,
    LEADER_URL,
    MOCK_SOURCE,
    VERIFIABLE_SINK,
    VERIFIABLE_SOURCE,
    ConnectWorker,
    RestError,
    start_connect_worker,
)
from tansu import accepts, await_ready, broker_answers, session_process

__all__ = [
    "BROKER_NODE_ID",
    "CONNECT_PROTOCOLS",
    "HEAP",
    "JOINED_LINE",
    "JOINED_MARK",
    "LEADER_URL",
    "MOCK_SOURCE",
    "SCHEDULED_DELAY_MS",
    "VERIFIABLE_SINK",
    "VERIFIABLE_SOURCE",
    "BridgeProcess",
    "ConnectWorker",
    "KafkaBroker",
    "KafkaStartError",
    "RestError",
    "accepts",
    "bridge_proxy",
    "connect_worker",
    "kafka_broker",
    "start_bridge",
    "start_connect_worker",
    "start_kafka_broker",
]

BROKER_START_TIMEOUT_S = 90.0
P = TypeVar("P", bound=KafkaProcess)


# ---------------------------------------------------------------------------------------- broker


@dataclass
class KafkaBroker(KafkaProcess):
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

    def answers(self) -> bool:
        """Ready: it accepts connections and kafka-python reads the cluster metadata from it."""
        return accepts(self.host, self.port) and broker_answers(self.bootstrap, "kafka-probe", 5000)


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
        # Kafka's periodic group cleanup (every 10 min by default) deletes an Empty group with no
        # committed offsets; the bridge keeps it until DeleteGroups (docs/classic-group.md). Once a
        # day keeps the job out of the differentials, which otherwise see a group Dead on Kafka and
        # Empty on the bridge whenever the job happens to run between a sequence's steps.
        "offsets.retention.check.interval.ms": 86_400_000,
        "auto.create.topics.enable": "true",
        "log.flush.interval.messages": 9223372036854775807,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
    }


def format_storage(
    config: Path,
    workdir: Path,
    *extra: str,
    cluster_id: str | None = None,
    quorum: tuple[str, ...] = ("--standalone",),
    heap: str = "256m",
) -> str:
    """``kafka.tools.StorageTool format`` for ``cluster_id`` (default: a new one; returned), as
    ``kafka-storage.sh`` does before a KRaft node's first start; its output goes to ``format.log``.
    ``quorum``: how the node finds its controllers (a standalone controller by default);
    ``extra``: more arguments (``--add-scram ...`` for SCRAM users)."""
    cluster_id = cluster_id or kafka_uuid()
    fmt = subprocess.run(
        jvm_command(
            "kafka.tools.StorageTool",
            "format",
            "--config",
            str(config),
            "--cluster-id",
            cluster_id,
            *quorum,
            *extra,
            heap=heap,
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=workdir,
    )
    (workdir / "format.log").write_text(fmt.stdout + fmt.stderr, encoding="utf-8")
    if fmt.returncode != 0:
        raise KafkaStartError(
            f"kafka.tools.StorageTool format failed (exit {fmt.returncode}):\n{fmt.stdout}{fmt.stderr}"
        )
    return cluster_id


def start_kafka_broker(
    workdir: Path,
    *,
    timeout_s: float = BROKER_START_TIMEOUT_S,
    heap: str = HEAP,
    overrides: dict[str, Any] | None = None,
    fast_start: bool = True,
) -> KafkaBroker:
    """Format storage in ``workdir`` and start a broker on free ports; wait until it is usable.
    ``fast_start``: the JVM's C1 compiler only (``kafka_processes.FAST_START``; benchmarks that
    measure the broker turn it off).

    Raises ``KafkaStartError`` (with the log tail) when it exits or is not ready in time; ports
    taken between picking and binding are retried with others."""
    require_java()
    last_error = ""
    for attempt in range(3):
        attempt_dir = Path(workdir) / f"broker-{attempt}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        port, controller_port = free_ports(2)
        props = broker_properties(attempt_dir, port, controller_port) | (overrides or {})
        config = write_properties(attempt_dir / "server.properties", props)
        cluster_id = format_storage(config, attempt_dir)
        log_path = attempt_dir / "broker.log"
        process, log_file = spawn(
            jvm_command("kafka.Kafka", str(config), heap=heap, fast_start=fast_start), log_path, attempt_dir
        )
        broker = KafkaBroker(
            process,
            log_path,
            log_file,
            port=port,
            controller_port=controller_port,
            workdir=attempt_dir,
            cluster_id=cluster_id,
        )
        what = f"Kafka broker on {broker.bootstrap}"
        last_error = await_ready(broker, KafkaBroker.answers, what, timeout_s, 0.2, KafkaStartError)
        if not last_error:
            return broker
        if "address already in use" not in last_error.lower():
            break
    raise KafkaStartError(last_error)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """One Apache Kafka 4.3.1 broker for the session; fails (never skips) when it cannot start."""
    start = lambda: start_kafka_broker(tmp_path_factory.mktemp("kafka"))  # noqa: E731
    yield from session_process(start, KafkaStartError, "Apache Kafka broker")


@pytest.fixture
def connect_worker(tmp_path: Path) -> Iterator[Callable[..., ConnectWorker]]:
    """Factory: ``connect_worker(bootstrap=..., group_id=..., protocol=...)`` starts a worker
    (``start_connect_worker``'s keywords); every worker it started is killed at teardown
    (``ConnectWorker.discard``: the test is over, a graceful stop would only cost time)."""
    start = lambda _count, **kwargs: start_connect_worker(tmp_path / "connect", **kwargs)  # noqa: E731
    yield from _started_each(start, "Connect worker")


# ---------------------------------------------------------------------------------------- bridge

BRIDGE_PREFIX = "connect-bridge listening on "


@dataclass
class BridgeProcess(KafkaProcess):
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
    metrics_listen: str = "off"
    """``--metrics-listen`` (``start_bridge(metrics_listen=...)``); "off" by default."""

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
            process, log_file = _spawn_bridge(
                self.config_path, self.upstream, self.workdir, self.port, self.metrics_listen
            )
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
    config: Path, upstream: str, workdir: Path, port: int = 0, metrics_listen: str = "off"
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
        metrics_listen,
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
    metrics_listen: str = "off",
    classic_initial_rebalance_delay_ms: int | None = None,
) -> BridgeProcess:
    """``connect-bridge serve --upstream UPSTREAM --listen 127.0.0.1:0 --metrics-listen off
    --state-dir WORKDIR/state`` with a ``bridge.yaml`` giving ``proxy_base_port`` (a free port
    minus the broker's node id), the scheduled rebalance delay of the test workers and, with
    ``config_topic``, the config view from that topic (``settings`` adds or replaces top-level keys;
    ``metrics_listen`` HOST:PORT serves /metrics; ``classic_initial_rebalance_delay_ms``, when not
    None, the coordinator's delay of a classic group's first rebalance). Returns once it prints
    where it listens."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    [proxy_port] = free_ports(1)
    doc: dict[str, Any] = {
        "proxy_base_port": proxy_port - BROKER_NODE_ID,
        "coordinator": {"scheduled_rebalance_max_delay_ms": scheduled_rebalance_max_delay_ms},
    }
    if classic_initial_rebalance_delay_ms is not None:
        doc["coordinator"]["classic_initial_rebalance_delay_ms"] = classic_initial_rebalance_delay_ms
    if config_topic is not None:
        doc["config_view"] = {"topic": config_topic, **({"group": group} if group else {})}
    doc |= settings or {}
    config = workdir / "bridge.yaml"
    config.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")  # JSON is YAML
    process, log_file = _spawn_bridge(config, upstream, workdir, metrics_listen=metrics_listen)
    bridge = BridgeProcess(
        process,  # type: ignore[arg-type]
        workdir / "bridge.log",
        log_file,
        proxy_base_port=int(doc["proxy_base_port"]),
        config_path=config,
        upstream=upstream,
        workdir=workdir,
        metrics_listen=metrics_listen,
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
    serve --upstream`` (``start_bridge``'s keywords); each one is stopped at teardown.

    Its classic groups start their first rebalance at once (``classic_initial_rebalance_delay_ms``
    0 unless given), as the ``kafka_broker`` fixture's (``group.initial.rebalance.delay.ms=0``):
    a drill's first worker does not wait the product default's 3 s to join."""

    def start(count: int, upstream: str, **kwargs: Any) -> BridgeProcess:
        kwargs.setdefault("classic_initial_rebalance_delay_ms", 0)
        return start_bridge(upstream, tmp_path / f"bridge-{count}", **kwargs)

    yield from _started_each(start, "connect-bridge")


def _started_each(start: Callable[..., P], what: str) -> Iterator[Callable[..., P]]:
    """Body of a factory fixture: the factory calls ``start(count, ...)`` (``count``: how many it
    started before, to name a directory), fails the test (never skips) when one cannot start, and
    ends every one it started at teardown, the last first (``discard()``: a Connect worker is
    killed, a bridge stopped)."""
    started: list[P] = []

    def factory(*args: Any, **kwargs: Any) -> P:
        try:
            process = start(len(started), *args, **kwargs)
        except KafkaStartError as exc:
            pytest.fail(f"{what} unavailable: {exc}", pytrace=False)
        started.append(process)
        return process

    yield factory
    for process in reversed(started):
        process.discard()
