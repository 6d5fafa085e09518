"""wire.maps: engine value -> wire message -> bytes -> wire message -> engine value, for every version."""

from __future__ import annotations

import pytest

from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.codecs.requests import (
    decode_request,
    decode_response,
    encode_request,
    encode_response_frame,
)
from connect_bridge.state import api as napi
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import ClassicDescribedGroup, ClassicDescribedMember
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import EMPTY, AssignedMetadata, ClientAssignor, ConfigView
from connect_bridge.wire import maps as wm

ITEMS = frozenset(
    {ConnectorTaskId("a", -1), ConnectorTaskId("a", 0), ConnectorTaskId("a", 2), ConnectorTaskId("b", 1)}
)
OTHER = frozenset({ConnectorTaskId("b", -1), ConnectorTaskId("b", 0)})
HOST = "/10.0.0.7"


def request_trip(msg, version: int, client_id: str = "worker-1"):
    """Encode as a client would, decode as the server does: (body, header client id)."""
    decoded = decode_request(encode_request(msg, version, 17, client_id))
    assert decoded.api_version == version and decoded.correlation_id == 17
    return decoded.body, decoded.client_id


def response_trip(msg, version: int):
    return decode_response(msg.API_KEY, version, encode_response_frame(msg.API_KEY, version, 17, msg))


# --- ConnectGroupHeartbeat -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "req",
    [
        napi.HeartbeatRequest(
            group_id="connect-cluster",
            member_id="",
            member_epoch=0,
            instance_id="w1",
            rebalance_timeout_ms=60000,
            server_assignor=None,
            client_assignors=(
                ClientAssignor("sessioned", 0, 2, 1, 2, b"\x01\x02"),
                ClientAssignor("eager", 0, 0),
            ),
            owned=ITEMS,
            url="http://w1:8083/",
            config_offset=12,
            client_id="worker-1",
            client_host=HOST,
        ),
        # A steady heartbeat: everything "unchanged".
        napi.HeartbeatRequest("connect-cluster", "m1", 4, client_id="worker-1", client_host=HOST),
        # Empty, not null: "I own nothing" / "no client-side assignors".
        napi.HeartbeatRequest(
            "g",
            "m1",
            4,
            server_assignor="uniform",
            client_assignors=(),
            owned=EMPTY,
            config_offset=0,
            client_id="worker-1",
            client_host=HOST,
        ),
        napi.HeartbeatRequest("g", "m1", -1, client_id="worker-1", client_host=HOST),
        napi.HeartbeatRequest("g", "m1", -2, instance_id="w1", client_id="worker-1", client_host=HOST),
    ],
)
def test_connect_heartbeat_request_round_trip(req: napi.HeartbeatRequest) -> None:
    body, client_id = request_trip(wm.heartbeat_to_wire(req), 0)
    assert wm.heartbeat_from_wire(body, client_id, HOST) == req


def test_connect_heartbeat_null_versus_empty() -> None:
    def trip(req: napi.HeartbeatRequest) -> napi.HeartbeatRequest:
        body, _ = request_trip(wm.heartbeat_to_wire(req), 0)
        return wm.heartbeat_from_wire(body, None, None)

    unchanged = trip(napi.HeartbeatRequest("g", "m", 3))
    assert unchanged.owned is None and unchanged.client_assignors is None and unchanged.url is None
    assert unchanged.config_offset is None and unchanged.rebalance_timeout_ms == -1
    assert (unchanged.client_id, unchanged.client_host) == ("", "")
    empty = trip(napi.HeartbeatRequest("g", "m", 3, client_assignors=(), owned=EMPTY))
    assert empty.owned == EMPTY and empty.owned is not None and empty.client_assignors == ()


