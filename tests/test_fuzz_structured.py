"""Structure-aware fuzzing of every API the bridge decodes itself (issue 11).

Requests are built from the same JSON specs the bridge decodes with (kafka-python's spec engine and
``codecs/specs``), at every version the bridge advertises: random values of each field's type, null
where the spec's ``nullableVersions`` allow it, empty and large-ish arrays, and values that matter
to the coordinator (group ids shared between requests, real Connect subscriptions, epochs around 0,
and the member ids and generations the bridge handed out earlier, so syncs, heartbeats, leaves and
installs reach members that exist). The generator encodes them itself and records where every
field's bytes are (``Span``), so it can then break them one field at a time: lengths off by one,
null where the spec forbids it, negative and huge sizes, overlong varints, flipped, cut, deleted,
doubled and inserted bytes, bad tagged fields, extreme integers, and wrong frame sizes.

The oracle reads the byte stream the way the server does (size prefix, limit, then
``decode_request``, which applies Kafka's parse rules) and says, frame by frame, what Kafka's broker
does with it:

* a request that parses (and an ApiVersions request at a version the bridge does not know) is
  answered: one response per request, in request order, with its correlation id, decodable by the
  response spec of that API and version, with no null the response spec forbids (a Java client
  could not read it otherwise);
* the first frame that does not parse (or whose size is negative, over the limit, or longer than
  what follows) closes the connection without an answer, as Kafka's SocketServer does on
  InvalidRequestException; nothing after it is answered.

The harness sends what parses pipelined, reads every answer, and only then sends the frame that must
close the connection (Kafka reads one request at a time; see the xfail in test_hostile_input.py for
what the bridge does when both arrive together). A JoinGroup or SyncGroup may legitimately park (the
classic protocol answers when the rebalance ends): its silence is counted, not failed. Between
scripts a well-behaved member of another group heartbeats on its own connection and must get error 0
every time; no ERROR may be logged and the server's tasks must all be alive at the end.

In the suite: about 6,000 frames in a few seconds, drawn from fixed seeds (hypothesis derandomized;
only the member ids the bridge hands out, which are random, differ between runs);
``test_long_campaign`` (heavy) sends 20,000, and ``benchmarks/fuzz.py`` runs the same generator and
oracle for 1,000,000 against a ``connect-bridge serve`` subprocess.
"""

from __future__ import annotations

import contextlib
import logging
import random
import socket
import struct
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.codecs.messages import API_SPECS, ApiKey
from connect_bridge.codecs.requests import (
    RequestDecodeError,
    decode_request,
    decode_response,
    encode_request,
    null_violation,
)
from connect_bridge.state import api as napi
from connect_bridge.wire import maps as wm
from test_server import Running, read_frame, running

SIZE = struct.Struct(">i")
PEEK = struct.Struct(">hhi")
STEADY_GROUP = "steady-group"
"""The well-behaved member's group: the fuzzer never names it."""
POPULATED_GROUP = "connect-cluster"
"""A connect group with a member (the fixtures join one): fuzzed requests do name it."""
PARKING = frozenset({int(ApiKey.JOIN_GROUP), int(ApiKey.SYNC_GROUP)})

ALL_VERSIONS: list[tuple[int, int]] = [
    (int(spec.api_key), v)
    for spec in API_SPECS.values()
    for v in range(spec.min_version, spec.max_version + 1)
]
"""Every (API key, version) the bridge decodes and advertises."""


# ------------------------------------------------------------------------------------------ values

