"""The record store: round trip through replay, torn tails, corruption, compaction, the lock.

The property test is the one that matters for crash safety: whatever prefix of the file survives
a crash, the store loads the compacted state of a prefix of what was written, and every record
committed before the cut is in it.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect_bridge.bridge.stores.store import (
    HEADER,
    LOG_NAME,
    TMP_NAME,
    FileRecordStore,
    MemoryRecordStore,
    StoreCorrupted,
    StoreError,
    StoreLocked,
    encode_frame,
)
from connect_bridge.state.api import HeartbeatRequest
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import ConfigView, TargetMetadata
from connect_bridge.state.records import Record, RecordType


def compacted(records: list[Record]) -> list[Record]:
    """Reference compaction: latest per key in latest-write order, tombstones dropped."""
    live: dict[tuple[int, str, str], Record] = {}
    for r in records:
        live.pop(r.key, None)
        if r.value is not None:
            live[r.key] = r
    return list(live.values())


def config(group: str, offset: int) -> Record:
    return Record(RecordType.CONFIG, group, "", ConfigView(offset, (("c1", offset % 4),)))


def target(group: str, epoch: int) -> Record:
    return Record(RecordType.TARGET_METADATA, group, "", TargetMetadata(epoch, 0))


def log_path(tmp_path: Path) -> Path:
    return tmp_path / LOG_NAME


def write_one_per_commit(state_dir: Path, records: list[Record]) -> list[int]:
    """Commit each record on its own; return each frame's start offset."""
    offsets = []
    with FileRecordStore.open(state_dir) as store:
        store.load()
        for r in records:
            offsets.append(store.size)
            store.commit([r])
    return offsets


def engine_run() -> tuple[GroupCoordinator, list[Record]]:
    """Three workers join, one leaves: metadata, assignments, and tombstones."""
    coord = GroupCoordinator()
    coord.set_config("g", ConfigView(1, (("c1", 2), ("c2", 1))), 0)
    records: list[Record] = []
    members = []
    for i, now in enumerate((0, 10, 20)):
        resp = coord.connect_heartbeat(
            HeartbeatRequest("g", "", 0, rebalance_timeout_ms=60000, url=f"http://w{i + 1}/"), now
        )
        members.append(resp.member_id)
        records.extend(coord.drain_records())
    coord.connect_heartbeat(HeartbeatRequest("g", members[1], -1), 30)
    records.extend(coord.drain_records())
    return coord, records


# --------------------------------------------------------------------------- round trip
def test_engine_records_round_trip_and_replay(tmp_path: Path) -> None:
    coord, records = engine_run()
    assert any(r.is_tombstone for r in records)
    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == []
        # Commit in the batches a server would: per request.
        store.commit(records[:5])
        store.commit(records[5:])
        assert store.fsyncs == 2
        assert store.last_fsync_s >= 0 and store.total_fsync_s >= store.last_fsync_s

    with FileRecordStore.open(tmp_path) as store:
        loaded = store.load()
    assert loaded == compacted(records)
    assert len(loaded) < len(records)

    fresh = GroupCoordinator()
    fresh.replay(loaded, 40)
    assert fresh.snapshot() == coord.snapshot()


def test_tombstone_removes_key_and_survives_reopen(tmp_path: Path) -> None:
    with FileRecordStore.open(tmp_path) as store:
        store.commit([config("a", 1), config("b", 1), target("a", 1)])
        store.commit([Record(RecordType.CONFIG, "a"), config("b", 2)])
        expected = [target("a", 1), config("b", 2)]
        assert store.load() == expected
        assert store.live_count == 2 and store.frames == 5
    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == expected


def test_append_without_sync_is_visible_and_close_makes_it_durable(tmp_path: Path) -> None:
    with FileRecordStore.open(tmp_path) as store:
        store.append([config("a", 1)])  # first append reads the (empty) log itself
        assert store.load() == [config("a", 1)]
        assert store.fsyncs == 0
    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == [config("a", 1)]


def test_new_log_starts_with_header(tmp_path: Path) -> None:
    with FileRecordStore.open(tmp_path / "nested" / "state") as store:
        store.load()
    assert (tmp_path / "nested" / "state" / LOG_NAME).read_bytes() == HEADER


