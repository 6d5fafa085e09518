"""Kafka wire messages: the registry, every API x version round trip, the request decoder's error
contract, interoperability with kafka-python's own client framing, and the error-code table."""

from __future__ import annotations

import functools
import json
import re
import struct
import uuid
from importlib import resources
from pathlib import Path
from typing import Any

import kafka.errors
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_header import RequestHeader, ResponseHeader
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.data_container import DataContainer
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.schemas.fields import ArrayField, StructArrayField, StructField
from kafka.protocol.schemas.fields.codecs import (
    UUID,
    BitField,
    Boolean,
    Bytes,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    String,
    UnsignedInt16,
)

from connect_bridge.codecs import messages as m
from connect_bridge.codecs import specs
from connect_bridge.codecs.error_codes import DEFAULT_MESSAGES, NEW_ERROR_CODES, ErrorCode, error_name
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.codecs.requests import (
    DecodedRequest,
    MalformedRequest,
    MalformedResponse,
    RequestDecodeError,
    UnsupportedApiKey,
    UnsupportedVersion,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_frame,
    peek_client_id,
    peek_request_header,
    request_api_key,
    request_body_offset,
    request_header_fields,
    without_correlation_id,
)

FAST = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])

CASES = [(spec, v) for spec in m.API_SPECS.values() for v in range(spec.min_version, spec.max_version + 1)]
CASE_IDS = [f"{spec.name}-v{v}" for spec, v in CASES]


# --- Schema-driven values: one strategy builder for every spec, so no API/version goes untested ---

_INTS = {
    Int8: (-(2**7), 2**7 - 1),
    Int16: (-(2**15), 2**15 - 1),
    UnsignedInt16: (0, 2**16 - 1),
    Int32: (-(2**31), 2**31 - 1),
    Int64: (-(2**63), 2**63 - 1),
}


def _simple(codec: Any, nullable: bool) -> st.SearchStrategy[Any]:
    if isinstance(codec, String):
        s: st.SearchStrategy[Any] = st.text(max_size=6)
    elif codec is Bytes:
        s = st.binary(max_size=6)
    elif codec is Boolean:
        s = st.booleans()
    elif codec is Float64:
        s = st.floats(allow_nan=False)
    elif codec is UUID:  # the zero UUID is the wire's null
        return st.none() | st.uuids().filter(lambda u: u.int != 0)
    elif codec is BitField:  # bit 31 alone is the wire's null
        return st.none() | st.sets(st.integers(0, 30), max_size=3)
    else:
        s = st.integers(*_INTS[codec])
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


def _struct(struct_field: Any, data_class: Any, version: int, **fixed: Any) -> st.SearchStrategy[Any]:
    fields = {f.name: _field(f, version) for f in struct_field._fields if f.for_version_q(version)}
    fields.update({name: st.just(value) for name, value in fixed.items()})
    return st.fixed_dictionaries(fields).map(lambda kw: data_class(**kw))


@functools.cache
def message_strategy(cls: type[ApiMessage], version: int) -> st.SearchStrategy[ApiMessage]:
    # An ApiVersions response with an error is read back as v0 by design (tested separately).
    fixed = {"error_code": 0} if cls is m.ApiVersionsResponse else {}
    return _struct(cls._struct, lambda **kw: cls(version=version, **kw), version, **fixed)


# --- The registry ---------------------------------------------------------------------------------


def test_registry_matches_the_specs() -> None:
    for key, spec in m.API_SPECS.items():
        assert key == spec.api_key == spec.request.API_KEY == spec.response.API_KEY
        assert spec.request.is_request() and not spec.response.is_request()
        assert 0 <= spec.min_version <= spec.max_version <= spec.request.max_version
        assert spec.max_version <= spec.response.max_version
    assert {(k, lo, hi) for k, lo, hi in m.supported_api_versions()} >= {
        (11, 0, 9),
        (14, 0, 5),
        (12, 0, 4),
        (13, 0, 5),
        (18, 0, 4),
        (10, 0, 6),
        (1000, 0, 0),
        (1001, 0, 0),
        (1002, 0, 0),
        (1003, 0, 1),
    }
    assert m.api_spec(0) is None and m.api_spec(1000).name == "ConnectGroupHeartbeat"


