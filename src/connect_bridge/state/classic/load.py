"""Loading a classic group: after replay (Kafka's ``onLoaded``), after a conversion from ``connect``.

Both start from a group that applied its ``CLASSIC_GROUP`` record (Stable or Empty, the record's
members and nothing soft): these steps re-arm what a record cannot carry (sessions, the extra
rebalance that is due) and start the rebalance the group needs.
"""

from __future__ import annotations

from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.classic.eager_hold import resume_after_reload
from connect_bridge.state.classic.rebalance import prepare_rebalance
from connect_bridge.state.classic.records import ClassicGroupSnapshot
from connect_bridge.state.classic.state import ClassicGroup
from connect_bridge.state.holds import first_session_after_load_ms


def rebuild_after_load(group: ClassicGroup, now_ms: int, *, reloaded: bool = False) -> None:
    """Kafka's ``onLoaded``: re-arm every member's session; rebalance a group over capacity.

    ``reloaded``: the group comes from the log after a restart or a takeover, so a member may
    still wait on a JoinGroup sent to the previous coordinator (``first_session_after_load_ms``):
    its first session lasts that long, and so does any hold on its work if something else (the
    end of a join phase another member started) removes it first; a conversion or an adoption
    loads members that are talking to this bridge."""
    for member in group.members.values():
        first = None
        if reloaded:
            request_timeout_ms = group.config.worker_request_timeout_ms
            first = first_session_after_load_ms(
                member.session_timeout_ms, member.rebalance_timeout_ms, request_timeout_ms
            )
            member.waits_elsewhere_until_ms = now_ms + first
        group.arm_session(member, now_ms, first)
    if group.extra_rebalance_at_ms >= 0 and group.state is ClassicGroupState.STABLE:
        group.schedule(group.switch_key, max(now_ms, group.extra_rebalance_at_ms))
    if len(group.members) > group.config.max_group_size:
        prepare_rebalance(group, now_ms)
    elif reloaded:
        resume_after_reload(group, now_ms)


def load_converted(group: ClassicGroup, snapshot: ClassicGroupSnapshot, now_ms: int) -> None:
    """Install a group converted from ``connect`` (downgrade): commit it, re-arm sessions, rebalance.

    The members keep running what they run; the rebalance lets a legacy leader take over assignment
    with every worker's allocation in front of it. The group changes only by applying the record it
    commits, as replay would load it.
    """
    group.commit(snapshot)
    rebuild_after_load(group, now_ms)
    group.mark_downgraded()
    if group.members:
        prepare_rebalance(group, now_ms)


__all__ = ["load_converted", "rebuild_after_load"]
