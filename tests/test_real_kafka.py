"""Apache Kafka 4.3.1 and Java Connect workers, directly and through ``connect-bridge serve --upstream``.

The broker (``kafka_broker``), the worker factory (``connect_worker``) and the bridge factory
(``bridge_proxy``) come from tests/kafka_fixtures.py, registered in tests/conftest.py; the jars are
fetched on first use (tests/kafka_jars.py, docs/real-kafka.md).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.protocol.admin.groups import DescribeGroupsRequest

from connect_bridge.wire import maps as wm
from connect_bridge.wire.client import KafkaConnection
from kafka_fixtures import (
    VERIFIABLE_SOURCE,
    BridgeProcess,
    ConnectWorker,
    KafkaBroker,
    accepts,
    start_kafka_broker,
)
from tansu import consume_partition, create_and_produce

pytestmark = pytest.mark.heavy


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def consume(bootstrap: str, topic: str, count: int, timeout_s: float = 20.0) -> list[tuple]:
    """Up to ``count`` records of partition 0 from the beginning, (offset, key, value)."""
    return consume_partition(bootstrap, topic, count, timeout_s)[:count]


def verifiable_source(topic: str, tasks: int) -> dict[str, object]:
    """VerifiableSource: each task produces ``{"task": n, "seqno": i, ...}`` at ``throughput``/s."""
    return {"connector.class": VERIFIABLE_SOURCE, "tasks.max": tasks, "topic": topic, "throughput": 20}


async def describe_classic(bridge: BridgeProcess, group: str) -> Any:
    """DescribeGroups v5 for one group, sent to the bridge's bootstrap listener."""
    conn = await KafkaConnection.connect(bridge.host, bridge.port, client_id="test-describe")
    try:
        request = DescribeGroupsRequest(groups=[group], include_authorized_operations=False)
        [described] = wm.describe_groups_response_from_wire(await conn.request(request, 5))
        return described
    finally:
        await conn.close()


def test_broker_produce_and_consume(kafka_broker: KafkaBroker) -> None:
    topic = unique("roundtrip")
    records = [(b"k%d" % i, b"v%d" % i) for i in range(3)]
    assert create_and_produce(kafka_broker.bootstrap, topic, records, timeout_s=10) == [0, 1, 2]
    assert consume(kafka_broker.bootstrap, topic, 3) == [
        (0, b"k0", b"v0"),
        (1, b"k1", b"v1"),
        (2, b"k2", b"v2"),
    ]


def test_own_broker_kill_and_stop(tmp_path: Path) -> None:
    """A broker of its own (not the session's): kill() is a SIGKILL, stop() after it does nothing."""
    broker = start_kafka_broker(tmp_path)
    try:
        assert broker.running
        broker.kill()
        assert broker.process.returncode == -9
        assert not accepts(broker.host, broker.port)
        assert broker.stop() == -9
    finally:
        broker.stop()


def test_java_worker_direct(kafka_broker: KafkaBroker, connect_worker: Callable[..., ConnectWorker]) -> None:
    group = unique("connect-direct")
    worker = connect_worker(bootstrap=kafka_broker.bootstrap, group_id=group, protocol="sessioned")
    topic = unique("verifiable")
    worker.create_connector("source", verifiable_source(topic, 2))
    status = worker.wait_running("source", 2)
    assert {t["worker_id"] for t in status["tasks"]} == {f"127.0.0.1:{worker.rest_port}"}
    assert len(consume(kafka_broker.bootstrap, topic, 4)) == 4  # the tasks really produce
    assert worker.stop() == 143  # SIGTERM: the JVM runs its shutdown hooks, exits 128 + 15
    assert "Kafka Connect stopped" in worker.log_text()


def test_java_worker_through_bridge(
    kafka_broker: KafkaBroker,
    connect_worker: Callable[..., ConnectWorker],
    bridge_proxy: Callable[..., BridgeProcess],
) -> None:
    group = unique("connect-cluster")  # matches the bridge's default coordinated groups, connect.*
    bridge = bridge_proxy(kafka_broker.bootstrap, config_topic=f"{group}-configs", group=group)
    worker = connect_worker(bootstrap=bridge.bootstrap, group_id=group, protocol="sessioned")
    topic = unique("verifiable")
    worker.create_connector("source", verifiable_source(topic, 2))
    worker.wait_running("source", 2)
    assert len(consume(kafka_broker.bootstrap, topic, 4)) == 4  # produced through the bridge

    # The bridge coordinates the group (DescribeGroups answered locally), the broker never saw it.
    described = asyncio.run(asyncio.wait_for(describe_classic(bridge, group), 10))
    assert (described.error_code, described.state, described.protocol_type) == (0, "Stable", "connect")
    assert described.protocol_data == "sessioned"
    assert len(described.members) == 1
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        assert group not in {g["group_id"] for g in admin.list_groups()}
    finally:
        admin.close()

    worker.kill()
    assert worker.process.returncode == -9
    assert bridge.running, bridge.log_tail()
