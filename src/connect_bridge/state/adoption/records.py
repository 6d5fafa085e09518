"""Who coordinates a group: the ``GROUP_OWNERSHIP`` record (issue 16, docs/adoption.md).

Adoption and hand-back move a live group between the upstream coordinator and the bridge. Exactly
one of them may answer the group's members at any time, and a bridge killed at any phase must come
back knowing which one it is. A CLASSIC_GROUP record alone cannot say that (a released group's last
snapshot still looks like a group the bridge coordinates, and a relayed group has no record at
all), so each phase change is written as this record, the latest value per group being the answer:

============ ====================================================================================
``relaying``  the upstream coordinates; the bridge relays the group's requests and observes them
``adopted``   the bridge coordinates, from ``generation`` (the upstream generation taken over)
``releasing`` hand-back in progress: members are being made to rejoin upstream
``released``  the upstream coordinates again (the bridge's own group is gone)
============ ====================================================================================

A group with no record was never adopted: the bridge's ordinary rules apply (it coordinates the
groups it is configured to coordinate). Pure: values and a table replayed from records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType

from connect_bridge.state.records import Record, RecordType


class OwnershipState(StrEnum):
    """The phase of a group between the two coordinators (the wire value is the index below)."""

    RELAYING = "relaying"
    ADOPTED = "adopted"
    RELEASING = "releasing"
    RELEASED = "released"

    @property
    def bridge_coordinates(self) -> bool:
        """Whether the bridge answers the group's requests itself (``releasing`` included: until
        the last member is handed back, the bridge's group is the only live one)."""
        return self in (OwnershipState.ADOPTED, OwnershipState.RELEASING)


WIRE_STATES: tuple[OwnershipState, ...] = tuple(OwnershipState)
"""``GroupOwnershipValue.State`` values, in wire order (0 relaying ... 3 released)."""

_NEXT: Mapping[OwnershipState | None, frozenset[OwnershipState]] = MappingProxyType(
    {
        None: frozenset({OwnershipState.RELAYING, OwnershipState.ADOPTED}),
        OwnershipState.RELAYING: frozenset({OwnershipState.ADOPTED}),
        OwnershipState.ADOPTED: frozenset({OwnershipState.RELEASING}),
        OwnershipState.RELEASING: frozenset({OwnershipState.RELEASED}),
        OwnershipState.RELEASED: frozenset({OwnershipState.RELAYING, OwnershipState.ADOPTED}),
    }
)
"""Allowed phase changes. There is no way back from ``adopted`` to ``relaying`` except through a
hand-back, nor from ``releasing`` to ``adopted``: members already sent upstream cannot be recalled
without a second group forming, which is the split brain the phases exist to prevent."""


class OwnershipError(ValueError):
    """A phase change the table does not allow (a bug in the caller, or a command at the wrong time)."""


@dataclass(frozen=True, slots=True)
class GroupOwnership:
    """The value of a ``GROUP_OWNERSHIP`` record."""

    state: OwnershipState
    generation: int = -1
    """``adopted``: the upstream generation taken over; ``releasing``/``released``: the bridge's
    generation when the hand-back started; ``relaying``: -1."""
    timestamp_ms: int = -1
    """``now_ms`` when the group entered ``state``."""
    hold_until_ms: int = -1
    """``releasing``: the hand-back is not finished before this time, because a member removed
    by a timer may still run its work until then (``GroupCoordinator.hold_hand_back``); -1: no
    hold. A tagged field of the record, so records written without it replay as -1."""
    rounds_due: tuple[str, ...] = ()
    """``releasing``/``released``: the workers (``handback.unsynced_round_key``) a timer removed
    from the bridge's cooperative group during the hand-back, which have not had their unsynced
    leader round yet; each gets it at its next JoinGroup, ``released`` or not, so that its assignor
    does not lead upstream remembering a bridge generation (docs/adoption.md "Hand-back"). A
    tagged field: records written without it replay as none due."""


