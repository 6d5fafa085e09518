"""Empty groups are deleted, as Kafka's coordinator deletes them.

Kafka's group coordinator runs a cleanup every ``offsets.retention.check.interval.ms`` (10 minutes
by default): a group that is empty (a classic group in state Empty, a group of the new protocol
without members) and holds no committed offsets is tombstoned and forgotten, and a later JoinGroup
or heartbeat creates it afresh. A Connect group commits no offsets (its workers keep theirs in
their own topics), so every emptied Connect group goes at the next cleanup. Without this the
bridge kept every group it had ever seen, in memory and in its state topic, and a client allowed
to join groups could fill ``max_groups`` with empty ones, after which no new group could form.

The bridge deletes a group ``empty_group_expiry_ms`` after it became deletable (never sooner than
Kafka's cleanup would), through an ``empty`` timer the coordinator arms and cancels after every
step on the group:

* a classic group: state Empty (no members, none pending);
* a connect group: no members, nothing in its target assignment, nothing owned or held (no member
  departed within the scheduled rebalance delay, no hold or assignment computation pending);
* either: not between the two coordinators (a group relaying, releasing or released belongs to the
  adoption's own lifecycle, docs/adoption.md); an adopted group is the bridge's like any other.

When the timer fires the coordinator checks again and writes the group's tombstones (those of a
conversion: ``classic.leave.delete``, ``connect.membership.tombstone_all``). Nothing here does I/O
or reads a clock: the time comes in with each call.
"""

from __future__ import annotations

from connect_bridge.state.adoption.records import OwnershipState
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.classic.leave import delete as delete_classic
from connect_bridge.state.classic.state import ClassicGroup
from connect_bridge.state.connect.membership import tombstone_all
from connect_bridge.state.connect.state import ConnectGroup
from connect_bridge.state.timers import TimerKey, Timers

Group = ClassicGroup | ConnectGroup

_OWN_LIFECYCLE = frozenset({OwnershipState.RELAYING, OwnershipState.RELEASING, OwnershipState.RELEASED})
"""Ownership phases in which the adoption, not the expiry, decides what becomes of the group."""


def deletable(group: Group, phase: OwnershipState | None, timers: Timers) -> bool:
    """Whether ``group`` is empty the way Kafka's cleanup deletes a group, with nothing the bridge
    still holds for anybody."""
    if phase in _OWN_LIFECYCLE:
        return False
    if isinstance(group, ClassicGroup):
        return group.state is ClassicGroupState.EMPTY and not group.members and not group.pending_members
    gid = group.group_id
    return not (
        group.members
        or any(group.target.values())
        or group.owners
        or group.departed
        or group.downgrade_pending
        or TimerKey.held(gid) in timers
        or TimerKey.compute(gid) in timers
    )


def arm_or_cancel(
    group: Group, phase: OwnershipState | None, timers: Timers, expiry_ms: int | None, now_ms: int
) -> bool:
    """After a step on ``group``: its ``empty`` timer runs while it is deletable. Armed once, when
    it becomes so (requests that leave it empty do not push the deletion back, as they do not at
    Kafka's periodic cleanup); cancelled as soon as it is not. True when it is armed after."""
    key = TimerKey.empty(group.group_id)
    if expiry_ms is not None and deletable(group, phase, timers):
        if key not in timers:
            timers.schedule(key, now_ms + expiry_ms)
        return True
    timers.cancel(key)
    return False


def delete(group: Group, now_ms: int) -> None:
    """Write ``group``'s tombstones (applied as they are written: the group reads empty after)."""
    if isinstance(group, ClassicGroup):
        delete_classic(group, now_ms)
    else:
        tombstone_all(group)


__all__ = ["arm_or_cancel", "deletable", "delete"]
