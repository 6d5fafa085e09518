"""The record store on a compacted topic, against tansu: commit, reopen, load, replay, tombstones."""

from __future__ import annotations

import gc
import logging
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from connect_bridge.bridge.stores.store import StoreError
from connect_bridge.bridge.stores.topic_store import TopicRecordStore, ensure_state_topic
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.record_codec import decode_record
from connect_bridge.state.records import Record, RecordType
from tansu import TansuBroker, start_tansu, tansu, unique_topic
from test_store import compacted, config, engine_run, target

__all__ = ["tansu"]  # the session broker fixture, shared through tests/tansu.py


def raw_records(broker: TansuBroker, topic: str, count: int) -> list[tuple[bytes, bytes | None]]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        out: list[tuple[bytes, bytes | None]] = []
        for _ in range(50):
            for records in consumer.poll(200).values():
                out.extend((r.key, r.value) for r in records)
            if len(out) >= count:
                break
        return out
    finally:
        consumer.close()


def test_engine_records_round_trip_and_replay(tansu: TansuBroker) -> None:
    topic = unique_topic("bridge-state")
    coord, records = engine_run()
    assert any(r.is_tombstone for r in records)
    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        assert store.load() == []
        # Commit in the batches a server would: per request.
        store.commit(records[:5])
        store.commit(records[5:])
        assert store.fsyncs == 2
        assert store.last_fsync_s >= 0 and store.total_fsync_s >= store.last_fsync_s

    # The topic holds the full history (tansu does not compact); the key/value bytes are the codec's.
    raw = raw_records(tansu, topic, len(records))
    assert [decode_record(k, v) for k, v in raw] == records

    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        loaded = store.load()
        assert store.records_read == len(records)
    assert loaded == compacted(records)
    assert len(loaded) < len(records)

    fresh = GroupCoordinator()
    fresh.replay(loaded, 40)
    assert fresh.snapshot() == coord.snapshot()


def test_tombstones_and_appends_after_load(tansu: TansuBroker) -> None:
    topic = unique_topic("bridge-state")
    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        store.commit([config("a", 1), config("b", 1), target("a", 1)])
        store.commit([Record(RecordType.CONFIG, "a"), config("b", 2)])
        expected = [target("a", 1), config("b", 2)]
        assert store.load() == expected
        assert store.live_count == 2
    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        assert store.load() == expected
        store.append([config("c", 3)])  # visible before sync, durable after close
        assert store.load() == [*expected, config("c", 3)]
    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        assert store.load() == [*expected, config("c", 3)]


def test_many_records_in_big_batches_load_completely(tansu: TansuBroker) -> None:
    # Far more than one producer batch and one fetch: the end of the partition must come from the
    # fetch high watermark, not from tansu's ListOffsets answer (last batch base offset + 1).
    topic = unique_topic("bridge-state")
    records = [config(f"g{i % 300}", i) for i in range(3000)]
    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        store.commit(records)
    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        assert store.load() == compacted(records)
        assert store.records_read == 3000


def test_first_append_reads_the_topic(tansu: TansuBroker) -> None:
    topic = unique_topic("bridge-state")
    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        store.commit([config("a", 1)])
    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        store.commit([config("b", 1)])  # no load first
        assert store.load() == [config("a", 1), config("b", 1)]


def test_topic_created_once_and_existing_topic_tolerated(tansu: TansuBroker) -> None:
    topic = unique_topic("bridge-state")
    assert ensure_state_topic(tansu.bootstrap, topic, replication_factor=1) is True
    assert ensure_state_topic(tansu.bootstrap, topic, replication_factor=1) is False
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap)
    try:
        assert topic in admin.list_topics()
    finally:
        admin.close()
    with TopicRecordStore.open(tansu.bootstrap, topic) as store:
        assert store.load() == []


def test_missing_topic_without_create_and_closed_store_raise(tansu: TansuBroker) -> None:
    store = TopicRecordStore.open(tansu.bootstrap, unique_topic("absent"), create=False)
    try:
        with pytest.raises(StoreError, match="does not exist"):
            store.load()
    finally:
        store.close()
    with pytest.raises(StoreError, match="closed"):
        store.load()
    store.close()  # idempotent


def crash_scenario(broker: TansuBroker) -> None:
    store = TopicRecordStore.open(broker.bootstrap, unique_topic("bridge-state"), sync_timeout_s=1.0)
    try:
        store.commit([config("a", 1)])
        broker.kill9()
        store.append([config("a", 2)])
        started = time.monotonic()
        with pytest.raises(StoreError, match="write failed"):
            store.sync()
        assert time.monotonic() - started < 5  # the send expires after sync_timeout_s
        with pytest.raises(StoreError, match="failed earlier"):
            store.append([config("a", 3)])
        with pytest.raises(StoreError, match="failed earlier"):
            store.load()
    finally:
        store.close()


# kafka-python 3.0.12 leaks the socket of every refused reconnect attempt (its sender thread keeps
# trying until the store closes the producer): their ResourceWarnings are expected here. They are
# reclaimed by the gc.collect() below, while still ignored, once nothing refers to them: not the
# scenario's frames (it has returned) and not kafka's log records with tracebacks (muted).
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_broker_crash_fails_sync_and_the_store_stays_failed(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.CRITICAL + 1, logger="kafka")
    broker = start_tansu(tmp_path)
    try:
        crash_scenario(broker)
    finally:
        broker.stop()
    gc.collect()
