"""The Connect group APIs (ConnectGroupHeartbeat, PrepareAssignment, InstallAssignment, Describe)
<-> engine values (``state.api``), through the spec-derived maps of ``codecs.spec_map``.

The specs are ours and have one version (ConnectGroupDescribe two: v1 adds held work and what
members wait for), so the converters are compiled once, at import or on first use per version. Decoding a
request raises :class:`CodecError` for what the coordinator answers with INVALID_REQUEST: bad items,
null or repeated member names, and any null the spec forbids (``requests.NULLS_ANSWERED``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.messages import connectors_and_tasks, items_of
from connect_bridge.codecs.requests import null_violation
from connect_bridge.codecs.spec_map import (
    Field,
    SpecMap,
    StructMap,
    as_bytes,
    element,
    empty_if_null,
    null_if_empty,
    read_each,
)
from connect_bridge.state import api as napi
from connect_bridge.state.model import EMPTY, NO_METADATA, AssignedMetadata, ClientAssignor, HeldWork, Items
from connect_bridge.state.record_codec import (
    ASSIGNED_FIELDS,
    ASSIGNED_ROW,
    ASSIGNOR,
    CONNECTOR_ROWS,
    items_as,
)

NO_ASSIGNOR_METADATA_VERSION = -1
"""PrepareAssignment ``Assignor.MetadataVersion`` of a member without metadata for the chosen assignor
(the struct is not nullable, so -1 stands for the engine's ``assignor=None``)."""

_CONNECT_STATE_NAMES: Mapping[str, str] = {
    "EMPTY": "Empty",
    "ASSIGNING": "Assigning",
    "RECONCILING": "Reconciling",
    "STABLE": "Stable",
    "DEAD": "Dead",
}
"""Connect group states (``model.GroupState`` values) as Kafka spells consumer group states in
ListGroups and ConsumerGroupDescribe (``ConsumerGroupState.toString()``)."""
_CONNECT_STATE_VALUES: Mapping[str, str] = {v: k for k, v in _CONNECT_STATE_NAMES.items()}


def connect_state_name(state: str) -> str:
    """A connect group state as Kafka spells it ("Stable"); other strings (classic states) unchanged."""
    return _CONNECT_STATE_NAMES.get(state, state)


def _require_spec_nulls(msg: Any) -> None:
    """A null the Connect API's spec forbids is INVALID_REQUEST (``requests.NULLS_ANSWERED``): the
    decoder lets it through for these APIs so that it is answered, not closed on."""
    violation = null_violation(msg, msg.version or 0)
    if violation is not None:
        raise CodecError(violation, field=violation.split()[2])


_NULLABLE_TEXT = Field(to_wire=null_if_empty, from_wire=empty_if_null)
"""The engine's "" (none) <-> the wire's null."""
_THROTTLE = {"throttle_time_ms": Field(const=0)}


# --- The maps -------------------------------------------------------------------------------------

_HEARTBEAT = SpecMap(
    m.ConnectGroupHeartbeatRequest,
    StructMap(
        napi.HeartbeatRequest,
        {
            "rack_id": Field(const=None),
            "worker_url": Field("url"),
            "config_offset": Field(
                to_wire=lambda v: -1 if v is None else v, from_wire=lambda v: None if v == -1 else v
            ),
            "client_assignors": Field(struct=ASSIGNOR, null=None),
            "connectors_and_tasks": Field(
                "owned",
                to_wire=lambda v: None if v is None else connectors_and_tasks(v),
                from_wire=lambda v: None if v is None else items_of(v),
            ),
        },
        extra=("client_id", "client_host"),
    ),
)

_MEMBER_ASSIGNMENT = StructMap(
    napi.MemberAssignment,
    {
        "connectors_and_tasks": items_as("items"),
        "leader_id": _NULLABLE_TEXT,
        "leader_url": _NULLABLE_TEXT,
        "metadata": Field(from_wire=as_bytes),
    },
)

_HEARTBEAT_RESPONSE = SpecMap(
    m.ConnectGroupHeartbeatResponse,
    StructMap(
        napi.HeartbeatResponse,
        {**_THROTTLE, "member_id": _NULLABLE_TEXT, "assignment": Field(struct=_MEMBER_ASSIGNMENT)},
    ),
)

_PREPARE = SpecMap(m.ConnectGroupPrepareAssignmentRequest, StructMap(napi.PrepareAssignmentRequest))

_PREPARED_ASSIGNOR = StructMap(("metadata_version", "reason", "metadata"))


def _prepared_assignor(a: ClientAssignor | None) -> tuple[int, int, bytes]:
    return (NO_ASSIGNOR_METADATA_VERSION, 0, b"") if a is None else (a.version, a.reason, a.metadata)


_PREPARE_RESPONSE = SpecMap(
    m.ConnectGroupPrepareAssignmentResponse,
    StructMap(
        napi.PrepareAssignmentResponse,
        {
            **_THROTTLE,
            "assignment_epoch": Field(read=lambda r: getattr(r, "assignment_epoch", -1)),
            "connectors": Field(to_wire=lambda d: sorted(d.items()), struct=CONNECTOR_ROWS),
            "members": Field(
                struct=StructMap(
                    napi.PreparedMember,
                    {
                        "worker_url": Field("url"),
                        "assignor": Field(to_wire=_prepared_assignor, struct=_PREPARED_ASSIGNOR),
                        "connectors_and_tasks": items_as("target"),
                    },
                )
            ),
        },
    ),
)

_INSTALL = SpecMap(
    m.ConnectGroupInstallAssignmentRequest,
    StructMap(
        napi.InstallAssignmentRequest,
        {
            "group_id": Field(from_wire=empty_if_null),
            "member_id": Field(from_wire=empty_if_null),
            "members": Field(
                read=lambda r: [
                    (mid, items, r.metadata.get(mid, NO_METADATA)) for mid, items in sorted(r.members.items())
                ],
                struct=StructMap(ASSIGNED_ROW, ASSIGNED_FIELDS),
            ),
        },
        extra=("members", "metadata"),
    ),
)

_INSTALL_RESPONSE = SpecMap(
    m.ConnectGroupInstallAssignmentResponse, StructMap(napi.InstallAssignmentResponse, _THROTTLE)
)

_DESCRIBED_MEMBER = StructMap(
    napi.DescribedMember,
    {
        "client_id": Field(from_wire=empty_if_null),
        "client_host": Field(from_wire=empty_if_null),
        "worker_url": Field("url", from_wire=empty_if_null),
        "protocol": Field(from_wire=empty_if_null),
        "member_state": Field("state", from_wire=empty_if_null),
        "member_id": Field(from_wire=empty_if_null),
        "assignment": items_as("current"),
        "target_assignment": items_as("target"),
        "revoking": Field(
            "revoking", to_wire=connectors_and_tasks, from_wire=items_of, path=True, absent=EMPTY
        ),
        "waiting_for": Field(from_wire=empty_if_null),
    },
)
"""A member; below v1 (no ``Revoking``/``WaitingFor``) it reads back with nothing revoking and an
unknown wait."""

_HELD_WORK = StructMap(
    HeldWork,
    {"worker_url": Field("url", to_wire=null_if_empty, from_wire=empty_if_null), "work": items_as("items")},
)
"""Held work of a departed worker (v1+)."""


def _group_error_message(g: napi.DescribedGroup) -> str | None:
    if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        return f"Group {g.group_id} not found."
    return None


_DESCRIBED_GROUP = StructMap(
    napi.DescribedGroup,
    {
        "error_message": Field(read=_group_error_message),
        "group_id": Field(from_wire=empty_if_null),
        "group_type": Field(from_wire=empty_if_null),
        "group_state": Field(
            "state",
            to_wire=connect_state_name,
            from_wire=lambda s: _CONNECT_STATE_VALUES.get(empty_if_null(s), empty_if_null(s)),
        ),
        "assignor_name": Field("assignor", to_wire=null_if_empty, from_wire=empty_if_null),
        "leader_id": _NULLABLE_TEXT,
        "leader_url": _NULLABLE_TEXT,
        "connectors": Field(param=True, struct=CONNECTOR_ROWS),
        "members": Field(struct=_DESCRIBED_MEMBER),
        "held_work": Field("held", struct=_HELD_WORK),
    },
)
_DESCRIBED_GROUP_STRUCT = element(m.ConnectGroupDescribeResponse, "groups")

_heartbeat_to = _HEARTBEAT.to_wire()
_heartbeat_from = _HEARTBEAT.from_wire()
_heartbeat_response_to = _HEARTBEAT_RESPONSE.to_wire()
_heartbeat_response_from = _HEARTBEAT_RESPONSE.from_wire()
_prepare_from = _PREPARE.from_wire()
_prepare_to = _PREPARE.to_wire()
_prepare_response_to = _PREPARE_RESPONSE.to_wire()
_install_from = _INSTALL.from_wire()
_install_to = _INSTALL.to_wire()
_install_response_to = _INSTALL_RESPONSE.to_wire()
_install_response_from = _INSTALL_RESPONSE.from_wire()


# --- ConnectGroupHeartbeat --------------------------------------------------------------------------


def heartbeat_from_wire(
    msg: m.ConnectGroupHeartbeatRequest, client_id: str | None = "", client_host: str | None = ""
) -> napi.HeartbeatRequest:
    """Null (and -1 for RebalanceTimeoutMs/ConfigOffset) means unchanged; raises CodecError for bad
    items and for a null the spec forbids."""
    _require_spec_nulls(msg)
    return _heartbeat_from(msg, empty_if_null(client_id), empty_if_null(client_host))


def heartbeat_to_wire(req: napi.HeartbeatRequest) -> m.ConnectGroupHeartbeatRequest:
    """The client side; ``client_id``/``client_host`` travel in the request header / connection."""
    return _heartbeat_to(req)


def heartbeat_response_to_wire(
    resp: napi.HeartbeatResponse, version: int = 0
) -> m.ConnectGroupHeartbeatResponse:
    return _heartbeat_response_to(resp)


def heartbeat_response_from_wire(msg: m.ConnectGroupHeartbeatResponse) -> napi.HeartbeatResponse:
    return _heartbeat_response_from(msg)


# --- ConnectGroupPrepareAssignment ------------------------------------------------------------------


def prepare_from_wire(msg: m.ConnectGroupPrepareAssignmentRequest) -> napi.PrepareAssignmentRequest:
    _require_spec_nulls(msg)
    return _prepare_from(msg)


def prepare_to_wire(req: napi.PrepareAssignmentRequest) -> m.ConnectGroupPrepareAssignmentRequest:
    return _prepare_to(req)


def prepare_response_to_wire(
    resp: napi.PrepareAssignmentResponse, version: int = 0
) -> m.ConnectGroupPrepareAssignmentResponse:
    return _prepare_response_to(resp)


def prepare_response_from_wire(
    msg: m.ConnectGroupPrepareAssignmentResponse,
) -> napi.PrepareAssignmentResponse:
    """The wire Assignor has no name or version range: the name is AssignorName, the range the
    metadata version (which is all a client-side assignor needs)."""
    name = empty_if_null(msg.assignor_name)

    def member(p: Any) -> napi.PreparedMember:
        a = p.assignor
        assignor = (
            None
            if a is None or a.metadata_version == NO_ASSIGNOR_METADATA_VERSION
            else ClientAssignor(
                name,
                a.metadata_version,
                a.metadata_version,
                a.reason,
                a.metadata_version,
                as_bytes(a.metadata),
            )
        )
        return napi.PreparedMember(
            member_id=empty_if_null(p.member_id),
            member_epoch=p.member_epoch,
            instance_id=p.instance_id,
            url=empty_if_null(p.worker_url),
            config_offset=p.config_offset,
            assignor=assignor,
            target=items_of(p.connectors_and_tasks, "ConnectorsAndTasks"),
        )

    return napi.PrepareAssignmentResponse(
        error_code=msg.error_code,
        error_message=msg.error_message,
        group_epoch=msg.group_epoch,
        assignor_name=name,
        config_offset=msg.config_offset,
        connectors={empty_if_null(c.name): c.task_count for c in msg.connectors or ()},
        members=tuple(read_each(member, msg.members or (), "Members")),
    )


# --- ConnectGroupInstallAssignment ------------------------------------------------------------------


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
        data = AssignedMetadata(entry.metadata_version, as_bytes(entry.metadata))
        if data != NO_METADATA:
            metadata[entry.member_id] = data
    return _install_from(msg, members, metadata)


def install_to_wire(req: napi.InstallAssignmentRequest) -> m.ConnectGroupInstallAssignmentRequest:
    return _install_to(req)


def install_response_to_wire(
    resp: napi.InstallAssignmentResponse, version: int = 0
) -> m.ConnectGroupInstallAssignmentResponse:
    return _install_response_to(resp)


def install_response_from_wire(
    msg: m.ConnectGroupInstallAssignmentResponse,
) -> napi.InstallAssignmentResponse:
    return _install_response_from(msg)


# --- ConnectGroupDescribe ---------------------------------------------------------------------------


def describe_from_wire(msg: m.ConnectGroupDescribeRequest) -> list[str]:
    """The group ids asked for; empty = every connect group."""
    return [empty_if_null(g) for g in msg.group_ids or ()]


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
    Version 0 carries neither the members' ``revoking`` and waits nor the group's clock and held
    work (``Assignment`` is the current assignment, as in Kafka's ConsumerGroupDescribe)."""
    write = _DESCRIBED_GROUP.writer(_DESCRIBED_GROUP_STRUCT, version)
    out = []
    for g in groups:
        config = (connectors or {}).get(g.group_id)
        if config is None:
            config = dict(getattr(g, "connectors", None) or ())
        out.append(write(g, sorted(config.items())))
    return m.ConnectGroupDescribeResponse(throttle_time_ms=0, groups=out)


def describe_response_from_wire(msg: m.ConnectGroupDescribeResponse) -> list[napi.DescribedGroup]:
    """Engine values back, at the version ``msg`` was decoded at; the config view's connectors are
    dropped (no place in ``DescribedGroup``). A v0 answer reads with nothing revoking, no held work,
    unknown waits and an unknown clock (-1)."""
    read = _DESCRIBED_GROUP.reader(_DESCRIBED_GROUP_STRUCT, msg.version)
    return read_each(read, msg.groups or (), "Groups")
