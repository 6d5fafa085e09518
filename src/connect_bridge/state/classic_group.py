"""A ``classic`` group: the JoinGroup/SyncGroup barrier protocol, run as an Apache Kafka broker runs it.

This is Kafka's ``ClassicGroup`` plus the classic path of ``GroupMetadataManager`` (join, sync,
heartbeat, leave, the join/sync/heartbeat timers, the initial rebalance delay), for groups whose
members are all legacy Connect workers. Metadata and assignments are opaque bytes: the group elects
a protocol by vote and relays bytes between the leader and the followers; it never decodes them.

Kafka completes JoinGroup/SyncGroup futures later; here a handler returns either the response or
``None`` (parked). A parked request's response comes out of ``drain_responses()`` tagged with the
request's ``token``. A request whose own response is produced during the same call (the last member
completing the join barrier, the leader's SyncGroup) gets it as the return value instead.

Pure and deterministic (DESIGN.md §2): time is ``now_ms``, timers are entries in the shared
:class:`Timers`, member ids come from a persisted counter, and every persisted change is a
``CLASSIC_GROUP`` record (a whole-group snapshot, like Kafka's ``GroupMetadata`` record).
Deliberate differences from Kafka are listed in ``docs/classic-group.md``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic_api import (
    ClassicGroupState,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.records import Record, RecordType
from connect_bridge.state.timers import Timers

PROTOCOL_TYPE_CONNECT = "connect"
"""The protocol type of Kafka Connect's embedded protocol (a classic group of Connect workers)."""

SESSION_TIMER = "classic-session"
"""``(SESSION_TIMER, group_id, member_id)``: heartbeat expiry of a member or of a pending member."""
JOIN_TIMER = "classic-join"
"""``(JOIN_TIMER, group_id)``: end of the join phase (initial delay or rebalance timeout)."""
SYNC_TIMER = "classic-sync"
"""``(SYNC_TIMER, group_id)``: members that have not sent SyncGroup by then are removed."""
SWITCH_TIMER = "classic-switch"
"""``(SWITCH_TIMER, group_id)``: the extra rebalance after a switch from eager to cooperative."""
EAGER_PROTOCOL = "default"
"""Connect's eager protocol name; ``compatible`` and ``sessioned`` are cooperative."""

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
"""Kafka's ``group.classic.new.member.join.timeout.ms`` (internal, 5 minutes): how long a brand-new
member's parked JoinGroup may wait before the member is dropped (it cannot heartbeat yet)."""

SKIP_ASSIGNMENT_MIN_VERSION = 9
"""JoinGroup v9 added ``SkipAssignment`` (Kafka's ``JoinGroupRequest.supportsSkippingAssignment``)."""
MEMBER_ID_REQUIRED_MIN_VERSION = 4
"""JoinGroup v4 added the MEMBER_ID_REQUIRED round trip (``JoinGroupRequest.requiresKnownMemberId``)."""

_MEMBER_ID_NAMESPACE = uuid.UUID("3f0c9a56-2b7e-4d1a-8c65-9e4b1d7a2f30")

Protocols = tuple[tuple[str, bytes], ...]


_S = ClassicGroupState
_VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(_S),
}
"""Kafka's ``validPreviousStates``: a transition from anywhere else is a bug, not a request error."""


class IllegalStateError(RuntimeError):
    """An internal invariant broke (Kafka throws IllegalStateException in the same places)."""


# ---------------------------------------------------------------------------------------- records


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


# ---------------------------------------------------------------------------------------- describe


@dataclass(frozen=True, slots=True)
class ClassicDescribedMember:
    """A DescribeGroups member; ``metadata`` is empty unless the group is Stable (as in Kafka)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class ClassicDescribedGroup:
    """What DescribeGroups v0-5 needs for one classic group."""

    group_id: str
    error_code: int = 0
    state: str = ClassicGroupState.DEAD.value
    protocol_type: str = ""
    protocol_data: str = ""
    """The elected protocol while Stable, else "" (Kafka's ``ProtocolData``)."""
    members: tuple[ClassicDescribedMember, ...] = ()


# ---------------------------------------------------------------------------------------- members


@dataclass(slots=True, eq=False)
class _Parked:
    """A JoinGroup/SyncGroup waiting for the group (Kafka's response future)."""

    token: object
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
    parked_join: _Parked | None = None
    parked_sync: _Parked | None = None

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
        return ClassicMemberSnapshot(
            self.member_id,
            self.group_instance_id,
            self.client_id,
            self.client_host,
            self.rebalance_timeout_ms,
            self.session_timeout_ms,
            self.protocols,
            self.assignment,
        )

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
        )


# ---------------------------------------------------------------------------------------- helpers


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


