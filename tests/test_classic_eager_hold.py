"""An eager assignment never hands out what a member not yet given an eager one reported owning
(``state/classic/eager_hold.py``, docs/classic-group.md deviation 13; drill 31000309)."""

from __future__ import annotations

from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.model import ConnectorTaskId
from test_classic_group import Harness, finish_initial_rebalance

S = ClassicGroupState
T0, T1 = ConnectorTaskId("c", 0), ConnectorTaskId("c", 1)


def compatible(*owned: ConnectorTaskId) -> tuple[tuple[str, bytes], ...]:
    """A compatible worker's protocols; its cooperative subscription reports ``owned``."""
    allocation = Assignment.build(0, "", "", 0, owned)
    return (
        ("compatible", encode_subscription(Subscription("http://a/", 0, allocation), 1)),
        ("default", encode_subscription(Subscription("http://a/", 0), 0)),
    )


EAGER_ONLY = (("default", encode_subscription(Subscription("http://b/", 0), 0)),)


def eager(*items: ConnectorTaskId) -> bytes:
    return encode_assignment(Assignment.build(0, "", "", 0, items), 0)


def items_of(data: bytes) -> set[ConnectorTaskId]:
    return set(decode_assignment(data).items)


def eager_generation(h: Harness, a_protocols: tuple[tuple[str, bytes], ...]) -> tuple[str, str]:
    """A (compatible, leader) and B (eager only) form generation 1, which elects ``default``."""
    a, b = h.new_member_id(a_protocols), h.new_member_id(EAGER_ONLY)
    assert h.join(a, a_protocols, token=("join", a)) is None
    assert h.join(b, EAGER_ONLY, token=("join", b)) is None
    finish_initial_rebalance(h)
    assert h.group.protocol_name == "default" and h.group.leader_id == a
    return a, b


def test_what_a_not_yet_eager_member_owns_goes_to_nobody_else_then_a_round_deals_it() -> None:
    h = Harness()
    a, b = eager_generation(h, compatible(T0))
    assert h.sync(b, 1, token=("sync", b)) is None
    leader = h.sync(a, 1, {a: eager(T1), b: eager(T0)}, token=("sync", a))
    # B would start T0 while A, cooperative until now, may still be stopping it.
    assert items_of(h.responses[("sync", b)].assignment) == set()
    assert leader is not None and items_of(leader.assignment) == {T1}
    # A got its own assignment with the sync: it has seen the election, so one more round deals T0.
    h.at(h.now)
    assert h.group.state is S.PREPARING_REBALANCE


def test_a_member_given_an_eager_assignment_has_stopped_before_joining() -> None:
    h = Harness()
    a, b = eager_generation(h, compatible())
    assert h.sync(b, 1, token=("sync", b)) is None
    h.sync(a, 1, {a: eager(T1), b: eager(T0)}, token=("sync", a))
    assert h.group.state is S.STABLE and not h.group.eager_holders
    # Generation 2: A (eager now) reports its stale snapshot T1; the leader gives T1 to B, which
    # rejoins when its heartbeat tells it to (an eager join it was not told to make is refused
    # once as a possibly stale copy: docs/classic-group.md, deviation 18).
    assert h.heartbeat(b, 1) == 0
    h.join(a, compatible(T1), token=("join2", a))
    assert h.heartbeat(b, 1) == 27  # REBALANCE_IN_PROGRESS
    h.join(b, EAGER_ONLY, token=("join2", b))
    assert h.group.generation_id == 2
    assert h.sync(b, 2, token=("sync2", b)) is None
    h.sync(a, 2, {a: eager(T0), b: eager(T1)}, token=("sync2", a))
    assert items_of(h.responses[("sync2", b)].assignment) == {T1}
    assert h.group.state is S.STABLE
