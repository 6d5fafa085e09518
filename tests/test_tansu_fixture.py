"""The tansu test broker works for plain kafka-python clients: create a topic, produce, consume."""

from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from tansu import TansuBroker, start_tansu, tansu, unique_topic

__all__ = ["tansu"]  # the session broker fixture, shared through tests/tansu.py


def consume_all(bootstrap: str, topic: str, count: int, timeout_s: float = 10.0) -> list[tuple]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list[tuple] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(200).values():
                got.extend((r.offset, r.key, r.value) for r in records)
        return got
    finally:
        consumer.close()


def test_produce_consume_round_trip(tansu: TansuBroker) -> None:
    topic = unique_topic("roundtrip")
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        assert topic in admin.list_topics()
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, acks="all")
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i) for i in range(3)]
        futures.append(producer.send(topic, key=b"k1", value=None))  # a tombstone
        producer.flush()
        offsets = [f.get(timeout=5).offset for f in futures]
    finally:
        producer.close()
    assert offsets == [0, 1, 2, 3]

    assert consume_all(tansu.bootstrap, topic, 4) == [
        (0, b"k0", b"v0"),
        (1, b"k1", b"v1"),
        (2, b"k2", b"v2"),
        (3, b"k1", None),
    ]


def test_own_broker_stop_and_kill9(tmp_path) -> None:
    broker = start_tansu(tmp_path)
    try:
        assert broker.running and broker.bootstrap == f"127.0.0.1:{broker.port}"
        broker.kill9()
        assert not broker.running
    finally:
        broker.stop()  # idempotent
    second = start_tansu(tmp_path)
    second.stop()
    assert not second.running
    assert second.process.returncode is not None