def test_classic_apis_reuse_kafka_python_classes() -> None:
    from kafka.protocol.consumer.group import JoinGroupRequest

    assert m.API_SPECS[11].request is JoinGroupRequest


def _spec_files() -> dict[str, dict[str, Any]]:
    out = {}
    for entry in resources.files(specs).iterdir():
        if entry.name.endswith(".json"):
            text = re.sub(r"(?m)^\s*//.*\n?", "", entry.read_text(encoding="utf-8"))
            out[entry.name.removesuffix(".json")] = json.loads(text)
    return out


def test_connect_api_specs_follow_kafkas_format() -> None:
    files = _spec_files()
    for name, cls in ((s.request.__name__, s.request) for s in m.API_SPECS.values() if s.api_key >= 1000):
        assert name in files and files[name]["name"] == name == cls.name
        # ConnectGroupDescribe v1 adds held work and members' waits (docs/protocol.md).
        versions = "0-1" if name == "ConnectGroupDescribeRequest" else "0"
        assert files[name]["validVersions"] == versions and files[name]["flexibleVersions"] == "0+"
    apis = {n: j for n, j in files.items() if j["type"] in ("request", "response")}
    assert sorted({j["apiKey"] for j in apis.values()}) == [1000, 1001, 1002, 1003]
    assert len(apis) == 8


def _nested_field_names(fields: list[dict[str, Any]]) -> list[str]:
    out = []
    for f in fields:
        for inner in f.get("fields", []):
            out.append(inner["name"])
        out.extend(_nested_field_names(f.get("fields", [])))
    return out


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_no_spec_field_shadows_a_data_container_attribute() -> None:
    # e.g. a field "Version" would become ``.version``, which kafka-python reserves for the schema version.
    nested_reserved = {a for a in dir(DataContainer) if not a.startswith("_")}
    top_reserved = nested_reserved | {a for a in dir(ApiMessage) if not a.startswith("_")}
    for name, spec_json in _spec_files().items():
        for field in spec_json["fields"]:
            assert _snake(field["name"]) not in top_reserved, f"{name}.{field['name']}"
        for field_name in _nested_field_names(spec_json["fields"]):
            assert _snake(field_name) not in nested_reserved, f"{name}: {field_name}"


def _field_paths(fields: list[dict[str, Any]], prefix: str = "") -> list[str]:
    out = []
    for f in fields:
        path = prefix + f["name"]
        out.append(path)
        if "fields" in f:
            out.extend(_field_paths(f["fields"], path + ("[]." if f["type"].startswith("[]") else ".")))
    return out


def test_every_spec_field_is_documented() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "protocol.md").read_text(encoding="utf-8")
    for name, spec_json in _spec_files().items():
        assert f"**{name}**" in doc, name
        for path in _field_paths(spec_json["fields"]):
            assert f"`{path}`" in doc, f"{name}: {path}"


# --- Round trips: every API x version, through the request/response framing -----------------------