_INT_RANGES = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
_INT_FORMATS = {"int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "int64": ">q"}
_ALPHABETS = (
    "abcdefghijklmnopqrstuvwxyz0123456789-._",
    "ABCxyz019 !\"#$%&'()*+,/:;<=>?@[\\]^`{|}~",
    "é☃中文ßπ𝄞\u200b\u202e",
    "\x00\x01\x07\x1b[31m\n\r\t\x7f",
)
_TIMEOUTS = (-1, 0, 1, 100, 3_000, 6_000, 10_000, 60_000, 1_800_001, (1 << 31) - 1)
_EPOCHS = (-2, -1, 0, 0, 1, 2, 3, 1 << 20, (1 << 31) - 1, -(1 << 31))


@dataclass
class Shape:
    """How a valid message is drawn: how often null, how long arrays and strings get."""

    null_p: float = 0.15
    max_items: int = 4
    max_string: int = 24

    @staticmethod
    def named(name: str) -> Shape:
        return {
            "min": Shape(null_p=1.0, max_items=0, max_string=0),
            "typical": Shape(),
            "large": Shape(null_p=0.0, max_items=120, max_string=2_000),
        }[name]


@dataclass
class Pools:
    """Values shared between requests so that they meet in the coordinator's state."""

    groups: list[str] = field(default_factory=lambda: [POPULATED_GROUP, "", *(f"fuzz-{i}" for i in range(6))])
    members: list[str] = field(default_factory=lambda: ["", "fuzz-member-1", "fuzz-member-2"])
    connectors: list[str] = field(default_factory=lambda: ["A", "B", "orders-sink", ""])
    known: list[tuple[str, str, int]] = field(default_factory=list)
    """(group, member id, generation or epoch) the bridge handed out: requests reuse them, so the
    fuzzing reaches members that exist (syncs, heartbeats, leaves, installs), not only joins."""

    def learn(self, group: str | None, member_id: str | None, epoch: int, rng: random.Random) -> None:
        if group is None or not member_id:
            return
        entry = (group, member_id, epoch)
        if len(self.known) < 64:
            self.known.append(entry)
        else:
            self.known[rng.randrange(64)] = entry


_MEMBER_APIS = frozenset({11, 12, 13, 14, 1000, 1001, 1002})
"""Requests naming a member: half of them name one the bridge handed out (``Pools.known``)."""


def _name_a_known_member(rng: random.Random, values: dict[str, Any], pools: Pools) -> None:
    group, member_id, epoch = rng.choice(pools.known)
    values["group_id"] = group
    if "member_id" in values:
        values["member_id"] = member_id
    for key in ("generation_id", "member_epoch"):
        if key in values:
            values[key] = epoch if rng.random() < 0.8 else rng.choice((epoch + 1, epoch - 1, -1, 0))
    if values.get("members"):  # LeaveGroup v3+
        values["members"][0]["member_id"] = member_id


def _string(rng: random.Random, shape: Shape) -> str:
    n = rng.choice((0, 1, rng.randint(0, 16), rng.randint(0, shape.max_string)))
    s = "".join(rng.choices(rng.choice(_ALPHABETS), k=n))
    return s if len(s.encode("utf-8")) <= 32_767 else s[:8_000]


def _subscription(rng: random.Random) -> bytes:
    owned = sorted({ConnectorTaskId(rng.choice("AB"), rng.randint(-1, 3)) for _ in range(rng.randint(0, 4))})
    version = rng.randint(0, 2)
    allocation = Assignment.build(0, "", "", rng.randint(-1, 9), owned, ()) if version else None
    return encode_subscription(
        Subscription(f"http://w{rng.randint(0, 9)}:8083", rng.randint(-1, 9), allocation), version
    )


def _assignment(rng: random.Random) -> bytes:
    items = sorted({ConnectorTaskId(rng.choice("AB"), rng.randint(-1, 3)) for _ in range(rng.randint(0, 4))})
    return encode_assignment(Assignment.build(0, "w1", "http://w1:8083", 5, items, ()), rng.randint(0, 2))


def _hinted(rng: random.Random, name: str, kind: str, shape: Shape, pools: Pools) -> Any:
    """A value for a field the coordinator reads, by its spec name; None when there is no hint."""
    if kind == "string":
        if name in ("GroupId", "Groups", "GroupIds", "CoordinatorKeys", "Key"):
            return rng.choice(pools.groups) if rng.random() < 0.8 else None
        if name == "MemberId":
            return rng.choice(pools.members) if rng.random() < 0.7 else None
        if name == "ProtocolType":
            return rng.choice(("connect", "connect", "consumer", ""))
        if name in ("Name", "ProtocolName") and rng.random() < 0.7:
            return rng.choice(("sessioned", "compatible", "default", "connect-cooperative", "connect-eager"))
        if name in ("Connectors", "Connector"):
            return rng.choice(pools.connectors)
        if name == "WorkerUrl" and rng.random() < 0.7:
            return f"http://w{rng.randint(0, 9)}:8083"
        if name == "ServerAssignor" and rng.random() < 0.7:
            return rng.choice(("connect-cooperative", "connect-eager", "range"))
        if name in ("StatesFilter", "TypesFilter") and rng.random() < 0.7:
            return rng.choice(("Stable", "Empty", "PreparingRebalance", "classic", "connect", "consumer"))
        if name == "ClientSoftwareName" and rng.random() < 0.7:
            return rng.choice(("fuzz", "apache-kafka-java", "librdkafka"))
        return None
    if kind == "bytes" and name in ("Metadata", "Assignment") and rng.random() < 0.6:
        return _subscription(rng) if name == "Metadata" else _assignment(rng)
    if kind in _INT_RANGES:
        if name in ("SessionTimeoutMs", "RebalanceTimeoutMs"):  # mostly within the bridge's bounds
            return rng.choice((6_000, 10_000, 30_000)) if rng.random() < 0.7 else rng.choice(_TIMEOUTS)
        if name in ("GenerationId", "MemberEpoch", "GroupEpoch"):
            return rng.choice(_EPOCHS)
        if name == "KeyType":
            return rng.choice((0, 0, 0, 1, 2, -1))
        if name == "ConfigOffset":
            return rng.choice((-1, 0, 5, 9, (1 << 63) - 1))
        if name == "TaskIds":  # a negative one makes the whole request INVALID_REQUEST
            return rng.randint(0, 5) if rng.random() < 0.97 else rng.choice((-1, -2))
    return None


def _scalar(rng: random.Random, name: str, kind: str, shape: Shape, pools: Pools) -> Any:
    hinted = _hinted(rng, name, kind, shape, pools)
    if hinted is not None:
        return hinted
    if kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        return rng.choice((0, 1, -1 if lo < 0 else 2, lo, hi, rng.randint(lo, hi), rng.randint(-5, 100)))
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float64":
        return rng.choice((0.0, -1.5, 1e300, rng.random()))
    if kind == "uuid":
        return None if rng.random() < 0.5 else uuid.UUID(int=rng.getrandbits(128))
    if kind == "string":
        return _string(rng, shape)
    if kind in ("bytes", "records"):
        n = rng.choice((0, rng.randint(0, 16), rng.randint(0, shape.max_string)))
        return rng.randbytes(n)
    raise AssertionError(f"no generator for {kind}")


def _null_ok(field_: Any, version: int) -> bool:
    return bool(field_.nullable_for_version_q(version))


_NULL_BIAS = {"ClientAssignors": 0.7, "ServerAssignor": 0.5, "GroupInstanceId": 0.7, "InstanceId": 0.7}
"""Nullable fields a real worker mostly leaves null (a static member, client-side assignors)."""


def gen_struct(
    rng: random.Random, struct_: Any, version: int, shape: Shape, pools: Pools, depth: int = 0
) -> dict[str, Any]:
    """Values for every field ``version`` has (dicts for structs, lists for arrays), valid per the spec.
    Arrays nested in array elements stay short (a large array of large arrays is just slow)."""
    out: dict[str, Any] = {}
    for f in struct_.untagged_fields(version):
        nullable = _null_ok(f, version)
        if nullable and rng.random() < max(shape.null_p, _NULL_BIAS.get(f._name, 0.0)):
            out[f.name] = None
        elif f.is_struct_array() or f.is_array():
            most = shape.max_items if depth == 0 else min(shape.max_items, 4)
            n = rng.choice((0, 1, 2, rng.randint(0, most), most))
            if f.is_struct_array():
                out[f.name] = [
                    gen_struct(rng, f.array_of, version, shape, pools, depth + 1) for _ in range(n)
                ]
            else:
                out[f.name] = [_scalar(rng, f._name, f.array_of.type_str, shape, pools) for _ in range(n)]
        elif f.is_struct():
            out[f.name] = gen_struct(rng, f, version, shape, pools, depth)
        else:
            value = _scalar(rng, f._name, f.type_str, shape, pools)
            if value is None and f.type_str in ("string", "bytes", "records") and not nullable:
                value = "" if f.type_str == "string" else b""
            out[f.name] = value
    return out


# ------------------------------------------------------------------------------------------ encoding


@dataclass(frozen=True)
class Span:
    """Where one field's bytes are in a request payload (header included)."""

    path: str
    kind: str
    """int8/int16/uint16/int32/int64/float64/bool/uuid/string/bytes/array/struct/tags."""
    start: int
    end: int
    prefix: int
    """Bytes of the length prefix (string/bytes/array) or null flag (nullable struct); 0 otherwise."""
    compact: bool
    nullable: bool


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class Encoder:
    """Encodes values drawn by :func:`gen_struct` exactly as Kafka would, recording every field's span."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.spans: list[Span] = []

    def _prefix(self, value: Any, n: int, compact: bool, wide: bool) -> None:
        if compact:
            self.out += uvarint(0 if value is None else n + 1)
        elif wide:
            self.out += SIZE.pack(-1 if value is None else n)
        else:
            self.out += struct.pack(">h", -1 if value is None else n)

    def scalar(self, kind: str, value: Any, compact: bool, path: str, nullable: bool) -> None:
        start = len(self.out)
        prefix = 0
        if kind in _INT_FORMATS:
            self.out += struct.pack(_INT_FORMATS[kind], value)
        elif kind == "bool":
            self.out += b"\x01" if value else b"\x00"
        elif kind == "float64":
            self.out += struct.pack(">d", value)
        elif kind == "uuid":
            self.out += (value or uuid.UUID(int=0)).bytes
        elif kind == "string":
            raw = None if value is None else value.encode("utf-8")
            self._prefix(raw, len(raw or b""), compact, wide=False)
            prefix = len(self.out) - start
            self.out += raw or b""
        elif kind in ("bytes", "records"):
            self._prefix(value, len(value or b""), compact, wide=True)
            prefix = len(self.out) - start
            self.out += value or b""
            kind = "bytes"
        else:
            raise AssertionError(kind)
        self.spans.append(Span(path, kind, start, len(self.out), prefix, compact, nullable))

    def tags(self, path: str) -> None:
        self.spans.append(Span(f"{path}<tags>", "tags", len(self.out), len(self.out) + 1, 0, True, False))
        self.out += b"\x00"

    def struct(self, struct_: Any, values: dict[str, Any], version: int, flexible: bool, path: str) -> None:
        for f in struct_.untagged_fields(version):
            where = f"{path}{f._name}"
            value = values[f.name]
            nullable = _null_ok(f, version)
            if f.is_struct_array() or f.is_array():
                start = len(self.out)
                self._prefix(value, len(value or ()), flexible, wide=True)
                prefix = len(self.out) - start
                for i, item in enumerate(value or ()):
                    if f.is_struct_array():
                        self.struct(f.array_of, item, version, flexible, f"{where}[{i}].")
                    else:
                        self.scalar(f.array_of.type_str, item, flexible, f"{where}[{i}]", False)
                self.spans.append(Span(where, "array", start, len(self.out), prefix, flexible, nullable))
            elif f.is_struct():
                start = len(self.out)
                if nullable:
                    self.out += b"\xff" if value is None else b"\x01"
                if value is not None:
                    self.struct(f, value, version, flexible, f"{where}.")
                self.spans.append(
                    Span(where, "struct", start, len(self.out), int(nullable), flexible, nullable)
                )
            else:
                self.scalar(f.type_str, value, flexible, where, nullable)
        if flexible:
            self.tags(path)


@dataclass
class Request:
    """One valid request: its payload (no size prefix) and where each field is."""

    api_key: int
    version: int
    correlation_id: int
    payload: bytes
    spans: list[Span]

    @property
    def frame(self) -> bytes:
        return SIZE.pack(len(self.payload)) + self.payload


def build_request(
    rng: random.Random, api_key: int, version: int, correlation_id: int, shape: Shape, pools: Pools
) -> Request:
    spec = API_SPECS[api_key]
    flexible = spec.request_flexible(version)
    enc = Encoder()
    enc.scalar("int16", api_key, False, "<RequestApiKey>", False)
    enc.scalar("int16", version, False, "<RequestApiVersion>", False)
    enc.scalar("int32", correlation_id, False, "<CorrelationId>", False)
    client_id = rng.choice(("fuzz", "", None, "connect-worker-1", _string(rng, shape)))
    enc.scalar("string", client_id, False, "<ClientId>", True)  # never compact, even in header v2
    if flexible:
        enc.tags("<RequestHeader>")
    values = gen_struct(rng, spec.request._struct, version, shape, pools)
    if api_key in _MEMBER_APIS and pools.known and rng.random() < 0.5:
        _name_a_known_member(rng, values, pools)
    enc.struct(spec.request._struct, values, version, flexible, "")
    return Request(api_key, version, correlation_id, bytes(enc.out), enc.spans)


# ------------------------------------------------------------------------------------------ mutation

MUTATIONS_BY_KIND = {
    "length": ("null", "len+1", "len-1", "len-huge", "len-negative", "varint-overlong", "varint-padded"),
    "int": ("extreme", "extreme"),
    "struct": ("null", "flag"),
    "tags": ("unknown-tag", "tag-size-huge", "tag-count-huge"),
    "any": ("flip", "truncate", "delete", "duplicate", "insert"),
}
FRAME_MUTATIONS = ("size+1", "size-1", "size-negative", "size-huge", "size-zero")


def _kind_group(span: Span) -> str:
    if span.kind in ("string", "bytes", "array"):
        return "length"
    if span.kind in _INT_RANGES or span.kind in ("bool", "uuid", "float64"):
        return "int"
    if span.kind == "struct":
        return "struct" if span.nullable else "any"
    return span.kind


def mutations_for(span: Span) -> tuple[str, ...]:
    return MUTATIONS_BY_KIND.get(_kind_group(span), ()) + MUTATIONS_BY_KIND["any"]


def _length_prefix(span: Span, n: int | None, payload: bytes) -> bytes:
    """A replacement for the span's length prefix saying ``n`` (None = null)."""
    if span.compact:
        return uvarint(0 if n is None else n + 1)
    wide = span.kind != "string"
    if n is None:
        n = -1
    return SIZE.pack(n) if wide else struct.pack(">h", max(-(1 << 15), min((1 << 15) - 1, n)))


def _current_length(span: Span, payload: bytes) -> int:
    if span.compact:
        value, shift, at = 0, 0, span.start
        while True:
            b = payload[at]
            value |= (b & 0x7F) << shift
            at += 1
            if not b & 0x80:
                return value - 1
            shift += 7
    if span.kind == "string":
        return struct.unpack_from(">h", payload, span.start)[0]
    return SIZE.unpack_from(payload, span.start)[0]


def mutate(rng: random.Random, req: Request, span: Span, op: str, max_frame: int) -> tuple[bytes, str]:
    """The framed request with ``op`` applied to ``span`` (or to the frame), and a description."""
    p = bytearray(req.payload)
    s, e = span.start, span.end
    what = f"{op} at {span.path} ({span.kind} bytes {s}-{e})"
    if op in FRAME_MUTATIONS:
        n = {
            "size+1": len(p) + 1,
            "size-1": len(p) - 1,
            "size-negative": rng.choice((-1, -(1 << 31))),
            "size-huge": max_frame + 1,
            "size-zero": 0,
        }[op]
        return SIZE.pack(n) + bytes(p), f"{op} ({n} for {len(p)} bytes)"
    if op == "null" and span.kind == "struct":
        p[s:e] = b"\xff"
    elif op == "flag":
        p[s] = rng.choice((0x00, 0x02, 0x7F, 0x80, 0xFE))
    elif op in ("null", "len+1", "len-1", "len-huge", "len-negative"):
        current = _current_length(span, bytes(p))
        n = {
            "null": None,
            "len+1": current + 1,
            "len-1": current - 1,
            "len-huge": rng.choice(((1 << 15) - 1, (1 << 31) - 2, 1 << 24)),
            "len-negative": rng.choice((-2, -(1 << 15), -(1 << 31))),
        }[op]
        if span.compact and n is not None and n < -1:
            n = (1 << 32) - 2  # a compact length cannot be negative: the largest a varint says
        p[s : s + span.prefix] = _length_prefix(span, n, bytes(p))
    elif op == "varint-overlong" and span.compact:
        p[s : s + span.prefix] = b"\xff" * rng.choice((5, 6, 10, 2_000))
    elif op == "varint-padded" and span.compact:
        n = _current_length(span, bytes(p)) + 1
        padded = bytearray(((n >> (7 * i)) & 0x7F) | 0x80 for i in range(5))
        padded[4] &= 0x7F  # five bytes, the last without a continuation bit: Kafka accepts it
        p[s : s + span.prefix] = bytes(padded)
    elif op == "extreme":
        if span.kind in _INT_FORMATS:
            lo, hi = _INT_RANGES[span.kind]
            p[s:e] = struct.pack(_INT_FORMATS[span.kind], rng.choice((lo, hi, -1 if lo < 0 else hi, 0)))
        elif span.kind == "bool":
            p[s] = rng.choice((0x02, 0xFF))
        else:
            p[s:e] = rng.randbytes(e - s)
    elif op == "unknown-tag":
        data = rng.randbytes(rng.randint(0, 8))
        p[s:e] = uvarint(1) + uvarint(rng.choice((0, 7, 1000, 1 << 20))) + uvarint(len(data)) + data
    elif op == "tag-size-huge":
        p[s:e] = uvarint(1) + uvarint(rng.randint(0, 3)) + uvarint((1 << 31) - 1) + b"\x00"
    elif op == "tag-count-huge":
        p[s:e] = uvarint(rng.choice(((1 << 31) - 1, 1 << 20)))
    elif op == "flip" and e > s:
        at = rng.randrange(s, e)
        p[at] ^= rng.randint(1, 255)
    elif op == "truncate":
        del p[rng.randint(s, max(s, e - 1)) :]
    elif op == "delete":
        del p[s:e]
    elif op == "duplicate":
        p[e:e] = p[s:e]
    elif op == "insert":
        p[s:s] = rng.randbytes(rng.randint(1, 8))
    else:
        what += " (no-op)"
    return SIZE.pack(len(p)) + bytes(p), what


# ------------------------------------------------------------------------------------------ oracle


@dataclass(frozen=True)
class Expect:
    """A frame the bridge must answer."""

    api_key: int
    version: int
    correlation_id: int
    end: int
    """Offset in the script just after this frame."""
    group_id: str | None = None


@dataclass(frozen=True)
class Verdict:
    answers: list[Expect]
    terminal: str | None
    """None: every frame is answered; "close": the frame after the answers closes the connection;
    "eof": the script ends inside a frame (the bridge waits for the rest, then sees EOF)."""
    reason: str = ""


def server_view(stream: bytes, max_frame: int) -> Verdict:
    """What Kafka's broker (and so the bridge) does with ``stream`` sent on one connection."""
    at, answers = 0, []
    while at < len(stream):
        if len(stream) - at < 4:
            return Verdict(answers, "eof", "a partial size prefix")
        (size,) = SIZE.unpack_from(stream, at)
        if size < 0 or size > max_frame:
            return Verdict(answers, "close", f"frame size {size}")
        if at + 4 + size > len(stream):
            return Verdict(answers, "eof", f"frame of {size} bytes with {len(stream) - at - 4} sent")
        payload = stream[at + 4 : at + 4 + size]
        at += 4 + size
        try:
            request = decode_request(payload, framed=False)
        except RequestDecodeError as exc:
            if exc.answerable and exc.correlation_id is not None:
                answers.append(Expect(18, int(exc.api_version or 0), exc.correlation_id, at))
                continue
            return Verdict(answers, "close", str(exc))
        group = getattr(request.body, "group_id", None)
        answers.append(Expect(request.api_key, request.api_version, request.correlation_id, at, group))
    return Verdict(answers, None)


def check_answer(expect: Expect, payload: bytes) -> tuple[str | None, int, Any]:
    """Why ``payload`` is not a well-formed answer to ``expect`` (None when it is), and the answer's
    error code (the top-level one, else the first per-item one: what the fuzzing reached)."""
    try:
        response = decode_response(expect.api_key, expect.version, payload, framed=False)
    except Exception as exc:
        return f"undecodable response: {exc}", -1, None
    if response._header.correlation_id != expect.correlation_id:
        return f"correlation id {response._header.correlation_id}, expected {expect.correlation_id}", -1, None
    violation = null_violation(response, response.version)
    if violation is not None:
        return f"response breaks its spec: {violation}", -1, None
    code = getattr(response, "error_code", None)
    if code is None:
        items = getattr(response, "groups", None) or getattr(response, "coordinators", None) or ()
        code = next((item.error_code for item in items), 0)
    return None, int(code), response


# ------------------------------------------------------------------------------------------ harness


@dataclass
class Tally:
    frames: int = 0
    answers: int = 0
    closes: int = 0
    parked: int = 0
    scripts: int = 0
    by_api: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    """Answers by API and error code ("JoinGroup:0"): how deep into the coordinator the fuzzing got."""
    failures: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.frames} frames, {self.answers} answers, {self.closes} closes, {self.parked} parked"

    def add(self, other: Tally) -> None:
        self.frames += other.frames
        self.answers += other.answers
        self.closes += other.closes
        self.parked += other.parked
        self.scripts += other.scripts
        self.by_api.update(other.by_api)
        self.outcomes.update(other.outcomes)
        self.failures.extend(other.failures)


