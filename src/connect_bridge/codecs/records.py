"""The coordinator's state records: key/value pairs in a compacted log, replayed to rebuild state.

The scheme is Apache Kafka's for ``__consumer_offsets`` (and what the Connect draft assumes): the key
starts with an int16 that is both the key's schema version and the record type id, so a compacted log
keeps exactly the latest value per (type, group[, member]); the value starts with an int16 value
schema version; a key with a null value is a tombstone that deletes it. Every key and value is a JSON
spec in ``codecs/specs`` (type "data"), so records are decoded by the same engine as requests.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import NamedTuple

from kafka.protocol.api_data import ApiData
from kafka.protocol.schemas.fields.codecs import EncodeBufferPool

from connect_bridge.codecs import specs
from connect_bridge.codecs.errors import CodecError

__all__ = [
    "RECORD_SPECS",
    "ClassicGroupMetadataKey",
    "ClassicGroupMetadataValue",
    "ConnectGroupConfigMetadataKey",
    "ConnectGroupConfigMetadataValue",
    "ConnectGroupCurrentMemberAssignmentKey",
    "ConnectGroupCurrentMemberAssignmentValue",
    "ConnectGroupMemberMetadataKey",
    "ConnectGroupMemberMetadataValue",
    "ConnectGroupMetadataKey",
    "ConnectGroupMetadataValue",
    "ConnectGroupTargetAssignmentMemberKey",
    "ConnectGroupTargetAssignmentMemberValue",
    "ConnectGroupTargetAssignmentMetadataKey",
    "ConnectGroupTargetAssignmentMetadataValue",
    "GroupOwnershipKey",
    "GroupOwnershipValue",
    "MemberState",
    "Record",
    "RecordSpec",
    "RecordType",
    "decode_record",
    "encode_record",
    "record_spec",
]

_INT16 = struct.Struct(">h")


class RecordType(IntEnum):
    """Record type ids (= key schema versions); a block clear of Kafka's own key versions (0-8+)."""

    CONNECT_GROUP_METADATA = 100
    CONNECT_GROUP_CONFIG_METADATA = 101
    CONNECT_GROUP_MEMBER_METADATA = 102
    CONNECT_GROUP_TARGET_ASSIGNMENT_METADATA = 103
    CONNECT_GROUP_TARGET_ASSIGNMENT_MEMBER = 104
    CONNECT_GROUP_CURRENT_MEMBER_ASSIGNMENT = 105
    CLASSIC_GROUP_METADATA = 106
    GROUP_OWNERSHIP = 107


class MemberState(IntEnum):
    """``ConnectGroupCurrentMemberAssignmentValue.State``: what a member's reconciliation waits for."""

    STABLE = 0
    UNREVOKED = 1
    UNRELEASED = 2


# --- Keys and values (specs/*Key.json, specs/*Value.json) -----------------------------------------


class ConnectGroupMetadataKey(ApiData, load_json=specs):
    """GroupId."""


class ConnectGroupMetadataValue(ApiData, load_json=specs):
    """Group epoch and sticky Connect leader; its presence makes the group a connect group."""


class ConnectGroupConfigMetadataKey(ApiData, load_json=specs):
    """GroupId."""


class ConnectGroupConfigMetadataValue(ApiData, load_json=specs):
    """The config view (offset, connectors with task counts) the assignment must cover."""


class ConnectGroupMemberMetadataKey(ApiData, load_json=specs):
    """GroupId, MemberId."""


class ConnectGroupMemberMetadataValue(ApiData, load_json=specs):
    """A member's metadata: ids, worker url/config offset, assignors, classic state of legacy members."""


class ConnectGroupTargetAssignmentMetadataKey(ApiData, load_json=specs):
    """GroupId."""


class ConnectGroupTargetAssignmentMetadataValue(ApiData, load_json=specs):
    """The target assignment's epoch (written after every member's part)."""


class ConnectGroupTargetAssignmentMemberKey(ApiData, load_json=specs):
    """GroupId, MemberId."""


class ConnectGroupTargetAssignmentMemberValue(ApiData, load_json=specs):
    """One member's target connectors and tasks."""


class ConnectGroupCurrentMemberAssignmentKey(ApiData, load_json=specs):
    """GroupId, MemberId."""


class ConnectGroupCurrentMemberAssignmentValue(ApiData, load_json=specs):
    """A member's epoch, reconciliation state, owned work and work pending revocation."""


class ClassicGroupMetadataKey(ApiData, load_json=specs):
    """GroupId."""


class ClassicGroupMetadataValue(ApiData, load_json=specs):
    """A whole classic group: generation, protocol, leader, members with protocols and assignments."""


class GroupOwnershipKey(ApiData, load_json=specs):
    """GroupId."""


class GroupOwnershipValue(ApiData, load_json=specs):
    """Which side coordinates an adopted group (relaying, adopted, releasing, released): docs/adoption.md."""


# --- The table ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordSpec:
    """One record type: its id (the key version) and its key and value classes."""

    type: RecordType
    key: type[ApiData]
    value: type[ApiData]


