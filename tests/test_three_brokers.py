"""The bridge in front of a real cluster of three Apache Kafka 4.3.1 brokers (KRaft).

``tests/kafka_cluster.py`` runs the cluster: node 1 is broker and the only controller, nodes 2
and 3 are brokers (small heaps, one module-scoped cluster). The module starts with nodes 1 and 2
and two bridges in proxy mode in front of them, then:

(a) node 3 joins while the bridges run: a Metadata relayed through one bridge names it, and its
    listener on ``proxy_base_port + 3`` accepts connections by the time the client reads that
    answer; the other bridge, asked nothing, opens its listener from its own periodic refresh
    (``upstream_metadata_refresh_ms``). A producer writes to a partition led by node 3 through
    the bridge, a consumer reads it back.
(b) node 2 is stopped and started again: connections on the listeners of nodes 1 and 3 keep
    working, a Connect group member (classic protocol, on node 2's listener) keeps heartbeating in
    its generation throughout, and a consumer group (the broker's) consumes every record produced
    before, during and after without a rebalance.
(c) partition leadership moves (reassignment, preferred leader election): a producer through the
    bridge follows the new leader through the bridge's rewritten Metadata, losing nothing.
(d) the bridge with ``ha.enabled`` keeps its state on a topic with replication factor 3 and
    ``min.insync.replicas`` 2; the broker leading the state partition is killed (SIGKILL) while
    the bridge coordinates groups; groups join while it is down; after the bridge is killed and
    restarted, every member and generation it acknowledged is still there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka import ConsumerRebalanceListener, KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.metadata import MetadataRequest

from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.wire.client import KafkaConnection
from kafka_cluster import CONTROLLER_ID, KafkaCluster, metadata_brokers, running_cluster
from kafka_fixtures import BridgeProcess, KafkaStartError, accepts, start_bridge
from kafka_processes import HOST, free_ports
from polling import wait_until
from test_ha import Member

pytestmark = pytest.mark.heavy

NODES = 3
REFRESH_MS = 1000
"""The refreshing bridge's ``upstream_metadata_refresh_ms``."""


def free_base(nodes: int) -> int:
    """A base port such that base + 1 .. base + ``nodes`` are all free now."""
    for _ in range(50):
        [first] = free_ports(1)
        with contextlib.ExitStack() as stack:
            try:
                for port in range(first + 1, first + nodes):
                    sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                    sock.bind((HOST, port))
            except OSError:
                continue
        return first - 1
    raise AssertionError(f"no {nodes} consecutive free ports")


def bridge_in_front(cluster: KafkaCluster, workdir: Path, **settings: Any) -> BridgeProcess:
    """``connect-bridge serve --upstream`` (the running nodes) with room for ``NODES`` listeners."""
    base = free_base(NODES + 1)
    try:
        return start_bridge(cluster.bootstrap, workdir, settings={"proxy_base_port": base, **settings})
    except KafkaStartError as exc:
        pytest.fail(f"connect-bridge unavailable: {exc}", pytrace=False)


@dataclass
class Front:
    """The cluster and the two bridges in front of it."""

    cluster: KafkaCluster
    relayed: BridgeProcess
    """Learns brokers from relayed responses only (its own refresh is ten minutes away)."""
    refreshing: BridgeProcess
    """Asked nothing: learns brokers from its own refresh every ``REFRESH_MS``."""

    def admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.relayed.bootstrap, client_id="three-admin")

    def direct_admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.cluster.bootstrap, client_id="three-direct")

    def ensure_three(self) -> None:
        """Node 3 runs (test (a) starts it; a test run on its own starts it here)."""
        node = self.cluster.nodes.get(3)
        if node is None or not node.running:
            self.cluster.start(3)

    def create(
        self, topic: str, assignments: dict[int, list[int]], configs: dict[str, str] | None = None
    ) -> None:
        admin = self.direct_admin()
        try:
            admin.create_topics(
                {topic: {"assignments": assignments, "configs": configs or {}}}, timeout_ms=30_000
            )
            wait_until(lambda: leaders(admin, topic).keys() == assignments.keys(), 30, 0.2)
        finally:
            admin.close()


