"""The classic group APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups)
<-> engine values (``state.classic.api``), through the spec-derived maps of ``codecs.spec_map``.

Which fields a version carries, what an older version reads as (``None`` for a field the spec makes
nullable, else the engine default) and which missing fields make a request unsendable (a static
member below JoinGroup v5 / SyncGroup v3 / Heartbeat v3 / LeaveGroup v3, ListGroups filters below
v4/v5) all come from Kafka's specs; what is written here is only what the specs cannot say: the
two shapes of LeaveGroup, and how DescribeGroups shows groups that are not classic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.spec_map import (
    IGNORED,
    Field,
    SameAs,
    SpecMap,
    StructMap,
    as_bytes,
    element,
    empty_if_null,
    read_each,
    unsendable,
)
from connect_bridge.state import api as napi
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import (
    PROTOCOL_TYPE_CONNECT,
    ClassicDescribedGroup,
    ClassicDescribedMember,
)
from connect_bridge.wire.connect import connect_state_name

CONNECT_PROTOCOL_TYPE = PROTOCOL_TYPE_CONNECT

ListedGroup = tuple[str, str, str, str]
"""(group id, protocol type, state, group type): ``GroupCoordinator.list_groups()`` rows."""

CLASSIC_STATE_OF_CONNECT: Mapping[str, str] = {
    "EMPTY": "Empty",
    "ASSIGNING": "PreparingRebalance",
    "RECONCILING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
}
"""A connect group's state in DescribeGroups, in the classic vocabulary its tools understand."""

_TEXT = Field(from_wire=empty_if_null)
"""A string the engine keeps as ``str`` (a null reads as "")."""
_BYTES = Field(from_wire=as_bytes)
_THROTTLE = Field(const=0)


def _ids(*names: str) -> dict[str, Field]:
    return {name: _TEXT for name in names}


_PROTOCOL_ROWS = StructMap(("name", "metadata"), {"name": _TEXT, "metadata": _BYTES})

