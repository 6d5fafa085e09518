"""The config view read from the Connect config topic of the upstream cluster (docs/upstream.md).

Connect's ``KafkaConfigBackingStore`` keeps every connector's config in one single-partition,
compacted topic (``config.storage.topic``). Keys are strings, values are schemaless JSON
(``JsonConverter``, ``schemas.enable=false``):

==========================  ===========================================  ===============================
key                         value                                        effect on the view
==========================  ===========================================  ===============================
``connector-<name>``        ``{"properties": {...}}``; null = deleted    connector present / removed
``task-<name>-<n>``         ``{"properties": {...}}``                    buffered until the next commit
``commit-<name>``           ``{"tasks": N}``                             the connector now has N tasks
``target-state-<name>``     ``{"state": ..., "state.v2": ...}``          none (a stopped connector's
                                                                         tasks are committed as 0)
``tasks-fencing-<name>``,   (exactly-once, restarts, REST session key,   none
``restart-connector-*``,    dynamic log levels)
``session-key``,
``logger-cluster-*``
==========================  ===========================================  ===============================

The view is exactly what a Connect worker's ``ClusterConfigState`` hands its assignor:
``connectors()`` is every connector with a live config, and ``tasks(c)`` is the committed task
count, or none at all when the connector is *inconsistent* (a commit whose task configs were not
all read since the previous commit, which log compaction can cause) or has never been committed.
The record rules mirror ``KafkaConfigBackingStore.ConsumeCallback`` line by line, including its
quirks: a task record is parsed by splitting the key on ``-`` the way Java's ``String.split``
does; a commit for a connector with no config is ignored and wipes that connector's task state;
deleting a connector drops its task count and buffered task configs but not its inconsistent flag.

Offset: ``ConfigView.offset`` is Connect's ``ClusterConfigState.offset``, i.e. the offset of the
last config record read **plus one** (the consumer position, "the offset of the *next* record"),
and -1 before any record was read. That is the number workers put in their JoinGroup metadata and
the one the leader assigns against (``config_offset``), so the bridge's view compares equal to the
workers' own. It is *not* the topic's end offset: a trailing transaction marker (exactly-once
Connect writes its config records in transactions) or a record whose value is not valid JSON (which
Connect skips without advancing its offset) leaves the end offset higher.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from connect_bridge.bridge.stores.config_source import ViewCallback, ViewDelivery
from connect_bridge.bridge.stores.store_base import assign_partition_zero
from connect_bridge.state.model import ConfigView

__all__ = [
    "COMMIT_PREFIX",
    "CONNECTOR_PREFIX",
    "TASK_PREFIX",
    "ConfigTopicState",
    "ConfigTopicWatcher",
    "parse_config_records",
]

log = logging.getLogger(__name__)

CONNECTOR_PREFIX = "connector-"
TASK_PREFIX = "task-"
COMMIT_PREFIX = "commit-"
TARGET_STATE_PREFIX = "target-state-"
RESTART_PREFIX = "restart-connector-"
TASK_COUNT_PREFIX = "tasks-fencing-"
SESSION_KEY = "session-key"
LOGGER_PREFIX = "logger-cluster-"

_INT32_MAX = 2**31 - 1
DRAIN_MAX_RECORDS = 2000
_JAVA_INT = re.compile(r"\+?[0-9]+")  # Integer.parseInt; a "-" cannot survive the split

ConfigRecord = tuple[bytes | None, bytes | None, int]
"""(key, value, offset) of one config topic record, as the consumer hands it over."""


class _Undecodable(Exception):
    pass


def _json_value(value: bytes | None) -> Any:
    """What ``JsonConverter.toConnectData`` makes of the bytes: null for null, else the JSON."""
    if value is None:
        return None
    try:
        return json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _Undecodable(str(exc)) from None


def _java_split(key: str) -> list[str]:
    """``key.split("-")`` with Java semantics: trailing empty strings are dropped."""
    parts = key.split("-")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def parse_task_key(key: str) -> tuple[str, int] | None:
    """``task-<connector>-<n>`` -> (connector, n), as ``KafkaConfigBackingStore.parseTaskId``."""
    parts = _java_split(key)
    if len(parts) < 3 or not _JAVA_INT.fullmatch(parts[-1]):
        return None
    task = int(parts[-1])
    if task > _INT32_MAX:
        return None
    return "-".join(parts[1:-1]), task


def _task_count(value: Any) -> int | None:
    """Connect's ``intValue``: a JSON integer (not a bool, not a float) that fits a long."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if not -(2**63) <= value < 2**63:
        return None
    return value


