"""What one coordinator step produced, as a value: ``bridge/coordination/runtime.py`` applies it.

Kafka's coordinator methods return a ``CoordinatorResult`` (records to append, the response) and
its ``CoordinatorRuntime`` appends the records, completes the response once they are committed and
schedules timers. :class:`CoordinatorResult` is that value here, with the parts a classic group
adds: the parked JoinGroup/SyncGroup answers the step released, and the classic groups whose state
changed without a record (a rebalance that began writes nothing until its generation completes).

The coordinator builds it from the groups the step changed (:class:`Touched`), not by passing over
every group: a steady heartbeat costs the same with ten groups or ten thousand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from connect_bridge.state.records import Record

R = TypeVar("R")

Touched = dict[str, None]
"""The ids of the groups changed since the coordinator last built a result, in the order they were
first changed (an ordered set). A group marks itself when it queues a record or a parked answer or
changes its classic state; the coordinator marks the groups it creates, converts, deletes or
unloads."""


@dataclass(frozen=True, slots=True)
class CoordinatorResult(Generic[R]):
    """The effects of one step. Records must be durable before ``response`` (or anything else that
    depends on them) is revealed; ``released`` answers wait for them as well."""

    response: R
    """The step's own answer (None for a parked request or a step that answers nobody)."""
    records: list[Record]
    """Records the step wrote, already applied to the coordinator's memory, in order per group."""
    released: list[tuple[object, object]]
    """Parked JoinGroup/SyncGroup answers released by the step: (the request's token, response)."""
    classic_changed: frozenset[str]
    """Classic groups whose state changed, or that were deleted or converted (the metrics follow
    records, and would otherwise miss a rebalance that began and never completed)."""
    next_deadline: int | None
    """The earliest timer deadline after the step (None: no timer armed)."""

    @property
    def touched_groups(self) -> set[str]:
        """The groups whose metrics the step may have changed."""
        return {r.group_id for r in self.records} | self.classic_changed


__all__ = ["CoordinatorResult", "Touched"]
