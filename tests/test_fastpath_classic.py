"""The steady-heartbeat path for a Java worker's classic Heartbeat (issue 12.7: its p50 was 3-4.5x a
canned server because every classic heartbeat was decoded, handled and encoded in full)."""

from __future__ import annotations

from connect_bridge.bridge.coordination.fastpath import SteadyHeartbeats
from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime
from connect_bridge.bridge.stores.committer import Committer
from connect_bridge.bridge.stores.store import MemoryRecordStore
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.requests import decode_response, encode_request
from connect_bridge.state.classic import api as capi
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.wire import maps as wm
from test_server import (
    HEARTBEAT_V,
    G,
    classic_group_of_two,
    connection,
    frame,
    raw_socket,
    read_frame,
    run,
    running,
)


def heartbeat_frame(group: str, member: str, generation: int, version: int, correlation: int) -> bytes:
    msg = wm.classic_heartbeat_to_wire(capi.HeartbeatRequest(group, member, generation), version)
    return encode_request(msg, version, correlation, "worker")[4:]  # without the size prefix


def test_a_group_the_bridge_does_not_hold_takes_the_full_path() -> None:
    """In proxy mode the full path relays it upstream: the fast path must never answer it."""
    steady = SteadyHeartbeats(
        CoordinatorRuntime(GroupCoordinator(), Committer(MemoryRecordStore()), lambda: 0)
    )
    assert steady.answer(heartbeat_frame("orders-app", "m-1", 3, 4, 7)) is None


def test_classic_heartbeats_of_a_held_group_are_answered_like_the_full_path() -> None:
    with running() as srv:
        leader, follower, generation = run(classic_group_of_two(srv.port))
        with raw_socket(srv.port) as sock:
            for version in (0, 3, 4):
                for correlation, (member, gen, expected) in enumerate(
                    [
                        (leader, generation, ErrorCode.NONE),
                        (leader, generation, ErrorCode.NONE),  # now from the cache
                        (follower, generation + 7, ErrorCode.ILLEGAL_GENERATION),
                        ("nobody", generation, ErrorCode.UNKNOWN_MEMBER_ID),
                    ]
                ):
                    msg = wm.classic_heartbeat_to_wire(capi.HeartbeatRequest(G, member, gen), version)
                    sock.sendall(frame(msg, version, correlation))
                    payload = read_frame(sock)
                    assert payload is not None
                    answer = decode_response(12, version, payload, framed=False)
                    assert answer._header.correlation_id == correlation
                    assert answer.error_code == int(expected), (version, member)
        cached = srv.on_loop(lambda: list(srv.server.steady.classic_requests.values()))
        assert {r.member_id for r in cached} == {leader}  # unknown members are never cached

        async def still_served(port: int) -> None:
            async with connection(port) as conn:
                req = capi.HeartbeatRequest(G, follower, generation)
                msg = await conn.request(wm.classic_heartbeat_to_wire(req, HEARTBEAT_V), HEARTBEAT_V)
                assert wm.classic_heartbeat_response_from_wire(msg).error_code == 0

        run(still_served(srv.port))
