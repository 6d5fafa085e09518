"""How the coordinator routes fired timers: by the key's kind, and an unknown kind is an error."""

from __future__ import annotations

import pytest

from connect_bridge.state.classic.api import JoinGroupRequest
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.timers import TimerKey

G = "g"


def test_an_unknown_timer_kind_raises_instead_of_being_dropped() -> None:
    with pytest.raises(ValueError, match="no-such-timer"):
        TimerKey.of("no-such-timer", G)


def test_a_raw_tuple_is_refused_where_it_is_armed() -> None:
    coord = GroupCoordinator()
    with pytest.raises(TypeError, match="not a TimerKey"):
        coord.timers.schedule(("held", G, ""), 5)
    assert coord.next_deadline() is None


def test_a_classic_join_timer_reaches_the_classic_group_and_a_connect_kind_does_not() -> None:
    coord = GroupCoordinator(
        CoordinatorConfig(classic_initial_rebalance_delay_ms=100, migration_policy=MigrationPolicy.DISABLED)
    )
    req = JoinGroupRequest(G, "", "consumer", (("range", b"m"),), api_version=3, token="t")
    assert coord.classic_join(req, 0) is None  # parked for the initial delay
    assert coord.next_deadline() == 100
    # A connect kind keyed to the classic group is not the classic group's: it is ignored.
    coord.timers.schedule(TimerKey.compute(G), 50)
    coord.timers.schedule(TimerKey.held(G), 50)
    coord.advance(50)
    assert coord.drain_responses() == []
    coord.advance(100)
    ((token, response),) = coord.drain_responses()
    assert token == "t" and response.error_code == 0 and response.generation_id == 1