def leaders(admin: KafkaAdminClient, topic: str) -> dict[int, int]:
    """Partition -> leader node id (partitions without a leader left out)."""
    try:
        [described] = admin.describe_topics([topic])
    except Exception:
        return {}
    found = {p["partition_index"]: p["leader_id"] for p in described["partitions"]}
    return {partition: leader for partition, leader in found.items() if leader >= 0}


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    started = time.monotonic()
    with running_cluster(tmp_path_factory.mktemp("cluster"), [1, 2]) as cluster:
        bridges: list[BridgeProcess] = []
        try:
            work = tmp_path_factory.mktemp("bridges")
            bridges.append(bridge_in_front(cluster, work / "relayed", upstream_metadata_refresh_ms=600_000))
            bridges.append(
                bridge_in_front(cluster, work / "refreshing", upstream_metadata_refresh_ms=REFRESH_MS)
            )
            print(f"two brokers and two bridges up in {time.monotonic() - started:.1f} s")
            yield Front(cluster, *bridges)
        finally:
            for bridge in reversed(bridges):
                bridge.stop()


def test_a_broker_added_while_the_bridge_runs_gets_a_listener(front: Front) -> None:
    relayed, refreshing = front.relayed, front.refreshing
    if 3 in front.cluster.nodes:
        pytest.fail("node 3 already runs: this test must run before the others start it", pytrace=False)
    for bridge in (relayed, refreshing):
        assert not accepts(HOST, bridge.proxy_base_port + 3), "something listens on node 3's port already"
    started = time.monotonic()
    front.cluster.start(3)
    print(f"node 3 joined in {time.monotonic() - started:.1f} s")

    # A Metadata relayed through the bridge names node 3: its listener is open by the time the
    # client reads the answer (asserted at once, no polling).
    wait_until(
        lambda: 3 in metadata_brokers(HOST, relayed.port),
        30,
        0.3,
        lambda: f"the bridge's Metadata never named node 3; log:\n{relayed.log_tail()}",
    )
    assert accepts(HOST, relayed.proxy_base_port + 3), relayed.log_tail()
    # The other bridge relays nothing: its own refresh finds node 3.
    wait_until(
        lambda: accepts(HOST, refreshing.proxy_base_port + 3),
        max(10, 5 * REFRESH_MS / 1000),
        0.1,
        lambda: f"no listener for node 3 on the refreshing bridge; log:\n{refreshing.log_tail()}",
    )
    for bridge in (relayed, refreshing):
        assert f"new upstream broker 3: relaying it on port {bridge.proxy_base_port + 3}" in bridge.log_text()

    # A partition led by node 3, written and read through the bridge (its Metadata sends the
    # clients to base + 3: node 3's listener relays to node 3).
    topic = f"on-node-3-{uuid.uuid4().hex[:6]}"
    front.create(topic, {0: [3]})
    producer = KafkaProducer(bootstrap_servers=relayed.bootstrap, acks="all", client_id="three-producer")
    try:
        sent = producer.send(topic, b"via node 3", partition=0).get(timeout=60)
    finally:
        producer.close()
    assert sent.offset == 0
    assert read(relayed.bootstrap, topic, 0, 1) == [b"via node 3"]