@pytest.mark.parametrize(("spec", "version"), CASES, ids=CASE_IDS)
@FAST
@given(
    data=st.data(), correlation_id=st.integers(-(2**31), 2**31 - 1), client_id=st.none() | st.text(max_size=5)
)
def test_request_round_trip_and_kafka_python_framing(
    spec: m.ApiSpec, version: int, data: st.DataObject, correlation_id: int, client_id: str | None
) -> None:
    msg = data.draw(message_strategy(spec.request, version))
    frame = encode_request(msg, version, correlation_id, client_id)

    # kafka-python's client framing produces the very same bytes...
    msg.with_header(correlation_id=correlation_id, client_id=client_id)
    assert bytes(msg.encode(header=True, framed=True)) == frame

    # ...and the server-side decoder gets the message back.
    decoded = decode_request(frame)
    assert isinstance(decoded, DecodedRequest)
    assert (decoded.api_key, decoded.api_version) == (spec.api_key, version)
    assert (decoded.correlation_id, decoded.client_id) == (correlation_id, client_id)
    assert decoded.body == msg
    assert decode_request(frame[4:], framed=False).body == msg
    assert peek_request_header(frame) == (spec.api_key, version, correlation_id)

    # The header reader every router, gate and relay uses agrees with the full decoder.
    payload = frame[4:]
    assert request_header_fields(payload) == (spec.api_key, version, correlation_id)
    assert request_api_key(payload) == spec.api_key
    assert peek_client_id(payload) == client_id
    body_at = request_body_offset(payload, flexible_header=spec.request_flexible(version))
    assert payload[body_at:] == bytes(msg.encode(header=False, framed=False))
    again = encode_request(msg, version, correlation_id ^ 1, client_id)[4:]  # the request repeated
    assert (
        without_correlation_id(again)
        == without_correlation_id(payload)
        != without_correlation_id(encode_request(msg, version, correlation_id, (client_id or "") + "x")[4:])
    )


def test_the_header_reader_on_frames_too_short() -> None:
    """A payload too short for a field: -1 for the api key, None for the client id, and the fixed
    fields' reader refuses (its callers check the length once, before the steady path)."""
    assert request_api_key(b"") == request_api_key(b"\x00") == -1
    assert request_api_key(b"\x00\x0c") == 12
    assert peek_client_id(b"\x00\x0c\x00\x04\x00\x00\x00\x07\x00") is None
    with pytest.raises(struct.error):
        request_header_fields(b"\x00\x0c\x00\x04\x00\x00\x00")


@pytest.mark.parametrize(("spec", "version"), CASES, ids=CASE_IDS)
@FAST
@given(data=st.data(), correlation_id=st.integers(0, 2**31 - 1))
def test_response_round_trip_and_kafka_python_parsing(
    spec: m.ApiSpec, version: int, data: st.DataObject, correlation_id: int
) -> None:
    resp = data.draw(message_strategy(spec.response, version))
    request = DecodedRequest(
        header=RequestHeader(
            request_api_key=spec.api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="c",
        ),
        api_key=spec.api_key,
        api_version=version,
        correlation_id=correlation_id,
        client_id="c",
        body=spec.request(version=version),
    )
    frame = encode_response(request, resp)
    assert frame == encode_response_frame(spec.api_key, version, correlation_id, resp)

    decoded = decode_response(spec.api_key, version, frame)
    assert decoded == resp and decoded.header.correlation_id == correlation_id

    # kafka-python's client parser (response header version rules included) reads our frames.
    client = KafkaProtocol(client_id="c")
    client.in_flight_requests.append(request.header)
    [(cid, parsed)] = client.receive_bytes(frame)
    assert cid == correlation_id and parsed == resp


def test_response_header_versions() -> None:
    # flexible responses carry header v1 (an empty tagged-field byte after the correlation id)...
    resp = m.HeartbeatResponse(throttle_time_ms=0, error_code=0)
    assert encode_response_frame(12, 4, 9, resp)[4:9] == b"\x00\x00\x00\x09\x00"
    # ...except ApiVersions, whose header is always v0 so any client can read it.
    api = m.ApiVersionsResponse(error_code=0, api_keys=[(18, 0, 4)], throttle_time_ms=0)
    frame = encode_response_frame(18, 3, 9, api)
    assert frame[4:8] == b"\x00\x00\x00\x09" and frame[8:10] == b"\x00\x00"  # then straight to ErrorCode
    assert decode_response(18, 3, frame).api_keys[0].max_version == 4


