"""Connect embedded protocol codec: golden vectors, error locations, encode rules, properties."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect_bridge.codecs import connect_protocol as cp
from connect_bridge.codecs.connect_protocol import (
    ABSENT,
    Assignment,
    ConnectorGroup,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    payload_version,
)
from connect_bridge.codecs.connect_structs import Window
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import ConnectorTaskId

G = ConnectorGroup
KINDS = {
    "subscription": (decode_subscription, encode_subscription, Subscription),
    "assignment": (decode_assignment, encode_assignment, Assignment),
}
ENCODABLE_NOTES = {None, "null-array", "missing-optional-fields"}


def _groups_without_nulls(doc: dict[str, Any]) -> dict[str, Any]:
    """What Java re-encodes after reading null arrays: empty arrays instead."""
    out = dict(doc)
    for key in ("assignment", "revoked"):
        if key in out and out[key] is None:
            out[key] = []
    return out


# --------------------------------------------------------------------------------------------------
# Golden vectors
# --------------------------------------------------------------------------------------------------


def test_vector_file_has_every_category(vectors: list[dict[str, Any]]) -> None:
    notes = {v.get("note") for v in vectors}
    assert notes == {None, "null-array", "forward-compat", "missing-optional-fields", "invalid"}
    assert len(vectors) == 40


INT32_FIELDS = {"delay"}
"""The fields an invalid vector cuts short (``mutation.truncated_inside``): all int32 so far."""


def _invalid_vector_location(vector: dict[str, Any], data: bytes) -> tuple[str, int]:
    """Where decoding an invalid vector must fail: a bad header version at the version field, a
    truncated field where that field starts (its 4 bytes less the ones the vector removed)."""
    mutation = vector["mutation"]
    if "header_version" in mutation:
        return "version", 0
    field = mutation["truncated_inside"]
    assert field in INT32_FIELDS, f"a vector truncates {field}: teach this test its width"
    return field, len(data) - (4 - mutation["bytes_removed"])


def test_vector_decodes_to_input(connect_vector: dict[str, Any]) -> None:
    decode, _, _ = KINDS[connect_vector["kind"]]
    data = bytes.fromhex(connect_vector["hex"])
    if connect_vector.get("note") == "invalid":
        with pytest.raises(CodecError) as info:
            decode(data)
        assert (info.value.field, info.value.offset) == _invalid_vector_location(connect_vector, data)
        return
    assert decode(data).to_json() == connect_vector["input"]


def test_vector_encodes_byte_exact(connect_vector: dict[str, Any]) -> None:
    decode, encode, cls = KINDS[connect_vector["kind"]]
    version, expected = connect_vector["version"], connect_vector["hex"]
    note = connect_vector.get("note")
    if note in ENCODABLE_NOTES:
        assert encode(cls.from_json(connect_vector["input"]), version).hex() == expected
        assert encode(decode(bytes.fromhex(expected)), version).hex() == expected
    elif note == "forward-compat":
        # Re-encoding what was understood gives the payload before the newer version's additions.
        clean = bytes.fromhex(connect_vector["clean_hex"])
        assert encode(decode(bytes.fromhex(expected)), payload_version(clean)) == clean
    elif version < 0:
        with pytest.raises(CodecError) as info:
            encode(cls.from_json(connect_vector["input"]), version)
        assert info.value.field == "version"
    else:  # a payload cut inside a field: the intact encoding extends it
        full = encode(cls.from_json(connect_vector["input"]), version).hex()
        assert full.startswith(expected)
        assert len(full) - len(expected) == 2 * connect_vector["mutation"]["bytes_removed"]


def _decoded_assignment(asg: Assignment) -> dict[str, Any]:
    """The README's ``decoded`` shape, computed only through the convenience properties."""
    return {
        "error": asg.error,
        "leader": asg.leader,
        "leader_url": asg.leader_url,
        "config_offset": asg.config_offset,
        "connectors": list(asg.connectors),
        "tasks": [{"connector": c, "task": t} for c, t in asg.tasks],
        "revoked_connectors": list(asg.revoked_connectors),
        "revoked_tasks": [{"connector": c, "task": t} for c, t in asg.revoked_tasks],
        "delay": asg.delay_ms,
    }