def _read_frame(sock: socket.socket) -> bytes | None:
    return read_frame(sock, max_size=1 << 28)


def run_script(
    host: str,
    port: int,
    script: bytes,
    max_frame: int,
    *,
    pools: Pools | None = None,
    answer_timeout: float = 5.0,
    park_timeout: float = 0.3,
) -> Tally:
    """Send ``script`` on a new connection the way a Kafka client would meet a Kafka broker, and
    check every answer (and the close) against :func:`server_view`. Member ids and epochs handed out
    are added to ``pools``."""
    tally = Tally(scripts=1)
    rng = random.Random(len(script))
    verdict = server_view(script, max_frame)
    prefix_end = verdict.answers[-1].end if verdict.answers else 0
    if verdict.terminal is None:
        prefix_end = len(script)
    with socket.create_connection((host, port), timeout=answer_timeout) as sock:
        with contextlib.suppress(OSError):
            sock.sendall(script[:prefix_end])
        for i, expect in enumerate(verdict.answers):
            tally.frames += 1
            tally.by_api[f"{expect.api_key}v{expect.version}"] += 1
            parkable = expect.api_key in PARKING
            sock.settimeout(park_timeout if parkable else answer_timeout)
            try:
                payload = _read_frame(sock)
            except TimeoutError:
                if parkable:  # the classic protocol answers when the rebalance ends
                    tally.parked += 1
                    return tally
                tally.failures.append(f"no answer to {expect} within {answer_timeout}s: {script.hex()}")
                return tally
            sock.settimeout(answer_timeout)
            if payload is None:
                tally.failures.append(
                    f"closed instead of answering #{i} {expect}: {script[:prefix_end].hex()}"
                )
                return tally
            problem, code, response = check_answer(expect, payload)
            if problem is not None:
                tally.failures.append(f"{problem}; request {expect}: {script.hex()}")
                return tally
            tally.answers += 1
            tally.outcomes[f"{API_SPECS[expect.api_key].name}:{code}"] += 1
            if pools is not None and code in (0, 79):  # 79: MEMBER_ID_REQUIRED hands out the id
                epoch = getattr(response, "generation_id", getattr(response, "member_epoch", 0))
                pools.learn(expect.group_id, getattr(response, "member_id", None), epoch, rng)
        if verdict.terminal is None:
            return tally
        tally.frames += 1
        with contextlib.suppress(OSError):
            sock.sendall(script[prefix_end:])
            if verdict.terminal == "eof":
                sock.shutdown(socket.SHUT_WR)
        try:
            extra = _read_frame(sock)
        except TimeoutError:
            tally.failures.append(f"not closed after {verdict.reason}: {script[prefix_end:][:200].hex()}")
            return tally
        if extra is not None:
            tally.failures.append(
                f"answered instead of closing after {verdict.reason}: {script[prefix_end:][:200].hex()}"
            )
            return tally
        tally.closes += 1
    return tally


