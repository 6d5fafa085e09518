"""The membership steps of a ``connect`` group, shared by both protocols: functions of the group.

ConnectGroupHeartbeat (``connect.heartbeat``) and the classic API of legacy members
(``legacy_members``) go through the same steps: a member is added, has its metadata updated, is
reconciled toward the target, is taken over by its static successor or removed (its work held
while its worker may still run it); a bumped group epoch brings a new target; timers expire
members and holds; a load or a conversion re-arms the timers. Each step takes the
:class:`~connect_bridge.state.connect.state.ConnectGroup` and changes it through its record writers
(``ConnectGroup.write`` and the writers built on it) and timer primitives, never its fields
directly.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state import assignors
from connect_bridge.state.connect.reconciliation import Reconciliation, next_assignment
from connect_bridge.state.connect.records import (
    current_assignment_record,
    group_metadata_record,
    group_metadata_tombstone,
    target_member_record,
    target_member_tombstone,
    target_metadata_tombstone,
)
from connect_bridge.state.connect.target_assignment import assignment_spec, resolve_held
from connect_bridge.state.connect.validation import epoch_relevant
from connect_bridge.state.errors import RequestError
from connect_bridge.state.holds import (
    first_session_after_load_ms,
    hold_departed,
    revocation_timeout_hold_ms,
    timer_removal_hold_ms,
)
from connect_bridge.state.model import (
    EMPTY,
    NO_METADATA,
    CurrentAssignment,
    GroupMetadata,
    GroupState,
    Items,
    Member,
    MemberMetadata,
    MemberState,
    TargetMetadata,
)
from connect_bridge.state.timers import TimerKey, TimerKind

if TYPE_CHECKING:  # the state module imports ``legacy_members``, which calls these steps
    from connect_bridge.state.connect.state import ConnectGroup

_MEMBER_ID_NAMESPACE = uuid.UUID("8a6f2b8e-5c1d-4b7a-9f3e-2d4c6b8a0e1f")


# ------------------------------------------------------------------ conversion
def install_converted(
    group: ConnectGroup,
    metadata: GroupMetadata,
    target_metadata: TargetMetadata,
    members: list[tuple[str, MemberMetadata, CurrentAssignment]],
    now_ms: int,
    waits_elsewhere_until_ms: dict[str, int] | None = None,
) -> None:
    """Become the image of a converted classic group: target = current, nothing moves.

    ``waits_elsewhere_until_ms``: the classic members that may still wait on a JoinGroup at the
    previous coordinator (a conversion soon after a load) keep that deadline, so a timer that
    removes them holds their work until they can have noticed (``remove_by_timer``)."""
    for mid, until_ms in (waits_elsewhere_until_ms or {}).items():
        group.note_waits_elsewhere(mid, until_ms)
    for mid, member_metadata, current in members:
        group.set_member_metadata(mid, member_metadata)
        member = group.members[mid]
        group.set_current(member, current)
        group.arm_session(member, now_ms)
        if current.state is MemberState.UNREVOKED:
            group.arm_revocation(member, now_ms)
    group.install_target(target_metadata.assignment_epoch, {mid: c.assigned for mid, _, c in members})
    group.write(group_metadata_record(group.group_id, metadata))
    group.legacy_members.note_elected(metadata.leader_id)  # elected by the classic group


def tombstone_all(group: ConnectGroup) -> None:
    """Delete every record of this group (it becomes a classic group); timers go with it."""
    for mid in list(group.members):
        group.delete_member(mid)
    for mid in list(group.target):
        group.write(target_member_tombstone(group.group_id, mid))
    group.timers.cancel(TimerKey.held(group.group_id))
    group.timers.cancel(TimerKey.compute(group.group_id))
    # Applied like every other record: a conversion reads what it needs of the group (epochs,
    # leader, member seq) before it retires it, so nothing reads the group after this.
    group.write(target_metadata_tombstone(group.group_id))
    group.write(group_metadata_tombstone(group.group_id))


def rebuild_after_load(group: ConnectGroup, now_ms: int) -> None:
    """Re-arm timers once all records are replayed (a restart or a takeover): a legacy member's
    first session lasts as long as a JoinGroup it may have parked at the previous coordinator
    (``holds.first_session_after_load_ms``). The owner index came with the records."""
    for mid, member in group.members.items():
        meta = member.metadata
        first = None
        if meta.is_legacy:
            first = first_session_after_load_ms(
                meta.session_timeout_ms, meta.rebalance_timeout_ms, group.config.worker_request_timeout_ms
            )
            group.note_waits_elsewhere(mid, now_ms + first)
        group.arm_session(member, now_ms, first)
        if member.current.state is MemberState.UNREVOKED:
            group.arm_revocation(member, now_ms)
    group.arm_held_timer()
    group.legacy_members.note_elected(group.metadata.leader_id)  # a loaded leader kept its leader state


# ------------------------------------------------------------------ timers
def on_timer(group: ConnectGroup, key: TimerKey, now_ms: int) -> None:
    _TIMER_HANDLERS[key.kind](group, key, now_ms)
    maybe_update_target(group, now_ms)


def _on_session_timeout(group: ConnectGroup, key: TimerKey, now_ms: int) -> None:
    member = group.members.get(key.member_id)
    if member is not None:
        remove_by_timer(group, member, now_ms)


def _on_revocation_timeout(group: ConnectGroup, key: TimerKey, now_ms: int) -> None:
    member = group.members.get(key.member_id)
    if member is not None and member.current.state is MemberState.UNREVOKED:
        grace = revocation_timeout_hold_ms(member.metadata.session_timeout_ms)
        remove_by_timer(group, member, now_ms, grace_ms=grace)


def _on_compute_timeout(group: ConnectGroup, _key: TimerKey, _now_ms: int) -> None:
    group.client_side.on_timeout(group)


def _on_hold_expired(group: ConnectGroup, _key: TimerKey, _now_ms: int) -> None:
    group.bump_group_epoch()


def _on_legacy_timeout(group: ConnectGroup, key: TimerKey, now_ms: int) -> None:
    """A legacy member's join or sync timer: the member never came back in the state it bounds."""
    member = group.members.get(key.member_id)
    if member is not None and group.legacy_members.removable_by(member.member_id, key.kind):
        remove_by_timer(group, member, now_ms)