def _join_error(code: ErrorCode, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(error_code=int(code), member_id=member_id)


# ---------------------------------------------------------------------------------------- the group


class ClassicGroup:
    """One classic group. Handlers take typed requests and ``now_ms``; effects are responses,
    records (``drain_records``), parked responses (``drain_responses``) and entries in ``timers``."""

    def __init__(
        self,
        group_id: str,
        config: CoordinatorConfig,
        timers: Timers,
        *,
        new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS,
    ) -> None:
        self.group_id = group_id
        self.config = config
        self.timers = timers
        self.new_member_join_timeout_ms = new_member_join_timeout_ms
        # persisted state
        self.state = ClassicGroupState.EMPTY
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.member_seq = 0
        self.state_timestamp = -1
        # soft state (Kafka keeps it in memory only; a reload starts from Stable or Empty)
        self.previous_state = ClassicGroupState.DEAD
        self.pending_members: dict[str, None] = {}
        """Member ids handed out with MEMBER_ID_REQUIRED, not yet joined (an ordered set)."""
        self.pending_sync: dict[str, None] = {}
        """Members of the current generation that have not sent SyncGroup yet (an ordered set)."""
        self.new_member_added = False
        self._static: dict[str, str] = {}
        self._initial_delay: tuple[int, int] | None = None
        """(delay, remaining) while the join timer is the initial-rebalance delay."""
        self._sync_generation = -1
        self._eager_before = False
        """The previous generation ran Connect's eager protocol (soft state, like Kafka's timers)."""
        self._armed: dict[tuple[str, ...], int] = {}
        """Deadlines of this group's live timers (tells a stale timer delivery from a due one)."""
        self.persisted = False
        """True once the group has a record (Kafka: the group exists in the log)."""
        self._records: list[Record] = []
        self._outbox: list[tuple[_Parked, object]] = []

    # ------------------------------------------------------------------ read accessors
    @property
    def rebalance_timeout_ms(self) -> int:
        """The group's rebalance timeout: the largest of its members' (Kafka's rule)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @property
    def pending_member_ids(self) -> list[str]:
        return list(self.pending_members)

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self._static.get(group_instance_id)

    def parked_tokens(self) -> list[object]:
        """Tokens of every parked JoinGroup and SyncGroup, joins first, in member order."""
        joins = [m.parked_join.token for m in self.members.values() if m.parked_join is not None]
        syncs = [m.parked_sync.token for m in self.members.values() if m.parked_sync is not None]
        return joins + syncs

    def has_all_members_joined(self) -> bool:
        """The join barrier: every member has a parked JoinGroup and no MEMBER_ID_REQUIRED is out."""
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def candidate_protocols(self) -> set[str]:
        counts = self._protocol_counts()
        return {name for name, n in counts.items() if n == len(self.members)}

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; most votes wins.

        Ties go to the first maximum in the iteration order of Kafka's vote ``HashMap``.
        """
        if not self.members:
            raise IllegalStateError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            name = member.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        best = max(votes.values())
        return next(name for name in java_hashmap_order(votes) if votes[name] == best)

    def describe(self) -> ClassicDescribedGroup:
        """DescribeGroups: members with metadata of the elected protocol only while Stable."""
        stable = self.state is ClassicGroupState.STABLE
        members = tuple(
            ClassicDescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(self.protocol_name) if stable else b"",
                m.assignment,
            )
            for m in self.members.values()
        )
        return ClassicDescribedGroup(
            group_id=self.group_id,
            state=self.state.value,
            protocol_type=self.protocol_type or "",
            protocol_data=(self.protocol_name or "") if stable else "",
            members=members,
        )

    # ------------------------------------------------------------------ outputs
    def drain_records(self) -> list[Record]:
        out, self._records = self._records, []
        return out

    def drain_responses(self) -> list[tuple[object, object]]:
        """Responses to parked requests, as (token, response), in the order they were completed."""
        out, self._outbox = self._outbox, []
        return [(parked.token, response) for parked, response in out]

    def _take(self, parked: _Parked) -> object | None:
        """The response produced for ``parked`` during this call, removed from the outbox."""
        for i, (p, response) in enumerate(self._outbox):
            if p is parked:
                del self._outbox[i]
                return response
        return None

    def _complete_join(self, member: ClassicMember, response: JoinGroupResponse) -> bool:
        parked = member.parked_join
        if parked is None:
            return False
        member.parked_join = None
        self._outbox.append((parked, response))
        return True

    def _complete_sync(self, member: ClassicMember, response: SyncGroupResponse) -> bool:
        parked = member.parked_sync
        if parked is None:
            return False
        member.parked_sync = None
        self._outbox.append((parked, response))
        return True

    # ------------------------------------------------------------------ records and replay
    def to_snapshot(self) -> ClassicGroupSnapshot:
        return ClassicGroupSnapshot(
            generation=self.generation_id,
            protocol_type=self.protocol_type or "",
            protocol_name=self.protocol_name,
            leader=self.leader_id,
            member_seq=self.member_seq,
            members=tuple(m.to_snapshot() for m in self.members.values()),
            current_state_timestamp=self.state_timestamp,
        )

    def _emit(self, value: ClassicGroupSnapshot | None) -> None:
        self._records.append(Record(RecordType.CLASSIC_GROUP, self.group_id, "", value))
        self.persisted = True

    def _persist(self) -> None:
        self._emit(self.to_snapshot())

    def apply(self, record: Record) -> None:
        """Load the group from its record, as Kafka's ``replay(GroupMetadataKey, GroupMetadataValue)``."""
        if record.type is not RecordType.CLASSIC_GROUP:
            return
        self._clear()
        self.persisted = True
        value = record.value
        if value is None:
            self.state = ClassicGroupState.DEAD
            return
        assert isinstance(value, ClassicGroupSnapshot)
        self.generation_id = value.generation
        self.protocol_type = value.protocol_type or None
        self.protocol_name = value.protocol_name
        self.leader_id = value.leader
        self.member_seq = value.member_seq
        self.state_timestamp = value.current_state_timestamp
        for s in value.members:
            self.members[s.member_id] = ClassicMember.from_snapshot(s, value.protocol_type)
            if s.group_instance_id is not None:
                self._static[s.group_instance_id] = s.member_id
        self.state = ClassicGroupState.STABLE if self.members else ClassicGroupState.EMPTY

    def _clear(self) -> None:
        self.generation_id = 0
        self.protocol_type = self.protocol_name = self.leader_id = None
        self.members.clear()
        self._static.clear()
        self.pending_members.clear()
        self.pending_sync.clear()
        self.previous_state = ClassicGroupState.DEAD
        self.new_member_added = False
        self._initial_delay = None
        self.state_timestamp = -1

    def rebuild_after_load(self, now_ms: int) -> None:
        """Kafka's ``onLoaded``: re-arm every member's session; rebalance a group over capacity."""
        for member in self.members.values():
            self._arm_session(member, now_ms)
        if len(self.members) > self.config.max_group_size:
            self._prepare_rebalance(now_ms)

    def snapshot(self) -> dict:
        """The persisted part of the current state, comparable (replay tests compare these)."""
        s = self.to_snapshot()
        return {
            "state": self.state.value,
            "generation": s.generation,
            "protocol_type": s.protocol_type,
            "protocol_name": s.protocol_name,
            "leader": s.leader,
            "member_seq": s.member_seq,
            "current_state_timestamp": s.current_state_timestamp,
            "members": {m.member_id: m for m in s.members},
        }

    # ------------------------------------------------------------------ state machine
    def _transition(self, target: ClassicGroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateError(
                f"group {self.group_id}: {self.state} -> {target} is not a valid transition"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp = now_ms

    def _can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[ClassicGroupState.PREPARING_REBALANCE]

    # ------------------------------------------------------------------ timers
    def _session_key(self, member_id: str) -> tuple[str, str, str]:
        return (SESSION_TIMER, self.group_id, member_id)

    def _schedule(self, key: tuple[str, ...], deadline_ms: int) -> None:
        self._armed[key] = deadline_ms
        self.timers.schedule(key, deadline_ms)

    def _cancel(self, key: tuple[str, ...]) -> None:
        self._armed.pop(key, None)
        self.timers.cancel(key)

    def _arm_session(self, member: ClassicMember, now_ms: int, timeout_ms: int | None = None) -> None:
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self._schedule(self._session_key(member.member_id), now_ms + timeout)

    def _schedule_join(self, now_ms: int, delay_ms: int, initial: tuple[int, int] | None = None) -> None:
        self._initial_delay = initial
        self._schedule((JOIN_TIMER, self.group_id), now_ms + delay_ms)

    def _cancel_join(self) -> None:
        self._initial_delay = None
        self._cancel((JOIN_TIMER, self.group_id))

    def on_timer(self, key: tuple, now_ms: int) -> None:
        """A timer of this group fired (the coordinator routes keys by ``key[1]``).

        ``Timers.expired`` hands out every due key before any handler runs, so a handler earlier in
        the same batch may have cancelled or re-armed this key: such a delivery is stale and ignored
        (Kafka's timer cancels reliably; this restores that guarantee).
        """
        if key in self.timers or self._armed.pop(key, None) is None:
            return
        if self.state is ClassicGroupState.DEAD:
            return
        kind = key[0]
        if kind == SESSION_TIMER:
            self._expire_heartbeat(key[2], now_ms)
        elif kind == JOIN_TIMER:
            if self._initial_delay is not None:
                self._try_complete_initial_rebalance(now_ms)
            else:
                self._complete_join_phase(now_ms)
        elif kind == SYNC_TIMER:
            self._expire_pending_sync(now_ms)
        elif kind == SWITCH_TIMER and self.state is ClassicGroupState.STABLE:
            self._prepare_rebalance(now_ms)

    def removed_by(self, key: tuple) -> list[ClassicMember]:
        """The members this due timer ``key`` would remove (reads, changes nothing): a session's
        member without a parked request standing in for heartbeats; at the end of a join phase the
        dynamic members that did not rejoin; at the sync deadline those that never synced."""
        if key in self.timers or key not in self._armed or self.state is ClassicGroupState.DEAD:
            return []
        kind = key[0]
        if kind == SESSION_TIMER:
            member = self.members.get(key[2])
            return [member] if member is not None and not member.has_satisfied_heartbeat() else []
        if kind == JOIN_TIMER and self._initial_delay is None:
            if self.state is not ClassicGroupState.PREPARING_REBALANCE:
                return []
            return [m for m in self.members.values() if not m.awaiting_join and not m.is_static]
        if kind == SYNC_TIMER and self._sync_generation == self.generation_id:
            if self.state not in (ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.STABLE):
                return []
            return [self.members[mid] for mid in self.pending_sync if mid in self.members]
        return []

    def _expire_heartbeat(self, member_id: str, now_ms: int) -> None:
        if member_id in self.pending_members:
            self._remove(member_id)
            if self.state is ClassicGroupState.PREPARING_REBALANCE and self.has_all_members_joined():
                self._complete_join_phase(now_ms)
            return
        member = self.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            self._remove_member_and_update_group(member, now_ms)

    def _expire_pending_sync(self, now_ms: int) -> None:
        """Kafka 3.x+: members that got the JoinGroup answer but never synced are removed."""
        if self._sync_generation != self.generation_id:
            return
        if self.state not in (ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.STABLE):
            return
        if not self.pending_sync:
            return
        for member_id in list(self.pending_sync):
            self._remove(member_id)
            self._cancel(self._session_key(member_id))
        self._prepare_rebalance(now_ms)

    def _try_complete_initial_rebalance(self, now_ms: int) -> None:
        """Kafka's InitialDelayedJoin: each new member extends the delay, up to the rebalance timeout."""
        assert self._initial_delay is not None
        delay, remaining = self._initial_delay
        if self.new_member_added and remaining != 0:
            self.new_member_added = False
            new_delay = min(self.config.classic_initial_rebalance_delay_ms, remaining)
            new_remaining = max(remaining - delay, 0)
            self._schedule_join(now_ms, new_delay, (new_delay, new_remaining))
        else:
            self._complete_join_phase(now_ms)

    # ------------------------------------------------------------------ membership primitives
    def _protocol_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for member in self.members.values():
            for name in set(member.protocol_names()):
                counts[name] = counts.get(name, 0) + 1
        return counts

    def _supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's ``supportsProtocols``: an Empty group takes any non-empty type and list; otherwise
        the type must match and one of the names must be supported by every member."""
        if self.state is ClassicGroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        counts = self._protocol_counts()
        return any(counts.get(name, 0) == len(self.members) for name in names)

    def _generate_member_id(self, client_id: str, group_instance_id: str | None, now_ms: int) -> str:
        """``<instance id or client id>-<uuid>`` like Kafka, with a name-based UUID instead of a random
        one. ``now_ms`` is part of the name so ids handed out after the last persisted counter value
        are not handed out again after a restart."""
        prefix = group_instance_id if group_instance_id is not None else client_id
        while True:
            self.member_seq += 1
            name = f"{self.config.member_id_salt}{self.group_id}/{self.member_seq}/{now_ms}"
            suffix = uuid.uuid5(_MEMBER_ID_NAMESPACE, name)
            member_id = f"{prefix}-{suffix}"
            if member_id not in self.members and member_id not in self.pending_members:
                return member_id

    def _add(self, member: ClassicMember, parked: _Parked | None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self._static:
                raise IllegalStateError(f"static member {member.group_instance_id} is already a member")
            self._static[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.parked_join = parked
        self.pending_members.pop(member.member_id, None)

    def _remove(self, member_id: str) -> None:
        """Kafka's ``ClassicGroup.remove`` (callers answer a parked JoinGroup first where Kafka does);
        a parked request still left is answered UNKNOWN_MEMBER_ID so no token is orphaned."""
        member = self.members.pop(member_id, None)
        if member is not None:
            if member.group_instance_id is not None:
                self._static.pop(member.group_instance_id, None)
            self._complete_join(member, _join_error(ErrorCode.UNKNOWN_MEMBER_ID))
            self._complete_sync(member, SyncGroupResponse(error_code=int(ErrorCode.UNKNOWN_MEMBER_ID)))
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.pop(member_id, None)

    def _update_member(
        self, member: ClassicMember, protocols: Protocols, rebalance_ms: int, session_ms: int, parked: _Parked
    ) -> None:
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_ms
        member.session_timeout_ms = session_ms
        # Kafka overwrites the future of an earlier parked JoinGroup without completing it; answer it
        # so its token does not dangle (the client has given up on that request).
        self._complete_join(member, _join_error(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.parked_join = parked

    def _validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's ``validateMember``: a known instance id must map to this member id."""
        if group_instance_id is not None:
            existing = self._static.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def _accept_joining_member(self, member_id: str) -> bool:
        """Kafka's ``acceptJoiningMember`` (the ``group.max.size`` check)."""
        limit = self.config.max_group_size
        if self.state in (ClassicGroupState.EMPTY, ClassicGroupState.DEAD):
            return True
        member = self.members.get(member_id)
        if self.state is ClassicGroupState.PREPARING_REBALANCE:
            awaiting = sum(1 for m in self.members.values() if m.awaiting_join)
            return (member is not None and member.awaiting_join) or awaiting < limit
        return member is not None or len(self.members) < limit

    def _member_list(self) -> tuple[JoinGroupMember, ...]:
        """Every member with its metadata for the elected protocol (the leader's JoinGroup answer)."""
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def _join_response(
        self, member_id: str, with_members: bool, leader: str | None = None
    ) -> JoinGroupResponse:
        return JoinGroupResponse(
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=(self.leader_id if leader is None else leader) or "",
            member_id=member_id,
            members=self._member_list() if with_members else (),
        )

    # ------------------------------------------------------------------ JoinGroup
    def join(self, req: JoinGroupRequest, now_ms: int) -> JoinGroupResponse | None:
        """JoinGroup: the response, or ``None`` when parked until the join phase completes."""
        if not req.group_id:
            return _join_error(ErrorCode.INVALID_GROUP_ID, req.member_id)
        timeout = req.session_timeout_ms
        if not (
            self.config.classic_min_session_timeout_ms
            <= timeout
            <= self.config.classic_max_session_timeout_ms
        ):
            return _join_error(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)
        new_group = not self.persisted and not self.members and not self.pending_members
        if new_group and req.member_id:
            # Kafka creates a group only for a member without an id.
            return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
        if new_group and self.state_timestamp < 0:
            self.state_timestamp = now_ms  # Kafka stamps a group with its creation time
        records_before = len(self._records)
        parked = _Parked(req.token, req.api_version)
        response = self._join(req, parked, now_ms)
        if response is None:
            response = self._take(parked)  # type: ignore[assignment]
        if new_group and len(self._records) == records_before:
            self._emit(self._empty_group_snapshot())
        return response

    def _empty_group_snapshot(self) -> ClassicGroupSnapshot:
        """Kafka's ``newEmptyGroupMetadataRecord``, written when a JoinGroup creates the group."""
        return ClassicGroupSnapshot(
            self.generation_id, "", None, None, self.member_seq, (), self.state_timestamp
        )

    def _join(self, req: JoinGroupRequest, parked: _Parked, now_ms: int) -> JoinGroupResponse | None:
        if not self._accept_joining_member(req.member_id):
            self._remove(req.member_id)
            self._cancel(self._session_key(req.member_id))
            return _join_error(ErrorCode.GROUP_MAX_SIZE_REACHED)
        if not req.member_id:
            return self._join_new_member(req, parked, now_ms)
        return self._join_existing_member(req, parked, now_ms)

    def _join_new_member(
        self, req: JoinGroupRequest, parked: _Parked, now_ms: int
    ) -> JoinGroupResponse | None:
        if self.state is ClassicGroupState.DEAD:
            return _join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not self._supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        new_id = self._generate_member_id(req.client_id, req.group_instance_id, now_ms)
        if req.group_instance_id is not None:
            existing = self._static.get(req.group_instance_id)
            if existing is not None:
                return self._replace_static_member(req, parked, existing, new_id, now_ms)
            return self._add_member(req, parked, new_id, now_ms)
        if req.api_version >= MEMBER_ID_REQUIRED_MIN_VERSION:
            # The member must come back with this id; until then it holds up the join barrier.
            self.pending_members[new_id] = None
            self._schedule(self._session_key(new_id), now_ms + req.session_timeout_ms)
            return JoinGroupResponse(error_code=int(ErrorCode.MEMBER_ID_REQUIRED), member_id=new_id)
        return self._add_member(req, parked, new_id, now_ms)

    def _join_existing_member(
        self, req: JoinGroupRequest, parked: _Parked, now_ms: int
    ) -> JoinGroupResponse | None:
        member_id = req.member_id
        if self.state is ClassicGroupState.DEAD:
            return _join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id)
        if not self._supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
            return _join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member_id)
        if member_id in self.pending_members:
            if req.group_instance_id is not None:
                # Kafka: IllegalStateException (a pending member is never static), answered like
                # any exception: the error code alone, no member id (measured against Kafka 4.3.1).
                return _join_error(ErrorCode.UNKNOWN_SERVER_ERROR)
            return self._add_member(req, parked, member_id, now_ms)
        error = self._validate_member(member_id, req.group_instance_id)
        if error is not None:
            return _join_error(error, member_id)
        member = self.members[member_id]
        protocols = tuple(req.protocols)
        state = self.state
        if state is ClassicGroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(member, req, parked, now_ms)
        if state is ClassicGroupState.COMPLETING_REBALANCE:
            if member.protocols == protocols:
                # Lost JoinGroup answer: repeat the current generation's answer.
                return self._join_response(member_id, with_members=member_id == self.leader_id)
            return self._update_member_and_rebalance(member, req, parked, now_ms)
        if state is ClassicGroupState.STABLE:
            if member_id == self.leader_id or member.protocols != protocols:
                # A leader rejoining asks for a new assignment; changed metadata needs one.
                return self._update_member_and_rebalance(member, req, parked, now_ms)
            return self._join_response(member_id, with_members=False)
        return _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)  # Empty: no members to rejoin

    def _add_member(
        self, req: JoinGroupRequest, parked: _Parked, member_id: str, now_ms: int
    ) -> JoinGroupResponse | None:
        member = ClassicMember(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            tuple(req.protocols),
            is_new=True,
        )
        if (
            self.state is ClassicGroupState.PREPARING_REBALANCE
            and self.previous_state is ClassicGroupState.EMPTY
        ):
            self.new_member_added = True  # extends the initial rebalance delay
        self._add(member, parked)
        # A new member cannot heartbeat while parked: bound its wait by the new-member join timeout.
        self._arm_session(member, now_ms, self.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(now_ms)
        return None

    def _update_member_and_rebalance(
        self, member: ClassicMember, req: JoinGroupRequest, parked: _Parked, now_ms: int
    ) -> JoinGroupResponse | None:
        self._update_member(
            member, tuple(req.protocols), req.rebalance_timeout_ms, req.session_timeout_ms, parked
        )
        self._maybe_prepare_rebalance_or_complete_join(now_ms)
        return None

    def _replace_static_member(
        self, req: JoinGroupRequest, parked: _Parked, old_id: str, new_id: str, now_ms: int
    ) -> JoinGroupResponse | None:
        """Kafka's ``updateStaticMemberThenRebalanceOrCompleteJoin``: a restarted static member takes
        over its instance id under a new member id; the old id is fenced at once."""
        current_leader = self.leader_id
        new = self._replace_static_member_id(old_id, new_id)
        self._arm_session(new, now_ms)
        self._cancel(self._session_key(old_id))
        self._update_member(
            new, tuple(req.protocols), req.rebalance_timeout_ms, req.session_timeout_ms, parked
        )
        state = self.state
        if state is ClassicGroupState.STABLE:
            # Connect workers do not support static membership: a Java WorkerCoordinator elected
            # leader with skipAssignment throws IllegalStateException and the worker dies, and a
            # fresh process handed a cooperative (delta) assignment would run only the delta. So a
            # restarted static Connect worker gets a rebalance instead (docs/legacy-workers.md).
            if self.protocol_name == self.select_protocol() and self.protocol_type != PROTOCOL_TYPE_CONNECT:
                # Same elected protocol: keep the generation and the assignments, persist the new id.
                self._persist()
                if req.api_version >= SKIP_ASSIGNMENT_MIN_VERSION:
                    is_leader = new_id == self.leader_id
                    response = self._join_response(new_id, with_members=is_leader)
                    response.skip_assignment = is_leader
                else:
                    # Older clients cannot skip the assignment: the replaced leader is presented as a
                    # follower (leader = the old id) so it does not compute one.
                    response = self._join_response(new_id, with_members=False, leader=current_leader or "")
                self._complete_join(new, response)
                return None
            self._maybe_prepare_rebalance_or_complete_join(now_ms)
        elif state is ClassicGroupState.COMPLETING_REBALANCE:
            # The leader may be assigning to the old id: start over.
            self._prepare_rebalance(now_ms)
        elif state in (ClassicGroupState.EMPTY, ClassicGroupState.DEAD):
            raise IllegalStateError(f"group {self.group_id} cannot replace a static member while {state}")
        else:
            self._maybe_complete_join_phase(now_ms)
        return None

    def _replace_static_member_id(self, old_id: str, new_id: str) -> ClassicMember:
        """Kafka's ``replaceStaticMember``: same member under a new id, old requests fenced."""
        old = self.members[old_id]
        self._complete_join(
            old, JoinGroupResponse(error_code=int(ErrorCode.FENCED_INSTANCE_ID), member_id=old_id)
        )
        self._complete_sync(old, SyncGroupResponse(error_code=int(ErrorCode.FENCED_INSTANCE_ID)))
        new = ClassicMember(
            new_id,
            old.group_instance_id,
            old.client_id,
            old.client_host,
            old.rebalance_timeout_ms,
            old.session_timeout_ms,
            old.protocol_type,
            old.protocols,
            old.assignment,
        )
        # Keep the member's position (so "first member" choices do not change) and the dict itself
        # (callers may hold it).
        entries = [(new_id, new) if mid == old_id else (mid, m) for mid, m in self.members.items()]
        self.members.clear()
        self.members.update(entries)
        if self.leader_id == old_id:
            self.leader_id = new_id
        assert old.group_instance_id is not None
        self._static[old.group_instance_id] = new_id
        return new

    # ------------------------------------------------------------------ rebalance
    def _maybe_prepare_rebalance_or_complete_join(self, now_ms: int) -> None:
        if self._can_rebalance():
            self._prepare_rebalance(now_ms)
        else:
            self._maybe_complete_join_phase(now_ms)

    def _maybe_complete_join_phase(self, now_ms: int) -> None:
        """Complete the join phase early once everyone is in, except during the initial delay."""
        if self.state is not ClassicGroupState.PREPARING_REBALANCE:
            return
        if self.previous_state is ClassicGroupState.EMPTY:
            return
        if self.has_all_members_joined():
            self._complete_join_phase(now_ms)

    def _prepare_rebalance(self, now_ms: int) -> None:
        if self.state is ClassicGroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(ErrorCode.REBALANCE_IN_PROGRESS, now_ms)
        self.pending_sync.clear()
        self._cancel((SYNC_TIMER, self.group_id))
        initial = self.state is ClassicGroupState.EMPTY
        if initial:
            delay = self.config.classic_initial_rebalance_delay_ms
            remaining = max(self.rebalance_timeout_ms - delay, 0)
            self._schedule_join(now_ms, delay, (delay, remaining))
        self._transition(ClassicGroupState.PREPARING_REBALANCE, now_ms)
        if not initial:
            if self.has_all_members_joined():
                self._complete_join_phase(now_ms)
            else:
                self._schedule_join(now_ms, self.rebalance_timeout_ms)

    def _complete_join_phase(self, now_ms: int) -> None:
        """End of the barrier: drop dynamic members that did not rejoin, elect, answer everyone."""
        self._cancel_join()
        for member in [m for m in self.members.values() if not m.awaiting_join and not m.is_static]:
            self._remove(member.member_id)
            self._cancel(self._session_key(member.member_id))
        if self.state is ClassicGroupState.DEAD:
            return
        if not self._maybe_elect_new_joined_leader() and self.members:
            # Only static members that have not rejoined are left: wait another rebalance timeout.
            self._schedule_join(now_ms, self.rebalance_timeout_ms)
            return
        self._init_next_generation(now_ms)
        if self.state is ClassicGroupState.EMPTY:
            self._persist()
            return
        for member in self.members.values():
            self._complete_join(
                member, self._join_response(member.member_id, with_members=member.member_id == self.leader_id)
            )
            self._arm_session(member, now_ms)
            member.is_new = False
            self.pending_sync[member.member_id] = None
        self._sync_generation = self.generation_id
        self._schedule((SYNC_TIMER, self.group_id), now_ms + self.rebalance_timeout_ms)

    def _maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else the first member that did; False if nobody did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def _init_next_generation(self, now_ms: int) -> None:
        self._eager_before = self.protocol_type == "connect" and self.protocol_name == EAGER_PROTOCOL
        self._cancel((SWITCH_TIMER, self.group_id))
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self._transition(ClassicGroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self._transition(ClassicGroupState.EMPTY, now_ms)
        self.pending_sync.clear()

    def _reset_and_propagate_assignment_error(self, error: ErrorCode, now_ms: int) -> None:
        for member in self.members.values():
            member.assignment = b""
        self._propagate_assignment(error, now_ms)

    def _propagate_assignment(self, error: ErrorCode, now_ms: int) -> None:
        ok = error is ErrorCode.NONE
        for member in self.members.values():
            response = SyncGroupResponse(
                error_code=int(error),
                protocol_type=self.protocol_type if ok else None,
                protocol_name=self.protocol_name if ok else None,
                assignment=member.assignment,
            )
            if self._complete_sync(member, response):
                self._arm_session(member, now_ms)

    # ------------------------------------------------------------------ SyncGroup
    def sync(self, req: SyncGroupRequest, now_ms: int) -> SyncGroupResponse | None:
        """SyncGroup: the response, or ``None`` for a follower parked until the leader syncs."""
        parked = _Parked(req.token, req.api_version)
        response = self._sync(req, parked, now_ms)
        if response is None:
            response = self._take(parked)  # type: ignore[assignment]
        return response

    def _sync_error(self, req: SyncGroupRequest) -> ErrorCode | None:
        if self.state is ClassicGroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if self.state is ClassicGroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_member(req.member_id, req.group_instance_id)
        if error is not None:
            return error
        if req.generation_id != self.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if _inconsistent(req.protocol_type, self.protocol_type) or _inconsistent(
            req.protocol_name, self.protocol_name
        ):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        if self.state is ClassicGroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return None

    def _sync(self, req: SyncGroupRequest, parked: _Parked, now_ms: int) -> SyncGroupResponse | None:
        error = self._sync_error(req)
        if error is not None:
            return SyncGroupResponse(error_code=int(error))
        member = self.members[req.member_id]
        if self.state is ClassicGroupState.COMPLETING_REBALANCE:
            # As for JoinGroup, an earlier parked SyncGroup of this member is answered, not dropped.
            self._complete_sync(member, SyncGroupResponse(error_code=int(ErrorCode.REBALANCE_IN_PROGRESS)))
            member.parked_sync = parked
            self._remove_pending_sync(req.member_id)
            if req.member_id == self.leader_id:
                self._install_assignment(dict(req.assignments), now_ms)
            return None
        self._remove_pending_sync(req.member_id)  # Stable: answer with the stored assignment
        self._arm_session(member, now_ms)  # Kafka reschedules the member's heartbeat here too
        return SyncGroupResponse(
            protocol_type=self.protocol_type, protocol_name=self.protocol_name, assignment=member.assignment
        )

    def _install_assignment(self, assignments: dict[str, bytes], now_ms: int) -> None:
        """The leader's assignment: store it per member (absent = b""), answer every parked
        SyncGroup, become Stable and persist the group."""
        for member in self.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        self._propagate_assignment(ErrorCode.NONE, now_ms)
        self._transition(ClassicGroupState.STABLE, now_ms)
        self._persist()
        delay = self.config.classic_cooperative_switch_rebalance_ms
        if self._eager_before and self.protocol_name != EAGER_PROTOCOL and delay is not None:
            # Connect's own stall after leaving eager (docs/live-drills.md): one more round
            # restarts the tasks its workers stopped on stale task-config updates.
            self._schedule((SWITCH_TIMER, self.group_id), now_ms + delay)

    def _remove_pending_sync(self, member_id: str) -> None:
        self.pending_sync.pop(member_id, None)
        if self.state not in (ClassicGroupState.COMPLETING_REBALANCE, ClassicGroupState.STABLE) or (
            not self.pending_sync
        ):
            self._cancel((SYNC_TIMER, self.group_id))

    # ------------------------------------------------------------------ Heartbeat
    def heartbeat(self, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        """Heartbeat: keeps the session; REBALANCE_IN_PROGRESS tells a member to rejoin."""
        if self.state is ClassicGroupState.DEAD:
            return HeartbeatResponse(int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        error = self._validate_member(req.member_id, req.group_instance_id)
        if error is None and req.generation_id != self.generation_id:
            error = ErrorCode.ILLEGAL_GENERATION
        if error is not None:
            return HeartbeatResponse(int(error))
        if self.state is ClassicGroupState.EMPTY:
            return HeartbeatResponse(int(ErrorCode.UNKNOWN_MEMBER_ID))
        self._arm_session(self.members[req.member_id], now_ms)
        if self.state is ClassicGroupState.PREPARING_REBALANCE:
            return HeartbeatResponse(int(ErrorCode.REBALANCE_IN_PROGRESS))
        # CompletingRebalance too: a member may heartbeat between its JoinGroup answer and SyncGroup.
        return HeartbeatResponse()

    # ------------------------------------------------------------------ LeaveGroup
    def leave(self, req: LeaveGroupRequest, now_ms: int) -> LeaveGroupResponse:
        """LeaveGroup (batch): per-member results; one rebalance for the whole batch."""
        if self.state is ClassicGroupState.DEAD:
            return LeaveGroupResponse(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        results: list[tuple[str, str | None, int]] = []
        for leaving in req.members:
            error = self._leave_one(leaving.member_id, leaving.group_instance_id)
            results.append((leaving.member_id, leaving.group_instance_id, int(error)))
        if any(code == ErrorCode.NONE for _, _, code in results):
            if self.state in (ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(now_ms)
            elif self.state is ClassicGroupState.PREPARING_REBALANCE:
                self._maybe_complete_join_phase(now_ms)
        return LeaveGroupResponse(members=results)

    def _leave_one(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        if not member_id:
            # Administrative removal by instance id.
            existing = self._static.get(group_instance_id) if group_instance_id is not None else None
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_current_member(existing)
            return ErrorCode.NONE
        if member_id in self.pending_members:
            self._remove(member_id)
            self._cancel(self._session_key(member_id))
            return ErrorCode.NONE
        error = self._validate_member(member_id, group_instance_id)
        if error is not None:
            return error
        self._remove_current_member(member_id)
        return ErrorCode.NONE

    def _remove_current_member(self, member_id: str) -> None:
        self._cancel(self._session_key(member_id))
        member = self.members[member_id]
        self._complete_join(member, _join_error(ErrorCode.UNKNOWN_MEMBER_ID))
        self._remove(member_id)

    def _remove_member_and_update_group(self, member: ClassicMember, now_ms: int) -> None:
        """Session expiry: drop the member, then rebalance (or finish a join phase it was holding up)."""
        self._complete_join(member, _join_error(ErrorCode.UNKNOWN_MEMBER_ID))
        self._remove(member.member_id)
        if self.state in (ClassicGroupState.STABLE, ClassicGroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(now_ms)
        elif self.state is ClassicGroupState.PREPARING_REBALANCE and self.has_all_members_joined():
            self._complete_join_phase(now_ms)

    # ------------------------------------------------------------------ deletion and conversion
    def release_parked(self, error: ErrorCode) -> None:
        """Answer every parked JoinGroup and SyncGroup with ``error`` (Kafka's
        ``completeAllJoinFutures``/``completeAllSyncFutures``, used when a group is converted)."""
        for member in self.members.values():
            self._complete_join(member, _join_error(error, member.member_id))
        for member in self.members.values():
            self._complete_sync(member, SyncGroupResponse(error_code=int(error)))

    def delete(self, now_ms: int, parked_error: ErrorCode = ErrorCode.REBALANCE_IN_PROGRESS) -> None:
        """Tombstone the group: DeleteGroups of an Empty group, or conversion to a connect group.

        Parked requests are answered with ``parked_error``, every timer is cancelled, the group is
        Dead and empty. Read what you need (members, assignments) before calling this.
        """
        self.release_parked(parked_error)
        for member_id in [*self.members, *self.pending_members]:
            self._cancel(self._session_key(member_id))
        self._cancel_join()
        self._cancel((SYNC_TIMER, self.group_id))
        self._clear()
        self._transition(ClassicGroupState.DEAD, now_ms)
        self._emit(None)


def _inconsistent(requested: str | None, group: str | None) -> bool:
    """Kafka's ``isProtocolInconsistent``: only a value given on both sides can disagree."""
    return requested is not None and group is not None and requested != group


__all__ = [
    "JOIN_TIMER",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "SESSION_TIMER",
    "SYNC_TIMER",
    "ClassicDescribedGroup",
    "ClassicDescribedMember",
    "ClassicGroup",
    "ClassicGroupSnapshot",
    "ClassicGroupState",
    "ClassicMember",
    "ClassicMemberSnapshot",
    "IllegalStateError",
    "java_hashmap_order",
    "java_string_hash",
]


def load_converted(group: ClassicGroup, snapshot: ClassicGroupSnapshot, now_ms: int) -> None:
    """Install a group converted from ``connect`` (downgrade): persist it, re-arm sessions, rebalance.

    The members keep running what they run; the rebalance lets a legacy leader take over assignment
    with every worker's allocation in front of it.
    """
    group.apply(Record(RecordType.CLASSIC_GROUP, group.group_id, "", snapshot))
    group._records.append(Record(RecordType.CLASSIC_GROUP, group.group_id, "", snapshot))
    group.rebuild_after_load(now_ms)
    if group.members:
        group._prepare_rebalance(now_ms)
