"""The partitioned, transactional state store against a real Kafka broker: routing, compaction on
acquire, read_committed, fencing of an old owner, the partition-count check and the lifecycle.

Every check reads the topic back with a plain ``read_committed`` consumer, not through the store,
so a record the store only believes durable cannot pass.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import (
    InvalidProducerEpochError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    TransactionAbortedError,
)

from connect_bridge.bridge.stores.partitioned_store import PartitionedTopicStore, PartitionNotHeld, is_fenced
from connect_bridge.bridge.stores.store_base import StoreError
from connect_bridge.bridge.stores.topic_store import state_topic_partitions
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.partitioning import partition_for
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record, RecordType
from kafka_fixtures import KafkaBroker
from polling import wait_until
from tansu import unique_topic
from test_store import compacted, config, engine_run, target

P = 3
TIMEOUTS = {"load_timeout_s": 20.0, "sync_timeout_s": 5.0}


def groups_in(partition: int, count: int, partitions: int = P) -> list[str]:
    """``count`` group ids whose records live in ``partition``."""
    found = (f"group-{i}" for i in range(10_000))
    return [g for g in found if partition_for(g, partitions) == partition][:count]


def committed(broker: KafkaBroker, topic: str, partition: int) -> list[Record]:
    """Every committed record of ``partition`` in offset order, read as any read_committed client
    would (the store is not involved)."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        fetch_max_wait_ms=100,
    )
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out: list[Record] = []

        def at_end() -> bool:
            for records in consumer.poll(timeout_ms=100).values():
                out.extend(decode_record(r.key, r.value) for r in records)
            return consumer.position(tp) >= end

        wait_until(at_end, timeout=20, message=lambda: f"{topic}[{partition}] not read to {end}")
        return out
    finally:
        consumer.close()


@pytest.fixture
def topic() -> str:
    return unique_topic("bridge-ha-state")


@pytest.fixture
def prefix() -> str:
    return unique_topic("txn")  # transactional ids are cluster-wide: one prefix per test


def open_store(broker: KafkaBroker, topic: str, prefix: str, partitions: int = P) -> PartitionedTopicStore:
    return PartitionedTopicStore.open(
        broker.bootstrap, topic, partitions=partitions, transactional_id_prefix=prefix, **TIMEOUTS
    )


@pytest.fixture
def stores() -> Iterator[list[PartitionedTopicStore]]:
    """Opened stores are appended here and closed at teardown, failed or not."""
    opened: list[PartitionedTopicStore] = []
    yield opened
    for store in opened:
        store.close()


def wrapped(cause: BaseException) -> StoreError:
    try:
        raise StoreError("sync failed") from cause
    except StoreError as exc:
        return exc


