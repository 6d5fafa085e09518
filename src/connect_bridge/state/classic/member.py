"""A member of a classic group (Kafka's ``ClassicGroupMember``) and Java's hash order.

The member carries both persisted fields (those :class:`ClassicMemberSnapshot` holds, set from the
group's record by :meth:`ClassicMember.load`) and soft ones: ``is_new``, the parked
JoinGroup/SyncGroup, the session key and the fields marked soft below, which only mean something to
the process holding the client's connection, so a reload starts without them (as Kafka's futures
do).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from connect_bridge.state.classic.records import ClassicMemberSnapshot, Protocols
from connect_bridge.state.errors import IllegalStateError
from connect_bridge.state.model import ANONYMOUS
from connect_bridge.state.timers import TimerKey


@dataclass(slots=True, eq=False)
class ParkedRequest:
    """A JoinGroup/SyncGroup waiting for the group (Kafka's response future)."""

    token: Any
    api_version: int


@dataclass(slots=True)
class ClassicMember:
    """A member of a classic group (Kafka's ``ClassicGroupMember``)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    is_new: bool = False
    """Added by the current rebalance and not yet answered: its session runs on the new-member
    join timeout and parking does not keep it alive (Kafka's ``isNew``)."""
    principal: str = ANONYMOUS
    """Who created the member: only that principal may act on it (``state.ownership``)."""
    parked_join: ParkedRequest | None = None
    parked_sync: ParkedRequest | None = None
    session_key: TimerKey | None = field(default=None, compare=False, repr=False)
    """The member's session timer key, built once by its group (every heartbeat re-arms it)."""
    waits_elsewhere_until_ms: int | None = field(default=None, compare=False)
    """Soft, set when the group is loaded from the log: until then the member may still wait on a
    request it sent to the previous coordinator, running its tasks (``holds.first_session_after_load_ms``),
    so work it may run stays held at least that long whatever removes it."""
    refused_stale_join: Protocols | None = field(default=None, compare=False)
    """Soft: the protocols of a JoinGroup refused once as a possibly stale copy
    (``classic.join._reports_less_than_given``); the same protocols again are taken as its join."""
    told_to_rejoin: bool = field(default=False, compare=False)
    """Soft: since the member was last given an assignment, an answer told it to rejoin
    (REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION to its Heartbeat or SyncGroup). An eager worker's
    JoinGroup after that is its own; before it, a JoinGroup repeating its last one may be a stale
    copy (``classic.join``). A reload forgets it: the next such join is refused once."""
    synced_protocol: str | None = field(default=None, compare=False)
    """The elected protocol of the last generation whose assignment this member was given (soft:
    a reload forgets it). A Connect worker whose last one was cooperative has not stopped its work
    before joining an eager generation (``classic.eager_hold``)."""

    @property
    def awaiting_join(self) -> bool:
        return self.parked_join is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.parked_sync is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        raise IllegalStateError(f"member {self.member_id} does not support protocol {protocol_name}")

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise IllegalStateError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        """A parked JoinGroup/SyncGroup stands in for heartbeats, except for brand-new members."""
        return not self.is_new and (self.awaiting_join or self.awaiting_sync)

    def to_snapshot(self) -> ClassicMemberSnapshot:
        return ClassicMemberSnapshot.of(self, self.assignment, self.principal)

    def load(self, s: ClassicMemberSnapshot, protocol_type: str) -> None:
        """Take the persisted fields from the group's record, keeping the soft ones (applying a
        record to a live group must not drop a parked request or a session key)."""
        self.group_instance_id = s.group_instance_id
        self.client_id = s.client_id
        self.client_host = s.client_host
        self.rebalance_timeout_ms = s.rebalance_timeout_ms
        self.session_timeout_ms = s.session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = s.protocols
        self.assignment = s.assignment
        self.principal = s.principal

    @classmethod
    def from_snapshot(cls, s: ClassicMemberSnapshot, protocol_type: str) -> ClassicMember:
        return cls(
            s.member_id,
            s.group_instance_id,
            s.client_id,
            s.client_host,
            s.rebalance_timeout_ms,
            s.session_timeout_ms,
            protocol_type,
            s.protocols,
            s.assignment,
            principal=s.principal,
        )

    def renamed(self, member_id: str) -> ClassicMember:
        """The same member under a new id, neither new nor parked (a replaced static member)."""
        return replace(
            self,
            member_id=member_id,
            is_new=False,
            parked_join=None,
            parked_sync=None,
            session_key=None,
            synced_protocol=None,
        )


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` as an unsigned 32-bit value (over UTF-16 code units, like Java)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of a ``java.util.HashMap`` holding ``keys`` (given in insertion order).

    Kafka's protocol vote breaks ties by taking the first maximum in the vote map's iteration order,
    which is bucket order: ``(h ^ h >>> 16) & (capacity - 1)``, insertion order within a bucket.
    """
    keys = list(keys)
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = java_string_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)  # stable: insertion order within a bucket


__all__ = [
    "ClassicMember",
    "IllegalStateError",
    "ParkedRequest",
    "java_hashmap_order",
    "java_string_hash",
]
