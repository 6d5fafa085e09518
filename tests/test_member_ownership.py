"""Member ownership (issue 15): a member id never lets one principal act on another's member.

Driven through the coordinator with typed requests carrying ``principal`` (the bridge puts the
connection's principal there): for each member-scoped API, a second principal naming the first
one's member id (or static instance id) is refused, with what an unknown member gets, and the
member is left exactly as it was; its owner still acts on it. Ownership is persisted with the
member, so a replay of the records (through their wire bytes) keeps it, and so does a conversion
between classic and connect groups. Pure engine: no process, no clock.
"""

from __future__ import annotations

import pytest

from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.api import (
    HeartbeatRequest,
    InstallAssignmentRequest,
    PrepareAssignmentRequest,
)
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import ClassicGroup, ClassicGroupState
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect.group import ConnectGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.migration.conversion import downgrade
from connect_bridge.state.model import ANONYMOUS, ClientAssignor, ConfigView, MemberMetadata
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record, RecordType

G = "connect-cluster"
ALICE, BOB = "User:alice", "User:bob"
OFFSET = 3
VIEW = ConfigView.of(OFFSET, {"A": 2})
UNKNOWN = int(ErrorCode.UNKNOWN_MEMBER_ID)
FENCED_INSTANCE = int(ErrorCode.FENCED_INSTANCE_ID)