def test_unsupported_api_versions_is_answerable_with_a_v0_response() -> None:
    frame = _frame(struct.pack(">hhih", 18, 9, 77, 3) + b"cli" + b"\x00garbage")
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    err = info.value
    assert (err.api_key, err.api_version, err.correlation_id, err.client_id) == (18, 9, 77, "cli")
    assert err.answerable and err.error_code == ErrorCode.UNSUPPORTED_VERSION == 35
    answer = m.ApiVersionsResponse(
        error_code=err.error_code,
        api_keys=[m.ApiVersionsResponse.ApiVersion(*row) for row in m.supported_api_versions()],
    )
    out = encode_response_frame(18, 0, err.correlation_id, answer)
    # A client that sent v3 reads an errored ApiVersions response as v0, as Kafka clients do.
    decoded = decode_response(18, 3, out)
    assert decoded.version == 0 and decoded.error_code == 35 and len(decoded.api_keys) == len(m.API_SPECS)
    client = KafkaProtocol(client_id="c")
    client.in_flight_requests.append(
        RequestHeader(request_api_key=18, request_api_version=3, correlation_id=77)
    )
    [(cid, parsed)] = client.receive_bytes(out)
    assert cid == 77 and parsed.error_code == 35


# --- The Connect APIs with meaningful values -------------------------------------------------------

ITEMS = frozenset(
    {ConnectorTaskId("A", -1), ConnectorTaskId("A", 0), ConnectorTaskId("A", 2), ConnectorTaskId("B", 1)}
)


def test_connect_group_heartbeat_join_and_assignment() -> None:
    join = m.ConnectGroupHeartbeatRequest(
        group_id="connect-cluster",
        member_id="",
        member_epoch=0,
        instance_id=None,
        rack_id=None,
        rebalance_timeout_ms=60000,
        worker_url="http://w1:8083/",
        config_offset=12,
        server_assignor=None,
        client_assignors=[
            m.ConnectGroupHeartbeatRequest.Assignor(
                name="sessioned",
                minimum_version=0,
                maximum_version=2,
                reason=0,
                metadata_version=2,
                metadata=b"\x01",
            )
        ],
        connectors_and_tasks=m.connectors_and_tasks(ITEMS),
    )
    decoded = decode_request(encode_request(join, 0, 1, "w1")).body
    assert decoded == join
    assert m.items_of(decoded.connectors_and_tasks) == ITEMS
    assert decoded.client_assignors[0].metadata_version == 2

    # A later heartbeat only carries what changed: the defaults say "unchanged".
    beat = m.ConnectGroupHeartbeatRequest(group_id="connect-cluster", member_id="m1", member_epoch=4)
    decoded = decode_request(encode_request(beat, 0, 2, "w1")).body
    assert (decoded.rebalance_timeout_ms, decoded.config_offset) == (-1, -1)
    assert decoded.client_assignors is None and decoded.connectors_and_tasks is None

    resp = m.ConnectGroupHeartbeatResponse(
        throttle_time_ms=0,
        error_code=0,
        member_id="m1",
        member_epoch=5,
        heartbeat_interval_ms=3000,
        assignment=m.ConnectGroupHeartbeatResponse.Assignment(
            error=0,
            connectors_and_tasks=m.connectors_and_tasks(ITEMS),
            leader_id="m1",
            leader_url="http://w1:8083/",
            config_offset=12,
            metadata_version=0,
            metadata=b"",
        ),
    )
    out = decode_response(1000, 0, encode_response_frame(1000, 0, 3, resp))
    assert out == resp and m.items_of(out.assignment.connectors_and_tasks) == ITEMS
    compute = m.ConnectGroupHeartbeatResponse(
        error_code=ErrorCode.COMPUTE_ASSIGNMENT, member_epoch=5, heartbeat_interval_ms=3000
    )
    out = decode_response(1000, 0, encode_response_frame(1000, 0, 4, compute))
    assert out.error_code == 1000 and out.assignment is None and out.error_message is None


