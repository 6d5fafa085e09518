"""The state of a classic group (Kafka's ``classic.ClassicGroup``): members, state machine, record.

The steps (``classic.join``, ``classic.sync``, ``classic.leave``, ``classic.rebalance``,
``classic.timers``, ``classic.load``; ``classic.group`` is their public face) are functions that
take a :class:`ClassicGroup` and change it through the primitives here: they decide, the primitives
apply, and none of them assigns an attribute of the group, changes one of its containers or touches
its private parts (``tests/test_engine_reshape.py`` checks it).

The group's durable state changes only by applying its ``CLASSIC_GROUP`` record: a step calls
:meth:`ClassicGroup.commit`, which queues the record (built by :func:`classic_group_record`) and
applies it with :meth:`ClassicGroup.apply`, the function replay uses. Like Kafka's
``GroupMetadata`` record it is a whole-group snapshot, committed where Kafka writes one (a JoinGroup
creating the group, a generation becoming Stable or Empty, a static member replaced, deletion,
a conversion or adoption loading the group). During a rebalance the working generation (who
rejoined, the next generation number, the elected protocol) is ahead of the log, in memory only as
in Kafka: a record applied then is what a restart would load and leaves the working generation
alone; at rest (Stable or Empty) the group's persisted fields are the last record's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.api import (
    EAGER_PROTOCOL,
    PROTOCOL_TYPE_CONNECT,
    ClassicGroupState,
    JoinGroupMember,
    JoinGroupResponse,
    SyncGroupResponse,
)
from connect_bridge.state.classic.leader_memory import ForgetRounds
from connect_bridge.state.classic.member import (
    ClassicMember,
    IllegalStateError,
    ParkedRequest,
    java_hashmap_order,
)
from connect_bridge.state.classic.records import (
    ClassicGroupSnapshot,
    Protocols,
    classic_group_record,
)
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.records import Record, RecordType
from connect_bridge.state.result import Touched
from connect_bridge.state.timers import TimerKey, Timers

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
"""Kafka's ``group.classic.new.member.join.timeout.ms`` (internal, 5 minutes): how long a brand-new
member's parked JoinGroup may wait before the member is dropped (it cannot heartbeat yet)."""

_MEMBER_ID_NAMESPACE = uuid.UUID("3f0c9a56-2b7e-4d1a-8c65-9e4b1d7a2f30")

_S = ClassicGroupState
_VALID_PREVIOUS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(_S),
}
"""Kafka's ``validPreviousStates``: a transition from anywhere else is a bug, not a request error."""

IN_GENERATION = frozenset({_S.COMPLETING_REBALANCE, _S.STABLE})
"""States in which the group has a generation its members sync and heartbeat in."""

REBALANCING = frozenset({_S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE})
"""States in which the working generation is ahead of the log: a record applied then is what a
restart would load, and leaves the working generation alone (``ClassicGroup.apply``)."""


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


