"""Proxy mode against a real broker: the bridge in front of tansu (``serve --upstream``).

The bridge runs in-process (``test_server.Running``: its own event loop in a background thread,
``MemoryRecordStore``) with ``upstream`` = the module's tansu broker and a ``proxy_base_port`` chosen
so that the listener of tansu's broker (node id N) is on a free port. Real kafka-python clients
(admin, producer, consumer with and without a group) bootstrap through it; raw frames check what the
clients do not show: address rewriting at every version, ApiVersions intersection, acks=0 framing,
response order on one connection mixing forwarded and local requests, which groups are coordinated
where, and what a client sees when the upstream broker dies.
"""

from __future__ import annotations

import asyncio
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.protocol.admin.cluster import DescribeClusterRequest, DescribeClusterResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from connect_bridge.codecs import messages as m
from connect_bridge.codecs.requests import decode_response, encode_request
from connect_bridge.state import api as napi
from connect_bridge.wire import maps as wm
from connect_bridge.wire.client import KafkaConnection
from tansu import TansuBroker, free_port, start_tansu, tansu, unique_topic
from test_server import (
    VIEW,
    Running,
    connect_describe,
    legacy_join,
    read_frame,
    wait_until,
)

__all__ = ["tansu"]  # the module's broker fixture, shared through tests/tansu.py

HOST = "127.0.0.1"
LOCAL_APIS = {1000, 1001, 1002, 1003}
TIMEOUT_S = 10.0


# ------------------------------------------------------------------------------------------ harness


@dataclass
class Proxied:
    """A bridge in front of one tansu broker."""

    srv: Running
    broker: TansuBroker
    node_id: int
    listener: int
    """The bridge's listener for tansu's broker (base port + node id)."""

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.srv.port}"


def upstream_node_id(broker: TansuBroker) -> int:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000)
    try:
        (node,) = admin.describe_cluster()["brokers"]
        return int(node["broker_id"])
    finally:
        admin.close()


def start_proxied(broker: TansuBroker) -> Proxied:
    node_id = upstream_node_id(broker)
    for _ in range(5):
        listener = free_port()
        if listener - node_id >= 1:
            break
    srv = Running(view=VIEW, upstream=[(broker.host, broker.port)], proxy_base_port=listener - node_id)
    srv.wait_loaded()
    return Proxied(srv, broker, node_id, listener)


@pytest.fixture(scope="module")
def proxied(tansu: TansuBroker) -> Iterator[Proxied]:
    p = start_proxied(tansu)
    try:
        yield p
    finally:
        p.srv.stop()


class Raw:
    """One blocking connection for hand-made request frames (kafka-python message classes)."""

    def __init__(self, port: int, timeout: float = TIMEOUT_S) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=timeout)

    def send(self, msg: Any, version: int, correlation_id: int) -> None:
        self.sock.sendall(encode_request(msg, version, correlation_id, "raw"))

    def recv(self, api_key: int | type, version: int) -> Any:
        """The next response, decoded with the bridge's codec (int key) or kafka-python's class."""
        payload = read_frame(self.sock)
        assert payload is not None, "connection closed"
        if isinstance(api_key, int):
            return decode_response(api_key, version, payload, framed=False)
        return api_key.decode(payload, version=version, header=True)

    def ask(self, msg: Any, version: int, response: int | type, correlation_id: int = 7) -> Any:
        self.send(msg, version, correlation_id)
        out = self.recv(response, version)
        assert correlation(out) == correlation_id
        return out

    def closed_within(self, seconds: float) -> bool:
        """EOF (or reset) arrives before ``seconds``; False if the connection just hangs."""
        self.sock.settimeout(seconds)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def correlation(response: Any) -> int:
    header = getattr(response, "_header", None) or response.header
    return header.correlation_id


def api_versions(port: int) -> dict[int, tuple[int, int]]:
    raw = Raw(port)
    try:
        resp = raw.ask(m.ApiVersionsRequest(), 3, 18)
    finally:
        raw.close()
    assert resp.error_code == 0
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def records(values: list[bytes]) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    now = int(time.time() * 1000)
    for value in values:
        builder.append(now, None, value)
    builder.close()
    return bytes(builder.buffer())


