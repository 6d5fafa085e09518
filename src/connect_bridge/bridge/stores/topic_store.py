"""The record store on a compacted topic of the upstream cluster (``FileRecordStore``'s interface).

When the bridge fronts a real Kafka cluster its state can live there instead of on a local disk, so
a replacement bridge on another host picks the groups up where the old one left them. The topic is
the file log's twin: one partition, ``cleanup.policy=compact``, key and value bytes exactly
``record_codec.encode_record``'s output (key = the compaction key), a tombstone is a null value.

* ``open`` creates the topic when it is missing (1 partition, compacted; an existing topic is used
  as is) and connects an idempotent ``acks=all`` producer.
* ``load`` reads partition 0 from the beginning to its end and compacts by key client-side (the
  broker compacts lazily, so the topic may still hold overwritten records and tombstones): the
  live records in the order of their latest write, which is what ``GroupCoordinator.replay``
  expects. The first ``load`` (or first ``append``) reads the topic; later calls answer from the
  in-memory index every ``append`` keeps current, like the file store.
* ``append`` hands the records to the producer (buffered, not durable); ``sync`` flushes and checks
  every send since the last ``sync``: when it returns, everything appended before it is
  acknowledged by all in-sync replicas. Its duration is the store's "fsync" latency
  (``last_fsync_s``, ``total_fsync_s``, ``fsyncs``).
* A failed send makes the store unusable (every later call raises ``StoreError``), the twin of the
  file store's failed fsync: later records may already be in the log after the missing one, so the
  only safe continuation is a restart that reloads the topic.

"The end" of the partition is the high watermark from the fetch responses (kafka-python's
``highwater``), falling back to ``ListOffsets`` only before the first fetch: some brokers (tansu
0.6) answer ``ListOffsets(latest)`` with the last *batch's* base offset + 1, which is too low as
soon as a producer batches several records.

Unlike the file store's ``flock`` nothing here stops two bridges from writing one topic; giving
each bridge its own topic is the operator's job (docs/upstream.md). Bridges that share the groups
use ``partitioned_store`` instead, which fences; it reuses this module's helpers (topic creation,
the producer settings, reading a partition to its end).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

from connect_bridge.bridge.stores.store_base import (
    EncodedRecord,
    LogStore,
    StoreError,
    assign_partition_zero,
    index_writes,
)

__all__ = [
    "StateTopic",
    "TopicRecordStore",
    "close_producer",
    "ensure_state_topic",
    "keep_requests_to_dead_coordinators",
    "keyed_records",
    "opening_state_topic",
    "read_partition_to_end",
    "state_consumer",
    "state_producer_config",
    "state_topic_partitions",
]

log = logging.getLogger(__name__)

DEFAULT_LOAD_TIMEOUT_S = 60.0
DEFAULT_SYNC_TIMEOUT_S = 30.0
STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact"}
STATE_CLIENT_ID = "connect-bridge-state"
LOADER_CLIENT_ID = "connect-bridge-state-loader"
LOAD_POLL_MS = 200
LOAD_POLL_MAX_RECORDS = 5000
LOAD_FETCH_MAX_WAIT_MS = 100
SYNC_FLUSH_MARGIN_S = 5
"""``sync`` waits this much longer than the delivery timeout, so a record that cannot be delivered
fails with its own error rather than with flush's generic timeout."""
MIN_DELIVERY_TIMEOUT_MS = 1000
MAX_REQUEST_TIMEOUT_MS = 30000
"""kafka-python's own default: a sync timeout above it still gives up on one request after 30 s."""
REQUESTS_PER_DELIVERY = 4
"""One request may take a quarter of the delivery timeout. kafka-python waits a whole request
timeout for a dead transaction coordinator to come back before it looks the coordinator up again;
with request timeout = delivery timeout, a killed coordinator expired every pending record and
stopped the bridge although a new coordinator took over within seconds."""

PendingSend = tuple[bytes, Any]
"""(key, kafka-python send future) of a record handed to the producer and not yet checked by sync."""


def ensure_state_topic(
    bootstrap: str | list[str],
    topic: str,
    *,
    partitions: int = 1,
    replication_factor: int = -1,
    configs: dict[str, str] | None = None,
    client_options: dict[str, Any] | None = None,
) -> bool:
    """Create the compacted state topic with ``partitions`` partitions unless it exists; True if it
    was created. An existing topic is left as it is (its partition count is the caller's check:
    ``state_topic_partitions``).

    ``replication_factor=-1`` takes the broker's ``default.replication.factor``.
    """
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=STATE_CLIENT_ID, **(client_options or {}))
    try:
        configs = {**STATE_TOPIC_CONFIGS, **(configs or {})}
        new = NewTopic(topic, partitions, replication_factor, topic_configs=configs)
        try:
            admin.create_topics([new])
        except TopicAlreadyExistsError:
            return False
        log.info("created state topic %r (%d partition(s), compacted)", topic, partitions)
        return True
    finally:
        admin.close()