def test_prepare_install_and_describe() -> None:
    cat = m.connectors_and_tasks(ITEMS)
    prepare = m.ConnectGroupPrepareAssignmentResponse(
        error_code=0,
        group_epoch=7,
        assignment_epoch=6,
        assignor_name="sessioned",
        config_offset=12,
        connectors=[("A", 3), ("B", 2)],
        members=[
            m.ConnectGroupPrepareAssignmentResponse.Member(
                member_id="m1",
                member_epoch=6,
                instance_id=None,
                worker_url="http://w1:8083/",
                config_offset=12,
                assignor=m.ConnectGroupPrepareAssignmentResponse.Member.Assignor(
                    metadata_version=2, reason=0, metadata=b""
                ),
                connectors_and_tasks=cat,
            )
        ],
    )
    assert decode_response(1001, 0, encode_response_frame(1001, 0, 1, prepare)) == prepare

    install = m.ConnectGroupInstallAssignmentRequest(
        group_id="g",
        member_id="m1",
        member_epoch=6,
        group_epoch=7,
        error=0,
        members=[
            m.ConnectGroupInstallAssignmentRequest.Member(
                member_id="m1", connectors_and_tasks=cat, metadata_version=2, metadata=b""
            )
        ],
    )
    assert decode_request(encode_request(install, 0, 2)).body == install

    describe = m.ConnectGroupDescribeResponse(
        groups=[
            m.ConnectGroupDescribeResponse.DescribedGroup(
                error_code=0,
                group_id="g",
                group_type="connect",
                group_state="Stable",
                group_epoch=7,
                assignment_epoch=7,
                assignor_name="connect-cooperative",
                leader_id="m1",
                leader_url="http://w1:8083/",
                config_offset=12,
                connectors=[("A", 3)],
                members=[
                    m.ConnectGroupDescribeResponse.DescribedGroup.Member(
                        member_id="m1",
                        client_id="w1",
                        client_host="/10.0.0.1",
                        worker_url="http://w1:8083/",
                        protocol="new",
                        member_epoch=7,
                        member_state="stable",
                        config_offset=12,
                        assignment=cat,
                        target_assignment=cat,
                    )
                ],
            )
        ]
    )
    out = decode_response(1003, 0, encode_response_frame(1003, 0, 3, describe))
    assert out == describe and out.groups[0].members[0].rack_id is None
    assert (
        decode_request(encode_request(m.ConnectGroupDescribeRequest(group_ids=[]), 0, 4)).body.group_ids == []
    )


@given(st.frozensets(st.builds(ConnectorTaskId, st.text(max_size=4), st.integers(-1, 50)), max_size=12))
def test_connectors_and_tasks_helpers_round_trip(items: frozenset[ConnectorTaskId]) -> None:
    wire = m.connectors_and_tasks(items)
    assert m.items_of(wire) == items
    assert m.connectors_and_tasks(m.items_of(wire)) == wire  # canonical order


def test_items_of_rejects_what_the_wire_cannot_mean() -> None:
    assert m.items_of(None) == frozenset()
    bad = m.WireConnectorsAndTasks([], [m.WireConnectorTasks("A", [-1])])
    with pytest.raises(CodecError, match="negative task id"):
        m.items_of(bad)
    with pytest.raises(CodecError):
        m.connectors_and_tasks([ConnectorTaskId("A", -2)])


# --- The request decoder's error contract ---------------------------------------------------------


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _heartbeat_frame(version: int = 4, correlation_id: int = 5) -> bytes:
    msg = m.HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None)
    return encode_request(msg, version, correlation_id, "cli")


def test_unknown_api_key() -> None:
    with pytest.raises(UnsupportedApiKey) as info:
        decode_request(_frame(struct.pack(">hhih", 0, 9, 123, -1) + b"\x00" * 10))
    assert (info.value.api_key, info.value.correlation_id, info.value.client_id) == (0, 123, None)
    assert info.value.error_code == ErrorCode.INVALID_REQUEST and not info.value.answerable