_JOIN = SpecMap(
    m.JoinGroupRequest,
    StructMap(
        capi.JoinGroupRequest,
        {
            **_ids("group_id", "member_id", "protocol_type"),
            "rebalance_timeout_ms": Field(absent=SameAs("session_timeout_ms")),
            "protocols": Field(struct=_PROTOCOL_ROWS),
        },
        extra=("client_id", "client_host", "api_version"),
    ),
)
_JOIN_RESPONSE = SpecMap(
    m.JoinGroupResponse,
    StructMap(
        capi.JoinGroupResponse,
        {
            "throttle_time_ms": _THROTTLE,
            **_ids("leader", "member_id"),
            "skip_assignment": Field(from_wire=bool),
            "members": Field(
                struct=StructMap(capi.JoinGroupMember, {"member_id": _TEXT, "metadata": _BYTES})
            ),
        },
    ),
)
_SYNC = SpecMap(
    m.SyncGroupRequest,
    StructMap(
        capi.SyncGroupRequest,
        {
            **_ids("group_id", "member_id"),
            "assignments": Field(
                struct=StructMap(("member_id", "assignment"), {"member_id": _TEXT, "assignment": _BYTES})
            ),
        },
        extra=("api_version",),
    ),
)
_SYNC_RESPONSE = SpecMap(
    m.SyncGroupResponse,
    StructMap(capi.SyncGroupResponse, {"throttle_time_ms": _THROTTLE, "assignment": _BYTES}),
)
_HEARTBEAT = SpecMap(m.HeartbeatRequest, StructMap(capi.HeartbeatRequest, _ids("group_id", "member_id")))
_HEARTBEAT_RESPONSE = SpecMap(
    m.HeartbeatResponse, StructMap(capi.HeartbeatResponse, {"throttle_time_ms": _THROTTLE})
)
_LEAVE = SpecMap(
    m.LeaveGroupRequest,
    StructMap(
        capi.LeaveGroupRequest,
        {
            "group_id": _TEXT,
            "member_id": IGNORED,  # v0-2's single member: see leave_to_wire / leave_from_wire
            "members": Field(struct=StructMap(capi.LeavingMember, {"member_id": _TEXT})),
        },
    ),
)
_LEAVE_RESPONSE = SpecMap(
    m.LeaveGroupResponse,
    StructMap(
        capi.LeaveGroupResponse,
        {
            "throttle_time_ms": _THROTTLE,
            "members": Field(
                struct=StructMap(("member_id", "group_instance_id", "error_code"), {"member_id": _TEXT}),
                collect=list,
                null=[],
            ),
        },
    ),
)
_DESCRIBED_MEMBER = StructMap(
    ClassicDescribedMember,
    {
        **_ids("member_id", "client_id", "client_host"),
        "member_metadata": Field("metadata", from_wire=as_bytes),
        "member_assignment": Field("assignment", from_wire=as_bytes),
    },
)
_DESCRIBED_ROW = (
    "error_code",
    "error_message",
    "group_id",
    "group_state",
    "protocol_type",
    "protocol_data",
    "members",
)
_DESCRIBE_GROUPS_RESPONSE = SpecMap(
    m.DescribeGroupsResponse,
    StructMap(
        ("groups",),
        {
            "throttle_time_ms": _THROTTLE,
            "groups": Field(
                struct=StructMap(
                    _DESCRIBED_ROW,
                    {"members": Field(struct=_DESCRIBED_MEMBER), "authorized_operations": Field(const=None)},
                )
            ),
        },
    ),
)
"""Written from rows (a connect group is shown in classic terms); ``AuthorizedOperations`` is not
computed: kafka-python encodes ``None`` as Kafka's Integer.MIN_VALUE ("not provided")."""
_DESCRIBED_GROUP = StructMap(
    ClassicDescribedGroup,
    {
        **_ids("group_id", "protocol_type", "protocol_data"),
        "group_state": Field("state", from_wire=empty_if_null),
        "members": Field(struct=_DESCRIBED_MEMBER),
    },
)
_DESCRIBED_GROUP_STRUCT = element(m.DescribeGroupsResponse, "groups")
_LIST_GROUPS = SpecMap(m.ListGroupsRequest, StructMap(("states_filter", "types_filter")))
_LIST_GROUPS_RESPONSE = SpecMap(
    m.ListGroupsResponse,
    StructMap(
        ("error_code", "groups"),
        {
            "throttle_time_ms": _THROTTLE,
            "groups": Field(struct=StructMap(("group_id", "protocol_type", "group_state", "group_type"))),
        },
    ),
)
_LISTED_GROUP = StructMap(
    ("group_id", "protocol_type", "group_state", "group_type"),
    {
        **_ids("group_id", "protocol_type"),
        "group_state": Field(from_wire=empty_if_null, absent=""),
        "group_type": Field(from_wire=empty_if_null, absent=""),
    },
)
_LISTED_GROUP_STRUCT = element(m.ListGroupsResponse, "groups")


def _version_of(msg: Any) -> int:
    version = msg.version
    if version is None:
        raise ValueError(f"{type(msg).__name__} has no version: decode it (or construct it with version=)")
    return int(version)


# --- JoinGroup (v0-9), SyncGroup (v0-5), Heartbeat (v0-4) -------------------------------------------


def join_from_wire(
    msg: m.JoinGroupRequest, version: int, client_id: str | None = "", client_host: str | None = ""
) -> capi.JoinGroupRequest:
    """RebalanceTimeoutMs before v1 is the session timeout (Kafka's rule); GroupInstanceId from v5,
    Reason from v8."""
    read = _JOIN.read[version]
    return read(msg, empty_if_null(client_id), empty_if_null(client_host), version)


def join_to_wire(req: capi.JoinGroupRequest, version: int) -> m.JoinGroupRequest:
    """Raises CodecError for a static member below v5. Reason is dropped below v8 and the rebalance
    timeout below v1 (both ignorable in Kafka)."""
    return _JOIN.write[version](req)


def join_response_to_wire(resp: capi.JoinGroupResponse, version: int) -> m.JoinGroupResponse:
    """ProtocolName null becomes "" below v7 (Kafka's JoinGroupResponse does the same); member
    instance ids (v5+), ProtocolType (v7+) and SkipAssignment (v9+) exist only from their versions.
    ``error_message`` has no wire field."""
    return _JOIN_RESPONSE.write[version](resp)


def join_response_from_wire(msg: m.JoinGroupResponse) -> capi.JoinGroupResponse:
    """Before v7 an empty ProtocolName means none (null)."""
    return _JOIN_RESPONSE.read[_version_of(msg)](msg)