def test_connect_heartbeat_negative_task_id_is_codec_error() -> None:
    cls = m.ConnectGroupHeartbeatRequest
    bad = cls(
        group_id="g",
        member_id="m",
        member_epoch=3,
        connectors_and_tasks=cls.ConnectorsAndTasks(
            connectors=["a"], tasks=[cls.ConnectorsAndTasks.ConnectorTasks(connector="a", task_ids=[0, -1])]
        ),
    )
    body, _ = request_trip(bad, 0)  # the bytes are well-formed: the value is what is invalid
    with pytest.raises(CodecError) as exc:
        wm.heartbeat_from_wire(body, "c", HOST)
    assert "TaskIds" in exc.value.field
    # and a client cannot produce one either
    with pytest.raises(CodecError):
        wm.heartbeat_to_wire(napi.HeartbeatRequest("g", "m", 3, owned=frozenset({ConnectorTaskId("a", -3)})))


@pytest.mark.parametrize(
    "resp",
    [
        napi.HeartbeatResponse(
            member_id="m1",
            member_epoch=5,
            heartbeat_interval_ms=3000,
            assignment=napi.MemberAssignment(ITEMS, "m1", "http://w1:8083/", 12),
        ),
        napi.HeartbeatResponse(
            member_id="m1",
            member_epoch=5,
            heartbeat_interval_ms=3000,
            assignment=napi.MemberAssignment(ITEMS, "m1", "http://w1:8083/", 12, 3, 2, b"\x00meta"),
        ),
        napi.HeartbeatResponse(member_id="m1", member_epoch=5, heartbeat_interval_ms=3000),
        napi.HeartbeatResponse(
            member_id="m2", member_epoch=6, assignment=napi.MemberAssignment(EMPTY, "", "", -1)
        ),
        napi.HeartbeatResponse(
            error_code=int(ErrorCode.COMPUTE_ASSIGNMENT),
            member_id="m1",
            member_epoch=5,
            heartbeat_interval_ms=3000,
        ),
        napi.HeartbeatResponse(
            error_code=int(ErrorCode.INVALID_REQUEST), error_message="MemberEpoch must be >= -2"
        ),
    ],
)
def test_connect_heartbeat_response_round_trip(resp: napi.HeartbeatResponse) -> None:
    wire = response_trip(wm.heartbeat_response_to_wire(resp, 0), 0)
    assert wm.heartbeat_response_from_wire(wire) == resp


def test_connect_heartbeat_response_empty_assignment_is_not_null() -> None:
    resp = napi.HeartbeatResponse(
        member_id="m", member_epoch=2, assignment=napi.MemberAssignment(EMPTY, "", "", -1)
    )
    wire = response_trip(wm.heartbeat_response_to_wire(resp, 0), 0)
    assert wire.assignment is not None and wire.assignment.leader_id is None
    assert wm.heartbeat_response_from_wire(wire).assignment == resp.assignment


# --- ConnectGroupPrepareAssignment / InstallAssignment ------------------------------------------------


def test_prepare_round_trip() -> None:
    req = napi.PrepareAssignmentRequest("g", "m1", 7)
    body, _ = request_trip(wm.prepare_to_wire(req), 0)
    assert wm.prepare_from_wire(body) == req

    resp = napi.PrepareAssignmentResponse(
        group_epoch=8,
        assignor_name="sessioned",
        config_offset=12,
        connectors={"a": 3, "b": 2, "c": 0},
        members=(
            napi.PreparedMember(
                "m1", 7, "w1", "http://w1:8083/", 12, ClientAssignor("sessioned", 2, 2, 1, 2, b"x"), ITEMS
            ),
            napi.PreparedMember("m2", 6, None, "http://w2:8083/", -1, None, EMPTY),
        ),
    )
    wire = response_trip(wm.prepare_response_to_wire(resp, 0), 0)
    assert wm.prepare_response_from_wire(wire) == resp

    error = napi.PrepareAssignmentResponse(
        error_code=int(ErrorCode.UNKNOWN_MEMBER_ID), error_message="not chosen"
    )
    assert wm.prepare_response_from_wire(response_trip(wm.prepare_response_to_wire(error, 0), 0)) == error


