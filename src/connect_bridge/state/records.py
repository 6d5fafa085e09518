"""State changes as records, and replay.

Every mutation of a group is described by records (seed 000 "Records", plus a config record and a
classic-group record). Values are the frozen model objects themselves, so "the records of a run"
and "the state of a run" cannot drift apart; ``record_codec`` maps them to the JSON-spec bytes.
A ``None`` value is a tombstone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class RecordType(IntEnum):
    GROUP_METADATA = 1
    CONFIG = 2
    MEMBER_METADATA = 3
    TARGET_METADATA = 4
    TARGET_MEMBER = 5
    CURRENT_ASSIGNMENT = 6
    CLASSIC_GROUP = 7


@dataclass(frozen=True, slots=True)
class Record:
    type: RecordType
    group_id: str
    member_id: str = ""
    value: object | None = None

    @property
    def key(self) -> tuple[int, str, str]:
        """Compaction key: the latest record per key is the state."""
        return (int(self.type), self.group_id, self.member_id)

    @property
    def is_tombstone(self) -> bool:
        return self.value is None