@dataclass
class ConfigTopicState:
    """The part of Connect's config state that decides assignments, built record by record."""

    offset: int = -1
    connectors: set[str] = field(default_factory=set)
    task_counts: dict[str, int] = field(default_factory=dict)
    deferred: dict[str, set[int]] = field(default_factory=dict)
    """Task ids whose configs were read since the connector's last commit."""
    inconsistent: set[str] = field(default_factory=set)
    records: int = 0
    skipped: int = 0
    """Records ignored as malformed (each is logged)."""

    def apply(self, key: bytes | None, value: bytes | None, offset: int) -> None:
        """Apply one record read at ``offset``."""
        self.records += 1
        try:
            doc = _json_value(value)
        except _Undecodable as exc:
            # Connect logs "Failed to convert config data" and returns before advancing its offset.
            self._skip(key, offset, f"value is not JSON: {exc}")
            return
        self.offset = offset + 1
        if key is None:
            self._skip(key, offset, "null key")
            return
        name = key.decode("utf-8", errors="replace")
        if name.startswith(TARGET_STATE_PREFIX):
            return
        if name.startswith(CONNECTOR_PREFIX):
            self._connector(name[len(CONNECTOR_PREFIX) :], doc, offset)
        elif name.startswith(TASK_PREFIX):
            self._task(name, doc, offset)
        elif name.startswith(COMMIT_PREFIX):
            self._commit(name[len(COMMIT_PREFIX) :], doc, offset)
        elif (
            name.startswith(RESTART_PREFIX)
            or name.startswith(TASK_COUNT_PREFIX)
            or name == SESSION_KEY
            or name.startswith(LOGGER_PREFIX)
        ):
            return
        else:
            self._skip(key, offset, "unknown key")

    def _connector(self, connector: str, doc: Any, offset: int) -> None:
        if doc is None:
            self._remove(connector)
            return
        if not isinstance(doc, dict) or not isinstance(doc.get("properties"), dict):
            self._skip(CONNECTOR_PREFIX + connector, offset, "connector config without a 'properties' map")
            return
        self.connectors.add(connector)

    def _task(self, name: str, doc: Any, offset: int) -> None:
        parsed = parse_task_key(name)
        if parsed is None:
            self._skip(name, offset, "not a task config key")
            return
        if not isinstance(doc, dict) or not isinstance(doc.get("properties"), dict):
            self._skip(name, offset, "task config without a 'properties' map")
            return
        connector, task = parsed
        self.deferred.setdefault(connector, set()).add(task)

    def _commit(self, connector: str, doc: Any, offset: int) -> None:
        if connector not in self.connectors:
            # Deleted before its tasks were committed, and compaction removed both the config and
            # its tombstone: Connect forgets the connector's task state.
            self._remove(connector)
            return
        if not isinstance(doc, dict):
            self._skip(COMMIT_PREFIX + connector, offset, "task commit is not a JSON object")
            return
        count = _task_count(doc.get("tasks"))
        if count is None:
            self._skip(COMMIT_PREFIX + connector, offset, "task commit without an integer 'tasks'")
            return
        # (int) truncation of a long, as Connect's intValue; a negative count yields no tasks.
        count = ((count + 2**31) % 2**32) - 2**31
        deferred = self.deferred.pop(connector, set())
        if len(deferred) >= count and all(i in deferred for i in range(count)):
            self.inconsistent.discard(connector)
        else:
            self.inconsistent.add(connector)
        self.task_counts[connector] = count

    def _remove(self, connector: str) -> None:
        self.connectors.discard(connector)
        self.task_counts.pop(connector, None)
        self.deferred.pop(connector, None)

    def _skip(self, key: bytes | str | None, offset: int, why: str) -> None:
        self.skipped += 1
        log.warning("config topic record at offset %d with key %r ignored: %s", offset, key, why)

    def view(self) -> ConfigView:
        """The connectors and their task counts as Connect's assignors see them."""
        tasks = {
            c: 0 if c in self.inconsistent else max(0, self.task_counts.get(c, 0)) for c in self.connectors
        }
        return ConfigView.of(self.offset, tasks)


def parse_config_records(records: Iterable[ConfigRecord]) -> ConfigView:
    """The view after reading ``records`` ((key, value, offset), in offset order) from the start."""
    state = ConfigTopicState()
    for key, value, offset in records:
        state.apply(key, value, offset)
    return state.view()