def produce_request(topic: str, values: list[bytes], acks: int) -> Any:
    part = ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records(values))
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[ProduceRequest.TopicProduceData(name=topic, partition_data=[part])],
    )


def list_offsets_request(topic: str, timestamp: int = -2) -> Any:
    part = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        partition_index=0, current_leader_epoch=-1, timestamp=timestamp, max_num_offsets=1
    )
    return ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[part])],
    )


def fetch_request(topic: str, offset: int = 0, max_wait_ms: int = 100) -> Any:
    part = FetchRequest.FetchTopic.FetchPartition(
        partition=0,
        current_leader_epoch=-1,
        fetch_offset=offset,
        last_fetched_epoch=-1,
        log_start_offset=-1,
        partition_max_bytes=1 << 20,
    )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
        forgotten_topics_data=[],
        rack_id="",
    )


def fetched_values(resp: Any) -> list[bytes]:
    out: list[bytes] = []
    for topic in resp.responses:
        for part in topic.partitions:
            assert part.error_code == 0, part
            batches = MemoryRecords(bytes(part.records or b""))
            while batches.has_next():
                batch = batches.next_batch()
                out.extend(bytes(r.value) for r in batch)
    return out


def create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()


def consume_all(bootstrap: str, topic: str, count: int, timeout_s: float = TIMEOUT_S) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < count and time.monotonic() < deadline:
            for batch in consumer.poll(200).values():
                out.extend(r.value for r in batch)
        return out
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------ clients


def test_admin_client_creates_lists_and_describes_topics_through_the_bridge(proxied: Proxied) -> None:
    topic = unique_topic("px-admin")
    admin = KafkaAdminClient(bootstrap_servers=proxied.bootstrap, request_timeout_ms=5000)
    try:
        admin.create_topics([NewTopic(topic, 3, 1)])
        assert topic in admin.list_topics()
        (described,) = admin.describe_topics([topic])
        assert described["error_code"] == 0
        assert sorted(p["partition_index"] for p in described["partitions"]) == [0, 1, 2]
        assert {p["leader_id"] for p in described["partitions"]} == {proxied.node_id}
        cluster = admin.describe_cluster()
        assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
            (proxied.node_id, HOST, proxied.listener)
        ]
    finally:
        admin.close()
    # the topic really is on tansu
    direct = KafkaAdminClient(bootstrap_servers=proxied.broker.bootstrap, request_timeout_ms=5000)
    try:
        assert topic in direct.list_topics()
    finally:
        direct.close()


def test_producer_acks_1_and_acks_0_then_a_consumer_without_group(proxied: Proxied) -> None:
    topic = unique_topic("px-produce")
    create_topic(proxied.bootstrap, topic)
    acked = KafkaProducer(bootstrap_servers=proxied.bootstrap, acks=1, linger_ms=0)
    try:
        for i in range(5):
            meta = acked.send(topic, f"a{i}".encode()).get(TIMEOUT_S)
            assert (meta.topic, meta.partition, meta.offset) == (topic, 0, i)
    finally:
        acked.close(timeout=5)

    fire = KafkaProducer(bootstrap_servers=proxied.bootstrap, acks=0, linger_ms=0)
    try:
        for i in range(5):
            fire.send(topic, f"z{i}".encode()).get(TIMEOUT_S)
        fire.flush(TIMEOUT_S)
        # The same producer (same connection: one broker) keeps working after acks=0 requests,
        # which get no response: a metadata request for a new topic is answered.
        other = unique_topic("px-produce-other")
        create_topic(proxied.bootstrap, other)
        assert fire.partitions_for(other) == {0}
        fire.send(topic, b"z5").get(TIMEOUT_S)
        fire.flush(TIMEOUT_S)
    finally:
        fire.close(timeout=5)

    values = consume_all(proxied.bootstrap, topic, 11)
    assert values == [f"a{i}".encode() for i in range(5)] + [f"z{i}".encode() for i in range(6)]


