"""Engine records <-> the JSON-spec record bytes of ``codecs.records``.

The engine's record values are its own frozen model objects; the durable form is the spec'd
key/value bytes. Each value has a declarative :class:`StructMap` naming only where the model
differs from its spec (``codecs.spec_map`` compiles both directions from the spec's fields), and one
table row per record type binds key and value, so adding a record type is a map plus a row. The
shared maps (work items, assignors, connector rows) serve the Connect APIs too (``wire/connect.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from connect_bridge.codecs import records as wire
from connect_bridge.codecs.messages import connectors_and_tasks, items_of
from connect_bridge.codecs.spec_map import Field, SpecMap, StructMap, as_bytes, empty_if_null, null_if_empty
from connect_bridge.state.adoption.records import WIRE_STATES, GroupOwnership
from connect_bridge.state.classic.group import ClassicGroupSnapshot, ClassicMemberSnapshot
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
    MemberState.STABLE: int(wire.MemberState.STABLE),
    MemberState.UNREVOKED: int(wire.MemberState.UNREVOKED),
    MemberState.UNRELEASED: int(wire.MemberState.UNRELEASED),
}
_STATE_FROM_WIRE = {v: k for k, v in _STATE_TO_WIRE.items()}

# --- Shared struct maps (also the Connect APIs' ``wire.connect``) ----------------------------


def items_as(attr: str) -> Field:
    """A ``ConnectorsAndTasks``-shaped wire field <-> the engine's ``Items`` in attribute ``attr``."""
    return Field(attr, to_wire=connectors_and_tasks, from_wire=items_of, path=True)


ASSIGNOR = StructMap(
    ClientAssignor, {"metadata_version": Field("version"), "metadata": Field(from_wire=as_bytes)}
)
"""A member's client-side ``Assignor`` (heartbeat request, member metadata record)."""

CONNECTOR_ROWS = StructMap(("name", "task_count"))
"""``ConfiguredConnector`` entries as ``(name, task count)`` rows."""

PROTOCOL_ROWS = StructMap(("name", "metadata"), {"metadata": Field(from_wire=bytes)})
"""Classic ``(protocol name, metadata)`` rows."""

# --- Record values ------------------------------------------------------------------------------

_GROUP = StructMap(
    GroupMetadata,
    {
        "epoch": Field("group_epoch"),
        "leader_id": Field(to_wire=null_if_empty, from_wire=empty_if_null),
        "held_work": Field(
            "held",
            struct=StructMap(
                HeldWork, {"worker_url": Field("url"), "connectors_and_tasks": items_as("items")}
            ),
        ),
    },
)

_CONFIG = StructMap(
    ConfigView,
    {
        "config_offset": Field("offset"),
        "connectors": Field(struct=CONNECTOR_ROWS, from_wire=lambda rows: tuple(sorted(rows))),
    },
)

_MEMBER = StructMap(
    MemberMetadata,
    {
        "group_epoch": Field(const=0),
        "rack_id": Field(const=None),
        "worker_url": Field("url"),
        "client_assignors": Field(struct=ASSIGNOR),
        "classic_member_metadata": Field(
            "classic_protocols",
            to_wire=lambda protocols: None if protocols is None else (protocols,),
            struct=StructMap(("supported_protocols",), {"supported_protocols": Field(struct=PROTOCOL_ROWS)}),
            from_wire=lambda wrapped: None if wrapped is None else wrapped[0],
        ),
    },
)

_TARGET_METADATA = StructMap(TargetMetadata, {"config_offset": Field(const=-1)})

ASSIGNED_ROW = ("member_id", "items", "assigned")
ASSIGNED_FIELDS: dict[str, Field] = {
    "connectors_and_tasks": items_as("items"),
    "metadata_version": Field(read=lambda row: row[2].version),
    "metadata": Field(read=lambda row: row[2].metadata),
}
"""A member's target as ``(member id, items, AssignedMetadata)`` rows: the target member record and
InstallAssignment ``Members``."""

_TARGET_MEMBER = StructMap(ASSIGNED_ROW, {"error": Field(const=0), **ASSIGNED_FIELDS})
"""The per-member ``Error`` stays 0: the assignor's error is the group's, in the header record."""

