"""JoinGroup on a classic group (Kafka's ``GroupMetadataManager.classicGroupJoin`` and its helpers).

A handler returns the response, or ``None`` when the request is parked until the join phase
completes; the parked response comes out of the group's outbox tagged with the request's token.
"""

from __future__ import annotations

from connect_bridge.codecs.connect_protocol import (
    CONNECT_PROTOCOL_NAMES,
    Assignment,
    decode_assignment,
    decode_subscription,
)
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.classic.api import (
    PROTOCOL_TYPE_CONNECT,
    ClassicGroupState,
    JoinGroupRequest,
    JoinGroupResponse,
)
from connect_bridge.state.classic.leader_memory import unsynced_leader_round, unsynced_round_key
from connect_bridge.state.classic.member import ClassicMember, IllegalStateError, ParkedRequest
from connect_bridge.state.classic.rebalance import (
    maybe_complete_join_phase,
    maybe_prepare_rebalance_or_complete_join,
    prepare_rebalance,
)
from connect_bridge.state.classic.records import empty_group_snapshot
from connect_bridge.state.classic.state import ClassicGroup, join_error

SKIP_ASSIGNMENT_MIN_VERSION = 9
"""JoinGroup v9 added ``SkipAssignment`` (Kafka's ``JoinGroupRequest.supportsSkippingAssignment``)."""
MEMBER_ID_REQUIRED_MIN_VERSION = 4
"""JoinGroup v4 added the MEMBER_ID_REQUIRED round trip (``JoinGroupRequest.requiresKnownMemberId``)."""

_S = ClassicGroupState