class StateTopicOptions(TypedDict, total=False):
    """How a topic store reaches and makes its topic: the options both stores' ``open`` take, listed
    once (``opening_state_topic`` holds their defaults)."""

    create: bool
    """Create the compacted topic when it is missing (default True)."""
    replication_factor: int
    """Of a created topic; -1 (the default) takes the broker's ``default.replication.factor``."""
    topic_configs: dict[str, str] | None
    """More configs of a created topic (``cleanup.policy=compact`` is always set)."""
    load_timeout_s: float
    sync_timeout_s: float
    client_options: dict[str, Any] | None
    """More kafka-python settings for every client (security and the like)."""


@contextmanager
def opening_state_topic(
    bootstrap: str | list[str], topic: str, *, partitions: int, **options: Unpack[StateTopicOptions]
) -> Iterator[StateTopic]:
    """The first step of both topic stores' ``open``: the ``StateTopic`` they are built from, after
    creating the compacted topic unless it exists (when ``create``); the block is the store's own
    first call (connect the producer, count the partitions). A ``KafkaError`` of any of them is a
    ``StoreError`` naming the topic and the cluster, so a bridge that cannot reach its state stops
    with one line, whichever store it uses."""
    from kafka.errors import KafkaError

    state_topic = StateTopic(
        bootstrap,
        topic,
        options.get("load_timeout_s", DEFAULT_LOAD_TIMEOUT_S),
        options.get("sync_timeout_s", DEFAULT_SYNC_TIMEOUT_S),
        dict(options.get("client_options") or {}),
    )
    try:
        if options.get("create", True):
            ensure_state_topic(
                bootstrap,
                topic,
                partitions=partitions,
                replication_factor=options.get("replication_factor", -1),
                configs=options.get("topic_configs"),
                client_options=state_topic.client_options,
            )
        yield state_topic
    except KafkaError as exc:
        raise StoreError(f"state topic {topic!r} on {bootstrap}: {exc}") from exc


def state_topic_partitions(
    bootstrap: str | list[str], topic: str, client_options: dict[str, Any] | None = None
) -> int | None:
    """The partition count of ``topic``, None when it does not exist (asked without creating it,
    whatever the broker's ``auto.create.topics.enable``)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=STATE_CLIENT_ID, **(client_options or {}))
    try:
        described = admin.describe_topics([topic])
    finally:
        admin.close()
    for entry in described:
        if entry.get("name") == topic and not entry.get("error_code") and entry.get("partitions"):
            return len(entry["partitions"])
    return None


def state_consumer(bootstrap: str | list[str], options: dict[str, Any], where: str, **extra: Any) -> Any:
    """A group-less consumer that reads the state topic from its start (``extra``: more kafka-python
    settings, e.g. ``isolation_level``); a failure to connect is a ``StoreError`` naming ``where``."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    try:
        return KafkaConsumer(
            **{
                "bootstrap_servers": bootstrap,
                "client_id": LOADER_CLIENT_ID,
                "group_id": None,
                "enable_auto_commit": False,
                "auto_offset_reset": "earliest",
                "fetch_max_wait_ms": LOAD_FETCH_MAX_WAIT_MS,
                **options,
                **extra,
            }
        )
    except KafkaError as exc:
        raise StoreError(f"{where}: cannot connect to {bootstrap}: {exc}") from exc


def read_partition_to_end(
    consumer: Any,
    tp: Any,
    live: dict[bytes, bytes],
    end_offset: Callable[[], int],
    *,
    timeout_s: float,
    where: str,
) -> int:
    """Poll the assigned ``tp`` into ``live`` (compacted by key, ``index_writes``) until the
    consumer's position reaches ``end_offset()``, asked again after every poll; the number of
    records read. ``StoreError`` when the end is not reached within ``timeout_s``.

    Which offset is "the end" is the caller's: the high watermark for the single-partition store
    (module docstring), the last stable offset for a ``read_committed`` reader, whose position
    never passes an open transaction.
    """
    deadline = time.monotonic() + timeout_s
    read = 0
    while True:
        end = end_offset()
        if consumer.position(tp) >= end:
            return read
        if time.monotonic() >= deadline:
            raise StoreError(
                f"{where}: partition {tp.partition} not read to its end ({end}) within "
                f"{timeout_s:.0f}s (at offset {consumer.position(tp)})"
            )
        for records in consumer.poll(timeout_ms=LOAD_POLL_MS, max_records=LOAD_POLL_MAX_RECORDS).values():
            read += len(records)
            index_writes(live, keyed_records(records, where))


