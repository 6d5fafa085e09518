"""The state of a ``connect`` group and the one way it changes (Kafka's ``modern.consumer.ConsumerGroup``).

State apart from logic, the way Kafka keeps ``ConsumerGroup`` apart from ``GroupMetadataManager``:
:class:`ConnectGroup` here holds everything a connect group is (persisted, derived and soft
state), its invariants and its record appliers; the steps that decide what changes are functions
in ``connect.membership`` (membership, targets, timers, load) and ``connect.heartbeat`` (the
ConnectGroupHeartbeat API) that take the group, and collaborators composed into it
(``client_side``, ``legacy_members``) whose steps take it as an argument too. None of them touches
its private parts.

Persisted state (members' metadata and current assignments, the target and its metadata, the group
metadata) changes only in :meth:`ConnectGroup.write`: it applies a record with :meth:`apply`,
the very code a restart replays, and queues it for ``drain_records``. So what a run wrote and what
it holds cannot drift apart.

Derived from the records, by the appliers only (so replay rebuilds them): the owner index (who
owns each item, from the current assignments) and the member aggregates (``MemberIndex``,
``working``, ``untargeted``, ``departed``). Soft state, which no record carries (a restart redoes
it), changes without a record, through the methods here or those of the collaborator holding it:
the config view (the coordinator writes its CONFIG record), the timers, who computes a client-side
target (``client_side``), the legacy members' classic states (``legacy_members``), what members
last reported owning and were last told, until when a loaded legacy member may still wait
elsewhere, and whether a downgrade is pending.

The steps decide and those methods apply: no module outside this one (and the collaborators' own)
assigns an attribute of the group or changes one of its containers
(``tests/test_engine_reshape.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.api import AssignmentHeader, MemberAssignment
from connect_bridge.state.assignors import AssignmentSpec, full_target
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect.client_side import ClientSideAssignment
from connect_bridge.state.connect.legacy_members import CONFIG_MISMATCH, LegacyMembers
from connect_bridge.state.connect.member_index import MemberIndex
from connect_bridge.state.connect.records import (
    current_assignment_record,
    group_metadata_record,
    member_metadata_record,
    member_tombstones,
)
from connect_bridge.state.connect.target_assignment import target_records, work_records
from connect_bridge.state.model import (
    EMPTY,
    NO_METADATA,
    AssignedMetadata,
    ConfigView,
    CurrentAssignment,
    GroupMetadata,
    GroupState,
    Items,
    Member,
    MemberMetadata,
    MemberState,
    TargetMetadata,
    split_target_member,
)
from connect_bridge.state.records import Record, RecordType
from connect_bridge.state.result import Touched
from connect_bridge.state.timers import TimerKey, Timers

HELD_OWNER = "\0held"
"""Owner of work held for a departed worker that may still run it (never a member id)."""
_PLACEHOLDER = MemberMetadata(url="\0placeholder")
_NOTHING_OWNED = CurrentAssignment()
"""Metadata of a member whose current-assignment record was replayed before its metadata record."""


class ConnectGroup:
    """A connect group's state: persisted, derived and soft; the record writers and timer primitives
    the steps (``connect.membership``, ``connect.heartbeat``) change it through."""

    def __init__(
        self, group_id: str, config: CoordinatorConfig, timers: Timers, view: ConfigView | None = None
    ) -> None:
        self.group_id = group_id
        self.config = config
        self.timers = timers
        self._header: AssignmentHeader | None = None
        """``assignment_header`` as last computed; dropped by every record applied and by a new view
        (nothing else changes what it is made of), so the steady heartbeat path reads it for free."""
        self._view = view or ConfigView()
        self.metadata = GroupMetadata()
        self.members: dict[str, Member] = {}
        self.target_metadata = TargetMetadata()
        self.target: dict[str, Items] = {}
        self.working: dict[str, Items] = {}
        """The entries of ``target`` with work: what a server-side assignor keeps (most members of a
        big group have none, and the assignor need not look at them)."""
        self.untargeted: set[str] = set()
        """Members without a ``target`` entry (joined since the last target)."""
        self.departed: set[str] = set()
        """``target`` entries of members no longer in the group (tombstoned by the next target)."""
        self.assignor_metadata: dict[str, AssignedMetadata] = {}
        """The client-side assignor's metadata per member of the target (only members that have some)."""
        self.owners: dict[ConnectorTaskId, str] = {}
        """Who owns each item (assigned or pending revocation): derived from the members' current
        assignments by the appliers below, so replay rebuilds it."""
        self.index = MemberIndex()
        """Aggregates over the members (assignor votes and counts, url and instance id lookups,
        config offsets, (protocol, state) counts, sorted ids), changed only by the appliers below
        (like ``working``, ``untargeted`` and ``departed``), so replay rebuilds them."""
        self._records: list[Record] = []
        self.touched: Touched | None = None
        """The coordinator's set of changed groups (``state.result``): a record written marks this
        group there, so a step's result is built from the groups it changed only."""
        # Soft state (in memory only; a restart redoes it).
        self.client_side = ClientSideAssignment(group_id, timers)
        """Who computes a client-side target, and what it was asked."""
        self.legacy_members = LegacyMembers(group_id, timers)
        """The legacy members' classic states and the classic API steps (``legacy_members``)."""
        self.downgrade_pending = False
        """Set when the last new-protocol member left a group that still has legacy members
        (``connect.membership.expect_downgrade``), until ``connect.membership.downgrade_due`` says yes or
        drops it."""
        self.reported: dict[str, Items] = {}
        """What each member last reported owning, until it owns what it was last sent (after a
        restart nothing is resent until a member reports again)."""
        self.told: dict[str, AssignmentHeader] = {}
        """The assignment header each new-protocol member was last sent (after a restart every
        member is sent its assignment once more)."""
        self.revocation_deadlines: dict[str, int] = {}
        """The revocation deadline of a member whose revocation timer ``connect.heartbeat`` brought
        forward because its worker seemed to have reset (it rejoined owning none of what it was
        revoking), kept until that revocation ends: if the worker reports owning what it revokes
        after all, the deadline is put back. Soft state (after a restart the timer is re-armed)."""
        self.waits_elsewhere_until: dict[str, int] = {}
        """Legacy members of a group just loaded from the log (or converted from such a classic
        group): until when each may still wait on a JoinGroup parked at the previous coordinator,
        running its tasks (``ClassicMember.waits_elsewhere_until_ms``). Cleared once the member
        talks to this coordinator (``connect.membership.heard_from``)."""
        self._session_keys: dict[str, TimerKey] = {}
        """Each member's session timer key, built once: a heartbeat re-arms it on every call."""

    # ------------------------------------------------------------------ derived views
    @property
    def view(self) -> ConfigView:
        """The group's view of the Connect config topic (soft: the coordinator keeps its record)."""
        return self._view

    def set_config_view(self, view: ConfigView) -> None:
        """The config topic as the bridge last read it (a new view, or the coordinator's after a
        load): every Assignment's config offset and CONFIG_MISMATCH come from it, so the cached
        ``assignment_header`` goes."""
        self._view = view
        self._header = None

    @property
    def group_epoch(self) -> int:
        return self.metadata.group_epoch

    @property
    def assignment_epoch(self) -> int:
        return self.target_metadata.assignment_epoch

    @property
    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        for m in self.members.values():
            c = m.current
            if c.member_epoch != self.assignment_epoch or c.state is not MemberState.STABLE:
                return GroupState.RECONCILING
        return GroupState.STABLE

    def assignor_name(self) -> str:
        """The common client assignor if there is one, else the server assignor most members ask for.

        Read from :attr:`index` (no pass over the members): it is asked on every join and leave.
        """
        client = self.common_client_assignor()
        if client is not None:
            return client
        return self.index.server_assignor(self.config.default_assignor)

    def common_client_assignor(self) -> str | None:
        """Seed 000 "Assignor Selection" (``client_side.common_client_assignor``) from the index: the
        first assignor, in the lowest member id's preference order, that every member advertises."""
        shared = self.index.shared_client_names(len(self.members))
        if not shared:
            return None
        for a in self.members[self.index.ids[0]].metadata.client_assignors:  # the lowest id
            if a.name in shared:
                return a.name
        return None

    def leader_url(self) -> str:
        leader = self.members.get(self.metadata.leader_id)
        return leader.metadata.url if leader else ""

    def assignment_config_offset(self) -> int:
        """``max(view offset, every member's reported offset)``, the members' max kept by the index."""
        members_max = self.index.max_config_offset()
        offset = self.view.offset
        return offset if members_max is None or members_max < offset else members_max

    def assignment_header(self) -> AssignmentHeader:
        """The leader, the config offset and the error every member's Assignment carries.

        The error is CONFIG_MISMATCH while a member has reported a config offset beyond the view:
        the target was computed from an older config (the bridge reads the config topic on its own,
        a poll behind), and a worker that has read as far as the stamped offset would start work
        that config no longer has (a deleted connector, a task above a lowered ``tasks.max``).
        Connect's own leader answers everyone so (``ensureLeaderConfig``), and so do the classic
        members' SyncGroup answers (``legacy_steps.encode_member_assignment``). It ends when the
        view catches up, which bumps the group epoch and so sends everyone a new assignment.
        """
        header = self._header
        if header is None:
            offset = self.assignment_config_offset()
            error = CONFIG_MISMATCH if offset > self.view.offset else self.target_metadata.error
            header = AssignmentHeader(self.metadata.leader_id, self.leader_url(), offset, error)
            self._header = header
        return header

    def member_by_instance(self, instance_id: str | None) -> Member | None:
        """The first member (in member order) with this instance id."""
        mid = self.index.first_with_instance(instance_id)
        return self.members[mid] if mid is not None else None

    def held_owner(self, instance_id: str | None, url: str) -> str | None:
        """Who held work goes back to: the last member with its instance id, else with its url."""
        index = self.index
        return (index.last_with_instance(instance_id) if instance_id else None) or (
            index.last_with_url(url) if url else None
        )

    def principal_of(self, member_id: str) -> str | None:
        """The principal owning ``member_id``, or None if it is not a member."""
        member = self.members.get(member_id)
        return member.metadata.principal if member is not None else None

    def instance_principal(self, instance_id: str) -> str | None:
        """The principal owning the static member ``instance_id``, or None if none has it."""
        member = self.member_by_instance(instance_id)
        return member.metadata.principal if member is not None else None

    def held_items(self) -> Items:
        held = self.metadata.held
        if not held:
            return EMPTY
        return frozenset().union(*(h.items for h in held))

    def owner_lookup(self) -> Callable[[ConnectorTaskId], str | None]:
        """Who holds an item: its owning member, the hold of a departed worker that may run it, or a
        legacy member that held work was returned to and that has not been given it yet.

        Held work is out of every server-side target, but a client-side target computed before the
        departure may still name it: it must not be granted while its old worker may still run it.
        Returned work is still its member's (``LegacyMembers.returning``).
        """
        held = self.held_items()
        lookup: Callable[[ConnectorTaskId], str | None]
        if not held:
            lookup = self.owners.get
        else:
            owners = self.owners

            def lookup(item: ConnectorTaskId) -> str | None:
                owner = owners.get(item)
                return owner if owner is not None else (HELD_OWNER if item in held else None)

        returning = self.legacy_members.returning
        if not returning:
            return lookup
        returned_to = {item: mid for mid, items in returning.items() for item in items}
        held_lookup = lookup

        def owner_of(item: ConnectorTaskId) -> str | None:
            owner = held_lookup(item)
            return owner if owner is not None else returned_to.get(item)

        return owner_of

    def waits_elsewhere(self, member_id: str) -> bool:
        """``member_id`` was loaded (a restart, a takeover) and has sent nothing since: it may be
        parked in a JoinGroup at the previous coordinator until its first session after the load
        ends (``holds.first_session_after_load_ms``)."""
        return member_id in self.waits_elsewhere_until

    def assignment_for(self, member: Member, header: AssignmentHeader | None = None) -> MemberAssignment:
        """The member's current work with the group's ``header`` (default: the current one) and the
        assignor's metadata for the member from the target it converges to."""
        data = self.assignor_metadata.get(member.member_id, NO_METADATA)
        leader_id, leader_url, config_offset, error = header or self.assignment_header()
        return MemberAssignment(
            items=member.current.assigned,
            leader_id=leader_id,
            leader_url=leader_url,
            config_offset=config_offset,
            error=error,
            metadata_version=data.version,
            metadata=data.metadata,
        )

    def snapshot(self) -> dict:
        """Everything persisted, in a comparable form (tests compare replayed state with live state)."""
        return {
            "metadata": self.metadata,
            "view": self.view,
            "target_metadata": self.target_metadata,
            "target": dict(self.target),
            "assignor_metadata": dict(self.assignor_metadata),
            "members": {mid: (m.metadata, m.current) for mid, m in sorted(self.members.items())},
        }

    # ------------------------------------------------------------------ soft state
    def report_changes_to(self, touched: Touched) -> None:
        """Mark this group in the coordinator's set of changed groups (``state.result``) whenever
        it writes a record, so a step's result is built from the groups it changed only."""
        self.touched = touched

    def note_reported(self, member_id: str, owned: Items) -> None:
        """What ``member_id`` reports owning (or, joining, nothing; or what it had acknowledged
        when its assignment changes): its Assignment is resent until it reports owning it."""
        self.reported[member_id] = owned

    def acknowledged(self, member_id: str) -> None:
        """``member_id`` owns what it was last sent, or left: nothing is resent to it any more
        (the steady heartbeat path skips it)."""
        self.reported.pop(member_id, None)

    def note_told(self, member_id: str, header: AssignmentHeader) -> None:
        """``member_id`` was sent an Assignment with ``header``: it is told again once the leader,
        config offset or error changes."""
        self.told[member_id] = header

    def keep_revocation_deadline(self, member_id: str, deadline_ms: int) -> None:
        """The revocation timer of ``member_id`` is brought forward (its worker seemed to have
        reset): ``deadline_ms`` is when it was due, to put back if the worker turns out to run
        what it revokes after all."""
        self.revocation_deadlines[member_id] = deadline_ms

    def drop_revocation_deadline(self, member_id: str) -> None:
        """The revocation that a kept deadline belongs to ended, or its deadline is put back."""
        del self.revocation_deadlines[member_id]

    def note_waits_elsewhere(self, member_id: str, until_ms: int) -> None:
        """The legacy member ``member_id`` was loaded (or converted soon after a load): until
        ``until_ms`` it may still wait on a JoinGroup parked at the previous coordinator."""
        self.waits_elsewhere_until[member_id] = until_ms

    def stop_waiting_elsewhere(self, member_id: str) -> None:
        """A request of ``member_id`` reached this coordinator (``connect.membership.heard_from``):
        it waits on no JoinGroup parked at a previous one (a Java client talks to one coordinator
        at a time)."""
        self.waits_elsewhere_until.pop(member_id, None)

    def mark_downgrade_pending(self) -> None:
        """The last new-protocol member left while legacy members remain: convert back to a
        classic group once ``connect.membership.downgrade_due`` says so."""
        self.downgrade_pending = True

    def drop_downgrade_pending(self) -> None:
        """The pending downgrade happens now, or no longer applies (a new-protocol member is
        back, the group emptied, or the migration policy forbids it)."""
        self.downgrade_pending = False

    # ------------------------------------------------------------------ records
    def drain_records(self) -> list[Record]:
        out, self._records = self._records, []
        return out

    @property
    def quiet(self) -> bool:
        """Nothing queued for the coordinator to gather (no record written since the last drain)."""
        return not self._records

    def write(self, record: Record) -> None:
        """The one way persisted state changes: apply the record as replay would, and queue it."""
        self.apply(record)
        self._records.append(record)
        if self.touched is not None:
            self.touched[self.group_id] = None

    def set_metadata(self, **changes: Any) -> None:
        self.write(group_metadata_record(self.group_id, replace(self.metadata, **changes)))

    def bump_group_epoch(self) -> None:
        self.set_metadata(group_epoch=self.metadata.group_epoch + 1)

    def set_member_metadata(self, member_id: str, metadata: MemberMetadata) -> None:
        self.write(member_metadata_record(self.group_id, member_id, metadata))

    def set_current(self, member: Member, current: CurrentAssignment) -> None:
        """Write the member's current assignment (its applier keeps the owner index in step)."""
        self.write(current_assignment_record(self.group_id, member.member_id, current))
        if current.state is not MemberState.UNREVOKED:
            self.timers.cancel(TimerKey.revoke(self.group_id, member.member_id))

    def install_target(
        self,
        epoch: int,
        target: Mapping[str, Items],
        error: int = 0,
        metadata: Mapping[str, AssignedMetadata] | None = None,
    ) -> None:
        """``metadata``: the client-side assignor's per-member metadata (none from server-side ones)."""
        old_target, old_metadata = self.target, self.assignor_metadata
        for record in target_records(self.group_id, old_target, old_metadata, epoch, target, error, metadata):
            self.write(record)

    def install_work(self, epoch: int, spec: AssignmentSpec, work: Mapping[str, Items]) -> None:
        """Install a server-side target given as the members with work (``assignors.WORK_ASSIGNORS``):
        the records of ``install_target(epoch, full_target(spec, work))``, found by looking only at
        the members that can differ (those with work before or now, and those without an entry)."""
        if self.assignor_metadata:  # a client-side target's metadata goes: compare member by member
            self.install_target(epoch, full_target(spec, work))
            return
        maybe_changed = {mid for mid in self.working if mid in self.members}
        maybe_changed |= self.untargeted
        for record in work_records(self.group_id, self.target, epoch, work, maybe_changed, self.departed):
            self.write(record)

    def delete_member(self, member_id: str) -> None:
        """Delete a member's records, its timers and its soft state; the caller settles its work
        and the target."""
        self.timers.cancel(TimerKey.session(self.group_id, member_id))
        self.timers.cancel(TimerKey.revoke(self.group_id, member_id))
        self._session_keys.pop(member_id, None)
        self.told.pop(member_id, None)
        self.revocation_deadlines.pop(member_id, None)
        self.waits_elsewhere_until.pop(member_id, None)
        self.legacy_members.forget(member_id)
        for record in member_tombstones(self.group_id, member_id):
            self.write(record)

    # ------------------------------------------------------------------ timers
    def arm_session(self, member: Member, now_ms: int, timeout_ms: int | None = None) -> None:
        """(Re)arm the member's session timer: its session timeout from ``now_ms`` by default."""
        key = self._session_keys.get(member.member_id)
        if key is None:
            key = self._session_keys[member.member_id] = TimerKey.session(self.group_id, member.member_id)
        self.timers.schedule(
            key, now_ms + (member.metadata.session_timeout_ms if timeout_ms is None else timeout_ms)
        )

    def arm_revocation(self, member: Member, now_ms: int) -> None:
        """Arm the member's revocation timer unless it runs already: a revocation has one deadline."""
        key = TimerKey.revoke(self.group_id, member.member_id)
        if key not in self.timers:
            self.timers.schedule(key, now_ms + member.metadata.rebalance_timeout_ms)

    def arm_held_timer(self) -> None:
        """The hold timer fires at the earliest hold's deadline (none while nothing is held)."""
        key = TimerKey.held(self.group_id)
        if self.metadata.held:
            self.timers.schedule(key, min(h.deadline_ms for h in self.metadata.held))
        else:
            self.timers.cancel(key)

    # ------------------------------------------------------------------ replay
    def apply(self, record: Record) -> None:
        """Change state by one record: live writes (``write``) and replay after a restart alike."""
        applier = _APPLIERS.get(record.type)
        if applier is not None:
            self._header = None
            applier(self, record.member_id, record.value)

    def _apply_group_metadata(self, _mid: str, value: object) -> None:
        # A tombstone deletes the group: like Kafka's ``removeGroup`` the coordinator drops this
        # object (the step that retires it, or ``GroupCoordinator.replay``), which keeps the
        # epochs it ended at for whoever still holds it.
        if value is not None:
            self.metadata = value  # type: ignore[assignment]

    def _apply_target_metadata(self, _mid: str, value: object) -> None:
        self.target_metadata = value if value is not None else TargetMetadata()  # type: ignore[assignment]

    def _apply_target_member(self, mid: str, value: object) -> None:
        if value is None:
            if self.target.pop(mid, None) is not None:
                self.departed.discard(mid)
                if mid in self.members:
                    self.untargeted.add(mid)
            self.working.pop(mid, None)
            self.assignor_metadata.pop(mid, None)
            return
        items, data = split_target_member(value)  # type: ignore[arg-type]
        if mid not in self.target:
            if mid in self.members:
                self.untargeted.discard(mid)
            else:
                self.departed.add(mid)
        # One empty set for every idle member (a replayed record decodes a new one each): a new
        # target then finds an idle member unchanged by identity (``target_records``).
        self.target[mid] = items or EMPTY
        if items:
            self.working[mid] = items
        else:
            self.working.pop(mid, None)
        if data == NO_METADATA:
            self.assignor_metadata.pop(mid, None)
        else:
            self.assignor_metadata[mid] = data

    def _owns(self, mid: str, old: CurrentAssignment, new: CurrentAssignment) -> None:
        """The owner index follows a member's current assignment from ``old`` to ``new`` (applier
        only; the engine never gives one item to two members, so the last one applied owns it)."""
        if old.assigned is new.assigned and old.revoking is new.revoking:
            return
        owners = self.owners
        for item in old.owned - new.owned:
            if owners.get(item) == mid:
                del owners[item]
        for item in new.owned - old.owned:
            owners[item] = mid

    def _member_in(self, member: Member) -> None:
        """A member entered ``members`` (applier only): the aggregates count it."""
        mid = member.member_id
        self.members[mid] = member
        self.index.added(mid, member.metadata, member.current.state)
        self._owns(mid, _NOTHING_OWNED, member.current)
        if mid in self.target:
            self.departed.discard(mid)
        else:
            self.untargeted.add(mid)

    def _member_out(self, member: Member) -> None:
        """A member left ``members`` (applier only): the aggregates forget it."""
        mid = member.member_id
        del self.members[mid]
        self.index.removed(mid, member.metadata, member.current.state)
        self._owns(mid, member.current, _NOTHING_OWNED)
        self.untargeted.discard(mid)
        if mid in self.target:
            self.departed.add(mid)

    def _apply_member_metadata(self, mid: str, value: object) -> None:
        member = self.members.get(mid)
        if value is None:
            if member is not None:
                self._member_out(member)
            return
        if member is None:
            self._member_in(Member(mid, value, CurrentAssignment()))  # type: ignore[arg-type]
        else:
            self.index.changed(mid, member.metadata, value, member.current.state)  # type: ignore[arg-type]
            member.metadata = value  # type: ignore[assignment]

    def _apply_current_assignment(self, mid: str, value: object) -> None:
        # Records of one key are independent of other keys' order: a current assignment may arrive
        # before its member's metadata after compaction.
        member = self.members.get(mid)
        if value is None:
            if member is not None and member.metadata is _PLACEHOLDER:
                self._member_out(member)
        elif member is None:
            self._member_in(Member(mid, _PLACEHOLDER, value))  # type: ignore[arg-type]
        else:
            current: CurrentAssignment = value  # type: ignore[assignment]
            self.index.state_changed(member.metadata.protocol, member.current.state, current.state)
            self._owns(mid, member.current, current)
            member.current = current


_APPLIERS: dict[RecordType, Callable[[ConnectGroup, str, object], None]] = {
    RecordType.GROUP_METADATA: ConnectGroup._apply_group_metadata,
    RecordType.TARGET_METADATA: ConnectGroup._apply_target_metadata,
    RecordType.TARGET_MEMBER: ConnectGroup._apply_target_member,
    RecordType.MEMBER_METADATA: ConnectGroup._apply_member_metadata,
    RecordType.CURRENT_ASSIGNMENT: ConnectGroup._apply_current_assignment,
}
