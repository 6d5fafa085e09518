"""Seed 000's case studies replayed step by step on the epoch engine.

Items: connector A with two tasks, connector B with one. The draft numbers tasks from 1 (AT1, AT2,
BT1); Connect numbers them from 0, so AT1 = A-0, AT2 = A-1, BT1 = B-0. The draft uses the
IncrementalCooperativeAssignor client-side, so the chosen worker installs the assignment the text
gives through PrepareAssignment / InstallAssignment. Where the draft contradicts itself the test
follows KIP-848's rules and says so (see docs/engine.md "Where the draft contradicts itself").
"""

from __future__ import annotations

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.api import (
    HeartbeatRequest,
    InstallAssignmentRequest,
    PrepareAssignmentRequest,
)
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import (
    ClientAssignor,
    ConfigView,
    CurrentAssignment,
    GroupMetadata,
    MemberMetadata,
    MemberState,
    TargetMetadata,
)
from connect_bridge.state.records import Record, RecordType

G = "connect-cluster"
AC0, AT1, AT2 = ConnectorTaskId("A", -1), ConnectorTaskId("A", 0), ConnectorTaskId("A", 1)
BC0, BT1 = ConnectorTaskId("B", -1), ConnectorTaskId("B", 0)
ALL = frozenset({AC0, AT1, AT2, BC0, BT1})
VIEW = ConfigView.of(10, {"A": 2, "B": 1})
ASSIGNOR = ClientAssignor("incremental-cooperative", 1, 2, 0, 2, b"")
DELAY = 300_000


def coordinator(session_timeout_ms: int = 10_000) -> GroupCoordinator:
    config = CoordinatorConfig(scheduled_rebalance_max_delay_ms=DELAY, session_timeout_ms=session_timeout_ms)
    coord = GroupCoordinator(config)
    coord.default_view = VIEW
    return coord


def join(coord: GroupCoordinator, member_id: str, now: int = 0):
    return coord.connect_heartbeat(
        HeartbeatRequest(
            G,
            member_id,
            0,
            rebalance_timeout_ms=60_000,
            client_assignors=(ASSIGNOR,),
            owned=frozenset(),
            url=f"http://{member_id}:8083/",
            config_offset=10,
        ),
        now,
    )


def beat(coord: GroupCoordinator, member_id: str, epoch: int, owned=None, now: int = 0):
    return coord.connect_heartbeat(HeartbeatRequest(G, member_id, epoch, owned=owned), now)


def install(coord: GroupCoordinator, member_id: str, target: dict[str, frozenset], now: int = 0) -> None:
    epoch = coord.groups[G].members[member_id].current.member_epoch
    prepared = coord.prepare_assignment(PrepareAssignmentRequest(G, member_id, epoch), now)
    assert prepared.error_code == 0, prepared.error_message
    resp = coord.install_assignment(
        InstallAssignmentRequest(G, member_id, epoch, prepared.group_epoch, 0, target), now
    )
    assert resp.error_code == 0, resp.error_message


def current(coord: GroupCoordinator) -> dict[str, tuple[int, frozenset]]:
    return {mid: (m.current.member_epoch, m.current.assigned) for mid, m in coord.groups[G].members.items()}