def test_install_round_trip() -> None:
    for req in (
        napi.InstallAssignmentRequest("g", "m1", 7, 8, 0, {"m1": ITEMS, "m2": OTHER, "m3": EMPTY}),
        napi.InstallAssignmentRequest("g", "m1", 7, 8, 1, {}),
        napi.InstallAssignmentRequest(
            "g", "m1", 7, 8, 0, {"m1": ITEMS, "m2": OTHER}, {"m2": AssignedMetadata(2, b"\x01m2")}
        ),
    ):
        body, _ = request_trip(wm.install_to_wire(req), 0)
        assert wm.install_from_wire(body) == req
    for resp in (
        napi.InstallAssignmentResponse(),
        napi.InstallAssignmentResponse(int(ErrorCode.INVALID_ASSIGNMENT), "task a-3 is not configured"),
    ):
        assert wm.install_response_from_wire(response_trip(wm.install_response_to_wire(resp, 0), 0)) == resp


def test_install_metadata_and_error_reach_the_heartbeat_on_the_wire() -> None:
    """InstallAssignment's Members[].MetadataVersion/Metadata and Error travel, through the target,
    to each member's ConnectGroupHeartbeat Assignment."""
    coord = GroupCoordinator(CoordinatorConfig())
    coord.set_config("g", ConfigView.of(3, {"a": 1}), 0)
    assignor = ClientAssignor("sessioned", 0, 2, 0, 2)

    def heartbeat(req: napi.HeartbeatRequest) -> m.ConnectGroupHeartbeatResponse:
        body, client_id = request_trip(wm.heartbeat_to_wire(req), 0)
        resp = coord.connect_heartbeat(wm.heartbeat_from_wire(body, client_id, HOST), 0)
        return response_trip(wm.heartbeat_response_to_wire(resp, 0), 0)

    for mid in ("m1", "m2"):
        heartbeat(napi.HeartbeatRequest("g", mid, 0, rebalance_timeout_ms=1000, client_assignors=(assignor,)))
    epoch = {mid: coord.groups["g"].members[mid].current.member_epoch for mid in ("m1", "m2")}
    prepared = coord.prepare_assignment(napi.PrepareAssignmentRequest("g", "m1", epoch["m1"]), 0)
    assert prepared.error_code == 0, prepared.error_message
    cls = m.ConnectGroupInstallAssignmentRequest
    wire_install = cls(
        group_id="g",
        member_id="m1",
        member_epoch=epoch["m1"],
        group_epoch=prepared.group_epoch,
        error=0,
        members=[
            cls.Member(
                member_id=mid,
                connectors_and_tasks=m.connectors_and_tasks(work),
                metadata_version=version,
                metadata=data,
            )
            for mid, work, version, data in (
                ("m1", frozenset({ConnectorTaskId("a", -1)}), 2, b"one"),
                ("m2", frozenset({ConnectorTaskId("a", 0)}), 2, b"two"),
            )
        ],
    )
    body, _ = request_trip(wire_install, 0)
    assert coord.install_assignment(wm.install_from_wire(body), 0).error_code == 0
    for mid, data in (("m1", b"one"), ("m2", b"two")):
        wire = heartbeat(napi.HeartbeatRequest("g", mid, epoch[mid], owned=EMPTY))
        assert wire.error_code == 0 and wire.member_epoch == prepared.group_epoch
        assert (wire.assignment.error, wire.assignment.metadata_version, wire.assignment.metadata) == (
            0,
            2,
            data,
        )
        epoch[mid] = wire.member_epoch


