"""A coordinator that loads and gives up groups partition by partition (several bridges).

With ``ha.enabled`` a bridge replays one partition of the state topic at a time next to the groups
it already coordinates, and forgets a partition's groups when another bridge takes it. These tests
drive the pure coordinator: loading leaves other groups (and their timers) alone, gives every
loaded member a fresh session, and loading in pieces ends in the state one replay of everything
gives; unloading answers parked requests NOT_COORDINATOR and stops the groups' timers.
"""

from __future__ import annotations

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.api import JoinGroupRequest, SyncGroupRequest
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.holds import first_session_after_load_ms
from connect_bridge.state.records import Record
from connect_bridge.state.timers import TimerKey

SESSION_MS = 10_000
REBALANCE_MS = 30_000
CONFIG = CoordinatorConfig(classic_initial_rebalance_delay_ms=0, migration_policy=MigrationPolicy.DISABLED)


def _join(group: str, member: str = "", token: object = None) -> JoinGroupRequest:
    protocols = (("range", b"m"),)
    return JoinGroupRequest(
        group,
        member,
        "consumer",
        protocols,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=REBALANCE_MS,
        api_version=5,
        token=token,
    )


def stable_group(coord: GroupCoordinator, group: str, now: int) -> str:
    """One member joined and synced: a Stable classic group with a session timer; its member id."""
    first = coord.classic_join(_join(group), now)  # v4+: MEMBER_ID_REQUIRED first
    assert first is not None and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    response = coord.classic_join(_join(group, first.member_id, "t1"), now)
    coord.advance(now)
    if response is None:
        ((_, response),) = coord.drain_responses()
    member = response.member_id
    sync = SyncGroupRequest(
        group, member, response.generation_id, None, "consumer", "range", ((member, b"a"),), token="s"
    )
    synced = coord.classic_sync(sync, now)
    assert synced is not None and synced.error_code == ErrorCode.NONE
    coord.drain_responses()
    return member


def records_of(coord: GroupCoordinator) -> list[Record]:
    return coord.drain_records()


def test_loading_one_partition_leaves_the_other_groups_and_their_timers_alone() -> None:
    source = GroupCoordinator(CONFIG)
    a_member = stable_group(source, "a", 0)
    log = records_of(source)
    bridge = GroupCoordinator(CONFIG)
    b_member = stable_group(bridge, "b", 1_000)
    records_of(bridge)
    b_deadline = bridge.timers.deadline(TimerKey.classic_session("b", b_member))

    touched = bridge.replay(log, 5_000)

    assert touched == {"a"}
    assert set(bridge.groups) == {"a", "b"}
    assert bridge.timers.deadline(TimerKey.classic_session("b", b_member)) == b_deadline
    # A fresh session from the moment of loading, as Kafka gives after loading a partition, but as
    # long as a JoinGroup parked at the previous owner can wait (docs/classic-group.md, deviation 12).
    first = first_session_after_load_ms(SESSION_MS, REBALANCE_MS)
    assert first > SESSION_MS
    assert bridge.timers.deadline(TimerKey.classic_session("a", a_member)) == 5_000 + first
    assert bridge.drain_records() == []  # loading writes nothing


def test_loading_in_pieces_ends_where_one_replay_of_everything_does() -> None:
    source = GroupCoordinator(CONFIG)
    for i, group in enumerate(("a", "b", "c")):
        stable_group(source, group, i)
    log = records_of(source)
    whole = GroupCoordinator(CONFIG)
    whole.replay(log, 9_000)
    pieces = GroupCoordinator(CONFIG)
    for part in (["b"], ["a", "c"]):
        pieces.replay([r for r in log if r.group_id in part], 9_000)
    assert pieces.snapshot() == whole.snapshot()


def test_unloading_answers_parked_joins_not_coordinator_and_stops_their_timers() -> None:
    bridge = GroupCoordinator(CONFIG)
    kept = stable_group(bridge, "kept", 0)
    member = stable_group(bridge, "moved", 0)
    records_of(bridge)
    # A rejoin parks: the group waits for its other members (here: none) until the rebalance ends.
    second = bridge.classic_join(_join("moved", "", "new"), 10)
    assert second is not None and second.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert bridge.classic_join(_join("moved", second.member_id, "parked"), 10) is None

    bridge.unload({"moved"})

    answers = dict(bridge.drain_responses())
    assert answers["parked"].error_code == ErrorCode.NOT_COORDINATOR
    assert "moved" not in bridge.groups and "kept" in bridge.groups
    assert not [k for k in bridge.timers.keys() if k.group_id == "moved"]
    assert bridge.timers.deadline(TimerKey.classic_session("kept", kept)) == SESSION_MS
    bridge.advance(10 * SESSION_MS)  # nothing of the moved group fires, nothing is written for it
    assert not [r for r in bridge.drain_records() if r.group_id == "moved"]
    assert member  # the member the other bridge now coordinates