def test_acks_0_produce_does_not_desynchronize_the_connection(proxied: Proxied) -> None:
    """Raw: acks=0 Produce (no response), then Metadata and ListOffsets on the same connection get
    their own answers, in order; the records arrived."""
    topic = unique_topic("px-acks0")
    create_topic(proxied.bootstrap, topic)
    raw = Raw(proxied.listener)
    try:
        for version in (3, 8, 9):  # classic and flexible request headers (acks sits after them)
            raw.send(produce_request(topic, [f"v{version}".encode()], acks=0), version, 100 + version)
        raw.send(m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=topic)]), 9, 200)
        raw.send(list_offsets_request(topic, timestamp=-1), 5, 201)
        meta = raw.recv(3, 9)
        assert correlation(meta) == 200
        assert [t.name for t in meta.topics] == [topic]
        offsets = raw.recv(ListOffsetsResponse, 5)
        assert correlation(offsets) == 201
        # acks=1 on the same connection is answered too
        resp = raw.ask(produce_request(topic, [b"acked"], acks=1), 9, ProduceResponse, 202)
        assert resp.responses[0].partition_responses[0].error_code == 0
        fetched = raw.ask(fetch_request(topic), 11, FetchResponse, 203)
        assert fetched_values(fetched) == [b"v3", b"v8", b"v9", b"acked"]
    finally:
        raw.close()


def test_consumer_group_goes_to_the_upstream_coordinator(proxied: Proxied) -> None:
    """The one group-consumer test. tansu holds a group's first JoinGroup for about half the
    member's session timeout (~23 s at kafka-python's default 45 s, ~3 s at 6 s): the consumer
    asks for 10 s, the Java consumer's default before Kafka 3.0 (the test took 23 s, now 5 s)."""
    topic = unique_topic("px-group")
    group = f"consumers-{uuid.uuid4().hex[:8]}"
    create_topic(proxied.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=proxied.bootstrap, acks=1)
    try:
        for i in range(3):
            producer.send(topic, f"g{i}".encode()).get(TIMEOUT_S)
    finally:
        producer.close(timeout=5)

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=proxied.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=10_000,  # tansu holds the first JoinGroup for about half of it
    )
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 45
        while len(got) < 3 and time.monotonic() < deadline:
            for batch in consumer.poll(500).values():
                got.extend(r.value for r in batch)
        assert got == [b"g0", b"g1", b"g2"]
        consumer.commit()
        assert consumer.committed(TopicPartition(topic, 0)) == 3
        coordinator = consumer._coordinator.coordinator_id  # the node it talks to
        assert str(coordinator) in (str(proxied.node_id), f"coordinator-{proxied.node_id}")
        # the group lives on tansu, not in the bridge
        assert not proxied.srv.on_loop(lambda: group in proxied.srv.server.coordinator.groups)
        raw = Raw(proxied.broker.port)
        try:
            resp = raw.ask(m.DescribeGroupsRequest(groups=[group]), 5, 15)
        finally:
            raw.close()
        (described,) = resp.groups
        assert described.error_code == 0 and len(described.members) == 1
    finally:
        consumer.close()


# ------------------------------------------------------------------------------------------ rewriting


