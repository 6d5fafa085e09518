"""The membership steps of a ``connect`` group, shared by both protocols.

ConnectGroupHeartbeat (``connect_group``) and the classic API of legacy members
(``legacy_members``) go through the same steps: a member is added, has its metadata updated, is
reconciled toward the target, is taken over by its static successor or removed (its work held
while its worker may still run it); a bumped group epoch brings a new target; timers expire
members and holds. Each step decides and writes records (``ConnectGroupState._write``), never
state directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state import assignors
from connect_bridge.state.api import AssignmentHeader
from connect_bridge.state.cg_state import ConnectGroupState
from connect_bridge.state.cg_validation import epoch_relevant
from connect_bridge.state.client_side import ClientSideAssignment
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect_records import (
    current_assignment_record,
    group_metadata_record,
    group_metadata_tombstone,
    member_tombstones,
    target_member_record,
    target_member_tombstone,
    target_metadata_tombstone,
)
from connect_bridge.state.errors import RequestError
from connect_bridge.state.holds import first_session_after_load_ms, hold_departed, timer_removal_hold_ms
from connect_bridge.state.legacy_members import LegacyMembers
from connect_bridge.state.model import (
    EMPTY,
    NO_METADATA,
    ConfigView,
    CurrentAssignment,
    GroupMetadata,
    GroupState,
    Items,
    Member,
    MemberMetadata,
    MemberState,
    TargetMetadata,
)
from connect_bridge.state.reconciliation import Reconciliation, next_assignment
from connect_bridge.state.target_assignment import assignment_spec, resolve_held
from connect_bridge.state.timers import TimerKey, TimerKind, Timers

_MEMBER_ID_NAMESPACE = uuid.UUID("8a6f2b8e-5c1d-4b7a-9f3e-2d4c6b8a0e1f")


class ConnectGroupMembership(ConnectGroupState):
    """Membership, target and timer steps of a connect group.

    Soft state kept here besides the timers (none of it persisted; a restart redoes it): who
    computes a client-side target (``client_side``), the legacy members' classic states
    (``legacy_members``), what members last reported owning (``_reported``), the leader, config
    offset and error each new-protocol member was last told (``_told``), the session timer keys
    (``_session_keys``), until when a legacy member may still wait on a JoinGroup at a previous
    coordinator (``_waits_elsewhere_until``) and whether a downgrade is pending (``downgrade_pending``).
    """

    def __init__(
        self, group_id: str, config: CoordinatorConfig, timers: Timers, view: ConfigView | None = None
    ) -> None:
        super().__init__(group_id, config, timers, view)
        self.client_side = ClientSideAssignment(group_id, timers)
        self.legacy_members = LegacyMembers(group_id, timers)
        self._downgrade_pending = False
        """Set when the last new-protocol member left a group that still has legacy members
        (:meth:`expect_downgrade`), until :meth:`downgrade_due` says yes or drops it."""
        self._reported: dict[str, Items] = {}
        """What each member last reported owning (in memory only: after a restart nothing is resent
        until a member reports again)."""
        self._told: dict[str, AssignmentHeader] = {}
        """The assignment header each new-protocol member was last sent (in memory only: after a
        restart every member is sent its assignment once more)."""
        self._session_keys: dict[str, TimerKey] = {}
        """Each member's session timer key, built once: a heartbeat re-arms it on every call."""
        self._waits_elsewhere_until: dict[str, int] = {}
        """Legacy members of a group just loaded from the log (or converted from such a classic
        group): until when each may still wait on a JoinGroup parked at the previous coordinator,
        running its tasks (``ClassicMember.waits_elsewhere_until_ms``). Cleared once the member
        talks to this coordinator (``heard_from``)."""

    # ------------------------------------------------------------------ conversion
    def install_converted(
        self,
        metadata: GroupMetadata,
        target_metadata: TargetMetadata,
        members: list[tuple[str, MemberMetadata, CurrentAssignment]],
        now_ms: int,
        waits_elsewhere_until_ms: dict[str, int] | None = None,
    ) -> None:
        """Become the image of a converted classic group: target = current, nothing moves.

        ``waits_elsewhere_until_ms``: the classic members that may still wait on a JoinGroup at the
        previous coordinator (a conversion soon after a load) keep that deadline, so a timer that
        removes them holds their work until they can have noticed (``remove_by_timer``)."""
        self._waits_elsewhere_until.update(waits_elsewhere_until_ms or {})
        for mid, member_metadata, current in members:
            self._set_member_metadata(mid, member_metadata)
            member = self.members[mid]
            self._set_current(member, current)
            self.arm_session(member, now_ms)
            if current.state is MemberState.UNREVOKED:
                self._arm_revocation(member, now_ms)
        self._install_target(target_metadata.assignment_epoch, {mid: c.assigned for mid, _, c in members})
        self._write(group_metadata_record(self.group_id, metadata))
        self.legacy_members.elected = metadata.leader_id  # elected by the classic group

    def tombstone_all(self) -> None:
        """Delete every record of this group (it becomes a classic group); timers go with it."""
        for mid in list(self.members):
            self._delete_member(mid)
        for mid in list(self.target):
            self._write(target_member_tombstone(self.group_id, mid))
        self.timers.cancel(TimerKey.held(self.group_id))
        self.timers.cancel(TimerKey.compute(self.group_id))
        # Applied like every other record: a conversion reads what it needs of the group (epochs,
        # leader, member seq) before it retires it, so nothing reads the group after this.
        self._write(target_metadata_tombstone(self.group_id))
        self._write(group_metadata_tombstone(self.group_id))

    def rebuild_after_load(self, now_ms: int) -> None:
        """Re-arm timers once all records are replayed (a restart or a takeover): a legacy member's
        first session lasts as long as a JoinGroup it may have parked at the previous coordinator
        (``holds.first_session_after_load_ms``). The owner index came with the records."""
        for mid, member in self.members.items():
            meta = member.metadata
            first = None
            if meta.is_legacy:
                first = first_session_after_load_ms(
                    meta.session_timeout_ms, meta.rebalance_timeout_ms, self.config.worker_request_timeout_ms
                )
                self._waits_elsewhere_until[mid] = now_ms + first
            self.arm_session(member, now_ms, first)
            if member.current.state is MemberState.UNREVOKED:
                self._arm_revocation(member, now_ms)
        self._arm_held_timer()
        self.legacy_members.elected = self.metadata.leader_id  # a loaded leader kept its leader state

    # ------------------------------------------------------------------ timers
    def arm_session(self, member: Member, now_ms: int, timeout_ms: int | None = None) -> None:
        key = self._session_keys.get(member.member_id)
        if key is None:
            key = self._session_keys[member.member_id] = TimerKey.session(self.group_id, member.member_id)
        self.timers.schedule(
            key, now_ms + (member.metadata.session_timeout_ms if timeout_ms is None else timeout_ms)
        )

    def _arm_revocation(self, member: Member, now_ms: int) -> None:
        key = TimerKey.revoke(self.group_id, member.member_id)
        if key not in self.timers:
            self.timers.schedule(key, now_ms + member.metadata.rebalance_timeout_ms)

    def _arm_held_timer(self) -> None:
        key = TimerKey.held(self.group_id)
        if self.metadata.held:
            self.timers.schedule(key, min(h.deadline_ms for h in self.metadata.held))
        else:
            self.timers.cancel(key)

    def on_timer(self, key: TimerKey, now_ms: int) -> None:
        _TIMER_HANDLERS[key.kind](self, key, now_ms)
        self.maybe_update_target(now_ms)

    def _on_session_timeout(self, key: TimerKey, now_ms: int) -> None:
        member = self.members.get(key.member_id)
        if member is not None:
            self.remove_by_timer(member, now_ms)

    def _on_revocation_timeout(self, key: TimerKey, now_ms: int) -> None:
        member = self.members.get(key.member_id)
        if member is not None and member.current.state is MemberState.UNREVOKED:
            self.remove_by_timer(member, now_ms)

    def _on_compute_timeout(self, _key: TimerKey, _now_ms: int) -> None:
        self.client_side.on_timeout(self)

    def _on_hold_expired(self, _key: TimerKey, _now_ms: int) -> None:
        self._bump_group_epoch()

    def _on_legacy_timeout(self, key: TimerKey, now_ms: int) -> None:
        self.legacy_members.on_timer(self, key, now_ms)

    def owner_lookup(self) -> Callable[[ConnectorTaskId], str | None]:
        """Who holds an item (``ConnectGroupState.owner_lookup``), and held work returned to a legacy
        member that has not been given it yet: still that member's (``LegacyMembers.returning``)."""
        lookup = super().owner_lookup()
        returning = self.legacy_members.returning
        if not returning:
            return lookup
        returned_to = {item: mid for mid, items in returning.items() for item in items}

        def owner_of(item: ConnectorTaskId) -> str | None:
            owner = lookup(item)
            return owner if owner is not None else returned_to.get(item)

        return owner_of

    # ------------------------------------------------------------------ membership
    def new_member_id(self) -> str:
        seq = self.metadata.member_seq + 1
        self._set_metadata(member_seq=seq)
        return str(uuid.uuid5(_MEMBER_ID_NAMESPACE, f"{self.config.member_id_salt}{self.group_id}/{seq}"))

    def add_member(self, member_id: str, metadata: MemberMetadata, now_ms: int) -> Member:
        self._set_member_metadata(member_id, metadata)
        member = self.members[member_id]
        self._write(current_assignment_record(self.group_id, member_id, member.current))
        if not self.metadata.leader_id or self.metadata.leader_id not in self.members:
            self._set_metadata(leader_id=member_id)
        self._bump_group_epoch()
        self.arm_session(member, now_ms)
        return member

    def _delete_member(self, member_id: str) -> None:
        """Delete a member's records and its timers; the caller settles its work and the target."""
        self.timers.cancel(TimerKey.session(self.group_id, member_id))
        self.timers.cancel(TimerKey.revoke(self.group_id, member_id))
        self._session_keys.pop(member_id, None)
        self._told.pop(member_id, None)
        self._waits_elsewhere_until.pop(member_id, None)
        self.legacy_members.forget(member_id)
        for record in member_tombstones(self.group_id, member_id):
            self._write(record)

    def heard_from(self, member_id: str, now_ms: int) -> None:
        """A request of ``member_id`` reached this coordinator: it no longer waits on a JoinGroup
        parked at a previous one (a Java client talks to one coordinator at a time); and another
        member of the same worker url that has sent nothing since the load is an earlier
        incarnation of that worker (:meth:`_end_first_sessions_of_earlier_incarnations`)."""
        self._waits_elsewhere_until.pop(member_id, None)
        self._end_first_sessions_of_earlier_incarnations(member_id, now_ms)

    def _end_first_sessions_of_earlier_incarnations(self, member_id: str, now_ms: int) -> None:
        """A member loaded from the log and not heard from since has a first session as long as a
        JoinGroup it may have parked at the previous coordinator (``first_session_after_load_ms``,
        40 s at Connect's defaults). Once a member with the same worker url talks to this
        coordinator, that worker runs as another process (a url belongs to one live process): the
        silent member is an earlier incarnation, gone or stopped (its LeaveGroup not yet in the log
        when the bridge restarted), parked nowhere. It is put on the session Kafka's ``onLoaded``
        arms, a plain session from the load (at once if that has passed), so new work dealt to it
        meanwhile goes to a live member within the rebalance timeout, as on Kafka (adversarial drill
        97000291076073: a task added 6.7 s after a restart waited 36 s on such a member, against a
        30 s bound). Its hold is unchanged: a timer removing it still holds what it owned until a
        JoinGroup it might have parked would have timed out (``remove_by_timer``), and held work goes
        back to the member of its url (``holds.hold_departed``)."""
        member = self.members.get(member_id)
        url = member.metadata.url if member is not None else ""
        if not url:
            return
        for mid, until in list(self._waits_elsewhere_until.items()):
            other = self.members.get(mid)
            if other is None or mid == member_id or other.metadata.url != url:
                continue
            meta = other.metadata
            first = first_session_after_load_ms(
                meta.session_timeout_ms, meta.rebalance_timeout_ms, self.config.worker_request_timeout_ms
            )
            plain_end = max(now_ms, until - first + meta.session_timeout_ms)
            armed = self.timers.deadline(TimerKey.session(self.group_id, mid))
            if armed is None or plain_end < armed:
                self.arm_session(other, plain_end, 0)

    def waits_elsewhere(self, member_id: str) -> bool:
        """``member_id`` was loaded (a restart, a takeover) and has sent nothing since: it may be
        parked in a JoinGroup at the previous coordinator until its first session after the load
        ends (``holds.first_session_after_load_ms``)."""
        return member_id in self._waits_elsewhere_until

    def remove_by_timer(self, member: Member, now_ms: int) -> None:
        """A session, revocation, join or sync timer removes ``member``: it may still be running,
        for the zombie grace, or longer if it may still wait on a JoinGroup at the coordinator
        before a load (``holds.timer_removal_hold_ms``)."""
        hold_ms = timer_removal_hold_ms(
            member.metadata.session_timeout_ms, now_ms, self._waits_elsewhere_until.get(member.member_id)
        )
        self.remove_member(member, now_ms, min_hold_ms=hold_ms)

    def remove_member(self, member: Member, now_ms: int, min_hold_ms: int = 0) -> None:
        """Drop a member; everything it may still run is held for the scheduled delay.

        Removal proves nothing about the process: a Java worker whose herder stalled keeps running
        everything it owns after its generation is reset, and so does a new-protocol worker until it
        sees its fencing. So its *owned* set (assigned and pending revocation) stays out of every
        target until it comes back (the work returns to it) or the hold expires. Targeted work it
        was never granted is not held: nobody runs it, and holding it for a worker that may already
        be dead (Connect's lost-assignment rule is about what was assigned) let one item wait out
        the delay once per crashed worker it was dealt to. Not only what is configured now: an item
        removed from the config while the member still runs it can be configured again before the
        member stops (adversarial drill 20094737).

        ``min_hold_ms`` holds the work even without a delay: a member removed by a timer may be a
        live worker that was cut off or stalled; it notices after its own session timeout and then
        stops what it ran (``holds.zombie_grace_ms``). A wrong epoch removes nobody (``_check_epoch``).
        """
        mid = member.member_id
        owned = self.legacy_members.may_run(member) if member.metadata.is_legacy else member.current.owned
        owned |= self.legacy_members.returning.get(mid, EMPTY)  # see LegacyMembers.returning
        self._set_current(member, CurrentAssignment())
        self._delete_member(mid)
        held = self.metadata.held
        delay = self.config.scheduled_rebalance_max_delay_ms if self.assignor_name() != assignors.EAGER else 0
        hold = max(delay, min_hold_ms)
        if owned and hold > 0:
            held = (*held, hold_departed(owned, member.metadata, now_ms + hold))
        leader = self.metadata.leader_id
        if leader == mid:
            leader = min(self.members) if self.members else ""
        self.client_side.forget(mid)
        self._reported.pop(mid, None)
        self._set_metadata(group_epoch=self.metadata.group_epoch + 1, leader_id=leader, held=held)
        self._arm_held_timer()
        self._check_downgrade(member.metadata)

    def take_over_static(self, old: Member, new_id: str, metadata: MemberMetadata, now_ms: int) -> Member:
        """A static member coming back: the new member id takes the old member's epoch and work."""
        if new_id != old.member_id and new_id in self.members:
            # Overwriting a live member would leave its owner entries behind (work running nowhere).
            raise RequestError(ErrorCode.FENCED_INSTANCE_ID, f"member id {new_id} is already in use")
        current = replace(old.current, left_temporarily=False)
        target = self.target.get(old.member_id)
        data = self.assignor_metadata.get(old.member_id, NO_METADATA)
        returning = self.legacy_members.returning.get(old.member_id)
        self._delete_member(old.member_id)
        if returning and metadata.is_legacy:
            self.legacy_members.note_returned(new_id, returning)
        self._set_member_metadata(new_id, metadata)
        member = self.members[new_id]
        self._write(current_assignment_record(self.group_id, new_id, current))
        if target is not None:
            self._write(target_member_tombstone(self.group_id, old.member_id))
            self._write(target_member_record(self.group_id, new_id, target, data))
        if self.metadata.leader_id == old.member_id:
            self._set_metadata(leader_id=new_id)
        self.client_side.forget(old.member_id)
        if epoch_relevant(metadata) != epoch_relevant(old.metadata):
            self._bump_group_epoch()
        self.arm_session(member, now_ms)
        if metadata.is_legacy:
            self._check_downgrade(old.metadata)
        return member

    def update_member_metadata(self, member: Member, metadata: MemberMetadata) -> None:
        if metadata != member.metadata:
            bump = epoch_relevant(metadata) != epoch_relevant(member.metadata)
            self._set_member_metadata(member.member_id, metadata)
            if bump:
                self._bump_group_epoch()

    def release_unowned(self, member: Member, owned: Items) -> None:
        """A legacy worker's JoinGroup allocation is what it runs: anything else it has given up."""
        c = member.current
        assigned, revoking = c.assigned & owned, c.revoking & owned
        if assigned != c.assigned or revoking != c.revoking:
            self._set_current(member, replace(c, assigned=assigned, revoking=revoking))

    # ------------------------------------------------------------------ downgrade
    def ready_to_downgrade(self) -> bool:
        """Downgrade only once nothing is held (docs/migration.md "Downgrade and held work").

        Held work protects a departed worker that may come back (or still run it) for the scheduled
        delay; a classic group has no such memory, so converting earlier would let the next classic
        leader deal that work out at once. Until the hold ends (the worker returned, or the delay
        expired and the bridge dealt the work) the legacy members are served as a connect group.
        It also waits while a legacy member is between its JoinGroup answer and its SyncGroup: that
        answer named the member's own protocol, and a SyncGroup reaching a classic group that elected
        another one at the same generation number fails with INCONSISTENT_GROUP_PROTOCOL, which is
        fatal for a Java worker. The sync timer bounds the wait.

        A classic rebalance is slower than the engine at handing out work (it waits for every
        member, a dead one for its session timeout, and a fresh Connect leader may delay work it
        thinks lost), so the bridge first deals what the hold released and converts once the group
        is stable: every member at the target epoch with everything it was targeted.
        """
        return (
            not self.metadata.held
            and not self.legacy_members.any_completing()
            and self.state is GroupState.STABLE
        )

    @property
    def downgrade_pending(self) -> bool:
        """Only legacy members are left to serve, and the group has not converted back yet."""
        return self._downgrade_pending

    def expect_downgrade(self) -> None:
        """No new-protocol member is left to wait for: convert back once :meth:`downgrade_due`."""
        self._downgrade_pending = True

    def downgrade_due(self, allowed: bool) -> bool:
        """Whether the coordinator converts the group back to classic now. A pending downgrade is
        dropped once a new-protocol member is back, the group emptied or ``allowed`` (the
        migration policy) forbids it; otherwise it waits for :meth:`ready_to_downgrade`."""
        if not self._downgrade_pending:
            return False
        legacy_only = bool(self.members) and all(m.metadata.is_legacy for m in self.members.values())
        if not legacy_only or not allowed:
            self._downgrade_pending = False
            return False
        if not self.ready_to_downgrade():
            return False
        self._downgrade_pending = False
        return True

    def _check_downgrade(self, departed: MemberMetadata) -> None:
        if departed.is_legacy or not self.members:
            return
        if all(m.metadata.is_legacy for m in self.members.values()):
            self.expect_downgrade()

    # ------------------------------------------------------------------ target assignment
    def maybe_update_target(self, now_ms: int) -> None:
        if self.group_epoch <= self.assignment_epoch:
            return
        if not self.members:
            self._install_target(self.group_epoch, {})
            return
        server = assignors.WORK_ASSIGNORS.get(self.assignor_name())
        if server is not None:
            self.client_side.clear()
            spec = self._assignment_spec(now_ms)
            self._install_work(self.group_epoch, spec, server(spec))
        else:
            self.client_side.reevaluate(self)

    def _assignment_spec(self, now_ms: int) -> assignors.AssignmentSpec:
        """Resolve held work (returned to its worker, expired, or still waiting) and build the input."""
        waiting, returned = resolve_held(self.metadata.held, self.held_owner, now_ms)
        if waiting != self.metadata.held:
            self._set_metadata(held=waiting)
            self._arm_held_timer()
        for mid, items in returned.items():
            if self.members[mid].metadata.is_legacy:
                self.legacy_members.note_returned(mid, items)
        return assignment_spec(
            self.index.ids, self.view.items(), waiting, self.working, returned, self.members.keys()
        )

    def reconcile(self, member: Member, owned: Items | None, now_ms: int) -> None:
        """One step of the member toward its target (``reconciliation``), written as its record."""
        step = Reconciliation(
            member.member_id,
            member.current,
            self.assignment_epoch,
            self.target.get(member.member_id, EMPTY),
            self.owner_lookup(),
            owned,
        )
        nxt = next_assignment(step)
        if nxt is not None:
            self._set_current(member, nxt)
            if nxt.state is MemberState.UNREVOKED:
                self._arm_revocation(member, now_ms)


_TIMER_HANDLERS = {
    TimerKind.SESSION: ConnectGroupMembership._on_session_timeout,
    TimerKind.REVOKE: ConnectGroupMembership._on_revocation_timeout,
    TimerKind.COMPUTE: ConnectGroupMembership._on_compute_timeout,
    TimerKind.HELD: ConnectGroupMembership._on_hold_expired,
    TimerKind.LEGACY_JOIN: ConnectGroupMembership._on_legacy_timeout,
    TimerKind.LEGACY_SYNC: ConnectGroupMembership._on_legacy_timeout,
}
"""What each connect-group timer does when it fires (then the target is brought up to date)."""