def test_vector_decoded_semantics(connect_vector: dict[str, Any]) -> None:
    decode, _, _ = KINDS[connect_vector["kind"]]
    data = bytes.fromhex(connect_vector["hex"])
    expected = connect_vector.get("decoded")
    if expected is None:  # Java could not decode it either
        assert connect_vector["decode_ok"] is False
        with pytest.raises(CodecError):
            decode(data)
        return
    expected = dict(expected)
    assert payload_version(data) == expected.pop("version")
    if connect_vector["kind"] == "assignment":
        assert _decoded_assignment(decode_assignment(data)) == expected
        return
    sub = decode_subscription(data)
    allocation = expected.pop("allocation")
    assert {"url": sub.url, "config_offset": sub.config_offset} == expected
    if allocation is None:
        assert sub.allocation is None or sub.allocation is ABSENT
        return
    assert isinstance(sub.allocation, Assignment)
    inner_start = 2 + 2 + len(sub.url.encode()) + 8 + 4
    assert payload_version(data[inner_start:]) == allocation.pop("version")
    assert _decoded_assignment(sub.allocation) == allocation


def _java_rewrite(value: Any) -> Any:
    """What Java's writer makes of a decoded value: groups rebuilt from the item lists, defaults filled."""
    if isinstance(value, Subscription):
        allocation = value.allocation
        return dataclasses.replace(
            value, allocation=_java_rewrite(allocation) if isinstance(allocation, Assignment) else None
        )

    def items(connectors: tuple[str, ...], tasks: tuple[ConnectorTaskId, ...]) -> list[ConnectorTaskId]:
        return [ConnectorTaskId(c, -1) for c in connectors] + list(tasks)

    return Assignment.build(
        value.error,
        value.leader,
        value.leader_url,
        value.config_offset,
        items(value.connectors, value.tasks),
        items(value.revoked_connectors, value.revoked_tasks),
        value.delay_ms,
    )


# Java's bytes for the decoded object of each non-roundtrip vector, by note.
_REWRITE_DEFAULTS = {"assignment": "0000000000000000", "config_offset": "ffffffff"}


def test_vector_rebuilt_like_javas_writer(connect_vector: dict[str, Any]) -> None:
    """Assignment.build over the decoded item lists writes what Java's writer writes for them."""
    decode, encode, _ = KINDS[connect_vector["kind"]]
    note, data = connect_vector.get("note"), connect_vector["hex"]
    if note == "invalid":
        with pytest.raises(CodecError):
            decode(bytes.fromhex(data))
        return
    if note == "null-array":
        expected = connect_vector["java_reencode_hex"]
    elif note == "forward-compat":
        expected = connect_vector["clean_hex"]
    elif note == "missing-optional-fields":
        expected = data + _REWRITE_DEFAULTS[connect_vector["mutation"]["truncated_after"]]
    else:
        expected = data
    value = _java_rewrite(decode(bytes.fromhex(data)))
    assert encode(value, payload_version(bytes.fromhex(expected))).hex() == expected


def test_invalid_vectors_report_java_reason() -> None:
    with pytest.raises(CodecError, match=r"Unsupported subscription version: -1") as info:
        decode_assignment(bytes.fromhex("ffff00000008776f726b65722d65"))
    assert (info.value.field, info.value.offset) == ("version", 0)


# --------------------------------------------------------------------------------------------------
# Where errors are reported (field path + absolute offset in the outer buffer)
# --------------------------------------------------------------------------------------------------

# Offsets of ASG at version 1 (84 bytes): version 0, error 2, leader 4, leader_url 7, config_offset 10,
# assignment 18 [c1 connector 22, tasks 26 (elements 30, 34); c2 connector 38, tasks 42 (element 46)],
# revoked 50 [r connector 54, tasks 57 (61); s connector 65, tasks 68 (72, 76)], delay 80.
ASG = Assignment(0, "L", "U", 7, (G("c1", (-1, 0)), G("c2", (1,))), (G("r", (2,)), G("s", (3, 4))), 5)
ASG_BYTES = encode_assignment(ASG, 1)
# SUB at version 1: version 0, url 2, config_offset 5, allocation 13, embedded ASG from 17 (101 bytes).
SUB = Subscription("W", 3, ASG)
SUB_BYTES = encode_subscription(SUB, 1)
INNER = 17


def _patch(data: bytes, offset: int, hex_bytes: str) -> bytes:
    new = bytes.fromhex(hex_bytes)
    return data[:offset] + new + data[offset + len(new) :]


def _asg(offset: int, hex_bytes: str) -> bytes:
    return _patch(ASG_BYTES, offset, hex_bytes)


def _sub(offset: int, hex_bytes: str) -> bytes:
    return _patch(SUB_BYTES, offset, hex_bytes)


def _inner(offset: int, hex_bytes: str) -> bytes:
    """SUB with ``hex_bytes`` at ``offset`` into its embedded allocation."""
    return _patch(SUB_BYTES, INNER + offset, hex_bytes)


