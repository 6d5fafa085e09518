"""Coordinator state records: every record type round-trips, tombstones, the key scheme, bad bytes."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.schemas.fields import ArrayField, StructArrayField, StructField
from kafka.protocol.schemas.fields.codecs import Boolean, Bytes, Int8, Int16, Int32, Int64, String

from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.codecs.messages import connectors_and_tasks, items_of
from connect_bridge.codecs.records import (
    RECORD_SPECS,
    ClassicGroupMetadataKey,
    ClassicGroupMetadataValue,
    ConnectGroupCurrentMemberAssignmentKey,
    ConnectGroupCurrentMemberAssignmentValue,
    ConnectGroupMetadataKey,
    ConnectGroupMetadataValue,
    MemberState,
    Record,
    RecordType,
    decode_record,
    encode_record,
    record_spec,
)

# Schema-driven values (the same idea as in test_messages.py, reduced to the types records use).
_INTS = {Int8: 7, Int16: 15, Int32: 31, Int64: 63}


def _simple(codec: Any, nullable: bool) -> st.SearchStrategy[Any]:
    if isinstance(codec, String):
        s: st.SearchStrategy[Any] = st.text(max_size=6)
    elif codec is Bytes:
        s = st.binary(max_size=6)
    elif codec is Boolean:
        s = st.booleans()
    else:
        bits = _INTS[codec]
        s = st.integers(-(2**bits), 2**bits - 1)
    return st.none() | s if nullable else s


def _field(f: Any, version: int) -> st.SearchStrategy[Any]:
    if isinstance(f, StructArrayField):
        s: st.SearchStrategy[Any] = st.lists(_struct(f.array_of, f.data_class, version), max_size=2)
    elif isinstance(f, StructField):
        s = _struct(f, f.data_class, version)
    elif isinstance(f, ArrayField):
        s = st.lists(_simple(f.array_of._type, nullable=False), max_size=3)
    else:
        return _simple(f._type, f.nullable_for_version_q(version))
    return st.none() | s if f.nullable_for_version_q(version) else s


def _struct(struct_field: Any, data_class: Any, version: int) -> st.SearchStrategy[Any]:
    fields = {f.name: _field(f, version) for f in struct_field._fields if f.for_version_q(version)}
    return st.fixed_dictionaries(fields).map(lambda kw: data_class(**kw))


def _record(spec: Any) -> st.SearchStrategy[tuple[Any, Any]]:
    key = _struct(spec.key._struct, spec.key, int(spec.type))
    value = _struct(spec.value._struct, spec.value, spec.value.max_version)
    return st.tuples(key, st.none() | value)


SPECS = list(RECORD_SPECS.values())


def test_record_types_and_ids() -> None:
    assert {t.name: int(t) for t in RecordType} == {
        "CONNECT_GROUP_METADATA": 100,
        "CONNECT_GROUP_CONFIG_METADATA": 101,
        "CONNECT_GROUP_MEMBER_METADATA": 102,
        "CONNECT_GROUP_TARGET_ASSIGNMENT_METADATA": 103,
        "CONNECT_GROUP_TARGET_ASSIGNMENT_MEMBER": 104,
        "CONNECT_GROUP_CURRENT_MEMBER_ASSIGNMENT": 105,
        "CLASSIC_GROUP_METADATA": 106,
        "GROUP_OWNERSHIP": 107,
    }
    for spec in SPECS:
        # The key's only version is the type id; keys are never flexible (stable compaction keys).
        assert spec.key.valid_versions == (spec.type, spec.type)
        assert not spec.key.flexible_version_q(spec.type)
        assert spec.value.valid_versions == (0, 0) and spec.value.flexible_version_q(0)
        assert spec.key.name.removesuffix("Key") == spec.value.name.removesuffix("Value")
        assert record_spec(spec.type) is spec
    assert record_spec(7) is None


@pytest.mark.parametrize("spec", SPECS, ids=[s.key.name.removesuffix("Key") for s in SPECS])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_record_type_round_trips(spec: Any, data: st.DataObject) -> None:
    key, value = data.draw(_record(spec))
    key_bytes, value_bytes = encode_record(key, value)
    assert key_bytes[:2] == struct.pack(">h", spec.type)
    assert (value_bytes is None) == (value is None)
    if value_bytes is not None:
        assert value_bytes[:2] == b"\x00\x00"
    record = decode_record(key_bytes, value_bytes)
    assert isinstance(record, Record) and record.type == spec.type
    assert record.key == key and record.value == value and record.is_tombstone == (value is None)
    # Decoded records re-encode to the same bytes (what compaction and replay rely on).
    assert encode_record(record.key, record.value) == (key_bytes, value_bytes)


def test_member_assignment_record_with_meaningful_values() -> None:
    owned = {ConnectorTaskId("A", -1), ConnectorTaskId("A", 0)}
    revoking = {ConnectorTaskId("B", 1)}
    key = ConnectGroupCurrentMemberAssignmentKey(group_id="connect-cluster", member_id="w1-uuid")
    value = ConnectGroupCurrentMemberAssignmentValue(
        member_epoch=37,
        previous_member_epoch=36,
        state=MemberState.UNREVOKED,
        error=0,
        connectors_and_tasks=connectors_and_tasks(owned),
        pending_revocation=connectors_and_tasks(revoking),
        metadata_version=0,
        metadata=b"",
    )
    key_bytes, value_bytes = encode_record(key, value)
    assert key_bytes == struct.pack(">hh", 105, 15) + b"connect-cluster" + struct.pack(">h", 7) + b"w1-uuid"
    record = decode_record(key_bytes, value_bytes)
    assert items_of(record.value.connectors_and_tasks) == owned
    assert items_of(record.value.pending_revocation) == revoking
    assert record.value.state == MemberState.UNREVOKED


def test_classic_group_record_keeps_every_protocol() -> None:
    value = ClassicGroupMetadataValue(
        protocol_type="connect",
        generation=12,
        protocol_name="sessioned",
        leader="w1",
        current_state_timestamp=1_700_000_000_000,
        members=[
            ClassicGroupMetadataValue.ClassicMember(
                member_id="w1",
                group_instance_id=None,
                client_id="connect-1",
                client_host="/10.0.0.1",
                rebalance_timeout_ms=60000,
                session_timeout_ms=10000,
                protocols=[("sessioned", b"\x00\x02"), ("compatible", b"\x00\x01"), ("default", b"\x00\x00")],
                assignment=b"\x00\x02\x00",
            )
        ],
    )
    record = decode_record(*encode_record(ClassicGroupMetadataKey(group_id="g"), value))
    assert [p.name for p in record.value.members[0].protocols] == ["sessioned", "compatible", "default"]
    assert record.value == value


def test_tombstones_and_defaults() -> None:
    key_bytes, value_bytes = encode_record(ConnectGroupMetadataKey(group_id="g"), None)
    assert value_bytes is None and decode_record(key_bytes, None).is_tombstone
    record = decode_record(
        *encode_record(ConnectGroupMetadataKey(group_id="g"), ConnectGroupMetadataValue(epoch=3))
    )
    assert record.value.epoch == 3 and record.value.leader_id is None


def test_encode_record_rejects_mismatches() -> None:
    with pytest.raises(CodecError, match="not a record key"):
        encode_record(ConnectGroupMetadataValue(epoch=1), None)
    with pytest.raises(CodecError, match="not the value"):
        encode_record(ConnectGroupMetadataKey(group_id="g"), ClassicGroupMetadataValue(generation=1))
    with pytest.raises(CodecError) as info:
        encode_record(ConnectGroupMetadataKey(group_id="g"), ConnectGroupMetadataValue(epoch="not an int"))
    assert info.value.field == "value"


@pytest.mark.parametrize(
    ("key_bytes", "value_bytes", "field"),
    [
        (b"", None, "key"),
        (b"\x00", None, "key"),
        (struct.pack(">h", 2) + b"\x00\x01g", None, "key"),  # Kafka's GroupMetadataKey: not ours
        (struct.pack(">hh", 100, 5) + b"g", None, "key"),  # truncated group id
        (struct.pack(">hh", 100, 1) + b"gX", None, "key"),  # trailing bytes
        (struct.pack(">hh", 100, 1) + b"g", b"\x00", "value"),
        (struct.pack(">hh", 100, 1) + b"g", b"\x00\x01" + b"\x00" * 6, "value"),  # unknown value version
        (struct.pack(">hh", 100, 1) + b"g", b"\x00\x00\x00\x00", "value"),  # truncated value
    ],
)
def test_decode_record_reports_the_failing_part(
    key_bytes: bytes, value_bytes: bytes | None, field: str
) -> None:
    with pytest.raises(CodecError) as info:
        decode_record(key_bytes, value_bytes)
    assert info.value.field == field and info.value.offset is not None


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from([int(t) for t in RecordType] + [0, 2, 999]),
    st.binary(max_size=40),
    st.none() | st.binary(max_size=60),
)
def test_arbitrary_record_bytes_only_raise_codec_error(
    record_type: int, key_tail: bytes, value: bytes | None
) -> None:
    try:
        decode_record(struct.pack(">h", record_type) + key_tail, value)
    except CodecError:
        pass