def join_error(code: ErrorCode, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(error_code=int(code), member_id=member_id)


class ClassicGroup:
    """One classic group's state and the primitives the steps change it with.

    Durable (the ``CLASSIC_GROUP`` snapshot; changed only by :meth:`apply`): ``generation_id``,
    ``protocol_type``, ``protocol_name``, ``leader_id``, the members' persisted fields (id,
    instance id, client id and host, timeouts, protocols, assignment, principal), ``member_seq``,
    ``state_timestamp``, ``extra_rebalance_at_ms``, and the record itself as the log has it
    (``persisted_snapshot``, ``persisted``). At rest (Stable, Empty) these fields are the last
    record's; during a rebalance the steps change them in memory for the working generation, which
    the next committed generation makes durable (a restart in between loads the last one, as
    Kafka's does). ``member_seq`` alone may run ahead of the log at rest: an id handed out with
    MEMBER_ID_REQUIRED is not written (Kafka writes none), and ``now_ms`` in the id's name keeps ids
    unique across a restart. The invariant is checked after every step of random runs
    (``tests/test_record_replay_property.py``).

    Soft (memory only, as in Kafka, whose reload starts from Stable or Empty): the parked
    JoinGroup/SyncGroup requests (they belong to client connections that a restart closes), the
    timers and which deadlines this group armed (re-armed from ``now_ms`` on load), the pending
    MEMBER_ID_REQUIRED ids and the members yet to sync (answers the clients must repeat anyway),
    the initial-delay bookkeeping, ``previous_state``, whether the last generation was eager, and
    the unsynced leader rounds of a group that replaced a connect group (after a restart a worker
    gets none: its assignor may remember the connect era once more), the members held back in an
    eager generation, the generation a downgrade loaded (:meth:`mark_downgraded`), the group's
    ``state`` itself (a loaded group is Stable or Empty), and the members' soft fields
    (``classic.member``).
    """

    def __init__(
        self,
        group_id: str,
        config: CoordinatorConfig,
        timers: Timers,
        *,
        new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS,
        forget_rounds: ForgetRounds | None = None,
    ) -> None:
        self.group_id = group_id
        self.config = config
        self.timers = timers
        self.new_member_join_timeout_ms = new_member_join_timeout_ms
        self.join_key = TimerKey.classic_join(group_id)
        self.sync_key = TimerKey.classic_sync(group_id)
        self.switch_key = TimerKey.classic_switch(group_id)
        self.state = ClassicGroupState.EMPTY
        """A loaded group is Stable (members) or Empty; the steps move it through a rebalance."""
        # durable state (the record; changed by apply, or in memory for a working generation)
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, ClassicMember] = {}
        self.member_seq = 0
        self.state_timestamp = -1
        self.extra_rebalance_at_ms = -1
        """When the extra rebalance after leaving eager is due (-1: none); re-armed on load."""
        self.persisted_snapshot: ClassicGroupSnapshot | None = None
        """The group as the log has it now (the last record applied; None: none, or a tombstone)."""
        # soft state
        self.previous_state = ClassicGroupState.DEAD
        self.pending_members: dict[str, str] = {}
        """Member ids handed out with MEMBER_ID_REQUIRED, not yet joined (an ordered set), each with
        the principal it was handed to: only that principal may join with it (``state.ownership``)."""
        self.pending_sync: dict[str, None] = {}
        """Members of the current generation that have not sent SyncGroup yet (an ordered set)."""
        self.new_member_added = False
        self.static: dict[str, str] = {}
        """group.instance.id -> member id of the static members."""
        self.initial_delay: tuple[int, int] | None = None
        """(delay, remaining) while the join timer is the initial-rebalance delay."""
        self.sync_generation = -1
        self.eager_before = False
        """The previous generation ran Connect's eager protocol."""
        self.eager_holders: set[str] = set()
        """Members of this eager generation whose work the bridge kept from the others, not yet
        given their own assignment (``classic.eager_hold``)."""
        self.downgraded_generation: int | None = None
        """The generation a downgrade loaded the group at (one past the connect group's epoch,
        ``conversion.downgrade``), until a later one: the legacy members still name their
        connect-era epochs in their heartbeats meanwhile (``classic.sync.heartbeat``)."""
        self.forget_rounds: ForgetRounds | None = forget_rounds
        """The unsynced leader rounds of a group that replaced an emptied connect group
        (``classic.join.forget_round``); None: it replaced none."""
        self.armed: dict[TimerKey, int] = {}
        """Deadlines of this group's live timers (tells a stale timer delivery from a due one)."""
        self.persisted = False
        """True once the group has a record (Kafka: the group exists in the log); set by apply."""
        self._records: list[Record] = []
        self._outbox: list[tuple[ParkedRequest, object]] = []
        self.touched: Touched | None = None
        """The coordinator's set of changed groups (``state.result``): a record, a released parked
        answer or a state transition marks this group there."""

    # ------------------------------------------------------------------ read accessors
    @property
    def rebalance_timeout_ms(self) -> int:
        """The group's rebalance timeout: the largest of its members' (Kafka's rule)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    @property
    def pending_member_ids(self) -> list[str]:
        return list(self.pending_members)

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static.get(group_instance_id)

    def principal_of(self, member_id: str) -> str | None:
        """The principal owning ``member_id`` (a member or a pending id), or None if unknown."""
        member = self.members.get(member_id)
        return member.principal if member is not None else self.pending_members.get(member_id)

    def instance_principal(self, instance_id: str) -> str | None:
        """The principal owning the static member ``instance_id``, or None if none has it."""
        member_id = self.static.get(instance_id)
        member = self.members.get(member_id) if member_id is not None else None
        return member.principal if member is not None else None

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

    # ------------------------------------------------------------------ soft flags
    def report_changes_to(self, touched: Touched) -> None:
        """Mark this group in the coordinator's set of changed groups (``state.result``) whenever
        it writes a record, releases a parked answer or changes state, so a step's result is built
        from the groups it changed only."""
        self.touched = touched

    def stamp_creation(self, now_ms: int) -> None:
        """A JoinGroup creates the group: Kafka stamps a new group with its creation time (the
        ``current_state_timestamp`` of its first record)."""
        self.state_timestamp = now_ms

    def note_new_member_added(self) -> None:
        """A new member joined during the initial rebalance delay (Kafka's ``newMemberAdded``):
        when the delay ends it is extended (:meth:`extend_initial_delay`)."""
        self.new_member_added = True

    def extend_initial_delay(self, now_ms: int, delay_ms: int, remaining_ms: int) -> None:
        """Kafka's ``InitialDelayedJoin``: a member joined during the delay that just ended, so
        wait ``delay_ms`` more (``remaining_ms`` left of the rebalance timeout after it), and
        watch again whether another member comes."""
        self.new_member_added = False
        self.schedule_join(now_ms, delay_ms, (delay_ms, remaining_ms))

    def mark_downgraded(self) -> None:
        """The group was just loaded by a downgrade (``classic.load.load_converted``): until a
        later generation its members may name their connect-era epochs (``downgraded_generation``)."""
        self.downgraded_generation = self.generation_id

    def begin_eager_holds(self) -> None:
        """The leader's assignments arrived: nobody is held back yet in this generation
        (``classic.eager_hold.hold_unstopped`` decides who is)."""
        self.eager_holders = set()

    def hold_for(self, member_ids: set[str]) -> None:
        """Work was kept from another member because these members may still run it: each is
        waited for until it is given its own assignment (:meth:`eager_holder_served`)."""
        self.eager_holders |= member_ids

    def eager_holder_served(self, member_id: str) -> None:
        """``member_id`` was given its assignment: the work kept for it no longer waits on it."""
        self.eager_holders.discard(member_id)

    def heard_from(self, member_id: str) -> None:
        """A request of ``member_id`` reached this coordinator: it no longer waits on a JoinGroup
        parked at a previous one (``ClassicMember.waits_elsewhere_until_ms``)."""
        member = self.members.get(member_id)
        if member is not None:
            member.waits_elsewhere_until_ms = None

    # ------------------------------------------------------------------ parked responses
    def drain_responses(self) -> list[tuple[object, object]]:
        """Responses to parked requests, as (token, response), in the order they were completed."""
        out, self._outbox = self._outbox, []
        return [(parked.token, response) for parked, response in out]

    def take(self, parked: ParkedRequest) -> object | None:
        """The response produced for ``parked`` during this call, removed from the outbox."""
        for i, (p, response) in enumerate(self._outbox):
            if p is parked:
                del self._outbox[i]
                return response
        return None

    def _answer(self, parked: ParkedRequest | None, response: object) -> bool:
        if parked is None:
            return False
        self._outbox.append((parked, response))
        self._touch()
        return True

    def complete_join(self, member: ClassicMember, response: JoinGroupResponse) -> bool:
        parked, member.parked_join = member.parked_join, None
        return self._answer(parked, response)

    def complete_sync(self, member: ClassicMember, response: SyncGroupResponse) -> bool:
        parked, member.parked_sync = member.parked_sync, None
        return self._answer(parked, response)

    def release_parked(self, error: ErrorCode) -> None:
        """Answer every parked JoinGroup and SyncGroup with ``error`` (Kafka's
        ``completeAllJoinFutures``/``completeAllSyncFutures``, used when a group is converted)."""
        for member in self.members.values():
            self.complete_join(member, join_error(error, member.member_id))
        for member in self.members.values():
            self.complete_sync(member, SyncGroupResponse(error_code=int(error)))

    # ------------------------------------------------------------------ records and replay
    def drain_records(self) -> list[Record]:
        out, self._records = self._records, []
        return out

    @property
    def quiet(self) -> bool:
        """Nothing queued for the coordinator to gather (no record, no parked answer completed)."""
        return not self._records and not self._outbox

    def to_snapshot(self) -> ClassicGroupSnapshot:
        return ClassicGroupSnapshot(
            generation=self.generation_id,
            protocol_type=self.protocol_type or "",
            protocol_name=self.protocol_name,
            leader=self.leader_id,
            member_seq=self.member_seq,
            members=tuple(m.to_snapshot() for m in self.members.values()),
            current_state_timestamp=self.state_timestamp,
            extra_rebalance_at_ms=self.extra_rebalance_at_ms,
        )

    def commit(self, value: ClassicGroupSnapshot | None) -> Record:
        """The one way the group's durable state changes: queue its record (a snapshot, or
        ``None``: the tombstone) for the log and apply it, with the :meth:`apply` replay uses."""
        record = classic_group_record(self.group_id, value)
        self._records.append(record)
        self._touch()
        self.apply(record)
        return record

    def persist(self) -> None:
        """Commit the group as it is now (a step that changed it in place at rest: the record
        carries what the step changed, and applying it changes nothing more)."""
        self.commit(self.to_snapshot())

    def persist_static_replacement(self, group_instance_id: str, new_id: str) -> None:
        """A static member replaced during a rebalance (a Stable Connect group rebalances first):
        commit the group as the log has it, with the instance's member under ``new_id`` (and the
        current member id counter).

        Kafka writes a static replacement only in Stable; elsewhere it lives in memory until the
        next generation is persisted, so a restart in between loads the old member id and fences
        the new process (FENCED_INSTANCE_ID, fatal for a Java client) once it has its new id. The
        rest of the rebalance stays in memory, as for every other rebalance: the loaded group is
        the last generation with only the id replaced. Nothing to write if the log does not know
        the instance (the new process is then UNKNOWN_MEMBER_ID after a restart, and rejoins)."""
        if self.state not in REBALANCING:
            raise IllegalStateError(f"group {self.group_id}: a static replacement outside a rebalance")
        last = self.persisted_snapshot
        if last is None or not any(m.group_instance_id == group_instance_id for m in last.members):
            return
        old_id = next(m.member_id for m in last.members if m.group_instance_id == group_instance_id)
        members = tuple(
            replace(m, member_id=new_id) if m.group_instance_id == group_instance_id else m
            for m in last.members
        )
        leader = new_id if last.leader == old_id else last.leader
        self.commit(replace(last, members=members, leader=leader, member_seq=self.member_seq))

    def apply(self, record: Record) -> None:
        """Change the group by its record, for a live step (:meth:`commit`) and for replay alike
        (Kafka's ``replay(GroupMetadataKey, GroupMetadataValue)``).

        The record becomes the group as the log has it (``persisted_snapshot``). A tombstone
        empties the group and makes it Dead. Otherwise, unless a rebalance is in progress, the
        group takes every persisted field from the record and is Stable (members) or Empty, its
        soft state kept: this is how a loaded group starts, and how a step's change at rest (a
        generation made Stable or Empty, a static member replaced in Stable, a conversion, an
        adoption) takes effect. During a rebalance the working generation is ahead of the log
        (Kafka keeps it only in memory too): the record is what a restart would load, and changes
        only ``persisted_snapshot``."""
        if record.type is not RecordType.CLASSIC_GROUP:
            return
        value = record.value
        self.persisted = True
        if value is None:
            self.persisted_snapshot = None
            self._clear()
            self.state = ClassicGroupState.DEAD
            return
        assert isinstance(value, ClassicGroupSnapshot)
        self.persisted_snapshot = value
        if self.state in REBALANCING:
            return
        self._load(value)

    def _load(self, value: ClassicGroupSnapshot) -> None:
        """Every persisted field from ``value``; members the record keeps keep their soft state."""
        self.generation_id = value.generation
        self.protocol_type = value.protocol_type or None
        self.protocol_name = value.protocol_name
        self.leader_id = value.leader
        self.member_seq = value.member_seq
        self.state_timestamp = value.current_state_timestamp
        self.extra_rebalance_at_ms = value.extra_rebalance_at_ms
        before = dict(self.members)
        self.members.clear()  # the dict itself stays (callers may hold it)
        self.static.clear()
        for s in value.members:
            member = before.pop(s.member_id, None)
            if member is None:
                member = ClassicMember.from_snapshot(s, value.protocol_type)
            else:
                member.load(s, value.protocol_type)
            self.members[s.member_id] = member
            if s.group_instance_id is not None:
                self.static[s.group_instance_id] = s.member_id
        for gone in before.values():  # replay of an older snapshot's members: nothing parked
            self.complete_join(gone, join_error(ErrorCode.UNKNOWN_MEMBER_ID))
            self.complete_sync(gone, SyncGroupResponse(error_code=int(ErrorCode.UNKNOWN_MEMBER_ID)))
        self.state = ClassicGroupState.STABLE if self.members else ClassicGroupState.EMPTY

    def _clear(self) -> None:
        """Forget every member and persisted field (a deleted group)."""
        self.generation_id = 0
        self.protocol_type = self.protocol_name = self.leader_id = None
        self.members.clear()
        self.static.clear()
        self.pending_members.clear()
        self.pending_sync.clear()
        self.new_member_added = False
        self.initial_delay = None
        self.extra_rebalance_at_ms = -1
        self.forget_rounds = None

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
            "extra_rebalance_at_ms": s.extra_rebalance_at_ms,
            "members": {m.member_id: m for m in s.members},
        }

    # ------------------------------------------------------------------ state machine
    def transition(self, target: ClassicGroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[target]:
            raise IllegalStateError(
                f"group {self.group_id}: {self.state} -> {target} is not a valid transition"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp = now_ms
        self._touch()

    def _touch(self) -> None:
        if self.touched is not None:
            self.touched[self.group_id] = None

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[ClassicGroupState.PREPARING_REBALANCE]

    # ------------------------------------------------------------------ timers
    def session_key(self, member_id: str) -> TimerKey:
        return TimerKey.classic_session(self.group_id, member_id)

    def schedule(self, key: TimerKey, deadline_ms: int) -> None:
        self.armed[key] = deadline_ms
        self.timers.schedule(key, deadline_ms)

    def cancel(self, key: TimerKey) -> None:
        self.armed.pop(key, None)
        self.timers.cancel(key)

    def fired(self, key: TimerKey) -> bool:
        """``key`` was delivered as due: whether this group armed it (its deadline is forgotten
        then); False for a stale delivery of a key cancelled or re-armed since."""
        return self.armed.pop(key, None) is not None

    def arm_session(self, member: ClassicMember, now_ms: int, timeout_ms: int | None = None) -> None:
        key = member.session_key
        if key is None:  # built once per member: a heartbeat must not pay for a new key
            key = member.session_key = self.session_key(member.member_id)
        self.schedule(key, now_ms + (member.session_timeout_ms if timeout_ms is None else timeout_ms))

    def schedule_join(self, now_ms: int, delay_ms: int, initial: tuple[int, int] | None = None) -> None:
        self.initial_delay = initial
        self.schedule(self.join_key, now_ms + delay_ms)

    def cancel_join(self) -> None:
        self.initial_delay = None
        self.cancel(self.join_key)

    # ------------------------------------------------------------------ generations
    def end_generation(self) -> None:
        """The join phase completed and the current generation ends: remember whether it ran
        Connect's eager protocol (``eager_before``: leaving eager takes an extra rebalance), drop
        its pending extra-rebalance timer and the members that had not synced in it."""
        self.eager_before = (
            self.protocol_type == PROTOCOL_TYPE_CONNECT and self.protocol_name == EAGER_PROTOCOL
        )
        self.cancel(self.switch_key)
        self.pending_sync.clear()

    def begin_next_generation(self, now_ms: int) -> None:
        """Kafka's ``initNextGeneration`` with members: the next generation number, the protocol
        the members elect, CompletingRebalance. The working generation stays in memory until its
        leader's SyncGroup commits it Stable, as in Kafka; no extra rebalance is due any more."""
        self.extra_rebalance_at_ms = -1
        self.generation_id += 1
        self.protocol_name = self.select_protocol()
        self.transition(ClassicGroupState.COMPLETING_REBALANCE, now_ms)

    def await_syncs(self) -> None:
        """Every member was answered its JoinGroup in this generation and owes a SyncGroup
        (Kafka's ``pendingSyncMembers``); the sync timer is for this generation."""
        for member_id in self.members:
            self.pending_sync[member_id] = None
        self.sync_generation = self.generation_id

    def clear_pending_sync(self) -> None:
        """A rebalance begins: nobody owes a SyncGroup of the generation it ends."""
        self.pending_sync.clear()

    def remove_pending_sync_member(self, member_id: str) -> None:
        """Kafka's ``removePendingSyncMember``: ``member_id`` sent its SyncGroup."""
        self.pending_sync.pop(member_id, None)

    # ------------------------------------------------------------------ membership primitives
    def _protocol_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for member in self.members.values():
            for name in set(member.protocol_names()):
                counts[name] = counts.get(name, 0) + 1
        return counts

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """Kafka's ``supportsProtocols``: an Empty group takes any non-empty type and list; otherwise
        the type must match and one of the names must be supported by every member."""
        if self.state is ClassicGroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        counts = self._protocol_counts()
        return any(counts.get(name, 0) == len(self.members) for name in names)

    def generate_member_id(self, client_id: str, group_instance_id: str | None, now_ms: int) -> str:
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

    def add(self, member: ClassicMember, parked: ParkedRequest | None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static:
                raise IllegalStateError(f"static member {member.group_instance_id} is already a member")
            self.static[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        member.parked_join = parked
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        """Kafka's ``ClassicGroup.remove``; a parked request still left is answered
        UNKNOWN_MEMBER_ID so no token is orphaned (where Kafka's callers complete the JoinGroup
        future with that error first)."""
        member = self.members.pop(member_id, None)
        if member is not None:
            if member.group_instance_id is not None:
                self.static.pop(member.group_instance_id, None)
            self.complete_join(member, join_error(ErrorCode.UNKNOWN_MEMBER_ID))
            self.complete_sync(member, SyncGroupResponse(error_code=int(ErrorCode.UNKNOWN_MEMBER_ID)))
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.pop(member_id, None)

    def add_pending_member(self, member_id: str, principal: str) -> None:
        """Kafka's ``addPendingMember``: ``member_id`` was handed out with MEMBER_ID_REQUIRED to
        ``principal``; it holds up the join barrier until it joins with it (only that principal
        may: ``state.ownership``) or its session ends."""
        self.pending_members[member_id] = principal

    def remove_member(self, member_id: str) -> None:
        """A member (or pending member) leaves for good: removed, its session timer cancelled."""
        self.remove(member_id)
        self.cancel(self.session_key(member_id))

    def update_member(
        self,
        member: ClassicMember,
        protocols: Protocols,
        rebalance_ms: int,
        session_ms: int,
        parked: ParkedRequest,
    ) -> None:
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_ms
        member.session_timeout_ms = session_ms
        # Kafka overwrites the future of an earlier parked JoinGroup without completing it; answer it
        # so its token does not dangle (the client has given up on that request).
        self.complete_join(member, join_error(ErrorCode.REBALANCE_IN_PROGRESS, member.member_id))
        member.parked_join = parked

    def replace_static_member_id(self, old_id: str, new_id: str) -> ClassicMember:
        """Kafka's ``replaceStaticMember``: same member under a new id, old requests fenced."""
        old = self.members[old_id]
        self.complete_join(old, join_error(ErrorCode.FENCED_INSTANCE_ID, old_id))
        self.complete_sync(old, SyncGroupResponse(error_code=int(ErrorCode.FENCED_INSTANCE_ID)))
        new = old.renamed(new_id)
        # Keep the member's position (so "first member" choices do not change) and the dict itself
        # (callers may hold it).
        entries = [(new_id, new) if mid == old_id else (mid, m) for mid, m in self.members.items()]
        self.members.clear()
        self.members.update(entries)
        if self.leader_id == old_id:
            self.leader_id = new_id
        assert old.group_instance_id is not None
        self.static[old.group_instance_id] = new_id
        return new

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's ``validateMember``: a known instance id must map to this member id."""
        if group_instance_id is not None:
            existing = self.static.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def maybe_elect_new_joined_leader(self) -> bool:
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

    def join_response(
        self, member_id: str, with_members: bool, leader: str | None = None
    ) -> JoinGroupResponse:
        """A JoinGroup answer in the current generation; the leader's lists every member with its
        metadata for the elected protocol."""
        members = (
            tuple(
                JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                for m in self.members.values()
            )
            if with_members
            else ()
        )
        return JoinGroupResponse(
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader=(self.leader_id if leader is None else leader) or "",
            member_id=member_id,
            members=members,
        )


__all__ = [
    "IN_GENERATION",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "ClassicDescribedGroup",
    "ClassicDescribedMember",
    "ClassicGroup",
    "join_error",
]
