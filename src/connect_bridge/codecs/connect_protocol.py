"""Kafka Connect embedded group protocol: JoinGroup subscriptions and SyncGroup assignments.

Wire layout and Java's reader rules: ``docs/connect-protocol.md``; the construct
definitions live in :mod:`connect_structs`. This module holds the typed values, their JSON form (the
``input`` shape of the golden vectors) and the four codec functions.

Representation of optional fields (why three states): a v1 payload can carry a field, carry it as
null (count/length -1), or end before it. Java collapses all three; we keep them apart so that
``encode(decode(b), version) == b`` for every payload without trailing bytes:

* :data:`ABSENT` -- the field's bytes are not in the payload (v0 bytes, or a v1 payload cut cleanly
  at a field boundary). ``to_json`` omits the key.
* ``None`` -- present on the wire as null (arrays count -1, allocation length -1). JSON ``null``.
* a value -- present. An empty tuple is an array of count 0.

The convenience properties (``connectors``, ``tasks``, ``delay_ms`` ...) read null and absent as
empty / 0, exactly as the Java runtime does, so the rest of the code never sees the distinction.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from construct import Struct

from connect_bridge.codecs.connect_structs import (
    ABSENT,
    MAX_STRING_BYTES,
    Absent,
    AbsentType,
    Window,
    assignment_struct,
    subscription_struct,
)
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import CONNECTOR_TASK, ConnectorTaskId

__all__ = [
    "ABSENT",
    "CONNECT_PROTOCOL_NAMES",
    "Absent",
    "AbsentType",
    "Assignment",
    "ConnectorGroup",
    "Subscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
    "payload_version",
]

CONNECT_PROTOCOL_NAMES: Final = {"default": 0, "compatible": 1, "sessioned": 2}
"""JoinGroup protocol name -> embedded protocol version (``ConnectProtocolCompatibility``)."""

_INT_BITS: Final = {"int16": 16, "int32": 32, "int64": 64}

Groups = tuple["ConnectorGroup", ...]


@dataclass(frozen=True, slots=True)
class ConnectorGroup:
    """One connector's entry in an assignment: ``-1`` in ``tasks`` is the connector instance itself."""

    connector: str
    tasks: tuple[int, ...]


_set_connector = getattr(ConnectorGroup, "connector").__set__  # the slot's descriptor  # noqa: B009
_set_tasks = getattr(ConnectorGroup, "tasks").__set__  # noqa: B009


def _filled_group(connector: str, tasks: tuple[int, ...]) -> ConnectorGroup:
    """``ConnectorGroup(connector, tasks)`` for the decoder's hot loop, about twice as fast.

    The generated frozen ``__init__`` goes through ``object.__setattr__`` per field; filling the two
    slots directly skips that. Only for values that are already typed (they come from ``struct``).
    """
    group = object.__new__(ConnectorGroup)
    _set_connector(group, connector)
    _set_tasks(group, tasks)
    return group


_make_group: Final[Callable[[str, tuple[int, ...]], ConnectorGroup]] = (
    _filled_group if getattr(ConnectorGroup, "__dataclass_params__").init else ConnectorGroup  # noqa: B009
)
"""How the decoder builds a group. In the compiled drill engine the class writes its own native
``__init__`` (``drills/compiled_source.py``), which is the faster way there."""


def _flatten(groups: Groups | AbsentType | None) -> tuple[ConnectorTaskId, ...]:
    """All (connector, index) pairs in wire order; null and absent read as empty (Java)."""
    if groups is None or groups is ABSENT:
        return ()
    return tuple(ConnectorTaskId(g.connector, t) for g in groups for t in g.tasks)


def _connectors(items: tuple[ConnectorTaskId, ...]) -> tuple[str, ...]:
    """The connector instances among ``items`` (the ``-1`` entries): one reading of the wire's
    convention for the assigned and the revoked sets alike."""
    return tuple(item.connector for item in items if item.task == CONNECTOR_TASK)


