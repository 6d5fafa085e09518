"""The steady lane: a steady heartbeat that arrives as one whole frame while the server waits for
the next request is answered from the connection's ``data_received`` (``BridgeServer._steady_lane``),
without the stream reader. Its answers must be the bytes the read loop gives the same frame, in
request order, and a lane answer that must wait for records mutes the connection as the read loop
would."""

from __future__ import annotations

import socket
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect_bridge.codecs.messages import ApiKey
from connect_bridge.codecs.requests import decode_response, encode_request
from connect_bridge.state import api as napi
from connect_bridge.state.classic import api as capi
from connect_bridge.wire import maps as wm
from test_server import HEARTBEAT_V, G, Running, classic_group_of_two, raw_socket, read_frame, run, running

CONNECT_HEARTBEAT = int(ApiKey.CONNECT_GROUP_HEARTBEAT)
CLASSIC_HEARTBEAT = int(ApiKey.HEARTBEAT)


def exchange(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    payload = read_frame(sock)
    assert payload is not None
    return payload


def connect_member(sock: socket.socket) -> tuple[napi.HeartbeatRequest, napi.HeartbeatResponse]:
    """Join a ``connect`` group (no connectors: nothing to acknowledge) over ``sock``; its steady
    heartbeat and the answer it gets."""
    join = napi.HeartbeatRequest(
        G, "", 0, rebalance_timeout_ms=60_000, url="http://n1:8083", owned=frozenset()
    )
    payload = exchange(sock, encode_request(wm.heartbeat_to_wire(join), 0, 1, "lane"))
    joined = wm.heartbeat_response_from_wire(decode_response(CONNECT_HEARTBEAT, 0, payload, framed=False))
    assert joined.error_code == 0 and joined.member_epoch > 0, joined
    steady = napi.HeartbeatRequest(G, joined.member_id, joined.member_epoch)
    payload = exchange(sock, encode_request(wm.heartbeat_to_wire(steady), 0, 2, "lane"))
    answer = wm.heartbeat_response_from_wire(decode_response(CONNECT_HEARTBEAT, 0, payload, framed=False))
    assert answer.error_code == 0 and answer.assignment is None, answer
    return steady, answer


def received(srv: Running) -> list[int]:
    """Bytes each open connection's stream reader was given (the lane's are not)."""
    return srv.on_loop(lambda: sorted(c.slot.received for c in srv.server.open_connections if c.slot))


def test_steady_heartbeats_of_a_waiting_client_never_reach_the_stream_reader() -> None:
    with running(view=None) as srv, raw_socket(srv.port) as sock:
        steady, _ = connect_member(sock)
        before = received(srv)
        for correlation in range(10, 60):
            payload = exchange(sock, encode_request(wm.heartbeat_to_wire(steady), 0, correlation, "lane"))
            answer = decode_response(CONNECT_HEARTBEAT, 0, payload, framed=False)
            assert answer._header.correlation_id == correlation and answer.error_code == 0
        assert received(srv) == before


def split_send(sock: socket.socket, data: bytes, cut: int) -> bytes:
    """Send ``data`` in two pieces (the server sees a partial frame first), then read the answer."""
    sock.sendall(data[:cut])
    time.sleep(0.005)
    return exchange(sock, data[cut:])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    correlations=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=4),
    cut=st.integers(1, 40),
    client_id=st.sampled_from(["lane", "", "another-client"]),
)
def test_lane_answers_are_the_bytes_the_read_loop_gives(
    correlations: list[int], cut: int, client_id: str
) -> None:
    """The same steady frame, whole (the lane) and in two pieces (the read loop): the same answer
    bytes, for the steady answer and for a heartbeat the fast path answers with an error (an epoch
    the member is not at), and for any correlation id."""
    with running(view=None) as srv, raw_socket(srv.port) as sock:
        steady, _ = connect_member(sock)
        fenced = napi.HeartbeatRequest(G, steady.member_id, steady.member_epoch + 5)
        for request in (steady, fenced, steady):
            for correlation in correlations:
                data = encode_request(wm.heartbeat_to_wire(request), 0, correlation, client_id)
                whole = exchange(sock, data)
                assert split_send(sock, data, cut) == whole
                assert decode_response(CONNECT_HEARTBEAT, 0, whole, framed=False)._header.correlation_id == (
                    correlation
                )