ARRAY_OF_SIZE = "Error reading array of size "
# (id, bytes, field, offset, message fragment) per kind, one row a case.
ASSIGNMENT_ERRORS = [
    ("empty", b"", "version", 0, "missing value"),
    ("cut-version", b"\x00", "version", 0, "truncated int16"),
    ("negative-version", _asg(0, "fffe"), "version", 0, "Unsupported subscription version: -2"),
    ("missing-error", ASG_BYTES[:2], "error", 2, "no default value"),
    ("negative-string", _asg(4, "ffff"), "leader", 4, "cannot be negative"),
    ("long-string", _asg(4, "7fff"), "leader", 4, "Error reading string"),
    ("bad-utf8", _asg(6, "ff"), "leader", 4, "UTF-8"),
    ("cut-offset", ASG_BYTES[:14], "config_offset", 10, "truncated int64"),
    ("count-over-remaining", _asg(18, "7fffffff"), "assignment", 18, ARRAY_OF_SIZE + "2147483647"),
    ("count-no-bytes-left", ASG_BYTES[:22], "assignment", 18, "only 0 bytes"),
    ("group-string", _asg(38, "ffff"), "assignment[1].connector", 38, "cannot be negative"),
    ("group-cut-before-tasks", ASG_BYTES[:26], "assignment[0].tasks", 26, "truncated"),
    ("group-cut-before-connector", ASG_BYTES[:38], "assignment[1].connector", 38, "truncated"),
    ("tasks-negative", _asg(26, "fffffffe"), "assignment[0].tasks", 26, "Array size -2 cannot be negative"),
    ("tasks-null-not-allowed", _asg(26, "ffffffff"), "assignment[0].tasks", 26, "cannot be negative"),
    ("tasks-over-remaining", _asg(26, "000003e8"), "assignment[0].tasks", 26, ARRAY_OF_SIZE + "1000"),
    ("task-element-cut", ASG_BYTES[:48], "assignment[1].tasks[0]", 46, "truncated int32"),
    ("revoked-count-cut", ASG_BYTES[:52], "revoked", 50, "truncated"),
    ("revoked-over-remaining", ASG_BYTES[:54], "revoked", 50, "only 0 bytes"),
    ("delay-cut", ASG_BYTES[:82], "delay", 80, "truncated int32"),
]
SUBSCRIPTION_ERRORS = [
    ("sub-empty", b"", "version", 0, "missing"),
    ("sub-negative-version", _sub(0, "ffff"), "version", 0, "Unsupported subscription version: -1"),
    ("sub-bad-utf8", _sub(4, "c3"), "url", 2, "UTF-8"),
    ("sub-missing-offset", SUB_BYTES[:5], "config_offset", 5, "no default value"),
    ("allocation-length-cut", SUB_BYTES[:15], "allocation", 13, "truncated"),
    ("allocation-over-remaining", _sub(13, "7fffffff"), "allocation", 13, "Error reading bytes of size"),
]
# Errors inside a subscription's embedded allocation: field and offset relative to the allocation
# (reported as ``allocation.<field>`` at ``INNER + offset``).
ALLOCATION_ERRORS = [
    ("allocation-empty", _sub(13, "00000000")[:INNER], "version", 0, "missing"),
    ("allocation-negative-version", _inner(0, "ffff"), "version", 0, "Unsupported subscription version: -1"),
    ("allocation-nested-tasks", _inner(68, "ffffffff"), "revoked[1].tasks", 68, "cannot be negative"),
    ("allocation-cut-inside-delay", _sub(13, "00000052"), "delay", 80, "truncated int32"),
    ("allocation-cut-inside-group", _sub(13, "00000024"), "assignment[0].tasks[1]", 34, "truncated int32"),
]
ERROR_CASES = [
    *((name, "assignment", *rest) for name, *rest in ASSIGNMENT_ERRORS),
    *((name, "subscription", *rest) for name, *rest in SUBSCRIPTION_ERRORS),
    *(
        (name, "subscription", data, f"allocation.{field}", INNER + offset, fragment)
        for name, data, field, offset, fragment in ALLOCATION_ERRORS
    ),
]


@pytest.mark.parametrize(
    ("kind", "data", "field", "offset", "fragment"),
    [case[1:] for case in ERROR_CASES],
    ids=[case[0] for case in ERROR_CASES],
)
def test_error_location(kind: str, data: bytes, field: str, offset: int, fragment: str) -> None:
    decode, _, _ = KINDS[kind]
    with pytest.raises(CodecError) as info:
        decode(data)
    assert (info.value.field, info.value.offset) == (field, offset)
    assert fragment in str(info.value)
    assert f"byte offset {offset}" in str(info.value)


