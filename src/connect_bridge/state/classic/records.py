"""The classic group's one record type, ``CLASSIC_GROUP``, and the helper that builds it.

Like Kafka's ``GroupMetadataValue`` the record is a whole-group snapshot: the latest one is the
group, a tombstone (``None``) deletes it. :func:`classic_group_record` is the only place a classic
record is built (Kafka's ``GroupCoordinatorRecordHelpers.newGroupMetadataRecord`` and
``newGroupMetadataTombstoneRecord``), so the log and ``ClassicGroup.apply`` (replay) always see
the same shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from connect_bridge.state.model import ANONYMOUS
from connect_bridge.state.records import Record, RecordType

Protocols = tuple[tuple[str, bytes], ...]
"""(protocol name, metadata) in the member's order of preference."""


class ClassicJoin(Protocol):
    """What a classic member told in its JoinGroup: a request carries it, and the bridge's own
    classic members and the upstream members an adoption observes keep it."""

    @property
    def member_id(self) -> str: ...
    @property
    def group_instance_id(self) -> str | None: ...
    @property
    def client_id(self) -> str: ...
    @property
    def client_host(self) -> str: ...
    @property
    def rebalance_timeout_ms(self) -> int: ...
    @property
    def session_timeout_ms(self) -> int: ...
    @property
    def protocols(self) -> Protocols: ...


@dataclass(frozen=True, slots=True)
class ClassicMemberSnapshot:
    """One member as persisted: everything needed to serve it again after a restart."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocols: Protocols
    """Every protocol the member advertised, in its order (Kafka keeps only the elected one)."""
    assignment: bytes
    principal: str = ANONYMOUS
    """Who created the member (``state.ownership``); a tagged field of the record."""

    @classmethod
    def of(cls, member: ClassicJoin, assignment: bytes, principal: str) -> ClassicMemberSnapshot:
        """A member as persisted, from what it joined with. One builder for the bridge's own
        classic members and for the upstream members an adoption takes over, so both persist the
        same fields."""
        return cls(
            member.member_id,
            member.group_instance_id,
            member.client_id,
            member.client_host,
            member.rebalance_timeout_ms,
            member.session_timeout_ms,
            member.protocols,
            assignment,
            principal,
        )


@dataclass(frozen=True, slots=True)
class ClassicGroupSnapshot:
    """The value of a ``CLASSIC_GROUP`` record: the whole group (Kafka's ``GroupMetadataValue``)."""

    generation: int
    protocol_type: str
    """"" when the group never had a member (Kafka writes "" for an absent protocol type)."""
    protocol_name: str | None
    leader: str | None
    member_seq: int
    """Counter behind generated member ids, so ids stay unique across restarts."""
    members: tuple[ClassicMemberSnapshot, ...]
    current_state_timestamp: int = -1
    """``now_ms`` when the group entered the state it was persisted in (Kafka's field of that name)."""
    extra_rebalance_at_ms: int = -1
    """When one more rebalance of this generation starts (the round after leaving eager,
    docs/classic-group.md deviation 11), or -1; a tagged field of the record."""


def classic_group_record(group_id: str, value: ClassicGroupSnapshot | None) -> Record:
    """The ``CLASSIC_GROUP`` record of ``group_id``: a snapshot, or ``None`` for the tombstone."""
    return Record(RecordType.CLASSIC_GROUP, group_id, "", value)


def empty_group_snapshot(generation: int, member_seq: int, state_timestamp: int) -> ClassicGroupSnapshot:
    """Kafka's ``newEmptyGroupMetadataRecord`` value, written when a JoinGroup creates the group."""
    return ClassicGroupSnapshot(generation, "", None, None, member_seq, (), state_timestamp)


__all__ = [
    "ClassicGroupSnapshot",
    "ClassicMemberSnapshot",
    "Protocols",
    "classic_group_record",
    "empty_group_snapshot",
]