def test_classic_heartbeats_through_the_lane_match_the_read_loop() -> None:
    with running() as srv:
        leader, follower, generation = run(classic_group_of_two(srv.port))
        with raw_socket(srv.port) as sock:
            for version in range(HEARTBEAT_V + 1):
                for member, gen in ((leader, generation), (follower, generation), (leader, generation + 3)):
                    msg = wm.classic_heartbeat_to_wire(capi.HeartbeatRequest(G, member, gen), version)
                    data = encode_request(msg, version, 7 + version, "worker")
                    whole = exchange(sock, data)
                    assert split_send(sock, data, 6) == whole
                    answer = decode_response(CLASSIC_HEARTBEAT, version, whole, framed=False)
                    assert answer.error_code == (0 if gen == generation else 22), (version, member)


def test_pipelined_and_partial_frames_are_answered_in_request_order() -> None:
    with running(view=None) as srv, raw_socket(srv.port) as sock:
        steady, _ = connect_member(sock)
        frames = [encode_request(wm.heartbeat_to_wire(steady), 0, c, "lane") for c in range(100, 106)]
        sock.sendall(b"".join(frames[:3]))  # three in one chunk: not the lane's
        sock.sendall(frames[3][:5])
        time.sleep(0.005)
        sock.sendall(frames[3][5:] + frames[4])  # the rest of one and a whole one, together
        sock.sendall(frames[5])
        for correlation in range(100, 106):
            payload = read_frame(sock)
            assert payload is not None
            answer = decode_response(CONNECT_HEARTBEAT, 0, payload, framed=False)
            assert (answer._header.correlation_id, answer.error_code) == (correlation, 0)


def test_a_lane_answer_waiting_for_records_mutes_the_connection_until_it_is_out() -> None:
    """A heartbeat under a new client id is answered by the full step, which writes the member's
    new metadata: its answer waits for the record to be durable, and the next request, sent at
    once, is read only after that answer went out (then it takes the lane again)."""
    with running(view=None) as srv, raw_socket(srv.port) as sock:
        steady, _ = connect_member(sock)
        renamed = encode_request(wm.heartbeat_to_wire(steady), 0, 300, "renamed-client")
        again = encode_request(wm.heartbeat_to_wire(steady), 0, 301, "renamed-client")
        sock.sendall(renamed)
        sock.sendall(again)
        for correlation in (300, 301):
            payload = read_frame(sock)
            assert payload is not None
            answer = decode_response(CONNECT_HEARTBEAT, 0, payload, framed=False)
            assert (answer._header.correlation_id, answer.error_code) == (correlation, 0)
        members = srv.on_loop(lambda: srv.server.coordinator.groups[G].members)
        assert members[steady.member_id].metadata.client_id == "renamed-client"
        before = received(srv)
        exchange(sock, encode_request(wm.heartbeat_to_wire(steady), 0, 302, "renamed-client"))
        assert received(srv) == before  # reading resumed, through the lane


def test_a_client_that_stops_reading_is_no_longer_read_and_is_answered_in_order_once_it_reads() -> None:
    """Back-pressure through the lane: answers the socket does not take pause reading (as the
    read loop's drain), and reading resumes once the client has taken them."""
    with running(view=None) as srv:
        client = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # set before connecting
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client.connect(("127.0.0.1", srv.port))
        client.settimeout(5)
        with client:
            steady, _ = connect_member(client)

            def small_buffers() -> None:  # so that a few hundred unread answers fill them
                for conn in srv.server.open_connections:
                    sock = conn.writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)

            srv.on_loop(small_buffers)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
            client.settimeout(0.2)
            sent = 0
            paused_seen = False
            for correlation in range(1000, 30_000):
                data = encode_request(wm.heartbeat_to_wire(steady), 0, correlation, "lane")
                try:
                    client.sendall(data)
                except TimeoutError:
                    # The server stopped reading (the kernel buffers are full): the lane paused it.
                    paused_seen = paused_seen or srv.on_loop(lambda: bool(srv.server._resuming))
                    break
                sent += 1
                time.sleep(0.001)  # one frame per chunk: the lane's case
                if sent % 50 == 0:
                    paused_seen = paused_seen or srv.on_loop(lambda: bool(srv.server._resuming))
            else:
                raise AssertionError("the server kept reading a client that does not read")
            assert paused_seen, "the lane never paused the connection"
            client.settimeout(5)
            for correlation in range(1000, 1000 + sent):
                payload = read_frame(client)
                assert payload is not None
                answer = decode_response(CONNECT_HEARTBEAT, 0, payload, framed=False)
                assert (answer._header.correlation_id, answer.error_code) == (correlation, 0)
            assert srv.on_loop(lambda: not srv.server._resuming)
            # Reading resumed: the next heartbeat is answered.
            exchange(client, encode_request(wm.heartbeat_to_wire(steady), 0, 7, "lane"))
