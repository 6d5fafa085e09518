"""The durable record store: an append-only, checksummed file log in a state directory.

The coordinator emits ``Record``s for every state change; the bridge answers a request that
reveals new state only after those records are durable (docs/architecture.md, "Layers"). At start the live
records are read back and handed to ``GroupCoordinator.replay``. This module is that log.

File layout (``<state_dir>/log``), all integers big-endian:

    header   8 bytes   b"CBLOG\\x00" magic, then u16 format version (currently 1)
    frame*   u32 payload length
             u32 zlib.crc32(payload)
             payload:  u32 key length, key bytes,
                       i32 value length (-1 = tombstone), value bytes

Key and value bytes are exactly ``record_codec.encode_record``'s output, so the compaction key is
the encoded record key (equivalent to ``Record.key``).

Recovery rules, applied once when the log is first read (``load`` or the first ``append``):

* A frame that is cut short, or whose CRC does not match, *with no valid frame after it* is a torn
  tail from a crash during an unsynced write. It is truncated away with a logged warning; nothing
  that was ever ``sync``'ed can be lost this way, because a synced frame is never followed only by
  garbage unless the disk lies.
* A bad frame that *is* followed by a valid frame is not a crash artefact but damage in the middle
  of committed data. Truncating would silently drop committed state, so ``StoreCorrupted`` is
  raised with the file and byte offset and the operator decides.

Compaction: the store keeps an in-memory index ``key bytes -> latest value bytes`` of the live
records, so it knows without re-reading how much of the file is dead. When the live records are
fewer than ``compact_live_ratio`` of the frames and the file exceeds ``compact_min_bytes``,
``maybe_compact`` writes the live records to ``log.compact.tmp``, fsyncs it, renames it over
``log`` and fsyncs the directory. A crash at any point leaves either the old or the new log, both
describing the same state; a stale ``log.compact.tmp`` is removed at open.

Live records are kept (and returned) in the order of their latest write, which is exactly what a
compacted Kafka topic would hold; replaying the compacted form rebuilds the same state as the full
log (``GroupCoordinator.replay``).

``sync`` measures each fsync (``last_fsync_s``, ``total_fsync_s``, ``fsyncs``) because fsync latency
is on the response path of every state-changing request.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from connect_bridge.bridge.stores.store_base import (
    EncodedRecord,
    LogStore,
    RecordStore,
    StoreBase,
    StoreError,
    index_writes,
)
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.records import Record

__all__ = [
    "HEADER",
    "FileRecordStore",
    "MemoryRecordStore",
    "RecordStore",
    "StoreCorrupted",
    "StoreError",
    "StoreLocked",
]

log = logging.getLogger(__name__)

MAGIC = b"CBLOG\x00"
VERSION = 1
HEADER = MAGIC + struct.pack(">H", VERSION)
LOG_NAME = "log"
TMP_NAME = "log.compact.tmp"
NEW_NAME = "log.new"
LOCK_NAME = "LOCK"

_FRAME_HEAD = struct.Struct(">II")  # payload length, crc32
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_MIN_PAYLOAD = _U32.size + _I32.size
# A record is a few KiB at most; a length beyond this is damage, not data. Also bounds what a
# corrupt length field can make the resync scan read.
MAX_PAYLOAD = 64 * 1024 * 1024

DEFAULT_COMPACT_MIN_BYTES = 1024 * 1024
DEFAULT_COMPACT_LIVE_RATIO = 0.5


class StoreCorrupted(StoreError):
    """The log is damaged somewhere other than a torn tail; truncating would lose committed data."""

    def __init__(self, path: Path, offset: int, reason: str) -> None:
        super().__init__(f"{path}: corrupt log at byte offset {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class StoreLocked(StoreError):
    """Another process (another bridge) holds the state directory's lock."""


# --------------------------------------------------------------------------- frames
def encode_frame(key: bytes, value: bytes | None) -> bytes:
    """One frame: length, crc32, payload (key length, key, value length or -1, value)."""
    vlen = -1 if value is None else len(value)
    payload = b"".join((_U32.pack(len(key)), key, _I32.pack(vlen), value or b""))
    return _FRAME_HEAD.pack(len(payload), zlib.crc32(payload)) + payload


def _split_payload(payload: memoryview) -> tuple[bytes, bytes | None] | None:
    """(key, value) of a payload, or None when its inner lengths do not add up exactly."""
    if len(payload) < _MIN_PAYLOAD:
        return None
    (klen,) = _U32.unpack_from(payload, 0)
    vpos = _U32.size + klen
    if vpos + _I32.size > len(payload):
        return None
    (vlen,) = _I32.unpack_from(payload, vpos)
    start = vpos + _I32.size
    if vlen == -1:
        if start != len(payload):
            return None
        return bytes(payload[_U32.size : vpos]), None
    if vlen < 0 or start + vlen != len(payload):
        return None
    return bytes(payload[_U32.size : vpos]), bytes(payload[start:])