def keyed_records(records: list[Any], where: str) -> list[EncodedRecord]:
    """(key, value) of consumed records; one without a key is not ours and is skipped, logged."""
    out = []
    for r in records:
        if r.key is None:
            log.warning("%s: ignoring a record without key at offset %d", where, r.offset)
            continue
        out.append((r.key, r.value))
    return out


@dataclass(frozen=True)
class StateTopic:
    """The state topic a store keeps its records on and how its clients reach it. Both topic stores
    (``TopicRecordStore``, one partition; ``partitioned_store``'s, several) are built from these
    settings and open every consumer and producer through them, so the two cannot drift in how
    they connect, time out or close."""

    bootstrap: str | list[str]
    topic: str
    load_timeout_s: float
    """How long reading the topic (or a partition) to its end may take."""
    sync_timeout_s: float
    """How long a send may go unacknowledged before the store fails."""
    client_options: dict[str, Any]
    """More kafka-python settings for every client (security and the like)."""

    @property
    def where(self) -> str:
        """How errors and logs name the topic."""
        return f"state topic {self.topic!r}"

    def consumer(self, **extra: Any) -> Any:
        """A group-less consumer reading the topic from its start (``state_consumer``)."""
        return state_consumer(self.bootstrap, self.client_options, self.where, **extra)

    def producer(self, **extra: Any) -> Any:
        """An idempotent ``acks=all`` producer of the topic whose sends fail after the sync timeout
        (``state_producer_config``); ``extra``: more kafka-python settings (a transactional id)."""
        from kafka import KafkaProducer

        producer = KafkaProducer(
            **{**state_producer_config(self.bootstrap, self.sync_timeout_s, self.client_options), **extra}
        )
        if extra.get("transactional_id") is not None:
            keep_requests_to_dead_coordinators(producer)
        return producer

    def read_to_end(self, consumer: Any, tp: Any, live: dict[bytes, bytes], end: Callable[[], int]) -> int:
        """``read_partition_to_end`` within the load timeout; the number of records read."""
        return read_partition_to_end(consumer, tp, live, end, timeout_s=self.load_timeout_s, where=self.where)

    def close_producer(self, producer: Any) -> None:
        """``close_producer`` within the sync timeout. Never raises."""
        close_producer(producer, self.sync_timeout_s, self.where)


class TopicRecordStore(LogStore[list[PendingSend]]):
    """The bridge's records on a compacted topic. Use ``open``; the constructor is internal.

    The lifecycle, the failure state and the locking are ``LogStore``'s (the file store's twin);
    this class is the producer and the reader. ``_pending`` holds the sends not yet checked by a
    sync and is guarded by ``_lock``.
    """

    _WRITE_ERRORS = (Exception,)  # kafka-python raises its own errors and plain ones from send()

    def __init__(self, state_topic: StateTopic, producer: Any) -> None:
        super().__init__(state_topic.where)
        self.state_topic = state_topic
        self._producer: Any = producer
        self._pending: list[PendingSend] = []
        self.records_read = 0

    @classmethod
    def open(
        cls, bootstrap: str | list[str], topic: str, **options: Unpack[StateTopicOptions]
    ) -> TopicRecordStore:
        """Create the topic if needed (``create``) and connect the producer."""
        with opening_state_topic(bootstrap, topic, partitions=1, **options) as state_topic:
            producer = state_topic.producer()
        return cls(state_topic, producer)

    # ------------------------------------------------------------------ reading
    def _read_log(self) -> dict[bytes, bytes]:
        """Read partition 0 from the beginning to the end; latest value per key, tombstones dropped."""
        from kafka.errors import KafkaError

        state_topic = self.state_topic
        consumer = state_topic.consumer()
        live: dict[bytes, bytes] = {}
        try:
            missing = StoreError(f"{self.where} does not exist on {state_topic.bootstrap}")
            many = "state topic %r has %d partitions; only partition 0 is used"
            tp = assign_partition_zero(consumer, state_topic.topic, missing, log, many)

            def end() -> int:  # the module docstring's "the end"
                highwater = consumer.highwater(tp)
                return highwater if highwater is not None else consumer.end_offsets([tp])[tp]

            self.records_read += state_topic.read_to_end(consumer, tp, live, end)
        except KafkaError as exc:
            raise StoreError(f"{self.where}: read failed: {exc}") from exc
        finally:
            consumer.close()
        log.info("%s: %d live records from %d read", self.where, len(live), self.records_read)
        return live

    # ------------------------------------------------------------------ writing
    def _write(self, encoded: list[EncodedRecord]) -> None:
        """Hand the records to the producer."""
        for key, value in encoded:
            future = self._producer.send(self.state_topic.topic, key=key, value=value, partition=0)
            self._pending.append((key, future))

    def _begin_sync(self) -> list[PendingSend]:
        self._check_usable()
        pending, self._pending = self._pending, []
        return pending

    def _finish_sync(self, handoff: list[PendingSend]) -> None:
        """Flush the producer and check every send since the last sync: each must be acknowledged."""
        try:
            # Records expire after sync_timeout_s (delivery timeout); see SYNC_FLUSH_MARGIN_S.
            self._producer.flush(timeout=self.state_topic.sync_timeout_s + SYNC_FLUSH_MARGIN_S)
        except Exception as exc:
            self._fail_unlocked(exc)
        for key, future in handoff:
            if not future.is_done:
                self._fail_unlocked(TimeoutError(f"send of key {key!r} not acknowledged after flush"))
            if future.failed():
                self._fail_unlocked(future.exception)

    # ------------------------------------------------------------------ lifecycle
    def _unsynced(self) -> bool:
        return bool(self._pending)

    def _flush_on_close(self) -> None:
        self.sync()

    def _release(self) -> None:
        self.state_topic.close_producer(self._producer)


