"""A ``connect`` group: the epoch engine of seed 000 driven by ConnectGroupHeartbeat.

The coordinator owns the group: membership changes bump the group epoch, a bumped epoch produces a
new declarative target assignment (server-side assignor, or one member computing it client-side),
and every member is reconciled toward that target on its own heartbeats, revoking before assigning.
All inputs carry ``now_ms``; all effects are responses, records (``drain_records``) and timers
(``timers``). Nothing here does I/O.

Where things live: the persisted state and the one way it changes (records applied as replay
applies them) in ``cg_state``; the records themselves in ``connect_records``; the membership,
target and timer steps both protocols share in ``cg_membership``; the pure steps in
``reconciliation`` (a member toward its target), ``target_assignment`` (the assignor's input and the
records of a new target), ``holds`` and ``cg_validation``; the client-side computation in
``client_side`` and the classic API in ``legacy_members``, both taking the group as an argument.
This module holds the API: ConnectGroupHeartbeat, PrepareAssignment, InstallAssignment.
"""

from __future__ import annotations

from dataclasses import replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state import assignors
from connect_bridge.state import classic_api as capi
from connect_bridge.state.api import (
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    DescribedGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    InstallAssignmentRequest,
    InstallAssignmentResponse,
    PrepareAssignmentRequest,
    PrepareAssignmentResponse,
)
from connect_bridge.state.cg_describe import describe_group
from connect_bridge.state.cg_membership import ConnectGroupMembership
from connect_bridge.state.cg_state import HELD_OWNER
from connect_bridge.state.cg_validation import check_heartbeat, metadata_from
from connect_bridge.state.classic_api import ClassicGroupState
from connect_bridge.state.client_side import check_client_ranges
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.errors import RequestError
from connect_bridge.state.holds import zombie_grace_ms
from connect_bridge.state.legacy_members import LegacyMembers
from connect_bridge.state.model import (
    EMPTY,
    NEW_PROTOCOL,
    ConfigView,
    CurrentAssignment,
    Member,
    MemberMetadata,
    MemberState,
)
from connect_bridge.state.timers import TimerKey, Timers


class ClassicApi:
    """``group.legacy``: the classic API of one connect group, as the coordinator calls it.

    Binds the steps of :class:`LegacyMembers`, which take the group as an argument (so that module
    needs no reference to this one), to their group.
    """

    __slots__ = ("_group", "members")

    def __init__(self, group: ConnectGroup, members: LegacyMembers) -> None:
        self._group = group
        self.members = members

    @property
    def states(self) -> dict[str, ClassicGroupState]:
        return self.members.states

    def join(self, req: capi.JoinGroupRequest, now_ms: int) -> capi.JoinGroupResponse:
        return self.members.join(self._group, req, now_ms)

    def sync(self, req: capi.SyncGroupRequest, now_ms: int) -> capi.SyncGroupResponse:
        return self.members.sync(self._group, req, now_ms)

    def heartbeat(self, req: capi.HeartbeatRequest, now_ms: int) -> capi.HeartbeatResponse:
        return self.members.heartbeat(self._group, req, now_ms)

    def leave(self, req: capi.LeaveGroupRequest, now_ms: int) -> capi.LeaveGroupResponse:
        return self.members.leave(self._group, req, now_ms)


