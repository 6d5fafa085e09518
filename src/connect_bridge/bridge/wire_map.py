"""Wire messages <-> engine values: the one place the two meet, in both directions.

The server decodes requests (``*_from_wire``) and encodes responses (``*_response_to_wire``); the
reference worker clients do the reverse (``*_to_wire`` and ``*_response_from_wire``). Engine values
(``state.api``, ``state.classic_api``) are version-independent; every function here that touches a
classic API takes (or reads from the decoded message) the wire version and applies what that version
can carry, as Kafka does:

* A field the version does not have is never set on the wire object (:func:`_make`). kafka-python
  would silently skip it when encoding anyway, but Kafka's own rules differ per field: an
  *ignorable* field (JoinGroup ``Reason``, SyncGroup ``ProtocolType``/``ProtocolName``, LeaveGroup
  ``Reason``, member ``GroupInstanceId`` in responses...) is dropped, while a request that needs a
  non-ignorable one (static membership below JoinGroup v5 / SyncGroup v3 / Heartbeat v3 /
  LeaveGroup v3, a batch leave below LeaveGroup v3, ListGroups filters below v4/v5) cannot be sent at
  that version: the ``*_to_wire`` request builders raise :class:`CodecError`, like the Java client's
  ``UnsupportedVersionException``.
* kafka-python does not enforce nullability (it encodes ``None`` as length -1 in any version), so a
  string that is nullable only from some version is replaced by ``""`` below it, as Kafka's
  ``JoinGroupResponse`` does for ``ProtocolName`` before v7.

Decoding a request never raises except for what the coordinator must answer with INVALID_REQUEST
(negative task ids, null connector or member names, duplicate members, and in the Connect group APIs
any null their spec forbids, see ``requests.NULLS_ANSWERED``): :class:`CodecError`.
No I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.messages import connectors_and_tasks, items_of
from connect_bridge.codecs.requests import null_violation
from connect_bridge.state import api as napi
from connect_bridge.state import classic_api as capi
from connect_bridge.state.classic_group import ClassicDescribedGroup, ClassicDescribedMember
from connect_bridge.state.model import EMPTY, NO_METADATA, AssignedMetadata, ClientAssignor, Items

__all__ = [
    "CLASSIC_STATE_OF_CONNECT",
    "CONNECT_PROTOCOL_TYPE",
    "ListedGroup",
    "classic_heartbeat_from_wire",
    "classic_heartbeat_response_from_wire",
    "classic_heartbeat_response_to_wire",
    "classic_heartbeat_to_wire",
    "connect_state_name",
    "describe_from_wire",
    "describe_groups_response_from_wire",
    "describe_groups_response_to_wire",
    "describe_response_from_wire",
    "describe_response_to_wire",
    "describe_to_wire",
    "heartbeat_from_wire",
    "heartbeat_response_from_wire",
    "heartbeat_response_to_wire",
    "heartbeat_to_wire",
    "install_from_wire",
    "install_response_from_wire",
    "install_response_to_wire",
    "install_to_wire",
    "join_from_wire",
    "join_response_from_wire",
    "join_response_to_wire",
    "join_to_wire",
    "leave_from_wire",
    "leave_response_from_wire",
    "leave_response_to_wire",
    "leave_to_wire",
    "list_groups_response_from_wire",
    "list_groups_response_to_wire",
    "list_groups_to_wire",
    "prepare_from_wire",
    "prepare_response_from_wire",
    "prepare_response_to_wire",
    "prepare_to_wire",
    "sync_from_wire",
    "sync_response_from_wire",
    "sync_response_to_wire",
    "sync_to_wire",
]

CONNECT_PROTOCOL_TYPE = "connect"

ListedGroup = tuple[str, str, str, str]
"""(group id, protocol type, state, group type): ``GroupCoordinator.list_groups()`` rows."""

NO_ASSIGNOR_METADATA_VERSION = -1
"""PrepareAssignment ``Assignor.MetadataVersion`` of a member without metadata for the chosen assignor
(the struct is not nullable, so -1 stands for the engine's ``assignor=None``)."""

# --- Tables -----------------------------------------------------------------------------------------

# Connect group states (model.GroupState values) as Kafka spells consumer group states in ListGroups
# and ConsumerGroupDescribe (ConsumerGroupState.toString()).
_CONNECT_STATE_NAMES: Mapping[str, str] = {
    "EMPTY": "Empty",
    "ASSIGNING": "Assigning",
    "RECONCILING": "Reconciling",
    "STABLE": "Stable",
    "DEAD": "Dead",
}
_CONNECT_STATE_VALUES: Mapping[str, str] = {v: k for k, v in _CONNECT_STATE_NAMES.items()}

CLASSIC_STATE_OF_CONNECT: Mapping[str, str] = {
    "EMPTY": "Empty",
    "ASSIGNING": "PreparingRebalance",
    "RECONCILING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
}
"""A connect group's state in DescribeGroups, in the classic vocabulary its tools understand."""

# First version that carries a static member's GroupInstanceId, per classic request.
_INSTANCE_ID_SINCE: Mapping[str, int] = {"JoinGroup": 5, "SyncGroup": 3, "Heartbeat": 3, "LeaveGroup": 3}

_NOT_AUTHORIZED_OPS = None
"""DescribeGroups ``AuthorizedOperations`` when not computed: kafka-python reads that bitfield as a
set of operations and encodes ``None`` as Kafka's Integer.MIN_VALUE ("not provided")."""


def connect_state_name(state: str) -> str:
    """A connect group state as Kafka spells it ("Stable"); other strings (classic states) unchanged."""
    return _CONNECT_STATE_NAMES.get(state, state)


# --- Helpers ----------------------------------------------------------------------------------------


def _make(cls: Any, version: int | None, **values: Any) -> Any:
    """``cls(**values)`` keeping only the fields ``version`` has (all of them when ``version`` is None)."""
    if version is not None:
        fields = cls.fields
        values = {k: v for k, v in values.items() if fields[k].for_version_q(version)}
    return cls(**values)


def _s(value: str | None) -> str:
    return value if value is not None else ""


def _none_if_empty(value: str | None) -> str | None:
    return value or None


def _b(value: Any) -> bytes:
    return bytes(value) if value is not None else b""


def _require_static_ok(api: str, version: int, instance_id: str | None) -> None:
    since = _INSTANCE_ID_SINCE[api]
    if instance_id is not None and version < since:
        raise CodecError(
            f"{api} v{version} cannot carry group.instance.id (static membership needs v{since}+)",
            field="GroupInstanceId",
        )


def _cat(items: Items | None) -> m.WireConnectorsAndTasks | None:
    return None if items is None else connectors_and_tasks(items)


def _require_spec_nulls(msg: Any) -> None:
    """A null the Connect API's spec forbids is INVALID_REQUEST (``requests.NULLS_ANSWERED``): the
    decoder lets it through for these APIs so that it is answered, not closed on."""
    violation = null_violation(msg, msg.version or 0)
    if violation is not None:
        raise CodecError(violation, field=violation.split()[2])


def _version_of(msg: Any) -> int:
    version = msg.version
    if version is None:
        raise ValueError(f"{type(msg).__name__} has no version: decode it (or construct it with version=)")
    return int(version)


# --- ConnectGroupHeartbeat ----------------------------------------------------------------------------


def heartbeat_from_wire(
    msg: m.ConnectGroupHeartbeatRequest, client_id: str | None = "", client_host: str | None = ""
) -> napi.HeartbeatRequest:
    """Null (and -1 for RebalanceTimeoutMs/ConfigOffset) means unchanged; raises CodecError for bad
    items and for a null the spec forbids."""
    _require_spec_nulls(msg)
    assignors = msg.client_assignors
    owned = msg.connectors_and_tasks
    return napi.HeartbeatRequest(
        group_id=_s(msg.group_id),
        member_id=_s(msg.member_id),
        member_epoch=msg.member_epoch,
        instance_id=msg.instance_id,
        rebalance_timeout_ms=msg.rebalance_timeout_ms,
        server_assignor=msg.server_assignor,
        client_assignors=None
        if assignors is None
        else tuple(
            ClientAssignor(
                _s(a.name), a.minimum_version, a.maximum_version, a.reason, a.metadata_version, _b(a.metadata)
            )
            for a in assignors
        ),
        owned=None if owned is None else items_of(owned),
        url=msg.worker_url,
        config_offset=None if msg.config_offset == -1 else msg.config_offset,
        client_id=_s(client_id),
        client_host=_s(client_host),
    )


def heartbeat_to_wire(req: napi.HeartbeatRequest) -> m.ConnectGroupHeartbeatRequest:
    """The client side; ``client_id``/``client_host`` travel in the request header / connection."""
    cls = m.ConnectGroupHeartbeatRequest
    assignors = req.client_assignors
    return cls(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        instance_id=req.instance_id,
        rack_id=None,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        worker_url=req.url,
        config_offset=-1 if req.config_offset is None else req.config_offset,
        server_assignor=req.server_assignor,
        client_assignors=None
        if assignors is None
        else [
            cls.Assignor(
                name=a.name,
                minimum_version=a.minimum_version,
                maximum_version=a.maximum_version,
                reason=a.reason,
                metadata_version=a.version,
                metadata=a.metadata,
            )
            for a in assignors
        ],
        connectors_and_tasks=_cat(req.owned),
    )


def heartbeat_response_to_wire(
    resp: napi.HeartbeatResponse, version: int = 0
) -> m.ConnectGroupHeartbeatResponse:
    cls = m.ConnectGroupHeartbeatResponse
    a = resp.assignment
    return cls(
        throttle_time_ms=0,
        error_code=resp.error_code,
        error_message=resp.error_message,
        member_id=_none_if_empty(resp.member_id),
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        assignment=None
        if a is None
        else cls.Assignment(
            error=a.error,
            connectors_and_tasks=connectors_and_tasks(a.items),
            leader_id=_none_if_empty(a.leader_id),
            leader_url=_none_if_empty(a.leader_url),
            config_offset=a.config_offset,
            metadata_version=a.metadata_version,
            metadata=a.metadata,
        ),
    )


def heartbeat_response_from_wire(msg: m.ConnectGroupHeartbeatResponse) -> napi.HeartbeatResponse:
    a = msg.assignment
    return napi.HeartbeatResponse(
        error_code=msg.error_code,
        error_message=msg.error_message,
        member_id=_s(msg.member_id),
        member_epoch=msg.member_epoch,
        heartbeat_interval_ms=msg.heartbeat_interval_ms,
        assignment=None
        if a is None
        else napi.MemberAssignment(
            items=items_of(a.connectors_and_tasks, "Assignment.ConnectorsAndTasks"),
            leader_id=_s(a.leader_id),
            leader_url=_s(a.leader_url),
            config_offset=a.config_offset,
            error=a.error,
            metadata_version=a.metadata_version,
            metadata=_b(a.metadata),
        ),
    )


# --- ConnectGroupPrepareAssignment --------------------------------------------------------------------


def prepare_from_wire(msg: m.ConnectGroupPrepareAssignmentRequest) -> napi.PrepareAssignmentRequest:
    _require_spec_nulls(msg)
    return napi.PrepareAssignmentRequest(_s(msg.group_id), _s(msg.member_id), msg.member_epoch)


def prepare_to_wire(req: napi.PrepareAssignmentRequest) -> m.ConnectGroupPrepareAssignmentRequest:
    return m.ConnectGroupPrepareAssignmentRequest(
        group_id=req.group_id, member_id=req.member_id, member_epoch=req.member_epoch
    )


def prepare_response_to_wire(
    resp: napi.PrepareAssignmentResponse, version: int = 0
) -> m.ConnectGroupPrepareAssignmentResponse:
    cls = m.ConnectGroupPrepareAssignmentResponse
    member_cls = cls.Member
    members = []
    for p in resp.members:
        a = p.assignor
        members.append(
            member_cls(
                member_id=p.member_id,
                member_epoch=p.member_epoch,
                instance_id=p.instance_id,
                worker_url=p.url,
                config_offset=p.config_offset,
                assignor=member_cls.Assignor(
                    metadata_version=NO_ASSIGNOR_METADATA_VERSION if a is None else a.version,
                    reason=0 if a is None else a.reason,
                    metadata=b"" if a is None else a.metadata,
                ),
                connectors_and_tasks=connectors_and_tasks(p.target),
            )
        )
    return cls(
        throttle_time_ms=0,
        error_code=resp.error_code,
        error_message=resp.error_message,
        group_epoch=resp.group_epoch,
        assignment_epoch=getattr(resp, "assignment_epoch", -1),
        assignor_name=resp.assignor_name,
        config_offset=resp.config_offset,
        connectors=[
            cls.ConfiguredConnector(name=name, task_count=count)
            for name, count in sorted(resp.connectors.items())
        ],
        members=members,
    )


def prepare_response_from_wire(
    msg: m.ConnectGroupPrepareAssignmentResponse,
) -> napi.PrepareAssignmentResponse:
    """The wire Assignor has no name or version range: the name is AssignorName, the range the
    metadata version (which is all a client-side assignor needs)."""
    name = _s(msg.assignor_name)
    members = []
    for i, p in enumerate(msg.members or ()):
        a = p.assignor
        assignor = (
            None
            if a is None or a.metadata_version == NO_ASSIGNOR_METADATA_VERSION
            else ClientAssignor(
                name, a.metadata_version, a.metadata_version, a.reason, a.metadata_version, _b(a.metadata)
            )
        )
        members.append(
            napi.PreparedMember(
                member_id=_s(p.member_id),
                member_epoch=p.member_epoch,
                instance_id=p.instance_id,
                url=_s(p.worker_url),
                config_offset=p.config_offset,
                assignor=assignor,
                target=items_of(p.connectors_and_tasks, f"Members[{i}].ConnectorsAndTasks"),
            )
        )
    return napi.PrepareAssignmentResponse(
        error_code=msg.error_code,
        error_message=msg.error_message,
        group_epoch=msg.group_epoch,
        assignor_name=name,
        config_offset=msg.config_offset,
        connectors={_s(c.name): c.task_count for c in msg.connectors or ()},
        members=tuple(members),
    )


# --- ConnectGroupInstallAssignment --------------------------------------------------------------------


def install_from_wire(msg: m.ConnectGroupInstallAssignmentRequest) -> napi.InstallAssignmentRequest:
    """Raises CodecError for a null or repeated member id, or bad items (-> INVALID_REQUEST).

    A member's MetadataVersion 0 with empty Metadata is "no metadata" (no entry in ``metadata``)."""
    _require_spec_nulls(msg)
    members: dict[str, Items] = {}
    metadata: dict[str, AssignedMetadata] = {}
    for i, entry in enumerate(msg.members or ()):
        if entry.member_id is None:
            raise CodecError("null member id", field=f"Members[{i}].MemberId")
        if entry.member_id in members:
            raise CodecError(f"member {entry.member_id!r} listed twice", field=f"Members[{i}].MemberId")
        members[entry.member_id] = items_of(entry.connectors_and_tasks, f"Members[{i}].ConnectorsAndTasks")
        data = AssignedMetadata(entry.metadata_version, _b(entry.metadata))
        if data != NO_METADATA:
            metadata[entry.member_id] = data
    return napi.InstallAssignmentRequest(
        group_id=_s(msg.group_id),
        member_id=_s(msg.member_id),
        member_epoch=msg.member_epoch,
        group_epoch=msg.group_epoch,
        error=msg.error,
        members=members,
        metadata=metadata,
    )


def install_to_wire(req: napi.InstallAssignmentRequest) -> m.ConnectGroupInstallAssignmentRequest:
    cls = m.ConnectGroupInstallAssignmentRequest
    return cls(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        group_epoch=req.group_epoch,
        error=req.error,
        members=[
            cls.Member(
                member_id=mid,
                connectors_and_tasks=connectors_and_tasks(items),
                metadata_version=req.metadata.get(mid, NO_METADATA).version,
                metadata=req.metadata.get(mid, NO_METADATA).metadata,
            )
            for mid, items in sorted(req.members.items())
        ],
    )


def install_response_to_wire(
    resp: napi.InstallAssignmentResponse, version: int = 0
) -> m.ConnectGroupInstallAssignmentResponse:
    return m.ConnectGroupInstallAssignmentResponse(
        throttle_time_ms=0, error_code=resp.error_code, error_message=resp.error_message
    )


def install_response_from_wire(
    msg: m.ConnectGroupInstallAssignmentResponse,
) -> napi.InstallAssignmentResponse:
    return napi.InstallAssignmentResponse(error_code=msg.error_code, error_message=msg.error_message)


# --- ConnectGroupDescribe -----------------------------------------------------------------------------


def describe_from_wire(msg: m.ConnectGroupDescribeRequest) -> list[str]:
    """The group ids asked for; empty = every connect group."""
    return [_s(g) for g in msg.group_ids or ()]


def describe_to_wire(group_ids: Iterable[str]) -> m.ConnectGroupDescribeRequest:
    return m.ConnectGroupDescribeRequest(group_ids=list(group_ids))


def describe_response_to_wire(
    groups: Iterable[napi.DescribedGroup],
    version: int = 0,
    *,
    connectors: Mapping[str, Mapping[str, int]] | None = None,
) -> m.ConnectGroupDescribeResponse:
    """``connectors``: group id -> {connector: task count} of the group's config view, when known
    (``DescribedGroup`` does not carry it; a ``connectors`` attribute on it is used if present).
    Members' ``revoking`` has no wire field (``Assignment`` is the current assignment, as in Kafka's
    ConsumerGroupDescribe); client id/host/rack are taken from the member when it has them."""
    cls = m.ConnectGroupDescribeResponse
    group_cls = cls.DescribedGroup
    member_cls = group_cls.Member
    out = []
    for g in groups:
        config = (connectors or {}).get(g.group_id)
        if config is None:
            config = dict(getattr(g, "connectors", None) or ())
        members = [
            member_cls(
                member_id=d.member_id,
                instance_id=d.instance_id,
                rack_id=getattr(d, "rack_id", None),
                client_id=getattr(d, "client_id", ""),
                client_host=getattr(d, "client_host", ""),
                worker_url=d.url,
                protocol=d.protocol,
                member_epoch=d.member_epoch,
                member_state=d.state,
                config_offset=d.config_offset,
                assignment=connectors_and_tasks(d.current),
                target_assignment=connectors_and_tasks(d.target),
            )
            for d in g.members
        ]
        out.append(
            group_cls(
                error_code=g.error_code,
                error_message=_group_error_message(g.group_id, g.error_code),
                group_id=g.group_id,
                group_type=g.group_type,
                group_state=connect_state_name(g.state),
                group_epoch=g.group_epoch,
                assignment_epoch=g.assignment_epoch,
                assignor_name=_none_if_empty(g.assignor),
                leader_id=_none_if_empty(g.leader_id),
                leader_url=_none_if_empty(g.leader_url),
                config_offset=g.config_offset,
                connectors=[
                    group_cls.ConfiguredConnector(name=name, task_count=count)
                    for name, count in sorted(config.items())
                ],
                members=members,
            )
        )
    return cls(throttle_time_ms=0, groups=out)


def describe_response_from_wire(msg: m.ConnectGroupDescribeResponse) -> list[napi.DescribedGroup]:
    """Engine values back; ``revoking`` is empty and the config view's connectors are dropped
    (neither has a place in ``DescribedGroup``/the wire member)."""
    out = []
    for gi, g in enumerate(msg.groups or ()):
        members = tuple(
            napi.DescribedMember(
                member_id=_s(d.member_id),
                instance_id=d.instance_id,
                protocol=_s(d.protocol),
                member_epoch=d.member_epoch,
                state=_s(d.member_state),
                url=_s(d.worker_url),
                config_offset=d.config_offset,
                current=items_of(d.assignment, f"Groups[{gi}].Members[{mi}].Assignment"),
                revoking=EMPTY,
                target=items_of(d.target_assignment, f"Groups[{gi}].Members[{mi}].TargetAssignment"),
            )
            for mi, d in enumerate(g.members or ())
        )
        state = _s(g.group_state)
        out.append(
            napi.DescribedGroup(
                group_id=_s(g.group_id),
                error_code=g.error_code,
                group_type=_s(g.group_type),
                state=_CONNECT_STATE_VALUES.get(state, state),
                group_epoch=g.group_epoch,
                assignment_epoch=g.assignment_epoch,
                assignor=_s(g.assignor_name),
                leader_id=_s(g.leader_id),
                leader_url=_s(g.leader_url),
                config_offset=g.config_offset,
                members=members,
            )
        )
    return out


def _group_error_message(group_id: str, error_code: int) -> str | None:
    if error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return f"Group {group_id} not found."
    return None


# --- JoinGroup (v0-9) ---------------------------------------------------------------------------------


def join_from_wire(
    msg: m.JoinGroupRequest, version: int, client_id: str | None = "", client_host: str | None = ""
) -> capi.JoinGroupRequest:
    """RebalanceTimeoutMs before v1 is the session timeout (Kafka's rule); GroupInstanceId from v5,
    Reason from v8."""
    return capi.JoinGroupRequest(
        group_id=_s(msg.group_id),
        member_id=_s(msg.member_id),
        protocol_type=_s(msg.protocol_type),
        protocols=tuple((_s(p.name), _b(p.metadata)) for p in msg.protocols or ()),
        session_timeout_ms=msg.session_timeout_ms,
        rebalance_timeout_ms=msg.rebalance_timeout_ms if version >= 1 else msg.session_timeout_ms,
        group_instance_id=msg.group_instance_id if version >= 5 else None,
        reason=msg.reason if version >= 8 else None,
        client_id=_s(client_id),
        client_host=_s(client_host),
        api_version=version,
    )


def join_to_wire(req: capi.JoinGroupRequest, version: int) -> m.JoinGroupRequest:
    """Raises CodecError for a static member below v5. Reason is dropped below v8 and the rebalance
    timeout below v1 (both ignorable in Kafka)."""
    _require_static_ok("JoinGroup", version, req.group_instance_id)
    cls = m.JoinGroupRequest
    return _make(
        cls,
        version,
        group_id=req.group_id,
        session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id,
        protocol_type=req.protocol_type,
        protocols=[cls.JoinGroupRequestProtocol(name=n, metadata=md) for n, md in req.protocols],
        reason=req.reason,
    )


def join_response_to_wire(resp: capi.JoinGroupResponse, version: int) -> m.JoinGroupResponse:
    """ProtocolName null becomes "" below v7 (Kafka's JoinGroupResponse does the same); member
    instance ids (v5+), ProtocolType (v7+) and SkipAssignment (v9+) exist only from their versions.
    ``error_message`` has no wire field."""
    cls = m.JoinGroupResponse
    member_cls = cls.JoinGroupResponseMember
    return _make(
        cls,
        version,
        throttle_time_ms=0,
        error_code=resp.error_code,
        generation_id=resp.generation_id,
        protocol_type=resp.protocol_type,
        protocol_name=resp.protocol_name if version >= 7 else _s(resp.protocol_name),
        leader=resp.leader,
        skip_assignment=resp.skip_assignment,
        member_id=resp.member_id,
        members=[
            _make(
                member_cls,
                version,
                member_id=j.member_id,
                group_instance_id=j.group_instance_id,
                metadata=j.metadata,
            )
            for j in resp.members
        ],
    )


def join_response_from_wire(msg: m.JoinGroupResponse) -> capi.JoinGroupResponse:
    """Before v7 an empty ProtocolName means none (null)."""
    version = _version_of(msg)
    return capi.JoinGroupResponse(
        error_code=msg.error_code,
        generation_id=msg.generation_id,
        protocol_type=msg.protocol_type if version >= 7 else None,
        protocol_name=msg.protocol_name if version >= 7 else _none_if_empty(msg.protocol_name),
        leader=_s(msg.leader),
        skip_assignment=bool(msg.skip_assignment) if version >= 9 else False,
        member_id=_s(msg.member_id),
        members=tuple(
            capi.JoinGroupMember(
                _s(j.member_id), j.group_instance_id if version >= 5 else None, _b(j.metadata)
            )
            for j in msg.members or ()
        ),
    )


# --- SyncGroup (v0-5) ---------------------------------------------------------------------------------


def sync_from_wire(msg: m.SyncGroupRequest, version: int) -> capi.SyncGroupRequest:
    return capi.SyncGroupRequest(
        group_id=_s(msg.group_id),
        member_id=_s(msg.member_id),
        generation_id=msg.generation_id,
        group_instance_id=msg.group_instance_id if version >= 3 else None,
        protocol_type=msg.protocol_type if version >= 5 else None,
        protocol_name=msg.protocol_name if version >= 5 else None,
        assignments=tuple((_s(a.member_id), _b(a.assignment)) for a in msg.assignments or ()),
        api_version=version,
    )


def sync_to_wire(req: capi.SyncGroupRequest, version: int) -> m.SyncGroupRequest:
    """Raises CodecError for a static member below v3; protocol type/name are dropped below v5."""
    _require_static_ok("SyncGroup", version, req.group_instance_id)
    cls = m.SyncGroupRequest
    return _make(
        cls,
        version,
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id,
        protocol_type=req.protocol_type,
        protocol_name=req.protocol_name,
        assignments=[
            cls.SyncGroupRequestAssignment(member_id=mid, assignment=a) for mid, a in req.assignments
        ],
    )


def sync_response_to_wire(resp: capi.SyncGroupResponse, version: int) -> m.SyncGroupResponse:
    return _make(
        m.SyncGroupResponse,
        version,
        throttle_time_ms=0,
        error_code=resp.error_code,
        protocol_type=resp.protocol_type,
        protocol_name=resp.protocol_name,
        assignment=resp.assignment,
    )


def sync_response_from_wire(msg: m.SyncGroupResponse) -> capi.SyncGroupResponse:
    version = _version_of(msg)
    return capi.SyncGroupResponse(
        error_code=msg.error_code,
        protocol_type=msg.protocol_type if version >= 5 else None,
        protocol_name=msg.protocol_name if version >= 5 else None,
        assignment=_b(msg.assignment),
    )


# --- Heartbeat (v0-4) ---------------------------------------------------------------------------------


def classic_heartbeat_from_wire(msg: m.HeartbeatRequest, version: int) -> capi.HeartbeatRequest:
    return capi.HeartbeatRequest(
        group_id=_s(msg.group_id),
        member_id=_s(msg.member_id),
        generation_id=msg.generation_id,
        group_instance_id=msg.group_instance_id if version >= 3 else None,
    )


def classic_heartbeat_to_wire(req: capi.HeartbeatRequest, version: int) -> m.HeartbeatRequest:
    _require_static_ok("Heartbeat", version, req.group_instance_id)
    return _make(
        m.HeartbeatRequest,
        version,
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id,
    )


def classic_heartbeat_response_to_wire(resp: capi.HeartbeatResponse, version: int) -> m.HeartbeatResponse:
    return _make(m.HeartbeatResponse, version, throttle_time_ms=0, error_code=resp.error_code)


def classic_heartbeat_response_from_wire(msg: m.HeartbeatResponse) -> capi.HeartbeatResponse:
    return capi.HeartbeatResponse(error_code=msg.error_code)


# --- LeaveGroup (v0-5) --------------------------------------------------------------------------------


def leave_from_wire(msg: m.LeaveGroupRequest, version: int) -> capi.LeaveGroupRequest:
    """v0-2: the single MemberId; v3+: the Members batch (Reason from v5)."""
    if version < 3:
        members: tuple[capi.LeavingMember, ...] = (capi.LeavingMember(_s(msg.member_id)),)
    else:
        members = tuple(
            capi.LeavingMember(_s(x.member_id), x.group_instance_id, x.reason if version >= 5 else None)
            for x in msg.members or ()
        )
    return capi.LeaveGroupRequest(_s(msg.group_id), members)


def leave_to_wire(req: capi.LeaveGroupRequest, version: int) -> m.LeaveGroupRequest:
    """Below v3 exactly one dynamic member can leave per request (else CodecError); reasons are
    dropped below v5."""
    cls = m.LeaveGroupRequest
    if version < 3:
        if len(req.members) != 1:
            raise CodecError(
                f"LeaveGroup v{version} carries exactly one member, not {len(req.members)}", field="MemberId"
            )
        _require_static_ok("LeaveGroup", version, req.members[0].group_instance_id)
        return _make(cls, version, group_id=req.group_id, member_id=req.members[0].member_id)
    return _make(
        cls,
        version,
        group_id=req.group_id,
        members=[
            _make(
                cls.MemberIdentity,
                version,
                member_id=x.member_id,
                group_instance_id=x.group_instance_id,
                reason=x.reason,
            )
            for x in req.members
        ],
    )


def leave_response_to_wire(resp: capi.LeaveGroupResponse, version: int) -> m.LeaveGroupResponse:
    """v3+: the top-level error (NONE unless the whole request failed) plus per-member errors.
    v0-2 have one error code: the top-level one, else the first member error (Kafka's
    ``LeaveGroupResponse.getError``)."""
    cls = m.LeaveGroupResponse
    if version < 3:
        code = resp.error_code or next((err for _, _, err in resp.members if err), 0)
        return _make(cls, version, throttle_time_ms=0, error_code=code)
    return _make(
        cls,
        version,
        throttle_time_ms=0,
        error_code=resp.error_code,
        members=[
            cls.MemberResponse(member_id=mid, group_instance_id=iid, error_code=err)
            for mid, iid, err in resp.members
        ],
    )


def leave_response_from_wire(msg: m.LeaveGroupResponse) -> capi.LeaveGroupResponse:
    """v0-2 responses carry no member list (their one error code is ``error_code``)."""
    version = _version_of(msg)
    members = (
        [(_s(x.member_id), x.group_instance_id, x.error_code) for x in msg.members or ()]
        if version >= 3
        else []
    )
    return capi.LeaveGroupResponse(error_code=msg.error_code, members=members)


# --- DescribeGroups (v0-6) ----------------------------------------------------------------------------


def describe_groups_response_to_wire(
    groups: Iterable[ClassicDescribedGroup | napi.DescribedGroup],
    version: int,
    *,
    connect_as_classic: bool = True,
) -> m.DescribeGroupsResponse:
    """Classic groups as Kafka describes them. A group the coordinator does not know
    (GROUP_ID_NOT_FOUND) is Kafka's answer for an unknown id: Dead with no error below v6, the error
    and "Group X not found." from v6.

    Connect groups (``DescribedGroup``): with ``connect_as_classic`` (the default) they are shown in
    classic terms so classic tooling sees a live group: state via :data:`CLASSIC_STATE_OF_CONNECT`,
    protocol type "connect", the assignor as protocol data while Stable, members with ids and client
    id/host but empty metadata/assignment. Without it, Kafka 3.8+'s literal answer for a non-classic
    group: Dead, and from v6 GROUP_ID_NOT_FOUND "Group X is not a classic group."."""
    cls = m.DescribeGroupsResponse
    group_cls = cls.DescribedGroup
    member_cls = group_cls.DescribedGroupMember

    def described(
        group_id: str,
        error_code: int,
        message: str | None,
        state: str,
        ptype: str,
        pdata: str,
        members: Sequence[ClassicDescribedMember],
    ) -> Any:
        return _make(
            group_cls,
            version,
            error_code=error_code,
            error_message=message,
            group_id=group_id,
            group_state=state,
            protocol_type=ptype,
            protocol_data=pdata,
            members=[
                _make(
                    member_cls,
                    version,
                    member_id=x.member_id,
                    group_instance_id=x.group_instance_id,
                    client_id=x.client_id,
                    client_host=x.client_host,
                    member_metadata=x.metadata,
                    member_assignment=x.assignment,
                )
                for x in members
            ],
            authorized_operations=_NOT_AUTHORIZED_OPS,
        )

    def dead(group_id: str, message: str) -> Any:
        if version >= 6:
            return described(group_id, int(ErrorCode.GROUP_ID_NOT_FOUND), message, "Dead", "", "", ())
        return described(group_id, 0, None, "Dead", "", "", ())

    out = []
    for g in groups:
        if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
            out.append(dead(g.group_id, f"Group {g.group_id} not found."))
        elif isinstance(g, ClassicDescribedGroup):
            out.append(
                described(
                    g.group_id, g.error_code, None, g.state, g.protocol_type, g.protocol_data, g.members
                )
            )
        elif not connect_as_classic:
            out.append(dead(g.group_id, f"Group {g.group_id} is not a classic group."))
        else:
            state = CLASSIC_STATE_OF_CONNECT.get(g.state, g.state)
            members = [
                ClassicDescribedMember(
                    d.member_id,
                    d.instance_id,
                    getattr(d, "client_id", ""),
                    getattr(d, "client_host", ""),
                    b"",
                    b"",
                )
                for d in g.members
            ]
            pdata = g.assignor if state == "Stable" else ""
            out.append(
                described(g.group_id, g.error_code, None, state, CONNECT_PROTOCOL_TYPE, pdata, members)
            )
    return _make(cls, version, throttle_time_ms=0, groups=out)


def describe_groups_response_from_wire(msg: m.DescribeGroupsResponse) -> list[ClassicDescribedGroup]:
    version = _version_of(msg)
    return [
        ClassicDescribedGroup(
            group_id=_s(g.group_id),
            error_code=g.error_code,
            state=_s(g.group_state),
            protocol_type=_s(g.protocol_type),
            protocol_data=_s(g.protocol_data),
            members=tuple(
                ClassicDescribedMember(
                    _s(x.member_id),
                    x.group_instance_id if version >= 4 else None,
                    _s(x.client_id),
                    _s(x.client_host),
                    _b(x.member_metadata),
                    _b(x.member_assignment),
                )
                for x in g.members or ()
            ),
        )
        for g in msg.groups or ()
    ]


# --- ListGroups (v0-5) --------------------------------------------------------------------------------


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
    cls = m.ListGroupsResponse
    listed = []
    for group_id, protocol_type, state, group_type in groups:
        name = connect_state_name(state)
        if states and name.lower() not in states:
            continue
        if types and group_type.lower() not in types:
            continue
        listed.append(
            _make(
                cls.ListedGroup,
                version,
                group_id=group_id,
                protocol_type=protocol_type,
                group_state=name,
                group_type=group_type,
            )
        )
    return _make(cls, version, throttle_time_ms=0, error_code=error_code, groups=listed)


def list_groups_to_wire(
    version: int, states: Iterable[str] = (), types: Iterable[str] = ()
) -> m.ListGroupsRequest:
    """Raises CodecError for a filter the version cannot carry (states v4+, types v5+)."""
    states, types = list(states), list(types)
    if states and version < 4:
        raise CodecError(f"ListGroups v{version} has no states filter (v4+)", field="StatesFilter")
    if types and version < 5:
        raise CodecError(f"ListGroups v{version} has no types filter (v5+)", field="TypesFilter")
    return _make(m.ListGroupsRequest, version, states_filter=states, types_filter=types)


def list_groups_response_from_wire(msg: m.ListGroupsResponse) -> list[ListedGroup]:
    """Rows as ``list_groups()`` gives them; state is "" below v4 and type "" below v5 (check
    ``msg.error_code`` first: the rows mean nothing when the request failed)."""
    version = _version_of(msg)
    return [
        (
            _s(g.group_id),
            _s(g.protocol_type),
            _s(g.group_state) if version >= 4 else "",
            _s(g.group_type) if version >= 5 else "",
        )
        for g in msg.groups or ()
    ]