_TABLE: tuple[tuple[RecordType, type[ApiData], type[ApiData]], ...] = (
    (RecordType.CONNECT_GROUP_METADATA, ConnectGroupMetadataKey, ConnectGroupMetadataValue),
    (
        RecordType.CONNECT_GROUP_CONFIG_METADATA,
        ConnectGroupConfigMetadataKey,
        ConnectGroupConfigMetadataValue,
    ),
    (
        RecordType.CONNECT_GROUP_MEMBER_METADATA,
        ConnectGroupMemberMetadataKey,
        ConnectGroupMemberMetadataValue,
    ),
    (
        RecordType.CONNECT_GROUP_TARGET_ASSIGNMENT_METADATA,
        ConnectGroupTargetAssignmentMetadataKey,
        ConnectGroupTargetAssignmentMetadataValue,
    ),
    (
        RecordType.CONNECT_GROUP_TARGET_ASSIGNMENT_MEMBER,
        ConnectGroupTargetAssignmentMemberKey,
        ConnectGroupTargetAssignmentMemberValue,
    ),
    (
        RecordType.CONNECT_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        ConnectGroupCurrentMemberAssignmentKey,
        ConnectGroupCurrentMemberAssignmentValue,
    ),
    (RecordType.CLASSIC_GROUP_METADATA, ClassicGroupMetadataKey, ClassicGroupMetadataValue),
    (RecordType.GROUP_OWNERSHIP, GroupOwnershipKey, GroupOwnershipValue),
)

RECORD_SPECS: Mapping[int, RecordSpec] = MappingProxyType(
    {t: RecordSpec(t, key, value) for t, key, value in _TABLE}
)
"""Record type id -> :class:`RecordSpec`."""

_BY_KEY_CLASS: Mapping[type[ApiData], RecordSpec] = MappingProxyType(
    {s.key: s for s in RECORD_SPECS.values()}
)


def record_spec(record_type: int) -> RecordSpec | None:
    return RECORD_SPECS.get(record_type)


class Record(NamedTuple):
    """A decoded record; ``value`` is ``None`` for a tombstone."""

    type: RecordType
    key: ApiData
    value: ApiData | None

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


# --- Encode / decode ------------------------------------------------------------------------------


def encode_record(key: ApiData, value: ApiData | None) -> tuple[bytes, bytes | None]:
    """``(key_bytes, value_bytes)``; ``value=None`` writes a tombstone (``value_bytes`` is ``None``).

    The value is written at its own version when it has one (a decoded value), else at the newest
    version of its spec.
    """
    spec = _BY_KEY_CLASS.get(type(key))
    if spec is None:
        raise CodecError(f"{type(key).__name__} is not a record key", field="key")
    key_bytes = _encode(spec.key, key, spec.type, "key")
    if value is None:
        return key_bytes, None
    if type(value) is not spec.value:
        raise CodecError(
            f"{type(value).__name__} is not the value of {spec.key.__name__} ({spec.value.__name__})",
            field="value",
        )
    version = value.version if value.version is not None else spec.value.max_version
    return key_bytes, _encode(spec.value, value, version, "value")


def decode_record(
    key_bytes: bytes | bytearray | memoryview, value_bytes: bytes | bytearray | memoryview | None
) -> Record:
    """The typed record; raises :class:`CodecError` (field ``key``/``value``, byte offset) on bad bytes."""
    record_type = _read_version(key_bytes, "key")
    spec = RECORD_SPECS.get(record_type)
    if spec is None:
        raise CodecError(f"unknown record type {record_type}", field="key", offset=0)
    key = _decode(spec.key, record_type, key_bytes, "key")
    if value_bytes is None:
        return Record(spec.type, key, None)
    version = _read_version(value_bytes, "value")
    if not 0 <= version <= spec.value.max_version:
        raise CodecError(
            f"{spec.value.__name__} version {version} is not supported (max {spec.value.max_version})",
            field="value",
            offset=0,
        )
    return Record(spec.type, key, _decode(spec.value, version, value_bytes, "value"))


def _encode(cls: type[ApiData], obj: ApiData, version: int, where: str) -> bytes:
    flexible = bool(cls.flexible_version_q(version))
    try:
        encode = cls._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)
        with EncodeBufferPool.acquire() as out:
            out.ensure(_INT16.size)
            _INT16.pack_into(out.buf, 0, version)
            out.pos = _INT16.size
            encode(obj, out)
            return bytes(out.result())
    except Exception as exc:  # the engine raises many types for a bad value; report one
        raise CodecError(f"cannot encode {cls.__name__}: {type(exc).__name__}: {exc}", field=where) from exc


def _read_version(data: bytes | bytearray | memoryview, where: str) -> int:
    if len(data) < _INT16.size:
        raise CodecError(f"{len(data)}-byte {where} has no version", field=where, offset=0)
    return int(_INT16.unpack_from(data, 0)[0])


def _decode(cls: type[ApiData], version: int, data: bytes | bytearray | memoryview, where: str) -> ApiData:
    view = memoryview(data).cast("B")
    flexible = bool(cls.flexible_version_q(version))
    try:
        decode = cls._struct.compiled_decode_from(version, compact=flexible, tagged=flexible, data_class=cls)
        obj, end = decode(view, _INT16.size)
    except Exception as exc:  # bytes from disk or a topic: report, never crash
        raise CodecError(
            f"malformed {cls.__name__} v{version}: {type(exc).__name__}: {exc}",
            field=where,
            offset=_INT16.size,
        ) from exc
    if end != len(view):
        raise CodecError(
            f"{cls.__name__} v{version} ends at byte {end} of {len(view)}",
            field=where,
            offset=min(end, len(view)),
        )
    return obj