@dataclass
class Campaign:
    """Draws scripts: a few frames that parse (valid or mutated but still valid), then at most one
    that closes the connection."""

    rng: random.Random
    max_frame: int
    pools: Pools = field(default_factory=Pools)
    mutate_p: float = 0.6
    correlation: int = 0

    def request(
        self, api_key: int | None = None, version: int | None = None, shape: str | None = None
    ) -> Request:
        if api_key is None:  # every API as often as any other, whatever its number of versions
            spec = API_SPECS[self.rng.choice(sorted(API_SPECS))]
            api_key, version = int(spec.api_key), self.rng.randint(spec.min_version, spec.max_version)
        assert version is not None
        self.correlation = (self.correlation + 1) & 0x7FFFFFFF
        s = Shape.named(shape or self.rng.choice(("min", "typical", "typical", "typical", "large")))
        return build_request(self.rng, api_key, version, self.correlation, s, self.pools)

    def mutated(self, req: Request) -> tuple[bytes, str]:
        if self.rng.random() < 0.05:
            return mutate(self.rng, req, req.spans[0], self.rng.choice(FRAME_MUTATIONS), self.max_frame)
        span = self.rng.choice(req.spans)
        return mutate(self.rng, req, span, self.rng.choice(mutations_for(span)), self.max_frame)

    def script(self, max_frames: int = 8) -> tuple[bytes, list[str]]:
        parts: list[bytes] = []
        notes: list[str] = []
        for _ in range(self.rng.randint(1, max_frames)):
            req = self.request()
            if self.rng.random() < self.mutate_p:
                data, note = self.mutated(req)
            else:
                data, note = req.frame, "valid"
            parts.append(data)
            notes.append(f"{req.api_key}v{req.version} {note}")
            if server_view(data, self.max_frame).terminal is not None:
                break  # what follows a closing frame is never read
        return b"".join(parts), notes