def test_boundaries_give_absent_fields() -> None:
    assert decode_assignment(ASG_BYTES[:18]) == dataclasses.replace(
        ASG, assignment=ABSENT, revoked=ABSENT, delay=ABSENT
    )
    assert decode_assignment(ASG_BYTES[:50]) == dataclasses.replace(ASG, revoked=ABSENT, delay=ABSENT)
    assert decode_assignment(ASG_BYTES[:80]) == dataclasses.replace(ASG, delay=ABSENT)
    assert decode_subscription(SUB_BYTES[:13]) == dataclasses.replace(SUB, allocation=ABSENT)
    # An allocation length that stops the embedded assignment after its array: the rest is absent,
    # and the outer bytes after the allocation are trailing garbage.
    cut = decode_subscription(_patch(SUB_BYTES, 13, "00000032"))
    assert cut.allocation == dataclasses.replace(ASG, revoked=ABSENT, delay=ABSENT)


def test_null_and_negative_counts_read_as_null() -> None:
    for count in ("ffffffff", "80000000"):
        asg = decode_assignment(_patch(ASG_BYTES[:22], 18, count))
        assert asg.assignment is None
        assert asg.items == asg.connectors == asg.tasks == ()
    sub = decode_subscription(_patch(SUB_BYTES[:17], 13, "fffffff0"))
    assert sub.allocation is None


def test_trailing_bytes_ignored_at_every_level() -> None:
    assert decode_assignment(ASG_BYTES + b"\xff" * 9) == ASG
    assert decode_subscription(SUB_BYTES + b"\x00\x01") == SUB
    grown = _patch(SUB_BYTES, 13, f"{len(ASG_BYTES) + 3:08x}") + b"abc"
    assert decode_subscription(grown) == SUB


def test_version_never_steers_parsing() -> None:
    v0_header_full_body = _patch(ASG_BYTES, 0, "0000")
    assert decode_assignment(v0_header_full_body) == ASG
    assert decode_assignment(_patch(ASG_BYTES, 0, "7fff")) == ASG


def test_decode_accepts_bytes_like_and_rejects_other_types() -> None:
    assert decode_assignment(bytearray(ASG_BYTES)) == ASG
    assert decode_subscription(memoryview(SUB_BYTES)) == SUB
    with pytest.raises(CodecError):
        decode_assignment(ASG_BYTES.hex())  # type: ignore[arg-type]


def test_structs_compile_completely() -> None:
    """Nothing may fall back to construct's interpreted parsers inside the compiled hot path."""
    for fast in (cp._ASSIGNMENT_FAST, cp._SUBSCRIPTION_FAST):
        assert type(fast).__name__ == "Compiled"
        assert "linkedparsers[" not in fast.source
        assert "linkedbuilders[" not in fast.source


# --------------------------------------------------------------------------------------------------
# Encode rules
# --------------------------------------------------------------------------------------------------


def test_v0_encoding_drops_only_empty_tail() -> None:
    v0 = encode_assignment(dataclasses.replace(ASG, revoked=(), delay=0), 0)
    assert v0 == _patch(ASG_BYTES[:50], 0, "0000")
    for revoked in (ABSENT, None, ()):
        for delay in (ABSENT, 0):
            assert encode_assignment(dataclasses.replace(ASG, revoked=revoked, delay=delay), 0) == v0
    sub_v0 = _patch(SUB_BYTES[:13], 0, "0000")
    assert encode_subscription(dataclasses.replace(SUB, allocation=None), 0) == sub_v0
    assert encode_subscription(dataclasses.replace(SUB, allocation=ABSENT), 0) == sub_v0