def test_empty_group_w1_joins_and_w2_joins() -> None:
    coord = coordinator()
    coord.set_config(G, VIEW, 0)
    group = coord.groups[G]
    # Empty group: epoch 0, target epoch 0, no members.
    assert (group.group_epoch, group.assignment_epoch, group.members) == (0, 0, {})

    # W1 joins: group epoch 1, W1 at epoch 0 with nothing; W1 is chosen to compute.
    resp = join(coord, "W1")
    assert resp.error_code == ErrorCode.COMPUTE_ASSIGNMENT
    assert (group.group_epoch, group.assignment_epoch) == (1, 0)
    assert current(coord) == {"W1": (0, frozenset())}

    install(coord, "W1", {"W1": ALL})
    assert group.assignment_epoch == 1 and group.target == {"W1": ALL}
    assert current(coord) == {"W1": (0, frozenset())}

    # W1 heartbeats: nothing to revoke, so it moves to epoch 1 with everything.
    resp = beat(coord, "W1", 0, owned=frozenset())
    assert resp.error_code == 0 and resp.member_epoch == 1 and resp.assignment.items == ALL
    assert current(coord) == {"W1": (1, ALL)}

    # W2 joins: group epoch 2. The draft's table shows W2 at epoch 0 as it is added; reconciled in the
    # same heartbeat against the current target (epoch 1, nothing for W2) it is at epoch 1 at once,
    # which is the "W2 epoch=1" of the draft's next table.
    resp = join(coord, "W2")
    assert group.group_epoch == 2 and resp.member_epoch == 1 and resp.assignment.items == frozenset()
    resp = beat(coord, "W1", 1)
    assert resp.error_code == ErrorCode.COMPUTE_ASSIGNMENT
    install(coord, "W1", {"W1": frozenset({AC0, AT1, AT2}), "W2": frozenset({BC0, BT1})})
    assert group.assignment_epoch == 2
    assert current(coord) == {"W1": (1, ALL), "W2": (1, frozenset())}

    # "W2 can be transitioned to epoch 2 but it can't have BC0, BT1 until W1 revokes them"
    # (the draft says "epoch1" there; its own next table has W2 reach epoch 2 only at the end, while
    # KIP-848 moves it to the target epoch now and keeps it UNRELEASED until W1 lets go).
    resp = beat(coord, "W2", 1)
    assert resp.member_epoch == 2 and resp.assignment.items == frozenset()
    assert group.members["W2"].current.state is MemberState.UNRELEASED

    # W1 is asked to revoke B: it keeps epoch 1 and only A's work.
    resp = beat(coord, "W1", 1)
    assert resp.member_epoch == 1 and resp.assignment.items == frozenset({AC0, AT1, AT2})
    assert group.members["W1"].current.state is MemberState.UNREVOKED
    # W2 still cannot have B while W1 has not acknowledged.
    resp = beat(coord, "W2", 2)
    assert resp.assignment is None and group.members["W2"].current.assigned == frozenset()

    # W1 acknowledges the revocation: epoch 2.
    resp = beat(coord, "W1", 1, owned=frozenset({AC0, AT1, AT2}))
    assert resp.member_epoch == 2
    assert current(coord)["W1"] == (2, frozenset({AC0, AT1, AT2}))

    # W2 heartbeats and gets B: both at epoch 2, group stable.
    resp = beat(coord, "W2", 2)
    assert resp.member_epoch == 2 and resp.assignment.items == frozenset({BC0, BT1})
    assert current(coord) == {"W1": (2, frozenset({AC0, AT1, AT2})), "W2": (2, frozenset({BC0, BT1}))}
    assert group.state.value == "STABLE"


def epoch35(coord: GroupCoordinator) -> None:
    """The case studies' starting point (epoch 35, three workers), loaded from records."""
    target = {"W1": frozenset({AC0, AT1}), "W2": frozenset({BC0, BT1}), "W3": frozenset({AT2})}
    records = [
        Record(RecordType.CONFIG, G, "", VIEW),
        Record(RecordType.TARGET_METADATA, G, "", TargetMetadata(35)),
    ]
    for mid, items in target.items():
        # W2 is the one whose session runs out; the others heartbeat rarely in this story.
        session = 10_000 if mid == "W2" else 10**9  # W1/W3 also get 10**9 from the coordinator config
        meta = MemberMetadata(
            rebalance_timeout_ms=60_000,
            session_timeout_ms=session,
            url=f"http://{mid}:8083/",
            config_offset=10,
            client_assignors=(ASSIGNOR,),
        )
        records += [
            Record(RecordType.MEMBER_METADATA, G, mid, meta),
            Record(RecordType.TARGET_MEMBER, G, mid, items),
            Record(
                RecordType.CURRENT_ASSIGNMENT, G, mid, CurrentAssignment(35, 34, MemberState.STABLE, items)
            ),
        ]
    # The draft has W3 run the client assignor; the coordinator prefers the leader, so W3 leads.
    records.append(Record(RecordType.GROUP_METADATA, G, "", GroupMetadata(group_epoch=35, leader_id="W3")))
    coord.replay(records, now_ms=0)