def _tasks(items: tuple[ConnectorTaskId, ...]) -> tuple[ConnectorTaskId, ...]:
    """The tasks among ``items`` (entries other than ``-1``)."""
    return tuple(item for item in items if item.task != CONNECTOR_TASK)


def _group(items: Iterable[ConnectorTaskId | tuple[str, int]]) -> Groups:
    """Group items the way Java's ``ExtendedAssignment`` writer does.

    One group per connector; connectors whose instance is included come first (in order of first
    appearance, duplicates collapsed) with ``-1`` leading their group; task indices follow in the order
    supplied (duplicates kept, like Java); task-only connectors get groups after those, in order of
    first appearance.
    """
    items = list(items)
    table: dict[str, list[int]] = {}
    for connector, task in items:
        if task == CONNECTOR_TASK and connector not in table:
            table[connector] = [CONNECTOR_TASK]
    for connector, task in items:
        if task != CONNECTOR_TASK:
            table.setdefault(connector, []).append(task)
    return tuple(ConnectorGroup(connector, tuple(tasks)) for connector, tasks in table.items())


@dataclass(frozen=True, slots=True)
class Assignment:
    """A SyncGroup assignment (also embedded in v1+ subscriptions as the worker's allocation).

    ``assignment``/``revoked``: a tuple of groups, ``None`` (null array) or :data:`ABSENT`.
    ``delay``: an int32 in milliseconds or :data:`ABSENT`. In v1+ ``assignment`` is a delta, not the
    full set (KIP-415; docs/connect-protocol.md, "Wire layout").
    """

    error: int
    leader: str
    leader_url: str
    config_offset: int
    assignment: Groups | AbsentType | None = ()
    revoked: Groups | AbsentType | None = ()
    delay: int | AbsentType = 0

    @classmethod
    def build(
        cls,
        error: int,
        leader: str,
        leader_url: str,
        config_offset: int,
        assigned: Iterable[ConnectorTaskId | tuple[str, int]],
        revoked: Iterable[ConnectorTaskId | tuple[str, int]] = (),
        delay: int = 0,
    ) -> Assignment:
        """An assignment whose groups are laid out exactly as Java's writer would for these items."""
        return cls(error, leader, leader_url, config_offset, _group(assigned), _group(revoked), delay)

    @property
    def items(self) -> tuple[ConnectorTaskId, ...]:
        """Every assigned item, connector instances included, in wire order."""
        return _flatten(self.assignment)

    @property
    def connectors(self) -> tuple[str, ...]:
        """Assigned connector instances: one name per ``-1`` entry, in wire order."""
        return _connectors(self.items)

    @property
    def tasks(self) -> tuple[ConnectorTaskId, ...]:
        """Assigned tasks (entries other than ``-1``), in wire order."""
        return _tasks(self.items)

    @property
    def revoked_items(self) -> tuple[ConnectorTaskId, ...]:
        return _flatten(self.revoked)

    @property
    def revoked_connectors(self) -> tuple[str, ...]:
        return _connectors(self.revoked_items)

    @property
    def revoked_tasks(self) -> tuple[ConnectorTaskId, ...]:
        return _tasks(self.revoked_items)

    @property
    def delay_ms(self) -> int:
        """The scheduled-rebalance delay; an absent field means 0, as in Java."""
        return 0 if self.delay is ABSENT else self.delay

    def to_json(self) -> dict[str, Any]:
        """The vectors' ``input`` shape: only fields present on the wire have a key."""
        doc: dict[str, Any] = {
            "error": self.error,
            "leader": self.leader,
            "leader_url": self.leader_url,
            "config_offset": self.config_offset,
        }
        for key in ("assignment", "revoked"):
            groups = getattr(self, key)
            if groups is not ABSENT:
                doc[key] = (
                    None
                    if groups is None
                    else [{"connector": g.connector, "tasks": list(g.tasks)} for g in groups]
                )
        if self.delay is not ABSENT:
            doc["delay"] = self.delay
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Assignment:
        """Inverse of :meth:`to_json`; every type and range is checked (CodecError names the path)."""
        return _assignment_from_json(doc, "")


