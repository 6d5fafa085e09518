"""Deterministic timers for the pure coordinator.

The coordinator never reads a clock: callers pass ``now_ms`` in and ask ``next_deadline()`` when to
call back. Session timers are pushed back on every heartbeat, so extending a deadline only updates a
dict; the heap entry is re-queued lazily when it surfaces. That keeps a heartbeat O(1).
"""

from __future__ import annotations

import heapq
from enum import StrEnum
from typing import NamedTuple


class TimerKind(StrEnum):
    """Every timer the engine arms. The value is what logs and snapshots show."""

    SESSION = "session"
    REVOKE = "revoke"
    HELD = "held"
    COMPUTE = "compute"
    LEGACY_JOIN = "legacy-join"
    LEGACY_SYNC = "legacy-sync"
    CLASSIC_SESSION = "classic-session"
    CLASSIC_JOIN = "classic-join"
    CLASSIC_SYNC = "classic-sync"
    CLASSIC_SWITCH = "classic-switch"
    EMPTY = "empty"

    @property
    def is_connect(self) -> bool:
        """Handled by a connect group (the rest belong to a classic group; ``empty``, of either
        kind, by the coordinator itself: ``state.empty_groups``)."""
        return not self.value.startswith("classic-")


class TimerKey(NamedTuple):
    """Which timer: its kind, its group and, for a per-member timer, the member.

    A tuple so that it hashes and compares cheaply (a heartbeat re-arms one on every call); build
    it with the named constructors, which say which timers are per group and which per member.
    """

    kind: TimerKind
    group_id: str
    member_id: str = ""

    @classmethod
    def of(cls, kind: TimerKind | str, group_id: str, member_id: str = "") -> TimerKey:
        """A key from its parts; an unknown kind is a ValueError, never a timer that cannot fire."""
        return cls(TimerKind(kind), group_id, member_id)

    @staticmethod
    def session(group_id: str, member_id: str) -> TimerKey:
        return TimerKey(TimerKind.SESSION, group_id, member_id)

    @staticmethod
    def revoke(group_id: str, member_id: str) -> TimerKey:
        return TimerKey(TimerKind.REVOKE, group_id, member_id)

    @staticmethod
    def legacy_join(group_id: str, member_id: str) -> TimerKey:
        return TimerKey(TimerKind.LEGACY_JOIN, group_id, member_id)

    @staticmethod
    def legacy_sync(group_id: str, member_id: str) -> TimerKey:
        return TimerKey(TimerKind.LEGACY_SYNC, group_id, member_id)

    @staticmethod
    def classic_session(group_id: str, member_id: str) -> TimerKey:
        return TimerKey(TimerKind.CLASSIC_SESSION, group_id, member_id)

    @staticmethod
    def held(group_id: str) -> TimerKey:
        return TimerKey(TimerKind.HELD, group_id)

    @staticmethod
    def compute(group_id: str) -> TimerKey:
        return TimerKey(TimerKind.COMPUTE, group_id)

    @staticmethod
    def classic_join(group_id: str) -> TimerKey:
        return TimerKey(TimerKind.CLASSIC_JOIN, group_id)

    @staticmethod
    def classic_sync(group_id: str) -> TimerKey:
        return TimerKey(TimerKind.CLASSIC_SYNC, group_id)

    @staticmethod
    def classic_switch(group_id: str) -> TimerKey:
        return TimerKey(TimerKind.CLASSIC_SWITCH, group_id)

    @staticmethod
    def empty(group_id: str) -> TimerKey:
        return TimerKey(TimerKind.EMPTY, group_id)


class Timers:
    """Armed timers by key. Only ``TimerKey``s are accepted: a raw tuple is refused where it is
    armed, so a misspelt kind fails in the code that wrote it, not later when it fires."""

    def __init__(self) -> None:
        self._deadline: dict[TimerKey, int] = {}
        self._queued: dict[TimerKey, int] = {}
        self._heap: list[tuple[int, int, TimerKey]] = []
        self._seq = 0

    def __contains__(self, key: TimerKey) -> bool:
        return key in self._deadline

    def deadline(self, key: TimerKey) -> int | None:
        return self._deadline.get(key)

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        if type(key) is not TimerKey:
            raise TypeError(f"timer key {key!r} is not a TimerKey")
        self._deadline[key] = deadline_ms
        queued = self._queued.get(key)
        if queued is not None and queued <= deadline_ms:
            return  # surfaces earlier and is re-queued then
        self._push(key, deadline_ms)

    def cancel(self, key: TimerKey) -> None:
        self._deadline.pop(key, None)

    def _push(self, key: TimerKey, deadline_ms: int) -> None:
        self._queued[key] = deadline_ms
        self._seq += 1
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))

    def next_deadline(self) -> int | None:
        heap = self._heap
        while heap:
            deadline, _, key = heap[0]
            actual = self._deadline.get(key)
            if self._queued.get(key) != deadline:
                heapq.heappop(heap)  # a stale duplicate entry
                continue
            if actual is None:
                heapq.heappop(heap)
                del self._queued[key]
                continue
            if actual > deadline:
                heapq.heappop(heap)
                self._push(key, actual)
                continue
            return deadline
        return None

    def pop_due(self, now_ms: int) -> TimerKey | None:
        """Remove and return the earliest key due at ``now_ms`` (one at a time, so a handler that
        cancels or re-arms another due timer is respected)."""
        deadline = self.next_deadline()
        if deadline is None or deadline > now_ms:
            return None
        _, _, key = heapq.heappop(self._heap)
        del self._queued[key]
        del self._deadline[key]
        return key

    def expired(self, now_ms: int) -> list[TimerKey]:
        """Remove and return the keys whose deadline is <= now, earliest first (ties: scheduling order)."""
        out = []
        while (key := self.pop_due(now_ms)) is not None:
            out.append(key)
        return out

    def keys(self) -> list[TimerKey]:
        return list(self._deadline)
