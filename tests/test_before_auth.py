"""Before authentication a client may hold almost nothing (docs/security.md "Before authentication").

A real ``BridgeServer`` (``test_server.Running``) with SASL terminated, over TLS where the handshake
matters; attackers are raw sockets, some from a second loopback address (127.0.0.2, which Linux
routes to the same interface) so that per-address limits can tell them from the honest client on
127.0.0.1. Each test asserts on what the sockets see (closed or answered), with deadlines several
times what the bridge needs, so a loaded machine slows them down without failing them:

- connections count from accept, before the TLS handshake, and the handshake times out;
- unauthenticated connections may take only part of ``max_connections``, and a bounded number per
  address;
- a frame larger than ``connections.max_unauthenticated_frame_bytes`` closes an unauthenticated
  connection on its size prefix: the shared large-frame budget stays for authenticated workers;
- unauthenticated frames above 64 KiB share a small budget of their own (memory per connection);
- an unauthenticated connection is closed at ``connections.authentication_timeout_ms`` however
  often it sends ApiVersions;
- clients that pipeline and never read do not keep a new client's ApiVersions from being answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from certs import TlsMaterial, tls_material
from connect_bridge.bridge.edge.connection_settings import ConnectionSettings
from connect_bridge.bridge.security.sasl_client import upstream_login
from connect_bridge.bridge.security.sasl_settings import SaslSettings, UpstreamSasl
from connect_bridge.bridge.security.tls import ListenerTls, ReloadingServerContext
from connect_bridge.codecs import messages as m
from connect_bridge.wire.client import KafkaConnection
from polling import wait_until
from test_sasl_terminated import credentials_file
from test_server import HOST, SIZE, frame, read_frame, running

__all__ = ["tls_material"]  # re-exported fixture

USERS = {"alice": "alice-secret"}
ATTACKER = "127.0.0.2"
"""A second loopback address: the attacker's connections come from here, the honest client's from
127.0.0.1 (each loopback address counts as its own address)."""
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def credentials(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return credentials_file(tmp_path_factory.mktemp("before-auth") / "credentials.yaml", USERS)


def sasl(credentials: Path) -> SaslSettings:
    return SaslSettings(mode="terminated", mechanisms=["SCRAM-SHA-256"], credentials_file=credentials)


def client_tls(material: TlsMaterial) -> Any:
    import ssl

    return ssl.create_default_context(cafile=str(material.ca_cert))


def listener_tls(material: TlsMaterial) -> ReloadingServerContext:
    return ReloadingServerContext(ListenerTls(certfile=material.server_cert, keyfile=material.server_key))


def attacker_socket(port: int, source: str = ATTACKER) -> socket.socket:
    return socket.create_connection((HOST, port), timeout=10, source_address=(source, 0))


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """True when the server closes ``sock`` within ``within`` seconds (anything it sends first is
    read and dropped); False when the socket is still open then."""
    sock.settimeout(within)
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if not sock.recv(65536):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return False


def closed_by_server_each(socks: list[socket.socket], within: float) -> list[bool]:
    """:func:`closed_by_server` for each of ``socks``, with one deadline for all: ``within``
    seconds from now (a socket still open waits out the time left, not a ``within`` of its own;
    one looked at after the deadline is read once, for a close that came before it)."""
    deadline = time.monotonic() + within
    return [closed_by_server(sock, max(0.05, deadline - time.monotonic())) for sock in socks]


def honest_client_is_served(port: int, tls: Any = None) -> bool:
    """A client from 127.0.0.1 authenticates (SCRAM) and gets its ApiVersions answered."""

    async def scenario() -> bool:
        login = UpstreamSasl(mechanism="SCRAM-SHA-256", username="alice", password=USERS["alice"])
        conn = await KafkaConnection.connect(
            HOST, port, "honest", ssl=tls, login=upstream_login(login), timeout=10
        )
        try:
            return (await conn.request(m.ApiVersionsRequest(), 0, timeout=10)).error_code == 0
        finally:
            await conn.close()

    return asyncio.run(asyncio.wait_for(scenario(), 30))


@contextlib.contextmanager
def sockets() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    try:
        yield held
    finally:
        for sock in held:
            sock.close()


# ------------------------------------------------------------------------------ TLS handshakes


def test_connections_in_the_tls_handshake_take_slots_and_are_timed_out(
    tls_material: TlsMaterial, credentials: Path
) -> None:
    """40 sockets that never start their handshake, against ``max_connections`` 20: they used to be
    held for asyncio's 60 s and counted against nothing. Now each takes a slot at accept (those
    beyond the unauthenticated share are closed at once) and the rest are closed at
    ``tls_handshake_timeout_ms``; an honest TLS + SASL client is served afterwards."""
    limits = ConnectionSettings(tls_handshake_timeout_ms=4000, max_unauthenticated_per_address=None)
    with (
        running(
            tls=listener_tls(tls_material), sasl=sasl(credentials), max_connections=20, connections=limits
        ) as srv,
        sockets() as silent,
    ):
        silent.extend(attacker_socket(srv.port) for _ in range(40))
        refused = [sock for sock in silent if closed_by_server(sock, within=0.05)]
        held = [sock for sock in silent if sock not in refused]
        assert len(refused) >= 30  # half of max_connections may be in a handshake, no more
        assert all(closed_by_server(sock, within=20) for sock in held)  # the handshake timed out
        assert honest_client_is_served(srv.port, client_tls(tls_material))
        wait_until(lambda: srv.on_loop(lambda: srv.server.slots.total) == 0)


def test_unauthenticated_connections_leave_headroom_for_authenticated_ones(credentials: Path) -> None:
    """With ``max_connections`` 20, connections that have not authenticated may take 10 slots; the
    other 10 stay for authenticated clients however many sockets connect without credentials."""
    limits = ConnectionSettings(max_unauthenticated=10, max_unauthenticated_per_address=None)
    with (
        running(sasl=sasl(credentials), max_connections=20, connections=limits) as srv,
        sockets() as silent,
    ):
        silent.extend(attacker_socket(srv.port) for _ in range(30))
        closed = sum(closed_by_server_each(silent, within=2))
        assert closed >= 20  # only 10 held
        assert srv.on_loop(lambda: srv.server.slots.unauthenticated) <= 10


def test_unauthenticated_connections_per_address_are_limited(credentials: Path) -> None:
    """``max_unauthenticated_per_address``: a 4th socket from one address is closed at once while
    the first 3 have not authenticated; a client from another address is served meanwhile."""
    limits = ConnectionSettings(max_unauthenticated_per_address=3)
    with running(sasl=sasl(credentials), connections=limits) as srv, sockets() as silent:
        silent.extend(attacker_socket(srv.port) for _ in range(3))
        wait_until(lambda: srv.connections() == 3)
        fourth = attacker_socket(srv.port)
        silent.append(fourth)
        assert closed_by_server(fourth, within=5)
        assert not any(closed_by_server(sock, within=0.2) for sock in silent[:3])
        assert honest_client_is_served(srv.port)


# ------------------------------------------------------------------------------ frames before authentication


def test_an_unauthenticated_peer_cannot_reserve_the_large_frame_budget(credentials: Path) -> None:
    """Three size prefixes (100 + 100 + 55 MiB) with no payload used to reserve the shared 256 MiB
    budget until the idle timeout, and an authenticated worker's 2 MiB JoinGroup was then closed.
    Before authentication a frame above ``max_unauthenticated_frame_bytes`` (512 KiB) now closes
    the connection on its size prefix: a 600 KiB prefix too, which the unauthenticated buffering
    budget (16 MiB) alone would hold."""
    with running(sasl=sasl(credentials)) as srv, sockets() as attackers:
        for size in (100 * MiB, 100 * MiB, 55 * MiB, 600 * 1024):
            sock = attacker_socket(srv.port)
            attackers.append(sock)
            sock.sendall(SIZE.pack(size))
        assert all(closed_by_server(sock, within=5) for sock in attackers)
        assert srv.on_loop(lambda: srv.server.frames.buffered) == 0

        async def large_join() -> Any:
            login = UpstreamSasl(mechanism="SCRAM-SHA-256", username="alice", password=USERS["alice"])
            conn = await KafkaConnection.connect(
                HOST, srv.port, "worker", login=upstream_login(login), timeout=10
            )
            protocols = [
                m.JoinGroupRequest.JoinGroupRequestProtocol(name=name, metadata=b"\x00" * (MiB - 100))
                for name in ("a", "b")
            ]
            request = m.JoinGroupRequest(
                group_id="big",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=30_000,
                member_id="",
                group_instance_id=None,
                protocol_type="connect",
                protocols=protocols,
                reason=None,
            )
            try:
                return await conn.request(request, 5, timeout=10)
            finally:
                await conn.close()

        assert asyncio.run(asyncio.wait_for(large_join(), 30)) is not None  # answered, not closed


def test_partial_frames_before_authentication_share_a_small_budget(credentials: Path) -> None:
    """A frame under 1 MiB used to be buffered outside any budget: about 1 MB per unauthenticated
    connection. Before authentication, frames above 64 KiB now share
    ``max_unauthenticated_buffered_bytes``: with 1 MiB of it, two 500 KiB partial frames are held
    and the others are closed on their size prefix."""
    limits = ConnectionSettings(max_unauthenticated_buffered_bytes=MiB)
    with running(sasl=sasl(credentials), connections=limits) as srv, sockets() as attackers:
        for _ in range(5):
            sock = attacker_socket(srv.port)
            attackers.append(sock)
            sock.sendall(SIZE.pack(500 * 1024) + b"\x00" * 1000)
        closed = sum(closed_by_server_each(attackers, within=2))
        assert closed == 3
        assert srv.on_loop(lambda: srv.server.frames.unauthenticated_buffered) <= MiB
        assert honest_client_is_served(srv.port)  # small SASL frames are not held up by it


# ------------------------------------------------------------------------------ the authentication deadline


def test_an_unauthenticated_connection_is_closed_at_the_authentication_deadline(credentials: Path) -> None:
    """A socket sending ApiVersions every 200 ms kept its slot forever (each request reset the idle
    timer); now it is answered until ``authentication_timeout_ms`` and then closed."""
    limits = ConnectionSettings(authentication_timeout_ms=1000)
    with running(sasl=sasl(credentials), connections=limits) as srv, attacker_socket(srv.port) as sock:
        started = time.monotonic()
        sock.settimeout(5)
        answered = 0
        closed = False
        while time.monotonic() - started < 20:
            try:
                sock.sendall(frame(m.ApiVersionsRequest(), 0, answered + 1))
                if read_frame(sock) is None:
                    closed = True
                    break
            except (ConnectionResetError, BrokenPipeError):
                closed = True
                break
            answered += 1
            time.sleep(0.2)
        assert answered >= 1 and closed
        assert honest_client_is_served(srv.port)  # an honest client authenticates well inside it


# ------------------------------------------------------------------------------ pipelining, never reading

FLOOD = textwrap.dedent(
    """
    import socket, sys, time
    port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    request = bytes.fromhex(sys.argv[4])
    burst = request * 200
    socks = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), source_address=("127.0.0.2", 0))
        s.setblocking(False)
        socks.append(s)
    print("connected", flush=True)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for s in socks:
            try:
                s.send(burst)
            except (BlockingIOError, OSError):
                pass
        time.sleep(0.01)
    """
)


def test_clients_that_pipeline_and_never_read_do_not_starve_a_new_client() -> None:
    """30 connections pipelining DescribeGroups without reading their answers (from another process,
    so they do not compete for this one's GIL) held the event loop for seconds at a time: a new
    client's ApiVersions went unanswered for more than 4 s. One request in flight per connection,
    one request per connection per turn of the loop: each probe is answered."""
    describe = m.DescribeGroupsRequest(
        groups=[f"g{i}" for i in range(50)], include_authorized_operations=False
    )
    request = frame(describe, 0, 7)
    with running() as srv:
        flood = subprocess.Popen(
            [sys.executable, "-c", FLOOD, str(srv.port), "30", "12", request.hex()],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert flood.stdout is not None and flood.stdout.readline().strip() == "connected"
            time.sleep(2)  # the flood is in full swing
            for probe in range(3):
                with socket.create_connection((HOST, srv.port), timeout=5) as sock:
                    sock.settimeout(4)
                    sock.sendall(frame(m.ApiVersionsRequest(), 0, 100 + probe))
                    payload = read_frame(sock)
                    assert payload is not None and SIZE.unpack_from(payload, 0)[0] == 100 + probe
                time.sleep(0.5)
        finally:
            flood.kill()
            flood.wait(10)


def test_the_sasl_frame_limit_before_authentication_is_the_setting(credentials: Path) -> None:
    """``connections.max_unauthenticated_frame_bytes`` is the one bound on a frame before
    authentication: raised to 1 MiB, a 600 KiB SaslAuthenticate (past the 512 KiB default) reaches
    the SCRAM server, which answers its server-first message; the SASL gate used to close it
    unanswered on a constant of its own, whatever the setting said."""
    from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

    from connect_bridge.codecs.requests import decode_response, encode_request

    limits = ConnectionSettings(max_unauthenticated_frame_bytes=MiB)
    with running(sasl=sasl(credentials), connections=limits) as srv, attacker_socket(srv.port) as sock:
        sock.settimeout(10)
        sock.sendall(encode_request(SaslHandshakeRequest[1](mechanism="SCRAM-SHA-256"), 1, 1, "raw"))
        handshake = read_frame(sock)
        assert handshake is not None and decode_response(17, 1, handshake, framed=False).error_code == 0
        large = SaslAuthenticateRequest[1](auth_bytes=b"n,,n=alice,r=" + b"x" * (600 * 1024))
        sock.sendall(encode_request(large, 1, 2, "raw"))
        answer = read_frame(sock)
        assert answer is not None, "closed unanswered: the gate's own 512 KiB limit"
        response = decode_response(36, 1, answer, framed=False)
        assert response.error_code == 0 and response.auth_bytes.startswith(b"r=xxx")