def read(bootstrap: str, topic: str, partition: int, count: int, timeout_s: float = 60) -> list[bytes]:
    """``count`` values of one partition from the start (no group), through ``bootstrap``."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="three-reader", enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, partition)])
        consumer.seek_to_beginning()
        values: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(values) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                values.extend(r.value for r in records)
        return values
    finally:
        consumer.close()


# ------------------------------------------------------------------------ (b) a broker restarts


class Session:
    """A client connection on one listener, kept open across the test (its own event loop)."""

    def __init__(self, port: int, client_id: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(KafkaConnection.connect(HOST, port, client_id))

    def brokers(self) -> set[int]:
        """Metadata on this connection (relayed upstream): the node ids it names."""
        meta = self.loop.run_until_complete(self.conn.request(MetadataRequest(topics=[]), 1, timeout=20))
        return {b.node_id for b in meta.brokers}

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


@dataclass
class Heartbeats:
    """A classic Connect member on one listener, heartbeating every second in a thread."""

    port: int
    group: str
    answers: list[int] = field(default_factory=list)
    member: Member | None = None
    stopped: threading.Event = field(default_factory=threading.Event)
    joined: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def run(self) -> None:
        async def beat() -> None:
            conn = await KafkaConnection.connect(HOST, self.port, "connect-worker-1")
            self.member = Member(conn, self.group)
            try:
                assert await self.member.join() == ErrorCode.NONE
                self.joined.set()
                while not self.stopped.is_set():
                    self.answers.append(await self.member.heartbeat())
                    await asyncio.sleep(1)
            finally:
                await conn.close()

        try:
            asyncio.run(beat())
        except BaseException as exc:
            self.error = exc
            self.joined.set()


class Rebalances(ConsumerRebalanceListener):
    """Tells a ``GroupConsumer`` of its partitions being assigned and revoked."""

    def __init__(self, consumer: GroupConsumer) -> None:
        self.consumer = consumer

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.consumer.on_partitions_revoked(revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.consumer.on_partitions_assigned(assigned)


@dataclass
class GroupConsumer:
    """A kafka-python consumer in a group the broker coordinates, polling in a thread; counts
    its partitions being revoked (a rebalance) after the first assignment."""

    bootstrap: str
    topic: str
    group: str
    values: list[bytes] = field(default_factory=list)
    assigned: threading.Event = field(default_factory=threading.Event)
    revoked: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def on_partitions_revoked(self, revoked: Any) -> None:
        if self.assigned.is_set():
            self.revoked += 1

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned.set()

    def run(self) -> None:
        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                group_id=self.group,
                client_id="three-group-consumer",
                auto_offset_reset="earliest",
                session_timeout_ms=30_000,
                heartbeat_interval_ms=1000,
            )
            consumer.subscribe([self.topic], listener=Rebalances(self))
            try:
                while not self.stopped.is_set():
                    for records in consumer.poll(timeout_ms=500).values():
                        self.values.extend(r.value for r in records)
            finally:
                consumer.close()
        except BaseException as exc:
            self.error = exc


def test_b_a_broker_stopped_and_restarted_keeps_the_other_sessions(front: Front) -> None:
    front.ensure_three()
    bridge, cluster = front.relayed, front.cluster
    base = bridge.proxy_base_port
    topic = f"restart-{uuid.uuid4().hex[:6]}"
    front.create(topic, {0: [1, 3], 1: [3, 1], 2: [2, 3]})
    member = Heartbeats(base + 2, f"connect-three-{uuid.uuid4().hex[:6]}")
    consumer = GroupConsumer(bridge.bootstrap, topic, f"consumers-{uuid.uuid4().hex[:6]}")
    threads = [threading.Thread(target=t.run, daemon=True) for t in (member, consumer)]
    for thread in threads:
        thread.start()
    sessions = {n: Session(base + n, f"three-session-{n}") for n in (1, 3)}
    producer = KafkaProducer(
        bootstrap_servers=bridge.bootstrap, acks="all", client_id="three-restart-producer"
    )
    expected: list[bytes] = []

    def produce(label: str) -> None:
        for partition in range(3):
            value = f"{label}-{partition}".encode()
            producer.send(topic, value, partition=partition).get(timeout=90)
            expected.append(value)

    try:
        assert member.joined.wait(60) and member.error is None, member.error
        wait_until(
            lambda: consumer.assigned.is_set() or consumer.error, 60, 0.2, "the consumer got no partitions"
        )
        assert consumer.error is None, consumer.error
        produce("before")
        for n, session in sessions.items():
            assert session.brokers() == {1, 2, 3}, n

        cluster.stop(2)  # controlled shutdown: partition 2's leadership moves to node 3
        stopped = time.monotonic()
        wait_until(lambda: 2 not in cluster.registered(1), 30, 0.3, "node 2 still registered")
        produce("during")
        for n, session in sessions.items():  # the same connections, relayed to nodes 1 and 3
            assert session.brokers() == {1, 3}, n
        away = Session(base + 2, "three-session-2")
        try:
            with pytest.raises(OSError):  # node 2's listener: the bridge closes it, no hang
                away.brokers()
        finally:
            away.close()

        cluster.start(2)
        print(f"node 2 was away {time.monotonic() - stopped:.1f} s")
        produce("after")
        for n, session in sessions.items():
            assert session.brokers() == {1, 2, 3}, n
        fresh = Session(base + 2, "three-session-2b")
        try:
            assert fresh.brokers() == {1, 2, 3}
        finally:
            fresh.close()
        wait_until(
            lambda: sorted(consumer.values) == sorted(expected) or consumer.error,
            60,
            0.3,
            lambda: f"consumed {len(consumer.values)} of {len(expected)}",
        )
        assert consumer.error is None, consumer.error
        assert consumer.revoked == 0, "the consumer group rebalanced"
        assert member.error is None, member.error
        assert member.answers and set(member.answers) == {ErrorCode.NONE}, member.answers
    finally:
        member.stopped.set()
        consumer.stopped.set()
        for thread in threads:
            thread.join(30)
        producer.close()
        for session in sessions.values():
            session.close()


# ------------------------------------------------------------------------ (c) leaders move


def test_c_clients_follow_moving_leaders_through_the_bridge(front: Front) -> None:
    front.ensure_three()
    bridge = front.relayed
    topic = f"moving-{uuid.uuid4().hex[:6]}"
    front.create(topic, {0: [2, 3]})
    producer = KafkaProducer(
        bootstrap_servers=bridge.bootstrap, acks="all", client_id="three-mover", retries=20
    )
    admin = front.direct_admin()
    sent: list[int] = []
    try:
        sent.append(producer.send(topic, b"on-2", partition=0).get(timeout=60).offset)
        for new_leader, replicas in ((3, [3, 2]), (2, [2, 3])):
            admin.alter_partition_reassignments({TopicPartition(topic, 0): replicas})

            def elected(new_leader: int = new_leader) -> bool:
                with contextlib.suppress(Exception):  # "already the preferred leader" included
                    admin.elect_leaders(0, {topic: [0]})
                return leaders(admin, topic).get(0) == new_leader

            wait_until(elected, 60, 0.5, lambda: f"leader still {leaders(admin, topic)}")
            # What the producer now learns through the bridge: node N at the bridge's listener N.
            meta = metadata_view(bridge.port, topic)
            assert meta["leader"] == new_leader
            assert meta["brokers"][new_leader] == (HOST, bridge.proxy_base_port + new_leader)
            sent.append(producer.send(topic, f"on-{new_leader}".encode(), partition=0).get(timeout=60).offset)
    finally:
        producer.close()
        admin.close()
    assert sent == [0, 1, 2]
    assert read(bridge.bootstrap, topic, 0, 3) == [b"on-2", b"on-3", b"on-2"]


def metadata_view(port: int, topic: str) -> dict[str, Any]:
    """Partition 0's leader and the broker addresses, as a Metadata through the bridge names them."""

    async def ask() -> dict[str, Any]:
        conn = await KafkaConnection.connect(HOST, port, "three-meta")
        try:
            meta = await conn.request(MetadataRequest(topics=[topic]), 1, timeout=20)
        finally:
            await conn.close()
        [described] = meta.topics
        [partition] = described.partitions
        return {"leader": partition.leader_id, "brokers": {b.node_id: (b.host, b.port) for b in meta.brokers}}

    return asyncio.run(asyncio.wait_for(ask(), 30))