def sync_from_wire(msg: m.SyncGroupRequest, version: int) -> capi.SyncGroupRequest:
    return _SYNC.read[version](msg, version)


def sync_to_wire(req: capi.SyncGroupRequest, version: int) -> m.SyncGroupRequest:
    """Raises CodecError for a static member below v3; protocol type/name are dropped below v5."""
    return _SYNC.write[version](req)


def sync_response_to_wire(resp: capi.SyncGroupResponse, version: int) -> m.SyncGroupResponse:
    return _SYNC_RESPONSE.write[version](resp)


def sync_response_from_wire(msg: m.SyncGroupResponse) -> capi.SyncGroupResponse:
    return _SYNC_RESPONSE.read[_version_of(msg)](msg)


def classic_heartbeat_from_wire(msg: m.HeartbeatRequest, version: int) -> capi.HeartbeatRequest:
    return _HEARTBEAT.read[version](msg)


def classic_heartbeat_to_wire(req: capi.HeartbeatRequest, version: int) -> m.HeartbeatRequest:
    return _HEARTBEAT.write[version](req)


def classic_heartbeat_response_to_wire(resp: capi.HeartbeatResponse, version: int) -> m.HeartbeatResponse:
    return _HEARTBEAT_RESPONSE.write[version](resp)


def classic_heartbeat_response_from_wire(msg: m.HeartbeatResponse) -> capi.HeartbeatResponse:
    return capi.HeartbeatResponse(error_code=msg.error_code)


# --- LeaveGroup (v0-5) ------------------------------------------------------------------------------

_BATCH_LEAVE_SINCE = 3
"""LeaveGroup v0-2 carry one ``MemberId``; v3+ the ``Members`` batch."""


def leave_from_wire(msg: m.LeaveGroupRequest, version: int) -> capi.LeaveGroupRequest:
    """v0-2: the single MemberId; v3+: the Members batch (Reason from v5)."""
    if version < _BATCH_LEAVE_SINCE:
        return capi.LeaveGroupRequest(
            empty_if_null(msg.group_id), (capi.LeavingMember(empty_if_null(msg.member_id)),)
        )
    return _LEAVE.read[version](msg)


def leave_to_wire(req: capi.LeaveGroupRequest, version: int) -> m.LeaveGroupRequest:
    """Below v3 exactly one dynamic member can leave per request (else CodecError); reasons are
    dropped below v5."""
    if version >= _BATCH_LEAVE_SINCE:
        return _LEAVE.write[version](req)
    if len(req.members) != 1:
        raise CodecError(
            f"LeaveGroup v{version} carries exactly one member, not {len(req.members)}", field="MemberId"
        )
    if req.members[0].group_instance_id is not None:
        raise unsendable("LeaveGroup", version, "GroupInstanceId", _BATCH_LEAVE_SINCE)
    return m.LeaveGroupRequest(group_id=req.group_id, member_id=req.members[0].member_id)


def leave_response_to_wire(resp: capi.LeaveGroupResponse, version: int) -> m.LeaveGroupResponse:
    """v3+: the top-level error (NONE unless the whole request failed) plus per-member errors.
    v0-2 have one error code: the top-level one, else the first member error (Kafka's
    ``LeaveGroupResponse.getError``)."""
    if version < _BATCH_LEAVE_SINCE:
        code = resp.error_code or next((err for _, _, err in resp.members if err), 0)
        resp = capi.LeaveGroupResponse(error_code=code)
    return _LEAVE_RESPONSE.write[version](resp)


def leave_response_from_wire(msg: m.LeaveGroupResponse) -> capi.LeaveGroupResponse:
    """v0-2 responses carry no member list (their one error code is ``error_code``)."""
    return _LEAVE_RESPONSE.read[_version_of(msg)](msg)


# --- DescribeGroups (v0-6) --------------------------------------------------------------------------


def _dead(group_id: str, message: str, version: int) -> tuple[Any, ...]:
    """Kafka's answer for a group it cannot describe: Dead with no error below v6, the error and
    ``message`` from v6."""
    if version >= 6:
        return (int(ErrorCode.GROUP_ID_NOT_FOUND), message, group_id, "Dead", "", "", ())
    return (0, None, group_id, "Dead", "", "", ())