def _frame_at(data: memoryview, pos: int) -> tuple[int, bytes, bytes | None] | str:
    """The frame at ``pos`` as (end offset, key, value), or why there is no valid frame there."""
    size = len(data)
    if pos + _FRAME_HEAD.size > size:
        return "truncated frame header"
    length, crc = _FRAME_HEAD.unpack_from(data, pos)
    if length < _MIN_PAYLOAD or length > MAX_PAYLOAD:
        return f"implausible payload length {length}"
    end = pos + _FRAME_HEAD.size + length
    if end > size:
        return f"truncated frame (needs {end - size} more bytes)"
    payload = data[pos + _FRAME_HEAD.size : end]
    if zlib.crc32(payload) != crc:
        return "crc mismatch"
    kv = _split_payload(payload)
    if kv is None:
        return "inconsistent payload lengths"
    return end, kv[0], kv[1]


def _valid_frame_after(data: memoryview, pos: int) -> int | None:
    """Offset of the first valid frame starting after ``pos``, if any.

    Only run when a frame fails, to tell a torn tail (nothing valid follows) from damage in the
    middle. A false positive needs a 32-bit CRC match on arbitrary bytes plus exactly consistent
    inner lengths, so it is negligible; the scan is cheap for the torn-tail case because a torn
    tail is at most one partial batch.
    """
    for q in range(pos + 1, len(data) - _FRAME_HEAD.size - _MIN_PAYLOAD + 1):
        if not isinstance(_frame_at(data, q), str):
            return q
    return None


def _fsync_dir(path: Path) -> None:
    """fsync a directory so that creates and renames in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _compacted(records: Sequence[Record]) -> list[Record]:
    """Latest record per key, tombstones dropped, in the order of each key's latest write."""
    live: dict[tuple[int, str, str], Record] = {}
    for record in records:
        live.pop(record.key, None)
        if record.value is not None:
            live[record.key] = record
    return list(live.values())