def test_metadata_find_coordinator_and_describe_cluster_name_the_bridge_listener(proxied: Proxied) -> None:
    versions = api_versions(proxied.listener)
    raw = Raw(proxied.listener)
    seen_ports: set[int] = set()
    try:
        cid = 0
        for version in range(versions[3][0], versions[3][1] + 1):
            cid += 1
            resp = raw.ask(m.MetadataRequest(topics=[]), version, 3, cid)
            seen_ports |= {b.port for b in resp.brokers}
            assert [(b.node_id, b.host, b.port) for b in resp.brokers] == [
                (proxied.node_id, HOST, proxied.listener)
            ], version
        for group in ("consumers-1", "connect-cluster"):  # upstream's answer / the bridge's own
            for version in range(versions[10][0], versions[10][1] + 1):
                cid += 1
                if version >= 4:
                    req = m.FindCoordinatorRequest(key_type=0, coordinator_keys=[group])
                else:
                    req = m.FindCoordinatorRequest(key=group, key_type=0)
                resp = raw.ask(req, version, 10, cid)
                if version >= 4:
                    (c,) = resp.coordinators
                    got = (c.error_code, c.node_id, c.host, c.port)
                else:
                    got = (resp.error_code, resp.node_id, resp.host, resp.port)
                seen_ports.add(got[3])
                assert got == (0, proxied.node_id, HOST, proxied.listener), (group, version)
        for version in range(versions[60][0], versions[60][1] + 1):
            cid += 1
            req = DescribeClusterRequest(include_cluster_authorized_operations=False)
            resp = raw.ask(req, version, DescribeClusterResponse, cid)
            seen_ports |= {b.port for b in resp.brokers}
            assert [(b.broker_id, b.host, b.port) for b in resp.brokers] == [
                (proxied.node_id, HOST, proxied.listener)
            ], version
    finally:
        raw.close()
    assert proxied.broker.port not in seen_ports


def test_api_versions_are_the_intersection_with_caps_plus_the_bridge_apis(proxied: Proxied) -> None:
    upstream = api_versions(proxied.broker.port)
    for port in (proxied.srv.port, proxied.listener):
        ours = api_versions(port)
        assert LOCAL_APIS <= set(ours)
        # ConnectGroupDescribe has v1 (held work, members' waits); the other Connect APIs only v0.
        assert {k: ours[k] for k in LOCAL_APIS} == {1000: (0, 0), 1001: (0, 0), 1002: (0, 0), 1003: (0, 1)}
        assert ours[0][1] == min(upstream[0][1], 9) and ours[0][1] <= 9
        assert ours[1][1] == min(upstream[1][1], 15) and ours[1][1] <= 15
        for key, (lo, hi) in ours.items():
            if key in LOCAL_APIS:
                continue
            assert key in upstream, key
            assert upstream[key][0] <= lo <= hi <= upstream[key][1], (key, ours[key], upstream[key])
            spec = m.api_spec(key)
            if spec is not None:  # decoded (or answered) by the bridge: only versions it decodes
                assert spec.min_version <= lo and hi <= spec.max_version, key


# ------------------------------------------------------------------------------------------ ordering


def test_pipelined_forwarded_and_local_requests_are_answered_in_request_order(proxied: Proxied) -> None:
    topic = unique_topic("px-order")
    create_topic(proxied.bootstrap, topic)
    join = wm.heartbeat_to_wire(
        napi.HeartbeatRequest(
            "connect-x",
            "",
            0,
            rebalance_timeout_ms=60_000,
            url="http://x1:8083",
            config_offset=VIEW.offset,
            owned=frozenset(),
        )
    )
    pipeline = [
        (m.MetadataRequest(topics=[m.MetadataRequest.MetadataRequestTopic(name=topic)]), 9, 1),  # fwd
        (join, 0, 2),  # local
        (list_offsets_request(topic), 5, 3),  # fwd
        (wm.describe_to_wire(["connect-x"]), 0, 4),  # local
        (produce_request(topic, [b"fire"], acks=0), 9, 5),  # fwd, no response
        (fetch_request(topic, max_wait_ms=300), 11, 6),  # fwd (held by tansu until data or 300 ms)
        (m.ApiVersionsRequest(), 3, 7),  # local
        (m.MetadataRequest(topics=[]), 12, 8),  # fwd
        (wm.describe_to_wire(["connect-x"]), 0, 9),  # local
    ]
    raw = Raw(proxied.listener)
    try:
        raw.sock.sendall(b"".join(encode_request(msg, v, cid, "raw") for msg, v, cid in pipeline))
        order = []
        for _ in range(len(pipeline) - 1):
            payload = read_frame(raw.sock)
            assert payload is not None
            order.append(int.from_bytes(payload[:4], "big", signed=True))
        assert order == [1, 2, 3, 4, 6, 7, 8, 9]
    finally:
        raw.close()
    # the local join took effect in the bridge
    described = asyncio.run(_describe(proxied.srv.port, "connect-x"))
    assert [mbr.url for mbr in described.members] == ["http://x1:8083"]


