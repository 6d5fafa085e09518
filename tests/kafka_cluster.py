"""A real Apache Kafka 4.3.1 cluster of several KRaft brokers on loopback, for tests.

Node 1 is the cluster's only controller and also a broker (``process.roles=broker,controller``,
storage formatted ``--standalone``); every other node is a broker only, formatted with the same
cluster id, that registers with node 1's controller when it starts. One controller keeps the JVM
count at the number of brokers (two cores): a quorum of three combined nodes would lose its
majority whenever a test stops one of two. So tests stop and kill nodes 2 and up, never node 1.

``KafkaCluster.start(node_id)`` starts (or restarts, on the same port and data) a node and returns
once the controller lists it as registered and unfenced; ``stop`` is a controlled shutdown
(SIGTERM: leaders move away first), ``kill`` a crash (SIGKILL). Every node writes ``broker.log``
in its own directory; a node that cannot start fails the test with its log tail.

Internal topics are replicated twice (``__consumer_offsets``, ``__transaction_state``), so the
group coordinators and the transaction coordinators survive one broker down; test topics choose
their own replication factor and ``min.insync.replicas``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata import MetadataRequest

from connect_bridge.wire.client import KafkaConnection
from kafka_fixtures import KafkaBroker, broker_properties, format_storage
from kafka_processes import (
    HOST,
    KafkaStartError,
    free_ports,
    jvm_command,
    kafka_uuid,
    require_java,
    spawn,
    write_properties,
)
from polling import poll

CLUSTER_HEAP = "256m"
"""Per broker JVM: three of them share two cores and the rest of the suite's memory."""
NODE_START_TIMEOUT_S = 120.0
CONTROLLER_ID = 1
STOP_TIMEOUT_S = 30.0


def node_properties(node_id: int, workdir: Path, port: int, controller_port: int) -> dict[str, Any]:
    """server.properties of node ``node_id``: node 1 is broker and controller, the others brokers."""
    props = broker_properties(workdir, port, controller_port) | {
        "node.id": node_id,
        "offsets.topic.replication.factor": 2,
        "offsets.topic.num.partitions": 3,
        "transaction.state.log.replication.factor": 2,
        "transaction.state.log.min.isr": 1,
        # A crashed broker is fenced, and its partitions' leaders move, after this long without a
        # heartbeat (default 9 s); short enough for a test, long enough for a loaded machine.
        "broker.session.timeout.ms": 6000,
        "broker.heartbeat.interval.ms": 1000,
        "replica.lag.time.max.ms": 10000,
        "num.network.threads": 1,
        "num.io.threads": 2,
        "num.replica.fetchers": 1,
        "background.threads": 2,
    }
    if node_id != CONTROLLER_ID:
        props |= {
            "process.roles": "broker",
            "listeners": f"PLAINTEXT://{HOST}:{port}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{port}",
        }
    return props