# --------------------------------------------------------------------------- file store
class FileRecordStore(LogStore[BinaryIO]):
    """Append-only checksummed record log with a durable ``sync`` and compaction.

    Use ``open``; the constructor is internal. The lifecycle, the failure state and the locking
    are ``LogStore``'s; this class is the file format. ``_sync_lock`` also serialises compaction,
    so a compaction never swaps the handle under an fsync in progress.
    """

    def __init__(
        self,
        state_dir: Path,
        lock_fd: int,
        *,
        compact_min_bytes: int,
        compact_live_ratio: float,
        auto_compact: bool,
    ) -> None:
        self.state_dir = state_dir
        self.path = state_dir / LOG_NAME
        super().__init__(str(self.path))
        self.compact_min_bytes = compact_min_bytes
        self.compact_live_ratio = compact_live_ratio
        self.auto_compact = auto_compact
        self._lock_fd: int | None = lock_fd
        self._file: BinaryIO | None = None
        self._dirty = False
        self._frames = 0
        self._size = 0

    @classmethod
    def open(
        cls,
        state_dir: Path,
        *,
        compact_min_bytes: int = DEFAULT_COMPACT_MIN_BYTES,
        compact_live_ratio: float = DEFAULT_COMPACT_LIVE_RATIO,
        auto_compact: bool = True,
    ) -> FileRecordStore:
        """Create ``state_dir`` if needed and take its exclusive lock.

        The lock is a ``flock`` on ``LOCK`` so that two bridges pointed at one directory cannot
        interleave frames; the kernel drops it if the process dies, so there is no stale-lock
        cleanup. The log itself is read lazily by ``load`` (or the first ``append``).
        """
        state_dir = Path(state_dir)
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            lock_fd = _lock_state_dir(state_dir)
        except StoreError:
            raise
        except OSError as exc:  # a file in the way, a read-only mount, no permission
            why = os.strerror(exc.errno) if exc.errno is not None else str(exc)
            if state_dir.exists() and not state_dir.is_dir():
                why = "it is a file, not a directory"
            raise StoreError(
                f"state directory {state_dir} cannot be used: {why}; pass another --state-dir"
            ) from exc
        return cls(
            state_dir,
            lock_fd,
            compact_min_bytes=compact_min_bytes,
            compact_live_ratio=compact_live_ratio,
            auto_compact=auto_compact,
        )

    # ------------------------------------------------------------------ reading
    def _read_log(self) -> dict[bytes, bytes]:
        """Read and recover the log; leave the handle positioned for appends."""
        tmp = self.state_dir / TMP_NAME
        if tmp.exists():
            log.warning("removing stale %s left by an interrupted compaction", tmp)
            tmp.unlink()
        if not self.path.exists():
            self._create()
        f = open(self.path, "r+b")
        try:
            data = f.read()
            valid_end, live = self._scan(memoryview(data))
            if valid_end < len(data):
                f.truncate(valid_end)
                os.fsync(f.fileno())
            f.seek(valid_end)
        except BaseException:
            f.close()
            raise
        self._file = f
        self._size = valid_end
        return live

    def _handle(self) -> BinaryIO:
        """The log's handle, positioned for appends; the log is read first on the first use."""
        self._ensure_loaded()
        assert self._file is not None  # set by _read_log, cleared only by close
        return self._file

    def _create(self) -> None:
        """A new log, header included, appears atomically: so a log without its header (an empty
        file too) is never our own crash, always damage, and is refused rather than started over."""
        new = self.state_dir / NEW_NAME
        with open(new, "wb") as out:
            out.write(HEADER)
            out.flush()
            os.fsync(out.fileno())
        os.replace(new, self.path)
        _fsync_dir(self.state_dir)

    def _check_header(self, data: memoryview) -> None:
        size = len(data)
        if size < len(HEADER):
            what = "empty" if size == 0 else f"{size} bytes, shorter than its header"
            raise StoreCorrupted(self.path, 0, f"the log is {what}")
        if bytes(data[: len(MAGIC)]) != MAGIC:
            raise StoreCorrupted(self.path, 0, "not a connect-bridge record log (bad magic)")
        (version,) = struct.unpack_from(">H", data, len(MAGIC))
        if version != VERSION:
            raise StoreCorrupted(self.path, len(MAGIC), f"unsupported log format version {version}")

    def _scan(self, data: memoryview) -> tuple[int, dict[bytes, bytes]]:
        """Index every frame: the offset where valid data ends, and the live index."""
        self._check_header(data)
        size = len(data)
        pos = len(HEADER)
        live: dict[bytes, bytes] = {}
        frames = 0
        while pos < size:
            frame = _frame_at(data, pos)
            if isinstance(frame, str):
                later = _valid_frame_after(data, pos)
                if later is not None:
                    raise StoreCorrupted(self.path, pos, f"{frame}; a valid frame follows at offset {later}")
                log.warning(
                    "%s: dropping torn tail at byte offset %d (%d bytes): %s",
                    self.path,
                    pos,
                    size - pos,
                    frame,
                )
                break
            pos, key, value = frame
            frames += 1
            index_writes(live, ((key, value),))
        self._frames = frames
        return pos, live

    # ------------------------------------------------------------------ writing
    def _encode(self, records: Sequence[Record]) -> list[EncodedRecord]:
        """Every record is encoded and size-checked before anything is written, so a record the log
        could never read back (over ``MAX_PAYLOAD``, or not encodable) raises ``StoreError`` and
        leaves the file as it was."""
        try:
            encoded = super()._encode(records)
        except (CodecError, ValueError, OverflowError, struct.error) as exc:
            raise StoreError(f"{self.path}: cannot encode a record: {exc}") from exc
        for key, value in encoded:
            size = _MIN_PAYLOAD + len(key) + len(value or b"")
            if size > MAX_PAYLOAD:
                raise StoreError(
                    f"{self.path}: a {size}-byte record exceeds the log's {MAX_PAYLOAD}-byte limit"
                )
        return encoded

    def _write(self, encoded: list[EncodedRecord]) -> None:
        buf = b"".join([encode_frame(k, v) for k, v in encoded])
        self._handle().write(buf)
        self._size += len(buf)
        self._frames += len(encoded)
        self._dirty = True

    def _begin_sync(self) -> BinaryIO:
        f = self._handle()
        try:
            f.flush()
        except OSError as exc:
            self._fail(exc)
        self._dirty = False
        return f

    def _finish_sync(self, handoff: BinaryIO) -> None:
        try:
            os.fsync(handoff.fileno())
        except OSError as exc:
            # After a failed fsync the kernel may have dropped the dirty pages and a retry can
            # "succeed" without writing them (the fsyncgate lesson): never trust the log again.
            self._fail_unlocked(exc)

    def _after_sync(self) -> None:
        """The cheap compaction check runs after the fsync, so a commit is durable before any
        compaction work starts."""
        if self.auto_compact:
            self.maybe_compact()

    # ------------------------------------------------------------------ compaction
    @property
    def size(self) -> int:
        """Bytes in the log, including appended but not yet flushed frames."""
        return self._size

    @property
    def frames(self) -> int:
        """Frames in the log, live or dead."""
        return self._frames

    def should_compact(self) -> bool:
        """The cheap check: the file is big and mostly dead. Call with ``_lock`` held or racy."""
        return (
            self._frames > 0
            and self._size > self.compact_min_bytes
            and self.live_count < self.compact_live_ratio * self._frames
        )

    def maybe_compact(self) -> bool:
        """Compact if ``should_compact``; True if it did."""
        with self._sync_lock, self._lock:
            self._ensure_loaded()
            if not self.should_compact():
                return False
            self.compact()
            return True

    def compact(self) -> None:
        """Rewrite the log as its live records only, crash-safely.

        Write ``log.compact.tmp``, fsync it, rename it over ``log``, fsync the directory. Until
        the rename the old log is untouched, so a failure before it is logged and harmless (the
        next check retries). After the rename the open handle points at the unlinked old file, so
        a failure from there on makes the store unusable rather than risk writing into the void.
        Appends wait for the rewrite (they must land in the new file), fsyncs cannot overlap it.
        """
        with self._sync_lock, self._lock:
            old = self._handle()
            before = self._size
            frames = [encode_frame(k, v) for k, v in self._ensure_loaded().items()]
            new_size = self._write_compacted(frames)
            if new_size is None:
                return
            self._reopen(old, new_size)
            self._frames = len(frames)
            self.compactions += 1
            log.info(
                "%s: compacted %d -> %d bytes (%d live records)", self.path, before, new_size, len(frames)
            )

    def _write_compacted(self, frames: list[bytes]) -> int | None:
        """Write the compacted log and rename it over the log; its size, or None if that failed."""
        tmp = self.state_dir / TMP_NAME
        try:
            with open(tmp, "wb") as out:
                out.write(HEADER)
                out.writelines(frames)
                out.flush()
                os.fsync(out.fileno())
            new_size = tmp.stat().st_size
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("%s: compaction failed, keeping the current log: %s", self.path, exc)
            tmp.unlink(missing_ok=True)
            return None
        return new_size

    def _reopen(self, old: BinaryIO, new_size: int) -> None:
        """Switch appends to the renamed compacted log."""
        try:
            _fsync_dir(self.state_dir)
            new = open(self.path, "r+b")  # owned by the store until close()
            new.seek(new_size)
            self._file = new
        except OSError as exc:
            self._fail(exc)
        finally:
            # Anything still buffered in the old handle is also in the new file; drop it quietly.
            try:
                old.close()
            except OSError:
                pass
        self._size = new_size
        self._dirty = False

    # ------------------------------------------------------------------ lifecycle
    def _unsynced(self) -> bool:
        return self._file is not None and self._dirty

    def _flush_on_close(self) -> None:
        assert self._file is not None  # _unsynced checked it
        self._file.flush()
        os.fsync(self._file.fileno())

    def _release(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None


def _lock_state_dir(state_dir: Path) -> int:
    """Take the state directory's exclusive ``flock``; the lock file's descriptor, which holds it."""
    lock_path = state_dir / LOCK_NAME
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = ""
        try:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        except OSError:
            pass
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            who = f" (pid {holder})" if holder else ""
            raise StoreLocked(
                f"state directory {state_dir} is locked by another bridge{who}; "
                "each bridge needs its own state directory: stop that one or pass another --state-dir"
            ) from exc
        raise StoreError(f"cannot lock {lock_path}: {exc}") from exc
    # The pid is only for the error message above; the flock is what excludes.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


# --------------------------------------------------------------------------- memory store
class MemoryRecordStore(StoreBase):
    """The ``FileRecordStore`` interface in memory, for tests and simulated-time drills.

    It keeps ``Record`` objects rather than bytes so a drill at thousands of rebalances per second
    does not pay for encoding. ``crash`` models a bridge restart that loses unsynced appends, which
    is the one durability property drills need to exercise.
    """

    def __init__(self) -> None:
        super().__init__()
        self._synced: list[Record] = []
        self._pending: list[Record] = []
        self._closed = False

    @classmethod
    def open(cls, state_dir: Path | None = None) -> MemoryRecordStore:
        """A fresh empty store; ``state_dir`` is accepted for interface parity and ignored."""
        return cls()

    def load(self) -> list[Record]:
        self._check_open()
        return _compacted(self._synced + self._pending)

    def append(self, records: Sequence[Record]) -> None:
        self._check_open()
        self._pending.extend(records)

    def sync(self) -> None:
        self._check_open()
        self._synced.extend(self._pending)
        self._pending.clear()
        self.count_sync(0.0)

    def maybe_compact(self) -> bool:
        """Always compacts the synced part (cheap in memory); True if it dropped anything."""
        self._check_open()
        compacted = _compacted(self._synced)
        if len(compacted) == len(self._synced):
            return False
        self._synced = compacted
        self.compactions += 1
        return True

    def crash(self) -> MemoryRecordStore:
        """A new store holding only what was synced, as after a process crash and restart."""
        survivor = MemoryRecordStore()
        survivor._synced = list(self._synced)
        self._closed = True
        return survivor

    def close(self) -> None:
        if not self._closed:
            self.sync()
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("memory store is closed")
