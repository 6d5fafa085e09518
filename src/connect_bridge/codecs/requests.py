"""Kafka request/response frames <-> typed messages, for the bridge's server side and for test clients.

A frame is what travels on the socket: a 4-byte big-endian size, then the payload (header + body).
The server must be able to answer, or at least log and close, whatever arrives, so
:func:`decode_request` turns *every* failure into one typed error carrying the correlation id (when
the frame is long enough to contain one) instead of letting the engine's many exception types escape.

The body codec is kafka-python's generated one; we call its compiled decoder directly because it is
the only way to learn where the body ended, and a body that ends anywhere but at the end of the frame
is malformed (the generated string/bytes readers silently truncate at the end of the buffer).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafka.protocol.api_header import RequestHeader, ResponseHeader
from kafka.protocol.api_message import ApiMessage

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.messages import API_SPECS, ApiKey, ApiSpec

__all__ = [
    "DEFAULT_CLIENT_ID",
    "NULLS_ANSWERED",
    "DecodedRequest",
    "MalformedRequest",
    "MalformedResponse",
    "RequestDecodeError",
    "RequestHeaderPeek",
    "UnsupportedApiKey",
    "UnsupportedVersion",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_frame",
    "null_violation",
    "peek_client_id",
    "peek_request_header",
    "read_unsigned_varint",
    "request_api_key",
    "request_body_offset",
    "request_header_fields",
    "without_correlation_id",
]

DEFAULT_CLIENT_ID = "connect-bridge"

_SIZE = struct.Struct(">i")
_PEEK = struct.Struct(">hhi")  # api key, api version, correlation id: the same in every header version
_INT16 = struct.Struct(">h")


# --- Errors ---------------------------------------------------------------------------------------


class RequestDecodeError(CodecError):
    """A request the bridge cannot decode, with what the server needs to answer or log it.

    ``correlation_id`` is ``None`` only when the frame is too short to contain one (the server can
    then only close the connection). ``error_code`` is the code Kafka would answer with, and
    ``answerable`` says whether an answer is possible at all: only an ApiVersions request at an
    unsupported version is answered (with an ApiVersions v0 response, as Kafka brokers do); for
    anything else the server logs and closes, since it cannot encode a response for a version or API
    it does not know.
    """

    error_code: ErrorCode = ErrorCode.INVALID_REQUEST

    def __init__(
        self,
        message: str,
        *,
        api_key: int | None = None,
        api_version: int | None = None,
        correlation_id: int | None = None,
        client_id: str | None = None,
        field: str = "",
        offset: int | None = None,
    ) -> None:
        super().__init__(message, field=field, offset=offset)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    @property
    def answerable(self) -> bool:
        return False


class UnsupportedApiKey(RequestDecodeError):
    """An API key the bridge does not handle itself (the router relays those before decoding)."""

    error_code = ErrorCode.INVALID_REQUEST


class UnsupportedVersion(RequestDecodeError):
    """A known API at a version outside the range the bridge advertises."""

    error_code = ErrorCode.UNSUPPORTED_VERSION

    @property
    def answerable(self) -> bool:
        return self.api_key == ApiKey.API_VERSIONS and self.correlation_id is not None


class MalformedRequest(RequestDecodeError):
    """Bytes that do not parse as the request they claim to be."""

    error_code = ErrorCode.INVALID_REQUEST


class MalformedResponse(CodecError):
    """A response frame that does not parse as the response to the request it answers."""


# --- Values ---------------------------------------------------------------------------------------


class RequestHeaderPeek(NamedTuple):
    """The fixed-offset start of every request header: enough to route a frame without decoding it."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True)
class DecodedRequest:
    """A fully decoded request; keep it to encode the response (version and correlation id)."""

    header: RequestHeader
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: ApiMessage

    @property
    def spec(self) -> ApiSpec:
        return API_SPECS[self.api_key]


# --- The request header ---------------------------------------------------------------------------
# Every request header version starts with the same fields at fixed offsets: api key (int16), api
# version (int16), correlation id (int32), then (v1+) the client id as a classic nullable string;
# only a flexible header adds tagged fields after it. Every module that routes, admits or relays a
# frame by its header reads it here, the steady path too (one struct read, no decoding).