ENCODE_ERRORS = [
    ("v0-revoked", ASG, 0, "revoked"),
    ("v0-delay", dataclasses.replace(ASG, revoked=(), delay=1), 0, "delay"),
    ("negative-version", ASG, -1, "version"),
    ("huge-version", ASG, 1 << 15, "version"),
    ("bool-version", ASG, True, "version"),
    ("gap-revoked", dataclasses.replace(ASG, assignment=ABSENT), 1, "revoked"),
    ("gap-delay", dataclasses.replace(ASG, revoked=ABSENT), 2, "delay"),
    ("error-range", dataclasses.replace(ASG, error=1 << 15), 1, "error"),
    ("offset-type", dataclasses.replace(ASG, config_offset="7"), 1, "config_offset"),
    ("task-range", dataclasses.replace(ASG, revoked=(G("r", (0, 1 << 31)),)), 1, "revoked[0].tasks[1]"),
    ("task-type", dataclasses.replace(ASG, assignment=(G("c", (1.5,)),)), 1, "assignment[0].tasks[0]"),
    ("string-long", dataclasses.replace(ASG, leader="é" * 16384), 1, "leader"),
    ("string-surrogate", dataclasses.replace(ASG, leader_url="\ud800"), 1, "leader_url"),
    ("connector-type", dataclasses.replace(ASG, assignment=(G(None, ()),)), 1, "assignment[0].connector"),
    ("delay-range", dataclasses.replace(ASG, delay=-(1 << 31) - 1), 1, "delay"),
    ("delay-null", dataclasses.replace(ASG, delay=None), 1, "delay"),
    (
        "group-type",
        dataclasses.replace(ASG, assignment=({"connector": "c", "tasks": []},)),
        1,
        "assignment[0]",
    ),
    ("groups-type", dataclasses.replace(ASG, revoked=5), 1, "revoked"),
]


@pytest.mark.parametrize(
    ("value", "version", "field"), [c[1:] for c in ENCODE_ERRORS], ids=[c[0] for c in ENCODE_ERRORS]
)
def test_assignment_encode_errors(value: Assignment, version: int, field: str) -> None:
    with pytest.raises(CodecError) as info:
        encode_assignment(value, version)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("value", "version", "field"),
    [
        (SUB, 0, "allocation"),
        (
            dataclasses.replace(SUB, allocation=dataclasses.replace(ASG, revoked=ABSENT)),
            1,
            "allocation.delay",
        ),
        (dataclasses.replace(SUB, allocation=dataclasses.replace(ASG, error=-40000)), 2, "allocation.error"),
        (dataclasses.replace(SUB, url=b"http://x"), 1, "url"),
        (dataclasses.replace(SUB, config_offset=1 << 63), 1, "config_offset"),
        (SUB, -3, "version"),
    ],
)
def test_subscription_encode_errors(value: Subscription, version: int, field: str) -> None:
    with pytest.raises(CodecError) as info:
        encode_subscription(value, version)
    assert info.value.field == field


def test_encode_rejects_wrong_value_types() -> None:
    with pytest.raises(CodecError):
        encode_assignment(SUB, 1)  # type: ignore[arg-type]
    with pytest.raises(CodecError):
        encode_subscription(ASG, 1)  # type: ignore[arg-type]
    with pytest.raises(CodecError, match="allocation"):
        encode_subscription(Subscription("u", 1, allocation="x"), 1)  # type: ignore[arg-type]


def test_embedded_allocation_gets_the_outer_version() -> None:
    for version in (1, 2, 9):
        data = encode_subscription(SUB, version)
        assert payload_version(data) == version
        assert payload_version(data[INNER:]) == version


# --------------------------------------------------------------------------------------------------
# Model: grouping, convenience properties, JSON validation
# --------------------------------------------------------------------------------------------------


BUILD_CASES = [
    (
        "java-order",
        [("b", 0), ("a", -1), ("a", 1), ("b", -1), ("c", 2), ("a", -1), ("c", 0)],
        (G("a", (-1, 1)), G("b", (-1, 0)), G("c", (2, 0))),
    ),
    ("tasks-only-after-connectors", [("t", 3), ("x", -1)], (G("x", (-1,)), G("t", (3,)))),
    ("duplicate-tasks-kept", [("a", 1), ("a", 1)], (G("a", (1, 1)),)),
    ("empty", [], ()),
]


@pytest.mark.parametrize(("items", "groups"), [c[1:] for c in BUILD_CASES], ids=[c[0] for c in BUILD_CASES])
def test_build_groups_like_java(items: list[tuple[str, int]], groups: tuple[ConnectorGroup, ...]) -> None:
    asg = Assignment.build(0, "l", "u", 1, [ConnectorTaskId(*i) for i in items], revoked=items, delay=3)
    assert asg.assignment == groups
    assert asg.revoked == groups
    assert asg.delay == 3