async def _describe(port: int, group: str) -> napi.DescribedGroup:
    conn = await KafkaConnection.connect(HOST, port, "test")
    try:
        (described,) = await connect_describe(conn, group)
        return described
    finally:
        await conn.close()


# ------------------------------------------------------------------------------------------ groups


def test_connect_groups_are_coordinated_by_the_bridge_other_groups_by_upstream(proxied: Proxied) -> None:
    group = f"connect-cluster-{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        conn = await KafkaConnection.connect(HOST, proxied.listener, "legacy-1")
        try:
            first = await legacy_join(conn, "", "http://w1:8083", group)
            joined = await legacy_join(conn, first.member_id, "http://w1:8083", group)
            assert joined.error_code == 0 and joined.leader == first.member_id
        finally:
            await conn.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))
    # handled locally: the bridge's coordinator has the (classic) group with the member
    assert (
        proxied.srv.on_loop(
            lambda: next(iter(proxied.srv.server.coordinator.describe_any(group).members)).client_id
        )
        == "legacy-1"
    )

    bridge = Raw(proxied.listener)
    direct = Raw(proxied.broker.port)
    try:
        # DescribeGroups of a coordinated group is answered by the bridge, tansu never heard of it
        local = bridge.ask(m.DescribeGroupsRequest(groups=[group]), 5, 15).groups[0]
        upstream = direct.ask(m.DescribeGroupsRequest(groups=[group]), 5, 15).groups[0]
        assert local.error_code == 0 and [mbr.client_id for mbr in local.members] == ["legacy-1"]
        assert upstream.members == []
        # "consumers-1" is not coordinated: the bridge relays tansu's answer unchanged
        relayed = bridge.ask(m.DescribeGroupsRequest(groups=["consumers-1"]), 5, 15).groups[0]
        origin = direct.ask(m.DescribeGroupsRequest(groups=["consumers-1"]), 5, 15).groups[0]
        assert relayed.to_dict() == origin.to_dict()
    finally:
        bridge.close()
        direct.close()


# ------------------------------------------------------------------------------------------ faults


def test_upstream_death_closes_client_connections_and_the_bridge_stays_up(tmp_path: Path) -> None:
    broker = start_tansu(tmp_path)
    proxied = start_proxied(broker)
    try:
        topic = unique_topic("px-death")
        create_topic(proxied.bootstrap, topic)
        idle = Raw(proxied.listener)
        waiting = Raw(proxied.listener)
        assert [t.name for t in idle.ask(m.MetadataRequest(topics=[]), 9, 3).topics] == [topic]
        # a fetch tansu holds for 5 s: in flight when the broker dies
        waiting.send(fetch_request(topic, max_wait_ms=5000), 11, 1)
        time.sleep(0.3)  # for the fetch to reach tansu and wait there: nothing outside shows that it did
        broker.kill9()
        assert waiting.closed_within(3.0), "in-flight request: the client connection hangs"
        idle.send(m.MetadataRequest(topics=[]), 9, 2)
        assert idle.closed_within(3.0), "next request: the client connection hangs"
        idle.close()
        waiting.close()

        # the bridge is up: local APIs answer on both ports, group coordination still works
        for port in (proxied.srv.port, proxied.listener):
            assert LOCAL_APIS <= set(api_versions(port))
        described = asyncio.run(_describe(proxied.srv.port, "connect-nothing"))
        assert not described.members
        # a forwarded request on a new connection is a clean close, not a hang
        fresh = Raw(proxied.listener)
        fresh.send(m.MetadataRequest(topics=[]), 9, 3)
        assert fresh.closed_within(3.0)
        fresh.close()
        wait_until(lambda: proxied.srv.connections() == 0, 5.0)

        assert api_versions(proxied.srv.port)  # and the bridge is still there
    finally:
        proxied.srv.stop()
        broker.stop()