@pytest.mark.parametrize(
    ("error", "fenced"),
    [
        (ProducerFencedError(), True),  # what a fenced AddPartitionsToTxn or EndTxn raises
        (InvalidProducerEpochError(), True),
        # every later call of a producer in that fatal state:
        (KafkaError("Cannot perform send because ...", ProducerFencedError()), True),
        (wrapped(ProducerFencedError()), True),
        (KafkaTimeoutError("flush timed out"), False),
        (TransactionAbortedError(), False),
        (KafkaError("Cannot perform send because ...", KafkaTimeoutError()), False),
        (wrapped(OSError("disk")), False),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_which_errors_mean_fenced(error: BaseException, fenced: bool) -> None:
    assert is_fenced(error) is fenced


def test_topic_created_with_its_partitions_and_refused_with_another_count(
    kafka_broker: KafkaBroker, topic: str, prefix: str
) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        PartitionedTopicStore.open(
            kafka_broker.bootstrap, topic, partitions=P, transactional_id_prefix=prefix, create=False
        )
    open_store(kafka_broker, topic, prefix).close()
    assert state_topic_partitions(kafka_broker.bootstrap, topic) == P
    with pytest.raises(StoreError, match=f"has {P} partitions but {P + 1} are configured"):
        open_store(kafka_broker, topic, prefix, partitions=P + 1)
    with open_store(kafka_broker, topic, prefix) as store:  # the same count again is fine
        assert store.held() == frozenset() and store.load() == []


def test_records_land_in_their_groups_partition_and_acquire_returns_the_live_ones(
    kafka_broker: KafkaBroker, topic: str, prefix: str, stores: list[PartitionedTopicStore]
) -> None:
    coord, engine_records = engine_run()
    group = engine_records[0].group_id
    history = list(engine_records)
    for p in range(P):
        a, b = groups_in(p, 2)
        history += [config(a, 1), config(b, 1), target(a, 1), Record(RecordType.CONFIG, a), config(b, 2)]
    store = open_store(kafka_broker, topic, prefix)
    stores.append(store)
    assert store.load() == []
    for p in range(P):
        assert store.acquire(p) == []
    assert store.held() == frozenset(range(P))
    for start in range(0, len(history), 7):  # several transactions per partition
        store.append(history[start : start + 7])
        assert store.sync() == frozenset()
    by_partition = {p: [r for r in history if partition_for(r.group_id, P) == p] for p in range(P)}
    assert store.load() == [r for p in range(P) for r in compacted(by_partition[p])]
    assert sum(t.fsyncs for t in store.partition_syncs.values()) >= P
    store.close()

    for p in range(P):  # each record is in its group's partition, all of them committed
        assert committed(kafka_broker, topic, p) == by_partition[p]

    restarted = open_store(kafka_broker, topic, prefix)
    stores.append(restarted)
    for p in range(P):
        assert restarted.acquire(p) == compacted(by_partition[p])
    fresh = GroupCoordinator()
    reacquired = restarted.acquire(partition_for(group, P))  # the engine's group shares it
    fresh.replay([r for r in reacquired if r.group_id == group], 40)
    assert fresh.snapshot() == coord.snapshot()


def test_an_aborted_or_unfinished_transaction_of_a_previous_owner_is_never_read(
    kafka_broker: KafkaBroker, topic: str, prefix: str, stores: list[PartitionedTopicStore]
) -> None:
    group, other = groups_in(1, 2)
    store = open_store(kafka_broker, topic, prefix)
    stores.append(store)
    store.acquire(1)
    store.commit([config(group, 1)])
    store.release(1)

    def raw_owner() -> KafkaProducer:
        producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, transactional_id=f"{prefix}-1")
        producer.init_transactions()
        producer.begin_transaction()
        for record in (config(group, 2), config(other, 2)):
            key, value = encode_record(record)
            producer.send(topic, key=key, value=value, partition=1)
        producer.flush()
        return producer

    aborting = raw_owner()
    aborting.abort_transaction()
    aborting.close()
    unfinished = raw_owner()  # sends and never commits: a bridge that died mid-sync
    try:
        assert store.acquire(1) == [config(group, 1)]  # fences the unfinished one, aborting it
        assert committed(kafka_broker, topic, 1) == [config(group, 1)]
    finally:
        unfinished.close(timeout=1)


def test_a_fenced_owner_loses_the_partition_and_none_of_its_later_writes_survive(
    kafka_broker: KafkaBroker, topic: str, prefix: str, stores: list[PartitionedTopicStore]
) -> None:
    (group,) = groups_in(2, 1)
    (elsewhere,) = groups_in(0, 1)
    x = open_store(kafka_broker, topic, prefix)
    y = open_store(kafka_broker, topic, prefix)
    stores.extend([x, y])
    x.acquire(0)
    x.acquire(2)
    x.commit([config(group, 1)])

    assert y.acquire(2) == [config(group, 1)]  # y fences x
    x.append([config(group, 2), config(elsewhere, 2)])
    assert x.sync() == frozenset({2})
    assert x.held() == frozenset({0})  # partition 0 was not taken: still x's, and its write durable
    assert x.load() == [config(elsewhere, 2)]
    with pytest.raises(PartitionNotHeld) as refused:
        x.append([config(group, 3)])
    assert refused.value.partitions == frozenset({2})
    assert x.sync() == frozenset()

    assert committed(kafka_broker, topic, 2) == [config(group, 1)]
    assert committed(kafka_broker, topic, 0) == [config(elsewhere, 2)]
    y.commit([target(group, 1)])
    assert y.acquire(2) == [config(group, 1), target(group, 1)]  # re-acquire re-reads
    assert committed(kafka_broker, topic, 2) == [config(group, 1), target(group, 1)]


def test_a_record_for_a_partition_not_held_raises_and_changes_nothing(
    kafka_broker: KafkaBroker, topic: str, prefix: str, stores: list[PartitionedTopicStore]
) -> None:
    (mine,) = groups_in(0, 1)
    (theirs,) = groups_in(1, 1)
    store = open_store(kafka_broker, topic, prefix)
    stores.append(store)
    store.acquire(0)
    store.commit([config(mine, 1)])
    with pytest.raises(PartitionNotHeld, match=r"\[1\]"):
        store.append([config(mine, 2), config(theirs, 1)])
    assert store.load() == [config(mine, 1)]
    assert store.sync() == frozenset()
    assert committed(kafka_broker, topic, 0) == [config(mine, 1)]
    assert committed(kafka_broker, topic, 1) == []


def test_release_drops_what_is_buffered_and_close_is_final(
    kafka_broker: KafkaBroker, topic: str, prefix: str
) -> None:
    (group,) = groups_in(0, 1)
    store = open_store(kafka_broker, topic, prefix)
    store.acquire(0)
    store.append([config(group, 1)])
    store.release(0)
    store.release(0)  # idempotent
    assert store.held() == frozenset() and store.load() == []
    assert store.sync() == frozenset()
    store.acquire(0)
    store.append([config(group, 2)])
    store.close()  # syncs what is buffered
    store.close()  # idempotent
    assert committed(kafka_broker, topic, 0) == [config(group, 2)]
    for call in (store.sync, store.load, lambda: store.acquire(0), lambda: store.append([config(group, 3)])):
        with pytest.raises(StoreError, match="closed"):
            call()
