"""Legacy (classic-protocol) workers inside a ``connect`` group (docs/legacy-workers.md; seed 003).

Each legacy worker is an ordinary member of the epoch engine whose generation *is* its member epoch.
JoinGroup is answered at once (no barrier, empty leader, so no legacy worker runs its own assignor),
reporting the worker's owned work from the allocation in its subscription; SyncGroup re-encodes the
member's current assignment at the worker's own protocol version; Heartbeat tells it to rejoin when
its reconciliation needs another round. Per-member classic states (PreparingRebalance /
CompletingRebalance / Stable) are transient, like a broker's: after a restart members count as Stable.
"""

from __future__ import annotations

from typing import Protocol

from connect_bridge.codecs.connect_protocol import (
    CONNECT_PROTOCOL_NAMES,
    Assignment,
    Subscription,
    decode_subscription,
)
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.classic import api as api
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.classic.records import ClassicJoin
from connect_bridge.state.model import EMPTY, Items, Member, MemberMetadata
from connect_bridge.state.timers import TimerKey, TimerKind, Timers

PROTOCOL_TYPE = "connect"
CONFIG_MISMATCH = 1
"""Connect's ``Assignment.CONFIG_MISMATCH``: the leader's config is behind a member's; rejoin."""
MODE_OF_PROTOCOL = {"default": "eager", "compatible": "compatible", "sessioned": "sessioned"}
"""Connect's protocol names (JoinGroup) -> the worker's ``connect.protocol`` mode (event log names)."""


class _JoinedBy(ClassicJoin, Protocol):
    """A classic join and who made it (a request, or the classic group's member it created)."""

    @property
    def principal(self) -> str: ...


def legacy_metadata(
    joined: _JoinedBy,
    protocol: str,
    subscription: Subscription,
    classic_protocols: tuple[tuple[str, bytes], ...],
    rebalance_timeout_ms: int | None = None,
) -> MemberMetadata:
    """A legacy member's metadata: its JoinGroup's fields, its Connect subscription and ``protocol``,
    the Connect protocol it is answered in.

    One builder for a worker joining the connect group and for a member of a classic group that
    converts, so the two cannot carry different fields. ``rebalance_timeout_ms``: when not the
    join's own (a join without one takes its session timeout).
    """
    if rebalance_timeout_ms is None:
        rebalance_timeout_ms = joined.rebalance_timeout_ms
    return MemberMetadata(
        instance_id=joined.group_instance_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        session_timeout_ms=joined.session_timeout_ms,
        url=subscription.url,
        config_offset=subscription.config_offset,
        client_id=joined.client_id,
        client_host=joined.client_host,
        protocol=MODE_OF_PROTOCOL[protocol],
        classic_protocols=classic_protocols,
        principal=joined.principal,
    )


def first_protocol(metadata: MemberMetadata) -> str:
    return (metadata.classic_protocols or (("default", b""),))[0][0]


def owned_from_metadata(metadata: MemberMetadata) -> Items:
    """What a legacy worker runs: the allocation in its preferred subscription (eager owns nothing)."""
    protocols = metadata.classic_protocols or ()
    if not protocols or CONNECT_PROTOCOL_NAMES.get(protocols[0][0], 0) == 0:
        return EMPTY
    try:
        allocation = decode_subscription(protocols[0][1]).allocation
    except CodecError:
        return EMPTY
    if not isinstance(allocation, Assignment):
        return EMPTY
    return frozenset(allocation.items)


_STATE_TIMERS = {
    ClassicGroupState.PREPARING_REBALANCE: TimerKey.legacy_join,
    ClassicGroupState.COMPLETING_REBALANCE: TimerKey.legacy_sync,
}
"""The classic state a legacy member may be removed from by a timer, and that timer."""
_TIMER_STATES = {
    TimerKind.LEGACY_JOIN: ClassicGroupState.PREPARING_REBALANCE,
    TimerKind.LEGACY_SYNC: ClassicGroupState.COMPLETING_REBALANCE,
}
"""A firing join or sync timer removes the member only if it is still in the state it bounds."""


