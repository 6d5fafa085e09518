"""A step's effects as one value (``state/result.py``), gathered from the groups the step changed.

After every step the server used to drain records, parked answers and classic-state changes by
visiting every group, three passes per steady heartbeat however many groups the bridge holds. The
coordinator now gathers them from the groups that marked themselves changed.
"""

from __future__ import annotations

from typing import Any

import pytest

from connect_bridge.state.api import HeartbeatRequest
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import ConfigView

CONFIG = CoordinatorConfig(session_timeout_ms=10**9, classic_initial_rebalance_delay_ms=0)
VIEW = ConfigView.of(3, {"A": 4, "B": 2})


def join(group: str, member: str) -> HeartbeatRequest:
    return HeartbeatRequest(group, member, 0, rebalance_timeout_ms=60_000, url=f"http://{member}")


def untouchable(coord: GroupCoordinator, keep: str) -> None:
    """Every group but ``keep`` fails the step if its effects are drained."""

    def boom(*args: Any) -> Any:
        raise AssertionError("a group the step did not change was visited")

    for gid, group in coord.groups.items():
        if gid != keep:
            group.drain_records = boom  # type: ignore[method-assign]


@pytest.mark.parametrize("take", ["drain_records", "result"])
def test_a_step_visits_only_the_groups_it_changed(take: str) -> None:
    coord = GroupCoordinator(CONFIG)
    for i in range(50):
        coord.set_config(f"g{i}", VIEW, 0)
        coord.connect_heartbeat(join(f"g{i}", "m"), 0)
    coord.drain_records()
    untouchable(coord, keep="g7")
    coord.connect_heartbeat(join("g7", "m2"), 1)  # a member joins: the group writes records
    records = getattr(coord, take)()
    records = records if take == "drain_records" else records.records
    assert records and {r.group_id for r in records} == {"g7"}


def test_a_result_carries_the_response_released_answers_and_state_changes() -> None:
    coord = GroupCoordinator(CONFIG)
    protocols = (("sessioned", b"meta"),)
    first = coord.classic_join(capi.JoinGroupRequest("c", "", "connect", protocols, 10_000, 30_000), 0)
    assert first is not None and first.member_id  # MEMBER_ID_REQUIRED
    coord.result()
    req = capi.JoinGroupRequest("c", first.member_id, "connect", protocols, 10_000, 30_000, token="t")
    assert coord.classic_join(req, 0) is None  # parked until the join phase ends
    parked = coord.result()
    assert parked.response is None and parked.released == []
    # The rebalance began without a record: only the state change tells the metrics.
    assert (
        parked.classic_changed == {"c"} and coord.groups["c"].state is ClassicGroupState.PREPARING_REBALANCE
    )
    assert parked.next_deadline is not None and parked.next_deadline == coord.next_deadline()
    coord.advance(parked.next_deadline)
    ended = coord.result()
    assert [token for token, _ in ended.released] == ["t"] and ended.released[0][1].error_code == 0
    assert "c" in ended.classic_changed  # CompletingRebalance (the snapshot is written at sync)
    again = coord.result()
    assert (again.records, again.released, again.classic_changed) == ([], [], frozenset())
