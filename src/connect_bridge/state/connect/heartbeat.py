"""ConnectGroupHeartbeat, PrepareAssignment, InstallAssignment and the config view of a ``connect``
group: step functions that take the group (``connect.state.ConnectGroup``), a request and ``now_ms``.

A heartbeat validates the request, joins, rejoins or leaves through the membership steps
(``connect.membership``), brings the target up to date, reconciles the member one step toward it and
answers with its Assignment when there is something new to tell. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state import assignors
from connect_bridge.state.api import (
    LEAVE_EPOCH,
    TEMPORARY_LEAVE_EPOCH,
    HeartbeatRequest,
    HeartbeatResponse,
    InstallAssignmentRequest,
    InstallAssignmentResponse,
    PrepareAssignmentRequest,
    PrepareAssignmentResponse,
)
from connect_bridge.state.connect.client_side import check_client_ranges
from connect_bridge.state.connect.membership import (
    add_member,
    maybe_update_target,
    new_member_id,
    reconcile,
    remove_member,
    take_over_static,
    target_spec,
    update_member_metadata,
)
from connect_bridge.state.connect.state import ConnectGroup
from connect_bridge.state.connect.validation import check_heartbeat, metadata_from
from connect_bridge.state.errors import RequestError
from connect_bridge.state.holds import zombie_grace_ms
from connect_bridge.state.model import (
    EMPTY,
    NEW_PROTOCOL,
    ConfigView,
    CurrentAssignment,
    Items,
    Member,
    MemberMetadata,
    MemberState,
)
from connect_bridge.state.timers import TimerKey


# ------------------------------------------------------------------ heartbeat
def _expect_revoked(group: ConnectGroup, member: Member, req: HeartbeatRequest, now_ms: int) -> None:
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
    key = TimerKey.revoke(group.group_id, member.member_id)
    soon = now_ms + zombie_grace_ms(member.metadata.session_timeout_ms)
    armed = group.timers.deadline(key)
    if armed is None or soon < armed:
        if member.member_id not in group.revocation_deadlines:
            group.keep_revocation_deadline(
                member.member_id,
                armed if armed is not None else now_ms + member.metadata.rebalance_timeout_ms,
            )
        group.timers.schedule(key, soon)


def _still_revoking(group: ConnectGroup, member: Member, owned: Items | None, now_ms: int) -> None:
    """Put back the deadline ``_expect_revoked`` brought forward once the worker reports owning
    some of what it revokes: it did not reset after all (it took its assignment back from the
    answer to its rejoin and runs it), and ending its revocation a zombie grace in removed it in
    the middle of a slow revocation, with its work dealt out while it still ran it (fleet drill
    98804296420767). The revocation then ends when it would have without the rejoin."""
    deadline = group.revocation_deadlines.get(member.member_id)
    if deadline is None:
        return
    current = member.current
    if current.state is not MemberState.UNREVOKED:
        group.drop_revocation_deadline(member.member_id)
    elif owned is not None and owned & current.revoking:
        group.drop_revocation_deadline(member.member_id)
        group.timers.schedule(TimerKey.revoke(group.group_id, member.member_id), max(deadline, now_ms))


def _metadata_from(group: ConnectGroup, req: HeartbeatRequest, base: MemberMetadata) -> MemberMetadata:
    return metadata_from(req, base, group.config.session_timeout_ms)


def _update_from_heartbeat(group: ConnectGroup, member: Member, req: HeartbeatRequest) -> None:
    update_member_metadata(group, member, _metadata_from(group, req, member.metadata))


def _leaving_member(group: ConnectGroup, req: HeartbeatRequest) -> Member:
    """Who a -1 or -2 names, looked up as Kafka 4.3.1 does: by instance id when there is one.

    Unknown member id or instance id: UNKNOWN_MEMBER_ID; an instance id held by another member
    id than the request's: FENCED_INSTANCE_ID.
    """
    if req.instance_id is None:
        member = group.members.get(req.member_id)
        if member is None:
            raise RequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {req.member_id} is not in the group")
        return member
    member = group.member_by_instance(req.instance_id)
    if member is None:
        raise RequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"instance id {req.instance_id} is unknown")
    if member.member_id != req.member_id:
        raise RequestError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"instance id {req.instance_id} is member {member.member_id}, not {req.member_id}",
        )
    return member


def _leave(group: ConnectGroup, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
    member = _leaving_member(group, req)
    remove_member(group, member, now_ms)
    maybe_update_target(group, now_ms)
    return HeartbeatResponse(member_id=member.member_id, member_epoch=LEAVE_EPOCH, heartbeat_interval_ms=0)


def _temporary_leave(group: ConnectGroup, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
    member = _leaving_member(group, req)
    group.set_current(member, replace(member.current, left_temporarily=True))
    if group.client_side.forget(member.member_id):
        maybe_update_target(group, now_ms)  # someone else computes now, not after a timeout
    return HeartbeatResponse(
        member_id=member.member_id, member_epoch=TEMPORARY_LEAVE_EPOCH, heartbeat_interval_ms=0
    )


def steady_heartbeat(group: ConnectGroup, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse | None:
    """The steady case of :func:`heartbeat`: a stable member at the group's epoch with nothing to
    report, which has acknowledged what it was last told. Its session is renewed and nothing else
    changes (no record, no reconciliation). None for any other heartbeat, with nothing changed."""
    epoch = req.member_epoch
    member = group.members.get(req.member_id)
    if (
        member is not None
        and epoch == member.current.member_epoch
        and epoch == group.target_metadata.assignment_epoch
        and member.current.state is MemberState.STABLE
        and not member.current.left_temporarily
        and group.metadata.group_epoch == epoch
        and req.reports_nothing
        and (not req.client_id or req.client_id == member.metadata.client_id)
        and (not req.client_host or req.client_host == member.metadata.client_host)
        and group.client_side.member != req.member_id
        and req.member_id not in group.reported
        and group.told.get(req.member_id) == group.assignment_header()
    ):
        group.arm_session(member, now_ms)
        return HeartbeatResponse(
            member_id=member.member_id,
            member_epoch=epoch,
            heartbeat_interval_ms=group.config.heartbeat_interval_ms,
        )
    return None


def heartbeat(group: ConnectGroup, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
    steady = steady_heartbeat(group, req, now_ms)
    if steady is not None:
        return steady
    try:
        return _heartbeat(group, req, now_ms)
    except RequestError as exc:
        return HeartbeatResponse(
            error_code=int(exc.code),
            error_message=exc.message,
            member_id=req.member_id,
            member_epoch=req.member_epoch,
            heartbeat_interval_ms=group.config.heartbeat_interval_ms,
        )


def _validate(group: ConnectGroup, req: HeartbeatRequest) -> None:
    member = group.members.get(req.member_id)
    check_heartbeat(req, at_epoch_0=member is not None and member.current.member_epoch == 0)
    if req.server_assignor is not None and req.server_assignor not in assignors.SERVER_ASSIGNORS:
        raise RequestError(
            ErrorCode.UNSUPPORTED_ASSIGNOR, f"server assignor {req.server_assignor!r} is not supported"
        )
    if req.client_assignors:
        # Linear in what the members advertise, not pairwise (issue 11.6): see client_side.
        advertised = {mid: m.metadata.client_assignors for mid, m in group.members.items()}
        check_client_ranges(advertised, req.member_id, req.client_assignors)
    group.client_side.check_heartbeat(group, req)


def _heartbeat(group: ConnectGroup, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
    epoch = req.member_epoch
    joining = epoch == 0
    _validate(group, req)
    if epoch == LEAVE_EPOCH:
        return _leave(group, req, now_ms)
    if epoch == TEMPORARY_LEAVE_EPOCH:
        return _temporary_leave(group, req, now_ms)
    member = group.members.get(req.member_id) if req.member_id else None
    reported_owned = req.owned
    if joining:
        before = member
        duplicate = (
            before is not None
            and not before.metadata.is_legacy
            and not before.current.left_temporarily
            and before.current.member_epoch > 0
        )
        member = _join(group, req, member, now_ms)
        # A (re)joining worker has stopped everything; a possible duplicate of a first join
        # (the same member kept its epoch, see _join) says nothing about what it owns.
        duplicate = duplicate and member is before and member.current.member_epoch > 0
        reported_owned = None if duplicate else EMPTY
    elif member is None:
        raise RequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {req.member_id} is not in the group")
    else:
        _check_epoch(group, member, req)
    offset_before = member.metadata.config_offset
    _update_from_heartbeat(group, member, req)
    group.arm_session(member, now_ms)
    maybe_update_target(group, now_ms)
    before_current = member.current
    reconcile(group, member, reported_owned, now_ms)
    if joining and reported_owned is None:
        _expect_revoked(group, member, req, now_ms)
    else:
        _still_revoking(group, member, req.owned, now_ms)
    # A worker whose config offset moved or that sent a full request (after an error, or its
    # herder's requestRejoin) waits for an Assignment before it resolves, even an unchanged one.
    asked = req.is_full or (req.config_offset is not None and req.config_offset != offset_before)
    return _response(group, member, before_current, req, joining, asked, now_ms)


def _check_epoch(group: ConnectGroup, member: Member, req: HeartbeatRequest) -> None:
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


def _join(group: ConnectGroup, req: HeartbeatRequest, member: Member | None, now_ms: int) -> Member:
    if req.instance_id:
        static = _released_static(group, req, member)
        if static is not None:
            base = replace(static.metadata, protocol=NEW_PROTOCOL, classic_protocols=None)
            metadata = _metadata_from(group, req, base)
            return take_over_static(group, static, req.member_id or new_member_id(group), metadata, now_ms)
    if member is not None:
        return _rejoin(group, req, member, now_ms)
    if len(group.members) >= group.config.max_group_size:
        raise RequestError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group.group_id} is full")
    member_id = req.member_id or new_member_id(group)
    return add_member(group, member_id, _metadata_from(group, req, MemberMetadata()), now_ms)


def _released_static(group: ConnectGroup, req: HeartbeatRequest, member: Member | None) -> Member | None:
    """The static member a join with an instance id takes over, if any, by KIP-848's rules."""
    assert req.instance_id
    static = group.member_by_instance(req.instance_id)
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


