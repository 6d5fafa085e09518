"""Pieces of issue 13's reshape that one builder now serves in several places: timer keys, the
classic member snapshot, the generation check of SyncGroup/Heartbeat, a deleted connect group
(live and replayed), and the one table of APIs the codec and the bridge share. Pure, no sockets."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

from connect_bridge.bridge.coordination import api_table as t
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.messages import APIS, KNOWN_APIS, ApiKey, ApiSpec, RelayedApi
from connect_bridge.state.adoption.observation import UpstreamMember
from connect_bridge.state.api import LEAVE_EPOCH, HeartbeatRequest
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import ClassicGroup
from connect_bridge.state.classic.member import ClassicMember
from connect_bridge.state.classic.records import ClassicMemberSnapshot
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect.group import ConnectGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.records import RecordType
from connect_bridge.state.timers import TimerKey, TimerKind

G = "g"


def test_named_timer_keys_take_a_member_exactly_when_per_member() -> None:
    assert TimerKey.session(G, "m") == TimerKey(TimerKind.SESSION, G, "m")
    assert TimerKey.held(G) == TimerKey(TimerKind.HELD, G, "")
    assert TimerKey.legacy_join is TimerKey.legacy_join  # built once: a heartbeat re-arms keys often
    with pytest.raises(TypeError):
        TimerKey.held(G, "m")
    with pytest.raises(TypeError):
        TimerKey.revoke(G)


def test_a_classic_member_and_an_upstream_member_snapshot_alike() -> None:
    protocols = (("sessioned", b"meta"),)
    mine = ClassicMember("m", "i", "c", "h", 3000, 1000, "connect", protocols, b"asg", principal="User:a")
    upstream = UpstreamMember("m", "i", "c", "h", 3000, 1000, protocols, joined=True, assignment=b"asg")
    assert mine.to_snapshot() == ClassicMemberSnapshot.of(upstream, b"asg", "User:a")
    assert ClassicMember.from_snapshot(mine.to_snapshot(), "connect").to_snapshot() == mine.to_snapshot()


def test_sync_and_heartbeat_share_the_generation_check() -> None:
    coord = GroupCoordinator()
    protocols = (("sessioned", b""),)
    required = coord.classic_join(capi.JoinGroupRequest(G, "", "connect", protocols, 10_000, 10_000), 0)
    assert required is not None and required.error_code == ErrorCode.MEMBER_ID_REQUIRED
    member = required.member_id
    coord.classic_join(capi.JoinGroupRequest(G, member, "connect", protocols, 10_000, 10_000, token="j"), 0)
    deadline = coord.next_deadline()
    assert deadline is not None
    coord.advance(deadline)
    [(_, joined)] = coord.drain_responses()
    stale = capi.HeartbeatRequest(G, member, joined.generation_id + 1)
    assert coord.classic_heartbeat(stale, deadline).error_code == ErrorCode.ILLEGAL_GENERATION
    unknown = capi.SyncGroupRequest(
        G, "nobody", joined.generation_id, None, "connect", "sessioned", token="s"
    )
    assert coord.classic_sync(unknown, deadline).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_deleted_connect_group_is_dropped_live_and_in_replay() -> None:
    """Its tombstones are applied as written (no record is left unapplied); the retired object keeps
    the epoch it ended at, and replay drops the group as the live coordinator did."""
    config = CoordinatorConfig(scheduled_rebalance_max_delay_ms=0)
    coord = GroupCoordinator(config)
    coord.connect_heartbeat(HeartbeatRequest(G, "w1", 0, rebalance_timeout_ms=1000, url="http://w1"), 0)
    coord.connect_heartbeat(HeartbeatRequest(G, "w1", LEAVE_EPOCH), 10)
    group = coord.groups[G]
    assert isinstance(group, ConnectGroup) and not group.members
    epoch = group.group_epoch
    assert epoch > 0
    coord.classic_join(capi.JoinGroupRequest(G, "", "connect", (("sessioned", b""),)), 20)
    assert isinstance(coord.groups[G], ClassicGroup)
    assert group.group_epoch == epoch and not group.target and group.assignment_epoch == 0
    records = coord.drain_records()
    assert any(r.type is RecordType.GROUP_METADATA and r.value is None for r in records)
    connect_only = [r for r in records if r.type is not RecordType.CLASSIC_GROUP]
    fresh = GroupCoordinator(config)
    fresh.replay(connect_only, 30)
    assert G not in fresh.groups


def test_every_codec_entry_has_one_bridge_row_and_relayed_caps_come_from_the_codec() -> None:
    assert [row.key for row in t.API_TABLE if row.key in KNOWN_APIS] == [row.key for row in t.API_TABLE]
    assert sorted(row.key for row in t.API_TABLE) == sorted(api.api_key for api in APIS)
    for api in APIS:
        row = t.ROWS[api.api_key]
        assert row.api is api
        if isinstance(api, ApiSpec):
            assert api.api_key == api.request.API_KEY
        elif isinstance(api, RelayedApi) and api.max_version is not None:
            assert t.RELAY_CAPS[api.api_key] <= api.max_version
    assert t.ROWS[ApiKey.DESCRIBE_CLUSTER].response_class is KNOWN_APIS[ApiKey.DESCRIBE_CLUSTER].response


def test_a_group_is_one_state_class_and_steps_read_no_private_parts() -> None:
    """State apart from logic (docs/architecture.md): each group is one state class, not a class
    spread across modules by inheritance, and no state module reads another object's private
    attributes (``x._y`` where ``x`` is neither ``self``/``cls`` nor a class of the same module)."""
    assert ConnectGroup.__mro__ == (ConnectGroup, object)
    assert ClassicGroup.__mro__ == (ClassicGroup, object)
    state_dir = pathlib.Path(inspect.getfile(ConnectGroup)).parents[1]
    reads = []
    for path in sorted(state_dir.rglob("*.py")):
        tree = ast.parse(path.read_text())
        own = {n.name for n in tree.body if isinstance(n, ast.ClassDef)} | {"self", "cls"}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in own)
            ):
                reads.append(f"{path.relative_to(state_dir)}:{node.lineno} {ast.unparse(node)}")
    assert reads == []