@dataclass(frozen=True, slots=True)
class Subscription:
    """JoinGroup metadata of a Connect worker.

    ``allocation`` is the worker's full current assignment (v1+), ``None`` when written as null bytes
    (no snapshot), or :data:`ABSENT` for v0 bytes and v1 bytes that end after ``config_offset``.
    """

    url: str
    config_offset: int
    allocation: Assignment | AbsentType | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"url": self.url, "config_offset": self.config_offset}
        if self.allocation is not ABSENT:
            doc["allocation"] = None if self.allocation is None else self.allocation.to_json()
        return doc

    @classmethod
    def from_json(cls, doc: Any) -> Subscription:
        fields = _json_object(doc, "", {"url", "config_offset"}, {"allocation"})
        allocation = fields.get("allocation", ABSENT)
        return cls(
            url=_check_string(fields["url"], "url"),
            config_offset=_check_int(fields["config_offset"], "int64", "config_offset"),
            allocation=allocation
            if allocation in (None, ABSENT)
            else _assignment_from_json(allocation, "allocation."),
        )


# --------------------------------------------------------------------------------------------------
# Validation shared by from_json and the encoders' error path.
# --------------------------------------------------------------------------------------------------


def _check_int(value: Any, kind: str, path: str) -> int:
    bits = _INT_BITS[kind]
    if type(value) is not int:
        raise CodecError(f"expected an {kind} integer, got {type(value).__name__}", field=path)
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not low <= value <= high:
        raise CodecError(f"{value} is out of {kind} range [{low}, {high}]", field=path)
    return value


def _check_string(value: Any, path: str) -> str:
    if type(value) is not str:
        raise CodecError(f"expected a string, got {type(value).__name__}", field=path)
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise CodecError(f"string is not encodable as UTF-8 ({exc.reason})", field=path) from None
    if size > MAX_STRING_BYTES:
        raise CodecError(f"string is {size} UTF-8 bytes, the limit is {MAX_STRING_BYTES}", field=path)
    return value


def _check_groups(value: Any, path: str, from_json: bool) -> Groups | AbsentType | None:
    """Groups from JSON (lists of ``{connector, tasks}`` objects) or from a value (ConnectorGroups)."""
    if value is None or value is ABSENT:
        return value
    if not isinstance(value, tuple | list):
        raise CodecError(f"expected a list of groups or null, got {type(value).__name__}", field=path)
    groups = []
    for index, group in enumerate(value):
        where = f"{path}[{index}]"
        if from_json:
            fields = _json_object(group, where + ".", {"connector", "tasks"}, set())
            connector, tasks = fields["connector"], fields["tasks"]
        elif isinstance(group, ConnectorGroup):
            connector, tasks = group.connector, group.tasks
        else:
            raise CodecError(f"expected a ConnectorGroup, got {type(group).__name__}", field=where)
        if not isinstance(tasks, tuple | list):
            raise CodecError(f"expected a list of int32, got {type(tasks).__name__}", field=f"{where}.tasks")
        groups.append(
            ConnectorGroup(
                _check_string(connector, f"{where}.connector"),
                tuple(_check_int(t, "int32", f"{where}.tasks[{i}]") for i, t in enumerate(tasks)),
            )
        )
    return tuple(groups)


def _json_object(doc: Any, prefix: str, required: set[str], optional: set[str]) -> Mapping[str, Any]:
    where = prefix.rstrip(".") or "(document)"
    if not isinstance(doc, Mapping):
        raise CodecError(f"expected a JSON object, got {type(doc).__name__}", field=where)
    for key in doc:
        if key not in required and key not in optional:
            raise CodecError(f"unknown field {key!r}", field=f"{prefix}{key}")
    for key in sorted(required - doc.keys()):
        raise CodecError("required field is missing", field=f"{prefix}{key}")
    return doc