class ConnectGroup(ConnectGroupMembership):
    """A connect group's API: ConnectGroupHeartbeat, PrepareAssignment and InstallAssignment, the
    config view, and (``legacy``) the classic API of its legacy members."""

    def __init__(
        self, group_id: str, config: CoordinatorConfig, timers: Timers, view: ConfigView | None = None
    ) -> None:
        super().__init__(group_id, config, timers, view)
        self.legacy = ClassicApi(self, self.legacy_members)

    def describe(self, now_ms: int = -1) -> DescribedGroup:
        """ConnectGroupDescribe (``cg_describe``): ``now_ms`` is echoed for reading its deadlines."""
        return describe_group(self, now_ms)

    # ------------------------------------------------------------------ heartbeat
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
        key = TimerKey.revoke(self.group_id, member.member_id)
        soon = now_ms + zombie_grace_ms(member.metadata.session_timeout_ms)
        armed = self.timers.deadline(key)
        if armed is None or soon < armed:
            self.timers.schedule(key, soon)

    def _metadata_from(self, req: HeartbeatRequest, base: MemberMetadata) -> MemberMetadata:
        return metadata_from(req, base, self.config.session_timeout_ms)

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
            and self._told.get(req.member_id) == self.assignment_header()
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

    def _validate(self, req: HeartbeatRequest) -> None:
        member = self.members.get(req.member_id)
        check_heartbeat(req, at_epoch_0=member is not None and member.current.member_epoch == 0)
        if req.server_assignor is not None and req.server_assignor not in assignors.SERVER_ASSIGNORS:
            raise RequestError(
                ErrorCode.UNSUPPORTED_ASSIGNOR, f"server assignor {req.server_assignor!r} is not supported"
            )
        if req.client_assignors:
            # Linear in what the members advertise, not pairwise (issue 11.6): see client_side.
            advertised = {mid: m.metadata.client_assignors for mid, m in self.members.items()}
            check_client_ranges(advertised, req.member_id, req.client_assignors)
        self.client_side.check_heartbeat(self, req)

    def _heartbeat(self, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        epoch = req.member_epoch
        joining = epoch == 0
        self._validate(req)
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
        offset_before = member.metadata.config_offset
        self.update_from_heartbeat(member, req)
        self.arm_session(member, now_ms)
        self.maybe_update_target(now_ms)
        before_current = member.current
        self.reconcile(member, reported_owned, now_ms)
        if joining and reported_owned is None:
            self._expect_revoked(member, req, now_ms)
        # A worker whose config offset moved or that sent a full request (after an error, or its
        # herder's requestRejoin) waits for an Assignment before it resolves, even an unchanged one.
        asked = req.is_full or (req.config_offset is not None and req.config_offset != offset_before)
        return self._response(member, before_current, req, joining, asked, now_ms)

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
            static = self._released_static(req, member)
            if static is not None:
                base = replace(static.metadata, protocol=NEW_PROTOCOL, classic_protocols=None)
                metadata = self._metadata_from(req, base)
                return self.take_over_static(static, req.member_id or self.new_member_id(), metadata, now_ms)
        if member is not None:
            return self._rejoin(req, member, now_ms)
        if len(self.members) >= self.config.max_group_size:
            raise RequestError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {self.group_id} is full")
        member_id = req.member_id or self.new_member_id()
        return self.add_member(member_id, self._metadata_from(req, MemberMetadata()), now_ms)

    def _released_static(self, req: HeartbeatRequest, member: Member | None) -> Member | None:
        """The static member a join with an instance id takes over, if any, by KIP-848's rules."""
        assert req.instance_id
        static = self.member_by_instance(req.instance_id)
        if static is None:
            return None
        waiting = static is member and member.current.member_epoch == 0
        if not static.current.left_temporarily and not static.metadata.is_legacy and not waiting:
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
        if static is member:
            return None
        if member is not None:
            # A known member claiming an instance id another member released: Kafka gives it
            # the static member's state in place of its own, dropping what that member owns
            # while its worker may still run it. Refused here (a zombie sharing the id).
            raise RequestError(
                ErrorCode.FENCED_INSTANCE_ID,
                f"instance id {req.instance_id} is member {static.member_id}, not {member.member_id}",
            )
        return static

    def _rejoin(self, req: HeartbeatRequest, member: Member, now_ms: int) -> Member:
        """A known member joining again (epoch 0)."""
        if member.current.left_temporarily:
            # The static member itself coming back after its -2 leave: it gets its work back.
            return self.take_over_static(
                member, member.member_id, self._metadata_from(req, member.metadata), now_ms
            )
        if member.metadata.is_legacy:
            # A legacy worker coming back on ConnectGroupHeartbeat with its member id: it is a
            # new-protocol member from now on (Kafka drops the classic metadata the same way).
            self.legacy_members.forget(member.member_id)
            new = replace(member.metadata, protocol=NEW_PROTOCOL, classic_protocols=None)
            self._set_member_metadata(member.member_id, new)
            self._bump_group_epoch()
        elif member.current.member_epoch > 0:
            # A new-protocol member already in the group at a later epoch: its worker rejoining
            # after a fencing, a duplicate of its first join delivered after it moved on
            # (adversarial drill 23046776), or anybody holding its id. Kafka 4.3.1 accepts epoch 0
            # at any member epoch and answers the member's epoch and current assignment, unchanged;
            # so does the bridge. Unlike Kafka, the request says nothing about what the member owns
            # (Kafka takes its empty owned list as a finished revocation and releases the work):
            # the worker behind the member may still run it (see _expect_revoked).
            return member
        # A known member rejoining with epoch 0 (a legacy worker now on this protocol, or one
        # waiting at epoch 0): it owns nothing now.
        if member.current.owned or member.current.member_epoch != 0:
            reset = replace(
                member.current, assigned=EMPTY, revoking=EMPTY, state=MemberState.STABLE, member_epoch=0
            )
            self._set_current(member, reset)
        return member

    def _response(
        self,
        member: Member,
        before: CurrentAssignment,
        req: HeartbeatRequest,
        joining: bool,
        asked: bool,
        now_ms: int,
    ) -> HeartbeatResponse:
        """The answer, with the member's Assignment when it changed, is not acknowledged yet, was
        ``asked`` for, or says something new besides the work (leader, config offset, error)."""
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
        # What an Assignment says besides the work changes without the member's work changing: the
        # leader (it left while its work is held, a static member took over its place, a client-side
        # target is still being computed), the config offset, CONFIG_MISMATCH. A worker forwards
        # REST calls to the leader url it was given and leads only when told it does, so each
        # member is told once whenever that changes (the steady path checks it too).
        header = self.assignment_header()
        if changed or unacknowledged or asked or self._told.get(mid) != header:
            resp.assignment = self.assignment_for(member, header)
            self._told[mid] = header
        self.client_side.signal(self, member, resp, now_ms)
        return resp

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
        try:
            self.client_side.check_chosen(self, req.member_id, req.member_epoch)
        except RequestError as exc:
            return PrepareAssignmentResponse(error_code=int(exc.code), error_message=exc.message)
        return self.client_side.prepared(self, self._assignment_spec(now_ms))

    def install_assignment(self, req: InstallAssignmentRequest, now_ms: int) -> InstallAssignmentResponse:
        try:
            installed = self.client_side.validate_install(self, req)
        except RequestError as exc:
            return InstallAssignmentResponse(error_code=int(exc.code), error_message=exc.message)
        self._install_target(installed.epoch, installed.target, installed.error, installed.metadata)
        self.client_side.installed()
        self.maybe_update_target(now_ms)
        return InstallAssignmentResponse()


__all__ = ["HELD_OWNER", "ClassicApi", "ConnectGroup", "RequestError", "check_heartbeat"]
