"""Emptied groups are deleted ``empty_group_expiry_ms`` after they became empty, tombstones and all,
as Kafka's periodic cleanup deletes an Empty group without offsets (``state.empty_groups``)."""

from __future__ import annotations

from dataclasses import replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state import api as napi
from connect_bridge.state.adoption.records import OwnershipState
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import ConfigView
from connect_bridge.state.records import RecordType
from test_migration import protocols

EXPIRY = 600_000
CONFIG = CoordinatorConfig(classic_initial_rebalance_delay_ms=0, scheduled_rebalance_max_delay_ms=0)
VIEW = ConfigView.of(5, {"c": 1})


def _coordinator(config: CoordinatorConfig = CONFIG) -> GroupCoordinator:
    coordinator = GroupCoordinator(config)
    coordinator.default_view = VIEW
    return coordinator


def _classic_member_leaves(coordinator: GroupCoordinator, group: str, now: int) -> None:
    """One worker joins ``group`` (classic protocol), completes its rebalance, then leaves."""
    ask = capi.JoinGroupRequest(group, "", "connect", protocols("http://w"), 10_000)
    first = coordinator.classic_join(ask, now)
    assert first is not None and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joined = coordinator.classic_join(replace(ask, member_id=first.member_id), now)
    if joined is None:  # parked until the (zero) initial rebalance delay's timer
        coordinator.advance(now)
        ((_, joined),) = coordinator.drain_responses()
    assert joined.error_code == 0
    sync = capi.SyncGroupRequest(
        group,
        joined.member_id,
        joined.generation_id,
        protocol_type="connect",
        protocol_name=joined.protocol_name,
        assignments=((joined.member_id, b""),),
    )
    synced = coordinator.classic_sync(sync, now)
    assert synced is not None and synced.error_code == 0
    coordinator.classic_leave(capi.LeaveGroupRequest(group, (capi.LeavingMember(joined.member_id),)), now)
    assert coordinator.groups[group].state is ClassicGroupState.EMPTY


def _connect_member_leaves(coordinator: GroupCoordinator, group: str, now: int) -> None:
    """One worker joins ``group`` with ConnectGroupHeartbeat, then leaves it."""
    joined = coordinator.connect_heartbeat(
        napi.HeartbeatRequest(
            group, "", 0, rebalance_timeout_ms=60_000, url="http://w", config_offset=5, owned=frozenset()
        ),
        now,
    )
    assert joined.error_code == 0
    left = coordinator.connect_heartbeat(
        napi.HeartbeatRequest(group, joined.member_id, napi.LEAVE_EPOCH), now
    )
    assert left.error_code == 0
    assert not coordinator.groups[group].members


def _tombstones(coordinator: GroupCoordinator, group: str) -> set[RecordType]:
    return {r.type for r in coordinator.drain_records() if r.group_id == group and r.value is None}


def test_an_emptied_classic_group_is_tombstoned_once_the_expiry_is_over() -> None:
    coordinator = _coordinator()
    _classic_member_leaves(coordinator, "g", 1_000)
    coordinator.drain_records()
    coordinator.advance(1_000 + EXPIRY - 1)
    assert "g" in coordinator.groups and not _tombstones(coordinator, "g")
    assert coordinator.next_deadline() == 1_000 + EXPIRY
    coordinator.advance(1_000 + EXPIRY)
    assert "g" not in coordinator.groups
    assert RecordType.CLASSIC_GROUP in _tombstones(coordinator, "g")
    # A later JoinGroup starts the group afresh.
    ask = capi.JoinGroupRequest("g", "", "connect", protocols("http://w"), 10_000)
    assert coordinator.classic_join(ask, 2 * EXPIRY).error_code == ErrorCode.MEMBER_ID_REQUIRED


