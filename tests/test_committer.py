"""The committer's group commit with a store whose writes another bridge can fence.

The partitioned state store (several bridges) returns from ``sync`` the partitions whose writes
were fenced. Every response that waited for one of those syncs must fail (it might reveal a record
that is not durable), also one that comes to wait only afterwards; responses computed later, and
responses that write nothing, must not be caught by the old fence. The store here is the memory
store with a scripted answer, since fencing itself is proved against Kafka in
``tests/test_partitioned_store.py`` and ``tests/test_ha*.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from connect_bridge.bridge.stores.committer import Committer, Fenced
from connect_bridge.bridge.stores.store import MemoryRecordStore
from connect_bridge.state.records import Record, RecordType


class FencedOnce(MemoryRecordStore):
    """The memory store, whose next sync reports partition 3 fenced when ``fence_next`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fence_next = False

    def sync(self) -> frozenset[int] | None:  # type: ignore[override]
        super().sync()
        fenced, self.fence_next = self.fence_next, False
        return frozenset({3}) if fenced else None


def record(group: str) -> Sequence[Record]:
    return [Record(RecordType.CLASSIC_GROUP, group, "", None)]


def test_waiters_of_a_fenced_sync_fail_and_later_answers_do_not() -> None:
    async def scenario() -> None:
        store = FencedOnce()
        seen: list[frozenset[int]] = []
        committer = Committer(store, on_fenced=seen.append)
        committer.start()
        store.fence_next = True
        seq = committer.submit(record("a"))
        with pytest.raises(Fenced):
            await committer.durable(seq)
        assert seen == [frozenset({3})]
        with pytest.raises(Fenced):  # one that comes to wait only afterwards fails too
            await committer.durable(seq)
        assert not committer.is_durable(seq)
        empty = committer.submit([])  # an answer that writes nothing is not caught by the fence
        assert empty != seq
        await asyncio.wait_for(committer.durable(empty), 5)
        later = committer.submit(record("b"))
        await asyncio.wait_for(committer.durable(later), 5)
        assert committer.is_durable(later)
        await committer.close()

    asyncio.run(scenario())
