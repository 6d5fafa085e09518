"""What every record store shares, written once: the server's view of a store and the lifecycle.

The bridge keeps its records in a checksummed file log (``store.FileRecordStore``) or on a compacted
topic of the upstream cluster (``topic_store.TopicRecordStore``); tests and drills use memory
(``store.MemoryRecordStore``). Only *where* the bytes go differs. The lifecycle is the same for
both logs and lives here in ``LogStore``:

* open (the subclass's ``open``: lock the directory, or create the topic and connect),
* read the log once, lazily, on the first ``load`` or ``append``, into an index
  ``key bytes -> latest value bytes`` that every ``append`` keeps current,
* ``append`` (buffered) and ``sync`` (durable when it returns; timed as the store's "fsync"),
* the failure state: the first write or sync that fails makes the store refuse every later call,
  because after a lost write (a failed fsync, a failed send) later records may already be in the
  log and the only safe continuation is a restart that reads the log again,
* ``close``: sync what was appended unless failed, then release the file or the producer.

Locking: ``append`` runs on the event loop while ``sync`` runs in a worker thread (the committer's
group commit). ``_lock`` guards the index and the write buffer and is held only briefly; the slow
part of ``sync`` (fsync, waiting for acks) runs outside it so appends keep flowing; ``_sync_lock``
serialises syncs, compaction and close.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, ClassVar, Generic, NoReturn, Protocol, Self, TypeVar

from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record

__all__ = [
    "EncodedRecord",
    "ExternalStore",
    "LogStore",
    "RecordStore",
    "StoreBase",
    "StoreError",
    "SyncTimes",
    "assign_partition_zero",
    "decode_live",
    "index_writes",
]

EncodedRecord = tuple[bytes, bytes | None]
"""A record as ``record_codec.encode_record`` writes it: the compaction key, the value or None
for a tombstone. Both logs store exactly these bytes."""

SyncHandoff = TypeVar("SyncHandoff")
"""What the locked first half of a ``sync`` hands to its unlocked second half."""


class RecordStore(Protocol):
    """What the server needs of a store (the file log, the compacted topic, memory for tests):
    ``load`` once at start, then ``append`` + ``sync`` per commit (``Committer``), ``close`` at stop.
    Every method may raise :class:`StoreError`."""

    def load(self) -> list[Record]: ...
    def append(self, records: Sequence[Record]) -> None: ...
    def sync(self) -> None: ...
    def close(self) -> None: ...


class StoreError(Exception):
    """Base class for record store failures."""


def index_writes(live: dict[bytes, bytes], writes: Iterable[EncodedRecord]) -> None:
    """Apply writes to a live index the way log compaction would: a key's latest write moves it to
    the end (replay order is the order of latest writes), a tombstone removes it."""
    for key, value in writes:
        live.pop(key, None)
        if value is not None:
            live[key] = value


def decode_live(items: Iterable[tuple[bytes, bytes]], where: str) -> list[Record]:
    """The records of a live index's (key, value) items, in their order; ``StoreError`` naming
    ``where`` for one this build cannot decode.

    The checksum (or the broker) vouches these are the bytes we wrote: a format this build cannot
    read. Never drop it silently.
    """
    out = []
    for key, value in items:
        try:
            out.append(decode_record(key, value))
        except (CodecError, ValueError, KeyError) as exc:
            raise StoreError(f"{where}: undecodable record with key {key!r}: {exc}") from exc
    return out


def assign_partition_zero(
    consumer: Any, topic: str, missing: Exception, logger: logging.Logger, many: str
) -> Any:
    """Assign partition 0 of a single-partition topic to a group-less consumer, from its start.

    Both topics the bridge reads whole are single-partition compacted logs (its state topic,
    Connect's config topic). ``missing`` is raised when the topic does not exist; ``many`` is the
    warning (``%r`` topic, ``%d`` partitions) for a topic with more partitions, logged to ``logger``.
    """
    from kafka import TopicPartition

    partitions = consumer.partitions_for_topic(topic)
    if not partitions:
        raise missing
    if len(partitions) > 1:
        logger.warning(many, topic, len(partitions))
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    return tp


class SyncTimes:
    """Sync counters: how many syncs, the last one's and the summed duration in seconds. Every store
    keeps them for the whole store, the partitioned store also per partition (its transactions);
    one class so that both read alike in a probe or a test."""

    def __init__(self) -> None:
        self.fsyncs = 0
        self.last_fsync_s = 0.0
        self.total_fsync_s = 0.0

    def count_sync(self, elapsed_s: float) -> None:
        """One sync that took ``elapsed_s`` seconds."""
        self.fsyncs += 1
        self.last_fsync_s = elapsed_s
        self.total_fsync_s += elapsed_s


class StoreBase(SyncTimes):
    """Shared by every store, the memory one included: ``commit``, the context manager, and the
    sync counters (``SyncTimes``, and ``compactions``), kept so a store can be inspected on its own
    (the server's fsync histogram is fed by the committer)."""

    def __init__(self) -> None:
        super().__init__()
        self.compactions = 0

    def append(self, records: Sequence[Record]) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def commit(self, records: Sequence[Record]) -> None:
        """``append`` + ``sync``: the records are durable (acknowledged) when this returns."""
        self.append(records)
        self.sync()

    def maybe_compact(self) -> bool:
        """Compact if worthwhile; True if it did. By default the log is compacted elsewhere (the
        broker compacts a topic), so there is nothing to do."""
        return False

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ExternalStore(StoreBase):
    """A store whose records live outside the process (a file, a topic, a topic's partitions): the
    name its errors carry, its two locks and its failure state, the same for the single log
    (``LogStore``) and the partitioned topic (``partitioned_store``), which differ in everything
    else. ``_lock`` guards the store's indexes and buffers and is held briefly; ``_sync_lock``
    serialises syncs (and compaction) with close."""

    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        """Names the log in every error message (the file's path, the topic)."""
        self._lock = threading.RLock()
        self._sync_lock = threading.RLock()
        self._failed: BaseException | None = None
        self._closed = False

    def _check_usable(self) -> None:
        """Refuse every call once closed or failed: after a lost write the log may hold later
        records without the lost one, and only a restart that reads it again is safe."""
        if self._closed:
            raise StoreError(f"{self.where}: store is closed")
        if self._failed is not None:
            raise StoreError(f"{self.where}: store failed earlier: {self._failed}") from self._failed


class LogStore(ExternalStore, Generic[SyncHandoff]):
    """The lifecycle of a store whose records live outside the process (module docstring).

    A subclass says where the bytes go through the hooks: ``_read_log`` (read the whole log once),
    ``_write`` (buffer encoded records), ``_begin_sync`` / ``_finish_sync`` (the locked and the
    unlocked half of a sync), ``_unsynced`` / ``_flush_on_close`` / ``_release`` (close). A hook
    that loses a write calls ``_fail``; ``_WRITE_ERRORS`` are the exceptions of ``_write`` that do.
    """

    _WRITE_ERRORS: ClassVar[tuple[type[Exception], ...]] = (OSError,)

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self._live: dict[bytes, bytes] | None = None  # None until the log was read

    # ------------------------------------------------------------------ hooks
    def _read_log(self) -> dict[bytes, bytes]:
        """Read (and recover) the whole log: the live index. Called once, with ``_lock`` held."""
        raise NotImplementedError

    def _encode(self, records: Sequence[Record]) -> list[EncodedRecord]:
        """The records' bytes, before any lock is taken; a subclass may refuse records here."""
        return [encode_record(r) for r in records]

    def _write(self, encoded: list[EncodedRecord]) -> None:
        """Buffer non-empty ``encoded`` in the log (not durable yet). Called with ``_lock`` held."""
        raise NotImplementedError

    def _begin_sync(self) -> SyncHandoff:
        """The part of ``sync`` that needs ``_lock`` (flush buffers, take what is outstanding)."""
        raise NotImplementedError

    def _finish_sync(self, handoff: SyncHandoff) -> None:
        """The slow part of ``sync`` (fsync, wait for acks), without ``_lock``."""
        raise NotImplementedError

    def _after_sync(self) -> None:
        """Work after a sync succeeded and was counted (the file store's compaction check)."""

    def _unsynced(self) -> bool:
        """Anything appended but not yet synced, which ``close`` must sync first."""
        raise NotImplementedError

    def _flush_on_close(self) -> None:
        raise NotImplementedError

    def _release(self) -> None:
        """Give back what ``open`` took (file handles and the lock, the producer). Never raises."""
        raise NotImplementedError

    # ------------------------------------------------------------------ reading
    def load(self) -> list[Record]:
        """The live records (latest per key, no tombstones) in the order of their latest write.

        The first call reads the log; later calls answer from the index every ``append`` keeps
        current.
        """
        with self._lock:
            items = list(self._ensure_loaded().items())
        return decode_live(items, self.where)

    def _ensure_loaded(self) -> dict[bytes, bytes]:
        """The live index, reading the log first if this is the first use."""
        self._check_usable()
        if self._live is None:
            self._live = self._read_log()
        return self._live

    @property
    def live_count(self) -> int:
        """Keys whose latest record is not a tombstone (0 before the log was read)."""
        return len(self._live or {})

    # ------------------------------------------------------------------ writing
    def append(self, records: Sequence[Record]) -> None:
        """Encode and buffer-write records. Not durable until ``sync``."""
        encoded = self._encode(records)
        with self._lock:
            live = self._ensure_loaded()
            if not encoded:
                return
            try:
                self._write(encoded)
            except self._WRITE_ERRORS as exc:
                self._fail(exc)
            index_writes(live, encoded)

    def sync(self) -> None:
        """Everything appended so far is durable when this returns, or ``StoreError`` (for good)."""
        with self._sync_lock:
            start = time.perf_counter()
            with self._lock:
                handoff = self._begin_sync()
            self._finish_sync(handoff)
            self.count_sync(time.perf_counter() - start)
            self._after_sync()

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Sync anything appended (unless the store failed), then release the log. Idempotent.

        Both locks are held, so no append can land between the last sync and the release.
        """
        with self._sync_lock, self._lock:
            if self._closed:
                return
            try:
                if self._failed is None and self._unsynced():
                    self._flush_on_close()
            finally:
                self._closed = True
                self._release()

    def _fail(self, exc: BaseException | None) -> NoReturn:
        """Enter the failure state (call with ``_lock`` held) and raise."""
        self._failed = exc or StoreError("unknown send failure")
        raise StoreError(f"{self.where}: write failed: {self._failed}") from exc

    def _fail_unlocked(self, exc: BaseException | None) -> NoReturn:
        """``_fail`` from the unlocked half of a sync."""
        with self._lock:
            self._fail(exc)