def test_install_rejects_bad_members() -> None:
    cls = m.ConnectGroupInstallAssignmentRequest
    cat = m.connectors_and_tasks(ITEMS)
    twice = cls(
        group_id="g",
        member_id="m1",
        member_epoch=7,
        group_epoch=8,
        error=0,
        members=[cls.Member(member_id="m1", connectors_and_tasks=cat, metadata_version=0, metadata=b"")] * 2,
    )
    with pytest.raises(CodecError, match="twice"):
        wm.install_from_wire(request_trip(twice, 0)[0])
    negative = cls(
        group_id="g",
        member_id="m1",
        member_epoch=7,
        group_epoch=8,
        error=0,
        members=[
            cls.Member(
                member_id="m1",
                connectors_and_tasks=m.WireConnectorsAndTasks([], [m.WireConnectorTasks("a", [-2])]),
                metadata_version=0,
                metadata=b"",
            )
        ],
    )
    with pytest.raises(CodecError) as exc:
        wm.install_from_wire(request_trip(negative, 0)[0])
    assert exc.value.field.startswith("Members[0]")


# --- ConnectGroupDescribe ---------------------------------------------------------------------------


def _described_group(revoking=EMPTY) -> napi.DescribedGroup:
    return napi.DescribedGroup(
        group_id="g",
        group_type="connect",
        state="RECONCILING",
        group_epoch=9,
        assignment_epoch=9,
        assignor="sessioned",
        leader_id="m1",
        leader_url="http://w1:8083/",
        config_offset=12,
        members=(
            napi.DescribedMember(
                "m1", "w1", "new", 9, "STABLE", "http://w1:8083/", 12, ITEMS, revoking, ITEMS
            ),
            napi.DescribedMember(
                "m2", None, "sessioned", 8, "UNRELEASED", "http://w2:8083/", 11, EMPTY, EMPTY, OTHER
            ),
        ),
    )


def test_connect_describe_round_trip() -> None:
    body, _ = request_trip(wm.describe_to_wire(["g", "h"]), 0)
    assert wm.describe_from_wire(body) == ["g", "h"]
    assert wm.describe_from_wire(request_trip(wm.describe_to_wire([]), 0)[0]) == []

    groups = [
        _described_group(),
        napi.DescribedGroup(group_id="gone", error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), state="DEAD"),
        napi.DescribedGroup(group_id="empty", group_type="connect", state="EMPTY", group_epoch=3),
    ]
    wire = response_trip(wm.describe_response_to_wire(groups, 0, connectors={"g": {"b": 2, "a": 3}}), 0)
    assert wm.describe_response_from_wire(wire) == groups
    g = wire.groups[0]
    assert g.group_state == "Reconciling" and [(c.name, c.task_count) for c in g.connectors] == [
        ("a", 3),
        ("b", 2),
    ]
    assert g.members[1].instance_id is None and g.members[1].member_state == "UNRELEASED"
    assert wire.groups[1].error_message == "Group gone not found." and wire.groups[1].leader_id is None
    assert wire.groups[2].connectors == [] and wire.groups[2].assignor_name is None


def test_connect_describe_drops_revoking() -> None:
    revoking = frozenset({ConnectorTaskId("z", 0)})
    wire = response_trip(wm.describe_response_to_wire([_described_group(revoking)], 0), 0)
    assert wm.describe_response_from_wire(wire) == [_described_group()]


# --- JoinGroup ----------------------------------------------------------------------------------------

PROTOCOLS = (("sessioned", b"\x00\x02meta"), ("compatible", b""), ("default", b"\x00"))


def _join(v: int, **kw) -> capi.JoinGroupRequest:
    values = dict(
        group_id="connect-cluster",
        member_id="connect-1-abc" if v >= 4 else "",
        protocol_type="connect",
        protocols=PROTOCOLS,
        session_timeout_ms=10000,
        rebalance_timeout_ms=60000 if v >= 1 else 10000,
        group_instance_id="w1" if v >= 5 else None,
        reason="rebalance requested" if v >= 8 else None,
        client_id="worker-1",
        client_host=HOST,
        api_version=v,
    )
    values.update(kw)
    return capi.JoinGroupRequest(**values)