@pytest.mark.parametrize(("api_key", "version"), [(11, 10), (14, -1), (1000, 1), (1003, 32767)])
def test_unsupported_versions(api_key: int, version: int) -> None:
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(_frame(struct.pack(">hhih", api_key, version, 42, -1)))
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (api_key, version, 42)
    assert not info.value.answerable


@pytest.mark.parametrize(
    ("frame", "correlation_id"),
    [
        (b"", None),
        (b"\x00\x00", None),
        (b"\x00\x00\x00\x03\x00\x0c\x00", None),  # shorter than a header
        (_heartbeat_frame()[:-1], 5),  # size prefix disagrees with the bytes
        (_frame(_heartbeat_frame()[4:-3]), 5),  # truncated body
        (_frame(_heartbeat_frame()[4:] + b"\x00"), 5),  # trailing bytes
        (_frame(_heartbeat_frame(version=3)[4:] + b"\xff\xff"), 5),
        (_frame(struct.pack(">hhih", 12, 4, 5, 200) + b"x"), 5),  # client id runs past the end
    ],
)
def test_malformed_frames(frame: bytes, correlation_id: int | None) -> None:
    with pytest.raises(MalformedRequest) as info:
        decode_request(frame)
    assert info.value.correlation_id == correlation_id
    assert isinstance(info.value, CodecError) and info.value.error_code == ErrorCode.INVALID_REQUEST