# ------------------------------------------------------------------------------------------ the suite

MAX_FRAME = 1 << 20


@dataclass
class SteadyMember:
    """A well-behaved new-protocol worker with its own connection: its heartbeat must always work."""

    sock: socket.socket
    member_id: str
    epoch: int
    correlation: int = 1000

    group: str = STEADY_GROUP

    @classmethod
    def join(cls, port: int, group: str = STEADY_GROUP, host: str = "127.0.0.1") -> SteadyMember:
        sock = socket.create_connection((host, port), timeout=10)
        req = napi.HeartbeatRequest(
            group, "", 0, rebalance_timeout_ms=60_000, url="http://steady:8083", owned=frozenset()
        )
        sock.sendall(encode_request(wm.heartbeat_to_wire(req), 0, 1, "steady"))
        resp = wm.heartbeat_response_from_wire(
            decode_response(1000, 0, _read_frame(sock) or b"", framed=False)
        )
        assert resp.error_code == 0, resp
        return cls(sock, resp.member_id, resp.member_epoch, group=group)

    def heartbeat(self) -> tuple[int, float]:
        """(error code, seconds) of one steady heartbeat."""
        self.correlation += 1
        msg = wm.heartbeat_to_wire(napi.HeartbeatRequest(self.group, self.member_id, self.epoch))
        started = time.perf_counter()
        self.sock.sendall(encode_request(msg, 0, self.correlation, "steady"))
        payload = _read_frame(self.sock)
        elapsed = time.perf_counter() - started
        assert payload is not None, "the steady member's connection was closed"
        resp = decode_response(1000, 0, payload, framed=False)
        assert resp._header.correlation_id == self.correlation
        if resp.member_epoch > self.epoch:
            self.epoch = resp.member_epoch
        return resp.error_code, elapsed


