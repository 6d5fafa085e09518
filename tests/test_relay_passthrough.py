"""Requests relayed by their header alone (``Relay.forward`` with ``started``, ``DirectAnswers``).

The bridge in-process (``test_server.Running``) in front of a scripted upstream broker on its own
event loop thread: it answers the discovery (ApiVersions, Metadata) properly and Produce/Fetch
with frames the test controls (when, and in how many pieces), which no real broker allows. The
relay must pass a large answer on while it still arrives, keep request order between answers
its upstream link writes and answers the bridge queues (its own), and close the client when the
link fails in the middle of an answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from kafka.protocol.metadata import ApiVersionsResponse, MetadataResponse

from connect_bridge.bridge.metrics import Metrics
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.requests import encode_request, encode_response_frame, request_header_fields
from tansu import free_port
from test_server import Running, read_frame, recv_exactly

HOST = "127.0.0.1"
NODE = 1
SIZE = struct.Struct(">i")
PRODUCE, FETCH, API_VERSIONS, METADATA = 0, 1, 18, 3
LARGE = 1 << 20
"""A Fetch answer as large as ConsumerPerformance's (max.partition.fetch.bytes)."""


def answer(correlation: int, body_size: int) -> bytes:
    """A framed answer whose body after the correlation id is a pattern the client can check."""
    body = SIZE.pack(correlation) + bytes((correlation + i) % 251 for i in range(body_size))
    return SIZE.pack(len(body)) + body


@dataclass
class Scripted:
    """The upstream broker: discovery answered, relayed requests recorded and answered by script."""

    port: int = 0
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    requests: list[tuple[int, int]] = field(default_factory=list)
    """(api key, correlation id) of every relayed request received, in order."""
    held: asyncio.Event | None = None
    """While set to an unset event, answers wait for it (a Fetch answer: after its first part)."""
    cut_after: int | None = None
    """Close the connection after this many bytes of the next Fetch answer."""

    def start(self) -> None:
        self.thread = threading.Thread(target=self.loop.run_forever, name="upstream", daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, HOST, 0), self.loop
        ).result(5)
        self.port = self.server.sockets[0].getsockname()[1]

    def hold(self) -> None:
        self.held = asyncio.run_coroutine_threadsafe(self._event(), self.loop).result(5)

    async def _event(self) -> asyncio.Event:
        return asyncio.Event()

    def release(self) -> None:
        held = self.held
        assert held is not None
        self.loop.call_soon_threadsafe(held.set)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()

    async def _close(self) -> None:
        self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = SIZE.unpack(await reader.readexactly(4))
                payload = await reader.readexactly(size)
                api_key, version, correlation = request_header_fields(payload)
                if api_key == API_VERSIONS:
                    writer.write(self._api_versions(correlation))
                elif api_key == METADATA:
                    writer.write(self._metadata(correlation, version))
                else:
                    self.requests.append((api_key, correlation))
                    frame = answer(correlation, LARGE if api_key == FETCH else 40)
                    if api_key == FETCH and self.cut_after is not None:
                        writer.write(frame[: self.cut_after])
                        await writer.drain()
                        writer.transport.abort()
                        return
                    first = len(frame) // 8 if api_key == FETCH else 0
                    writer.write(frame[:first])
                    await writer.drain()
                    if self.held is not None:
                        await self.held.wait()
                    writer.write(frame[first:])
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    @staticmethod
    def _api_versions(correlation: int) -> bytes:
        keys = [
            ApiVersionsResponse.ApiVersion(api_key=key, min_version=0, max_version=top)
            for key, top in [(PRODUCE, 9), (FETCH, 12), (METADATA, 12), (API_VERSIONS, 3)]
        ]
        return encode_response_frame(
            API_VERSIONS, 0, correlation, ApiVersionsResponse(error_code=0, api_keys=keys)
        )

    def _metadata(self, correlation: int, version: int) -> bytes:
        broker = MetadataResponse.MetadataResponseBroker(node_id=NODE, host=HOST, port=self.port, rack=None)
        response = MetadataResponse(
            brokers=[broker], controller_id=NODE, topics=[], cluster_id="scripted", throttle_time_ms=0
        )
        return encode_response_frame(METADATA, version, correlation, response)


@contextlib.contextmanager
def bridge_in_front(metrics: Metrics | None = None) -> Iterator[tuple[Scripted, int, Running]]:
    """The scripted upstream, the bridge's listener for it and the bridge."""
    upstream = Scripted()
    upstream.start()
    listener = free_port()
    srv = Running(upstream=[(HOST, upstream.port)], proxy_base_port=listener - NODE, metrics=metrics)
    try:
        srv.wait_loaded()
        yield upstream, listener, srv
    finally:
        srv.stop()
        upstream.stop()