@dataclass
class KafkaCluster:
    """KRaft brokers on loopback sharing one controller (node 1); see the module docstring."""

    workdir: Path
    cluster_id: str = field(default_factory=kafka_uuid)
    controller_port: int = 0
    ports: dict[int, int] = field(default_factory=dict)
    nodes: dict[int, KafkaBroker] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.controller_port:
            [self.controller_port] = free_ports(1)

    @property
    def bootstrap(self) -> str:
        """Every running node's address (a client bootstraps from whichever answers)."""
        return ",".join(f"{HOST}:{self.ports[n]}" for n in sorted(self.nodes) if self.nodes[n].running)

    def address(self, node_id: int) -> str:
        return f"{HOST}:{self.ports[node_id]}"

    def node_dir(self, node_id: int) -> Path:
        return self.workdir / f"node-{node_id}"

    def start(self, node_id: int, *, timeout_s: float = NODE_START_TIMEOUT_S) -> KafkaBroker:
        """Start node ``node_id`` (format its storage the first time) and wait until the
        controller has it registered and unfenced; a second call restarts it on the same port."""
        self.start_nowait(node_id)
        return self.wait_ready(node_id, timeout_s)

    def start_nowait(self, node_id: int) -> KafkaBroker:
        """Spawn node ``node_id``'s JVM (formatting its storage the first time) without waiting."""
        require_java()
        previous = self.nodes.get(node_id)
        if previous is not None and previous.running:
            raise KafkaStartError(f"node {node_id} already runs")
        directory = self.node_dir(node_id)
        if node_id not in self.ports:
            [self.ports[node_id]] = free_ports(1)
        config = directory / "server.properties"
        if not config.exists():
            directory.mkdir(parents=True, exist_ok=True)
            props = node_properties(node_id, directory, self.ports[node_id], self.controller_port)
            write_properties(config, props)
            self._format(node_id, config, directory)
        log_path = directory / "broker.log"
        process, log_file = spawn(
            jvm_command("kafka.Kafka", str(config), heap=CLUSTER_HEAP), log_path, directory
        )
        node = KafkaBroker(
            process,
            log_path,
            log_file,
            port=self.ports[node_id],
            controller_port=self.controller_port,
            workdir=directory,
            cluster_id=self.cluster_id,
            node_id=node_id,
        )
        self.nodes[node_id] = node
        return node

    def wait_ready(self, node_id: int, timeout_s: float = NODE_START_TIMEOUT_S) -> KafkaBroker:
        """Node ``node_id`` is listed by its own Metadata (it registered and the controller
        unfenced it); fails with its log when it exits or takes longer than ``timeout_s``."""
        node = self.nodes[node_id]
        ready = poll(lambda: not node.running or node_id in self.registered(node_id), timeout_s, 0.5)
        if ready and node.running:
            return node
        why = "exited" if not node.running else f"not ready after {timeout_s:.0f}s"
        raise KafkaStartError(f"Kafka node {node_id} {why}; log {node.log_path}:\n{node.log_tail()}")

    def registered(self, via: int | None = None) -> set[int]:
        """The node ids a Metadata request lists (asked of node ``via``, else of any running
        node); empty when none answers."""
        candidates = [via] if via is not None else [n for n in sorted(self.nodes) if self.nodes[n].running]
        for node_id in candidates:
            with contextlib.suppress(OSError):  # a timeout too
                return asyncio.run(_metadata_brokers(HOST, self.ports[node_id]))
        return set()

    def stop(self, node_id: int, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Controlled shutdown (SIGTERM): the node hands its leaderships on before it exits."""
        self.nodes[node_id].stop(timeout_s)

    def kill(self, node_id: int) -> None:
        """A crash (SIGKILL): the controller fences it after ``broker.session.timeout.ms``."""
        self.nodes[node_id].kill()

    def stop_all(self) -> None:
        """Brokers first (their controlled shutdown needs the controller), node 1 last; a node
        that does not stop in time is killed, so no JVM outlives the tests."""
        for node_id in sorted(self.nodes, reverse=True):
            try:
                self.nodes[node_id].stop(STOP_TIMEOUT_S if node_id == CONTROLLER_ID else 15.0)
            finally:
                self.nodes[node_id].kill()

    def _format(self, node_id: int, config: Path, directory: Path) -> None:
        """``kafka.tools.StorageTool format``: the controller as a standalone quorum, a broker
        with the cluster id only (it finds the quorum through ``controller.quorum.bootstrap.servers``)."""
        quorum = ("--standalone",) if node_id == CONTROLLER_ID else ("--no-initial-controllers",)
        format_storage(config, directory, cluster_id=self.cluster_id, quorum=quorum, heap="128m")


async def _metadata_brokers(host: str, port: int) -> set[int]:
    conn = await KafkaConnection.connect(host, port, client_id="cluster-probe", timeout=3)
    try:
        meta = await conn.request(MetadataRequest(topics=[]), 1, timeout=5)
        return {b.node_id for b in meta.brokers}
    finally:
        await conn.close()


def metadata_brokers(host: str, port: int) -> set[int]:
    """The node ids a Metadata request to ``host:port`` lists (a broker, or a bridge listener)."""
    return asyncio.run(asyncio.wait_for(_metadata_brokers(host, port), 10))


@contextlib.contextmanager
def running_cluster(workdir: Path, node_ids: list[int]) -> Iterator[KafkaCluster]:
    """A cluster with ``node_ids`` started (in parallel, node 1 first); every node stopped (or
    killed) on exit, also when a start fails."""
    cluster = KafkaCluster(workdir)
    try:
        for node_id in node_ids:
            cluster.start_nowait(node_id)
        for node_id in node_ids:
            cluster.wait_ready(node_id)
        yield cluster
    except KafkaStartError as exc:
        pytest.fail(f"Kafka cluster unavailable: {exc}", pytrace=False)
    finally:
        cluster.stop_all()