# ------------------------------------------------------------------------ (d) the HA state topic


PATIENT_SESSION_MS = 300_000


@dataclass
class PatientMember(Member):
    """A Connect member with a five-minute session: test (d) does not heartbeat while it waits
    (joins while a broker is down, the bridge's restart), and its session must not end meanwhile
    (a removal would be acknowledged state too)."""

    session_ms: int = PATIENT_SESSION_MS
    rebalance_ms: int = 60_000


def ha_status(admin: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{admin}/admin/ha", timeout=5) as answer:
        return json.loads(answer.read())


def owns_partition(admin: str) -> bool:
    with contextlib.suppress(OSError):
        return 0 in ha_status(admin)["owned"]
    return False


TRANSACTION_KEY_TYPE = 1
"""FindCoordinator's key type for a transactional id."""


def transaction_coordinator(cluster: KafkaCluster, transactional_id: str) -> int | None:
    """The node coordinating ``transactional_id``'s transactions (None while the cluster has none:
    the first lookup creates ``__transaction_state``)."""

    async def ask() -> int | None:
        conn = await KafkaConnection.connect(HOST, cluster.ports[1], "three-txn-lookup")
        try:
            request = m.FindCoordinatorRequest(
                key_type=TRANSACTION_KEY_TYPE, coordinator_keys=[transactional_id]
            )
            [found] = (await conn.request(request, 4, timeout=10)).coordinators
        finally:
            await conn.close()
        return found.node_id if found.error_code == ErrorCode.NONE else None

    with contextlib.suppress(OSError, asyncio.TimeoutError):
        return asyncio.run(ask())
    return None


def coordinate_transactions_on(front: Front, node_id: int) -> None:
    """Move ``__transaction_state`` (one partition here) to lead from ``node_id``: killing that node
    then also kills the state producer's transaction coordinator. The first lookup creates the
    topic."""
    wait_until(lambda: transaction_coordinator(front.cluster, "probe") is not None, 60, 0.5)
    admin = front.direct_admin()
    others = sorted(n for n in front.cluster.nodes if n not in (node_id, CONTROLLER_ID))
    try:
        admin.alter_partition_reassignments({TopicPartition("__transaction_state", 0): [node_id, *others]})

        def moved() -> bool:
            with contextlib.suppress(Exception):  # "already the preferred leader" included
                admin.elect_leaders(0, {"__transaction_state": [0]})
            return transaction_coordinator(front.cluster, "probe") == node_id

        wait_until(moved, 60, 0.5, lambda: f"transactions led by {leaders(admin, '__transaction_state')}")
    finally:
        admin.close()


def test_d_ha_state_topic_keeps_every_acknowledged_answer_when_its_leader_dies(
    front: Front, tmp_path: Path
) -> None:
    """The killed broker leads the state partition and coordinates the state producer's
    transactions: the producer must find the new coordinator within the sync timeout (a producer
    that waits a whole request timeout on the dead one fails the store and stops the bridge)."""
    front.ensure_three()
    cluster = front.cluster
    coordinate_transactions_on(front, 2)
    suffix = uuid.uuid4().hex[:8]
    state = f"bridge-state-{suffix}"
    front.create(state, {0: [2, 3, 1]}, {"cleanup.policy": "compact", "min.insync.replicas": "2"})
    [admin_port] = free_ports(1)
    admin = f"{HOST}:{admin_port}"
    ha = {
        "enabled": True,
        "partitions": 1,
        "group": f"bridges-{suffix}",
        "transactional_id_prefix": f"state-{suffix}",
        "node_id": 1,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 1000,
        "refresh_owners_ms": 500,
    }
    try:
        bridge = start_bridge(
            cluster.bootstrap,
            tmp_path / "ha-bridge",
            settings={"proxy_base_port": free_base(NODES + 1), "state_topic": state, "ha": ha},
            metrics_listen=admin,
        )
    except KafkaStartError as exc:
        pytest.fail(f"connect-bridge unavailable: {exc}", pytrace=False)
    direct = front.direct_admin()
    leader: int | None = None
    acknowledged: dict[str, tuple[str, int]] = {}
    """Group -> (member id, generation) of every join the bridge answered with success."""

    async def join(group: str) -> int:
        conn = await KafkaConnection.connect(HOST, bridge.port, "connect-worker-ha")
        try:
            member = PatientMember(conn, group)
            code = await member.join()
        finally:
            await conn.close()
        if code == ErrorCode.NONE:
            acknowledged[group] = (member.member_id, member.generation)
        return code

    async def heartbeat(group: str) -> int:
        conn = await KafkaConnection.connect(HOST, bridge.port, "connect-worker-ha")
        try:
            member_id, generation = acknowledged[group]
            return await PatientMember(conn, group, member_id, generation).heartbeat()
        finally:
            await conn.close()

    def joined(group: str) -> bool:
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            return asyncio.run(asyncio.wait_for(join(group), 40)) == ErrorCode.NONE
        return False

    def beats(group: str) -> bool:
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            return asyncio.run(asyncio.wait_for(heartbeat(group), 20)) == ErrorCode.NONE
        return False

    try:
        wait_until(
            lambda: owns_partition(admin), 90, 0.3, lambda: f"partition 0 never owned:\n{bridge.log_tail()}"
        )
        wait_until(lambda: joined(f"connect-ha-before-{suffix}"), 60, 0.5, bridge.log_tail)

        leader = leaders(direct, state)[0]
        assert leader == 2, f"the state partition is led by node {leader}, not by its coordinator 2"
        cluster.kill(leader)
        killed = time.monotonic()
        # Joins while the leader is dead: each answered only once its records are on 2 replicas.
        for i in range(3):
            wait_until(lambda i=i: joined(f"connect-ha-during-{i}-{suffix}"), 120, 0.5, bridge.log_tail)
        print(f"three groups joined {time.monotonic() - killed:.1f} s after the state leader was killed")
        moved = leaders(direct, state).get(0)
        assert moved not in (None, leader), f"state partition leader {moved}"
        assert bridge.process.poll() is None, f"the bridge stopped:\n{bridge.log_tail()}"

        bridge.kill()  # a crash: what it acknowledged must come back from the topic
        bridge.restart()
        restarted = time.monotonic()
        wait_until(
            lambda: owns_partition(admin),
            90,
            0.3,
            lambda: f"partition 0 not owned again:\n{bridge.log_tail()}",
        )
        for group in list(acknowledged):
            wait_until(lambda group=group: beats(group), 60, 0.5, lambda group=group: f"{group} lost")
        print(
            f"{len(acknowledged)} acknowledged groups found "
            f"{time.monotonic() - restarted:.1f} s after the restart"
        )
        assert len(acknowledged) == 4
    finally:
        bridge.stop()
        direct.close()