def w2_kicked_out(coord: GroupCoordinator) -> None:
    epoch35(coord)
    group = coord.groups[G]
    for mid in ("W1", "W3"):
        assert beat(coord, mid, 35, now=9_000).error_code == 0
    coord.advance(10_000)  # W2's session expires
    assert group.group_epoch == 36 and set(group.members) == {"W1", "W3"}
    # W3 computes and, to give W2 a chance to come back, changes nothing: B stays unassigned.
    assert beat(coord, "W3", 35, now=10_001).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    install(coord, "W3", {"W1": frozenset({AC0, AT1}), "W3": frozenset({AT2})}, now=10_001)
    assert group.assignment_epoch == 36
    for mid in ("W1", "W3"):
        assert beat(coord, mid, 35, now=10_002).member_epoch == 36
    assert current(coord) == {"W1": (36, frozenset({AC0, AT1})), "W3": (36, frozenset({AT2}))}


def test_worker_leaving_the_group() -> None:
    coord = coordinator(session_timeout_ms=10**9)
    w2_kicked_out(coord)
    group = coord.groups[G]
    # After the delay the held work is released: group epoch 37 and W3 reassigns it.
    coord.advance(10_000 + DELAY)
    assert group.group_epoch == 37
    assert beat(coord, "W3", 36, now=10_000 + DELAY).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    # (The draft writes "BC1" for W3; it means BT1, B's only task.)
    install(coord, "W3", {"W1": frozenset({AC0, AT1, BC0}), "W3": frozenset({BT1, AT2})}, now=10_000 + DELAY)
    for mid in ("W1", "W3"):
        assert beat(coord, mid, 36, now=10_001 + DELAY).member_epoch == 37
    assert current(coord) == {"W1": (37, frozenset({AC0, AT1, BC0})), "W3": (37, frozenset({BT1, AT2}))}


def test_worker_bounces_within_the_delay() -> None:
    coord = coordinator(session_timeout_ms=10**9)
    w2_kicked_out(coord)
    group = coord.groups[G]
    # The draft lets W2 come back with its old epoch 35. A removed member is unknown (the draft's own
    # rule 2), so the coordinator refuses it and W2 rejoins with epoch 0, as a fenced worker does.
    assert beat(coord, "W2", 35, now=20_000).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    join(coord, "W2", now=20_000)
    assert group.group_epoch == 37
    assert beat(coord, "W3", 36, now=20_001).error_code == ErrorCode.COMPUTE_ASSIGNMENT
    prepared = coord.prepare_assignment(PrepareAssignmentRequest(G, "W3", 36), 20_001)
    # The coordinator shows W2's held work as W2's: the assignor gives back the original assignment.
    assert {m.member_id: m.target for m in prepared.members}["W2"] == frozenset({BC0, BT1})
    install(
        coord,
        "W3",
        {"W1": frozenset({AC0, AT1}), "W2": frozenset({BC0, BT1}), "W3": frozenset({AT2})},
        now=20_001,
    )
    beat(coord, "W1", 36, now=20_002)
    beat(coord, "W3", 36, now=20_002)
    beat(coord, "W2", group.members["W2"].current.member_epoch, now=20_002)
    assert current(coord) == {
        "W1": (37, frozenset({AC0, AT1})),
        "W2": (37, frozenset({BC0, BT1})),
        "W3": (37, frozenset({AT2})),
    }