def _connect_as_classic(g: napi.DescribedGroup) -> tuple[Any, ...]:
    """A connect group in classic terms, so classic tooling sees a live group: the assignor as
    protocol data while Stable, members with ids and client id/host but no metadata/assignment."""
    state = CLASSIC_STATE_OF_CONNECT.get(g.state, g.state)
    members = [
        ClassicDescribedMember(
            d.member_id, d.instance_id, getattr(d, "client_id", ""), getattr(d, "client_host", ""), b"", b""
        )
        for d in g.members
    ]
    pdata = g.assignor if state == "Stable" else ""
    return (g.error_code, None, g.group_id, state, CONNECT_PROTOCOL_TYPE, pdata, members)


def _described_row(
    g: ClassicDescribedGroup | napi.DescribedGroup, version: int, connect_as_classic: bool
) -> tuple[Any, ...]:
    if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return _dead(g.group_id, f"Group {g.group_id} not found.", version)
    if isinstance(g, ClassicDescribedGroup):
        return (g.error_code, None, g.group_id, g.state, g.protocol_type, g.protocol_data, g.members)
    if not connect_as_classic:
        return _dead(g.group_id, f"Group {g.group_id} is not a classic group.", version)
    return _connect_as_classic(g)


def describe_groups_response_to_wire(
    groups: Iterable[ClassicDescribedGroup | napi.DescribedGroup],
    version: int,
    *,
    connect_as_classic: bool = True,
) -> m.DescribeGroupsResponse:
    """Classic groups as Kafka describes them; an unknown one (GROUP_ID_NOT_FOUND) is Kafka's answer
    for an unknown id: Dead with no error below v6, the error and "Group X not found." from v6.

    Connect groups (``DescribedGroup``): with ``connect_as_classic`` (the default) in classic terms
    (:func:`_connect_as_classic`, state via :data:`CLASSIC_STATE_OF_CONNECT`, protocol type
    "connect"). Without it, Kafka 3.8+'s literal answer for a non-classic group: Dead, and from v6
    GROUP_ID_NOT_FOUND "Group X is not a classic group."."""
    rows = [_described_row(g, version, connect_as_classic) for g in groups]
    return _DESCRIBE_GROUPS_RESPONSE.write[version]((rows,))


def describe_groups_response_from_wire(msg: m.DescribeGroupsResponse) -> list[ClassicDescribedGroup]:
    read = _DESCRIBED_GROUP.reader(_DESCRIBED_GROUP_STRUCT, _version_of(msg))
    return read_each(read, msg.groups or (), "Groups")


# --- ListGroups (v0-5) ------------------------------------------------------------------------------


def list_groups_response_to_wire(
    groups: Iterable[ListedGroup], request: m.ListGroupsRequest | None, version: int, error_code: int = 0
) -> m.ListGroupsResponse:
    """Connect group states are spelled as Kafka spells consumer group states ("Stable",
    "Assigning"...). The request's StatesFilter (v4+) and TypesFilter (v5+) apply, case-insensitively
    as in Kafka; an empty filter matches everything."""
    states = (
        {s.lower() for s in (request.states_filter or ())} if request is not None and version >= 4 else set()
    )
    types = (
        {t.lower() for t in (request.types_filter or ())} if request is not None and version >= 5 else set()
    )
    listed = []
    for group_id, protocol_type, state, group_type in groups:
        name = connect_state_name(state)
        if states and name.lower() not in states:
            continue
        if types and group_type.lower() not in types:
            continue
        listed.append((group_id, protocol_type, name, group_type))
    return _LIST_GROUPS_RESPONSE.write[version]((error_code, listed))


def list_groups_to_wire(
    version: int, states: Iterable[str] = (), types: Iterable[str] = ()
) -> m.ListGroupsRequest:
    """Raises CodecError for a filter the version cannot carry (states v4+, types v5+)."""
    return _LIST_GROUPS.write[version]((list(states), list(types)))


def list_groups_response_from_wire(msg: m.ListGroupsResponse) -> list[ListedGroup]:
    """Rows as ``list_groups()`` gives them; state is "" below v4 and type "" below v5 (check
    ``msg.error_code`` first: the rows mean nothing when the request failed)."""
    read = _LISTED_GROUP.reader(_LISTED_GROUP_STRUCT, _version_of(msg))
    return read_each(read, msg.groups or (), "Groups")
