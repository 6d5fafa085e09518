"""The tansu test broker works for plain kafka-python clients: create a topic, produce, consume."""

from __future__ import annotations

from tansu import TansuBroker, consume_partition, create_and_produce, start_tansu, tansu, unique_topic

__all__ = ["tansu"]  # the session broker fixture, shared through tests/tansu.py


def test_produce_consume_round_trip(tansu: TansuBroker) -> None:
    topic = unique_topic("roundtrip")
    records = [(b"k%d" % i, b"v%d" % i) for i in range(3)]
    records.append((b"k1", None))  # a tombstone
    assert create_and_produce(tansu.bootstrap, topic, records, timeout_s=5) == [0, 1, 2, 3]

    assert consume_partition(tansu.bootstrap, topic, 4) == [
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
        assert not broker.running and broker.process.returncode == -9
    finally:
        broker.stop()  # idempotent
    second = start_tansu(tmp_path)
    second.stop()
    assert not second.running
    assert second.process.returncode == 0  # SIGTERM: a clean exit, not stop()'s SIGKILL fallback