@pytest.fixture(scope="module")
def fuzz_target() -> Iterator[tuple[Running, SteadyMember]]:
    from connect_bridge.state.config import CoordinatorConfig

    coordinator = CoordinatorConfig(classic_initial_rebalance_delay_ms=0, session_timeout_ms=600_000)
    with running(max_frame_bytes=MAX_FRAME, coordinator=coordinator) as srv:
        populated = SteadyMember.join(srv.port, POPULATED_GROUP)  # a group the fuzzer does name
        populated.sock.close()
        steady = SteadyMember.join(srv.port)
        try:
            yield srv, steady
        finally:
            steady.sock.close()


@contextlib.contextmanager
def no_errors_logged() -> Iterator[list[logging.LogRecord]]:
    """Collects ERROR records of every logger (an asyncio "Unhandled exception" included)."""
    records: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Collect(logging.ERROR)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield records
    finally:
        root.removeHandler(handler)


def _server_alive(srv: Running) -> None:
    def state() -> tuple[bool, list[str], int]:
        tasks = srv.server._tasks
        failed = [t.get_name() for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
        running_ = sum(not t.done() for t in tasks)  # the timer loop runs for as long as the server
        return srv.server.loaded and getattr(srv.server, "failure", None) is None, failed, running_

    healthy, failed, running_ = srv.on_loop(state)
    assert healthy and not failed and running_, (
        f"server not healthy: {healthy}, failed {failed}, running {running_}"
    )


def _run_campaign(
    srv: Running,
    steady: SteadyMember,
    scripts: Callable[[], Iterator[tuple[bytes, list[str]]]],
    pools: Pools,
    every: int = 10,
) -> Tally:
    total = Tally()
    with no_errors_logged() as errors:
        for n, (script, notes) in enumerate(scripts()):
            tally = run_script("127.0.0.1", srv.port, script, MAX_FRAME, pools=pools)
            if tally.failures:
                pytest.fail(f"{tally.failures[0]}\n  frames: {notes}")
            total.add(tally)
            if n % every == 0:
                code, seconds = steady.heartbeat()
                assert code == 0 and seconds < 2.0, (code, seconds, notes)
        assert not errors, [r.getMessage() for r in errors[:5]]
    code, _ = steady.heartbeat()
    assert code == 0
    _server_alive(srv)
    return total


def test_the_generator_builds_valid_requests_at_every_version() -> None:
    """Unmutated requests decode, carry no forbidden null, and re-encode to the same bytes through the
    spec engine: the generator and its spans describe exactly what Kafka would send."""
    rng = random.Random(11)
    pools = Pools()
    for api_key, version in ALL_VERSIONS:
        for shape in ("min", "typical", "large"):
            for _ in range(3):
                req = build_request(rng, api_key, version, 7, Shape.named(shape), pools)
                decoded = decode_request(req.frame)
                assert null_violation(decoded.body, version) is None
                decoded.body._header = None  # a decoded message has none; encode() reads it
                again = encode_request(decoded.body, version, 7, decoded.client_id)
                assert again == req.frame, (api_key, version, shape)
                assert {s.kind for s in req.spans} <= set(_INT_RANGES) | {
                    "bool",
                    "uuid",
                    "float64",
                    "string",
                    "bytes",
                    "array",
                    "struct",
                    "tags",
                }
                assert all(0 <= s.start <= s.end <= len(req.payload) for s in req.spans)


def test_every_api_and_version_field_by_field(fuzz_target: tuple[Running, SteadyMember]) -> None:
    """Each (API, version): valid requests of three shapes, then each of them broken one field at a
    time (a sample of fields and mutations, the same every run)."""
    srv, steady = fuzz_target
    campaign = Campaign(random.Random(20_251), MAX_FRAME)

    def scripts() -> Iterator[tuple[bytes, list[str]]]:
        for api_key, version in ALL_VERSIONS:
            for shape in ("min", "typical", "large"):
                req = campaign.request(api_key, version, shape)
                yield req.frame, [f"{api_key}v{version} valid {shape}"]
                spans = campaign.rng.sample(req.spans, min(len(req.spans), 10))
                for span in spans:
                    for op in campaign.rng.sample(mutations_for(span), 2):
                        data, note = mutate(campaign.rng, req, span, op, MAX_FRAME)
                        yield data, [f"{api_key}v{version} {note}"]
            req = campaign.request(api_key, version, "typical")
            data, note = mutate(
                campaign.rng, req, req.spans[0], campaign.rng.choice(FRAME_MUTATIONS), MAX_FRAME
            )
            yield data, [f"{api_key}v{version} {note}"]

    total = _run_campaign(srv, steady, scripts, campaign.pools, every=25)
    print(f"field by field: {total.summary()}")
    assert total.frames >= 2_500, total
    assert {f"{k}v{v}" for k, v in ALL_VERSIONS} <= set(total.by_api)  # every version was answered
    assert total.closes > 1_000 and total.answers > 600, total


@settings(
    max_examples=200,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 1 << 32), frames=st.integers(1, 12), mutate_p=st.sampled_from([0.0, 0.3, 0.7, 1.0])
)
def test_random_pipelined_scripts(
    fuzz_target: tuple[Running, SteadyMember], seed: int, frames: int, mutate_p: float
) -> None:
    """Pipelined mixes of APIs, valid and mutated, sharing group and member ids (derandomized)."""
    srv, steady = fuzz_target
    campaign = Campaign(random.Random(seed), MAX_FRAME, mutate_p=mutate_p)

    def scripts() -> Iterator[tuple[bytes, list[str]]]:
        for _ in range(6):
            yield campaign.script(frames)

    RANDOM_TOTAL.add(_run_campaign(srv, steady, scripts, campaign.pools, every=3))


