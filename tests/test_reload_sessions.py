"""A classic-protocol member's first session after its group is loaded from the log.

Found by the Java HA drill (``tests/test_ha_java.py``): the owning bridge was SIGSTOPped while all
three Java workers waited on their JoinGroup there. Another bridge took the partition over and
loaded the group with a fresh session for everyone; the workers sent nothing to it (a JoinGroup
waits up to the rebalance timeout + 5 s, with the tasks still running), so their sessions ended,
their work was held for the scheduled delay and then handed to the first worker that came back,
while the other two still ran it. A loaded classic-protocol member now gets, once, a session as
long as such a parked JoinGroup can last (``holds.first_session_after_load_ms``); a member that
talks to the new coordinator is back on its plain session at once.
"""

from __future__ import annotations

from connect_bridge.state.classic_api import ClassicGroupState
from connect_bridge.state.holds import JOIN_GROUP_TIMEOUT_LAPSE_MS, first_session_after_load_ms
from test_adversity import JavaLike, NewLike, assert_exclusive, run_for
from test_migration import (
    G,
    cbeat,
    classic,
    connect,
    coordinator,
    stable_classic,
    upgraded_and_settled,
)

SESSION_MS, REBALANCE_MS = 10_000, 60_000
"""What ``test_migration.cjoin``'s workers send."""
LOAD = 50_000
PARKED = REBALANCE_MS + JOIN_GROUP_TIMEOUT_LAPSE_MS


def test_the_first_session_after_a_load_outlasts_a_parked_join() -> None:
    assert first_session_after_load_ms(SESSION_MS, REBALANCE_MS) == PARKED
    assert first_session_after_load_ms(90_000, 30_000) == 90_000  # never shorter than a session


def test_a_loaded_classic_group_keeps_silent_members_as_long_as_a_parked_join() -> None:
    source = coordinator(scheduled_rebalance_max_delay_ms=0)
    w1, w2 = stable_classic(source)
    loaded = coordinator(scheduled_rebalance_max_delay_ms=0)
    loaded.replay(source.drain_records(), LOAD)

    loaded.advance(LOAD + SESSION_MS + 1)  # a plain session would have ended here
    assert set(classic(loaded).members) == {w1, w2}
    assert classic(loaded).state is ClassicGroupState.STABLE
    for t in range(LOAD + SESSION_MS + 2, LOAD + PARKED - 1, 3_000):  # w1 talks (a plain session
        assert cbeat(loaded, w1, 1, now=t) == 0  # again); w2 waits on a JoinGroup elsewhere
        loaded.advance(t)
    assert set(classic(loaded).members) == {w1, w2}
    loaded.advance(LOAD + PARKED + 1)  # w2 said nothing for as long as a JoinGroup can wait
    # (removed by its session; the bridge then holds its work in a connect group, migration.md)
    members = loaded.groups[G].members
    assert w2 not in members and w1 in members


def test_a_loaded_connect_group_hands_out_no_parked_legacy_work_before_the_join_could_end() -> None:
    """The drill's case in the engine: both legacy workers wait on a JoinGroup elsewhere and keep
    running; only the new-protocol worker talks to the coordinator that loaded the group."""
    source, log, w1, w2, w3 = upgraded_and_settled(scheduled_rebalance_max_delay_ms=5_000)
    members = connect(source).members
    legacy = [
        JavaLike(name, mid, 2, set(members[mid].current.owned)) for name, mid in (("w1", w1), ("w2", w2))
    ]
    new = NewLike(w3, members[w3].current.member_epoch, set(members[w3].current.owned))
    assert_exclusive(*legacy, new)
    loaded = coordinator(scheduled_rebalance_max_delay_ms=5_000)
    loaded.replay(log.records + source.drain_records(), LOAD)

    for t in range(LOAD, LOAD + PARKED - 1_000, 1_000):  # the legacy workers are silent, still running
        run_for(loaded, [new], t, t + 1_000)
        assert_exclusive(*legacy, new)
    assert {w1, w2} <= set(connect(loaded).members)
