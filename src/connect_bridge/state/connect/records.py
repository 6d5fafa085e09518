"""The records of a ``connect`` group, one builder per record type (Kafka's GroupCoordinatorRecordHelpers).

A connect group changes its persisted state only by applying these records (``ConnectGroup.write``),
with the same ``apply`` that replays them after a restart: naming each record here keeps
the key layout and the tombstone shape of every type in one place instead of at every call site.
"""

from __future__ import annotations

from connect_bridge.state.model import (
    NO_METADATA,
    AssignedMetadata,
    CurrentAssignment,
    GroupMetadata,
    Items,
    MemberMetadata,
    TargetMetadata,
    target_member_value,
)
from connect_bridge.state.records import Record, RecordType


def group_metadata_record(group_id: str, metadata: GroupMetadata) -> Record:
    return Record(RecordType.GROUP_METADATA, group_id, "", metadata)


def group_metadata_tombstone(group_id: str) -> Record:
    return Record(RecordType.GROUP_METADATA, group_id, "", None)


def target_metadata_record(group_id: str, metadata: TargetMetadata) -> Record:
    return Record(RecordType.TARGET_METADATA, group_id, "", metadata)


def target_metadata_tombstone(group_id: str) -> Record:
    return Record(RecordType.TARGET_METADATA, group_id, "", None)


def target_member_record(
    group_id: str, member_id: str, items: Items, assigned: AssignedMetadata = NO_METADATA
) -> Record:
    """A member's target; the assignor's metadata rides along only when there is some."""
    return Record(RecordType.TARGET_MEMBER, group_id, member_id, target_member_value(items, assigned))


def target_member_tombstone(group_id: str, member_id: str) -> Record:
    return Record(RecordType.TARGET_MEMBER, group_id, member_id, None)


def member_metadata_record(group_id: str, member_id: str, metadata: MemberMetadata) -> Record:
    return Record(RecordType.MEMBER_METADATA, group_id, member_id, metadata)


def current_assignment_record(group_id: str, member_id: str, current: CurrentAssignment) -> Record:
    return Record(RecordType.CURRENT_ASSIGNMENT, group_id, member_id, current)


def member_tombstones(group_id: str, member_id: str) -> tuple[Record, Record]:
    """Deleting a member: its current assignment, then its metadata (the order replay expects:
    the metadata tombstone is what removes the member)."""
    return (
        Record(RecordType.CURRENT_ASSIGNMENT, group_id, member_id, None),
        Record(RecordType.MEMBER_METADATA, group_id, member_id, None),
    )