RANDOM_TOTAL = Tally()
"""What :func:`test_random_pipelined_scripts` sent over all its examples (checked below)."""


def test_random_scripts_covered_answers_closes_and_every_api() -> None:
    total = RANDOM_TOTAL
    if total.scripts == 0:
        pytest.skip("test_random_pipelined_scripts did not run")
    print(f"random scripts: {total.summary()}")
    assert total.frames >= 1_000 and total.answers >= 500 and total.closes >= 100, total


LONG_CAMPAIGN_FRAMES = 20_000
"""Frames of :func:`test_long_campaign`: about a minute on two shared cores (50,000 took 80-125 s of
a suite run); the long campaigns are ``benchmarks/fuzz.py``'s million frames."""


@pytest.mark.heavy
def test_long_campaign(fuzz_target: tuple[Running, SteadyMember]) -> None:
    """:data:`LONG_CAMPAIGN_FRAMES` frames in-process; benchmarks/fuzz.py runs a million."""
    srv, steady = fuzz_target
    campaign = Campaign(random.Random(424_242), MAX_FRAME)
    seen = Tally()

    def scripts() -> Iterator[tuple[bytes, list[str]]]:
        while seen.frames < LONG_CAMPAIGN_FRAMES:
            script, notes = campaign.script()
            seen.frames += len(notes)
            yield script, notes

    total = _run_campaign(srv, steady, scripts, campaign.pools, every=50)
    # A script whose connection closes early is not sent to its end: nearly all frames (98 %) go out.
    assert total.frames >= LONG_CAMPAIGN_FRAMES * 49 // 50 and not total.failures, total
