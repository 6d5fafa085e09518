"""State changes as records, and replay.

Every mutation of a group is described by records (seed 000 "Records", plus a config record and a
classic-group record). Values are the frozen model objects themselves, so "the records of a run"
and "the state of a run" cannot drift apart; ``record_codec`` maps them to the JSON-spec bytes.
A ``None`` value is a tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from connect_bridge.codecs.records import RecordType as WireRecordType


class RecordType(IntEnum):
    """Record types by the engine's names; the values are the wire ids (key versions)."""

    GROUP_METADATA = WireRecordType.CONNECT_GROUP_METADATA
    CONFIG = WireRecordType.CONNECT_GROUP_CONFIG_METADATA
    MEMBER_METADATA = WireRecordType.CONNECT_GROUP_MEMBER_METADATA
    TARGET_METADATA = WireRecordType.CONNECT_GROUP_TARGET_ASSIGNMENT_METADATA
    TARGET_MEMBER = WireRecordType.CONNECT_GROUP_TARGET_ASSIGNMENT_MEMBER
    CURRENT_ASSIGNMENT = WireRecordType.CONNECT_GROUP_CURRENT_MEMBER_ASSIGNMENT
    CLASSIC_GROUP = WireRecordType.CLASSIC_GROUP_METADATA
    GROUP_OWNERSHIP = WireRecordType.GROUP_OWNERSHIP


@dataclass(frozen=True, slots=True)
class Record:
    type: RecordType
    group_id: str
    member_id: str = ""
    value: Any = None

    @property
    def key(self) -> tuple[int, str, str]:
        """Compaction key: the latest record per key is the state."""
        return (int(self.type), self.group_id, self.member_id)

    @property
    def is_tombstone(self) -> bool:
        return self.value is None