def coordinator() -> GroupCoordinator:
    coord = GroupCoordinator(CoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    coord.default_view = VIEW
    return coord


def beat(
    coord: GroupCoordinator,
    member_id: str,
    epoch: int,
    principal: str,
    *,
    instance: str | None = None,
    now: int = 0,
    **fields: object,
):
    if epoch == 0:
        fields.setdefault("rebalance_timeout_ms", 60_000)
        fields.setdefault("url", f"http://{principal}/")
        fields.setdefault("config_offset", OFFSET)
        fields.setdefault("owned", frozenset())
    req = HeartbeatRequest(G, member_id, epoch, instance_id=instance, principal=principal, **fields)  # type: ignore[arg-type]
    return coord.connect_heartbeat(req, now)


def protocols(url: str) -> tuple[tuple[str, bytes], ...]:
    owned = Assignment.build(0, "", "", OFFSET, [], ())
    return (
        ("sessioned", encode_subscription(Subscription(url, OFFSET, owned), 2)),
        ("default", encode_subscription(Subscription(url, OFFSET), 0)),
    )


def join(coord: GroupCoordinator, member_id: str, principal: str, *, instance: str | None = None, token=None):
    req = capi.JoinGroupRequest(
        G,
        member_id,
        "connect",
        protocols(f"http://{principal}/"),
        group_instance_id=instance,
        token=token,
        principal=principal,
    )
    return coord.classic_join(req, 0)


def sync(
    coord: GroupCoordinator, member_id: str, generation: int, principal: str, assignments=(), token=None
):
    req = capi.SyncGroupRequest(
        G,
        member_id,
        generation,
        protocol_type="connect",
        protocol_name="sessioned",
        assignments=assignments,
        token=token,
        principal=principal,
    )
    return coord.classic_sync(req, 0)


def heartbeat(coord: GroupCoordinator, member_id: str, generation: int, principal: str) -> int:
    return coord.classic_heartbeat(
        capi.HeartbeatRequest(G, member_id, generation, principal=principal), 0
    ).error_code


def leave(coord: GroupCoordinator, principal: str, *members: tuple[str, str | None]):
    leaving = tuple(capi.LeavingMember(mid, instance) for mid, instance in members)
    return coord.classic_leave(capi.LeaveGroupRequest(G, leaving, principal=principal), 0).members


def connect_member(
    coord: GroupCoordinator, principal: str = ALICE, instance: str | None = None
) -> tuple[str, int]:
    """A new-protocol member of ``principal``, settled at its epoch: (member id, epoch)."""
    resp = beat(coord, "", 0, principal, instance=instance)
    assert resp.error_code == 0, resp
    member_id, epoch = resp.member_id, resp.member_epoch
    items = resp.assignment.items if resp.assignment is not None else frozenset()
    resp = beat(coord, member_id, epoch, principal, owned=items)
    assert resp.error_code == 0, resp
    return member_id, resp.member_epoch


def classic_member(
    coord: GroupCoordinator, principal: str = ALICE, instance: str | None = None
) -> tuple[str, int]:
    """A stable one-member classic group of ``principal``: (member id, generation)."""
    if instance is None:
        first = join(coord, "", principal)
        assert first is not None and first.error_code == int(ErrorCode.MEMBER_ID_REQUIRED)
        member_id = first.member_id
        assert join(coord, member_id, principal, token="j") is None
    else:
        assert join(coord, "", principal, instance=instance, token="j") is None
    coord.advance(0)
    joined = dict(coord.drain_responses())["j"]
    assert joined.error_code == 0, joined
    member_id, generation = joined.member_id, joined.generation_id
    assignment = encode_assignment(Assignment.build(0, member_id, "http://x/", OFFSET, [], ()), 2)
    resp = sync(coord, member_id, generation, principal, ((member_id, assignment),))
    assert resp is not None and resp.error_code == 0, resp
    return member_id, generation


def connect_group(coord: GroupCoordinator) -> ConnectGroup:
    group = coord.groups[G]
    assert isinstance(group, ConnectGroup)
    return group


def classic_group(coord: GroupCoordinator) -> ClassicGroup:
    group = coord.groups[G]
    assert isinstance(group, ClassicGroup)
    return group


def replayed(coord: GroupCoordinator, records: list[Record]) -> GroupCoordinator:
    """A fresh coordinator loaded from ``records`` after a round trip through their wire bytes."""
    fresh = coordinator()
    fresh.replay([decode_record(*encode_record(r)) for r in records], 1)
    return fresh


# --- connect groups: ConnectGroupHeartbeat at every epoch, PrepareAssignment, InstallAssignment


@pytest.mark.parametrize("epoch", ["current", 0, -1])
def test_connect_heartbeat_with_another_principals_member_id_is_an_unknown_member(epoch) -> None:
    coord = coordinator()
    alice, alice_epoch = connect_member(coord)
    before = connect_group(coord).members[alice].current
    asked = alice_epoch if epoch == "current" else epoch
    resp = beat(coord, alice, asked, BOB)
    assert (resp.error_code, resp.assignment) == (UNKNOWN, None)
    assert resp.error_message == f"member {alice} is not in the group"  # as for an id nobody has
    assert connect_group(coord).members[alice].current == before
    assert beat(coord, alice, alice_epoch, ALICE).error_code == 0


def test_connect_static_member_cannot_be_taken_over_by_another_principal() -> None:
    coord = coordinator()
    alice, _ = connect_member(coord, instance="worker-1")
    assert beat(coord, alice, -2, ALICE, instance="worker-1").error_code == 0  # released (-2)
    taken = beat(coord, "", 0, BOB, instance="worker-1")
    assert taken.error_code == FENCED_INSTANCE
    assert beat(coord, alice, -1, BOB, instance="worker-1").error_code == UNKNOWN
    assert set(connect_group(coord).members) == {alice}
    back = beat(coord, alice, 0, ALICE, instance="worker-1")
    assert (back.error_code, back.member_id) == (0, alice)


def test_prepare_and_install_assignment_need_the_members_own_principal() -> None:
    coord = coordinator()
    assignor = ClientAssignor("incremental-cooperative", 1, 2, 0, 2, b"")
    resp = beat(coord, "", 0, ALICE, client_assignors=(assignor,))
    alice = resp.member_id
    prepare = coord.prepare_assignment(
        PrepareAssignmentRequest(G, alice, resp.member_epoch, principal=BOB), 0
    )
    assert prepare.error_code == UNKNOWN and prepare.members == ()
    own = coord.prepare_assignment(PrepareAssignmentRequest(G, alice, resp.member_epoch, principal=ALICE), 0)
    assert own.error_code == 0 and [m.member_id for m in own.members] == [alice]
    install = InstallAssignmentRequest(G, alice, resp.member_epoch, own.group_epoch, principal=BOB)
    assert coord.install_assignment(install, 0).error_code == UNKNOWN
    assert connect_group(coord).assignment_epoch < own.group_epoch  # nothing was installed


# --- classic groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, static members


def test_classic_apis_with_another_principals_member_id_are_unknown_members() -> None:
    coord = coordinator()
    alice, generation = classic_member(coord)
    group = classic_group(coord)
    join_resp = join(coord, alice, BOB)
    assert join_resp is not None and join_resp.error_code == UNKNOWN
    sync_resp = sync(coord, alice, generation, BOB)
    assert sync_resp is not None and sync_resp.error_code == UNKNOWN
    assert heartbeat(coord, alice, generation, BOB) == UNKNOWN
    assert leave(coord, BOB, (alice, None)) == [(alice, None, UNKNOWN)]
    assert (group.state, group.generation_id, list(group.members)) == (
        ClassicGroupState.STABLE,
        generation,
        [alice],
    )
    assert heartbeat(coord, alice, generation, ALICE) == 0
    assert leave(coord, ALICE, (alice, None)) == [(alice, None, 0)]


def test_a_leave_batch_removes_only_the_principals_own_members() -> None:
    coord = coordinator()
    alice, _ = classic_member(coord)
    bob_first = join(coord, "", BOB)
    assert bob_first is not None
    bob = bob_first.member_id
    assert join(coord, bob, BOB, token="b") is None  # parked until alice rejoins
    results = leave(coord, BOB, (alice, None), (bob, None))
    assert results == [(alice, None, UNKNOWN), (bob, None, 0)]
    assert list(classic_group(coord).members) == [alice]


def test_a_member_id_handed_out_with_member_id_required_is_its_principals() -> None:
    coord = coordinator()
    classic_member(coord)
    handed = join(coord, "", ALICE)
    assert handed is not None and handed.error_code == int(ErrorCode.MEMBER_ID_REQUIRED)
    stolen = join(coord, handed.member_id, BOB)
    assert stolen is not None and stolen.error_code == UNKNOWN
    assert handed.member_id not in classic_group(coord).members


def test_classic_static_member_cannot_be_replaced_by_another_principal() -> None:
    coord = coordinator()
    alice, generation = classic_member(coord, instance="worker-1")
    taken = join(coord, "", BOB, instance="worker-1")
    assert taken is not None and taken.error_code == FENCED_INSTANCE
    assert list(classic_group(coord).members) == [alice]
    assert heartbeat(coord, alice, generation, ALICE) == 0
    replaced = join(coord, "", ALICE, instance="worker-1")  # its own replacement: allowed
    assert replaced is not None and replaced.error_code == 0 and replaced.member_id != alice
    assert classic_group(coord).members[replaced.member_id].principal == ALICE


# --- legacy members inside a connect group, conversions, replay


def test_legacy_members_keep_their_principal_through_upgrade_and_downgrade() -> None:
    coord = coordinator()
    alice, generation = classic_member(coord)
    carol, _ = connect_member(coord, "User:carol")  # upgrades the group: alice is a legacy member
    assert connect_group(coord).members[alice].metadata.principal == ALICE
    assert heartbeat(coord, alice, generation, BOB) == UNKNOWN
    join_resp = join(coord, alice, BOB)
    assert join_resp is not None and join_resp.error_code == UNKNOWN
    assert leave(coord, BOB, (alice, None)) == [(alice, None, UNKNOWN)]
    assert alice in connect_group(coord).members
    assert beat(coord, carol, -1, "User:carol").error_code == 0  # the last new member leaves
    downgraded = ClassicGroup(G, coord.config, coord.timers)
    downgrade(connect_group(coord), downgraded, 0)  # what the coordinator does once it may
    assert downgraded.members[alice].principal == ALICE


def test_replay_keeps_ownership_of_connect_and_classic_members() -> None:
    coord = coordinator()
    alice, epoch = connect_member(coord)
    records = coord.drain_records()
    fresh = replayed(coord, records)
    assert connect_group(fresh).members[alice].metadata.principal == ALICE
    assert beat(fresh, alice, epoch, BOB).error_code == UNKNOWN
    assert beat(fresh, alice, epoch, ALICE).error_code == 0

    classic = coordinator()
    member, generation = classic_member(classic)
    fresh = replayed(classic, classic.drain_records())
    assert classic_group(fresh).members[member].principal == ALICE
    assert heartbeat(fresh, member, generation, BOB) == UNKNOWN
    assert heartbeat(fresh, member, generation, ALICE) == 0


def test_anonymous_records_are_byte_for_byte_what_they_were() -> None:
    """The principal is a tagged field whose default is User:ANONYMOUS: an unauthenticated bridge
    writes the bytes it wrote before, and records written before read as anonymous members."""
    anonymous = Record(RecordType.MEMBER_METADATA, G, "m", MemberMetadata(url="http://w/"))
    owned = Record(RecordType.MEMBER_METADATA, G, "m", MemberMetadata(url="http://w/", principal=ALICE))
    _, plain = encode_record(anonymous)
    _, tagged = encode_record(owned)
    assert plain is not None and tagged is not None
    assert b"User:" not in plain and plain.endswith(b"\x00")  # no tagged fields
    assert tagged.startswith(plain[:-1]) and tagged.endswith(ALICE.encode())
    assert decode_record(*encode_record(anonymous)).value.principal == ANONYMOUS  # type: ignore[union-attr]


def test_anonymous_clients_share_members_as_before() -> None:
    """Without authentication every request is User:ANONYMOUS: a worker that reconnects (or a
    duplicate request on another connection) acts on its member as it always could."""
    coord = coordinator()
    member, epoch = connect_member(coord, ANONYMOUS)
    assert beat(coord, member, epoch, ANONYMOUS).error_code == 0
    assert beat(coord, member, -1, ANONYMOUS).error_code == 0