def _assignment_from_json(doc: Any, prefix: str) -> Assignment:
    fields = _json_object(
        doc, prefix, {"error", "leader", "leader_url", "config_offset"}, {"assignment", "revoked", "delay"}
    )
    delay = fields.get("delay", ABSENT)
    return Assignment(
        error=_check_int(fields["error"], "int16", f"{prefix}error"),
        leader=_check_string(fields["leader"], f"{prefix}leader"),
        leader_url=_check_string(fields["leader_url"], f"{prefix}leader_url"),
        config_offset=_check_int(fields["config_offset"], "int64", f"{prefix}config_offset"),
        assignment=_check_groups(fields.get("assignment", ABSENT), f"{prefix}assignment", from_json=True),
        revoked=_check_groups(fields.get("revoked", ABSENT), f"{prefix}revoked", from_json=True),
        delay=delay if delay is ABSENT else _check_int(delay, "int32", f"{prefix}delay"),
    )


def _validate_assignment(asg: Any, prefix: str) -> None:
    """Explain why an assignment value cannot be encoded (used only after the fast build failed)."""
    if not isinstance(asg, Assignment):
        raise CodecError(f"expected an Assignment, got {type(asg).__name__}", field=prefix.rstrip(".") or "")
    _check_int(asg.error, "int16", f"{prefix}error")
    _check_string(asg.leader, f"{prefix}leader")
    _check_string(asg.leader_url, f"{prefix}leader_url")
    _check_int(asg.config_offset, "int64", f"{prefix}config_offset")
    _check_groups(asg.assignment, f"{prefix}assignment", from_json=False)
    _check_groups(asg.revoked, f"{prefix}revoked", from_json=False)
    if asg.delay is not ABSENT:
        _check_int(asg.delay, "int32", f"{prefix}delay")


def _validate_subscription(sub: Subscription) -> None:
    _check_string(sub.url, "url")
    _check_int(sub.config_offset, "int64", "config_offset")
    if isinstance(sub.allocation, Assignment):
        _validate_assignment(sub.allocation, "allocation.")


# --------------------------------------------------------------------------------------------------
# Codecs
# --------------------------------------------------------------------------------------------------

_ASSIGNMENT_STRUCT: Final[Struct] = assignment_struct(_make_group)
_SUBSCRIPTION_STRUCT: Final[Struct] = subscription_struct(_ASSIGNMENT_STRUCT)
_ASSIGNMENT_FAST: Final = _ASSIGNMENT_STRUCT.compile()
_SUBSCRIPTION_FAST: Final = _SUBSCRIPTION_STRUCT.compile()


def _parse(fast: Any, checked: Struct, data: bytes, kind: str) -> Any:
    """Parse with the compiled struct; if it fails, re-walk with the interpreted one to explain why."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise CodecError(f"cannot decode {kind} from {type(data).__name__}, expected bytes")
    try:
        return fast.parse(data)
    except Exception:
        pass  # the fast path only detects bad bytes; the checked walk below explains them
    try:
        return checked.parse_stream(Window(bytes(data)))
    except CodecError:
        raise
    except Exception as exc:  # pragma: no cover - defensive: the checked walk raises CodecError itself
        raise CodecError(f"malformed {kind}: {exc!r}", field="(payload)", offset=0) from None


def _assignment_from_raw(raw: Any) -> Assignment:
    return Assignment(
        raw["error"],
        raw["leader"],
        raw["leader_url"],
        raw["config_offset"],
        raw["assignment"],
        raw["revoked"],
        raw["delay"],
    )


MEMO_SIZE: Final = 4096
"""Decoded and encoded payloads remembered per process (least recently used first out), unless a
caller passes ``remember=False``. A worker sends the same subscription bytes at every join and the
same assignment comes back to it; the values are frozen (tuples inside), so one decoded value can be
handed out any number of times. A simulated drill joins thousands of times: remembering saves most
of ``construct``'s time there (``benchmarks/codecs.py`` measures the codec itself, remembering
nothing)."""


def decode_assignment(data: bytes, *, remember: bool = True) -> Assignment:
    """Decode SyncGroup assignment bytes of any version >= 0, as tolerantly as Java's v1 reader."""
    if remember and type(data) is bytes:
        return _remembered_assignment(data)
    return _parse_assignment(data)


