"""A JoinGroup that repeats, byte for byte, a member's join from before the SyncGroup that gave it
work is not taken as its join of a later rebalance at once (``classic.join._reports_less_than_given``;
drill 99500298501929: a delayed copy of a worker's JoinGroup made the leader deal work it ran)."""

from __future__ import annotations

from connect_bridge.codecs.connect_protocol import Assignment, encode_assignment
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.model import ConnectorTaskId
from test_classic_eager_hold import compatible
from test_classic_group import Harness, finish_initial_rebalance

S = ClassicGroupState
T0 = ConnectorTaskId("c", 0)


def cooperative(*items: ConnectorTaskId) -> bytes:
    return encode_assignment(Assignment.build(0, "", "", 0, items), 1)


def b_given_t0(h: Harness) -> tuple[str, str]:
    """Generation 1 (compatible): leader A gives B the task T0; both reported owning nothing."""
    a, b = h.new_member_id(compatible()), h.new_member_id(compatible())
    h.join(a, compatible(), token=("join", a))
    h.join(b, compatible(), token=("join", b))
    finish_initial_rebalance(h)
    assert h.group.protocol_name == "compatible" and h.group.leader_id == a
    h.sync(b, 1, token=("sync", b))
    h.sync(a, 1, {a: cooperative(), b: cooperative(T0)}, token=("sync", a))
    assert h.group.state is S.STABLE
    return a, b


def test_a_copy_of_the_join_from_before_the_work_was_given_is_refused_once() -> None:
    h = Harness()
    a, b = b_given_t0(h)
    h.join(a, compatible(), token=("join2", a))  # the leader rejoins: generation 2 starts
    assert h.group.state is S.PREPARING_REBALANCE
    # A delayed copy of B's generation-1 JoinGroup (it reports owning nothing): taken as B's join,
    # the leader would see T0 free while B runs it.
    stale = h.join(b, compatible(), token=("stale", b))
    assert stale is not None and stale.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert not h.group.members[b].awaiting_join
    # B's own rejoin reports T0; it completes the join phase with the truth in front of the leader.
    own = h.join(b, compatible(T0), token=("join2", b))  # the last to join: answered at once
    assert own is not None and own.error_code == 0 and own.generation_id == 2
    assert h.group.state is S.COMPLETING_REBALANCE
    leader = h.responses[("join2", a)]
    assert dict((m.member_id, m.metadata) for m in leader.members)[b] == compatible(T0)[0][1]


def test_the_same_bytes_again_are_the_members_join() -> None:
    """A worker whose SyncGroup answer was lost never applied T0 and really reports nothing: its
    retried JoinGroup is taken, so the hold costs one round trip, never the work."""
    h = Harness()
    a, b = b_given_t0(h)
    h.join(a, compatible(), token=("join2", a))
    refused = h.join(b, compatible(), token=("try1", b))
    assert refused is not None and refused.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    retried = h.join(b, compatible(), token=("try2", b))
    assert retried is not None and retried.error_code == 0 and retried.generation_id == 2
    assert h.group.state is S.COMPLETING_REBALANCE