def test_convenience_properties() -> None:
    asg = Assignment(0, "l", "u", 1, (G("a", (-1, 2, -1)), G("b", (0,))), None, ABSENT)
    assert asg.connectors == ("a", "a")
    assert asg.tasks == (ConnectorTaskId("a", 2), ConnectorTaskId("b", 0))
    assert asg.items == (("a", -1), ("a", 2), ("a", -1), ("b", 0))
    assert asg.revoked_items == asg.revoked_connectors == asg.revoked_tasks == ()
    assert asg.delay_ms == 0
    absent = Assignment(0, "l", "u", 1, ABSENT, ABSENT, ABSENT)
    assert absent.items == absent.connectors == absent.tasks == ()
    revoking = Assignment(0, "l", "u", 1, (), (G("z", (-1, 4)),), 250)
    assert revoking.revoked_connectors == ("z",)
    assert revoking.revoked_tasks == (ConnectorTaskId("z", 4),)
    assert revoking.delay_ms == 250


def test_json_keys_follow_presence() -> None:
    assert "allocation" not in Subscription("u", 1, ABSENT).to_json()
    assert Subscription("u", 1, None).to_json()["allocation"] is None
    doc = Assignment(0, "l", "u", 1, None, ABSENT, ABSENT).to_json()
    assert doc == {"error": 0, "leader": "l", "leader_url": "u", "config_offset": 1, "assignment": None}
    assert Assignment.from_json(doc) == Assignment(0, "l", "u", 1, None, ABSENT, ABSENT)


_GOOD_ALLOCATION = {
    "error": 0,
    "leader": "l",
    "leader_url": "u",
    "config_offset": 1,
    "assignment": [{"connector": "c", "tasks": [-1, 0]}],
    "revoked": [],
    "delay": 0,
}


def _sub_doc(**allocation: Any) -> dict[str, Any]:
    return {"url": "u", "config_offset": 1, "allocation": {**_GOOD_ALLOCATION, **allocation}}


JSON_ERRORS = [
    ("not-object", [], "(document)"),
    ("url-type", {"url": 1, "config_offset": 1}, "url"),
    ("missing-offset", {"url": "u"}, "config_offset"),
    ("unknown-key", {"url": "u", "config_offset": 1, "version": 1}, "version"),
    ("offset-range", {"url": "u", "config_offset": 1 << 63}, "config_offset"),
    ("offset-bool", {"url": "u", "config_offset": True}, "config_offset"),
    ("offset-float", {"url": "u", "config_offset": 1.0}, "config_offset"),
    ("url-too-long", {"url": "x" * 32768, "config_offset": 1}, "url"),
    ("url-surrogate", {"url": "\udcff", "config_offset": 1}, "url"),
    ("allocation-type", {"url": "u", "config_offset": 1, "allocation": []}, "allocation"),
    ("error-range", _sub_doc(error=40000), "allocation.error"),
    ("leader-type", _sub_doc(leader=None), "allocation.leader"),
    ("assignment-type", _sub_doc(assignment={}), "allocation.assignment"),
    ("group-type", _sub_doc(assignment=["c"]), "allocation.assignment[0]"),
    ("group-missing-tasks", _sub_doc(assignment=[{"connector": "c"}]), "allocation.assignment[0].tasks"),
    (
        "group-extra-key",
        _sub_doc(revoked=[{"connector": "c", "tasks": [], "x": 1}]),
        "allocation.revoked[0].x",
    ),
    ("tasks-type", _sub_doc(revoked=[{"connector": "c", "tasks": 3}]), "allocation.revoked[0].tasks"),
    (
        "task-range",
        _sub_doc(revoked=[{"connector": "c", "tasks": [0, 1 << 31]}]),
        "allocation.revoked[0].tasks[1]",
    ),
    (
        "connector-type",
        _sub_doc(assignment=[{"connector": 5, "tasks": []}]),
        "allocation.assignment[0].connector",
    ),
    ("delay-range", _sub_doc(delay=1 << 31), "allocation.delay"),
    ("delay-null", _sub_doc(delay=None), "allocation.delay"),
]


@pytest.mark.parametrize(("doc", "field"), [c[1:] for c in JSON_ERRORS], ids=[c[0] for c in JSON_ERRORS])
def test_from_json_names_the_bad_field(doc: Any, field: str) -> None:
    with pytest.raises(CodecError) as info:
        Subscription.from_json(doc)
    assert info.value.field == field


def test_from_json_accepts_the_documented_shape() -> None:
    sub = Subscription.from_json(_sub_doc())
    assert sub.allocation == Assignment(0, "l", "u", 1, (G("c", (-1, 0)),), (), 0)
    assert Subscription.from_json(sub.to_json()) == sub


# --------------------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------------------

