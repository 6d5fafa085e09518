"""The config view from the Connect config topic: Connect's record rules, then live against tansu."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from connect_bridge.bridge.stores.config_topic import (
    ConfigTopicState,
    ConfigTopicWatcher,
    parse_config_records,
    parse_task_key,
)
from connect_bridge.state.model import ConfigView
from tansu import TansuBroker, tansu, unique_topic

__all__ = ["tansu"]  # the session broker fixture, shared through tests/tansu.py


# --------------------------------------------------------------------------- Connect-format records
def connector(name: str, props: dict[str, str] | None = None) -> tuple[bytes, bytes]:
    return f"connector-{name}".encode(), json.dumps(
        {"properties": props or {"connector.class": "X"}}
    ).encode()


def deleted(name: str) -> tuple[bytes, None]:
    return f"connector-{name}".encode(), None


def task(name: str, n: int) -> tuple[bytes, bytes]:
    return f"task-{name}-{n}".encode(), json.dumps({"properties": {"task.class": "T"}}).encode()


def commit(name: str, tasks: Any) -> tuple[bytes, bytes]:
    return f"commit-{name}".encode(), json.dumps({"tasks": tasks}).encode()


def tasks_and_commit(name: str, n: int) -> list[tuple[bytes, bytes | None]]:
    """What the leader writes to reconfigure a connector: every task config, then the commit."""
    return [task(name, i) for i in range(n)] + [commit(name, n)]


def at(records: list[tuple[bytes | None, bytes | None]], start: int = 0) -> list[tuple[Any, Any, int]]:
    return [(k, v, start + i) for i, (k, v) in enumerate(records)]


def view(records: list[tuple[bytes | None, bytes | None]]) -> ConfigView:
    return parse_config_records(at(records))


# --------------------------------------------------------------------------- parsing
def test_empty_topic_is_offset_minus_one_and_no_connectors() -> None:
    assert parse_config_records([]) == ConfigView(-1, ())


def test_connector_without_commit_has_zero_tasks_and_offset_is_next_record() -> None:
    assert view([connector("a")]) == ConfigView.of(1, {"a": 0})


def test_commit_sets_task_count() -> None:
    records = [connector("a"), *tasks_and_commit("a", 3), connector("b"), *tasks_and_commit("b", 1)]
    assert view(records) == ConfigView.of(len(records), {"a": 3, "b": 1})


def test_latest_commit_wins_and_connector_config_update_keeps_tasks() -> None:
    records = [
        connector("a"),
        *tasks_and_commit("a", 3),
        *tasks_and_commit("a", 1),
        connector("a", {"x": "1"}),
    ]
    assert view(records) == ConfigView.of(len(records), {"a": 1})


def test_deleted_connector_disappears_and_recreated_starts_at_zero_tasks() -> None:
    records = [connector("a"), *tasks_and_commit("a", 2), connector("b"), deleted("a")]
    assert view(records) == ConfigView.of(len(records), {"b": 0})
    records += [connector("a")]
    assert view(records) == ConfigView.of(len(records), {"a": 0, "b": 0})


def test_commit_without_all_task_configs_is_inconsistent_zero_tasks_until_a_complete_one() -> None:
    # Compaction removed task-a-0 of the first commit: Connect's ClusterConfigState.tasks() is empty.
    records = [connector("a"), task("a", 1), commit("a", 2)]
    assert view(records).connector_tasks == {"a": 0}
    records += tasks_and_commit("a", 2)
    assert view(records).connector_tasks == {"a": 2}


def test_extra_task_configs_beyond_the_count_are_consistent() -> None:
    # 2 -> 1 tasks after compaction: task-a-1 of the old generation is still there.
    records = [connector("a"), task("a", 1), task("a", 0), commit("a", 1)]
    assert view(records).connector_tasks == {"a": 1}


def test_task_configs_only_count_since_the_previous_commit() -> None:
    records = [connector("a"), *tasks_and_commit("a", 2), task("a", 1), commit("a", 2)]
    assert view(records).connector_tasks == {"a": 0}  # task-a-0 of this generation missing


def test_commit_for_unknown_connector_is_ignored_and_forgets_its_tasks() -> None:
    records = [*tasks_and_commit("ghost", 2), connector("ghost")]
    assert view(records).connector_tasks == {"ghost": 0}


def test_zero_task_commit_stopped_connector() -> None:
    records = [
        connector("a"),
        *tasks_and_commit("a", 2),
        (b"target-state-a", b'{"state":"STOPPED"}'),
        commit("a", 0),
    ]
    assert view(records).connector_tasks == {"a": 0}


def test_other_record_types_only_advance_the_offset() -> None:
    records = [
        connector("a"),
        *tasks_and_commit("a", 1),
        (b"target-state-a", json.dumps({"state": "PAUSED", "state.v2": "PAUSED"}).encode()),
        (
            b"session-key",
            json.dumps({"key": "AA==", "algorithm": "HmacSHA256", "creation-timestamp": 1}).encode(),
        ),
        (b"tasks-fencing-a", json.dumps({"task-count": 1}).encode()),
        (b"restart-connector-a", json.dumps({"only-failed": False, "include-tasks": True}).encode()),
        (b"logger-cluster-org.apache", json.dumps({"level": "DEBUG"}).encode()),
        (b"target-state-a", None),
        (b"something-else", b"{}"),
    ]
    assert view(records) == ConfigView.of(len(records), {"a": 1})


def test_connector_names_with_dashes() -> None:
    records = [connector("my-conn-1"), *tasks_and_commit("my-conn-1", 2)]
    assert view(records).connector_tasks == {"my-conn-1": 2}
    assert parse_task_key("task-my-conn-1-12") == ("my-conn-1", 12)
    assert parse_task_key("task-a-1-") == ("a", 1)  # Java's split drops trailing empty strings
    assert parse_task_key("task-a") is None
    assert parse_task_key("task-a-x") is None
    assert parse_task_key("task-a-99999999999") is None


@pytest.mark.parametrize(
    ("record", "advances"),
    [
        ((b"connector-a", b"not json"), False),  # Connect skips it without advancing its offset
        ((b"connector-a", b"\xff\xfe"), False),
        ((b"connector-a", b'{"config": {}}'), True),
        ((b"connector-a", b'"text"'), True),
        ((b"task-a-0", None), True),
        ((b"task-a-0", b'{"properties": 3}'), True),
        ((b"commit-a", b'{"tasks": "2"}'), True),
        ((b"commit-a", b'{"tasks": 2.0}'), True),
        ((b"commit-a", b'{"tasks": true}'), True),
        ((b"commit-a", b"[]"), True),
        ((None, b"{}"), True),
    ],
)
def test_malformed_records_are_skipped(record: tuple[bytes | None, bytes | None], advances: bool) -> None:
    base = [connector("a"), *tasks_and_commit("a", 1)]
    state = ConfigTopicState()
    for k, v, off in at([*base, record]):
        state.apply(k, v, off)
    assert state.view().connector_tasks == {"a": 1}
    assert state.view().offset == (len(base) + 1 if advances else len(base))
    assert state.skipped == 1


def test_offset_counts_from_the_records_own_offsets() -> None:
    # A compacted topic has gaps; the view offset is the last record's offset + 1.
    records = [(*connector("a"), 7), (*commit("a", 0), 42)]
    assert parse_config_records(records) == ConfigView.of(43, {"a": 0})


# --------------------------------------------------------------------------- live, against tansu
def create_topic(broker: TansuBroker, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    finally:
        admin.close()


def produce(broker: TansuBroker, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    try:
        futures = [producer.send(topic, key=k, value=v) for k, v in records]
        producer.flush()
        for f in futures:
            f.get(timeout=5)
    finally:
        producer.close()


def test_read_to_end_against_tansu(tansu: TansuBroker) -> None:
    topic = unique_topic("connect-configs")
    create_topic(tansu, topic)
    records = [connector("a"), *tasks_and_commit("a", 4), connector("b"), deleted("b")]
    produce(tansu, topic, records)  # one producer batch: the case tansu's ListOffsets gets wrong
    watcher = ConfigTopicWatcher(tansu.bootstrap, topic, poll_interval_ms=50)
    try:
        assert watcher.read_to_end() == ConfigView.of(len(records), {"a": 4})
    finally:
        watcher.close()


def test_empty_topic_view_and_missing_topic_gives_no_view(tansu: TansuBroker) -> None:
    topic = unique_topic("connect-configs")
    create_topic(tansu, topic)
    watcher = ConfigTopicWatcher(tansu.bootstrap, topic, poll_interval_ms=50)
    try:
        assert watcher.read_to_end() == ConfigView(-1, ())
    finally:
        watcher.close()
    missing = ConfigTopicWatcher(tansu.bootstrap, unique_topic("absent"), poll_interval_ms=50)
    try:
        assert missing.poll() is None and missing.current is None
    finally:
        missing.close()


def test_watcher_reports_new_connector_and_task_commit(tansu: TansuBroker) -> None:
    topic = unique_topic("connect-configs")
    create_topic(tansu, topic)
    produce(tansu, topic, [connector("a"), *tasks_and_commit("a", 1)])
    seen: list[ConfigView] = []

    async def run() -> None:
        watcher = ConfigTopicWatcher(tansu.bootstrap, topic, poll_interval_ms=50)
        got = asyncio.Event()

        async def on_view(v: ConfigView) -> None:
            seen.append(v)
            got.set()

        async def next_view() -> ConfigView:
            await asyncio.wait_for(got.wait(), 10)
            got.clear()
            return seen[-1]

        task = asyncio.create_task(watcher.watch(on_view))
        try:
            assert await next_view() == ConfigView.of(3, {"a": 1})
            await asyncio.to_thread(produce, tansu, topic, [connector("b")])
            assert await next_view() == ConfigView.of(4, {"a": 1, "b": 0})
            await asyncio.to_thread(produce, tansu, topic, tasks_and_commit("b", 2))
            # Task configs alone change nothing but the offset; the commit brings the count.
            while (v := await next_view()).connector_tasks != {"a": 1, "b": 2}:
                assert v.connector_tasks == {"a": 1, "b": 0}
            assert v.offset == 7
        finally:
            watcher.stop()
            await asyncio.wait_for(task, 10)
        assert watcher.current == ConfigView.of(7, {"a": 1, "b": 2})

    asyncio.run(run())
    assert [v.offset for v in seen] == sorted({v.offset for v in seen})  # no view twice