def _rejoin(group: ConnectGroup, req: HeartbeatRequest, member: Member, now_ms: int) -> Member:
    """A known member joining again (epoch 0)."""
    if member.current.left_temporarily:
        # The static member itself coming back after its -2 leave: it gets its work back.
        return take_over_static(
            group, member, member.member_id, _metadata_from(group, req, member.metadata), now_ms
        )
    if member.metadata.is_legacy:
        # A legacy worker coming back on ConnectGroupHeartbeat with its member id: it is a
        # new-protocol member from now on (Kafka drops the classic metadata the same way).
        group.legacy_members.forget(member.member_id)
        new = replace(member.metadata, protocol=NEW_PROTOCOL, classic_protocols=None)
        group.set_member_metadata(member.member_id, new)
        group.bump_group_epoch()
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
        group.set_current(member, reset)
    return member


def _response(
    group: ConnectGroup,
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
        heartbeat_interval_ms=group.config.heartbeat_interval_ms,
    )
    mid = member.member_id
    if joining:
        group.note_reported(mid, EMPTY)
    elif req.owned is not None:
        group.note_reported(mid, req.owned)
    changed = (
        joining
        or c.member_epoch != before.member_epoch
        or c.assigned != before.assigned
        or c.revoking != before.revoking
        or (req.owned is not None and req.owned != c.assigned)
    )
    if changed and mid not in group.reported:
        group.note_reported(mid, before.assigned | before.revoking)  # what it had acknowledged
    # A changed assignment is resent until the member reports owning it: the answer that
    # carried it may have been lost or may have answered a duplicate of the request
    # (adversarial drill 15005207; Kafka's client resends a full request after a failure,
    # which comes to the same). Once reported, the member is forgotten here, so the steady
    # state stays on the fast path.
    unacknowledged = group.reported.get(mid, c.assigned | c.revoking) != c.assigned | c.revoking
    if not unacknowledged:
        group.acknowledged(mid)
    # What an Assignment says besides the work changes without the member's work changing: the
    # leader (it left while its work is held, a static member took over its place, a client-side
    # target is still being computed), the config offset, CONFIG_MISMATCH. A worker forwards
    # REST calls to the leader url it was given and leads only when told it does, so each
    # member is told once whenever that changes (the steady path checks it too).
    header = group.assignment_header()
    if changed or unacknowledged or asked or group.told.get(mid) != header:
        resp.assignment = group.assignment_for(member, header)
        group.note_told(mid, header)
    group.client_side.signal(group, member, resp, now_ms)
    return resp