# --------------------------------------------------------------------------- damage
def test_torn_tail_drops_only_last_frame_and_appends_continue(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = [config("g", i) for i in range(5)] + [target("g", 9)]
    offsets = write_one_per_commit(tmp_path, records)
    path = log_path(tmp_path)
    os.truncate(path, path.stat().st_size - 3)

    with caplog.at_level(logging.WARNING), FileRecordStore.open(tmp_path) as store:
        assert store.load() == [config("g", 4)]  # target("g", 9) was the torn frame
        assert path.stat().st_size == offsets[-1]
        store.commit([target("g", 10)])
    assert "torn tail" in caplog.text

    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == [config("g", 4), target("g", 10)]


@pytest.mark.parametrize("content", [b"", HEADER[:3]], ids=["empty", "torn-header"])
def test_a_log_without_its_header_is_refused(tmp_path: Path, content: bytes) -> None:
    """A new log appears with its header atomically, so a headerless one is damage (issue 11.1):
    starting over from nothing would hand out work that workers still run."""
    log_path(tmp_path).write_bytes(content)
    with FileRecordStore.open(tmp_path) as store, pytest.raises(StoreCorrupted, match="offset 0"):
        store.load()
    assert log_path(tmp_path).read_bytes() == content  # left for the operator


def test_a_new_log_is_created_with_its_header(tmp_path: Path) -> None:
    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == []
    assert log_path(tmp_path).read_bytes() == HEADER
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LOCK", "log"]


def test_a_record_too_large_to_store_is_refused_before_writing(tmp_path: Path) -> None:
    from connect_bridge.bridge.stores import store as store_module

    with FileRecordStore.open(tmp_path) as store:
        store.commit([config("a", 1)])
        size = log_path(tmp_path).stat().st_size
        big = config("b" * 40_000, 2)  # a group id past the int16 string limit cannot be encoded
        with pytest.raises(StoreError, match="cannot encode"):
            store.append([config("c", 3), big])
        assert log_path(tmp_path).stat().st_size == size
        limit = store_module.MAX_PAYLOAD
        store_module.MAX_PAYLOAD = 64
        try:
            with pytest.raises(StoreError, match="exceeds"):
                store.append([config("c", 3), config("d" * 100, 4)])
        finally:
            store_module.MAX_PAYLOAD = limit
        store.sync()
        assert store.load() == [config("a", 1)]
    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == [config("a", 1)]


def test_crc_mismatch_at_tail_is_truncated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    records = [config("a", 1), config("b", 2), config("c", 3)]
    offsets = write_one_per_commit(tmp_path, records)
    path = log_path(tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # last byte of the last payload
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING), FileRecordStore.open(tmp_path) as store:
        assert store.load() == records[:2]
    assert "crc mismatch" in caplog.text
    assert path.stat().st_size == offsets[2]


@pytest.mark.parametrize("where", ["payload", "length"])
def test_corruption_in_the_middle_raises_with_offset(tmp_path: Path, where: str) -> None:
    records = [config(f"g{i}", i) for i in range(6)]
    offsets = write_one_per_commit(tmp_path, records)
    path = log_path(tmp_path)
    data = bytearray(path.read_bytes())
    bad = offsets[2]
    if where == "payload":
        data[bad + 12] ^= 0x01
    else:
        data[bad] = 0x7F  # length now points far past the end of the file
    path.write_bytes(bytes(data))

    store = FileRecordStore.open(tmp_path)
    try:
        with pytest.raises(StoreCorrupted) as info:
            store.load()
        assert info.value.offset == bad
        assert info.value.path == path
        assert f"offset {bad}" in str(info.value)
        with pytest.raises(StoreCorrupted):
            store.append([config("x", 1)])  # nothing is ever written after damage
    finally:
        store.close()
    assert path.read_bytes() == bytes(data)  # and nothing was truncated


def test_bad_magic_is_corruption(tmp_path: Path) -> None:
    log_path(tmp_path).write_bytes(b"NOTALOG!" + encode_frame(b"k", b"v"))
    with FileRecordStore.open(tmp_path) as store, pytest.raises(StoreCorrupted) as info:
        store.load()
    assert info.value.offset == 0


# --------------------------------------------------------------------------- compaction
def test_compaction_keeps_exactly_the_live_set_and_shrinks(tmp_path: Path) -> None:
    written: list[Record] = []
    with FileRecordStore.open(tmp_path, compact_min_bytes=4096, auto_compact=False) as store:
        store.load()
        for i in range(300):
            batch = [config(f"g{i % 7}", i), target(f"g{i % 5}", i)]
            if i % 11 == 0:
                batch.append(Record(RecordType.CONFIG, f"g{i % 7}"))
            written.extend(batch)
            store.commit(batch)
        before = log_path(tmp_path).stat().st_size
        assert store.should_compact()
        assert store.maybe_compact()
        after = log_path(tmp_path).stat().st_size
        assert after < before / 10
        assert store.size == after and store.frames == store.live_count
        assert store.load() == compacted(written)
        assert not (tmp_path / TMP_NAME).exists()
        assert not store.maybe_compact()
        # Appends after a compaction land in the new file.
        store.commit([target("late", 1)])
        written.append(target("late", 1))
    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == compacted(written)


def test_auto_compaction_after_sync(tmp_path: Path) -> None:
    written: list[Record] = []
    with FileRecordStore.open(tmp_path, compact_min_bytes=2048) as store:
        store.load()
        for i in range(200):
            written.append(config("g", i))
            store.commit([written[-1]])
        assert store.compactions > 0
        assert log_path(tmp_path).stat().st_size < 2048 + 100
    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == [config("g", 199)]


def test_stale_compaction_tmp_is_removed(tmp_path: Path) -> None:
    write_one_per_commit(tmp_path, [config("g", 1)])
    (tmp_path / TMP_NAME).write_bytes(HEADER + b"half a compaction")
    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == [config("g", 1)]
    assert not (tmp_path / TMP_NAME).exists()


# --------------------------------------------------------------------------- lock, lifecycle
def test_second_open_is_locked_out(tmp_path: Path) -> None:
    first = FileRecordStore.open(tmp_path)
    try:
        with pytest.raises(StoreLocked, match="locked by another bridge"):
            FileRecordStore.open(tmp_path)
    finally:
        first.close()
    FileRecordStore.open(tmp_path).close()  # released on close


def test_closed_store_refuses_work(tmp_path: Path) -> None:
    store = FileRecordStore.open(tmp_path)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.append([config("g", 1)])


def test_appends_racing_syncs_and_compactions_lose_nothing(tmp_path: Path) -> None:
    """The committer appends on the event loop while sync (and auto-compaction) runs in a thread."""
    written = [config(f"g{i % 3}", i) if i % 2 else target(f"g{i % 5}", i) for i in range(3000)]
    stop = threading.Event()
    with FileRecordStore.open(tmp_path, compact_min_bytes=2048) as store:
        store.load()

        def syncer() -> None:
            while not stop.is_set():
                store.sync()

        thread = threading.Thread(target=syncer)
        thread.start()
        try:
            for r in written:
                store.append([r])
        finally:
            stop.set()
            thread.join()
        store.sync()
        assert store.compactions > 0
        assert store.load() == compacted(written)
    with FileRecordStore.open(tmp_path) as store:
        assert store.load() == compacted(written)


def test_failed_fsync_poisons_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = FileRecordStore.open(tmp_path)
    store.append([config("g", 1)])

    def boom(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", boom)
        with pytest.raises(StoreError, match="write failed"):
            store.sync()
    # A retried fsync could "succeed" without the lost pages; the store must not pretend.
    with pytest.raises(StoreError, match="failed earlier"):
        store.commit([config("g", 2)])
    store.close()
    FileRecordStore.open(tmp_path).close()  # the lock is still released


# --------------------------------------------------------------------------- memory store
def test_memory_store_matches_file_semantics(tmp_path: Path) -> None:
    _coord, records = engine_run()
    mem = MemoryRecordStore.open()
    with FileRecordStore.open(tmp_path) as disk:
        for store in (mem, disk):
            store.commit(records[:7])
            store.append(records[7:])
            store.sync()
        assert mem.load() == disk.load() == compacted(records)
    assert mem.maybe_compact()
    assert mem.load() == compacted(records)


def test_memory_store_crash_loses_only_unsynced() -> None:
    mem = MemoryRecordStore()
    mem.commit([config("a", 1)])
    mem.append([config("b", 1)])
    survivor = mem.crash()
    assert survivor.load() == [config("a", 1)]
    with pytest.raises(StoreError):
        mem.load()


# --------------------------------------------------------------------------- property
def _record(kind: RecordType, group: str, n: int, tomb: bool) -> Record:
    if tomb:
        return Record(kind, group)
    return config(group, n) if kind is RecordType.CONFIG else target(group, n)


_records = st.builds(
    _record,
    st.sampled_from([RecordType.CONFIG, RecordType.TARGET_METADATA]),
    st.sampled_from(["a", "b", "c"]),
    st.integers(0, 1000),
    st.booleans(),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(st.lists(_records, min_size=1, max_size=4), min_size=1, max_size=8),
    cut=st.floats(0, 1),
    extra=st.integers(0, 1000),
)
def test_truncation_only_ever_loses_a_suffix(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[Record]], cut: float, extra: int
) -> None:
    state_dir = tmp_path_factory.mktemp("prop")
    ends = []  # file size after each commit
    with FileRecordStore.open(state_dir, auto_compact=False) as store:
        store.load()
        for batch in batches:
            store.commit(batch)
            ends.append(store.size)
    path = state_dir / LOG_NAME
    # A crash tears appended frames, never the header (a log appears with it; a cut into it is
    # damage, refused: test_a_log_without_its_header_is_refused).
    point = len(HEADER) + int(cut * (path.stat().st_size - len(HEADER)))
    os.truncate(path, point)

    written = [r for batch in batches for r in batch]
    must_have = sum(len(b) for b, end in zip(batches, ends, strict=True) if end <= point)
    with FileRecordStore.open(state_dir) as store:
        loaded = store.load()
        prefixes = [k for k in range(len(written) + 1) if compacted(written[:k]) == loaded]
        assert prefixes, "loaded state is not the compaction of any prefix"
        assert max(prefixes) >= must_have, "a record committed before the cut was lost"
        # The recovered log is a clean base for further writes.
        store.commit([target("z", extra)])
        k = max(prefixes)
    with FileRecordStore.open(state_dir) as store:
        assert store.load() == compacted([*written[:k], target("z", extra)])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(_records, min_size=1, max_size=6), min_size=1, max_size=40))
def test_compaction_never_changes_what_loads(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[Record]]
) -> None:
    state_dir = tmp_path_factory.mktemp("compact")
    written: list[Record] = []
    with FileRecordStore.open(state_dir, compact_min_bytes=256) as store:
        store.load()
        for batch in batches:
            store.commit(batch)
            written.extend(batch)
            assert store.load() == compacted(written)
    with FileRecordStore.open(state_dir) as store:
        assert store.load() == compacted(written)
