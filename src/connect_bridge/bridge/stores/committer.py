"""Group commit: records become durable before any response that could reveal them leaves.

Every coordinator step hands its records to the committer and gets a sequence number; a response is
released once everything up to that number is fsynced. Writes of one event-loop turn are batched
into a single fsync, run in a worker thread so the loop keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from connect_bridge.state.records import Record

log = logging.getLogger(__name__)


class RecordSink(Protocol):
    """The part of a ``RecordStore`` the committer uses: it only writes, the server loads and closes.

    ``sync`` of the partitioned store (several bridges) returns the partitions whose writes were
    fenced by another bridge; the other stores return None."""

    def append(self, records: Sequence[Record]) -> None: ...
    def sync(self) -> frozenset[int] | None: ...


class Fenced(RuntimeError):
    """A response waited for records that another bridge fenced off: it must never be sent."""


class Committer:
    """Group commit over one store (module docstring). ``on_fsync`` gets each sync's duration (the
    server's fsync histogram); ``on_failure`` gets the error of a failed sync, after which the
    committer stops and every waiter fails, because a store that lost a write is never trusted
    again."""

    def __init__(
        self,
        store: RecordSink,
        on_fsync: Callable[[float], None] | None = None,
        on_failure: Callable[[BaseException], None] | None = None,
        on_fenced: Callable[[frozenset[int]], None] | None = None,
    ) -> None:
        self.store = store
        self.on_fsync = on_fsync
        self.on_failure = on_failure
        self.on_fenced = on_fenced
        """Called on the loop with the fenced partitions of a sync, before any waiter of that sync
        is released (the server unloads their groups)."""
        self._written = 0  # sequence of the last record batch handed to the store
        self._durable = 0  # sequence of the last batch known to be on disk
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.failed: BaseException | None = None
        self._fenced: list[tuple[int, int]] = []
        """Sequence ranges (after, up to] of syncs that had fenced partitions: their waiters fail,
        also those that only come to wait later."""

    def start(self) -> None:
        """Start the sync task on the running loop (the constructor may run before there is one)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="committer")

    @property
    def written(self) -> int:
        """The sequence of the last batch handed to the store (what a response computed now awaits)."""
        return self._written

    def is_durable(self, seq: int) -> bool:
        """Whether a response waiting for ``seq`` may leave now, without awaiting ``durable``
        (False for a fenced one: ``durable`` then says why)."""
        return seq <= self._durable and not (self._fenced and self._was_fenced(seq))

    def _was_fenced(self, seq: int) -> bool:
        return bool(self._fenced) and any(after < seq <= upto for after, upto in self._fenced)

    def submit(self, records: Sequence[Record]) -> int:
        """Write ``records`` (buffered) and return the sequence a response must wait for."""
        if records:
            self.store.append(records)
            self._written += 1
            self._wake.set()
        return self._written

    async def durable(self, seq: int) -> None:
        """Wait until every batch up to ``seq`` is fsynced."""
        if self.failed is not None:
            raise RuntimeError("the record store failed") from self.failed
        if self._was_fenced(seq):
            raise Fenced("the writes this response waited for were fenced")
        if seq <= self._durable:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, future))
        self._wake.set()
        await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            target = self._written
            if target > self._durable:
                started = loop.time()
                try:
                    fenced = await loop.run_in_executor(None, self.store.sync)
                except BaseException as exc:  # a failing disk must not be hidden: fail every waiter
                    log.error("record store fsync failed: %s", exc)
                    self.failed = exc
                    for _, future in self._waiters:
                        if not future.done():
                            future.set_exception(RuntimeError("the record store failed"))
                    self._waiters.clear()
                    if self.on_failure is not None:
                        self.on_failure(exc)
                    return
                if self.on_fsync is not None:
                    self.on_fsync(loop.time() - started)
                before, self._durable = self._durable, target
                if fenced:
                    self._fence(fenced, before)
            ready = [w for w in self._waiters if w[0] <= self._durable]
            self._waiters = [w for w in self._waiters if w[0] > self._durable]
            for _, future in ready:
                if not future.done():
                    future.set_result(None)

    def _fence(self, partitions: frozenset[int], before: int) -> None:
        """Some records of the batches up to ``_durable`` were not written (another bridge owns their
        partitions now). Which response revealed which record is not known here, so every waiter
        of those batches fails (its connection is closed; the client retries and finds the new
        coordinator): a response must never reveal a record that is not durable."""
        self._fenced.append((before, self._durable))
        if self.on_fenced is not None:
            self.on_fenced(partitions)
        for seq, future in self._waiters:
            if seq <= self._durable and not future.done():
                future.set_exception(Fenced(f"the writes of partitions {sorted(partitions)} were fenced"))
        self._waiters = [w for w in self._waiters if w[0] > self._durable]
        if self._written == self._durable:
            # A response that writes nothing waits for ``written``: move it past the fenced range,
            # or every such answer after a fence would fail until the next write.
            self._written = self._durable = self._durable + 1

    async def close(self) -> None:
        """Flush what is pending, then stop."""
        if self._written > self._durable and self.failed is None:
            await self.durable(self._written)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