def join(group: ClassicGroup, req: JoinGroupRequest, now_ms: int) -> JoinGroupResponse | None:
    """JoinGroup: the response, or ``None`` when parked until the join phase completes."""
    if not req.group_id:
        return join_error(ErrorCode.INVALID_GROUP_ID, req.member_id)
    config = group.config
    if not (
        config.classic_min_session_timeout_ms
        <= req.session_timeout_ms
        <= config.classic_max_session_timeout_ms
    ):
        return join_error(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)
    forget = forget_round(group, req)
    if forget is not None:
        return forget
    new_group = not group.persisted and not group.members and not group.pending_members
    if new_group and req.member_id:
        # Kafka creates a group only for a member without an id.
        return join_error(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
    if new_group and group.state_timestamp < 0:
        group.stamp_creation(now_ms)
    parked = ParkedRequest(req.token, req.api_version)
    response = _join(group, req, parked, now_ms)
    if response is None:
        response = group.take(parked)  # type: ignore[assignment]
    if new_group and not group.persisted:  # nothing written on the way: the group's first record
        group.commit(empty_group_snapshot(group.generation_id, group.member_seq, group.state_timestamp))
    return response


def forget_round(group: ClassicGroup, req: JoinGroupRequest) -> JoinGroupResponse | None:
    """The unsynced leader round (``leader_memory.unsynced_leader_round``) that answers a worker's
    first JoinGroup into a classic group that replaced an emptied connect group; ``None`` when none
    is due.

    In the connect group the bridge elected a legacy worker Connect leader in each of its
    JoinGroups and ignored what its assignor sent back; the assignor still remembers that
    assignment, in which work the bridge held for a departed member was dealt out (it ran nowhere
    in the leader's view). If that worker's last completed generation is the one it led and it
    leads this group's first generation, it takes everything it remembers and no member reports
    for lost and delays it ``scheduled.rebalance.max.delay.ms`` once more, after the bridge's own
    hold on it (drill 97000291025209: 93.1 s of could-run time against a 90 s bound). Kafka's
    leader of such a group would either remember nothing or hold the work only until the first
    delay ends. So every worker (by url, else instance id) offering a cooperative protocol with an
    empty member id gets one round first, whoever then leads: a member that later becomes leader
    in its first generation here would otherwise use the same memory."""
    rounds = group.forget_rounds
    if req.member_id or rounds is None:
        return None
    key = unsynced_round_key(req)
    if not key or key in rounds.done:
        return None
    answer = unsynced_leader_round(rounds.generation - 1, req, "forget")
    if answer is not None:
        rounds.answered(key)
    return answer


def _join(
    group: ClassicGroup, req: JoinGroupRequest, parked: ParkedRequest, now_ms: int
) -> JoinGroupResponse | None:
    if not _accept_joining_member(group, req.member_id):
        group.remove_member(req.member_id)
        return join_error(ErrorCode.GROUP_MAX_SIZE_REACHED)
    if group.state is _S.DEAD:
        return join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
    if not group.supports_protocols(req.protocol_type, {name for name, _ in req.protocols}):
        return join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
    if not req.member_id:
        return _join_new_member(group, req, parked, now_ms)
    return _join_existing_member(group, req, parked, now_ms)


def _accept_joining_member(group: ClassicGroup, member_id: str) -> bool:
    """Kafka's ``acceptJoiningMember`` (the ``group.max.size`` check)."""
    limit = group.config.max_group_size
    if group.state in (_S.EMPTY, _S.DEAD):
        return True
    member = group.members.get(member_id)
    if group.state is _S.PREPARING_REBALANCE:
        awaiting = sum(1 for m in group.members.values() if m.awaiting_join)
        return (member is not None and member.awaiting_join) or awaiting < limit
    return member is not None or len(group.members) < limit


def _join_new_member(
    group: ClassicGroup, req: JoinGroupRequest, parked: ParkedRequest, now_ms: int
) -> JoinGroupResponse | None:
    new_id = group.generate_member_id(req.client_id, req.group_instance_id, now_ms)
    if req.group_instance_id is not None:
        existing = group.static.get(req.group_instance_id)
        if existing is not None:
            return _replace_static_member(group, req, parked, existing, new_id, now_ms)
        return _add_member(group, req, parked, new_id, now_ms)
    if req.api_version >= MEMBER_ID_REQUIRED_MIN_VERSION:
        # The member must come back with this id; until then it holds up the join barrier.
        group.add_pending_member(new_id, req.principal)
        group.schedule(group.session_key(new_id), now_ms + req.session_timeout_ms)
        return JoinGroupResponse(error_code=int(ErrorCode.MEMBER_ID_REQUIRED), member_id=new_id)
    return _add_member(group, req, parked, new_id, now_ms)


def _join_existing_member(
    group: ClassicGroup, req: JoinGroupRequest, parked: ParkedRequest, now_ms: int
) -> JoinGroupResponse | None:
    member_id = req.member_id
    if member_id in group.pending_members:
        if req.group_instance_id is not None:
            # Kafka: IllegalStateException (a pending member is never static), answered like
            # any exception: the error code alone, no member id (measured against Kafka 4.3.1).
            return join_error(ErrorCode.UNKNOWN_SERVER_ERROR)
        return _add_member(group, req, parked, member_id, now_ms)
    error = group.validate_member(member_id, req.group_instance_id)
    if error is not None:
        return join_error(error, member_id)
    member = group.members[member_id]
    same_protocols = member.protocols == tuple(req.protocols)
    state = group.state
    if state is _S.COMPLETING_REBALANCE and same_protocols:
        # Lost JoinGroup answer: repeat the current generation's answer.
        return group.join_response(member_id, with_members=member_id == group.leader_id)
    if state is _S.STABLE and member_id != group.leader_id and same_protocols:
        return group.join_response(member_id, with_members=False)
    if same_protocols and state is not _S.COMPLETING_REBALANCE and not member.awaiting_join:
        if member.refused_stale_join != member.protocols and _may_be_stale_copy(group, member):
            # Possibly a copy of the JoinGroup this member sent before the SyncGroup that gave it
            # its work (a request the network delayed past its resend): taken as its join, it
            # would show the leader that work as free while the member runs it. Hold: refuse it
            # once; a live worker rejoins at once (REBALANCE_IN_PROGRESS is retriable), the same
            # bytes again are its join, and a stale copy is superseded by the worker's own.
            member.refused_stale_join = member.protocols
            return join_error(ErrorCode.REBALANCE_IN_PROGRESS, member_id)
    member.refused_stale_join = None
    if state in (_S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.STABLE):
        # Changed metadata needs a new assignment; so does a leader rejoining a Stable group.
        group.update_member(
            member, tuple(req.protocols), req.rebalance_timeout_ms, req.session_timeout_ms, parked
        )
        maybe_prepare_rebalance_or_complete_join(group, now_ms)
        return None
    return join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id)  # Empty: no members to rejoin


def _may_be_stale_copy(group: ClassicGroup, member: ClassicMember) -> bool:
    """Whether a JoinGroup repeating the member's last one may be a stale copy of it.

    Cooperative (v1/v2) elections: its allocation lacks work it was given
    (``_reports_less_than_given``). Eager: a worker stops all its work before it joins, so the
    bridge takes a join as proof that its work is free; nothing in an eager subscription tells a
    copy from a rejoin, but a Java worker rejoins on its own only when its leader saw a config
    change. So a join of a member that holds work and was not told to rejoin since it got it
    (``told_to_rejoin``) is refused once; such a spontaneous rejoin costs one retry.
    """
    if group.protocol_type != PROTOCOL_TYPE_CONNECT:
        return False
    elected = group.protocol_name or _only_protocol(member)
    version = CONNECT_PROTOCOL_NAMES.get(elected or "")
    if version is None:
        return False
    if version >= 1:
        return _reports_less_than_given(group, member)
    return not member.told_to_rejoin and _holds_work(member)


def _only_protocol(member: ClassicMember) -> str | None:
    """The protocol a member offers when it offers one (an eager-only worker: ``default``)."""
    return member.protocols[0][0] if len(member.protocols) == 1 else None


def _holds_work(member: ClassicMember) -> bool:
    """Whether the member's stored assignment gives it any item."""
    if not member.assignment:
        return False
    try:
        return bool(decode_assignment(member.assignment).items)
    except CodecError:
        return False