def request_header_fields(payload: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """Api key, api version and correlation id of an unframed request of at least 8 bytes, read at
    their fixed offsets (``struct.error`` when shorter: callers on the hot path check the length
    once themselves). :func:`peek_request_header` is the checked form."""
    return _PEEK.unpack_from(payload, 0)


def without_correlation_id(payload: bytes) -> bytes:
    """An unframed request with its correlation id cut out: the same bytes every time a client
    repeats the request (a steady heartbeat), so it keys what was decoded from the first one."""
    return payload[:4] + payload[_PEEK.size :]


def request_api_key(payload: bytes | bytearray | memoryview) -> int:
    """The api key of an unframed request (its first two bytes), or -1 when it is shorter."""
    return _INT16.unpack_from(payload, 0)[0] if len(payload) >= 2 else -1


def peek_request_header(frame: bytes | bytearray | memoryview, *, framed: bool = True) -> RequestHeaderPeek:
    """Api key, version and correlation id, read at their fixed offsets without decoding anything else."""
    payload = _unframe_request(frame, framed)
    return _peek(payload)


def peek_client_id(payload: bytes | bytearray | memoryview) -> str | None:
    """The client id of an unframed request, read without decoding the rest, or None (null, or not
    readable): every header version >= 1 starts with the same four fields, the client id a classic
    (non-compact) nullable string, so a relayed frame is routed and attributed by its header alone."""
    if len(payload) < _PEEK.size + 2:
        return None
    (n,) = _INT16.unpack_from(payload, _PEEK.size)
    start = _PEEK.size + 2
    if not 0 <= n <= len(payload) - start:
        return None
    return str(payload[start : start + n], "utf-8", "replace")


def request_body_offset(payload: bytes | bytearray | memoryview, flexible_header: bool) -> int:
    """Where the request body starts: after api key, version, correlation id, client id (and the
    header's tagged fields when the header is flexible)."""
    (length,) = _INT16.unpack_from(payload, _PEEK.size)
    offset = _PEEK.size + 2 + max(length, 0)
    if flexible_header:
        count, offset = read_unsigned_varint(payload, offset)
        for _ in range(count):
            _, offset = read_unsigned_varint(payload, offset)
            size, offset = read_unsigned_varint(payload, offset)
            offset += size
    return offset


def read_unsigned_varint(data: bytes | bytearray | memoryview, offset: int) -> tuple[int, int]:
    """The unsigned varint at ``offset`` and the offset after it (``IndexError`` past the end)."""
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7


# --- Requests -------------------------------------------------------------------------------------


def decode_request(frame: bytes | bytearray | memoryview, *, framed: bool = True) -> DecodedRequest:
    """Decode a request frame (size prefix included unless ``framed=False``) the bridge handles itself.

    Raises only :class:`RequestDecodeError` subclasses: :class:`UnsupportedApiKey`,
    :class:`UnsupportedVersion` or :class:`MalformedRequest`.
    """
    payload = _unframe_request(frame, framed)
    peek = _peek(payload)
    spec = API_SPECS.get(peek.api_key)
    if spec is None:
        raise UnsupportedApiKey(
            f"unsupported API key {peek.api_key}", **_context(peek, payload), field="RequestApiKey", offset=0
        )
    if not spec.supports(peek.api_version):
        raise UnsupportedVersion(
            f"unsupported {spec.name} version {peek.api_version} "
            f"(supported {spec.min_version}-{spec.max_version})",
            **_context(peek, payload),
            field="RequestApiVersion",
            offset=2,
        )
    flexible = spec.request_flexible(peek.api_version)
    where = "RequestHeader"
    offset = 0
    try:
        header, offset = _decode_header(RequestHeader, 2 if flexible else 1, flexible, payload)
        where = spec.request.name
        body, end = _decode_body(spec.request, peek.api_version, payload, offset)
        if end != len(payload):
            raise ValueError(f"body ends at byte {end} of a {len(payload)}-byte payload")
        violation = None if peek.api_key in NULLS_ANSWERED else null_violation(body, peek.api_version)
        if violation is not None:
            raise ValueError(violation)
    except Exception as exc:  # the trust boundary: any failure is a malformed request
        raise MalformedRequest(
            f"malformed {spec.name} v{peek.api_version}: {type(exc).__name__}: {exc}",
            **_context(peek, payload),
            field=where,
            offset=offset,
        ) from exc
    return DecodedRequest(
        header=header,
        api_key=peek.api_key,
        api_version=peek.api_version,
        correlation_id=peek.correlation_id,
        client_id=header.client_id,
        body=body,
    )


def encode_request(
    msg: ApiMessage, version: int, correlation_id: int, client_id: str | None = DEFAULT_CLIENT_ID
) -> bytes:
    """A complete request frame, with the header version the API's flexibility calls for.

    Works for any kafka-python request class, not only the registry's, so reference workers can
    speak to the bridge and upstream brokers with one helper. Like kafka-python's own ``encode``, it
    leaves ``msg`` set to ``version`` (so class-specific encode fix-ups, e.g. Metadata v0, apply).
    """
    if not msg.is_request():
        raise TypeError(f"{type(msg).__name__} is not a request")
    flexible = bool(msg.flexible_version_q(version))
    body = msg.encode(version=version)
    header = RequestHeader(
        request_api_key=msg.API_KEY,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    ).encode(flexible=flexible)
    return _frame(header, body)


# --- Nullability -----------------------------------------------------------------------------------
#
# kafka-python's generated decoder reads a null (length -1) into any string, bytes, array or nullable
# struct, whether or not the spec allows null there. Kafka's generated ``read()`` throws instead
# ("non-nullable field X was serialized as null", also for a null element of a string array), which
# the broker turns into InvalidRequestException and a closed connection. ``decode_request`` applies
# the same rule through :func:`null_violation`, so a handler never sees a null the spec forbids,
# except in the APIs below.

NULLS_ANSWERED: frozenset[int] = frozenset(
    {
        ApiKey.CONNECT_GROUP_HEARTBEAT,
        ApiKey.CONNECT_GROUP_PREPARE_ASSIGNMENT,
        ApiKey.CONNECT_GROUP_INSTALL_ASSIGNMENT,
    }
)
"""The bridge's own group APIs, whose specs are ours and whose responses carry an error code: a null
their spec forbids is answered INVALID_REQUEST naming the field (``wire.maps``'s ``*_from_wire``
raise :class:`CodecError`), like every other breach of the draft's validation rules. Everything
else (Kafka's APIs, and ConnectGroupDescribe, which has no request-level error) is closed on."""

_NULLABLE_KINDS = frozenset({"string", "bytes", "records"})


def null_violation(message: Any, version: int) -> str | None:
    """The first null in ``message`` (a decoded request or response) that its JSON spec does not
    allow at ``version``, as Kafka's reader words it with the field's path; None when there is none.
    Tagged fields are not read from the wire as nulls and are not checked."""
    return _struct_violation(type(message)._struct, message, version, "")


def _struct_violation(struct: Any, obj: Any, version: int, path: str) -> str | None:
    for field in struct.untagged_fields(version):
        where = f"{path}{field._name}"
        value = getattr(obj, field.name, None)
        if value is None:
            if _nullable_kind(field) and not field.nullable_for_version_q(version):
                return f"non-nullable field {where} was serialized as null"
            continue
        if field.is_struct_array():
            for i, item in enumerate(value):
                found = _struct_violation(field.array_of, item, version, f"{where}[{i}].")
                if found is not None:
                    return found
        elif field.is_array():
            if field.array_of.type_str in _NULLABLE_KINDS:
                for i, item in enumerate(value):
                    if item is None:
                        return f"non-nullable field {where}[{i}] was serialized as null"
        elif field.is_struct():
            found = _struct_violation(field, value, version, f"{where}.")
            if found is not None:
                return found
    return None


def _nullable_kind(field: Any) -> bool:
    """Fields whose wire form has a null (uuid and scalars have none; a zero uuid reads as None)."""
    return field.is_array() or field.is_struct() or field.type_str in _NULLABLE_KINDS


# --- Responses ------------------------------------------------------------------------------------


def encode_response(request: DecodedRequest, response: ApiMessage) -> bytes:
    """The response frame answering ``request``: its version, correlation id and header version."""
    if response.API_KEY != request.api_key:
        raise TypeError(f"{type(response).__name__} does not answer API key {request.api_key}")
    return encode_response_frame(request.api_key, request.api_version, request.correlation_id, response)


def encode_response_frame(api_key: int, api_version: int, correlation_id: int, response: ApiMessage) -> bytes:
    """A response frame without a decoded request: e.g. the ApiVersions v0 answer to an
    :class:`UnsupportedVersion` error (``encode_response_frame(18, 0, err.correlation_id, resp)``)."""
    if response.is_request():
        raise TypeError(f"{type(response).__name__} is not a response")
    header_version = _response_header_version(api_key, api_version, response)
    return response_frame(correlation_id, header_version, response.encode(version=api_version))


def response_frame(correlation_id: int, header_version: int, body: bytes | bytearray) -> bytes:
    """Frame an encoded response body: the response header is only the correlation id (v0), plus an
    empty tagged-field section (v1), so it is packed directly rather than through the spec engine."""
    header = _RESPONSE_HEADER.pack(correlation_id, 0)[: 4 + header_version]
    return b"".join((_SIZE.pack(len(header) + len(body)), header, bytes(body)))


_RESPONSE_HEADER = struct.Struct(">ib")


def decode_response(
    api_key: int, api_version: int, frame: bytes | bytearray | memoryview, *, framed: bool = True
) -> ApiMessage:
    """Decode a response to a request of ``api_key``/``api_version``; ``.header.correlation_id`` is set.

    Like Kafka clients, an ApiVersions response carrying an error is read as v0 (brokers answer an
    unsupported ApiVersions version that way). Raises :class:`MalformedResponse` for anything else.
    """
    spec = API_SPECS.get(api_key)
    if spec is None:
        raise MalformedResponse(f"unsupported API key {api_key}")
    try:
        payload = _unframe(frame, framed)
        header_version = spec.response_header_version(api_version)
        header, offset = _decode_header(ResponseHeader, header_version, header_version == 1, payload)
        version = api_version
        if api_key == ApiKey.API_VERSIONS and _INT16.unpack_from(payload, offset)[0] != 0:
            version = 0
        body, end = _decode_body(spec.response, version, payload, offset)
        if end != len(payload):
            raise ValueError(f"body ends at byte {end} of a {len(payload)}-byte payload")
    except Exception as exc:  # bytes from the network: report, never crash
        raise MalformedResponse(
            f"malformed {spec.name} v{api_version} response: {type(exc).__name__}: {exc}"
        ) from exc
    body._header = header
    return body


# --- Internals ------------------------------------------------------------------------------------


def _unframe(frame: bytes | bytearray | memoryview, framed: bool) -> memoryview:
    view = memoryview(frame).cast("B")
    if not framed:
        return view
    if len(view) < _SIZE.size:
        raise ValueError(f"{len(view)}-byte frame has no size prefix")
    (size,) = _SIZE.unpack_from(view, 0)
    if size != len(view) - _SIZE.size:
        raise ValueError(f"frame size prefix {size} but {len(view) - _SIZE.size} payload bytes")
    return view[_SIZE.size :]


def _unframe_request(frame: bytes | bytearray | memoryview, framed: bool) -> memoryview:
    try:
        return _unframe(frame, framed)
    except ValueError as exc:
        peek = _peek_or_none(memoryview(frame).cast("B")[_SIZE.size :])
        raise MalformedRequest(
            f"bad frame: {exc}",
            api_key=peek.api_key if peek else None,
            api_version=peek.api_version if peek else None,
            correlation_id=peek.correlation_id if peek else None,
            field="Size",
            offset=0,
        ) from exc


def _peek_or_none(payload: memoryview) -> RequestHeaderPeek | None:
    if len(payload) < _PEEK.size:
        return None
    return RequestHeaderPeek(*request_header_fields(payload))


def _peek(payload: memoryview) -> RequestHeaderPeek:
    peek = _peek_or_none(payload)
    if peek is None:
        raise MalformedRequest(
            f"{len(payload)}-byte payload is shorter than a request header", field="RequestHeader", offset=0
        )
    return peek


def _context(peek: RequestHeaderPeek, payload: memoryview) -> dict[str, Any]:
    """Error context, with the client id when it is readable."""
    return {
        "api_key": peek.api_key,
        "api_version": peek.api_version,
        "correlation_id": peek.correlation_id,
        "client_id": peek_client_id(payload),
    }


def _decode_header(cls: Any, version: int, flexible: bool, payload: memoryview) -> tuple[Any, int]:
    # Header strings are never compact (the client id must stay readable by old servers).
    decode = cls._struct.compiled_decode_from(version, compact=False, tagged=flexible, data_class=cls)
    header, offset = decode(payload, 0)
    if offset > len(payload):
        raise ValueError("header runs past the end of the frame")
    return header, offset


def _decode_body(
    cls: type[ApiMessage], version: int, payload: memoryview, offset: int
) -> tuple[ApiMessage, int]:
    flexible = bool(cls.flexible_version_q(version))
    decode = cls._struct.compiled_decode_from(
        version, compact=flexible, tagged=flexible, data_class=cls[None]
    )
    return decode(payload, offset)


def _response_header_version(api_key: int, api_version: int, response: ApiMessage) -> int:
    spec = API_SPECS.get(api_key)
    if spec is not None:
        return spec.response_header_version(api_version)
    return 1 if response.flexible_version_q(api_version) else 0


def _frame(header: bytes | bytearray, body: bytes | bytearray) -> bytes:
    return b"".join((_SIZE.pack(len(header) + len(body)), bytes(header), bytes(body)))
