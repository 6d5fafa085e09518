"""SyncGroup and Heartbeat on a classic group (Kafka's ``classicGroupSync`` / ``classicGroupHeartbeat``).

A follower's SyncGroup parks until the leader's arrives with the assignment; the leader's installs
it by committing the Stable generation's record, answers every parked SyncGroup.
"""

from __future__ import annotations

from dataclasses import replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.api import (
    EAGER_PROTOCOL,
    ClassicGroupState,
    GenerationRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from connect_bridge.state.classic.eager_hold import given_assignment, hold_unstopped
from connect_bridge.state.classic.member import ParkedRequest
from connect_bridge.state.classic.rebalance import propagate_assignment
from connect_bridge.state.classic.state import IN_GENERATION, ClassicGroup

_S = ClassicGroupState


def sync(group: ClassicGroup, req: SyncGroupRequest, now_ms: int) -> SyncGroupResponse | None:
    """SyncGroup: the response, or ``None`` for a follower parked until the leader syncs."""
    parked = ParkedRequest(req.token, req.api_version)
    response = _sync(group, req, parked, now_ms)
    if response is None:
        response = group.take(parked)  # type: ignore[assignment]
    return response


def _inconsistent(requested: str | None, group: str | None) -> bool:
    """Kafka's ``isProtocolInconsistent``: only a value given on both sides can disagree."""
    return requested is not None and group is not None and requested != group


def generation_error(group: ClassicGroup, req: GenerationRequest) -> ErrorCode | None:
    """Kafka's check of a SyncGroup or Heartbeat: the member (and its instance id), then the
    generation it names.

    A request of an unsynced leader round (``classic.join.forget_round``: no member here, at the
    round's generation) is answered UNKNOWN_MEMBER_ID, as the round intends, before the
    static-member check: a static worker whose instance id names a member of the group would
    otherwise get FENCED_INSTANCE_ID, which is fatal to a Java worker."""
    rounds = group.forget_rounds
    if rounds is not None and req.member_id not in group.members and req.generation_id == rounds.generation:
        return ErrorCode.UNKNOWN_MEMBER_ID
    error = group.validate_member(req.member_id, req.group_instance_id)
    if error is None and req.generation_id != group.generation_id:
        error = ErrorCode.ILLEGAL_GENERATION
    return error


def _sync_error(group: ClassicGroup, req: SyncGroupRequest) -> ErrorCode | None:
    if group.state is _S.EMPTY:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group.state is _S.DEAD:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    error = generation_error(group, req)
    if error is not None:
        return error
    if _inconsistent(req.protocol_type, group.protocol_type) or _inconsistent(
        req.protocol_name, group.protocol_name
    ):
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    if group.state is _S.PREPARING_REBALANCE:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return None


def _sync(
    group: ClassicGroup, req: SyncGroupRequest, parked: ParkedRequest, now_ms: int
) -> SyncGroupResponse | None:
    error = _sync_error(group, req)
    if error is not None:
        _tell(group, req.member_id, error)
        return SyncGroupResponse(error_code=int(error))
    member = group.members[req.member_id]
    if group.state is _S.COMPLETING_REBALANCE:
        # As for JoinGroup, an earlier parked SyncGroup of this member is answered, not dropped.
        group.complete_sync(member, SyncGroupResponse(error_code=int(ErrorCode.REBALANCE_IN_PROGRESS)))
        member.parked_sync = parked
        _remove_pending_sync(group, req.member_id)
        if req.member_id == group.leader_id:
            _install_assignment(group, dict(req.assignments), now_ms)
        return None
    _remove_pending_sync(group, req.member_id)  # Stable: answer with the stored assignment
    group.arm_session(member, now_ms)  # Kafka reschedules the member's heartbeat here too
    given_assignment(group, member, now_ms)
    return SyncGroupResponse(
        protocol_type=group.protocol_type, protocol_name=group.protocol_name, assignment=member.assignment
    )


def _install_assignment(group: ClassicGroup, assignments: dict[str, bytes], now_ms: int) -> None:
    """The leader's assignment: store it per member (absent = b""), answer every parked
    SyncGroup, become Stable and persist the group."""
    assignments = hold_unstopped(group, assignments)
    answered = [m for m in group.members.values() if m.awaiting_sync]
    delay = group.config.classic_cooperative_switch_rebalance_ms
    # Connect's own stall after leaving eager (docs/live-drills.md): one more round restarts the
    # tasks its workers stopped on stale task-config updates. Persisted with the generation, so a
    # restart before it is due still starts it.
    switch = group.eager_before and group.protocol_name != EAGER_PROTOCOL and delay is not None
    group.transition(_S.STABLE, now_ms)
    current = group.to_snapshot()
    # The generation, its assignments and the extra round take effect by applying its record.
    group.commit(
        replace(
            current,
            members=tuple(replace(m, assignment=assignments.get(m.member_id, b"")) for m in current.members),
            extra_rebalance_at_ms=now_ms + delay if switch and delay is not None else -1,
        )
    )
    propagate_assignment(group, ErrorCode.NONE, now_ms)
    for member in answered:
        given_assignment(group, member, now_ms)
    if switch:
        group.schedule(group.switch_key, group.extra_rebalance_at_ms)


def _remove_pending_sync(group: ClassicGroup, member_id: str) -> None:
    group.remove_pending_sync_member(member_id)
    if group.state not in IN_GENERATION or not group.pending_sync:
        group.cancel(group.sync_key)


def _before_downgrade(group: ClassicGroup, generation_id: int) -> bool:
    """A member's heartbeat names the epoch it last got from the connect group this group was
    downgraded from, while the rebalance the downgrade started runs.

    The downgrade loads the group one generation past the connect group's epoch (so nothing told
    in the connect era passes for a classic generation), which no member has seen yet. Kafka loads
    a downgraded group at the members' own epoch and answers their heartbeats REBALANCE_IN_PROGRESS
    during that rebalance; so does the bridge, instead of an ILLEGAL_GENERATION that costs each
    worker a reset generation and a logged error for nothing (they rejoin either way).
    """
    return (
        group.state is _S.PREPARING_REBALANCE
        and group.generation_id == group.downgraded_generation
        and 0 <= generation_id < group.generation_id
    )


REJOIN_ERRORS = frozenset({ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION})
"""Answers after which a Java worker rejoins with the member id it has (``told_to_rejoin``)."""


def _tell(group: ClassicGroup, member_id: str, error: ErrorCode) -> None:
    member = group.members.get(member_id)
    if member is not None and error in REJOIN_ERRORS:
        member.told_to_rejoin = True


def steady_heartbeat(group: ClassicGroup, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse | None:
    """The Stable case of :func:`heartbeat`: a member at the group's generation has its session
    renewed, and nothing else changes. None for any other heartbeat, with nothing changed."""
    if group.state is not _S.STABLE or generation_error(group, req) is not None:
        return None
    group.arm_session(group.members[req.member_id], now_ms)
    return HeartbeatResponse()


def heartbeat(group: ClassicGroup, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
    """Heartbeat: keeps the session; REBALANCE_IN_PROGRESS tells a member to rejoin."""
    if group.state is _S.DEAD:
        return HeartbeatResponse(int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    error = generation_error(group, req)
    if error is ErrorCode.ILLEGAL_GENERATION and _before_downgrade(group, req.generation_id):
        error = None
    if error is not None:
        _tell(group, req.member_id, error)
        return HeartbeatResponse(int(error))
    if group.state is _S.EMPTY:
        return HeartbeatResponse(int(ErrorCode.UNKNOWN_MEMBER_ID))
    group.arm_session(group.members[req.member_id], now_ms)
    if group.state is _S.PREPARING_REBALANCE:
        _tell(group, req.member_id, ErrorCode.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse(int(ErrorCode.REBALANCE_IN_PROGRESS))
    # CompletingRebalance too: a member may heartbeat between its JoinGroup answer and SyncGroup.
    return HeartbeatResponse()


__all__ = ["generation_error", "heartbeat", "steady_heartbeat", "sync"]
