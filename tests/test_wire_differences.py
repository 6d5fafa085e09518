"""Classic-protocol answers measured against Kafka 4.3.1 that the bridge once gave differently.

An empty group id: Kafka's ``GroupCoordinatorService`` answers INVALID_GROUP_ID to SyncGroup,
Heartbeat and LeaveGroup (top-level, no member list) before it looks for a group, on every version
(``tests/test_classic_differential.py::test_empty_group_id`` compares with the broker itself). A
classic group the bridge turned into a connect group to hold a departed worker's work answers
DescribeGroups and a foreign JoinGroup in its own way until the hold ends (docs/classic-group.md,
deviations 14 and 15); those answers are pinned here with the reason they differ.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import ClassicGroup
from connect_bridge.state.connect.group import ConnectGroup
from connect_bridge.wire import maps as wm
from test_migration import G, cbeat, coordinator, stable_classic
from test_server import connection, run, running

INVALID_GROUP_ID = int(ErrorCode.INVALID_GROUP_ID)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "classic-group.md"


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_heartbeat_with_an_empty_group_id_is_invalid_group_id(version: int) -> None:
    req = capi.HeartbeatRequest("", "some-member", 1)
    with running() as srv:

        async def go() -> list[int]:
            async with connection(srv.port) as conn:
                out = []
                for _ in range(2):  # the second takes the steady-heartbeat fast path
                    msg = await conn.request(wm.classic_heartbeat_to_wire(req, version), version)
                    out.append(wm.classic_heartbeat_response_from_wire(msg).error_code)
                return out

        assert run(go()) == [INVALID_GROUP_ID, INVALID_GROUP_ID]


@pytest.mark.parametrize("version", [0, 3, 4, 5])
def test_sync_group_with_an_empty_group_id_is_invalid_group_id(version: int) -> None:
    req = capi.SyncGroupRequest("", "some-member", 1, None, "connect", "sessioned", ())
    with running() as srv:

        async def go() -> int:
            async with connection(srv.port) as conn:
                msg = await conn.request(wm.sync_to_wire(req, version), version)
                return wm.sync_response_from_wire(msg).error_code

        assert run(go()) == INVALID_GROUP_ID


@pytest.mark.parametrize("version", [0, 2, 3, 5])
def test_leave_group_with_an_empty_group_id_is_a_top_level_invalid_group_id(version: int) -> None:
    req = capi.LeaveGroupRequest("", (capi.LeavingMember("some-member"),))
    with running() as srv:

        async def go() -> capi.LeaveGroupResponse:
            async with connection(srv.port) as conn:
                msg = await conn.request(wm.leave_to_wire(req, version), version)
                return wm.leave_response_from_wire(msg)

        answer = run(go())
    assert answer.error_code == INVALID_GROUP_ID and not answer.members


def _emptied_hold() -> tuple[object, list[object]]:
    """A classic group whose w2 fell silent (held in a connect group, docs/migration.md "Held
    work") and whose w1 then left: no member, both workers' work held for the scheduled delay."""
    coord = coordinator(scheduled_rebalance_max_delay_ms=60_000)
    w1, _ = stable_classic(coord)
    for t in range(3_000, 14_000, 3_000):
        assert cbeat(coord, w1, 1, now=t) == 0
        coord.advance(t)
    coord.advance(14_000)
    left = coord.classic_leave(capi.LeaveGroupRequest(G, (capi.LeavingMember(w1),)), 15_000)
    assert left.error_code == 0
    group = coord.groups[G]
    assert isinstance(group, ConnectGroup) and not group.members and len(group.metadata.held) == 2
    return coord, list(group.metadata.held)


def test_an_emptied_group_holding_work_describes_as_a_connect_group() -> None:
    """Deviation 14: no classic generation while the work is held, so no elected protocol and no
    assignment bytes to show; Kafka (which never converts) would show its Empty classic group."""
    coord, _ = _emptied_hold()
    [row] = wm.describe_groups_response_to_wire([coord.describe_any(G)], 5).groups
    shown = (row.group_state, row.protocol_type, row.protocol_data, row.members)
    assert shown == ("Empty", "connect", "", [])
    assert "14. **A classic group held as a connect group describes as one." in DOCS.read_text()


def test_an_emptied_group_holding_work_refuses_another_protocol_type_until_the_hold_ends() -> None:
    """Deviation 15: Kafka lets an Empty classic group take any protocol type; the bridge keeps the
    hold (the departed workers may still run their tasks) and answers INCONSISTENT_GROUP_PROTOCOL
    until it ends, then the group id is free."""
    coord, held = _emptied_hold()
    consumer = capi.JoinGroupRequest(G, "", "consumer", (("range", b"\0\1"),), 10_000, 30_000)
    refused = coord.classic_join(consumer, 16_000)
    assert refused is not None and refused.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert coord.groups[G].metadata.held == tuple(held)  # type: ignore[union-attr]
    after = max(h.deadline_ms for h in held) + 1  # type: ignore[attr-defined]
    coord.advance(after)
    taken = coord.classic_join(consumer, after)
    assert taken is not None and taken.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert isinstance(coord.groups[G], ClassicGroup)  # a fresh classic group, as Kafka's
    assert "15. **An emptied group that holds work keeps its protocol type." in DOCS.read_text()
