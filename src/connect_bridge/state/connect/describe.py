"""What a connect group looks like to an operator (ConnectGroupDescribe, ``connect-bridge describe``).

Pure (``state/`` rules): the time comes in as an argument and is only echoed back, so that a client
reads the absolute deadlines against the bridge's own clock rather than its own. What each member
waits for is derived here, from the same state the protocol steps decide on, so the answer cannot
drift from what the coordinator will actually do next.
"""

from __future__ import annotations

from enum import StrEnum

from connect_bridge.state.api import DescribedGroup, DescribedMember
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.connect import legacy_steps
from connect_bridge.state.connect.state import ConnectGroup
from connect_bridge.state.model import EMPTY, GroupState, GroupType, Member, MemberState
from connect_bridge.state.timers import TimerKey


class Waiting(StrEnum):
    """What one member waits for (the wire's ``WaitingFor``; stable names, documented in
    docs/serve.md "describe")."""

    STABLE = "stable"
    """Owns its target and the group is Stable: nothing to wait for."""
    INSTALLED = "installed"
    """Its target assignment is installed (it is at the target epoch, owns it all); other members
    are still moving."""
    REVOKING = "revoking"
    """Was told to stop work (``Revoking``) and has not acknowledged it; bounded by its revocation timer."""
    RELEASED = "released-work"
    """At the target epoch, waiting for other members to release work targeted to it."""
    HEARTBEAT = "heartbeat"
    """Behind the target epoch: its next ConnectGroupHeartbeat brings its new assignment (session timer)."""
    REJOIN = "rejoin"
    """A legacy member its next Heartbeat tells to rejoin (REBALANCE_IN_PROGRESS; session timer)."""
    JOIN = "join"
    """A legacy member told to rejoin: the bridge waits for its JoinGroup (join timer)."""
    SYNC = "sync"
    """A legacy member answered its JoinGroup: the bridge awaits its SyncGroup (sync timer)."""


_CLASSIC_WAITS = {
    ClassicGroupState.PREPARING_REBALANCE: (Waiting.JOIN, TimerKey.legacy_join),
    ClassicGroupState.COMPLETING_REBALANCE: (Waiting.SYNC, TimerKey.legacy_sync),
}
"""A legacy member's classic states that are waits of their own, and the timer bounding each."""


def _waiting(group: ConnectGroup, member: Member) -> tuple[Waiting, int]:
    """What ``member`` waits for, and the deadline (-1: none) of the timer that removes it if the
    wait does not end. A legacy member's JoinGroup/SyncGroup round comes first: nothing else moves
    for it before that round is over."""
    mid, current = member.member_id, member.current
    if member.metadata.is_legacy:
        classic = group.legacy_members.states.get(mid, ClassicGroupState.STABLE)
        if classic in _CLASSIC_WAITS:
            waiting, timer = _CLASSIC_WAITS[classic]
            return waiting, _deadline(group, timer(group.group_id, mid))
    if current.state is MemberState.UNREVOKED:
        return Waiting.REVOKING, _deadline(group, TimerKey.revoke(group.group_id, mid))
    if current.state is MemberState.UNRELEASED:
        return Waiting.RELEASED, -1
    session = _deadline(group, TimerKey.session(group.group_id, mid))
    if member.metadata.is_legacy and legacy_steps.needs_rejoin(group, member):
        return Waiting.REJOIN, session
    if current.member_epoch < group.assignment_epoch:
        return Waiting.HEARTBEAT, session
    return (Waiting.STABLE if group.state is GroupState.STABLE else Waiting.INSTALLED), -1


def _deadline(group: ConnectGroup, key: TimerKey) -> int:
    deadline = group.timers.deadline(key)
    return -1 if deadline is None else deadline


def _member(group: ConnectGroup, member: Member) -> DescribedMember:
    meta, current = member.metadata, member.current
    waiting, deadline = _waiting(group, member)
    classic = None
    if meta.is_legacy:
        classic = group.legacy_members.states.get(member.member_id, ClassicGroupState.STABLE).value
    return DescribedMember(
        member.member_id,
        meta.instance_id,
        meta.protocol,
        current.member_epoch,
        current.state.value,
        meta.url,
        meta.config_offset,
        current.assigned,
        current.revoking,
        group.target.get(member.member_id, EMPTY),
        client_id=meta.client_id,
        client_host=meta.client_host,
        classic_state=classic,
        waiting_for=waiting.value,
        wait_deadline_ms=deadline,
    )


def describe_group(group: ConnectGroup, now_ms: int = -1) -> DescribedGroup:
    """``group`` as ConnectGroupDescribe shows it; ``now_ms`` (the caller's clock, -1 unknown) is
    echoed so that its deadlines can be read as "in N seconds"."""
    return DescribedGroup(
        group_id=group.group_id,
        group_type=GroupType.CONNECT.value,
        state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor=group.assignor_name(),
        leader_id=group.metadata.leader_id,
        leader_url=group.leader_url(),
        config_offset=group.assignment_config_offset(),
        members=tuple(_member(group, m) for _, m in sorted(group.members.items())),
        now_ms=now_ms,
        held=tuple(sorted(group.metadata.held, key=lambda h: (h.deadline_ms, h.url))),
    )