@pytest.mark.parametrize("v", range(10))
def test_join_request_round_trip(v: int) -> None:
    for req in (_join(v), _join(v, group_instance_id=None, reason=None, protocols=())):
        body, client_id = request_trip(wm.join_to_wire(req, v), v)
        assert wm.join_from_wire(body, v, client_id, HOST) == req


@pytest.mark.parametrize("v", range(10))
def test_join_request_version_rules(v: int) -> None:
    if v < 5:
        with pytest.raises(CodecError, match="static membership"):
            wm.join_to_wire(_join(v, group_instance_id="w1"), v)
    # Ignorable fields are dropped below their version; v0's rebalance timeout is the session timeout.
    body, client_id = request_trip(wm.join_to_wire(_join(v, reason="r", rebalance_timeout_ms=45000), v), v)
    got = wm.join_from_wire(body, v, client_id, HOST)
    assert got.reason == ("r" if v >= 8 else None)
    assert got.rebalance_timeout_ms == (45000 if v >= 1 else 10000)


@pytest.mark.parametrize("v", range(10))
def test_join_response_round_trip(v: int) -> None:
    leader = capi.JoinGroupResponse(
        generation_id=4,
        protocol_type="connect" if v >= 7 else None,
        protocol_name="sessioned",
        leader="m1",
        skip_assignment=v >= 9,
        member_id="m1",
        members=(
            capi.JoinGroupMember("m1", "w1" if v >= 5 else None, b"\x00\x02a"),
            capi.JoinGroupMember("m2", None, b""),
        ),
    )
    follower = capi.JoinGroupResponse(
        generation_id=4,
        protocol_type="connect" if v >= 7 else None,
        protocol_name="sessioned",
        leader="m1",
        member_id="m2",
    )
    error = capi.JoinGroupResponse(error_code=int(ErrorCode.MEMBER_ID_REQUIRED), member_id="m3")
    for resp in (leader, follower, error):
        wire = response_trip(wm.join_response_to_wire(resp, v), v)
        assert wm.join_response_from_wire(wire) == resp
    # A null protocol name is "" below v7, null from v7 (Kafka's JoinGroupResponse fix-up).
    assert response_trip(wm.join_response_to_wire(error, v), v).protocol_name == (None if v >= 7 else "")


@pytest.mark.parametrize("v", range(9))
def test_join_response_drops_what_the_version_lacks(v: int) -> None:
    resp = capi.JoinGroupResponse(
        generation_id=1,
        protocol_type="connect",
        protocol_name="x",
        leader="m",
        skip_assignment=True,
        member_id="m",
        members=(capi.JoinGroupMember("m", "w", b""),),
        error_message="ignored",
    )
    got = wm.join_response_from_wire(response_trip(wm.join_response_to_wire(resp, v), v))
    assert got.skip_assignment is False and got.error_message is None
    assert got.protocol_type == ("connect" if v >= 7 else None)
    assert got.members[0].group_instance_id == ("w" if v >= 5 else None)


# --- SyncGroup ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("v", range(6))
def test_sync_round_trip(v: int) -> None:
    leader = capi.SyncGroupRequest(
        group_id="g",
        member_id="m1",
        generation_id=4,
        group_instance_id="w1" if v >= 3 else None,
        protocol_type="connect" if v >= 5 else None,
        protocol_name="sessioned" if v >= 5 else None,
        assignments=(("m1", b"\x00\x01"), ("m2", b"")),
        api_version=v,
    )
    follower = capi.SyncGroupRequest("g", "m2", 4, api_version=v)
    for req in (leader, follower):
        body, _ = request_trip(wm.sync_to_wire(req, v), v)
        assert wm.sync_from_wire(body, v) == req
    if v < 3:
        with pytest.raises(CodecError):
            wm.sync_to_wire(capi.SyncGroupRequest("g", "m", 1, group_instance_id="w"), v)

    for resp in (
        capi.SyncGroupResponse(
            protocol_type="connect" if v >= 5 else None,
            protocol_name="sessioned" if v >= 5 else None,
            assignment=b"\x00\x01assignment",
        ),
        capi.SyncGroupResponse(error_code=int(ErrorCode.REBALANCE_IN_PROGRESS)),
    ):
        assert wm.sync_response_from_wire(response_trip(wm.sync_response_to_wire(resp, v), v)) == resp


