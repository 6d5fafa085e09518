"""The rebalance of a classic group: preparing it, completing the join phase, propagating assignments.

The steps the JoinGroup, SyncGroup, LeaveGroup handlers and the timers share (Kafka's
``GroupMetadataManager.prepareRebalance``, ``completeClassicGroupJoin``,
``maybeCompleteJoinPhase``, ``propagateAssignment``), as functions over the group's state.
"""

from __future__ import annotations

from dataclasses import replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.api import (
    ClassicGroupState,
    SyncGroupResponse,
)
from connect_bridge.state.classic.state import ClassicGroup

_S = ClassicGroupState


def maybe_prepare_rebalance_or_complete_join(group: ClassicGroup, now_ms: int) -> None:
    if group.can_rebalance():
        prepare_rebalance(group, now_ms)
    else:
        maybe_complete_join_phase(group, now_ms)


def maybe_complete_join_phase(group: ClassicGroup, now_ms: int) -> None:
    """Complete the join phase early once everyone is in, except during the initial delay."""
    if group.state is not _S.PREPARING_REBALANCE:
        return
    if group.previous_state is _S.EMPTY:
        return
    if group.has_all_members_joined():
        complete_join_phase(group, now_ms)


def rebalance_after_removal(group: ClassicGroup, now_ms: int) -> None:
    """Members left a group in a generation: rebalance, or finish a join phase they held up."""
    if group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
        maybe_prepare_rebalance_or_complete_join(group, now_ms)
    elif group.state is _S.PREPARING_REBALANCE and group.has_all_members_joined():
        complete_join_phase(group, now_ms)


def prepare_rebalance(group: ClassicGroup, now_ms: int) -> None:
    if group.state is _S.COMPLETING_REBALANCE:
        reset_and_propagate_assignment_error(group, ErrorCode.REBALANCE_IN_PROGRESS, now_ms)
    group.clear_pending_sync()
    group.cancel(group.sync_key)
    initial = group.state is _S.EMPTY
    if initial:
        delay = group.config.classic_initial_rebalance_delay_ms
        remaining = max(group.rebalance_timeout_ms - delay, 0)
        group.schedule_join(now_ms, delay, (delay, remaining))
    group.transition(_S.PREPARING_REBALANCE, now_ms)
    if not initial:
        if group.has_all_members_joined():
            complete_join_phase(group, now_ms)
        else:
            group.schedule_join(now_ms, group.rebalance_timeout_ms)


def complete_join_phase(group: ClassicGroup, now_ms: int) -> None:
    """End of the barrier: drop dynamic members that did not rejoin, elect, answer everyone.

    Not yet while a static member that has not rejoined may still wait on a JoinGroup it sent to
    the previous coordinator (``ClassicMember.waits_elsewhere_until_ms``, set at a load): Kafka keeps
    such a member in the generation with the metadata of its last join, so the leader would deal
    out what it was given since, while it still runs it (deviation 20, docs/classic-group.md)."""
    waiting = waits_elsewhere_until(group, now_ms)
    if waiting is not None:
        group.schedule_join(now_ms, waiting - now_ms)
        return
    group.cancel_join()
    for member in [m for m in group.members.values() if not m.awaiting_join and not m.is_static]:
        group.remove_member(member.member_id)
    if group.state is _S.DEAD:
        return
    if not group.maybe_elect_new_joined_leader() and group.members:
        # Only static members that have not rejoined are left: wait another rebalance timeout.
        group.schedule_join(now_ms, group.rebalance_timeout_ms)
        return
    init_next_generation(group, now_ms)
    if group.state is _S.EMPTY:
        return
    for member in group.members.values():
        is_leader = member.member_id == group.leader_id
        group.complete_join(member, group.join_response(member.member_id, with_members=is_leader))
        group.arm_session(member, now_ms)
        member.is_new = False
    group.await_syncs()
    group.schedule(group.sync_key, now_ms + group.rebalance_timeout_ms)


def waits_elsewhere_until(group: ClassicGroup, now_ms: int) -> int | None:
    """When the last static member that has not rejoined this join phase gives up a JoinGroup it
    may have parked at the previous coordinator (its client then finds this one and joins with
    what it runs); None if no such member may still be waiting."""
    waits = [
        until
        for m in group.members.values()
        if m.is_static
        and not m.awaiting_join
        and (until := m.waits_elsewhere_until_ms) is not None
        and until > now_ms
    ]
    return max(waits, default=None)


def init_next_generation(group: ClassicGroup, now_ms: int) -> None:
    """The next generation: with members, the working generation (in memory until its leader's
    SyncGroup commits it Stable, as in Kafka); without, an Empty generation, committed at once."""
    group.end_generation()
    if group.members:
        group.begin_next_generation(now_ms)
        return
    group.transition(_S.EMPTY, now_ms)
    group.commit(
        replace(
            group.to_snapshot(),
            generation=group.generation_id + 1,
            protocol_name=None,
            extra_rebalance_at_ms=-1,
        )
    )


def reset_and_propagate_assignment_error(group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
    for member in group.members.values():
        member.assignment = b""
    propagate_assignment(group, error, now_ms)


def propagate_assignment(group: ClassicGroup, error: ErrorCode, now_ms: int) -> None:
    """Answer every parked SyncGroup: the member's assignment, or ``error`` without protocol."""
    ok = error is ErrorCode.NONE
    for member in group.members.values():
        response = SyncGroupResponse(
            error_code=int(error),
            protocol_type=group.protocol_type if ok else None,
            protocol_name=group.protocol_name if ok else None,
            assignment=member.assignment,
        )
        if group.complete_sync(member, response):
            group.arm_session(member, now_ms)


__all__ = [
    "complete_join_phase",
    "maybe_complete_join_phase",
    "maybe_prepare_rebalance_or_complete_join",
    "prepare_rebalance",
    "propagate_assignment",
    "rebalance_after_removal",
]
