"""Apache Kafka 4.3.1's own Java clients and tools through ``connect-bridge serve --upstream``.

Each client runs against the bridge's listener and, where it compares, against the broker directly:
exit codes, records produced = records consumed, and the tools' outputs must match (the bridge's
listener port aside). The tools are the classes behind ``bin/kafka-*.sh`` (tests/java_tools.py):

- admin: ``kafka-topics --create/--describe/--list`` (CreateTopics with configs, Metadata),
  ``kafka-configs --describe`` (DescribeConfigs, a large one with ``--all``), ``kafka-cluster
  cluster-id/list-endpoints`` (DescribeCluster, rewritten to the bridge's listener);
- the idempotent producer (InitProducerId, ``acks=all``) of ConsoleProducer and
  ProducerPerformance, a transactional one whose id looks like a Connect task's, and a consumer with
  assigned partitions (ConsoleConsumer ``--partition``);
- a KIP-848 consumer group (``group.protocol=consumer``: ConsumerGroupHeartbeat relayed to the real
  coordinator) and a classic one, for groups the bridge does not coordinate;
- ``kafka-consumer-groups --describe/--list`` over groups of both coordinators at once.

Fixtures ``kafka_broker`` / ``bridge_proxy`` come from tests/kafka_fixtures.py (tests/conftest.py).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, OffsetAndMetadata, TopicPartition

import java_tools as jt
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.requests import decode_response
from connect_bridge.workers.live_legacy import LiveLegacyWorker
from kafka_fixtures import BROKER_NODE_ID, BridgeProcess, KafkaBroker
from test_server import frame, raw_socket, read_frame

T = TypeVar("T")

pytestmark = pytest.mark.heavy


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, topic: str, partitions: int = 1, *configs: str) -> str:
    args = ["--bootstrap-server", bootstrap, "--create", "--topic", topic, "--partitions", str(partitions)]
    args += ["--replication-factor", "1", *(x for c in configs for x in ("--config", c))]
    return jt.run_tool(jt.TOPICS, *args).stdout


def console_consume(
    bootstrap: str, topic: str, count: int, *extra: str
) -> jt.subprocess.CompletedProcess[str]:
    return jt.run_tool(
        jt.CONSOLE_CONSUMER,
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--max-messages",
        str(count),
        "--timeout-ms",
        "30000",
        *extra,
    )


def group_tool(bootstrap: str, *args: str, check: bool = True) -> jt.subprocess.CompletedProcess[str]:
    return jt.run_tool(jt.CONSUMER_GROUPS, "--bootstrap-server", bootstrap, *args, check=check)


def group_offsets(describe_out: str, group: str) -> dict[int, int]:
    """Partition -> CURRENT-OFFSET from ``kafka-consumer-groups --describe`` (offsets view)."""
    out = {}
    for line in describe_out.splitlines():
        cols = line.split()
        if len(cols) >= 4 and cols[0] == group and cols[2].isdigit() and cols[3].lstrip("-").isdigit():
            out[int(cols[2])] = int(cols[3])
    return out


def group_types(list_out: str) -> dict[str, str]:
    """``kafka-consumer-groups --list --type``: group -> type."""
    return {c[0]: c[1] for c in (line.split() for line in list_out.splitlines()[1:]) if len(c) == 2}


# ------------------------------------------------------------------------------------------ admin


def test_admin_tools_through_the_bridge_match_the_broker(
    kafka_broker: KafkaBroker, bridge_proxy: Callable[..., BridgeProcess]
) -> None:
    bridge = bridge_proxy(kafka_broker.bootstrap)
    direct, via = kafka_broker.bootstrap, bridge.bootstrap
    topic = unique("admin")
    # CreateTopics with configs, through the bridge
    created = create_topic(via, topic, 3, "cleanup.policy=compact", "retention.ms=3600000")
    assert f"Created topic {topic}." in created

    def both(run: Callable[[str], T]) -> tuple[T, T]:
        """``run(bootstrap)`` directly and through the bridge at once (a tool's JVM start is most
        of its time, and the two share nothing): (direct, through the bridge)."""
        with ThreadPoolExecutor(2) as pool:
            a, b = pool.submit(run, direct), pool.submit(run, via)
            return a.result(), b.result()

    def same(main: str, *args: str) -> str:
        sub = args[:1] if main == jt.CLUSTER else ()  # kafka-cluster SUBCOMMAND --bootstrap-server
        rest = args[len(sub) :]
        a, b = both(lambda bootstrap: jt.run_tool(main, *sub, "--bootstrap-server", bootstrap, *rest).stdout)
        assert b == a, f"{main} {args}: through the bridge\n{b}\ndirectly\n{a}"
        return a

    described = same(jt.TOPICS, "--describe", "--topic", topic)
    assert "PartitionCount: 3" in described and "cleanup.policy=compact" in described
    assert topic in same(jt.TOPICS, "--list").split()
    configs = same(jt.CONFIGS, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert "cleanup.policy=compact" in configs and "retention.ms=3600000" in configs
    everything = same(jt.CONFIGS, "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all")
    assert len(everything.splitlines()) > 200  # a DescribeConfigs answer of ~20 KB, relayed as is
    assert same(jt.CLUSTER, "cluster-id").strip() == f"Cluster ID: {kafka_broker.cluster_id}"

    # DescribeCluster: the same broker, at the bridge's relay listener for node 1
    def endpoints(bootstrap: str) -> list[list[str]]:
        out = jt.run_tool(jt.CLUSTER, "list-endpoints", "--bootstrap-server", bootstrap).stdout
        return [line.split() for line in out.splitlines()[1:] if line.strip()]

    [row_direct], [row_via] = both(endpoints)
    relay_port = bridge.proxy_base_port + BROKER_NODE_ID
    assert row_direct[:3] == [str(BROKER_NODE_ID), "127.0.0.1", str(kafka_broker.port)]
    assert row_via == [*row_direct[:2], str(relay_port), *row_direct[3:]]


# ------------------------------------------------------------------------------------------ producers


def test_idempotent_producers_and_an_assigned_consumer(
    kafka_broker: KafkaBroker, bridge_proxy: Callable[..., BridgeProcess]
) -> None:
    bridge = bridge_proxy(kafka_broker.bootstrap)
    topic = unique("idempotent")
    create_topic(kafka_broker.bootstrap, topic)
    lines = [f"k{i}:value-{i}" for i in range(500)]
    jt.run_tool(
        jt.CONSOLE_PRODUCER,
        "--bootstrap-server",
        bridge.bootstrap,
        "--topic",
        topic,
        "--reader-property",
        "parse.key=true",
        "--reader-property",
        "key.separator=:",
        "--command-property",
        "enable.idempotence=true",
        "--command-property",
        "acks=all",
        input="\n".join(lines) + "\n",
    )
    perf = jt.run_tool(
        jt.PRODUCER_PERF,
        "--topic",
        topic,
        "--num-records",
        "5000",
        "--record-size",
        "1024",
        "--throughput",
        "-1",
        "--command-property",
        f"bootstrap.servers={bridge.bootstrap}",
        "acks=all",
        "enable.idempotence=true",
    )
    assert jt.producer_perf_summary(perf.stdout)["records"] == 5000
    # Connect's exactly-once source tasks use transactional ids "<group>-<connector>-<task>", which
    # match the coordinated pattern connect.*: FindCoordinator(TRANSACTION) must still go upstream.
    transactional = jt.run_tool(
        jt.PRODUCER_PERF,
        "--topic",
        topic,
        "--num-records",
        "1000",
        "--record-size",
        "100",
        "--throughput",
        "-1",
        "--transactional-id",
        unique("connect-cluster-source-0"),
        "--transaction-duration-ms",
        "200",
        "--command-property",
        f"bootstrap.servers={bridge.bootstrap}",
    )
    assert jt.producer_perf_summary(transactional.stdout)["records"] == 1000

    total = len(lines) + 5000 + 1000
    args = ("--partition", "0", "--offset", "earliest", "--formatter-property", "print.key=true")
    via = console_consume(bridge.bootstrap, topic, total, *args)
    direct = console_consume(kafka_broker.bootstrap, topic, total, *args)
    assert f"Processed a total of {total} messages" in via.stderr
    assert via.stdout == direct.stdout
    assert via.stdout.splitlines()[: len(lines)] == [line.replace(":", "\t", 1) for line in lines]

    # The broker's own log: every batch was written by a producer with an id (InitProducerId).
    segment = kafka_broker.workdir / "data" / f"{topic}-0" / "00000000000000000000.log"
    dump = jt.run_tool(jt.DUMP_LOG_SEGMENTS, "--files", str(segment)).stdout
    batches = re.findall(r"producerId: (-?\d+) producerEpoch: (-?\d+).*?isTransactional: (\w+)", dump)
    assert batches, dump[:2000]
    assert all(int(pid) >= 0 for pid, _, _ in batches), dump[:2000]
    assert {t for _, _, t in batches} == {"false", "true"}


# ------------------------------------------------------------------------------------------ groups


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_consumer_group_the_bridge_does_not_coordinate(
    kafka_broker: KafkaBroker, bridge_proxy: Callable[..., BridgeProcess], protocol: str
) -> None:
    """``group.protocol=consumer`` (KIP-848: ConsumerGroupHeartbeat, relayed) and classic, both for a
    group outside ``connect.*``: consumed = produced, offsets committed at the real coordinator."""
    bridge = bridge_proxy(kafka_broker.bootstrap)
    topic, group = unique("orders"), unique("orders-app")
    create_topic(bridge.bootstrap, topic, 3)
    count = 3000
    jt.run_tool(
        jt.PRODUCER_PERF,
        "--topic",
        topic,
        "--num-records",
        str(count),
        "--record-size",
        "64",
        "--throughput",
        "-1",
        "--command-property",
        f"bootstrap.servers={bridge.bootstrap}",
        "acks=all",
    )
    consumed = console_consume(
        bridge.bootstrap,
        topic,
        count,
        "--group",
        group,
        "--from-beginning",
        "--command-property",
        f"group.protocol={protocol}",
    )
    assert f"Processed a total of {count} messages" in consumed.stderr
    assert len(consumed.stdout.splitlines()) == count
    assert "ERROR" not in consumed.stderr, consumed.stderr

    # The real coordinator has the group and its offsets; the bridge shows the same.
    direct = group_tool(kafka_broker.bootstrap, "--describe", "--group", group).stdout
    via = group_tool(bridge.bootstrap, "--describe", "--group", group).stdout
    assert via == direct
    assert sum(group_offsets(direct, group).values()) == count
    expected = {"consumer": "Consumer", "classic": "Classic"}[protocol]
    assert group_types(group_tool(kafka_broker.bootstrap, "--list", "--type").stdout)[group] == expected
    assert group_types(group_tool(bridge.bootstrap, "--list", "--type").stdout)[group] == expected


def test_group_tool_over_both_coordinators(
    kafka_broker: KafkaBroker, bridge_proxy: Callable[..., BridgeProcess]
) -> None:
    """Regression: the Java admin client batches every group of one coordinator node into one
    DescribeGroups, and the bridge's groups share the broker's node id. A batch naming a coordinated
    group and another one was relayed whole, and the broker answered GROUP_ID_NOT_FOUND for the
    bridge's group (``kafka-consumer-groups --describe --group connect-x --group other`` failed).
    ListGroups was relayed only, so ``--list`` missed the bridge's groups. The bridge's group here is
    a Connect group (a legacy worker, protocol type ``connect``): a consumer group with a matching id
    is the broker's (test below). The tool describes a Connect group as it does on Kafka: "not a
    consumer group"."""
    bridge = bridge_proxy(kafka_broker.bootstrap)
    topic, mine, theirs = unique("both"), unique("connect-group"), unique("plain-group")
    create_topic(kafka_broker.bootstrap, topic)
    # An uncoordinated group with a committed offset, at the broker.
    admin_consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap, group_id=theirs)
    try:
        admin_consumer.assign([TopicPartition(topic, 0)])
        admin_consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "", -1)})
    finally:
        admin_consumer.close()
    # A coordinated Connect group with one member, at the bridge.
    worker = LiveLegacyWorker(bridge.bootstrap, mine, "http://w1:8083/", "sessioned", lambda *a, **k: None)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while worker.logic.generation < 1 or worker.logic.needs_rejoin(worker.clock()):
            assert time.monotonic() < deadline and not worker.dead, worker.error
            time.sleep(0.2)

        # kafka-consumer-groups (and kafka-python's admin) refuse a Connect group ("not a consumer
        # group (connect)", as on Kafka): one DescribeGroups for both, as the Java admin batches it.
        port = int(bridge.bootstrap.rsplit(":", 1)[1])
        with raw_socket(port, timeout=10) as sock:
            sock.sendall(frame(m.DescribeGroupsRequest(groups=[mine, theirs]), 5, 1))
            payload = read_frame(sock)
        assert payload is not None
        answer = decode_response(m.ApiKey.DESCRIBE_GROUPS, 5, payload, framed=False)
        described = {g.group_id: g for g in answer.groups}
        assert (described[mine].group_state, described[mine].protocol_type) == ("Stable", "connect")
        assert len(described[mine].members) == 1
        assert (described[theirs].group_state, described[theirs].members) == ("Empty", [])
        state = group_tool(bridge.bootstrap, "--describe", "--group", theirs, "--state")
        (row,) = [line.split() for line in state.stdout.splitlines() if line.split()[:1] == [theirs]]
        assert row[-2:] == ["Empty", "0"], state.stdout

        # The tool lists consumer groups only (a protocol-type filter): a Connect group is not
        # among them, on Kafka either. An unfiltered ListGroups has the bridge's group too.
        listed = group_types(group_tool(bridge.bootstrap, "--list", "--type").stdout)
        assert listed[theirs] == "Classic" and mine not in listed
        with raw_socket(port, timeout=10) as sock:
            sock.sendall(frame(m.ListGroupsRequest(), 4, 2))
            payload = read_frame(sock)
        assert payload is not None
        listing = decode_response(m.ApiKey.LIST_GROUPS, 4, payload, framed=False)
        groups = {g.group_id: g.protocol_type for g in listing.groups}
        assert groups[mine] == "connect" and theirs in groups
    finally:
        worker.stop()


def test_sink_style_consumer_group_commits_offsets(
    kafka_broker: KafkaBroker, bridge_proxy: Callable[..., BridgeProcess]
) -> None:
    bridge = bridge_proxy(kafka_broker.bootstrap)
    topic, group = unique("sink"), unique("connect-sink")
    create_topic(kafka_broker.bootstrap, topic)
    jt.run_tool(
        jt.CONSOLE_PRODUCER, "--bootstrap-server", bridge.bootstrap, "--topic", topic, input="a\nb\nc\n"
    )
    consumed = console_consume(
        bridge.bootstrap,
        topic,
        3,
        "--group",
        group,
        "--from-beginning",
        "--command-property",
        "group.protocol=classic",
    )
    assert consumed.stdout.split() == ["a", "b", "c"], consumed.stderr
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap)
    try:
        offsets = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    assert offsets.get(TopicPartition(topic, 0)) is not None, consumed.stderr