INT16 = st.integers(-(1 << 15), (1 << 15) - 1)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
TEXT = st.text(max_size=10)
TASKS = st.lists(st.one_of(st.just(-1), st.integers(0, 40), INT32), max_size=6).map(tuple)
GROUPS = st.lists(st.builds(ConnectorGroup, TEXT, TASKS), max_size=4).map(tuple)
NULLABLE_GROUPS = st.one_of(st.none(), GROUPS)
V1_VERSIONS = st.sampled_from([1, 2, 3, 5, 0x7FFF])


@st.composite
def assignments(draw: st.DrawFn, version: int) -> Assignment:
    """Any assignment encodable at ``version`` (absent fields only at the end)."""
    head = (draw(INT16), draw(TEXT), draw(TEXT), draw(INT64))
    if version == 0:
        tail = [
            draw(st.one_of(st.just(ABSENT), NULLABLE_GROUPS)),
            draw(st.sampled_from([ABSENT, None, ()])),
            draw(st.sampled_from([ABSENT, 0])),
        ]
    else:
        present = draw(st.integers(0, 3))
        tail = [draw(NULLABLE_GROUPS), draw(NULLABLE_GROUPS), draw(INT32)][:present]
        tail += [ABSENT] * (3 - present)
    return Assignment(*head, *tail)


@st.composite
def subscriptions(draw: st.DrawFn, version: int) -> Subscription:
    if version == 0:
        allocation: Any = draw(st.sampled_from([ABSENT, None]))
    else:
        allocation = draw(st.one_of(st.just(ABSENT), st.none(), assignments(version)))
    return Subscription(draw(TEXT), draw(INT64), allocation)


def _as_v0_decoded(value: Any) -> Any:
    """What v0 bytes decode to: everything after the v0 layout is absent."""
    if isinstance(value, Subscription):
        return dataclasses.replace(value, allocation=ABSENT)
    return dataclasses.replace(value, revoked=ABSENT, delay=ABSENT)


@st.composite
def payloads(draw: st.DrawFn) -> tuple[str, Any, int, bytes]:
    kind = draw(st.sampled_from(sorted(KINDS)))
    version = draw(st.one_of(st.just(0), V1_VERSIONS))
    value = draw(subscriptions(version) if kind == "subscription" else assignments(version))
    _, encode, _ = KINDS[kind]
    return kind, value, version, encode(value, version)


def _decode_or_codec_error(kind: str, data: bytes) -> Any:
    """Decode, allowing only CodecError; also check the compiled and checked parsers agree."""
    fast, checked = {
        "assignment": (cp._ASSIGNMENT_FAST, cp._ASSIGNMENT_STRUCT),
        "subscription": (cp._SUBSCRIPTION_FAST, cp._SUBSCRIPTION_STRUCT),
    }[kind]
    try:
        fast_result = fast.parse(data)
    except Exception:
        fast_result = None
    try:
        checked_result = checked.parse_stream(Window(data))
    except CodecError:
        checked_result = None
    assert (fast_result is None) == (checked_result is None)
    assert fast_result == checked_result
    decode, _, _ = KINDS[kind]
    try:
        value = decode(data)
    except CodecError as exc:
        assert exc.field
        assert exc.offset is not None and 0 <= exc.offset <= len(data)
        assert checked_result is None
        return None
    assert checked_result is not None
    return value


@given(payloads())
def test_value_round_trip(case: tuple[str, Any, int, bytes]) -> None:
    kind, value, version, data = case
    decode, encode, _ = KINDS[kind]
    decoded = decode(data)
    assert decoded == (_as_v0_decoded(value) if version == 0 else value)
    assert encode(decoded, version) == data
    assert payload_version(data) == version


@given(payloads())
def test_json_round_trip(case: tuple[str, Any, int, bytes]) -> None:
    kind, value, _, _ = case
    _, _, cls = KINDS[kind]
    assert cls.from_json(value.to_json()) == value


@given(payloads(), st.integers(0, 1 << 16))
def test_truncated_payloads_only_raise_codec_error(case: tuple[str, Any, int, bytes], cut: int) -> None:
    kind, _, _, data = case
    _decode_or_codec_error(kind, data[: cut % (len(data) + 1)])


@given(payloads(), st.binary(min_size=1, max_size=24))
def test_extended_payloads(case: tuple[str, Any, int, bytes], extra: bytes) -> None:
    kind, value, version, data = case
    decoded = _decode_or_codec_error(kind, data + extra)
    complete = version > 0 and ABSENT not in (
        (value.allocation,) if kind == "subscription" else (value.assignment, value.revoked, value.delay)
    )
    if complete:
        assert decoded == value  # trailing bytes after the last known field are ignored