_KNOWN = [(spec.api_key, v) for spec, v in CASES] + [(11, 10), (18, 5), (0, 0), (1000, 3)]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_only_raise_the_typed_error(raw: bytes) -> None:
    for frame in (raw, _frame(raw)):
        try:
            decode_request(frame)
        except RequestDecodeError:
            pass


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(_KNOWN), st.integers(-(2**31), 2**31 - 1), st.binary(max_size=80))
def test_arbitrary_bodies_only_raise_the_typed_error(
    key_version: tuple[int, int], cid: int, tail: bytes
) -> None:
    try:
        decoded = decode_request(_frame(struct.pack(">hhi", *key_version, cid) + tail))
    except RequestDecodeError as err:
        assert err.correlation_id == cid
    else:
        assert decoded.correlation_id == cid


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_valid_frames_only_raise_the_typed_error(data: st.DataObject) -> None:
    spec, version = data.draw(st.sampled_from(CASES))
    payload = bytearray(encode_request(data.draw(message_strategy(spec.request, version)), version, 1)[4:])
    for _ in range(data.draw(st.integers(1, 4))):
        if len(payload) > 8:
            payload[data.draw(st.integers(8, len(payload) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(8, len(payload)))
    try:
        decode_request(_frame(bytes(payload[:cut])))
    except RequestDecodeError as err:
        assert err.correlation_id == 1


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(CASES), st.binary(max_size=64))
def test_garbage_responses_only_raise_malformed_response(case: tuple[m.ApiSpec, int], raw: bytes) -> None:
    spec, version = case
    for frame in (raw, _frame(raw)):
        try:
            decode_response(spec.api_key, version, frame)
        except MalformedResponse:
            pass


def test_encoders_reject_the_wrong_message_kind() -> None:
    resp = m.HeartbeatResponse(throttle_time_ms=0, error_code=0)
    with pytest.raises(TypeError):
        encode_request(resp, 0, 1)
    with pytest.raises(TypeError):
        encode_response_frame(12, 0, 1, m.HeartbeatRequest(group_id="g", generation_id=1, member_id="m"))
    decoded = decode_request(_heartbeat_frame())
    with pytest.raises(TypeError):
        encode_response(decoded, m.SyncGroupResponse(error_code=0, assignment=b""))
    with pytest.raises(MalformedResponse):
        decode_response(0, 0, _frame(b"\x00" * 8))


# --- Error codes ----------------------------------------------------------------------------------


def test_error_codes_are_kafkas() -> None:
    aliases = {ErrorCode.NONE: "NO_ERROR", ErrorCode.UNKNOWN_SERVER_ERROR: "UNKNOWN"}
    for code in ErrorCode:
        if code in NEW_ERROR_CODES:
            continue
        assert kafka.errors.for_code(int(code)).message == aliases.get(code, code.name)


def test_new_error_codes_are_unused_by_kafka() -> None:
    known = {
        c.errno
        for c in vars(kafka.errors).values()
        if isinstance(c, type) and issubclass(c, kafka.errors.BrokerResponseError) and c.errno is not None
    }
    for code in NEW_ERROR_CODES:
        assert code not in known and code > max(known)
        assert -(2**15) <= code < 2**15
    assert (ErrorCode.COMPUTE_ASSIGNMENT, ErrorCode.INVALID_ASSIGNMENT) == (1000, 1001)


def test_error_messages_and_names() -> None:
    assert set(DEFAULT_MESSAGES) == set(ErrorCode)
    assert error_name(110) == "FENCED_MEMBER_EPOCH" and error_name(999) == "UNKNOWN_ERROR_CODE_999"


# --- Kafka's consumer-group APIs (codecs.consumer_group: tests speak them to a real broker) ---------


def test_consumer_group_heartbeat_specs_have_kafka_4_3_1s_layout() -> None:
    """Field order as the 4.3.1 kafka-clients jar's generated schemas (``ConsumerGroupHeartbeatRequestData
    .SCHEMAS`` etc.); not in the registry: the bridge relays these APIs undecoded."""
    from connect_bridge.codecs import consumer_group as cg

    def names(cls: Any) -> list[str]:
        return [f["name"] for f in cls.json["fields"]]

    assert (cg.ConsumerGroupHeartbeatRequest.API_KEY, cg.ConsumerGroupDescribeRequest.API_KEY) == (68, 69)
    assert names(cg.ConsumerGroupHeartbeatRequest) == [
        "GroupId", "MemberId", "MemberEpoch", "InstanceId", "RackId", "RebalanceTimeoutMs",
        "SubscribedTopicNames", "SubscribedTopicRegex", "ServerAssignor", "TopicPartitions",
    ]  # fmt: skip
    assert names(cg.ConsumerGroupHeartbeatResponse) == [
        "ThrottleTimeMs", "ErrorCode", "ErrorMessage", "MemberId", "MemberEpoch", "HeartbeatIntervalMs",
        "Assignment",
    ]  # fmt: skip
    assert 68 not in m.API_SPECS and 69 not in m.API_SPECS
    # v0 has no SubscribedTopicRegex: a join's bytes differ between the versions by that one null.
    join = cg.ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=1000,
        subscribed_topic_names=["t"], topic_partitions=[],
    )  # fmt: skip
    assert len(join.encode(version=1)) == len(join.encode(version=0)) + 1


def test_consumer_group_responses_decode_with_their_header() -> None:
    from connect_bridge.codecs import consumer_group as cg

    tp = cg.ConsumerGroupHeartbeatResponse.Assignment.TopicPartitions
    resp = cg.ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=0, member_id="m", member_epoch=4, heartbeat_interval_ms=5000,
        assignment=cg.ConsumerGroupHeartbeatResponse.Assignment(
            topic_partitions=[tp(topic_id=uuid.UUID(int=7), partitions=[0, 1])]
        ),
    )  # fmt: skip
    payload = ResponseHeader(correlation_id=42).encode(flexible=True) + resp.encode(version=1)
    back = cg.decode_consumer_group_response(68, 1, payload)
    assert back.header.correlation_id == 42 and back.member_epoch == 4
    assert [list(t.partitions) for t in back.assignment.topic_partitions] == [[0, 1]]
    described = cg.ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=[])
    payload = ResponseHeader(correlation_id=9).encode(flexible=True) + described.encode(version=1)
    assert cg.decode_consumer_group_response(69, 1, payload).groups == []