# --- Heartbeat ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("v", range(5))
def test_classic_heartbeat_round_trip(v: int) -> None:
    for req in (
        capi.HeartbeatRequest("g", "m1", 4, "w1" if v >= 3 else None),
        capi.HeartbeatRequest("g", "m1", 4),
    ):
        body, _ = request_trip(wm.classic_heartbeat_to_wire(req, v), v)
        assert wm.classic_heartbeat_from_wire(body, v) == req
    if v < 3:
        with pytest.raises(CodecError):
            wm.classic_heartbeat_to_wire(capi.HeartbeatRequest("g", "m", 1, "w"), v)
    for resp in (capi.HeartbeatResponse(), capi.HeartbeatResponse(int(ErrorCode.REBALANCE_IN_PROGRESS))):
        wire = response_trip(wm.classic_heartbeat_response_to_wire(resp, v), v)
        assert wm.classic_heartbeat_response_from_wire(wire) == resp


# --- LeaveGroup ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("v", range(6))
def test_leave_request_round_trip(v: int) -> None:
    if v < 3:
        req = capi.LeaveGroupRequest("g", (capi.LeavingMember("m1"),))
        with pytest.raises(CodecError):
            wm.leave_to_wire(
                capi.LeaveGroupRequest("g", (capi.LeavingMember("a"), capi.LeavingMember("b"))), v
            )
        with pytest.raises(CodecError):
            wm.leave_to_wire(capi.LeaveGroupRequest("g", (capi.LeavingMember("a", "w1"),)), v)
    else:
        req = capi.LeaveGroupRequest(
            "g",
            (
                capi.LeavingMember("m1", "w1", "shutting down" if v >= 5 else None),
                capi.LeavingMember("", "w2"),
                capi.LeavingMember("m3"),
            ),
        )
    body, _ = request_trip(wm.leave_to_wire(req, v), v)
    assert wm.leave_from_wire(body, v) == req


