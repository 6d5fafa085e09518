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
each bridge its own topic is the operator's job (docs/upstream.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, NoReturn, Self

from connect_bridge.bridge.store import StoreError
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record

__all__ = ["TopicRecordStore", "ensure_state_topic"]

log = logging.getLogger(__name__)

DEFAULT_LOAD_TIMEOUT_S = 60.0
DEFAULT_SYNC_TIMEOUT_S = 30.0
STATE_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


def ensure_state_topic(
    bootstrap: str | list[str],
    topic: str,
    *,
    replication_factor: int = -1,
    configs: dict[str, str] | None = None,
    client_options: dict[str, Any] | None = None,
) -> bool:
    """Create the compacted single-partition state topic unless it exists; True if it was created.

    ``replication_factor=-1`` takes the broker's ``default.replication.factor``.
    """
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="connect-bridge-state", **(client_options or {})
    )
    try:
        new = NewTopic(topic, 1, replication_factor, topic_configs={**STATE_TOPIC_CONFIGS, **(configs or {})})
        try:
            admin.create_topics([new])
        except TopicAlreadyExistsError:
            return False
        log.info("created state topic %r (1 partition, compacted)", topic)
        return True
    finally:
        admin.close()


class TopicRecordStore:
    """The bridge's records on a compacted topic. Use ``open``; the constructor is internal.

    Thread-safe in the same way as ``FileRecordStore``: ``append`` runs on the event loop while
    ``sync`` runs in a worker thread. ``_lock`` guards the index and the list of unchecked sends and
    is held only briefly; ``_sync_lock`` serialises syncs (and close).
    """

    def __init__(
        self,
        bootstrap: str | list[str],
        topic: str,
        producer: Any,
        *,
        load_timeout_s: float,
        sync_timeout_s: float,
        client_options: dict[str, Any],
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.load_timeout_s = load_timeout_s
        self.sync_timeout_s = sync_timeout_s
        self._client_options = client_options
        self._producer: Any = producer
        self._lock = threading.RLock()
        self._sync_lock = threading.RLock()
        self._pending: list[tuple[bytes, Any]] = []  # (key, send future) not yet checked by sync
        self._live: dict[bytes, bytes] | None = None  # None until the topic was read
        self._failed: BaseException | None = None
        self._closed = False
        self.records_read = 0
        self.records_written = 0
        self.fsyncs = 0
        self.last_fsync_s = 0.0
        self.total_fsync_s = 0.0
        self.compactions = 0  # the broker compacts; kept for interface parity

    @classmethod
    def open(
        cls,
        bootstrap: str | list[str],
        topic: str,
        *,
        create: bool = True,
        replication_factor: int = -1,
        topic_configs: dict[str, str] | None = None,
        load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S,
        sync_timeout_s: float = DEFAULT_SYNC_TIMEOUT_S,
        client_options: dict[str, Any] | None = None,
    ) -> TopicRecordStore:
        """Create the topic if needed (``create``) and connect the producer.

        ``client_options`` go to every kafka-python client (security settings and the like).
        """
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        options = dict(client_options or {})
        try:
            if create:
                ensure_state_topic(
                    bootstrap,
                    topic,
                    replication_factor=replication_factor,
                    configs=topic_configs,
                    client_options=options,
                )
            # A send not acknowledged within sync_timeout_s fails (and with it the store) instead of
            # being retried for kafka-python's default two minutes: sync's flush then returns in time
            # and close() is not left with undeliverable records.
            delivery_ms = max(1000, int(sync_timeout_s * 1000))
            producer = KafkaProducer(
                **{
                    "bootstrap_servers": bootstrap,
                    "client_id": "connect-bridge-state",
                    "acks": "all",
                    "enable_idempotence": True,  # retries never duplicate or reorder records
                    "linger_ms": 0,
                    "delivery_timeout_ms": delivery_ms,
                    "request_timeout_ms": min(30000, delivery_ms),
                    **options,
                }
            )
        except KafkaError as exc:
            raise StoreError(f"state topic {topic!r} on {bootstrap}: {exc}") from exc
        return cls(
            bootstrap,
            topic,
            producer,
            load_timeout_s=load_timeout_s,
            sync_timeout_s=sync_timeout_s,
            client_options=options,
        )

    # ------------------------------------------------------------------ reading
    def load(self) -> list[Record]:
        """The live records (latest per key, no tombstones) in the order of their latest write."""
        with self._lock:
            live = self._ensure_loaded()
            items = list(live.items())
        out = []
        for key, value in items:
            try:
                out.append(decode_record(key, value))
            except (CodecError, ValueError, KeyError) as exc:
                raise StoreError(
                    f"state topic {self.topic!r}: undecodable record with key {key!r}: {exc}"
                ) from exc
        return out

    def _ensure_loaded(self) -> dict[bytes, bytes]:
        self._check_usable()
        if self._live is None:
            self._live = self._read_topic()
        return self._live

    def _read_topic(self) -> dict[bytes, bytes]:
        """Read partition 0 from the beginning to the end; latest value per key, tombstones dropped."""
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError

        try:
            consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap,
                client_id="connect-bridge-state-loader",
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=100,
                **self._client_options,
            )
        except KafkaError as exc:
            raise StoreError(
                f"state topic {self.topic!r}: cannot connect to {self.bootstrap}: {exc}"
            ) from exc
        live: dict[bytes, bytes] = {}
        try:
            partitions = consumer.partitions_for_topic(self.topic)
            if not partitions:
                raise StoreError(f"state topic {self.topic!r} does not exist on {self.bootstrap}")
            if len(partitions) > 1:
                log.warning(
                    "state topic %r has %d partitions; only partition 0 is used", self.topic, len(partitions)
                )
            tp = TopicPartition(self.topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            deadline = time.monotonic() + self.load_timeout_s
            while True:
                highwater = consumer.highwater(tp)
                end = highwater if highwater is not None else consumer.end_offsets([tp])[tp]
                if consumer.position(tp) >= end:
                    break
                if time.monotonic() >= deadline:
                    raise StoreError(
                        f"state topic {self.topic!r}: not read to its end ({end}) within "
                        f"{self.load_timeout_s:.0f}s (at offset {consumer.position(tp)})"
                    )
                for records in consumer.poll(timeout_ms=200, max_records=5000).values():
                    for r in records:
                        self.records_read += 1
                        if r.key is None:
                            log.warning(
                                "state topic %r: ignoring a record without key at offset %d",
                                self.topic,
                                r.offset,
                            )
                            continue
                        live.pop(r.key, None)
                        if r.value is not None:
                            live[r.key] = r.value
        except KafkaError as exc:
            raise StoreError(f"state topic {self.topic!r}: read failed: {exc}") from exc
        finally:
            consumer.close()
        log.info("state topic %r: %d live records from %d read", self.topic, len(live), self.records_read)
        return live

    # ------------------------------------------------------------------ writing
    def append(self, records: Sequence[Record]) -> None:
        """Hand the records to the producer. Not durable until ``sync``."""
        encoded = [encode_record(r) for r in records]
        with self._lock:
            live = self._ensure_loaded()
            if not encoded:
                return
            try:
                for key, value in encoded:
                    future = self._producer.send(self.topic, key=key, value=value, partition=0)
                    self._pending.append((key, future))
            except Exception as exc:
                self._fail(exc)
            self.records_written += len(encoded)
            for key, value in encoded:
                live.pop(key, None)
                if value is not None:
                    live[key] = value

    def sync(self) -> None:
        """Flush the producer; ``StoreError`` (and failed for good) if a send since the last sync failed."""
        with self._sync_lock:
            start = time.perf_counter()
            with self._lock:
                self._check_usable()
                pending, self._pending = self._pending, []
            try:
                # Records expire after sync_timeout_s (delivery timeout); the margin lets them fail
                # with their own error rather than flush's generic timeout.
                self._producer.flush(timeout=self.sync_timeout_s + 5)
            except Exception as exc:
                with self._lock:
                    self._fail(exc)
            for key, future in pending:
                if not future.is_done:
                    with self._lock:
                        self._fail(TimeoutError(f"send of key {key!r} not acknowledged after flush"))
                if future.failed():
                    with self._lock:
                        self._fail(future.exception)
            elapsed = time.perf_counter() - start
            self.fsyncs += 1
            self.last_fsync_s = elapsed
            self.total_fsync_s += elapsed

    def commit(self, records: Sequence[Record]) -> None:
        """``append`` + ``sync``: the records are acknowledged when this returns."""
        self.append(records)
        self.sync()

    def maybe_compact(self) -> bool:
        """The broker compacts the topic; nothing to do here."""
        return False

    @property
    def live_count(self) -> int:
        """Keys whose latest record is not a tombstone (0 before the topic was read)."""
        return len(self._live or {})

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Sync anything appended and close the producer. Idempotent."""
        with self._sync_lock:
            if self._closed:
                return
            try:
                if self._failed is None and self._pending:
                    self.sync()
            finally:
                self._closed = True
                try:
                    self._producer.close(timeout=self.sync_timeout_s)
                except Exception:
                    # kafka-python's close() flushes first and, when that times out, raises before
                    # stopping its sender thread (which would then retry forever): stop it ourselves.
                    log.warning("state topic %r: producer did not close cleanly", self.topic, exc_info=True)
                    sender = getattr(self._producer, "_sender", None)
                    if sender is not None:
                        sender.force_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_usable(self) -> None:
        if self._closed:
            raise StoreError(f"state topic {self.topic!r}: store is closed")
        if self._failed is not None:
            raise StoreError(
                f"state topic {self.topic!r}: store failed earlier: {self._failed}"
            ) from self._failed

    def _fail(self, exc: BaseException | None) -> NoReturn:
        self._failed = exc or StoreError("unknown send failure")
        raise StoreError(f"state topic {self.topic!r}: write failed: {self._failed}") from exc
