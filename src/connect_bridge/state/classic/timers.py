"""The classic group's timers: heartbeat expiry, end of the join phase, sync deadline, the switch round.

Kafka runs these as timer tasks of the ``GroupMetadataManager`` (``classicGroupHeartbeatKey``,
``classicGroupJoinKey``, ``classicGroupSyncKey``); here each kind has one handler in a table, and
:func:`removed_by` answers, without changing anything, which members a due timer would remove.
"""

from __future__ import annotations

from collections.abc import Callable

from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.classic.member import ClassicMember
from connect_bridge.state.classic.rebalance import (
    complete_join_phase,
    prepare_rebalance,
    rebalance_after_removal,
)
from connect_bridge.state.classic.state import IN_GENERATION, ClassicGroup
from connect_bridge.state.timers import TimerKey, TimerKind

_S = ClassicGroupState


def on_timer(group: ClassicGroup, key: TimerKey, now_ms: int) -> None:
    """A timer of this group fired (the coordinator routes keys by their group id).

    ``Timers.expired`` hands out every due key before any handler runs, so a handler earlier in
    the same batch may have cancelled or re-armed this key: such a delivery is stale and ignored
    (Kafka's timer cancels reliably; this restores that guarantee).
    """
    if key in group.timers or not group.fired(key):
        return
    if group.state is _S.DEAD:
        return
    _ON_TIMER[key.kind](group, key, now_ms)


def _session_expired(group: ClassicGroup, key: TimerKey, now_ms: int) -> None:
    member_id = key.member_id
    if member_id in group.pending_members:
        group.remove(member_id)
        if group.state is _S.PREPARING_REBALANCE and group.has_all_members_joined():
            complete_join_phase(group, now_ms)
        return
    member = group.members.get(member_id)
    if member is not None and not member.has_satisfied_heartbeat():
        group.remove(member_id)
        rebalance_after_removal(group, now_ms)


def _join_phase_ended(group: ClassicGroup, key: TimerKey, now_ms: int) -> None:
    if group.initial_delay is not None:
        _try_complete_initial_rebalance(group, now_ms)
    else:
        complete_join_phase(group, now_ms)


def _sync_expired(group: ClassicGroup, key: TimerKey, now_ms: int) -> None:
    """Kafka 3.x+: members that got the JoinGroup answer but never synced are removed."""
    if group.sync_generation != group.generation_id:
        return
    if group.state not in IN_GENERATION or not group.pending_sync:
        return
    for member_id in list(group.pending_sync):
        group.remove_member(member_id)
    prepare_rebalance(group, now_ms)


def _switch_due(group: ClassicGroup, key: TimerKey, now_ms: int) -> None:
    """The extra rebalance after a switch from eager to cooperative (``_install_assignment``)."""
    if group.state is _S.STABLE:
        prepare_rebalance(group, now_ms)


def _try_complete_initial_rebalance(group: ClassicGroup, now_ms: int) -> None:
    """Kafka's InitialDelayedJoin: each new member extends the delay, up to the rebalance timeout."""
    assert group.initial_delay is not None
    delay, remaining = group.initial_delay
    if group.new_member_added and remaining != 0:
        new_delay = min(group.config.classic_initial_rebalance_delay_ms, remaining)
        group.extend_initial_delay(now_ms, new_delay, max(remaining - delay, 0))
    else:
        complete_join_phase(group, now_ms)


_ON_TIMER: dict[TimerKind, Callable[[ClassicGroup, TimerKey, int], None]] = {
    TimerKind.CLASSIC_SESSION: _session_expired,
    TimerKind.CLASSIC_JOIN: _join_phase_ended,
    TimerKind.CLASSIC_SYNC: _sync_expired,
    TimerKind.CLASSIC_SWITCH: _switch_due,
}


def removed_by(group: ClassicGroup, key: TimerKey) -> list[ClassicMember]:
    """The members this due timer ``key`` would remove (reads, changes nothing): a session's
    member without a parked request standing in for heartbeats; at the end of a join phase the
    dynamic members that did not rejoin; at the sync deadline those that never synced."""
    if key in group.timers or key not in group.armed or group.state is _S.DEAD:
        return []
    removes = _REMOVED_BY.get(key.kind)
    return removes(group, key) if removes is not None else []


def _removed_by_session(group: ClassicGroup, key: TimerKey) -> list[ClassicMember]:
    member = group.members.get(key.member_id)
    return [member] if member is not None and not member.has_satisfied_heartbeat() else []


def _removed_by_join(group: ClassicGroup, key: TimerKey) -> list[ClassicMember]:
    if group.initial_delay is not None or group.state is not _S.PREPARING_REBALANCE:
        return []
    return [m for m in group.members.values() if not m.awaiting_join and not m.is_static]


def _removed_by_sync(group: ClassicGroup, key: TimerKey) -> list[ClassicMember]:
    if group.sync_generation != group.generation_id or group.state not in IN_GENERATION:
        return []
    return [group.members[mid] for mid in group.pending_sync if mid in group.members]


_REMOVED_BY: dict[TimerKind, Callable[[ClassicGroup, TimerKey], list[ClassicMember]]] = {
    TimerKind.CLASSIC_SESSION: _removed_by_session,
    TimerKind.CLASSIC_JOIN: _removed_by_join,
    TimerKind.CLASSIC_SYNC: _removed_by_sync,
}


__all__ = ["on_timer", "removed_by"]