# ------------------------------------------------------------------ membership
def new_member_id(group: ConnectGroup) -> str:
    seq = group.metadata.member_seq + 1
    group.set_metadata(member_seq=seq)
    return str(uuid.uuid5(_MEMBER_ID_NAMESPACE, f"{group.config.member_id_salt}{group.group_id}/{seq}"))


def add_member(group: ConnectGroup, member_id: str, metadata: MemberMetadata, now_ms: int) -> Member:
    group.set_member_metadata(member_id, metadata)
    member = group.members[member_id]
    group.write(current_assignment_record(group.group_id, member_id, member.current))
    if not group.metadata.leader_id or group.metadata.leader_id not in group.members:
        group.set_metadata(leader_id=member_id)
    group.bump_group_epoch()
    group.arm_session(member, now_ms)
    return member


def heard_from(group: ConnectGroup, member_id: str, now_ms: int) -> None:
    """A request of ``member_id`` reached this coordinator: it no longer waits on a JoinGroup
    parked at a previous one (a Java client talks to one coordinator at a time); and another
    member of the same worker url that has sent nothing since the load is an earlier
    incarnation of that worker (:func:`_end_first_sessions_of_earlier_incarnations`)."""
    group.stop_waiting_elsewhere(member_id)
    _end_first_sessions_of_earlier_incarnations(group, member_id, now_ms)


def _end_first_sessions_of_earlier_incarnations(group: ConnectGroup, member_id: str, now_ms: int) -> None:
    """A member loaded from the log and not heard from since has a first session as long as a
    JoinGroup it may have parked at the previous coordinator (``first_session_after_load_ms``,
    40 s at Connect's defaults). Once a member with the same worker url talks to this
    coordinator, that worker runs as another process (a url belongs to one live process): the
    silent member is an earlier incarnation, gone or stopped (its LeaveGroup not yet in the log
    when the bridge restarted), parked nowhere. It is put on the session Kafka's ``onLoaded``
    arms, a plain session from the load (at once if that has passed), so new work dealt to it
    meanwhile goes to a live member within the rebalance timeout, as on Kafka (adversarial drill
    97000291076073: a task added 6.7 s after a restart waited 36 s on such a member, against a
    30 s bound). Its hold is unchanged: a timer removing it still holds what it owned until a
    JoinGroup it might have parked would have timed out (``remove_by_timer``), and held work goes
    back to the member of its url (``holds.hold_departed``)."""
    if not group.waits_elsewhere_until:
        return  # nobody loaded and silent (every heartbeat of a stable group comes here)
    member = group.members.get(member_id)
    url = member.metadata.url if member is not None else ""
    if not url:
        return
    for mid, until in list(group.waits_elsewhere_until.items()):
        other = group.members.get(mid)
        if other is None or mid == member_id or other.metadata.url != url:
            continue
        meta = other.metadata
        first = first_session_after_load_ms(
            meta.session_timeout_ms, meta.rebalance_timeout_ms, group.config.worker_request_timeout_ms
        )
        plain_end = max(now_ms, until - first + meta.session_timeout_ms)
        armed = group.timers.deadline(TimerKey.session(group.group_id, mid))
        if armed is None or plain_end < armed:
            group.arm_session(other, plain_end, 0)