def _parse_assignment(data: bytes) -> Assignment:
    return _assignment_from_raw(_parse(_ASSIGNMENT_FAST, _ASSIGNMENT_STRUCT, data, "assignment"))


_remembered_assignment: Final = lru_cache(maxsize=MEMO_SIZE)(_parse_assignment)


def decode_subscription(data: bytes, *, remember: bool = True) -> Subscription:
    """Decode JoinGroup metadata bytes of any version >= 0, as tolerantly as Java's v1 reader."""
    if remember and type(data) is bytes:
        return _remembered_subscription(data)
    return _parse_subscription(data)


def _parse_subscription(data: bytes) -> Subscription:
    raw = _parse(_SUBSCRIPTION_FAST, _SUBSCRIPTION_STRUCT, data, "subscription")
    allocation = raw["allocation"]
    if allocation is not None and allocation is not ABSENT:
        allocation = _assignment_from_raw(allocation)
    return Subscription(raw["url"], raw["config_offset"], allocation)


_remembered_subscription: Final = lru_cache(maxsize=MEMO_SIZE)(_parse_subscription)


def payload_version(data: bytes) -> int:
    """The int16 header of a subscription or assignment payload (negative versions are rejected)."""
    if len(data) < 2:
        raise CodecError(
            f"truncated int16: needs 2 bytes, only {len(data)} available", field="version", offset=0
        )
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:
        raise CodecError(f"Unsupported subscription version: {version}", field="version", offset=0)
    return version


def _check_encode_version(version: Any) -> int:
    if type(version) is not int or not 0 <= version <= 0x7FFF:
        raise CodecError(f"Unsupported subscription version: {version!r} (must be 0..32767)", field="version")
    return version


def _tail(values: dict[str, Any], names: tuple[str, ...], prefix: str) -> None:
    """Enforce "absent fields only at the end": a present field after an absent one has no encoding."""
    gap = None
    for name in names:
        if values[name] is ABSENT:
            gap = gap or name
        elif gap is not None:
            raise CodecError(
                f"field is present but the earlier field '{prefix}{gap}' is absent", field=f"{prefix}{name}"
            )


def _assignment_wire(asg: Assignment, version: int, prefix: str) -> dict[str, Any]:
    """The struct's input for ``asg`` at ``version``; v0 may only drop fields that carry nothing."""
    if not isinstance(asg, Assignment):
        raise CodecError(f"expected an Assignment, got {type(asg).__name__}", field=prefix.rstrip("."))
    wire = {
        "version": version,
        "error": asg.error,
        "leader": asg.leader,
        "leader_url": asg.leader_url,
        "config_offset": asg.config_offset,
        "assignment": asg.assignment,
        "revoked": asg.revoked,
        "delay": asg.delay,
    }
    if version == 0:
        if asg.revoked not in (ABSENT, None, (), []):
            raise CodecError("revoked work cannot be encoded at version 0", field=f"{prefix}revoked")
        if asg.delay not in (ABSENT, 0):
            raise CodecError("a delay cannot be encoded at version 0", field=f"{prefix}delay")
        wire["revoked"] = wire["delay"] = ABSENT
    _tail(wire, ("assignment", "revoked", "delay"), prefix)
    return wire


def _build(fast: Any, wire: dict[str, Any], explain: Callable[[], None], kind: str) -> bytes:
    try:
        return bytes(fast.build(wire))
    except Exception as exc:
        explain()  # the fast path only detects bad values; ``explain`` names the field
        raise CodecError(f"cannot encode {kind}: {exc}") from None