# ------------------------------------------------------------------ config view
def set_config(group: ConnectGroup, view: ConfigView, now_ms: int) -> bool:
    if view == group.view:
        return False
    group.set_config_view(view)
    # Held work stays held when the config drops it: a zombie may still run it, and the config
    # may bring it back before the hold ends (only configured items are ever assigned).
    group.bump_group_epoch()
    maybe_update_target(group, now_ms)
    return True


# ------------------------------------------------------------------ client-side assignment
def prepare_assignment(
    group: ConnectGroup, req: PrepareAssignmentRequest, now_ms: int
) -> PrepareAssignmentResponse:
    try:
        group.client_side.check_chosen(group, req.member_id, req.member_epoch)
    except RequestError as exc:
        return PrepareAssignmentResponse(error_code=int(exc.code), error_message=exc.message)
    return group.client_side.prepared(group, target_spec(group, now_ms))


def install_assignment(
    group: ConnectGroup, req: InstallAssignmentRequest, now_ms: int
) -> InstallAssignmentResponse:
    try:
        installed = group.client_side.validate_install(group, req)
    except RequestError as exc:
        return InstallAssignmentResponse(error_code=int(exc.code), error_message=exc.message)
    group.install_target(installed.epoch, installed.target, installed.error, installed.metadata)
    group.client_side.installed()
    maybe_update_target(group, now_ms)
    return InstallAssignmentResponse()
