"""The record store of several bridges: a partitioned state topic, one transactional writer per partition.

Several bridges share the groups the way Kafka's brokers share ``__consumer_offsets``: a group's
records live in partition ``partitioning.partition_for(group_id, partitions)`` of one compacted
topic, and the bridge that holds a partition (the HA membership assigns it) is its only writer.

* ``open`` creates the topic when it is missing (``partitions`` partitions, compacted). An existing
  topic with another partition count is refused: re-partitioning would move groups to other
  partitions, where nobody would find their records (docs/upstream.md).
* ``acquire(p)`` makes this store the writer of ``p``. A transactional producer with
  ``transactional.id = f"{prefix}-{p}"`` runs ``init_transactions()``, which fences every earlier
  producer of that id (the old owner, even a paused one) and completes or aborts its open
  transaction; only then the partition is read from its start to its last stable offset with
  ``isolation_level=read_committed`` and compacted by key client-side (``index_writes``). So what
  a new owner loads is exactly what the old owner committed, never an unfinished write of it.
* ``append`` (on the event loop) routes each record to its group's partition and only buffers it;
  ``sync`` (in a worker thread) writes each partition's buffer in one transaction of that
  partition's producer. A sync that finds a producer fenced (another bridge acquired the
  partition) releases that partition and returns it: its records are not durable and its groups
  are no longer ours. Any other failure puts the store in the failure state for good, like
  ``store_base.LogStore`` (both keep ``store_base.ExternalStore``'s): later records may already
  be in the log after a missing one.
* ``release(p)`` drops what is buffered for ``p``, its index and its producer.

Locking: ``_lock`` guards the ownerships (buffers, indexes, the held map) and is held only briefly;
every producer call runs outside it, in ``sync``, ``acquire``, ``release`` or ``close``, never in
``append``. ``_sync_lock`` serialises syncs and close. An ``_Ownership`` is one tenure of a
partition: a sync or an acquire acts on the tenure it started with and changes the held map only
if that tenure is still current, so a release (or a re-acquire) that happens meanwhile is never
undone. A tenure's producer is closed by whoever lets go of it last (``release`` or the sync that
was using it).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

from connect_bridge.bridge.stores.store_base import (
    EncodedRecord,
    ExternalStore,
    StoreError,
    SyncTimes,
    decode_live,
    index_writes,
)
from connect_bridge.bridge.stores.topic_store import (
    SYNC_FLUSH_MARGIN_S,
    StateTopic,
    StateTopicOptions,
    opening_state_topic,
    state_topic_partitions,
)
from connect_bridge.state.partitioning import partition_for
from connect_bridge.state.record_codec import encode_record
from connect_bridge.state.records import Record

__all__ = [
    "PartitionNotHeld",
    "PartitionedFenced",
    "PartitionedTopicStore",
    "PartitionsError",
    "SyncTimes",
    "is_fenced",
]

log = logging.getLogger(__name__)

DEFAULT_TRANSACTIONAL_ID_PREFIX = "connect-bridge-state"


class PartitionsError(StoreError):
    """A store error about some partitions only (``partitions``); the store stays usable."""

    def __init__(self, message: str, partitions: Iterable[int]) -> None:
        super().__init__(message)
        self.partitions = frozenset(partitions)


class PartitionedFenced(PartitionsError):
    """Another writer owns these partitions now (it initialised their transactional ids)."""


class PartitionNotHeld(PartitionsError):
    """A write for partitions this store does not hold: the caller wrote groups it does not own."""


@dataclass(eq=False)
class _Ownership:
    """One tenure of a partition: its producer, its live index, what is buffered for the next sync.

    ``syncing``: a sync is using the producer (it closes it if the tenure ends meanwhile);
    ``ended``: released, fenced or closed; the producer is closed or about to be."""

    partition: int
    producer: Any
    live: dict[bytes, bytes]
    buffered: list[EncodedRecord] = field(default_factory=list)
    syncing: bool = False
    ended: bool = False


_Batch = tuple[_Ownership, list[EncodedRecord]]


class PartitionedTopicStore(ExternalStore):
    """The records of the partitions this bridge holds. Use ``open``; the constructor is internal."""

    def __init__(self, state_topic: StateTopic, *, partitions: int, transactional_id_prefix: str) -> None:
        super().__init__(state_topic.where)
        self.state_topic = state_topic
        self.partitions = partitions
        self.transactional_id_prefix = transactional_id_prefix
        self.partition_syncs: dict[int, SyncTimes] = defaultdict(SyncTimes)
        """Per-partition sync counters (a partition's transaction, from begin to commit)."""
        self.records_read = 0
        self._held: dict[int, _Ownership] = {}
        self._generations: dict[int, int] = defaultdict(int)  # bumped by release: cancels an acquire

    @classmethod
    def open(
        cls,
        bootstrap: str | list[str],
        topic: str,
        *,
        partitions: int,
        transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX,
        **options: Unpack[StateTopicOptions],
    ) -> PartitionedTopicStore:
        """Create the topic if needed (``create``) and check its partition count; nothing is
        acquired yet."""
        if partitions < 1:
            raise StoreError(f"state topic {topic!r}: partitions must be at least 1, got {partitions}")
        with opening_state_topic(bootstrap, topic, partitions=partitions, **options) as state_topic:
            found = state_topic_partitions(bootstrap, topic, state_topic.client_options)
        if found is None:
            raise StoreError(f"state topic {topic!r} does not exist on {bootstrap}")
        if found != partitions:
            raise StoreError(
                f"state topic {topic!r} has {found} partitions but {partitions} are configured: "
                "changing the count would move groups to other partitions; keep the count or use a new topic"
            )
        return cls(state_topic, partitions=partitions, transactional_id_prefix=transactional_id_prefix)

    def transactional_id(self, partition: int) -> str:
        """The transactional.id of ``partition``'s writer: the same on every bridge, so whoever
        initialises it fences whoever wrote the partition before."""
        return f"{self.transactional_id_prefix}-{partition}"

    # ------------------------------------------------------------------ ownership
    def held(self) -> frozenset[int]:
        with self._lock:
            return frozenset(self._held)

    def acquire(self, partition: int) -> list[Record]:
        """Become the only writer of ``partition`` and return its live records (order of latest write).

        Blocking; call from a worker thread. Fence first, read second: once ``init_transactions``
        returned no earlier owner can commit, so the read to the last stable offset sees all it
        ever will. A held partition is released first (re-fenced, re-read). A ``StoreError`` here
        leaves the partition not held and the store usable; ``PartitionedFenced`` when the
        partition was released while it was being acquired.
        """
        from kafka.errors import KafkaError

        self._check_partition(partition)
        self.release(partition)
        with self._lock:
            self._check_usable()
            generation = self._generations[partition]
        txn_id = self.transactional_id(partition)
        producer = None
        try:
            # init_transactions waits up to max_block_ms (the old owner's transaction is aborted first).
            max_block_ms = int(self.state_topic.load_timeout_s * 1000)
            producer = self.state_topic.producer(transactional_id=txn_id, max_block_ms=max_block_ms)
            producer.init_transactions()
            live = self._read_partition(partition)
        except (KafkaError, StoreError) as exc:
            if producer is not None:
                self.state_topic.close_producer(producer)
            if isinstance(exc, StoreError):
                raise
            raise StoreError(f"{self.where}: cannot acquire partition {partition}: {exc}") from exc
        with self._lock:
            closed = self._closed
            current = not closed and self._generations[partition] == generation
            if current:
                self._held[partition] = _Ownership(partition, producer, live)
                items = list(live.items())
        if not current:
            self.state_topic.close_producer(producer)
            if closed:
                raise StoreError(f"{self.where}: store closed while acquiring partition {partition}")
            raise PartitionedFenced(
                f"{self.where}: partition {partition} was released while being acquired", [partition]
            )
        log.info("%s: acquired partition %d (%d live records)", self.where, partition, len(items))
        return decode_live(items, self.where)

    def release(self, partition: int) -> None:
        """Stop writing ``partition``: drop its buffer, its index and its producer. Idempotent.

        An acquire of it in progress will not complete (its ``generation`` is stale)."""
        with self._lock:
            self._generations[partition] += 1
            ownership = self._held.pop(partition, None)
            close_now = ownership is not None and self._end(ownership)
        if close_now:
            assert ownership is not None
            self.state_topic.close_producer(ownership.producer)

    def _end(self, ownership: _Ownership) -> bool:
        """End a tenure (with ``_lock``, already out of ``_held``); True if the caller must close
        its producer now, False if a sync using it will."""
        ownership.buffered.clear()
        ownership.live.clear()
        ownership.ended = True
        return not ownership.syncing

    def _read_partition(self, partition: int) -> dict[bytes, bytes]:
        """Read ``partition`` from its start to its last stable offset, committed records only."""
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        consumer = self.state_topic.consumer(isolation_level="read_committed")
        live: dict[bytes, bytes] = {}
        try:
            tp = TopicPartition(self.state_topic.topic, partition)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            # read_committed: ListOffsets(latest) answers the last stable offset, which only moves
            # forward; nobody can commit here any more (we fenced), so asking once is enough.
            end = consumer.end_offsets([tp])[tp]
            read = self.state_topic.read_to_end(consumer, tp, live, lambda: end)
        except KafkaError as exc:
            raise StoreError(f"{self.where}: reading partition {partition} failed: {exc}") from exc
        finally:
            consumer.close()
        with self._lock:  # acquires of different partitions may run at once
            self.records_read += read
        return live

    # ------------------------------------------------------------------ reading
    def load(self) -> list[Record]:
        """The live records of the partitions held now, partition by partition, each in the order
        of its latest writes ([] before any acquire)."""
        with self._lock:
            self._check_usable()
            items = [item for p in sorted(self._held) for item in self._held[p].live.items()]
        return decode_live(items, self.where)

    @property
    def live_count(self) -> int:
        """Keys whose latest record is not a tombstone, over the partitions held now."""
        with self._lock:
            return sum(len(o.live) for o in self._held.values())

    # ------------------------------------------------------------------ writing
    def append(self, records: Sequence[Record]) -> None:
        """Buffer ``records`` for their partitions (not durable until ``sync``); all or nothing:
        ``PartitionNotHeld`` if any belongs to a partition not held, and nothing is buffered."""
        routed: dict[int, list[EncodedRecord]] = defaultdict(list)
        for record in records:
            routed[partition_for(record.group_id, self.partitions)].append(encode_record(record))
        with self._lock:
            self._check_usable()
            missing = sorted(routed.keys() - self._held.keys())
            if missing:
                raise PartitionNotHeld(
                    f"{self.where}: partitions {missing} are not held by this bridge", missing
                )
            for partition, encoded in routed.items():
                ownership = self._held[partition]
                ownership.buffered.extend(encoded)
                index_writes(ownership.live, encoded)

    def sync(self) -> frozenset[int]:
        """Commit each partition's buffered records in one transaction; the partitions found fenced.

        Those are released (their records are not durable, their index is gone); everything else
        appended before the call is durable when it returns. Any other failure: ``StoreError``,
        now and on every later call."""
        with self._sync_lock:
            start = time.perf_counter()
            with self._lock:
                self._check_usable()
                batches: list[_Batch] = []
                for ownership in self._held.values():
                    if ownership.buffered:
                        batches.append((ownership, ownership.buffered))
                        ownership.buffered = []
                        ownership.syncing = True
            fenced: list[_Ownership] = []
            try:
                fenced = self._commit_all(batches)
            finally:
                released = self._settle(batches, fenced)
            self.count_sync(time.perf_counter() - start)
            if released:
                log.warning(
                    "%s: partitions %s were fenced (another bridge took them over); their unsynced "
                    "records are dropped and this bridge no longer writes them",
                    self.where,
                    sorted(released),
                )
            return released

    def _commit_all(self, batches: list[_Batch]) -> list[_Ownership]:
        """Write every batch in a transaction of its partition; the tenures found fenced.

        The sends of all partitions go out before the first flush, and every commit is begun before
        the first is waited for, so their round trips overlap."""
        from kafka.errors import KafkaError

        fenced: list[_Ownership] = []
        started: list[tuple[float, _Ownership, list[Any]]] = []
        for ownership, encoded in batches:
            t0 = time.perf_counter()
            try:
                ownership.producer.begin_transaction()
                futures = [
                    ownership.producer.send(
                        self.state_topic.topic, key=k, value=v, partition=ownership.partition
                    )
                    for k, v in encoded
                ]
            except Exception as exc:
                self._fenced_or_fail(exc, ownership, fenced)
                continue
            started.append((t0, ownership, futures))
        deadline_s = self.state_topic.sync_timeout_s + SYNC_FLUSH_MARGIN_S
        committing: list[tuple[float, _Ownership, Any]] = []
        for t0, ownership, futures in started:
            try:
                ownership.producer.flush(timeout=deadline_s)
                for future in futures:
                    if not future.is_done:
                        raise KafkaError(f"send to partition {ownership.partition} not completed after flush")
                    if future.failed():
                        raise future.exception
                # Every partition's EndTxn is sent before the first is waited for: the commits'
                # round trips (EndTxn, the markers) overlap instead of adding up.
                committing.append((t0, ownership, _begin_commit(ownership.producer)))
            except Exception as exc:
                self._fenced_or_fail(exc, ownership, fenced)
        for t0, ownership, commit in committing:
            try:
                _wait_commit(ownership.producer, commit, deadline_s)
            except Exception as exc:
                self._fenced_or_fail(exc, ownership, fenced)
                continue
            with self._lock:
                self.partition_syncs[ownership.partition].count_sync(time.perf_counter() - t0)
        return fenced

    def _fenced_or_fail(self, exc: BaseException, ownership: _Ownership, fenced: list[_Ownership]) -> None:
        """Note a fenced tenure, or enter the failure state (and raise) for any other error."""
        if is_fenced(exc):
            log.info("%s: partition %d fenced: %r", self.where, ownership.partition, exc)
            fenced.append(ownership)
            return
        with self._lock:
            self._failed = exc
        raise StoreError(f"{self.where}: write to partition {ownership.partition} failed: {exc!r}") from exc

    def _settle(self, batches: list[_Batch], fenced: list[_Ownership]) -> frozenset[int]:
        """After a sync: end the fenced tenures still current, and close every producer whose
        tenure ended while the sync used it. The partitions released here."""
        released = []
        to_close = []
        with self._lock:
            for ownership in fenced:
                if self._held.get(ownership.partition) is ownership:
                    del self._held[ownership.partition]
                    self._end(ownership)
                    released.append(ownership.partition)
            for ownership, _ in batches:
                ownership.syncing = False
                if ownership.ended:
                    to_close.append(ownership)
        for ownership in to_close:
            self.state_topic.close_producer(ownership.producer)
        return frozenset(released)

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Sync what is buffered (unless the store failed), then close every producer. Idempotent."""
        with self._sync_lock:
            with self._lock:
                if self._closed:
                    return
                pending = self._failed is None and any(o.buffered for o in self._held.values())
            try:
                if pending:
                    self.sync()
            finally:
                with self._lock:
                    self._closed = True
                    ending = list(self._held.values())
                    self._held.clear()
                    for ownership in ending:
                        self._end(ownership)
                for ownership in ending:
                    self.state_topic.close_producer(ownership.producer)

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.partitions:
            raise StoreError(f"{self.where}: no partition {partition} (it has {self.partitions})")


def is_fenced(exc: BaseException) -> bool:
    """Whether ``exc`` says another producer initialised our transactional.id: the error itself or
    one it wraps. kafka-python raises ``ProducerFencedError`` from the call that meets the fence, but
    once its producer is in that fatal state every other call raises a generic ``KafkaError``
    carrying it as an argument (``Cannot perform send because ...``)."""
    from kafka.errors import InvalidProducerEpochError, ProducerFencedError

    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        error = todo.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, (ProducerFencedError, InvalidProducerEpochError)):
            return True
        todo.extend(a for a in error.args if isinstance(a, BaseException))
        if error.__cause__ is not None:
            todo.append(error.__cause__)
    return False


def _begin_commit(producer: Any) -> Any:
    """Start committing the open transaction; what :func:`_wait_commit` waits for.

    kafka-python 3.0.12's ``commit_transaction`` waits for the EndTxn answer without a timeout and
    its sender retries that request for ever while the coordinator is unreachable: a sync would
    hang instead of failing. This is its body (producer/kafka.py) split in two, so the wait is
    bounded and several partitions' commits are in flight at once. None: another kafka-python
    without ``begin_commit``, committed here with its own (possibly unbounded) wait.
    """
    manager = getattr(producer, "_transaction_manager", None)
    if manager is None or not hasattr(manager, "begin_commit"):
        producer.commit_transaction()
        return None
    result = manager.begin_commit()
    producer._sender.wakeup()
    return result


def _wait_commit(producer: Any, result: Any, timeout_s: float) -> None:
    """Wait for a commit :func:`_begin_commit` started; raises its error (fenced, ...) or a timeout."""
    from kafka.errors import KafkaTimeoutError

    if result is not None and not result.wait(timeout_ms=timeout_s * 1000):
        raise KafkaTimeoutError(f"transaction not committed within {timeout_s:.0f}s")