def remove_by_timer(group: ConnectGroup, member: Member, now_ms: int, grace_ms: int | None = None) -> None:
    """A session, revocation, join or sync timer removes ``member``: it may still be running,
    for the zombie grace (``grace_ms``: the revocation timer's longer one), or longer if it may
    still wait on a JoinGroup at the coordinator before a load (``holds.timer_removal_hold_ms``)."""
    waits_until = group.waits_elsewhere_until.get(member.member_id)
    hold_ms = timer_removal_hold_ms(member.metadata.session_timeout_ms, now_ms, waits_until, grace_ms)
    remove_member(group, member, now_ms, min_hold_ms=hold_ms)


def remove_member(group: ConnectGroup, member: Member, now_ms: int, min_hold_ms: int = 0) -> None:
    """Drop a member; everything it may still run is held for the scheduled delay.

    Removal proves nothing about the process: a Java worker whose herder stalled keeps running
    everything it owns after its generation is reset, and so does a new-protocol worker until it
    sees its fencing. So its *owned* set (assigned and pending revocation) stays out of every
    target until it comes back (the work returns to it) or the hold expires. Targeted work it
    was never granted is not held: nobody runs it, and holding it for a worker that may already
    be dead (Connect's lost-assignment rule is about what was assigned) let one item wait out
    the delay once per crashed worker it was dealt to. Not only what is configured now: an item
    removed from the config while the member still runs it can be configured again before the
    member stops (adversarial drill 20094737).

    ``min_hold_ms`` holds the work even without a delay: a member removed by a timer may be a
    live worker that was cut off or stalled; it notices after its own session timeout and then
    stops what it ran (``holds.zombie_grace_ms``). A wrong epoch removes nobody (``connect.heartbeat``).
    """
    mid = member.member_id
    owned = group.legacy_members.may_run(member) if member.metadata.is_legacy else member.current.owned
    owned |= group.legacy_members.returning.get(mid, EMPTY)  # see LegacyMembers.returning
    group.set_current(member, CurrentAssignment())
    group.delete_member(mid)
    held = group.metadata.held
    delay = group.config.scheduled_rebalance_max_delay_ms if group.assignor_name() != assignors.EAGER else 0
    hold = max(delay, min_hold_ms)
    if owned and hold > 0:
        held = (*held, hold_departed(owned, member.metadata, now_ms + hold))
    leader = group.metadata.leader_id
    if leader == mid:
        leader = min(group.members) if group.members else ""
    group.client_side.forget(mid)
    group.acknowledged(mid)
    group.set_metadata(group_epoch=group.metadata.group_epoch + 1, leader_id=leader, held=held)
    group.arm_held_timer()
    _check_downgrade(group, member.metadata)


def take_over_static(
    group: ConnectGroup, old: Member, new_id: str, metadata: MemberMetadata, now_ms: int
) -> Member:
    """A static member coming back: the new member id takes the old member's epoch and work."""
    if new_id != old.member_id and new_id in group.members:
        # Overwriting a live member would leave its owner entries behind (work running nowhere).
        raise RequestError(ErrorCode.FENCED_INSTANCE_ID, f"member id {new_id} is already in use")
    current = replace(old.current, left_temporarily=False)
    target = group.target.get(old.member_id)
    data = group.assignor_metadata.get(old.member_id, NO_METADATA)
    returning = group.legacy_members.returning.get(old.member_id)
    group.delete_member(old.member_id)
    if returning and metadata.is_legacy:
        group.legacy_members.note_returned(new_id, returning)
    group.set_member_metadata(new_id, metadata)
    member = group.members[new_id]
    group.write(current_assignment_record(group.group_id, new_id, current))
    if target is not None:
        group.write(target_member_tombstone(group.group_id, old.member_id))
        group.write(target_member_record(group.group_id, new_id, target, data))
    if group.metadata.leader_id == old.member_id:
        group.set_metadata(leader_id=new_id)
    group.client_side.forget(old.member_id)
    if epoch_relevant(metadata) != epoch_relevant(old.metadata):
        group.bump_group_epoch()
    group.arm_session(member, now_ms)
    if metadata.is_legacy:
        _check_downgrade(group, old.metadata)
    return member


