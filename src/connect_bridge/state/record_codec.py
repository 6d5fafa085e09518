"""Engine records <-> the JSON-spec record bytes of ``codecs.records``.

The engine's record values are its own frozen model objects; the durable form is the spec'd
key/value bytes. One table row per record type says how to build the key, and how to turn the
value into its spec object and back, so adding a record type is adding a row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from connect_bridge.codecs import records as wire
from connect_bridge.codecs.messages import connectors_and_tasks, items_of
from connect_bridge.state.classic_group import ClassicGroupSnapshot, ClassicMemberSnapshot
from connect_bridge.state.model import (
    AssignedMetadata,
    ClientAssignor,
    ConfigView,
    CurrentAssignment,
    GroupMetadata,
    HeldWork,
    Items,
    MemberMetadata,
    MemberState,
    TargetMember,
    TargetMetadata,
    split_target_member,
    target_member_value,
)
from connect_bridge.state.records import Record, RecordType

_STATE_TO_WIRE = {
    MemberState.STABLE: wire.MemberState.STABLE,
    MemberState.UNREVOKED: wire.MemberState.UNREVOKED,
    MemberState.UNRELEASED: wire.MemberState.UNRELEASED,
}
_STATE_FROM_WIRE = {int(v): k for k, v in _STATE_TO_WIRE.items()}


def _group_to(v: GroupMetadata) -> Any:
    cls = wire.ConnectGroupMetadataValue
    held = [
        cls.HeldWork(
            worker_url=h.url,
            instance_id=h.instance_id,
            deadline_ms=h.deadline_ms,
            connectors_and_tasks=connectors_and_tasks(h.items),
        )
        for h in v.held
    ]
    return cls(epoch=v.group_epoch, leader_id=v.leader_id or None, member_seq=v.member_seq, held_work=held)


def _group_from(w: Any) -> GroupMetadata:
    held = tuple(
        HeldWork(items_of(h.connectors_and_tasks), h.worker_url, h.instance_id, h.deadline_ms)
        for h in w.held_work or ()
    )
    return GroupMetadata(group_epoch=w.epoch, leader_id=w.leader_id or "", member_seq=w.member_seq, held=held)


def _config_to(v: ConfigView) -> Any:
    cls = wire.ConnectGroupConfigMetadataValue
    connectors = [cls.ConfiguredConnector(name=n, task_count=t) for n, t in v.connectors]
    return cls(config_offset=v.offset, connectors=connectors)


def _config_from(w: Any) -> ConfigView:
    return ConfigView(w.config_offset, tuple(sorted((c.name, c.task_count) for c in w.connectors or ())))


def _member_to(v: MemberMetadata) -> Any:
    cls = wire.ConnectGroupMemberMetadataValue
    assignors = [
        cls.Assignor(
            name=a.name,
            minimum_version=a.minimum_version,
            maximum_version=a.maximum_version,
            reason=a.reason,
            metadata_version=a.version,
            metadata=a.metadata,
        )
        for a in v.client_assignors
    ]
    return cls(
        group_epoch=0,
        instance_id=v.instance_id,
        rack_id=None,
        client_id=v.client_id,
        client_host=v.client_host,
        worker_url=v.url,
        config_offset=v.config_offset,
        rebalance_timeout_ms=v.rebalance_timeout_ms,
        session_timeout_ms=v.session_timeout_ms,
        protocol=v.protocol,
        server_assignor=v.server_assignor,
        client_assignors=assignors,
        classic_member_metadata=None
        if v.classic_protocols is None
        else cls.ClassicMemberMetadata(
            supported_protocols=[
                cls.ClassicMemberMetadata.ClassicProtocol(name=n, metadata=m) for n, m in v.classic_protocols
            ]
        ),
    )


def _member_from(w: Any) -> MemberMetadata:
    assignors = tuple(
        ClientAssignor(
            a.name,
            a.minimum_version,
            a.maximum_version,
            a.reason,
            a.metadata_version,
            bytes(a.metadata or b""),
        )
        for a in w.client_assignors or ()
    )
    return MemberMetadata(
        instance_id=w.instance_id,
        rebalance_timeout_ms=w.rebalance_timeout_ms,
        session_timeout_ms=w.session_timeout_ms,
        url=w.worker_url,
        config_offset=w.config_offset,
        client_id=w.client_id,
        client_host=w.client_host,
        server_assignor=w.server_assignor,
        client_assignors=assignors,
        protocol=w.protocol,
        classic_protocols=None
        if w.classic_member_metadata is None
        else tuple((p.name, bytes(p.metadata)) for p in w.classic_member_metadata.supported_protocols or ()),
    )


def _target_meta_to(v: TargetMetadata) -> Any:
    return wire.ConnectGroupTargetAssignmentMetadataValue(
        assignment_epoch=v.assignment_epoch, error=v.error, config_offset=-1
    )


def _target_meta_from(w: Any) -> TargetMetadata:
    return TargetMetadata(w.assignment_epoch, w.error)


def _target_member_to(v: Items | TargetMember) -> Any:
    """The per-member ``Error`` stays 0: the assignor's error is the group's, in the header record."""
    items, data = split_target_member(v)
    return wire.ConnectGroupTargetAssignmentMemberValue(
        error=0,
        connectors_and_tasks=connectors_and_tasks(items),
        metadata_version=data.version,
        metadata=data.metadata,
    )


def _target_member_from(w: Any) -> Items | TargetMember:
    data = AssignedMetadata(w.metadata_version, bytes(w.metadata or b""))
    return target_member_value(items_of(w.connectors_and_tasks), data)


def _current_to(v: CurrentAssignment) -> Any:
    return wire.ConnectGroupCurrentMemberAssignmentValue(
        member_epoch=v.member_epoch,
        previous_member_epoch=v.previous_member_epoch,
        state=int(_STATE_TO_WIRE[v.state]),
        error=0,
        left_temporarily=v.left_temporarily,
        connectors_and_tasks=connectors_and_tasks(v.assigned),
        pending_revocation=connectors_and_tasks(v.revoking),
        metadata_version=0,
        metadata=b"",
    )


def _current_from(w: Any) -> CurrentAssignment:
    return CurrentAssignment(
        w.member_epoch,
        w.previous_member_epoch,
        _STATE_FROM_WIRE[w.state],
        items_of(w.connectors_and_tasks),
        items_of(w.pending_revocation, "PendingRevocation"),
        bool(w.left_temporarily),
    )


def _classic_to(v: ClassicGroupSnapshot) -> Any:
    cls = wire.ClassicGroupMetadataValue
    members = [
        cls.ClassicMember(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            session_timeout_ms=m.session_timeout_ms,
            protocols=[cls.ClassicMember.ClassicProtocol(name=n, metadata=b) for n, b in m.protocols],
            assignment=m.assignment,
        )
        for m in v.members
    ]
    return cls(
        protocol_type=v.protocol_type,
        generation=v.generation,
        protocol_name=v.protocol_name,
        leader=v.leader,
        current_state_timestamp=v.current_state_timestamp,
        member_seq=v.member_seq,
        members=members,
    )


def _classic_from(w: Any) -> ClassicGroupSnapshot:
    members = tuple(
        ClassicMemberSnapshot(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            tuple((p.name, bytes(p.metadata)) for p in m.protocols or ()),
            bytes(m.assignment or b""),
        )
        for m in w.members or ()
    )
    return ClassicGroupSnapshot(
        w.generation,
        w.protocol_type,
        w.protocol_name,
        w.leader,
        w.member_seq,
        members,
        w.current_state_timestamp,
    )


@dataclass(frozen=True, slots=True)
class _Row:
    key: Callable[[str, str], Any]
    to_wire: Callable[[Any], Any]
    from_wire: Callable[[Any], Any]


def _group_key(cls: Any) -> Callable[[str, str], Any]:
    return lambda group_id, _member_id: cls(group_id=group_id)


def _member_key(cls: Any) -> Callable[[str, str], Any]:
    return lambda group_id, member_id: cls(group_id=group_id, member_id=member_id)


_TABLE: dict[RecordType, _Row] = {
    RecordType.GROUP_METADATA: _Row(_group_key(wire.ConnectGroupMetadataKey), _group_to, _group_from),
    RecordType.CONFIG: _Row(_group_key(wire.ConnectGroupConfigMetadataKey), _config_to, _config_from),
    RecordType.MEMBER_METADATA: _Row(
        _member_key(wire.ConnectGroupMemberMetadataKey), _member_to, _member_from
    ),
    RecordType.TARGET_METADATA: _Row(
        _group_key(wire.ConnectGroupTargetAssignmentMetadataKey), _target_meta_to, _target_meta_from
    ),
    RecordType.TARGET_MEMBER: _Row(
        _member_key(wire.ConnectGroupTargetAssignmentMemberKey), _target_member_to, _target_member_from
    ),
    RecordType.CURRENT_ASSIGNMENT: _Row(
        _member_key(wire.ConnectGroupCurrentMemberAssignmentKey), _current_to, _current_from
    ),
    RecordType.CLASSIC_GROUP: _Row(_group_key(wire.ClassicGroupMetadataKey), _classic_to, _classic_from),
}


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    row = _TABLE[record.type]
    key = row.key(record.group_id, record.member_id)
    value = None if record.value is None else row.to_wire(record.value)
    return wire.encode_record(key, value)


def decode_record(key_bytes: bytes, value_bytes: bytes | None) -> Record:
    decoded = wire.decode_record(key_bytes, value_bytes)
    type_ = RecordType(int(decoded.type))
    row = _TABLE[type_]
    member_id = getattr(decoded.key, "member_id", "") or ""
    value = None if decoded.value is None else row.from_wire(decoded.value)
    return Record(type_, decoded.key.group_id, member_id, value)
