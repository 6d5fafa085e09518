"""A ``classic`` group: the JoinGroup/SyncGroup barrier protocol, run as an Apache Kafka broker runs it.

This is Kafka's ``ClassicGroup`` plus the classic path of ``GroupMetadataManager`` (join, sync,
heartbeat, leave, the join/sync/heartbeat timers, the initial rebalance delay), for groups whose
members are all legacy Connect workers. Metadata and assignments are opaque bytes: the group elects
a protocol by vote and relays bytes between the leader and the followers; it never decodes them.

Where each part lives, the way Kafka splits them:

==================== ================================================================
``classic_state``    the group's state (Kafka's ``ClassicGroup``): members, state machine,
                     timers it armed, outbox, records and replay, which state is soft
``classic_member``   a member (``ClassicGroupMember``), Java's hash order for the vote
``classic_records``  the ``CLASSIC_GROUP`` snapshot record and its helper
``classic_join``     JoinGroup
``classic_sync``     SyncGroup, Heartbeat
``classic_leave``    LeaveGroup, deletion
``classic_rebalance`` prepare a rebalance, complete the join phase, propagate assignments
``classic_timers``   session, join, sync and switch timers
==================== ================================================================

Kafka completes JoinGroup/SyncGroup futures later; here a handler returns either the response or
``None`` (parked). A parked request's response comes out of ``drain_responses()`` tagged with the
request's ``token``. A request whose own response is produced during the same call (the last member
completing the join barrier, the leader's SyncGroup) gets it as the return value instead.

Pure and deterministic (docs/architecture.md, "Layers"): time is ``now_ms``, timers are entries in the shared
:class:`Timers`, member ids come from a persisted counter, and every persisted change is a
``CLASSIC_GROUP`` record (a whole-group snapshot, like Kafka's ``GroupMetadata`` record).
Deliberate differences from Kafka are listed in ``docs/classic-group.md``.
"""

from __future__ import annotations

from connect_bridge.state import classic_join, classic_leave, classic_sync, classic_timers
from connect_bridge.state.classic_api import (
    EAGER_PROTOCOL,
    PROTOCOL_TYPE_CONNECT,
    ClassicGroupState,
)
from connect_bridge.state.classic_eager_hold import resume_after_reload
from connect_bridge.state.classic_member import (
    ClassicMember,
    IllegalStateError,
    java_hashmap_order,
    java_string_hash,
)
from connect_bridge.state.classic_rebalance import prepare_rebalance
from connect_bridge.state.classic_records import (
    ClassicGroupSnapshot,
    ClassicMemberSnapshot,
    classic_group_record,
)
from connect_bridge.state.classic_state import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    ClassicDescribedGroup,
    ClassicDescribedMember,
    ClassicGroupBase,
)
from connect_bridge.state.holds import first_session_after_load_ms


class ClassicGroup(ClassicGroupBase):
    """One classic group. Handlers take typed requests and ``now_ms``; effects are responses,
    records (``drain_records``), parked responses (``drain_responses``) and entries in ``timers``.

    The handlers are the step functions themselves, bound as methods (no extra call per request).
    """

    join = classic_join.join
    sync = classic_sync.sync
    heartbeat = classic_sync.heartbeat
    leave = classic_leave.leave
    delete = classic_leave.delete
    on_timer = classic_timers.on_timer
    removed_by = classic_timers.removed_by

    def rebuild_after_load(self, now_ms: int, *, reloaded: bool = False) -> None:
        """Kafka's ``onLoaded``: re-arm every member's session; rebalance a group over capacity.

        ``reloaded``: the group comes from the log after a restart or a takeover, so a member may
        still wait on a JoinGroup sent to the previous coordinator (``first_session_after_load_ms``):
        its first session lasts that long, and so does any hold on its work if something else (the
        end of a join phase another member started) removes it first; a conversion or an adoption
        loads members that are talking to this bridge."""
        for member in self.members.values():
            first = None
            if reloaded:
                request_timeout_ms = self.config.worker_request_timeout_ms
                first = first_session_after_load_ms(
                    member.session_timeout_ms, member.rebalance_timeout_ms, request_timeout_ms
                )
                member.waits_elsewhere_until_ms = now_ms + first
            self.arm_session(member, now_ms, first)
        if self.extra_rebalance_at_ms >= 0 and self.state is ClassicGroupState.STABLE:
            self.schedule(self.switch_key, max(now_ms, self.extra_rebalance_at_ms))
        if len(self.members) > self.config.max_group_size:
            prepare_rebalance(self, now_ms)
        elif reloaded:
            resume_after_reload(self, now_ms)


def load_converted(group: ClassicGroup, snapshot: ClassicGroupSnapshot, now_ms: int) -> None:
    """Install a group converted from ``connect`` (downgrade): persist it, re-arm sessions, rebalance.

    The members keep running what they run; the rebalance lets a legacy leader take over assignment
    with every worker's allocation in front of it. The group changes only by applying the record it
    writes, as replay would load it.
    """
    group.commit(snapshot)
    group.rebuild_after_load(now_ms)
    group.downgraded_generation = snapshot.generation
    if group.members:
        prepare_rebalance(group, now_ms)


__all__ = [
    "EAGER_PROTOCOL",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "PROTOCOL_TYPE_CONNECT",
    "ClassicDescribedGroup",
    "ClassicDescribedMember",
    "ClassicGroup",
    "ClassicGroupSnapshot",
    "ClassicGroupState",
    "ClassicMember",
    "ClassicMemberSnapshot",
    "IllegalStateError",
    "classic_group_record",
    "java_hashmap_order",
    "java_string_hash",
    "load_converted",
]