def update_member_metadata(group: ConnectGroup, member: Member, metadata: MemberMetadata) -> None:
    if metadata != member.metadata:
        bump = epoch_relevant(metadata) != epoch_relevant(member.metadata)
        group.set_member_metadata(member.member_id, metadata)
        if bump:
            group.bump_group_epoch()


def release_unowned(group: ConnectGroup, member: Member, owned: Items) -> None:
    """A legacy worker's JoinGroup allocation is what it runs: anything else it has given up."""
    c = member.current
    assigned, revoking = c.assigned & owned, c.revoking & owned
    if assigned != c.assigned or revoking != c.revoking:
        group.set_current(member, replace(c, assigned=assigned, revoking=revoking))


# ------------------------------------------------------------------ downgrade
def ready_to_downgrade(group: ConnectGroup) -> bool:
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
        not group.metadata.held
        and not group.legacy_members.any_completing()
        and group.state is GroupState.STABLE
    )


def expect_downgrade(group: ConnectGroup) -> None:
    """No new-protocol member is left to wait for: convert back once :func:`downgrade_due`."""
    group.mark_downgrade_pending()


def downgrade_due(group: ConnectGroup, allowed: bool) -> bool:
    """Whether the coordinator converts the group back to classic now. A pending downgrade is
    dropped once a new-protocol member is back, the group emptied or ``allowed`` (the
    migration policy) forbids it; otherwise it waits for :func:`ready_to_downgrade`."""
    if not group.downgrade_pending:
        return False
    legacy_only = bool(group.members) and all(m.metadata.is_legacy for m in group.members.values())
    if not legacy_only or not allowed:
        group.drop_downgrade_pending()
        return False
    if not ready_to_downgrade(group):
        return False
    group.drop_downgrade_pending()
    return True


def _check_downgrade(group: ConnectGroup, departed: MemberMetadata) -> None:
    if departed.is_legacy or not group.members:
        return
    if all(m.metadata.is_legacy for m in group.members.values()):
        expect_downgrade(group)


# ------------------------------------------------------------------ target assignment
def maybe_update_target(group: ConnectGroup, now_ms: int) -> None:
    if group.group_epoch <= group.assignment_epoch:
        return
    if not group.members:
        group.install_target(group.group_epoch, {})
        return
    server = assignors.WORK_ASSIGNORS.get(group.assignor_name())
    if server is not None:
        group.client_side.use_server_side()
        spec = target_spec(group, now_ms)
        group.install_work(group.group_epoch, spec, server(spec))
    else:
        group.client_side.reevaluate(group)


def target_spec(group: ConnectGroup, now_ms: int) -> assignors.AssignmentSpec:
    """Resolve held work (returned to its worker, expired, or still waiting) and build the input."""
    waiting, returned = resolve_held(group.metadata.held, group.held_owner, now_ms)
    if waiting != group.metadata.held:
        group.set_metadata(held=waiting)
        group.arm_held_timer()
    for mid, items in returned.items():
        if group.members[mid].metadata.is_legacy:
            group.legacy_members.note_returned(mid, items)
    return assignment_spec(
        group.index.ids, group.view.items(), waiting, group.working, returned, group.members.keys()
    )


def reconcile(group: ConnectGroup, member: Member, owned: Items | None, now_ms: int) -> None:
    """One step of the member toward its target (``reconciliation``), written as its record."""
    step = Reconciliation(
        member.member_id,
        member.current,
        group.assignment_epoch,
        group.target.get(member.member_id, EMPTY),
        group.owner_lookup(),
        owned,
    )
    nxt = next_assignment(step)
    if nxt is not None:
        group.set_current(member, nxt)
        if nxt.state is MemberState.UNREVOKED:
            group.arm_revocation(member, now_ms)


_TIMER_HANDLERS: dict[TimerKind, Callable[[ConnectGroup, TimerKey, int], None]] = {
    TimerKind.SESSION: _on_session_timeout,
    TimerKind.REVOKE: _on_revocation_timeout,
    TimerKind.COMPUTE: _on_compute_timeout,
    TimerKind.HELD: _on_hold_expired,
    TimerKind.LEGACY_JOIN: _on_legacy_timeout,
    TimerKind.LEGACY_SYNC: _on_legacy_timeout,
}
"""What each connect-group timer does when it fires (then the target is brought up to date)."""
