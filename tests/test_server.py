"""The bridge server on a real socket: cluster APIs, group APIs, ordering, faults, loading, durability.

Each test runs a ``BridgeServer`` on port 0 in a background thread with its own event loop
(:class:`Running`), so tests can talk to it with the asyncio ``KafkaConnection`` (through
``asyncio.run``) and with plain blocking sockets for malformed input. Coordinator state is read on the
server's loop (``Running.snapshot``), never from the test thread directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect_bridge.bridge.describe import describe
from connect_bridge.bridge.server import BridgeServer, ServerOptions
from connect_bridge.bridge.stores.store import FileRecordStore, MemoryRecordStore
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.codecs.requests import decode_response, encode_request
from connect_bridge.state import api as napi
from connect_bridge.state.classic import api as capi
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect.legacy_members import CONFIG_MISMATCH
from connect_bridge.state.model import ConfigView
from connect_bridge.wire import maps as wm
from connect_bridge.wire.client import ClientError, KafkaConnection
from polling import wait_until

G = "connect-cluster"
VIEW = ConfigView.of(5, {"A": 2})
ALL_A = frozenset({ConnectorTaskId("A", -1), ConnectorTaskId("A", 0), ConnectorTaskId("A", 1)})
FAST = CoordinatorConfig(classic_initial_rebalance_delay_ms=0)
HOST = "127.0.0.1"
JOIN_V, SYNC_V, HEARTBEAT_V = 7, 5, 4
SIZE = struct.Struct(">i")
PEEK = struct.Struct(">hhi")

OK = 0
LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
INVALID_REQUEST = int(ErrorCode.INVALID_REQUEST)
INCONSISTENT = int(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
UNSUPPORTED_VERSION = int(ErrorCode.UNSUPPORTED_VERSION)
MEMBER_ID_REQUIRED = int(ErrorCode.MEMBER_ID_REQUIRED)
REBALANCE_IN_PROGRESS = int(ErrorCode.REBALANCE_IN_PROGRESS)
UNKNOWN_TOPIC = 3  # UNKNOWN_TOPIC_OR_PARTITION


# ------------------------------------------------------------------------------------------ harness


class Running:
    """A ``BridgeServer`` serving from a background thread's event loop."""

    def __init__(
        self, store: Any = None, *, view: ConfigView | None = VIEW, metrics: Any = None, **options: Any
    ) -> None:
        options.setdefault("coordinator", FAST)
        self.metrics = metrics
        self.store = store if store is not None else MemoryRecordStore()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="bridge", daemon=True)
        self.thread.start()
        self.server: BridgeServer = self.call(self._start(view, options))
        self.port = self.server.port

    async def _start(self, view: ConfigView | None, options: dict[str, Any]) -> BridgeServer:
        server = BridgeServer(ServerOptions(host=HOST, port=0, **options), self.store, self.metrics)
        if view is not None:
            server.set_config_view(view)
        await server.start()
        return server

    def call(self, coro: Coroutine[Any, Any, Any], timeout: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def on_loop(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return self.call(run())

    def snapshot(self) -> Any:
        return self.on_loop(lambda: copy.deepcopy(self.server.coordinator.snapshot()))

    def wait_loaded(self, timeout: float = 5.0) -> None:
        wait_until(lambda: self.on_loop(lambda: self.server.loaded), timeout)

    def connections(self) -> int:
        return self.on_loop(lambda: len(self.server._connections))

    def stop(self) -> None:
        try:
            self.call(self.server.stop(), timeout=10.0)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()


@contextlib.contextmanager
def running(store: Any = None, *, wait: bool = True, **kwargs: Any) -> Iterator[Running]:
    srv = Running(store, **kwargs)
    try:
        if wait:
            srv.wait_loaded()
        yield srv
    finally:
        srv.stop()


def run(coro: Coroutine[Any, Any, Any], timeout: float = 20.0) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def connection(port: int, client_id: str = "test"):
    conn = await KafkaConnection.connect(HOST, port, client_id)
    try:
        yield conn
    finally:
        await conn.close()


# --- new-protocol and legacy workers over the wire


async def new_heartbeat(conn: KafkaConnection, req: napi.HeartbeatRequest) -> napi.HeartbeatResponse:
    return wm.heartbeat_response_from_wire(await conn.request(wm.heartbeat_to_wire(req), 0))


async def new_join(conn: KafkaConnection, url: str = "http://n1:8083") -> napi.HeartbeatResponse:
    req = napi.HeartbeatRequest(
        G, "", 0, rebalance_timeout_ms=60_000, url=url, config_offset=VIEW.offset, owned=frozenset()
    )
    return await new_heartbeat(conn, req)


async def connect_describe(conn: KafkaConnection, *groups: str) -> list[napi.DescribedGroup]:
    return wm.describe_response_from_wire(await conn.request(wm.describe_to_wire(groups), 0))


def protocols(url: str, owned: frozenset[ConnectorTaskId] = frozenset()) -> tuple[tuple[str, bytes], ...]:
    """What a ``connect.protocol=sessioned`` worker advertises."""
    allocation = Assignment.build(0, "", "", VIEW.offset, sorted(owned), ())
    return (
        ("sessioned", encode_subscription(Subscription(url, VIEW.offset, allocation), 2)),
        ("compatible", encode_subscription(Subscription(url, VIEW.offset, allocation), 1)),
        ("default", encode_subscription(Subscription(url, VIEW.offset), 0)),
    )


def join_message(
    member_id: str,
    protos: tuple[tuple[str, bytes], ...],
    group: str = G,
    session_ms: int = 10_000,
    rebalance_ms: int = 30_000,
) -> m.JoinGroupRequest:
    req = capi.JoinGroupRequest(group, member_id, "connect", protos, session_ms, rebalance_ms)
    return wm.join_to_wire(req, JOIN_V)


async def legacy_join(
    conn: KafkaConnection, member_id: str, url: str, group: str = G
) -> capi.JoinGroupResponse:
    msg = await conn.request(join_message(member_id, protocols(url), group), JOIN_V)
    return wm.join_response_from_wire(msg)


async def legacy_sync(
    conn: KafkaConnection, member_id: str, generation: int, assignments: tuple[tuple[str, bytes], ...] = ()
) -> capi.SyncGroupResponse:
    req = capi.SyncGroupRequest(G, member_id, generation, None, "connect", "sessioned", assignments)
    return wm.sync_response_from_wire(await conn.request(wm.sync_to_wire(req, SYNC_V), SYNC_V))


async def legacy_heartbeat(conn: KafkaConnection, member_id: str, generation: int) -> int:
    req = capi.HeartbeatRequest(G, member_id, generation)
    msg = await conn.request(wm.classic_heartbeat_to_wire(req, HEARTBEAT_V), HEARTBEAT_V)
    return wm.classic_heartbeat_response_from_wire(msg).error_code


# --- raw frames


def frame(msg: Any, version: int, correlation_id: int, client_id: str = "raw") -> bytes:
    return encode_request(msg, version, correlation_id, client_id)


def hand_frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request frame with header v1 (key, version, correlation id, client id "raw") and ``body``."""
    payload = PEEK.pack(api_key, version, correlation_id) + struct.pack(">h", 3) + b"raw" + body
    return SIZE.pack(len(payload)) + payload


@contextlib.contextmanager
def raw_socket(port: int, timeout: float = 5.0) -> Iterator[socket.socket]:
    sock = socket.create_connection((HOST, port), timeout=timeout)
    try:
        yield sock
    finally:
        sock.close()


def recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    """``n`` bytes, or None when the server closed the connection first."""
    chunks = []
    while n:
        try:
            chunk = sock.recv(n)
        except (ConnectionResetError, BrokenPipeError):
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket, max_size: int = 1 << 24) -> bytes | None:
    """The next response payload (without its size), or None at EOF. Times out per the socket."""
    head = recv_exactly(sock, 4)
    if head is None:
        return None
    (size,) = SIZE.unpack(head)
    assert 0 <= size < max_size, f"response size prefix {size}"
    payload = recv_exactly(sock, size)
    assert payload is not None, "connection closed in the middle of a response"
    return payload


def assert_closed(sock: socket.socket) -> None:
    assert read_frame(sock) is None


def api_versions_ok(port: int) -> bool:
    """A fresh connection still gets an ApiVersions answer."""
    with raw_socket(port) as sock:
        sock.sendall(frame(m.ApiVersionsRequest(), 0, 4242))
        payload = read_frame(sock)
    assert payload is not None
    response = decode_response(18, 0, payload, framed=False)
    return response._header.correlation_id == 4242 and response.error_code == 0


# ------------------------------------------------------------------------------------------ cluster APIs


def test_api_versions_lists_exactly_what_we_decode() -> None:
    async def scenario(port: int) -> None:
        async with connection(port) as conn:
            for version in (0, 3, 4):
                response = await conn.request(m.ApiVersionsRequest(), version)
                assert response.error_code == 0
                got = sorted((k.api_key, k.min_version, k.max_version) for k in response.api_keys)
                assert got == sorted(m.supported_api_versions())
                assert {1000, 1001, 1002, 1003} <= {k for k, _, _ in got}

    with running() as srv:
        run(scenario(srv.port))


def test_api_versions_at_unsupported_version_answers_v0_with_unsupported_version() -> None:
    with running() as srv, raw_socket(srv.port) as sock:
        # v99 has an unknown layout: the header is v2 (flexible) with an empty tag buffer.
        sock.sendall(hand_frame(18, 99, 31337, b"\x00"))
        payload = read_frame(sock)
        assert payload is not None
        (correlation,) = SIZE.unpack_from(payload, 0)
        assert correlation == 31337
        (error,) = struct.unpack_from(">h", payload, 4)  # header v0, then the v0 body
        assert error == UNSUPPORTED_VERSION
        response = decode_response(18, 99, payload, framed=False)
        assert response.version == 0
        assert sorted((k.api_key, k.min_version, k.max_version) for k in response.api_keys) == sorted(
            m.supported_api_versions()
        )
        # The connection stays usable.
        sock.sendall(frame(m.ApiVersionsRequest(), 3, 2))
        again = decode_response(18, 3, read_frame(sock) or b"", framed=False)
        assert again._header.correlation_id == 2 and again.error_code == 0


def test_find_coordinator_returns_the_bridge_for_groups_at_every_version() -> None:
    async def scenario(port: int) -> None:
        async with connection(port) as conn:
            for version in range(4):
                r = await conn.request(m.FindCoordinatorRequest(key=G, key_type=0), version)
                assert (r.error_code, r.node_id, r.host, r.port) == (0, 0, HOST, port), version
            for version in range(4, 7):
                r = await conn.request(
                    m.FindCoordinatorRequest(key_type=0, coordinator_keys=[G, "other"]), version
                )
                assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in r.coordinators] == [
                    (G, 0, 0, HOST, port),
                    ("other", 0, 0, HOST, port),
                ], version
            # Transaction coordinators are not ours.
            r = await conn.request(m.FindCoordinatorRequest(key="tx", key_type=1), 3)
            assert r.error_code == int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            r = await conn.request(m.FindCoordinatorRequest(key_type=1, coordinator_keys=["tx"]), 4)
            assert r.coordinators[0].error_code == int(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    with running() as srv:
        run(scenario(srv.port))


def test_metadata_names_the_bridge_as_the_only_broker_and_no_topics() -> None:
    async def scenario(port: int) -> None:
        async with connection(port) as conn:
            for version in (0, 1, 4, 9, 12, 13):
                topic = m.MetadataRequest.MetadataRequestTopic
                topics = (
                    [topic(name="connect-configs")]
                    if version < 10
                    else [topic(name="connect-configs", topic_id=None)]
                )
                r = await conn.request(
                    m.MetadataRequest(topics=topics, allow_auto_topic_creation=False), version
                )
                assert [(b.node_id, b.host, b.port) for b in r.brokers] == [(0, HOST, port)], version
                assert [(t.name, t.error_code) for t in r.topics] == [("connect-configs", UNKNOWN_TOPIC)], (
                    version
                )
                if version >= 1:
                    assert r.controller_id == 0
            r = await conn.request(m.MetadataRequest(topics=[], allow_auto_topic_creation=False), 9)
            assert r.topics == [] and len(r.brokers) == 1

    with running() as srv:
        run(scenario(srv.port))


# ------------------------------------------------------------------------------------------ group APIs


def test_new_worker_joins_and_heartbeats_over_the_wire() -> None:
    async def scenario(port: int) -> None:
        async with connection(port, "worker-1") as conn:
            joined = await new_join(conn)
            assert joined.error_code == 0 and joined.member_id and joined.member_epoch >= 1
            assert joined.assignment is not None and joined.assignment.items == ALL_A
            assert joined.heartbeat_interval_ms == FAST.heartbeat_interval_ms
            beat = await new_heartbeat(
                conn, napi.HeartbeatRequest(G, joined.member_id, joined.member_epoch, owned=ALL_A)
            )
            assert (beat.error_code, beat.member_epoch) == (0, joined.member_epoch)
            [group] = await connect_describe(conn, G)
            assert group.error_code == 0 and group.group_type == "connect"
            [member] = group.members
            assert (member.member_id, member.member_epoch, member.current) == (
                joined.member_id,
                joined.member_epoch,
                ALL_A,
            )
            # A stale epoch is fenced.
            fenced = await new_heartbeat(
                conn, napi.HeartbeatRequest(G, joined.member_id, joined.member_epoch + 7)
            )
            assert fenced.error_code == int(ErrorCode.FENCED_MEMBER_EPOCH)

    with running() as srv:
        run(scenario(srv.port))


async def classic_group_of_two(port: int) -> tuple[str, str, int]:
    """Two legacy workers form a classic group; returns (leader id, follower id, generation)."""
    async with connection(port, "legacy-1") as c1, connection(port, "legacy-2") as c2:
        first = await legacy_join(c1, "", "http://w1:8083")
        assert first.error_code == MEMBER_ID_REQUIRED and first.member_id
        w1 = first.member_id
        j1 = await legacy_join(c1, w1, "http://w1:8083")  # parked until the (zero) initial delay ends
        assert (j1.error_code, j1.generation_id, j1.leader) == (0, 1, w1)
        assert [x.member_id for x in j1.members] == [w1]
        assignment = encode_assignment(Assignment.build(0, w1, "http://w1:8083", VIEW.offset, [], []), 2)
        s1 = await legacy_sync(c1, w1, 1, ((w1, assignment),))
        assert s1.error_code == 0
        assert await legacy_heartbeat(c1, w1, 1) == 0

        second = await legacy_join(c2, "", "http://w2:8083")
        assert second.error_code == MEMBER_ID_REQUIRED
        w2 = second.member_id
        # w2's JoinGroup parks: the group waits for w1 to rejoin.
        parked = asyncio.ensure_future(legacy_join(c2, w2, "http://w2:8083"))
        await asyncio.sleep(0.1)  # time enough to be answered, were it not parked
        assert not parked.done()
        assert await legacy_heartbeat(c1, w1, 1) == REBALANCE_IN_PROGRESS
        j1 = await legacy_join(c1, w1, "http://w1:8083")
        j2 = await asyncio.wait_for(parked, 5)  # released when the barrier completes
        assert j1.error_code == 0 and j2.error_code == 0
        assert j1.generation_id == j2.generation_id == 2
        assert j1.leader == j2.leader == w1
        assert sorted(x.member_id for x in j1.members) == sorted([w1, w2]) and j2.members == ()

        a1 = encode_assignment(Assignment.build(0, w1, "http://w1:8083", VIEW.offset, sorted(ALL_A), []), 2)
        a2 = encode_assignment(Assignment.build(0, w1, "http://w1:8083", VIEW.offset, [], []), 2)
        follower = asyncio.ensure_future(legacy_sync(c2, w2, 2))
        s1 = await legacy_sync(c1, w1, 2, ((w1, a1), (w2, a2)))
        s2 = await asyncio.wait_for(follower, 5)
        assert s1.error_code == 0 and s2.error_code == 0
        assert list(decode_assignment(s1.assignment).items) == sorted(ALL_A)
        assert list(decode_assignment(s2.assignment).items) == []
        return w1, w2, 2


def test_legacy_workers_form_a_classic_group_then_a_new_worker_converts_it() -> None:
    async def scenario(port: int) -> None:
        w1, w2, _ = await classic_group_of_two(port)
        [listed] = await describe(HOST, port)
        assert listed["group_type"] == "classic" and listed["state"] == "Stable"
        assert sorted(x["member_id"] for x in listed["members"]) == sorted([w1, w2])
        async with connection(port, "new-1") as conn:
            joined = await new_join(conn, "http://n1:8083")
            assert joined.error_code == 0, joined
            [group] = await connect_describe(conn, G)
            assert group.group_type == "connect"
            protocols_by_member = {x.member_id: x.protocol for x in group.members}
            assert set(protocols_by_member) == {w1, w2, joined.member_id}
            assert protocols_by_member[joined.member_id] != protocols_by_member[w1]
        [described] = await describe(HOST, port, G)
        assert described["group_type"] == "connect"
        assert len(described["members"]) == 3

    with running() as srv:
        run(scenario(srv.port))


def test_responses_leave_a_connection_in_request_order() -> None:
    """A parked JoinGroup holds back the answers to requests pipelined after it on the same connection."""

    async def scenario(port: int) -> None:
        async with connection(port, "legacy-1") as c1:
            first = await legacy_join(c1, "", "http://w1:8083")
            w1 = first.member_id
            j1 = await legacy_join(c1, w1, "http://w1:8083")
            assignment = encode_assignment(Assignment.build(0, w1, "http://w1:8083", VIEW.offset, [], []), 2)
            assert (await legacy_sync(c1, w1, j1.generation_id, ((w1, assignment),))).error_code == 0

            reader, writer = await asyncio.open_connection(HOST, port)
            try:
                writer.write(frame(join_message("", protocols("http://w2:8083")), JOIN_V, 1))
                (size,) = SIZE.unpack(await reader.readexactly(4))
                w2 = wm.join_response_from_wire(
                    decode_response(11, JOIN_V, await reader.readexactly(size), framed=False)
                ).member_id
                pipeline = [
                    frame(join_message(w2, protocols("http://w2:8083")), JOIN_V, 10),  # parks
                    frame(m.ApiVersionsRequest(), 3, 11),
                    frame(m.MetadataRequest(topics=[], allow_auto_topic_creation=False), 9, 12),
                    frame(m.FindCoordinatorRequest(key=G, key_type=0), 3, 13),
                    frame(m.ApiVersionsRequest(), 0, 14),
                ]
                writer.write(b"".join(pipeline))
                await writer.drain()
                first = asyncio.ensure_future(reader.readexactly(4))
                await asyncio.sleep(0.3)
                assert not first.done()  # nothing overtakes the parked JoinGroup
                # w1 rejoins: the barrier completes and everything comes out, in order.
                assert (await legacy_join(c1, w1, "http://w1:8083")).error_code == 0
                order = []
                for i, _ in enumerate(pipeline):
                    (size,) = SIZE.unpack(await (first if i == 0 else reader.readexactly(4)))
                    payload = await reader.readexactly(size)
                    order.append(SIZE.unpack_from(payload, 0)[0])
                assert order == [10, 11, 12, 13, 14]
            finally:
                writer.close()
                await writer.wait_closed()

    with running() as srv:
        run(scenario(srv.port))


# ------------------------------------------------------------------------------------------ faults


@pytest.fixture
def group_server() -> Iterator[Running]:
    """A server whose group has one new-protocol member; faults must leave it untouched."""
    coordinator = CoordinatorConfig(classic_initial_rebalance_delay_ms=0, session_timeout_ms=600_000)
    with running(max_frame_bytes=1 << 20, coordinator=coordinator) as srv:

        async def join() -> None:
            async with connection(srv.port) as conn:
                assert (await new_join(conn)).error_code == 0

        run(join())
        yield srv


def _closed_after(port: int, data: bytes) -> None:
    with raw_socket(port) as sock:
        sock.sendall(data)
        assert_closed(sock)


def test_oversized_frame_closes_the_connection_without_reading_the_body(group_server: Running) -> None:
    before = group_server.snapshot()
    with raw_socket(group_server.port) as sock:
        sock.sendall(SIZE.pack((1 << 20) + 1))  # only the size: the server must not wait for the body
        assert_closed(sock)
    with raw_socket(group_server.port) as sock:
        sock.sendall(SIZE.pack(0x7FFFFFFF) + b"\x00" * 64)
        assert_closed(sock)
    assert api_versions_ok(group_server.port)
    assert group_server.snapshot() == before


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(SIZE.pack(-1), id="negative-size"),
        pytest.param(SIZE.pack(-(1 << 31)) + b"abc", id="min-int-size"),
        pytest.param(SIZE.pack(3) + b"\x00\x12\x00", id="shorter-than-a-header"),
        pytest.param(SIZE.pack(0), id="empty-frame"),
        pytest.param(SIZE.pack(12) + PEEK.pack(18, 0, 7) + b"\x00\x09ab", id="truncated-client-id"),
        pytest.param(hand_frame(4242, 0, 9), id="unknown-api-key"),
        pytest.param(hand_frame(-1, 0, 9), id="negative-api-key"),
        pytest.param(hand_frame(11, 10, 9, b"\x00" * 40), id="join-group-v10"),
        pytest.param(hand_frame(11, -1, 9), id="join-group-v-1"),
        pytest.param(hand_frame(1000, 1, 9, b"\x00" * 20), id="connect-heartbeat-v1"),
        pytest.param(hand_frame(3, 0, 9, SIZE.pack(0x7FFFFFFF)), id="huge-metadata-topic-count"),
        pytest.param(hand_frame(15, 0, 9, SIZE.pack(0x7FFFFFFF) + b"\x00\x01g"), id="huge-describe-count"),
        pytest.param(hand_frame(18, 3, 9, b"\x00\x01"), id="apiversions-v3-truncated-body"),
        pytest.param(SIZE.pack(40) + PEEK.pack(18, 0, 9), id="header-then-eof"),
    ],
)
def test_malformed_frames_close_the_connection_and_change_nothing(group_server: Running, data: bytes) -> None:
    before = group_server.snapshot()
    with raw_socket(group_server.port) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # frames that promise more bytes than they carry end here
        assert_closed(sock)
    assert api_versions_ok(group_server.port)
    assert group_server.snapshot() == before


def test_huge_array_count_in_a_join_group_body_closes_the_connection(group_server: Running) -> None:
    before = group_server.snapshot()
    valid = frame(join_message("", protocols("http://w9:8083")), 5, 5)
    # JoinGroup v5 ends with the protocols array: claim 2^31-1 entries, then only part of the first.
    at = valid.index(SIZE.pack(3) + b"\x00\x09sessioned")
    body = valid[4:at] + SIZE.pack(0x7FFFFFFF) + valid[at + 4 : at + 40]
    _closed_after(group_server.port, SIZE.pack(len(body)) + body)
    # The same at a flexible version (a compact array: the length + 1 as an unsigned varint).
    flexible = frame(join_message("", protocols("http://w9:8083")), 7, 6)
    at = flexible.index(b"\x04\x0asessioned")
    body = flexible[4:at] + b"\xff\xff\xff\xff\x07" + flexible[at + 1 : at + 30]
    _closed_after(group_server.port, SIZE.pack(len(body)) + body)
    assert api_versions_ok(group_server.port)
    assert group_server.snapshot() == before


def test_join_group_with_garbage_connect_metadata_is_inconsistent_group_protocol(
    group_server: Running,
) -> None:
    before = group_server.snapshot()

    async def scenario(port: int) -> None:
        async with connection(port) as conn:
            for protos in (
                (("sessioned", b"\xde\xad\xbe\xef"),),
                (("sessioned", b""),),
                (("compatible", b"\x00\x01\x00\xff"),),
                (("no-such-protocol", encode_subscription(Subscription("http://x", 1), 0)),),
            ):
                for member in ("", "legacy-garbage"):
                    r = wm.join_response_from_wire(await conn.request(join_message(member, protos), JOIN_V))
                    assert r.error_code == INCONSISTENT, (protos, member, r)

    run(scenario(group_server.port))
    assert group_server.snapshot() == before


def test_connect_heartbeat_with_a_negative_task_id_is_invalid_request(group_server: Running) -> None:
    before = group_server.snapshot()

    async def scenario(port: int) -> None:
        async with connection(port) as conn:
            [group] = await connect_describe(conn, G)
            [member] = group.members
            msg = wm.heartbeat_to_wire(napi.HeartbeatRequest(G, member.member_id, member.member_epoch))
            msg.connectors_and_tasks = m.WireConnectorsAndTasks([], [m.WireConnectorTasks("A", [0, -3])])
            r = wm.heartbeat_response_from_wire(await conn.request(msg, 0))
            assert r.error_code == INVALID_REQUEST
            # A joining one too, and with a null connector name.
            msg = wm.heartbeat_to_wire(
                napi.HeartbeatRequest(G, "", 0, rebalance_timeout_ms=1000, url="http://x", owned=frozenset())
            )
            msg.connectors_and_tasks = m.WireConnectorsAndTasks([None], [])
            r = wm.heartbeat_response_from_wire(await conn.request(msg, 0))
            assert r.error_code == INVALID_REQUEST

    run(scenario(group_server.port))
    assert group_server.snapshot() == before


def test_client_disconnecting_with_a_parked_join_group_leaves_the_server_fine() -> None:
    async def scenario(srv: Running) -> None:
        port = srv.port
        w1, _w2, generation = await classic_group_of_two(port)
        # A third worker's JoinGroup parks (the group waits for w1 and w2 to rejoin); then it hangs up.
        reader, writer = await asyncio.open_connection(HOST, port)
        writer.write(frame(join_message("", protocols("http://w3:8083")), JOIN_V, 1))
        (size,) = SIZE.unpack(await reader.readexactly(4))
        w3 = wm.join_response_from_wire(
            decode_response(11, JOIN_V, await reader.readexactly(size), framed=False)
        ).member_id
        writer.write(frame(join_message(w3, protocols("http://w3:8083")), JOIN_V, 2))
        writer.write(SIZE.pack(100) + b"\x00\x0b")  # and the start of one more request
        await writer.drain()
        # Hang up only once the server holds the parked JoinGroup (the next frame is right behind it).
        wait_until(lambda: srv.on_loop(lambda: any(c.pending for c in srv.server.open_connections)))
        writer.close()
        await writer.wait_closed()
        # Everyone else carries on.
        async with connection(port) as conn:
            assert (await conn.request(m.ApiVersionsRequest(), 3)).error_code == 0
            assert await legacy_heartbeat(conn, w1, generation) == REBALANCE_IN_PROGRESS

    with running() as srv:
        run(scenario(srv))
        wait_until(lambda: srv.connections() == 0)
    # ... and ``stop`` above returned although the parked JoinGroup was never answered.


GARBAGE_BASES = [
    frame(m.ApiVersionsRequest(client_software_name="fuzz", client_software_version="1"), 3, 100),
    frame(m.ApiVersionsRequest(), 0, 101),
    frame(
        m.MetadataRequest(
            topics=[m.MetadataRequest.MetadataRequestTopic(name="t", topic_id=None)],
            allow_auto_topic_creation=False,
        ),
        12,
        102,
    ),
    frame(m.FindCoordinatorRequest(key_type=0, coordinator_keys=[G]), 4, 103),
    frame(m.FindCoordinatorRequest(key=G, key_type=0), 1, 104),
    frame(join_message("", (("sessioned", b"\x00\x02\xff"),)), 5, 105),
    frame(join_message("", (("sessioned", b"\x00\x02\xff"),)), 9, 106),
    frame(wm.heartbeat_to_wire(napi.HeartbeatRequest(G, "nobody", 3)), 0, 107),
    frame(wm.classic_heartbeat_to_wire(capi.HeartbeatRequest(G, "nobody", 3), 4), 4, 108),
    frame(wm.describe_to_wire([G]), 0, 109),
    frame(wm.list_groups_to_wire(5), 5, 110),
    frame(m.DescribeGroupsRequest(groups=[G], include_authorized_operations=False), 5, 111),
    frame(wm.prepare_to_wire(napi.PrepareAssignmentRequest(G, "nobody", 3)), 0, 112),
]


@st.composite
def garbage(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["random", "framed-random", "header-random-body", "mutated"]))
    if kind == "random":
        return draw(st.binary(max_size=80))
    if kind == "framed-random":
        payload = draw(st.binary(max_size=200))
        return SIZE.pack(len(payload)) + payload
    if kind == "header-random-body":
        key = draw(st.sampled_from([int(k) for k in m.ApiKey] + [0, 17, 999, 1004, 32767]))
        version = draw(st.integers(-2, 15))
        return hand_frame(key, version, draw(st.integers(0, 1 << 30)), draw(st.binary(max_size=120)))
    data = bytearray(draw(st.sampled_from(GARBAGE_BASES)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "int32", "truncate", "insert", "delete"]))
        at = draw(st.integers(4, max(4, len(data) - 1)))
        if op == "flip" and at < len(data):
            data[at] ^= draw(st.integers(1, 255))
        elif op == "set" and at < len(data):
            data[at] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif op == "int32":
            data[at : at + 4] = SIZE.pack(draw(st.sampled_from([-2, -1, 0x7FFFFFFF, 1 << 24, 65535])))
        elif op == "truncate":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 8))]
    if draw(st.booleans()):
        data[0:4] = SIZE.pack(len(data) - 4)  # keep the frame size right (the usual case)
    return bytes(data)


def complete_frames(data: bytes, limit: int) -> tuple[list[bytes], bool]:
    """The complete, in-limit frames at the start of ``data``; and whether they are all of it."""
    out, at = [], 0
    while at + 4 <= len(data):
        (size,) = SIZE.unpack_from(data, at)
        if size < 0 or size > limit or at + 4 + size > len(data):
            return out, False
        out.append(data[at + 4 : at + 4 + size])
        at += 4 + size
    return out, at == len(data)


MUTATING_APIS = {11, 12, 13, 14, 1000, 1001, 1002}


def test_garbage_and_mutated_frames_get_answers_or_a_close_and_never_hurt_the_group(
    group_server: Running,
) -> None:
    srv = group_server

    def group_state() -> Any:
        snapshot = srv.snapshot()
        return snapshot["views"], snapshot["groups"][G]

    # Mutations may still make valid requests for other groups (which then exist, as in Kafka);
    # the group that is there must not change unless a request for it was accepted.
    state = {"before": group_state(), "accepted": False}

    @settings(
        max_examples=100,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(data=garbage())
    def check(data: bytes) -> None:
        frames, exact = complete_frames(data, 1 << 20)
        with raw_socket(srv.port) as sock:
            sock.sendall(data)
            if not exact:
                sock.shutdown(socket.SHUT_WR)
            answers = []
            while len(answers) < len(frames) or not exact:
                payload = read_frame(sock)
                if payload is None:
                    break
                answers.append(payload)
        assert len(answers) <= len(frames)
        for request, answer in zip(frames, answers, strict=False):
            key, version, correlation = PEEK.unpack_from(request, 0)
            response = decode_response(key, version, answer, framed=False)  # well-formed
            assert response._header.correlation_id == correlation
            if key in MUTATING_APIS and getattr(response, "error_code", 0) == 0 and G.encode() in request:
                state["accepted"] = True
        assert api_versions_ok(srv.port)
        if not state["accepted"]:
            assert group_state() == state["before"]

    check()
    assert state["accepted"] or group_state() == state["before"]


# ------------------------------------------------------------------------------------------ loading


class BlockingStore(MemoryRecordStore):
    """A store whose ``load`` waits for the test to release it."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def load(self) -> list[Any]:
        assert self.release.wait(10)
        return super().load()


def test_group_apis_answer_load_in_progress_until_the_records_are_replayed() -> None:
    store = BlockingStore()

    async def while_loading(port: int) -> None:
        async with connection(port) as conn:
            assert (await conn.request(m.ApiVersionsRequest(), 3)).error_code == 0
            r = await conn.request(m.FindCoordinatorRequest(key_type=0, coordinator_keys=[G]), 4)
            assert r.coordinators[0].error_code == 0
            assert (await new_join(conn)).error_code == LOADING
            r = wm.join_response_from_wire(
                await conn.request(join_message("", protocols("http://w")), JOIN_V)
            )
            assert r.error_code == LOADING
            assert await legacy_heartbeat(conn, "m", 1) == LOADING
            r = await legacy_sync(conn, "m", 1)
            assert r.error_code == LOADING
            leave = await conn.request(
                wm.leave_to_wire(capi.LeaveGroupRequest(G, (capi.LeavingMember("m"),)), 5), 5
            )
            assert leave.error_code == LOADING
            prep = await conn.request(wm.prepare_to_wire(napi.PrepareAssignmentRequest(G, "m", 1)), 0)
            assert prep.error_code == LOADING
            [described] = await connect_describe(conn, G)
            assert described.error_code == LOADING
            listed = await conn.request(wm.list_groups_to_wire(5), 5)
            assert listed.error_code == LOADING
            groups = await conn.request(
                m.DescribeGroupsRequest(groups=[G], include_authorized_operations=False), 5
            )
            assert [g.error_code for g in groups.groups] == [LOADING]

    async def after(port: int) -> None:
        async with connection(port) as conn:
            assert (await new_join(conn)).error_code == 0

    with running(store, wait=False) as srv:
        run(while_loading(srv.port))
        assert srv.snapshot()["groups"] == {}
        store.release.set()
        srv.wait_loaded()
        run(after(srv.port))


# ------------------------------------------------------------------------------------------ durability


def test_member_survives_a_restart_on_the_same_state_dir(tmp_path: Path) -> None:
    async def join(port: int) -> napi.HeartbeatResponse:
        async with connection(port) as conn:
            joined = await new_join(conn)
            assert joined.error_code == 0 and joined.assignment is not None
            beat = await new_heartbeat(
                conn, napi.HeartbeatRequest(G, joined.member_id, joined.member_epoch, owned=ALL_A)
            )
            assert beat.error_code == 0
            return joined

    with running(FileRecordStore.open(tmp_path)) as srv:
        joined = run(join(srv.port))

    async def after_restart(port: int) -> None:
        async with connection(port) as conn:
            [group] = await connect_describe(conn, G)
            assert group.error_code == 0
            [member] = group.members
            assert (member.member_id, member.member_epoch) == (joined.member_id, joined.member_epoch)
            assert member.current == ALL_A and member.target == ALL_A
            beat = await new_heartbeat(conn, napi.HeartbeatRequest(G, joined.member_id, joined.member_epoch))
            assert (beat.error_code, beat.member_epoch) == (0, joined.member_epoch)

    with running(FileRecordStore.open(tmp_path)) as srv:
        run(after_restart(srv.port))


# ------------------------------------------------------------------------------------------ limits


def test_connection_limit_closes_connections_beyond_it() -> None:
    with running(max_connections=2) as srv, raw_socket(srv.port) as a, raw_socket(srv.port) as b:
        wait_until(lambda: srv.connections() == 2)
        with raw_socket(srv.port) as c:
            assert_closed(c)
        for sock, correlation in ((a, 1), (b, 2)):
            sock.sendall(frame(m.ApiVersionsRequest(), 0, correlation))
            payload = read_frame(sock)
            assert payload is not None and SIZE.unpack_from(payload, 0)[0] == correlation
        a.close()
        wait_until(lambda: srv.connections() == 1)
        assert api_versions_ok(srv.port)  # a slot is free again


def test_idle_connections_are_closed() -> None:
    with running(idle_timeout_ms=200) as srv:
        with raw_socket(srv.port) as sock:
            sock.sendall(frame(m.ApiVersionsRequest(), 0, 1))
            assert read_frame(sock) is not None
            started = time.monotonic()
            assert_closed(sock)
            assert 0.1 < time.monotonic() - started < 3

        async def idle_client(port: int) -> None:
            async with connection(port) as conn:
                await asyncio.sleep(0.5)
                with pytest.raises(ClientError):
                    await conn.request(m.ApiVersionsRequest(), 0, timeout=2)

        run(idle_client(srv.port))
        wait_until(lambda: srv.connections() == 0)


def test_a_member_ahead_of_the_config_view_makes_the_view_source_read_at_once() -> None:
    """A member reporting a config offset beyond its group's view means the config topic holds
    records the bridge has not read (its classic members get CONFIG_MISMATCH meanwhile): the
    server asks the view source to poll now (drill (f), docs/live-drills.md)."""
    refreshes: list[int] = []

    async def scenario(port: int) -> None:
        async with connection(port, "worker-1") as conn:
            joined = await new_join(conn)  # at the view's offset: nothing to catch up
            assert joined.error_code == 0
            assert refreshes == []
            ahead = napi.HeartbeatRequest(
                G, joined.member_id, joined.member_epoch, config_offset=VIEW.offset + 2
            )
            answer = await new_heartbeat(conn, ahead)
            assert answer.error_code == 0
            assert refreshes == [1]
            # Meanwhile the member is told, on the wire, to start nothing (Assignment.Error).
            assert answer.assignment is not None and answer.assignment.error == CONFIG_MISMATCH
            assert answer.assignment.config_offset == VIEW.offset + 2

    with running() as srv:
        srv.on_loop(lambda: setattr(srv.server, "config_refresh", lambda: refreshes.append(1)))
        run(scenario(srv.port))