_CURRENT = StructMap(
    CurrentAssignment,
    {
        "state": Field(to_wire=_STATE_TO_WIRE.__getitem__, from_wire=_STATE_FROM_WIRE.__getitem__),
        "error": Field(const=0),
        "left_temporarily": Field(from_wire=bool),
        "connectors_and_tasks": items_as("assigned"),
        "pending_revocation": items_as("revoking"),
        "metadata_version": Field(const=0),
        "metadata": Field(const=b""),
    },
)

_CLASSIC = StructMap(
    ClassicGroupSnapshot,
    {
        "members": Field(
            struct=StructMap(
                ClassicMemberSnapshot,
                {"protocols": Field(struct=PROTOCOL_ROWS), "assignment": Field(from_wire=as_bytes)},
            )
        )
    },
)


_OWNERSHIP = StructMap(
    GroupOwnership,
    {
        "state": Field(to_wire=WIRE_STATES.index, from_wire=WIRE_STATES.__getitem__),
        "rounds_due": Field(from_wire=tuple),
    },
)
"""Ownership phases as their index in ``WIRE_STATES`` (0 relaying ... 3 released)."""


def _target_member_from(w: Any) -> Items | TargetMember:
    data = AssignedMetadata(w.metadata_version, as_bytes(w.metadata))
    return target_member_value(items_of(w.connectors_and_tasks), data)


_KEY = StructMap(("group_id", "member_id"))


@dataclass(frozen=True, slots=True)
class _Row:
    """How one record type's key is built and its value converted, both compiled from the specs."""

    key: Callable[[tuple[str, str]], Any]
    to_wire: Callable[[Any], Any]
    from_wire: Callable[[Any], Any]


def _row(
    record_type: RecordType,
    value: StructMap,
    to_engine: Callable[[Any], Any] | None = None,
    from_engine: Callable[[Any], Any] | None = None,
) -> _Row:
    """``to_engine``/``from_engine``: for a value whose engine form is not one object (a target
    member is plain items unless it has metadata)."""
    spec = wire.RECORD_SPECS[record_type]
    bound = SpecMap(spec.value, value)
    write = bound.to_wire()
    return _Row(
        SpecMap(spec.key, _KEY).to_wire(),
        write if from_engine is None else lambda v: write(from_engine(v)),
        to_engine or bound.from_wire(),
    )


_TABLE: dict[RecordType, _Row] = {
    RecordType.GROUP_METADATA: _row(RecordType.GROUP_METADATA, _GROUP),
    RecordType.CONFIG: _row(RecordType.CONFIG, _CONFIG),
    RecordType.MEMBER_METADATA: _row(RecordType.MEMBER_METADATA, _MEMBER),
    RecordType.TARGET_METADATA: _row(RecordType.TARGET_METADATA, _TARGET_METADATA),
    RecordType.TARGET_MEMBER: _row(
        RecordType.TARGET_MEMBER,
        _TARGET_MEMBER,
        to_engine=_target_member_from,
        from_engine=lambda v: ("", *split_target_member(v)),
    ),
    RecordType.CURRENT_ASSIGNMENT: _row(RecordType.CURRENT_ASSIGNMENT, _CURRENT),
    RecordType.CLASSIC_GROUP: _row(RecordType.CLASSIC_GROUP, _CLASSIC),
    RecordType.GROUP_OWNERSHIP: _row(RecordType.GROUP_OWNERSHIP, _OWNERSHIP),
}


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    row = _TABLE[record.type]
    key = row.key((record.group_id, record.member_id))
    value = None if record.value is None else row.to_wire(record.value)
    return wire.encode_record(key, value)


def decode_record(key_bytes: bytes, value_bytes: bytes | None) -> Record:
    decoded = wire.decode_record(key_bytes, value_bytes)
    type_ = RecordType(int(decoded.type))
    row = _TABLE[type_]
    member_id = getattr(decoded.key, "member_id", "") or ""
    value = None if decoded.value is None else row.from_wire(decoded.value)
    return Record(type_, decoded.key.group_id, member_id, value)