class _Carried:
    """Carries a value through ``lru_cache`` without taking part in its key."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __hash__(self) -> int:
        return 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Carried)


_UNKEYED: Final = object()
"""What a key function answers for a value it cannot vouch for: it is encoded, never remembered."""


def _groups_key(groups: Any) -> Any:
    """Groups as nested tuples, or :data:`_UNKEYED` unless every part has exactly its declared type."""
    if groups is None or groups is ABSENT:
        return groups
    if type(groups) is not tuple:
        return _UNKEYED
    key = []
    for group in groups:
        if type(group) is not ConnectorGroup or type(group.connector) is not str:
            return _UNKEYED
        tasks = group.tasks
        if type(tasks) is not tuple or not all(type(task) is int for task in tasks):
            return _UNKEYED
        key.append((group.connector, tasks))
    return tuple(key)


def _assignment_key(asg: Any) -> Any:
    """The memo key of an assignment: its fields as plain tuples, each of exactly its declared type.

    Exact types, unlike equality, tell ``1`` from ``True`` and ``1.0`` and a tuple from a list, so a
    value the codec refuses never gets the bytes of an equal one it took.
    """
    if type(asg) is not Assignment:
        return _UNKEYED
    scalars = (asg.error, asg.leader, asg.leader_url, asg.config_offset)
    if not all(type(v) is t for v, t in zip(scalars, (int, str, str, int), strict=True)):
        return _UNKEYED
    if asg.delay is not ABSENT and type(asg.delay) is not int:
        return _UNKEYED
    assigned, revoked = _groups_key(asg.assignment), _groups_key(asg.revoked)
    if assigned is _UNKEYED or revoked is _UNKEYED:
        return _UNKEYED
    return (*scalars, assigned, revoked, asg.delay)


def _subscription_key(sub: Any) -> Any:
    """The memo key of a subscription, by the same rule as :func:`_assignment_key`."""
    if type(sub) is not Subscription or type(sub.url) is not str or type(sub.config_offset) is not int:
        return _UNKEYED
    allocation = sub.allocation
    if allocation is not None and allocation is not ABSENT:
        allocation = _assignment_key(allocation)
        if allocation is _UNKEYED:
            return _UNKEYED
    return (sub.url, sub.config_offset, allocation)


@lru_cache(maxsize=MEMO_SIZE)
def _remembered_encoding(
    build: Callable[[Any, int], bytes], key: Hashable, version: int, carried: _Carried
) -> bytes:
    """``build(value, version)``, remembered by the value's key (which stands for it exactly)."""
    return build(carried.value, version)


def _encode(
    build: Callable[[Any, int], bytes], key_of: Callable[[Any], Any], value: Any, version: Any, remember: bool
) -> bytes:
    """A version that is not exactly an ``int`` is never remembered: it is refused."""
    if remember and type(version) is int:
        key = key_of(value)
        if key is not _UNKEYED:
            return _remembered_encoding(build, key, version, _Carried(value))
    return build(value, version)


def encode_assignment(asg: Assignment, version: int, *, remember: bool = True) -> bytes:
    """Encode at ``version``: v0 layout for 0, v1 layout for >= 1, writing exactly the present fields."""
    return _encode(_build_assignment, _assignment_key, asg, version, remember)


def _build_assignment(asg: Assignment, version: int) -> bytes:
    version = _check_encode_version(version)
    wire = _assignment_wire(asg, version, "")
    return _build(_ASSIGNMENT_FAST, wire, lambda: _validate_assignment(asg, ""), "assignment")


def encode_subscription(sub: Subscription, version: int, *, remember: bool = True) -> bytes:
    """Encode at ``version``; the allocation's inner header gets the same version."""
    return _encode(_build_subscription, _subscription_key, sub, version, remember)


def _build_subscription(sub: Subscription, version: int) -> bytes:
    version = _check_encode_version(version)
    if not isinstance(sub, Subscription):
        raise CodecError(f"expected a Subscription, got {type(sub).__name__}")
    allocation: Any = sub.allocation
    if version == 0 and allocation is not ABSENT and allocation is not None:
        raise CodecError("an allocation cannot be encoded at version 0", field="allocation")
    if version == 0:
        allocation = ABSENT
    elif allocation is not ABSENT and allocation is not None:
        allocation = _assignment_wire(allocation, version, "allocation.")
    wire = {"version": version, "url": sub.url, "config_offset": sub.config_offset, "allocation": allocation}
    return _build(_SUBSCRIPTION_FAST, wire, lambda: _validate_subscription(sub), "subscription")