@given(payloads(), st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=4))
@settings(suppress_health_check=[HealthCheck.too_slow])
def test_corrupted_payloads_only_raise_codec_error(
    case: tuple[str, Any, int, bytes], flips: list[tuple[int, int]]
) -> None:
    kind, _, _, data = case
    buf = bytearray(data)
    for position, value in flips:
        if buf:
            buf[position % len(buf)] = value
    _decode_or_codec_error(kind, bytes(buf))


@given(st.sampled_from(sorted(KINDS)), st.binary(max_size=160))
def test_arbitrary_bytes_only_raise_codec_error(kind: str, data: bytes) -> None:
    _decode_or_codec_error(kind, data)


@given(st.sampled_from(sorted(KINDS)), st.binary(max_size=96))
def test_plausible_headers_with_garbage(kind: str, tail: bytes) -> None:
    """Garbage behind a well-formed prefix reaches the deeper fields more often than pure noise."""
    prefix = SUB_BYTES[:17] if kind == "subscription" else ASG_BYTES[:18]
    _decode_or_codec_error(kind, prefix + tail)
    _decode_or_codec_error(kind, prefix[:-4] + len(tail).to_bytes(4, "big") + tail)


ANY_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.binary(max_size=3),
    st.just(ABSENT),
)
ANY_GROUPS = st.one_of(
    ANY_SCALAR,
    st.lists(
        st.one_of(
            ANY_SCALAR,
            st.builds(
                ConnectorGroup,
                st.one_of(TEXT, ANY_SCALAR),
                st.one_of(ANY_SCALAR, st.lists(ANY_SCALAR, max_size=3)),
            ),
        ),
        max_size=3,
    ).map(tuple),
)
ANY_ASSIGNMENT = st.builds(
    Assignment, ANY_SCALAR, ANY_SCALAR, ANY_SCALAR, ANY_SCALAR, ANY_GROUPS, ANY_GROUPS, ANY_SCALAR
)


@given(ANY_ASSIGNMENT, st.one_of(st.integers(-2, 3), ANY_SCALAR))
def test_encoding_any_value_only_raises_codec_error(value: Assignment, version: Any) -> None:
    for encode, item in (
        (encode_assignment, value),
        (encode_subscription, Subscription("u", 0, value)),
        (encode_subscription, Subscription(value.leader, value.error, value.delay)),
    ):
        try:
            data = encode(item, version)
        except CodecError:
            continue
        assert payload_version(data) == version


def test_int32_array_construct_compiles_and_explains() -> None:
    from construct import Struct

    from connect_bridge.codecs.connect_structs import Int32Array

    layout = Struct("tasks" / Int32Array())
    fast = layout.compile()
    data = bytes.fromhex("00000002ffffffff00000007")
    assert fast.parse(data).tasks == layout.parse(data).tasks == (-1, 7)
    assert fast.build({"tasks": (-1, 7)}) == layout.build({"tasks": (-1, 7)}) == data
    with pytest.raises(CodecError) as info:
        layout.parse_stream(Window(data[:-1], base=100))
    assert (info.value.field, info.value.offset) == ("tasks[1]", 108)


def test_remembered_encodings_refuse_what_an_equal_value_would_not() -> None:
    """The codec remembers what it encoded and decoded (``MEMO_SIZE``); a value equal to a
    remembered one but of another type (``5.0 == 5``, ``True == 1``) is still refused, and a
    remembered answer is the very one a fresh encode gives."""
    good = Assignment(0, "leader", "http://w:8083", 5, (ConnectorGroup("c", (0, 1)),), (), 0)
    first = encode_assignment(good, 1)
    assert encode_assignment(good, 1) == first
    assert decode_assignment(first) == good and decode_assignment(first) is decode_assignment(first)
    fresh = decode_assignment(first, remember=False)
    assert fresh == good and fresh is not decode_assignment(first)
    assert encode_assignment(good, 1, remember=False) == first
    with pytest.raises(CodecError):
        encode_assignment(good, True)
    with pytest.raises(CodecError):
        encode_assignment(dataclasses.replace(good, config_offset=5.0), 1)
    with pytest.raises(CodecError):
        encode_assignment(dataclasses.replace(good, assignment=(ConnectorGroup("c", (0, 1.0)),)), 1)
    sub = Subscription("http://w:8083", 5, good)
    assert encode_subscription(sub, 1) == encode_subscription(Subscription("http://w:8083", 5, good), 1)
    with pytest.raises(CodecError):
        encode_subscription(dataclasses.replace(sub, config_offset=5.0), 1)
    assert decode_subscription(bytearray(encode_subscription(sub, 1))) == sub  # not remembered: still decoded