def ownership_record(group_id: str, value: GroupOwnership | None) -> Record:
    """The ``GROUP_OWNERSHIP`` record of ``group_id`` (``None``: the tombstone, the group forgotten)."""
    return Record(RecordType.GROUP_OWNERSHIP, group_id, "", value)


def check_transition(current: OwnershipState | None, target: OwnershipState) -> None:
    """Raise :class:`OwnershipError` unless ``current -> target`` is an allowed phase change."""
    if target not in _NEXT[current]:
        shown = current.value if current is not None else "none"
        raise OwnershipError(f"a group cannot go from {shown} to {target.value}")


class OwnershipTable:
    """The latest ownership per group, changed only by applying records (as replay does)."""

    def __init__(self) -> None:
        self._by_group: dict[str, GroupOwnership] = {}

    def get(self, group_id: str) -> GroupOwnership | None:
        return self._by_group.get(group_id)

    def state(self, group_id: str) -> OwnershipState | None:
        value = self._by_group.get(group_id)
        return value.state if value is not None else None

    def apply(self, record: Record) -> None:
        """Replay one ``GROUP_OWNERSHIP`` record (others are ignored)."""
        if record.type is not RecordType.GROUP_OWNERSHIP:
            return
        if record.value is None:
            self._by_group.pop(record.group_id, None)
            return
        assert isinstance(record.value, GroupOwnership)
        self._by_group[record.group_id] = record.value

    def forget(self, group_id: str) -> None:
        """Drop the entry without a record: the group's partition went to another bridge, whose
        replay of the same records knows it."""
        self._by_group.pop(group_id, None)

    def change(
        self,
        group_id: str,
        target: OwnershipState,
        generation: int,
        now_ms: int,
        rounds_due: tuple[str, ...] = (),
    ) -> Record:
        """The record moving ``group_id`` to ``target``, applied here; the caller persists it.

        Raises :class:`OwnershipError` for a change ``_NEXT`` does not allow."""
        check_transition(self.state(group_id), target)
        value = GroupOwnership(target, generation, now_ms, rounds_due=tuple(sorted(rounds_due)))
        record = ownership_record(group_id, value)
        self.apply(record)
        return record

    def rounds(self, group_id: str, due: set[str]) -> Record | None:
        """The record setting the workers still due an unsynced leader round of a ``releasing`` or
        ``released`` group (same phase, generation, timestamp and hold), applied here; None when
        that is already the set. Not a phase change."""
        value = self._by_group.get(group_id)
        if value is None or value.state not in (OwnershipState.RELEASING, OwnershipState.RELEASED):
            raise OwnershipError(f"only a group being or having been handed back owes rounds, not {group_id}")
        rounds_due = tuple(sorted(due))
        if rounds_due == value.rounds_due:
            return None
        record = ownership_record(group_id, replace(value, rounds_due=rounds_due))
        self.apply(record)
        return record

    def hold(self, group_id: str, until_ms: int) -> Record | None:
        """The record extending the hand-back hold of a ``releasing`` group to ``until_ms`` (same
        phase, generation and timestamp), applied here; None when the hold already reaches that
        far. Not a phase change: ``check_transition`` is not involved."""
        value = self._by_group.get(group_id)
        if value is None or value.state is not OwnershipState.RELEASING:
            raise OwnershipError(f"only a releasing group holds its hand-back, not {group_id}")
        if until_ms <= value.hold_until_ms:
            return None
        record = ownership_record(group_id, replace(value, hold_until_ms=until_ms))
        self.apply(record)
        return record

    def snapshot(self) -> dict[str, GroupOwnership]:
        """Comparable form (replay tests compare these)."""
        return dict(sorted(self._by_group.items()))


__all__ = [
    "WIRE_STATES",
    "GroupOwnership",
    "OwnershipError",
    "OwnershipState",
    "OwnershipTable",
    "check_transition",
    "ownership_record",
]