def close_producer(producer: Any, timeout_s: float, where: str) -> None:
    """Close a state producer within ``timeout_s``. Never raises.

    kafka-python's close() flushes first and, when that times out, raises before stopping its
    sender thread (which would then retry forever): stop it ourselves.
    """
    try:
        producer.close(timeout=timeout_s)
    except Exception:
        log.warning("%s: producer did not close cleanly", where, exc_info=True)
        sender = getattr(producer, "_sender", None)
        if sender is not None:
            sender.force_close()


def keep_requests_to_dead_coordinators(producer: Any) -> None:
    """Make a transactional kafka-python producer retry a request whose coordinator is down.

    kafka-python 3.0.12's sender asks ``await_ready(coordinator)`` before a transactional request
    (AddPartitionsToTxn, EndTxn). That call raises when the coordinator's broker is down; the sender
    then looks the coordinator up again but, having already noted the dead node as the target,
    never re-enqueues the request: the partition is never added to the transaction, its records are
    never drained and expire after the delivery timeout, and the bridge stopped on a broker crash
    that Kafka survives within seconds (a new transaction coordinator is elected). Answering False
    instead of raising takes the sender's own path for a coordinator that is not ready: look it up
    and retry the request. Another kafka-python (no such client) is left alone.
    """
    client = getattr(getattr(producer, "_sender", None), "_client", None)
    original = getattr(client, "await_ready", None)
    if original is None:
        return
    from kafka.errors import KafkaConnectionError

    def await_ready(node_id: Any, timeout_ms: int = MAX_REQUEST_TIMEOUT_MS) -> bool:
        try:
            return bool(original(node_id, timeout_ms=timeout_ms))
        except KafkaConnectionError:
            return False

    client.await_ready = await_ready


def state_producer_config(
    bootstrap: str | list[str], sync_timeout_s: float, options: dict[str, Any]
) -> dict[str, Any]:
    """kafka-python settings of a state producer: idempotent, ``acks=all``, sends that fail after
    ``sync_timeout_s``; ``options`` (security and the like) win.

    A send not acknowledged within sync_timeout_s fails (and with it the store) instead of being
    retried for kafka-python's default two minutes: sync's flush then returns in time and close()
    is not left with undeliverable records. Within that time a request is retried (against a new
    leader or transaction coordinator) after a quarter of it (``REQUESTS_PER_DELIVERY``).
    """
    delivery_ms = max(MIN_DELIVERY_TIMEOUT_MS, int(sync_timeout_s * 1000))
    return {
        "bootstrap_servers": bootstrap,
        "client_id": STATE_CLIENT_ID,
        "acks": "all",
        "enable_idempotence": True,  # retries never duplicate or reorder records
        "linger_ms": 0,
        "delivery_timeout_ms": delivery_ms,
        "request_timeout_ms": min(
            MAX_REQUEST_TIMEOUT_MS, max(MIN_DELIVERY_TIMEOUT_MS, delivery_ms // REQUESTS_PER_DELIVERY)
        ),
        **options,
    }