@pytest.mark.parametrize("v", range(6))
def test_leave_response_round_trip(v: int) -> None:
    unknown = int(ErrorCode.UNKNOWN_MEMBER_ID)
    batch = capi.LeaveGroupResponse(members=[("m1", "w1", 0), ("m9", None, unknown)])
    failed = capi.LeaveGroupResponse(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    wire = response_trip(wm.leave_response_to_wire(batch, v), v)
    if v >= 3:
        # Kafka v3+: top-level NONE, the member error per member.
        assert wire.error_code == 0
        assert wm.leave_response_from_wire(wire) == batch
    else:
        # v0-2 have one error code: the first member error when the request itself succeeded.
        assert wire.error_code == unknown
        assert wm.leave_response_from_wire(wire) == capi.LeaveGroupResponse(error_code=unknown)
    assert wm.leave_response_from_wire(response_trip(wm.leave_response_to_wire(failed, v), v)) == failed
    ok = capi.LeaveGroupResponse(members=[("m1", None, 0)] if v >= 3 else [])
    assert wm.leave_response_from_wire(response_trip(wm.leave_response_to_wire(ok, v), v)) == ok


# --- DescribeGroups / ListGroups ----------------------------------------------------------------------


@pytest.mark.parametrize("v", range(7))
def test_describe_groups_classic_round_trip(v: int) -> None:
    group = ClassicDescribedGroup(
        group_id="legacy",
        state="Stable",
        protocol_type="connect",
        protocol_data="sessioned",
        members=(
            ClassicDescribedMember("m1", "w1" if v >= 4 else None, "worker-1", HOST, b"\x00meta", b"\x00asg"),
            ClassicDescribedMember("m2", None, "worker-2", "/10.0.0.8", b"", b""),
        ),
    )
    empty = ClassicDescribedGroup(group_id="idle", state="Empty", protocol_type="connect")
    wire = response_trip(wm.describe_groups_response_to_wire([group, empty], v), v)
    assert wm.describe_groups_response_from_wire(wire) == [group, empty]
    if v >= 3:
        assert wire.groups[0].authorized_operations is None  # Integer.MIN_VALUE: not computed


@pytest.mark.parametrize("v", range(7))
def test_describe_groups_unknown_and_connect(v: int) -> None:
    missing = napi.DescribedGroup(group_id="nope", error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), state="DEAD")
    connect = _described_group()
    stable = napi.DescribedGroup(group_id="s", group_type="connect", state="STABLE", assignor="sessioned")
    wire = response_trip(wm.describe_groups_response_to_wire([missing, connect, stable], v), v)
    gone, live, steady = wm.describe_groups_response_from_wire(wire)
    not_found = int(ErrorCode.GROUP_ID_NOT_FOUND) if v >= 6 else 0
    assert gone == ClassicDescribedGroup(group_id="nope", error_code=not_found, state="Dead")
    if v >= 6:
        assert wire.groups[0].error_message == "Group nope not found."
    assert live == ClassicDescribedGroup(
        group_id="g",
        state="CompletingRebalance",
        protocol_type="connect",
        protocol_data="",
        members=(
            ClassicDescribedMember("m1", "w1" if v >= 4 else None, "", "", b"", b""),
            ClassicDescribedMember("m2", None, "", "", b"", b""),
        ),
    )
    assert (steady.state, steady.protocol_data) == ("Stable", "sessioned")

    literal = response_trip(wm.describe_groups_response_to_wire([connect], v, connect_as_classic=False), v)
    (only,) = wm.describe_groups_response_from_wire(literal)
    assert (only.state, only.error_code, only.members) == ("Dead", not_found, ())
    if v >= 6:
        assert literal.groups[0].error_message == "Group g is not a classic group."


GROUPS = [
    ("c1", "connect", "STABLE", "connect"),
    ("c2", "connect", "ASSIGNING", "connect"),
    ("legacy", "connect", "Stable", "classic"),
    ("idle", "", "Empty", "classic"),
]


@pytest.mark.parametrize("v", range(6))
def test_list_groups(v: int) -> None:
    body, _ = request_trip(wm.list_groups_to_wire(v), v)
    wire = response_trip(wm.list_groups_response_to_wire(GROUPS, body, v), v)
    rows = wm.list_groups_response_from_wire(wire)
    states = ["Stable", "Assigning", "Stable", "Empty"]
    assert rows == [
        (g, p, s if v >= 4 else "", t if v >= 5 else "")
        for (g, p, _, t), s in zip(GROUPS, states, strict=True)
    ]
    if v >= 4:
        body, _ = request_trip(wm.list_groups_to_wire(v, states=["stable"]), v)
        got = wm.list_groups_response_from_wire(
            response_trip(wm.list_groups_response_to_wire(GROUPS, body, v), v)
        )
        assert [r[0] for r in got] == ["c1", "legacy"]
    else:
        with pytest.raises(CodecError):
            wm.list_groups_to_wire(v, states=["Stable"])
    if v >= 5:
        body, _ = request_trip(wm.list_groups_to_wire(v, states=["Stable", "Empty"], types=["Classic"]), v)
        got = wm.list_groups_response_from_wire(
            response_trip(wm.list_groups_response_to_wire(GROUPS, body, v), v)
        )
        assert [r[0] for r in got] == ["legacy", "idle"]
    else:
        with pytest.raises(CodecError):
            wm.list_groups_to_wire(v, types=["classic"])
    # A server without the request (or with filters the version cannot carry) lists everything.
    assert len(wm.list_groups_response_to_wire(GROUPS, None, v).groups) == 4
