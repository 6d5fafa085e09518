"""LeaveGroup on a classic group, and its deletion (Kafka's ``classicGroupLeave`` and the
tombstone written when a group is deleted or converted)."""

from __future__ import annotations

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.api import ClassicGroupState, LeaveGroupRequest, LeaveGroupResponse
from connect_bridge.state.classic.rebalance import (
    maybe_complete_join_phase,
    maybe_prepare_rebalance_or_complete_join,
)
from connect_bridge.state.classic.state import IN_GENERATION, ClassicGroup

_S = ClassicGroupState


def leave(group: ClassicGroup, req: LeaveGroupRequest, now_ms: int) -> LeaveGroupResponse:
    """LeaveGroup (batch): per-member results; one rebalance for the whole batch."""
    if group.state is _S.DEAD:
        return LeaveGroupResponse(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    results: list[tuple[str, str | None, int]] = []
    for leaving in req.members:
        error = _leave_one(group, leaving.member_id, leaving.group_instance_id)
        results.append((leaving.member_id, leaving.group_instance_id, int(error)))
    if any(code == ErrorCode.NONE for _, _, code in results):
        if group.state in IN_GENERATION:
            maybe_prepare_rebalance_or_complete_join(group, now_ms)
        elif group.state is _S.PREPARING_REBALANCE:
            maybe_complete_join_phase(group, now_ms)
    return LeaveGroupResponse(members=results)


def _leave_one(group: ClassicGroup, member_id: str, group_instance_id: str | None) -> ErrorCode:
    if not member_id:
        # Administrative removal by instance id.
        existing = group.static.get(group_instance_id) if group_instance_id is not None else None
        if existing is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        group.remove_member(existing)
        return ErrorCode.NONE
    if member_id not in group.pending_members:
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return error
    group.remove_member(member_id)
    return ErrorCode.NONE


def delete(
    group: ClassicGroup, now_ms: int, parked_error: ErrorCode = ErrorCode.REBALANCE_IN_PROGRESS
) -> None:
    """Tombstone the group: an expired Empty group (``state.empty_groups``), or conversion to a
    connect group.

    Parked requests are answered with ``parked_error``, the session, join and sync timers are
    cancelled (a pending switch round finds the group Dead and does nothing), the group is Dead
    and empty. Read what you need (members, assignments) before calling this.
    """
    group.release_parked(parked_error)
    for member_id in [*group.members, *group.pending_members]:
        group.cancel(group.session_key(member_id))
    group.cancel_join()
    group.cancel(group.sync_key)
    group.transition(_S.DEAD, now_ms)
    group.commit(None)  # applying the tombstone empties the group


__all__ = ["delete", "leave"]