def _reports_less_than_given(group: ClassicGroup, member: ClassicMember) -> bool:
    """Whether the member's join metadata (which a JoinGroup repeats byte for byte) reports an
    allocation lacking work its stored assignment gave it.

    Connect's v1/v2 subscription carries what the worker runs as of its last completed generation,
    so after applying an assignment that gave it items its next JoinGroup names them. The same
    bytes as before that assignment are a copy sent before it, or a worker that never applied it
    (its SyncGroup answer lost). Only cooperative (v1/v2) elections: an eager subscription carries
    no allocation and an eager assignment is the whole set. After a downgrade the stored
    assignment is what the member runs (``conversion.downgrade``), its metadata from before.
    """
    if (
        group.protocol_type != PROTOCOL_TYPE_CONNECT
        or CONNECT_PROTOCOL_NAMES.get(group.protocol_name or "", 0) < 1
        or not member.assignment
    ):
        return False
    metadata = dict(member.protocols).get(group.protocol_name or "")
    if not metadata:
        return False
    try:
        allocation = decode_subscription(metadata).allocation
        given = decode_assignment(member.assignment)
    except CodecError:
        return False
    if not isinstance(allocation, Assignment):
        return False  # no allocation reported: no claim to compare
    return not frozenset(given.items) <= frozenset(allocation.items)


def _add_member(
    group: ClassicGroup, req: JoinGroupRequest, parked: ParkedRequest, member_id: str, now_ms: int
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
        principal=req.principal,
    )
    if group.state is _S.PREPARING_REBALANCE and group.previous_state is _S.EMPTY:
        group.note_new_member_added()  # extends the initial rebalance delay
    group.add(member, parked)
    # A new member cannot heartbeat while parked: bound its wait by the new-member join timeout.
    group.arm_session(member, now_ms, group.new_member_join_timeout_ms)
    maybe_prepare_rebalance_or_complete_join(group, now_ms)
    return None


def _replace_static_member(
    group: ClassicGroup,
    req: JoinGroupRequest,
    parked: ParkedRequest,
    old_id: str,
    new_id: str,
    now_ms: int,
) -> JoinGroupResponse | None:
    """Kafka's ``updateStaticMemberThenRebalanceOrCompleteJoin``: a restarted static member takes
    over its instance id under a new member id; the old id is fenced at once."""
    current_leader = group.leader_id
    new = group.replace_static_member_id(old_id, new_id)
    group.arm_session(new, now_ms)
    group.cancel(group.session_key(old_id))
    group.update_member(new, tuple(req.protocols), req.rebalance_timeout_ms, req.session_timeout_ms, parked)
    state = group.state
    # Connect workers do not support static membership: a Java WorkerCoordinator elected leader
    # with skipAssignment throws IllegalStateException and the worker dies, and a fresh process
    # handed a cooperative (delta) assignment would run only the delta. So a restarted static
    # Connect worker gets a rebalance instead (docs/legacy-workers.md).
    keep = (
        state is _S.STABLE
        and group.protocol_name == group.select_protocol()
        and group.protocol_type != PROTOCOL_TYPE_CONNECT
    )
    if keep:
        _keep_generation(group, req, new, current_leader)
        return None
    if state is _S.STABLE:
        maybe_prepare_rebalance_or_complete_join(group, now_ms)
    elif state is _S.COMPLETING_REBALANCE:
        # The leader may be assigning to the old id: start over.
        prepare_rebalance(group, now_ms)
    elif state in (_S.EMPTY, _S.DEAD):
        raise IllegalStateError(f"group {group.group_id} cannot replace a static member while {state}")
    else:
        maybe_complete_join_phase(group, now_ms)
    if req.group_instance_id is not None:
        # Kafka persists the replacement only when it keeps the generation; the bridge persists
        # it in the rebalance that follows too, so a restart before the next generation keeps
        # the new id. Committed once the rebalance began: its working generation stays as it is.
        group.persist_static_replacement(req.group_instance_id, new_id)
    return None


def _keep_generation(
    group: ClassicGroup, req: JoinGroupRequest, new: ClassicMember, current_leader: str | None
) -> None:
    """Same elected protocol: keep the generation and the assignments, persist the new id."""
    group.persist()
    if req.api_version >= SKIP_ASSIGNMENT_MIN_VERSION:
        is_leader = new.member_id == group.leader_id
        response = group.join_response(new.member_id, with_members=is_leader)
        response.skip_assignment = is_leader
    else:
        # Older clients cannot skip the assignment: the replaced leader is presented as a
        # follower (leader = the old id) so it does not compute one.
        response = group.join_response(new.member_id, with_members=False, leader=current_leader or "")
    group.complete_join(new, response)


__all__ = ["MEMBER_ID_REQUIRED_MIN_VERSION", "SKIP_ASSIGNMENT_MIN_VERSION", "join"]
