"""Eager generations of a classic Connect group: keep a member's work from the others while it may
still run it.

Connect's eager leader (``EagerAssignor``) deals every item as if every member had stopped all its
work before joining. Only a worker whose *last elected* protocol was eager did: Java's
``WorkerCoordinator.onJoinPrepare`` revokes everything only when ``currentConnectProtocol`` is
EAGER, and that field changes only in ``onJoinComplete``. A cooperative worker joining the first
eager generation it sees still runs its work (Java's herder never stops it; the simulated worker
stops it once it sees the election, maybe slowly). KIP-415's empty round (the simulated leader's
downgrade step) covers this only for members that *saw* the previous eager generation. Drill
31000309 had a duplicated JoinGroup put a worker into that round without the worker ever seeing it:
at the next, regular eager round the leader gave the worker's two tasks to the others while it
was still stopping them.

The bridge sees more than the leader: every member's JoinGroup carries its cooperative subscription
(its allocation), and the bridge knows which generations' assignments each member was given. So
when the leader installs an eager assignment, an item that a member not yet known to be eager
reported owning is taken out of every *other* member's assignment (safety first: it runs nowhere
else this round), and once every such member has been given its own assignment (it has seen the
election and stops before its next JoinGroup: the herder thread does both) one more rebalance
deals it.
"""

from __future__ import annotations

from connect_bridge.codecs.connect_protocol import (
    Assignment,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    payload_version,
)
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.classic.api import EAGER_PROTOCOL, PROTOCOL_TYPE_CONNECT, ClassicGroupState
from connect_bridge.state.classic.member import ClassicMember
from connect_bridge.state.classic.state import ClassicGroup
from connect_bridge.state.model import EMPTY, Items


def _unstopped(member: ClassicMember) -> Items:
    """What ``member`` may still run when it joined an eager generation: nothing if it was given an
    eager assignment last (it stopped everything before joining), else the allocation of its
    preferred subscription (an eager-only worker's carries none)."""
    if member.synced_protocol == EAGER_PROTOCOL or not member.protocols:
        return EMPTY
    try:
        allocation = decode_subscription(member.protocols[0][1]).allocation
    except CodecError:
        return EMPTY
    return frozenset(allocation.items) if isinstance(allocation, Assignment) else EMPTY


def _without(data: bytes, foreign: Items) -> bytes | None:
    """``data`` (an assignment) without the ``foreign`` items, or None when it has none of them."""
    try:
        asg = decode_assignment(data)
        version = payload_version(data)
    except CodecError:
        return None
    kept = [item for item in asg.items if item not in foreign]
    if len(kept) == len(asg.items):
        return None
    trimmed = Assignment.build(asg.error, asg.leader, asg.leader_url, asg.config_offset, kept)
    return encode_assignment(trimmed, version)


def hold_unstopped(group: ClassicGroup, assignments: dict[str, bytes]) -> dict[str, bytes]:
    """The leader's ``assignments`` with what another member may still run taken out; records in
    ``group.eager_holders`` whose work was kept from someone."""
    group.begin_eager_holds()
    if group.protocol_type != PROTOCOL_TYPE_CONNECT or group.protocol_name != EAGER_PROTOCOL:
        return assignments
    claims = {mid: items for mid, m in group.members.items() if (items := _unstopped(m))}
    if not claims:
        return assignments
    out = dict(assignments)
    for mid, data in assignments.items():
        others = {other: items for other, items in claims.items() if other != mid}
        foreign = frozenset().union(*others.values())
        trimmed = _without(data, foreign) if foreign and data else None
        if trimmed is None:
            continue
        held = frozenset(decode_assignment(data).items) & foreign
        group.hold_for({other for other, items in others.items() if items & held})
        out[mid] = trimmed
    return out


def given_assignment(group: ClassicGroup, member: ClassicMember, now_ms: int) -> None:
    """``member`` was given this generation's assignment: it knows the elected protocol now. The
    last holder of kept work to get there starts the round that deals that work."""
    member.synced_protocol = group.protocol_name
    member.told_to_rejoin = False
    if member.member_id not in group.eager_holders:
        return
    group.eager_holder_served(member.member_id)
    if not group.eager_holders and group.state is ClassicGroupState.STABLE:
        # The switch timer's handler rebalances a Stable group; init_next_generation cancels it.
        group.schedule(group.switch_key, now_ms)


def resume_after_reload(group: ClassicGroup, now_ms: int) -> None:
    """A Stable eager group loaded from the log may hold work: who still had to see the election was
    soft state, and so was the rebalance that would deal it. A reported item that no stored
    assignment names is such work (the eager leader deals every configured item); one more
    rebalance deals it (the members' claims count again, so at worst it costs a second round)."""
    if group.state is not ClassicGroupState.STABLE or group.protocol_type != PROTOCOL_TYPE_CONNECT:
        return
    if group.protocol_name != EAGER_PROTOCOL:
        return
    claimed = frozenset().union(*(_unstopped(m) for m in group.members.values()))
    if not claimed:
        return
    dealt: set = set()
    for member in group.members.values():
        try:
            dealt.update(decode_assignment(member.assignment).items if member.assignment else ())
        except CodecError:
            return
    if claimed - dealt:
        group.schedule(group.switch_key, now_ms)


__all__ = ["given_assignment", "hold_unstopped", "resume_after_reload"]
