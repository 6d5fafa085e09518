"""A ``connect`` group: the epoch engine of seed 000 driven by ConnectGroupHeartbeat.

The coordinator owns the group: membership changes bump the group epoch, a bumped epoch produces a
new declarative target assignment (server-side assignor, or one member computing it client-side),
and every member is reconciled toward that target on its own heartbeats, revoking before assigning.
All inputs carry ``now_ms``; all effects are responses, records (``drain_records``) and timers
(``timers``). Nothing here does I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state import assignors
from connect_bridge.state.api import (
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    DescribedGroup,
    DescribedMember,
    HeartbeatRequest,
    HeartbeatResponse,
    InstallAssignmentRequest,
    InstallAssignmentResponse,
    MemberAssignment,
    PrepareAssignmentRequest,
    PrepareAssignmentResponse,
)
from connect_bridge.state.client_side import ClientSideAssignment, check_client_ranges, common_client_assignor
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.errors import RequestError
from connect_bridge.state.holds import zombie_grace_ms
from connect_bridge.state.legacy_members import LegacyMembers
from connect_bridge.state.model import (
    EMPTY,
    NEW_PROTOCOL,
    NO_METADATA,
    AssignedMetadata,
    ClientAssignor,
    ConfigView,
    CurrentAssignment,
    GroupMetadata,
    GroupState,
    GroupType,
    HeldWork,
    Items,
    Member,
    MemberMetadata,
    MemberState,
    TargetMetadata,
    split_target_member,
    target_member_value,
)
from connect_bridge.state.reconciliation import next_assignment
from connect_bridge.state.records import Record, RecordType
from connect_bridge.state.timers import Timers

_MEMBER_ID_NAMESPACE = uuid.UUID("8a6f2b8e-5c1d-4b7a-9f3e-2d4c6b8a0e1f")
HELD_OWNER = "\0held"
"""Owner of work held for a departed worker that may still run it (never a member id)."""
_PLACEHOLDER = MemberMetadata(url="\0placeholder")
"""Metadata of a member whose current-assignment record was replayed before its metadata record."""


class ConnectGroup:
    def __init__(
        self, group_id: str, config: CoordinatorConfig, timers: Timers, view: ConfigView | None = None
    ) -> None:
        self.group_id = group_id
        self.config = config
        self.timers = timers
        self.metadata = GroupMetadata()
        self.view = view or ConfigView()
        self.members: dict[str, Member] = {}
        self.target_metadata = TargetMetadata()
        self.target: dict[str, Items] = {}
        self.assignor_metadata: dict[str, AssignedMetadata] = {}
        """The client-side assignor's metadata per member of the target (only members that have some)."""
        self.owners: dict[ConnectorTaskId, str] = {}
        # client-side assignment in flight (transient: redone after a restart)
        self.client_side = ClientSideAssignment(self)
        self._records: list[Record] = []
        self.legacy = LegacyMembers(self)
        self.downgrade_pending = False
        self._reported: dict[str, Items] = {}
        """What each member last reported owning (in memory only: after a restart nothing is resent
        until a member reports again)."""
        """Set when the last new-protocol member left a group that still has legacy members."""

    # ------------------------------------------------------------------ derived views
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
        client = self._common_client_assignor()
        if client is not None:
            return client
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.metadata.server_assignor or self.config.default_assignor
            votes[name] = votes.get(name, 0) + 1
        if not votes:
            return self.config.default_assignor
        return min(votes, key=lambda n: (-votes[n], n))

    def _common_client_assignor(self) -> str | None:
        return common_client_assignor({mid: m.metadata.client_assignors for mid, m in self.members.items()})

    def leader_url(self) -> str:
        leader = self.members.get(self.metadata.leader_id)
        return leader.metadata.url if leader else ""

    def assignment_config_offset(self) -> int:
        offset = self.view.offset
        for m in self.members.values():
            offset = max(offset, m.metadata.config_offset)
        return offset

    # ------------------------------------------------------------------ records
    def drain_records(self) -> list[Record]:
        out, self._records = self._records, []
        return out

    def _emit(self, type_: RecordType, member_id: str = "", value: object | None = None) -> None:
        self._records.append(Record(type_, self.group_id, member_id, value))

    def _set_metadata(self, **changes: object) -> None:
        self.metadata = replace(self.metadata, **changes)
        self._emit(RecordType.GROUP_METADATA, value=self.metadata)

    def _bump_group_epoch(self) -> None:
        self._set_metadata(group_epoch=self.metadata.group_epoch + 1)

    def _set_member_metadata(self, member: Member, metadata: MemberMetadata) -> None:
        member.metadata = metadata
        self._emit(RecordType.MEMBER_METADATA, member.member_id, metadata)

    def _set_current(self, member: Member, current: CurrentAssignment) -> None:
        old = member.current
        if old.assigned is not current.assigned or old.revoking is not current.revoking:
            mid = member.member_id
            for item in old.owned - current.owned:
                if self.owners.get(item) == mid:
                    del self.owners[item]
            for item in current.owned - old.owned:
                self.owners[item] = mid
        member.current = current
        self._emit(RecordType.CURRENT_ASSIGNMENT, member.member_id, current)
        if current.state is not MemberState.UNREVOKED:
            self.timers.cancel(("revoke", self.group_id, member.member_id))

    def _install_target(
        self,
        epoch: int,
        target: dict[str, Items],
        error: int = 0,
        metadata: dict[str, AssignedMetadata] | None = None,
    ) -> None:
        """``metadata``: the client-side assignor's per-member metadata (none from server-side ones)."""
        metadata = {mid: d for mid, d in (metadata or {}).items() if mid in target and d != NO_METADATA}
        for mid, items in target.items():
            data = metadata.get(mid, NO_METADATA)
            if self.target.get(mid) != items or self.assignor_metadata.get(mid, NO_METADATA) != data:
                self._emit(RecordType.TARGET_MEMBER, mid, target_member_value(items, data))
        for mid in list(self.target):
            if mid not in target:
                self._emit(RecordType.TARGET_MEMBER, mid, None)
        self.target = dict(target)
        self.assignor_metadata = metadata
        self.target_metadata = TargetMetadata(epoch, error)
        self._emit(RecordType.TARGET_METADATA, value=self.target_metadata)

    # ------------------------------------------------------------------ conversion
    def install_converted(
        self,
        metadata: GroupMetadata,
        target_metadata: TargetMetadata,
        members: list[tuple[str, MemberMetadata, CurrentAssignment]],
        now_ms: int,
    ) -> None:
        """Become the image of a converted classic group: target = current, nothing moves."""
        for mid, member_metadata, current in members:
            member = Member(mid, member_metadata, CurrentAssignment())
            self.members[mid] = member
            self._emit(RecordType.MEMBER_METADATA, mid, member_metadata)
            self._set_current(member, current)
            self.arm_session(member, now_ms)
            if current.state is MemberState.UNREVOKED:
                self._arm_revocation(member, now_ms)
        self._install_target(target_metadata.assignment_epoch, {mid: c.assigned for mid, _, c in members})
        self.metadata = metadata
        self._emit(RecordType.GROUP_METADATA, value=metadata)
        self.legacy.elected = metadata.leader_id  # the classic leader was elected by the classic group

    def tombstone_all(self) -> None:
        """Delete every record of this group (it becomes a classic group); timers go with it."""
        for mid in list(self.members):
            for key in (("session", self.group_id, mid), ("revoke", self.group_id, mid)):
                self.timers.cancel(key)
            self.legacy.forget(mid)
            self._emit(RecordType.CURRENT_ASSIGNMENT, mid, None)
            self._emit(RecordType.MEMBER_METADATA, mid, None)
        for mid in self.target:
            self._emit(RecordType.TARGET_MEMBER, mid, None)
        for key in (("held", self.group_id), ("compute", self.group_id)):
            self.timers.cancel(key)
        self._emit(RecordType.TARGET_METADATA, value=None)
        self._emit(RecordType.GROUP_METADATA, value=None)
        self.members.clear()
        self.target.clear()
        self.assignor_metadata.clear()
        self.owners.clear()

    # ------------------------------------------------------------------ replay
    def apply(self, record: Record) -> None:
        """Rebuild state from one record (the inverse of the ``_emit`` calls above)."""
        t, mid, value = record.type, record.member_id, record.value
        if t is RecordType.GROUP_METADATA:
            self.metadata = value if value is not None else GroupMetadata()  # type: ignore[assignment]
        elif t is RecordType.TARGET_METADATA:
            self.target_metadata = value if value is not None else TargetMetadata()  # type: ignore[assignment]
        elif t is RecordType.TARGET_MEMBER:
            if value is None:
                self.target.pop(mid, None)
                self.assignor_metadata.pop(mid, None)
            else:
                self.target[mid], data = split_target_member(value)  # type: ignore[arg-type]
                if data == NO_METADATA:
                    self.assignor_metadata.pop(mid, None)
                else:
                    self.assignor_metadata[mid] = data
        elif t is RecordType.MEMBER_METADATA:
            if value is None:
                self.members.pop(mid, None)
            else:
                member = self.members.get(mid)
                if member is None:
                    self.members[mid] = Member(mid, value, CurrentAssignment())  # type: ignore[arg-type]
                else:
                    member.metadata = value  # type: ignore[assignment]
        elif t is RecordType.CURRENT_ASSIGNMENT:
            # Records of one key are independent of other keys' order: a current assignment may
            # arrive before its member's metadata after compaction.
            member = self.members.get(mid)
            if value is None:
                if member is not None and member.metadata is _PLACEHOLDER:
                    del self.members[mid]
            elif member is None:
                self.members[mid] = Member(mid, _PLACEHOLDER, value)  # type: ignore[arg-type]
            else:
                member.current = value  # type: ignore[assignment]

    def rebuild_after_load(self, now_ms: int) -> None:
        """Derive the owner index and re-arm timers once all records are replayed."""
        self.owners = {}
        for mid, member in self.members.items():
            for item in member.current.owned:
                self.owners[item] = mid
            self.arm_session(member, now_ms)
            if member.current.state is MemberState.UNREVOKED:
                self._arm_revocation(member, now_ms)
        self._arm_held_timer()
        self.legacy.elected = self.metadata.leader_id  # a loaded leader kept its leader state

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

    # ------------------------------------------------------------------ timers
    def arm_session(self, member: Member, now_ms: int) -> None:
        timeout = member.metadata.session_timeout_ms
        self.timers.schedule(("session", self.group_id, member.member_id), now_ms + timeout)

    def _arm_revocation(self, member: Member, now_ms: int) -> None:
        key = ("revoke", self.group_id, member.member_id)
        if key not in self.timers:
            self.timers.schedule(key, now_ms + member.metadata.rebalance_timeout_ms)

    def _expect_revoked(self, member: Member, req: HeartbeatRequest, now_ms: int) -> None:
        """A member at a later epoch rejoined (epoch 0) owning none of what it now revokes: its worker
        reset.

        Its later heartbeats carry no owned set (nothing changed since this one), so the revocation
        would only end at the rebalance timeout, with the work running nowhere all that time
        (adversarial drill 27024565). Not trusted at once (the request may not be the worker's):
        the revocation timer is brought forward to the zombie grace, and removal then holds the
        work for another grace, time enough for a worker that still runs it to learn it is out.
        """
        current = member.current
        if current.state is not MemberState.UNREVOKED or req.owned is None or req.owned & current.revoking:
            return
        key = ("revoke", self.group_id, member.member_id)
        soon = now_ms + zombie_grace_ms(member.metadata.session_timeout_ms)
        armed = self.timers.deadline(key)
        if armed is None or soon < armed:
            self.timers.schedule(key, soon)

    def _arm_held_timer(self) -> None:
        key = ("held", self.group_id)
        if self.metadata.held:
            self.timers.schedule(key, min(h.deadline_ms for h in self.metadata.held))
        else:
            self.timers.cancel(key)

    def on_timer(self, key: tuple, now_ms: int) -> None:
        kind = key[0]
        if kind == "session":
            member = self.members.get(key[2])
            if member is not None:
                self.remove_by_timer(member, now_ms)
        elif kind == "revoke":
            member = self.members.get(key[2])
            if member is not None and member.current.state is MemberState.UNREVOKED:
                self.remove_by_timer(member, now_ms)
        elif kind == "compute":
            self.client_side.on_timeout()
        elif kind == "held":
            self._bump_group_epoch()
        elif kind in ("legacy-join", "legacy-sync"):
            self.legacy.on_timer(key, now_ms)
        self.maybe_update_target(now_ms)

    # ------------------------------------------------------------------ membership
    def new_member_id(self) -> str:
        seq = self.metadata.member_seq + 1
        self._set_metadata(member_seq=seq)
        return str(uuid.uuid5(_MEMBER_ID_NAMESPACE, f"{self.config.member_id_salt}{self.group_id}/{seq}"))

    def add_member(self, member_id: str, metadata: MemberMetadata, now_ms: int) -> Member:
        member = Member(member_id, metadata, CurrentAssignment())
        self.members[member_id] = member
        self._emit(RecordType.MEMBER_METADATA, member_id, metadata)
        self._emit(RecordType.CURRENT_ASSIGNMENT, member_id, member.current)
        if not self.metadata.leader_id or self.metadata.leader_id not in self.members:
            self._set_metadata(leader_id=member_id)
        self._bump_group_epoch()
        self.arm_session(member, now_ms)
        return member

    def remove_by_timer(self, member: Member, now_ms: int) -> None:
        """A session, revocation, join or sync timer removes ``member``: it may still be running."""
        self.remove_member(member, now_ms, min_hold_ms=zombie_grace_ms(member.metadata.session_timeout_ms))

    def remove_member(self, member: Member, now_ms: int, min_hold_ms: int = 0) -> None:
        """Drop a member; everything it may still run is held for the scheduled delay.

        Removal proves nothing about the process: a Java worker whose herder stalled keeps running
        everything it owns after its generation is reset, and so does a new-protocol worker until it
        sees its fencing. So its *owned* set (assigned and pending revocation) stays out of every
        target until it comes back (the work returns to it) or the hold expires. Targeted work it
        was never granted is not held: nobody runs it, and holding it for a worker that may already
        be dead (Connect's lost-assignment rule is about what was assigned) let one item wait out
        the delay once per crashed worker it was dealt to.

        ``min_hold_ms`` holds the work even without a delay: a member removed by a timer may be a
        live worker that was cut off or stalled; it notices after its own session timeout and then
        stops what it ran (``holds.zombie_grace_ms``). A wrong epoch removes nobody (``_check_epoch``).
        """
        mid = member.member_id
        owned = self.legacy.may_run(member) if member.metadata.is_legacy else member.current.owned
        self._set_current(member, CurrentAssignment())
        del self.members[mid]
        self._emit(RecordType.CURRENT_ASSIGNMENT, mid, None)
        self._emit(RecordType.MEMBER_METADATA, mid, None)
        for key in (("session", self.group_id, mid), ("revoke", self.group_id, mid)):
            self.timers.cancel(key)
        held = self.metadata.held
        # Not only what is configured now: an item removed from the config while the member still
        # runs it can be configured again before the member stops (adversarial drill 20094737).
        work = owned
        delay = self.config.scheduled_rebalance_max_delay_ms if self.assignor_name() != assignors.EAGER else 0
        hold = max(delay, min_hold_ms)
        if work and hold > 0:
            # Held work goes back to the member that comes back with this url or instance id. One
            # that is in the group already is another process (a stale incarnation of the same
            # worker): handing it the work would prove nothing about this one (drill 14001202).
            url, instance = member.metadata.url, member.metadata.instance_id
            for other in self.members.values():
                if url and other.metadata.url == url:
                    url = ""
                if instance and other.metadata.instance_id == instance:
                    instance = None
            held = (*held, HeldWork(work, url, instance, now_ms + hold))
        leader = self.metadata.leader_id
        if leader == mid:
            leader = min(self.members) if self.members else ""
        self.client_side.forget(mid)
        self.legacy.forget(mid)
        self._reported.pop(mid, None)
        self._set_metadata(group_epoch=self.metadata.group_epoch + 1, leader_id=leader, held=held)
        self._arm_held_timer()
        self._check_downgrade(member.metadata)

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
            not self.metadata.held and not self.legacy.any_completing() and self.state is GroupState.STABLE
        )

    def _check_downgrade(self, departed: MemberMetadata) -> None:
        if departed.is_legacy or not self.members:
            return
        if all(m.metadata.is_legacy for m in self.members.values()):
            self.downgrade_pending = True

    # ------------------------------------------------------------------ target assignment
    def maybe_update_target(self, now_ms: int) -> None:
        if self.group_epoch <= self.assignment_epoch:
            return
        if not self.members:
            self._install_target(self.group_epoch, {})
            return
        name = self.assignor_name()
        server = assignors.SERVER_ASSIGNORS.get(name)
        if server is not None:
            self.client_side.clear()
            spec = self._assignment_spec(now_ms)
            self._install_target(self.group_epoch, server(spec))
        else:
            self.client_side.reevaluate()

    def _assignment_spec(self, now_ms: int) -> assignors.AssignmentSpec:
        """Resolve held work (returned to its worker, expired, or still waiting) and build the input."""
        waiting: list[HeldWork] = []
        returned: dict[str, Items] = {}
        by_url = {m.metadata.url: mid for mid, m in self.members.items() if m.metadata.url}
        by_instance = {
            m.metadata.instance_id: mid for mid, m in self.members.items() if m.metadata.instance_id
        }
        for h in self.metadata.held:
            owner = (by_instance.get(h.instance_id) if h.instance_id else None) or by_url.get(h.url)
            if owner is not None:
                returned[owner] = returned.get(owner, EMPTY) | h.items
            elif h.deadline_ms > now_ms:
                waiting.append(h)
        if tuple(waiting) != self.metadata.held:
            self._set_metadata(held=tuple(waiting))
            self._arm_held_timer()
        held_items: set[ConnectorTaskId] = set()
        for h in waiting:
            held_items |= h.items
        configured = self.view.items() - held_items
        return assignors.AssignmentSpec(
            members=tuple(sorted(self.members)),
            configured=configured,
            previous=self.target,
            returned=returned,
            holding=bool(waiting),
        )

    # ------------------------------------------------------------------ heartbeat
    def heartbeat(self, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        epoch = req.member_epoch
        member = self.members.get(req.member_id)
        # The steady-state fast path: a stable member with nothing to report.
        if (
            member is not None
            and epoch == member.current.member_epoch
            and epoch == self.target_metadata.assignment_epoch
            and member.current.state is MemberState.STABLE
            and not member.current.left_temporarily
            and self.metadata.group_epoch == epoch
            and req.reports_nothing
            and (not req.client_id or req.client_id == member.metadata.client_id)
            and (not req.client_host or req.client_host == member.metadata.client_host)
            and self.client_side.member != req.member_id
            and req.member_id not in self._reported
        ):
            self.arm_session(member, now_ms)
            return HeartbeatResponse(
                member_id=member.member_id,
                member_epoch=epoch,
                heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            )
        try:
            return self._heartbeat(req, now_ms)
        except RequestError as exc:
            return HeartbeatResponse(
                error_code=int(exc.code),
                error_message=exc.message,
                member_id=req.member_id,
                member_epoch=req.member_epoch,
                heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            )

    def _validate(self, req: HeartbeatRequest, joining: bool) -> None:
        member = self.members.get(req.member_id)
        check_heartbeat(req, at_epoch_0=member is not None and member.current.member_epoch == 0)
        if req.server_assignor is not None and req.server_assignor not in assignors.SERVER_ASSIGNORS:
            raise RequestError(
                ErrorCode.UNSUPPORTED_ASSIGNOR, f"server assignor {req.server_assignor!r} is not supported"
            )
        if req.client_assignors:
            self._check_client_ranges(req.member_id, req.client_assignors)
        self.client_side.check_heartbeat(req)

    def _check_client_ranges(self, member_id: str, offered: tuple[ClientAssignor, ...]) -> None:
        # Linear in what the members advertise, not pairwise (issue 11.6): see client_side.
        advertised = {mid: m.metadata.client_assignors for mid, m in self.members.items()}
        check_client_ranges(advertised, member_id, offered)

    def _heartbeat(self, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        epoch = req.member_epoch
        joining = epoch == 0
        self._validate(req, joining)
        if epoch == LEAVE_EPOCH:
            return self._leave(req, now_ms)
        if epoch == TEMPORARY_LEAVE_EPOCH:
            return self._temporary_leave(req, now_ms)
        member = self.members.get(req.member_id) if req.member_id else None
        reported_owned = req.owned
        if joining:
            before = member
            duplicate = (
                before is not None
                and not before.metadata.is_legacy
                and not before.current.left_temporarily
                and before.current.member_epoch > 0
            )
            member = self._join(req, member, now_ms)
            # A (re)joining worker has stopped everything; a possible duplicate of a first join
            # (the same member kept its epoch, see _join) says nothing about what it owns.
            duplicate = duplicate and member is before and member.current.member_epoch > 0
            reported_owned = None if duplicate else EMPTY
        elif member is None:
            raise RequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {req.member_id} is not in the group")
        else:
            self._check_epoch(member, req)
        self.update_from_heartbeat(member, req)
        self.arm_session(member, now_ms)
        self.maybe_update_target(now_ms)
        before = member.current
        self.reconcile(member, reported_owned, now_ms)
        if joining and reported_owned is None:
            self._expect_revoked(member, req, now_ms)
        return self._response(member, before, req, joining, now_ms)

    def _check_epoch(self, member: Member, req: HeartbeatRequest) -> None:
        """FENCED_MEMBER_EPOCH for a wrong epoch, and nothing else: the member stays as it is.

        Kafka 4.3.1's consumer-group coordinator answers the same and keeps the member (measured:
        ``tests/test_consumer_heartbeat_differential.py``); seed 000 also removes it. Removing it
        would let anybody who knows a member id (a bearer token) evict that member with any wrong
        epoch, and a stale or duplicated request evict the live worker it spoke for. Keeping it is
        safe: its work stays its own; a worker that did see the fencing stops everything and rejoins
        with epoch 0 under its member id (accepted, see ``_join``), and one that stopped talking is
        removed by its session timer, with its work held as for any expiry.
        """
        current = member.current
        if current.left_temporarily:
            # After a -2 leave only a rejoin (epoch 0) with the instance id brings the member back.
            raise RequestError(
                ErrorCode.FENCED_MEMBER_EPOCH, f"member {member.member_id} left; rejoin with epoch 0"
            )
        if req.member_epoch == current.member_epoch:
            return
        # Lost response: the member never saw its move to the new epoch. Accept if what it owns is
        # a subset of what we gave it (seed 000 "edge case", Kafka's rule).
        if (
            req.member_epoch == current.previous_member_epoch
            and req.owned is not None
            and req.owned <= current.assigned
        ):
            return
        raise RequestError(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"member epoch {req.member_epoch} does not match the expected epoch {current.member_epoch}",
        )

    def _join(self, req: HeartbeatRequest, member: Member | None, now_ms: int) -> Member:
        if req.instance_id:
            static = self.member_by_instance(req.instance_id)
            waiting = static is member and member is not None and member.current.member_epoch == 0
            if (
                static is not None
                and not static.current.left_temporarily
                and not static.metadata.is_legacy
                and not waiting
            ):
                # Kafka's answer whoever asks, the static member itself included (its own id and
                # instance id at epoch 0 without a -2 leave first), as long as it is in the group.
                # Not to the member itself while it is still at epoch 0 (seed 000: it waits there
                # for the first client-side target, and its heartbeats carry epoch 0; a Kafka member
                # never stays at epoch 0). A new-protocol worker may take an instance id from a
                # legacy member at once (KAFKA-17228); from another new-protocol member only after
                # its -2 leave.
                raise RequestError(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"instance id {req.instance_id} is still used by member {static.member_id}",
                )
            if static is not None and static is not member and member is not None:
                # A known member claiming an instance id another member released: Kafka gives it
                # the static member's state in place of its own, dropping what that member owns
                # while its worker may still run it. Refused here (a zombie sharing the id).
                raise RequestError(
                    ErrorCode.FENCED_INSTANCE_ID,
                    f"instance id {req.instance_id} is member {static.member_id}, not {member.member_id}",
                )
            if static is not None and static is not member:
                base = replace(static.metadata, protocol=NEW_PROTOCOL, classic_protocols=None)
                metadata = self._metadata_from(req, base)
                return self.take_over_static(static, req.member_id or self.new_member_id(), metadata, now_ms)
        if member is not None and member.current.left_temporarily:
            # The static member itself coming back after its -2 leave: it gets its work back.
            return self.take_over_static(
                member, member.member_id, self._metadata_from(req, member.metadata), now_ms
            )
        was_legacy = member is not None and member.metadata.is_legacy
        if member is not None and member.metadata.is_legacy:
            # A legacy worker coming back on ConnectGroupHeartbeat with its member id: it is a
            # new-protocol member from now on (Kafka drops the classic metadata the same way).
            self.legacy.forget(member.member_id)
            self._set_member_metadata(
                member, replace(member.metadata, protocol=NEW_PROTOCOL, classic_protocols=None)
            )
            self._bump_group_epoch()
        if member is not None and not was_legacy and member.current.member_epoch > 0:
            # A new-protocol member already in the group at a later epoch: its worker rejoining
            # after a fencing, a duplicate of its first join delivered after it moved on
            # (adversarial drill 23046776), or anybody holding its id. Kafka 4.3.1 accepts epoch 0
            # at any member epoch and answers the member's epoch and current assignment, unchanged;
            # so does the bridge. Unlike Kafka, the request says nothing about what the member owns
            # (Kafka takes its empty owned list as a finished revocation and releases the work):
            # the worker behind the member may still run it (see _expect_revoked).
            return member
        if member is not None:
            # A known member rejoining with epoch 0 (a legacy worker now on this protocol): it owns
            # nothing now.
            if member.current.owned or member.current.member_epoch != 0:
                self._set_current(
                    member,
                    replace(
                        member.current,
                        assigned=EMPTY,
                        revoking=EMPTY,
                        state=MemberState.STABLE,
                        member_epoch=0,
                    ),
                )
            return member
        if len(self.members) >= self.config.max_group_size:
            raise RequestError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {self.group_id} is full")
        member_id = req.member_id or self.new_member_id()
        return self.add_member(member_id, self._metadata_from(req, MemberMetadata()), now_ms)

    def take_over_static(self, old: Member, new_id: str, metadata: MemberMetadata, now_ms: int) -> Member:
        """A static member coming back: the new member id takes the old member's epoch and work."""
        if new_id != old.member_id and new_id in self.members:
            # Overwriting a live member would leave its owner entries behind (work running nowhere).
            raise RequestError(ErrorCode.FENCED_INSTANCE_ID, f"member id {new_id} is already in use")
        current = replace(old.current, left_temporarily=False)
        del self.members[old.member_id]
        self.legacy.forget(old.member_id)
        self._emit(RecordType.CURRENT_ASSIGNMENT, old.member_id, None)
        self._emit(RecordType.MEMBER_METADATA, old.member_id, None)
        self.timers.cancel(("session", self.group_id, old.member_id))
        self.timers.cancel(("revoke", self.group_id, old.member_id))
        member = Member(new_id, metadata, current)
        self.members[new_id] = member
        for item in current.owned:
            self.owners[item] = new_id
        self._emit(RecordType.MEMBER_METADATA, new_id, metadata)
        self._emit(RecordType.CURRENT_ASSIGNMENT, new_id, current)
        target = self.target.pop(old.member_id, None)
        if target is not None:
            data = self.assignor_metadata.pop(old.member_id, NO_METADATA)
            self._emit(RecordType.TARGET_MEMBER, old.member_id, None)
            self.target[new_id] = target
            if data != NO_METADATA:
                self.assignor_metadata[new_id] = data
            self._emit(RecordType.TARGET_MEMBER, new_id, target_member_value(target, data))
        if self.metadata.leader_id == old.member_id:
            self._set_metadata(leader_id=new_id)
        self.client_side.forget(old.member_id)
        if _epoch_relevant(metadata) != _epoch_relevant(old.metadata):
            self._bump_group_epoch()
        self.arm_session(member, now_ms)
        if metadata.is_legacy:
            self._check_downgrade(old.metadata)
        return member

    def update_member_metadata(self, member: Member, metadata: MemberMetadata) -> None:
        if metadata != member.metadata:
            bump = _epoch_relevant(metadata) != _epoch_relevant(member.metadata)
            self._set_member_metadata(member, metadata)
            if bump:
                self._bump_group_epoch()

    def release_unowned(self, member: Member, owned: Items) -> None:
        """A legacy worker's JoinGroup allocation is what it runs: anything else it has given up."""
        c = member.current
        assigned, revoking = c.assigned & owned, c.revoking & owned
        if assigned != c.assigned or revoking != c.revoking:
            self._set_current(member, replace(c, assigned=assigned, revoking=revoking))

    def member_by_instance(self, instance_id: str) -> Member | None:
        for m in self.members.values():
            if m.metadata.instance_id == instance_id:
                return m
        return None

    def _metadata_from(self, req: HeartbeatRequest, base: MemberMetadata) -> MemberMetadata:
        changes: dict[str, object] = {}
        if req.instance_id is not None:
            changes["instance_id"] = req.instance_id
        if req.rebalance_timeout_ms > 0:
            changes["rebalance_timeout_ms"] = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            changes["server_assignor"] = req.server_assignor
        if req.client_assignors is not None:
            changes["client_assignors"] = tuple(req.client_assignors)
        if req.url is not None:
            changes["url"] = req.url
        if req.config_offset is not None:
            changes["config_offset"] = req.config_offset
        if req.client_id:
            changes["client_id"] = req.client_id
        if req.client_host:
            changes["client_host"] = req.client_host
        changes["session_timeout_ms"] = self.config.session_timeout_ms
        return replace(base, **changes) if changes else base

    def update_from_heartbeat(self, member: Member, req: HeartbeatRequest) -> None:
        self.update_member_metadata(member, self._metadata_from(req, member.metadata))

    def _leaving_member(self, req: HeartbeatRequest) -> Member:
        """Who a -1 or -2 names, looked up as Kafka 4.3.1 does: by instance id when there is one.

        Unknown member id or instance id: UNKNOWN_MEMBER_ID; an instance id held by another member
        id than the request's: FENCED_INSTANCE_ID.
        """
        if req.instance_id is None:
            member = self.members.get(req.member_id)
            if member is None:
                raise RequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {req.member_id} is not in the group")
            return member
        member = self.member_by_instance(req.instance_id)
        if member is None:
            raise RequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"instance id {req.instance_id} is unknown")
        if member.member_id != req.member_id:
            raise RequestError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"instance id {req.instance_id} is member {member.member_id}, not {req.member_id}",
            )
        return member

    def _leave(self, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        member = self._leaving_member(req)
        self.remove_member(member, now_ms)
        self.maybe_update_target(now_ms)
        return HeartbeatResponse(
            member_id=member.member_id, member_epoch=LEAVE_EPOCH, heartbeat_interval_ms=0
        )

    def _temporary_leave(self, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        member = self._leaving_member(req)
        self._set_current(member, replace(member.current, left_temporarily=True))
        if self.client_side.forget(member.member_id):
            self.maybe_update_target(now_ms)  # someone else computes now, not after a timeout
        return HeartbeatResponse(
            member_id=member.member_id, member_epoch=TEMPORARY_LEAVE_EPOCH, heartbeat_interval_ms=0
        )

    def owner_lookup(self) -> Callable[[ConnectorTaskId], str | None]:
        """Who holds an item: its owning member, or the hold of a departed worker that may run it.

        Held work is out of every server-side target, but a client-side target computed before the
        departure may still name it: it must not be granted while its old worker may still run it.
        """
        held = self.held_items()
        if not held:
            return self.owners.get
        owners = self.owners

        def owner_of(item: ConnectorTaskId) -> str | None:
            owner = owners.get(item)
            return owner if owner is not None else (HELD_OWNER if item in held else None)

        return owner_of

    def held_items(self) -> Items:
        held = self.metadata.held
        if not held:
            return EMPTY
        return frozenset().union(*(h.items for h in held))

    def reconcile(self, member: Member, owned: Items | None, now_ms: int) -> None:
        c = member.current
        target_epoch = self.assignment_epoch
        nxt = next_assignment(
            member.member_id,
            c.member_epoch,
            c.previous_member_epoch,
            c.state,
            c.assigned,
            c.revoking,
            target_epoch,
            self.target.get(member.member_id, EMPTY),
            self.owner_lookup(),
            owned,
        )
        if nxt is not None:
            self._set_current(
                member,
                CurrentAssignment(
                    nxt.member_epoch,
                    nxt.previous_member_epoch,
                    nxt.state,
                    nxt.assigned,
                    nxt.revoking,
                    c.left_temporarily,
                ),
            )
            if nxt.state is MemberState.UNREVOKED:
                self._arm_revocation(member, now_ms)

    def _response(
        self, member: Member, before: CurrentAssignment, req: HeartbeatRequest, joining: bool, now_ms: int
    ) -> HeartbeatResponse:
        c = member.current
        resp = HeartbeatResponse(
            member_id=member.member_id,
            member_epoch=c.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
        )
        mid = member.member_id
        if joining:
            self._reported[mid] = EMPTY
        elif req.owned is not None:
            self._reported[mid] = req.owned
        changed = (
            joining
            or c.member_epoch != before.member_epoch
            or c.assigned != before.assigned
            or c.revoking != before.revoking
            or (req.owned is not None and req.owned != c.assigned)
        )
        if changed and mid not in self._reported:
            self._reported[mid] = before.assigned | before.revoking  # what it had acknowledged
        # A changed assignment is resent until the member reports owning it: the answer that
        # carried it may have been lost or may have answered a duplicate of the request
        # (adversarial drill 15005207; Kafka's client resends a full request after a failure,
        # which comes to the same). Once reported, the member is forgotten here, so the steady
        # state stays on the fast path.
        unacknowledged = self._reported.get(mid, c.assigned | c.revoking) != c.assigned | c.revoking
        if not unacknowledged:
            self._reported.pop(mid, None)
        if changed or unacknowledged:
            resp.assignment = self.assignment_for(member)
        self.client_side.signal(member, resp, now_ms)
        return resp

    def assignment_for(self, member: Member) -> MemberAssignment:
        """The assignor's error and its metadata for the member come with the target it converges to."""
        data = self.assignor_metadata.get(member.member_id, NO_METADATA)
        return MemberAssignment(
            items=member.current.assigned,
            leader_id=self.metadata.leader_id,
            leader_url=self.leader_url(),
            config_offset=self.assignment_config_offset(),
            error=self.target_metadata.error,
            metadata_version=data.version,
            metadata=data.metadata,
        )

    # ------------------------------------------------------------------ config view
    def set_config(self, view: ConfigView, now_ms: int) -> bool:
        if view == self.view:
            return False
        self.view = view
        # Held work stays held when the config drops it: a zombie may still run it, and the config
        # may bring it back before the hold ends (only configured items are ever assigned).
        self._bump_group_epoch()
        self.maybe_update_target(now_ms)
        return True

    # ------------------------------------------------------------------ client-side assignment
    def prepare_assignment(self, req: PrepareAssignmentRequest, now_ms: int) -> PrepareAssignmentResponse:
        return self.client_side.prepare(req, now_ms)

    def install_assignment(self, req: InstallAssignmentRequest, now_ms: int) -> InstallAssignmentResponse:
        return self.client_side.install(req, now_ms)

    # ------------------------------------------------------------------ describe
    def describe(self) -> DescribedGroup:
        members = []
        for mid in sorted(self.members):
            m = self.members[mid]
            members.append(
                DescribedMember(
                    mid,
                    m.metadata.instance_id,
                    m.metadata.protocol,
                    m.current.member_epoch,
                    m.current.state.value,
                    m.metadata.url,
                    m.metadata.config_offset,
                    m.current.assigned,
                    m.current.revoking,
                    self.target.get(mid, EMPTY),
                )
            )
        return DescribedGroup(
            group_id=self.group_id,
            group_type=GroupType.CONNECT.value,
            state=self.state.value,
            group_epoch=self.group_epoch,
            assignment_epoch=self.assignment_epoch,
            assignor=self.assignor_name(),
            leader_id=self.metadata.leader_id,
            leader_url=self.leader_url(),
            config_offset=self.assignment_config_offset(),
            members=tuple(members),
        )


def check_heartbeat(req: HeartbeatRequest, at_epoch_0: bool = False) -> None:
    """Seed 000's INVALID_REQUEST rules: checks that need no group state (run before any lookup).

    ``at_epoch_0``: the member named is in the group at epoch 0 (seed 000: it waits there for the
    first client-side target), so its epoch-0 requests are heartbeats, not joins.
    """
    joining = req.member_epoch == 0
    bad = None
    if not req.group_id:
        bad = "GroupId must be non-empty"
    elif not req.member_id and not joining:
        bad = "MemberId must be non-empty"
    elif req.member_epoch < TEMPORARY_LEAVE_EPOCH:
        bad = f"MemberEpoch must be >= -2, got {req.member_epoch}"
    elif req.instance_id is not None and not req.instance_id:
        bad = "InstanceId, if provided, must be non-empty"
    elif joining and req.rebalance_timeout_ms <= 0 and not at_epoch_0:
        # Every join, a known member's rejoin too: Kafka 4.3.1 answers INVALID_REQUEST there as well.
        bad = "RebalanceTimeoutMs must be larger than zero when joining"
    elif req.server_assignor is not None and req.client_assignors:
        bad = "ServerAssignor and ClientAssignors cannot be used together"
    elif req.member_epoch == TEMPORARY_LEAVE_EPOCH and not req.instance_id:
        bad = "MemberEpoch -2 (temporary leave) requires InstanceId"
    else:
        for a in req.client_assignors or ():
            if not a.name:
                bad = "Assignor.Name must be non-empty"
            elif a.minimum_version < -1:
                bad = f"Assignor {a.name}: MinimumVersion must be >= -1"
            elif a.maximum_version < 0 or a.maximum_version < a.minimum_version:
                bad = f"Assignor {a.name}: MaximumVersion must be >= 0 and >= MinimumVersion"
            elif not a.minimum_version <= a.version <= a.maximum_version:
                bad = f"Assignor {a.name}: Version must be within [MinimumVersion, MaximumVersion]"
            if bad:
                break
    if bad:
        raise RequestError(ErrorCode.INVALID_REQUEST, bad)


def _epoch_relevant(m: MemberMetadata) -> tuple:
    """Metadata fields that feed the assignment: a change to any of them bumps the group epoch."""
    return (m.instance_id, m.url, m.server_assignor, m.client_assignors, m.protocol)