def test_an_emptied_connect_group_is_tombstoned_and_replays_to_nothing() -> None:
    coordinator = _coordinator()
    log = []
    _connect_member_leaves(coordinator, "g", 0)
    log += coordinator.drain_records()
    coordinator.advance(EXPIRY)
    deleted = coordinator.drain_records()
    log += deleted
    assert "g" not in coordinator.groups
    assert {RecordType.GROUP_METADATA, RecordType.TARGET_METADATA} <= {
        r.type for r in deleted if r.value is None
    }
    reloaded = _coordinator()
    reloaded.replay(log, EXPIRY + 1)
    assert "g" not in reloaded.groups


def test_a_member_joining_before_the_expiry_keeps_the_group() -> None:
    coordinator = _coordinator()
    _connect_member_leaves(coordinator, "g", 0)
    back = coordinator.connect_heartbeat(
        napi.HeartbeatRequest(
            "g", "", 0, rebalance_timeout_ms=60_000, url="http://w", config_offset=5, owned=frozenset()
        ),
        EXPIRY - 1,
    )
    assert back.error_code == 0
    coordinator.advance(EXPIRY)
    assert coordinator.groups["g"].members
    # Requests that leave a group empty do not push its deletion back (Kafka's cleanup is periodic).
    left = coordinator.connect_heartbeat(
        napi.HeartbeatRequest("g", back.member_id, napi.LEAVE_EPOCH), EXPIRY + 5
    )
    assert left.error_code == 0
    stray = coordinator.connect_heartbeat(napi.HeartbeatRequest("g", "nobody", 3), EXPIRY + 10)
    assert stray.error_code != 0
    coordinator.advance(2 * EXPIRY + 5)
    assert "g" not in coordinator.groups


def test_full_groups_free_their_places_once_emptied() -> None:
    """``max_groups`` bounds what clients can make the bridge hold; before empty groups expired, a
    client could fill it with groups it joined and left, and no new group could ever form."""
    coordinator = _coordinator(replace(CONFIG, max_groups=2))
    _classic_member_leaves(coordinator, "g1", 0)
    _connect_member_leaves(coordinator, "g2", 0)
    ask = capi.JoinGroupRequest("g3", "", "connect", protocols("http://w"), 10_000)
    assert coordinator.classic_join(ask, 1).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    coordinator.advance(EXPIRY)
    assert not coordinator.groups
    assert coordinator.classic_join(ask, EXPIRY + 1).error_code == ErrorCode.MEMBER_ID_REQUIRED


def test_null_keeps_empty_groups_and_groups_under_adoption_are_left_to_it() -> None:
    kept = _coordinator(replace(CONFIG, empty_group_expiry_ms=None))
    _classic_member_leaves(kept, "g", 0)
    kept.advance(100 * EXPIRY)
    assert "g" in kept.groups and kept.next_deadline() is None

    relaying = _coordinator()
    relaying.change_ownership("g", OwnershipState.RELAYING, -1, 0)
    _classic_member_leaves(relaying, "g", 0)
    relaying.advance(100 * EXPIRY)
    assert "g" in relaying.groups


def test_work_held_for_a_departed_worker_keeps_the_group_until_the_hold_ends() -> None:
    """A connect group whose last member's session expired holds its work for the scheduled
    rebalance delay: it is not empty until then, and goes a full expiry after."""
    delay = 300_000
    coordinator = _coordinator(replace(CONFIG, scheduled_rebalance_max_delay_ms=delay))
    joined = coordinator.connect_heartbeat(
        napi.HeartbeatRequest(
            "g", "", 0, rebalance_timeout_ms=60_000, url="http://w", config_offset=5, owned=frozenset()
        ),
        0,
    )
    assert joined.error_code == 0
    fired = 0
    while (deadline := coordinator.next_deadline()) is not None and "g" in coordinator.groups:
        coordinator.advance(deadline)  # the session expires; the work is held, then released
        fired = deadline
        if deadline < delay:
            assert "g" in coordinator.groups
    assert "g" not in coordinator.groups
    assert fired >= delay + EXPIRY