class LegacyMembers:
    """The legacy members' classic states (soft state, no records), composed into the group's
    state (``ConnectGroup.legacy_members``). The steps of JoinGroup, SyncGroup, Heartbeat and
    LeaveGroup are ``connect.legacy_steps``: they take the group and change it only through the
    membership and reconciliation steps (``connect.membership``), the ones ConnectGroupHeartbeat
    goes through."""

    def __init__(self, group_id: str, timers: Timers) -> None:
        self.group_id = group_id
        self.timers = timers
        self.states: dict[str, ClassicGroupState] = {}
        self.returning: dict[str, Items] = {}
        """Held work handed back to a legacy member (it is back with the departed worker's url or
        instance id) that has not sent a SyncGroup since. The member may be a stale one of another
        process (a duplicated JoinGroup) that never syncs: until it syncs, the work counts as the
        member's (nobody else is granted it) and it is held again if the member goes. Transient:
        after a load what a member was given is what it owns."""
        self.elected: str | None = None
        """The legacy member last answered as leader in a JoinGroup (its Java leader state is built).
        Transient: after a load the current leader counts as elected (it kept its leader state)."""
        self.given: dict[str, Items] = {}
        """Per member, the work its last SyncGroup answer granted (nothing under CONFIG_MISMATCH):
        a cooperative worker names it in its next JoinGroup. Transient: after a load nothing is
        known to have been given, and no JoinGroup is refused as a stale copy."""
        self.refused_stale_join: dict[str, tuple[tuple[str, bytes], ...]] = {}
        """Per member, the protocols of a JoinGroup refused once as a possibly stale copy
        (``connect.legacy_steps``); the same protocols again are taken as its join. Transient:
        after a load such a join is refused once more (one more round trip)."""

    # ------------------------------------------------------------------ helpers
    def _cancel_timers(self, member_id: str) -> None:
        for timer in _STATE_TIMERS.values():
            self.timers.cancel(timer(self.group_id, member_id))

    def set_state(self, member_id: str, state: ClassicGroupState, now_ms: int, timeout_ms: int) -> None:
        """Enter a classic state; the join and sync states are bounded by their timers."""
        self.states[member_id] = state
        self._cancel_timers(member_id)
        timer = _STATE_TIMERS.get(state)
        if timer is not None:
            self.timers.schedule(timer(self.group_id, member_id), now_ms + timeout_ms)

    def removable_by(self, member_id: str, kind: TimerKind) -> bool:
        """A join or sync timer of ``kind`` removes the member only if it is still in the classic
        state that timer bounds."""
        return self.states.get(member_id) is _TIMER_STATES[kind]

    def any_completing(self) -> bool:
        """Some legacy member got its JoinGroup answer and has not sent its SyncGroup yet."""
        return any(state is ClassicGroupState.COMPLETING_REBALANCE for state in self.states.values())

    def may_run(self, member: Member) -> Items:
        """What a legacy worker may be running. Between its JoinGroup answer and its SyncGroup it
        has been told nothing new: it runs at most what it reported in that JoinGroup (an eager
        worker: nothing), so work granted in that round is not its to hold (adversarial drill
        17001619: a worker that died before its SyncGroup held its new work for a second delay)."""
        owned = member.current.owned
        if self.states.get(member.member_id) is ClassicGroupState.COMPLETING_REBALANCE:
            return owned & owned_from_metadata(member.metadata)
        return owned

    def refuse_once(self, member_id: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Whether a possibly stale JoinGroup with ``protocols`` is refused: the first time, yes
        (noted); the same protocols again are the worker's own rejoin."""
        if self.refused_stale_join.get(member_id) == protocols:
            return False
        self.refused_stale_join[member_id] = protocols
        return True

    def note_given(self, member_id: str, items: Items) -> None:
        """``member_id``'s SyncGroup answer granted ``items`` (``given``)."""
        self.given[member_id] = items

    def join_taken(self, member_id: str) -> None:
        """A JoinGroup of ``member_id`` was taken: a later copy of it is judged afresh."""
        self.refused_stale_join.pop(member_id, None)

    def note_returned(self, member_id: str, items: Items) -> None:
        """Held work goes back to ``member_id`` (``returning``)."""
        self.returning[member_id] = self.returning.get(member_id, EMPTY) | items

    def own_returned(self, member_id: str) -> None:
        """``member_id`` synced: it is a process talking to the bridge, so what was returned to it
        is its own from now on (owned once granted), no longer kept for it."""
        self.returning.pop(member_id, None)

    def note_elected(self, member_id: str | None) -> None:
        """``member_id`` was answered as leader in a JoinGroup (or, after a load or a conversion,
        is the leader that kept its leader state): its Java leader state is built."""
        self.elected = member_id

    def forget(self, member_id: str) -> None:
        self.returning.pop(member_id, None)
        self.states.pop(member_id, None)
        self.given.pop(member_id, None)
        self.refused_stale_join.pop(member_id, None)
        self._cancel_timers(member_id)