@pytest.fixture
def relayed() -> Iterator[tuple[Scripted, int]]:
    """The scripted upstream and the bridge's listener for it."""
    with bridge_in_front() as (upstream, listener, _):
        yield upstream, listener


def produce(correlation: int) -> bytes:
    """A Produce v3 request (acks=1): relayed as is, so its body need not make sense upstream."""
    header = struct.pack(">hhih", PRODUCE, 3, correlation, 3) + b"raw"
    return SIZE.pack(len(header) + 10) + header + struct.pack(">hhi", -1, 1, 1000) + b"\x00\x00"


def fetch(correlation: int) -> bytes:
    header = struct.pack(">hhih", FETCH, 4, correlation, 3) + b"raw"
    return SIZE.pack(len(header) + 4) + header + b"\x00" * 4


def api_versions(correlation: int) -> bytes:
    return encode_request(m.ApiVersionsRequest(), 0, correlation, "raw")


def connect(listener: int) -> socket.socket:
    return socket.create_connection((HOST, listener), timeout=10)


def test_a_large_answer_is_passed_on_while_it_still_arrives(relayed: tuple[Scripted, int]) -> None:
    """The client reads the start of a 1 MiB Fetch answer while the broker has sent only an eighth
    of it: the relay does not wait for a whole frame (store and forward doubled the time a consumer
    waits for each fetch)."""
    upstream, listener = relayed
    upstream.hold()
    with connect(listener) as sock:
        sock.sendall(fetch(7))
        sock.settimeout(5)
        head = recv_exactly(sock, 8)  # size prefix and correlation id, sent before the hold
        assert head is not None and SIZE.unpack_from(head, 4)[0] == 7
        upstream.release()
        rest = recv_exactly(sock, SIZE.unpack_from(head, 0)[0] - 4)
        assert head + (rest or b"") == answer(7, LARGE)


def test_answers_leave_in_request_order_across_relayed_and_local(relayed: tuple[Scripted, int]) -> None:
    """Pipelined Produce, Fetch, ApiVersions (the bridge's own answer), Produce: the relayed ones
    are held upstream, so the local answer is ready first; the client still reads them in order."""
    upstream, listener = relayed
    upstream.hold()
    with connect(listener) as sock:
        sock.sendall(produce(1) + fetch(2) + api_versions(3) + produce(4))
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(1)  # nothing may overtake the held Produce answer
        upstream.release()
        sock.settimeout(10)
        got = [read_frame(sock) for _ in range(4)]
    assert [SIZE.unpack_from(f or b"", 0)[0] for f in got] == [1, 2, 3, 4]
    assert SIZE.pack(len(got[1] or b"")) + (got[1] or b"") == answer(2, LARGE)
    assert upstream.requests == [(PRODUCE, 1), (FETCH, 2), (PRODUCE, 4)]


def test_a_link_failing_in_the_middle_of_an_answer_closes_the_client(relayed: tuple[Scripted, int]) -> None:
    """Part of a large answer may already be the client's: it gets EOF, never a spliced frame."""
    upstream, listener = relayed
    upstream.cut_after = LARGE // 2
    with connect(listener) as sock:
        sock.sendall(fetch(9))
        sock.settimeout(10)
        received = b""
        while chunk := sock.recv(1 << 16):
            received += chunk
    assert len(received) < len(answer(9, LARGE))
    assert answer(9, LARGE).startswith(received)


def test_answers_the_link_writes_are_counted_as_relayed_answers() -> None:
    """The answers a link writes itself never pass the server's answer path, yet the request
    metrics count them as every relayed answer is counted (``Relayed``, error NONE: not decoded);
    the bridge's own answer on the same connection keeps its label."""
    metrics = Metrics()
    with bridge_in_front(metrics) as (_, listener, srv), connect(listener) as sock:
        sock.sendall(produce(1) + fetch(2) + api_versions(3) + produce(4))
        sock.settimeout(10)
        got = [read_frame(sock) for _ in range(4)]
        text = srv.on_loop(metrics.render).decode()
    assert [SIZE.unpack_from(f or b"", 0)[0] for f in got] == [1, 2, 3, 4]
    line = re.compile(r'^connect_bridge_requests_total\{api="([^"]+)",error="([^"]+)"\} (\S+)$', re.M)
    counts = {(m.group(1), m.group(2)): float(m.group(3)) for m in line.finditer(text)}
    assert counts[("Relayed", "NONE")] == 3
    assert counts[("ApiVersions", "NONE")] == 1