class ConfigTopicWatcher(ViewDelivery):
    """Follows the Connect config topic and reports every new view (``ConfigViewWatcher``'s shape).

    A kafka-python consumer without a group assigns partition 0 of the topic, reads it from the
    beginning and then keeps polling. ``poll`` drains what is available and answers the new view;
    the first view is only answered once the reader has provably reached the end of the topic (an
    empty poll *and* the position at least the partition's end offset), so an unreachable broker or
    a slow first fetch never looks like a config topic without connectors. Later views are answered
    whenever a drain ends with a changed view.

    ``read_committed`` by default: exactly-once Connect writes the config topic in transactions and
    its workers then read committed records only; without transactions it makes no difference.
    """

    _logger = log

    def __init__(
        self,
        bootstrap: str | list[str],
        topic: str,
        poll_interval_ms: int = 1000,
        *,
        isolation_level: str = "read_committed",
        fetch_max_wait_ms: int = 100,
        drain_poll_ms: int = 300,
        max_drain_s: float = 10.0,
        client_id: str = "connect-bridge-config-reader",
        client_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(
            poll_interval_ms, f"config topic {topic!r} unreadable", f"config topic {topic!r} readable again"
        )
        if drain_poll_ms <= fetch_max_wait_ms:
            raise ValueError(
                "drain_poll_ms must exceed fetch_max_wait_ms (an empty poll must mean 'no more')"
            )
        self.bootstrap = bootstrap
        self.topic = topic
        self.isolation_level = isolation_level
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.drain_poll_ms = drain_poll_ms
        self.max_drain_s = max_drain_s
        self.client_id = client_id
        self.client_options = dict(client_options or {})
        """Extra kafka-python arguments: TLS/SASL towards the cluster (``UpstreamSecurity``)."""
        self.state = ConfigTopicState()
        self._consumer: Any = None
        self._tp: Any = None
        self._io_lock = threading.Lock()  # the consumer is not thread-safe: poll vs close
        self._caught_up = False

    # ------------------------------------------------------------------ blocking part
    def _open(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level=self.isolation_level,
            fetch_max_wait_ms=self.fetch_max_wait_ms,
            client_id=self.client_id,
            **self.client_options,
        )
        try:
            missing = LookupError(f"config topic {self.topic!r} does not exist")
            many = "config topic %r has %d partitions; Connect requires exactly 1, reading partition 0"
            tp = assign_partition_zero(consumer, self.topic, missing, log, many)
        except BaseException:
            consumer.close()
            raise
        self._consumer, self._tp = consumer, tp
        self.state = ConfigTopicState()
        self._caught_up = False

    def _drain(self) -> bool:
        """Read what is available; True when the reader provably reached the end of the topic."""
        consumer, tp = self._consumer, self._tp
        deadline = time.monotonic() + self.max_drain_s
        while time.monotonic() < deadline and not self._stopped:
            batches = consumer.poll(timeout_ms=self.drain_poll_ms, max_records=DRAIN_MAX_RECORDS)
            for records in batches.values():
                for r in records:
                    self.state.apply(r.key, r.value, r.offset)
            if batches:
                if self._caught_up and consumer.position(tp) >= consumer.end_offsets([tp])[tp]:
                    # Read to the end once already: reaching the end offset again is proof enough,
                    # so a refresh (a member is ahead of the view) costs one fetch, not the
                    # ``drain_poll_ms`` of an empty poll (Java workers rejoin in a loop meanwhile).
                    return True
                continue
            # Empty poll: several fetches came back empty. The end offset guards against a first
            # fetch that never happened (it is a lower bound on brokers that misreport it).
            end = consumer.end_offsets([tp])[tp]
            return consumer.position(tp) >= end
        return False

    def poll(self) -> ConfigView | None:
        """Read the topic once; the new view when it changed, else None. Never raises for broker problems.

        Blocking: ``watch`` runs it in a worker thread.
        """
        with self._io_lock:
            try:
                if self._consumer is None:
                    self._open()
                at_end = self._drain()
            except Exception as exc:
                self._report(f"{type(exc).__name__}: {exc}")
                self._close_consumer_locked()
                return None
        self._resolved()
        if at_end:
            self._caught_up = True
        if not self._caught_up:
            return None
        return self._changed(self.state.view())

    def read_to_end(self, timeout_s: float = 10.0) -> ConfigView:
        """Poll until the topic has been read to its end once; the view there (for tests and startup)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.poll()
            if self._caught_up and self._problem is None:
                return self.state.view()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"config topic {self.topic!r} not read to its end: {self._problem}")
            time.sleep(min(0.1, self.poll_interval_ms / 1000))

    def _close_consumer(self) -> None:
        with self._io_lock:
            self._close_consumer_locked()

    def _close_consumer_locked(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:
                log.debug("closing the config topic consumer failed", exc_info=True)

    def close(self) -> None:
        """Close the consumer (blocking). ``watch`` does this when it ends."""
        self._close_consumer()

    # ------------------------------------------------------------------ asyncio part
    async def watch(self, callback: ViewCallback) -> None:
        """Call ``callback(view)`` once the topic has been read to its end, then after every change.

        Runs until ``stop()`` or cancellation; closes the consumer when it ends. ``callback`` may be
        a plain or an async function; if it raises, the error is logged and the view still counts as
        delivered.
        """
        try:
            await self._poll_loop(callback)
        finally:
            # also on cancellation: a drain still running in its thread ends soon
            await asyncio.shield(asyncio.to_thread(self._close_consumer))
