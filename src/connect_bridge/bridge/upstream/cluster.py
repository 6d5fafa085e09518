"""Forward everything the bridge does not answer itself to the upstream broker that owns it.

The bridge opens one listener per upstream broker on a deterministic port (``base port + node id``),
so the addresses it hands out survive restarts. The brokers are learned from every Metadata,
DescribeCluster and FindCoordinator response the bridge relays, and from a periodic Metadata
request of its own: a broker added while the bridge runs gets its listener then, a broker that
left keeps it (clients may still hold its address; a connection to it fails cleanly).

A request arriving on broker N's listener is relayed as raw bytes on a connection to broker N
dedicated to that client connection, so upstream order is the client's order and correlation ids
need no remapping. Only responses that carry broker addresses (Metadata, FindCoordinator,
DescribeCluster) are decoded and rewritten to the bridge's listeners; Produce and Fetch are capped
below the versions that carry node endpoints, so they never need rewriting. Groups the bridge
coordinates are answered locally on every listener. Requests passed through as is (Produce, Fetch,
...) are routed by their header alone and answered without a future (``UpstreamLink.relay``): the
link writes each answer to the client connection as it arrives (``ResponseSink``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import ssl as ssl_module
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from connect_bridge.bridge.coordination.api_table import RELAY_CAPS, ROWS, SPLIT
from connect_bridge.bridge.security.sasl_client import upstream_login
from connect_bridge.bridge.security.sasl_settings import UpstreamSasl
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.messages import ApiKey, supported_api_versions
from connect_bridge.codecs.requests import (
    RequestDecodeError,
    decode_request,
    decode_response,
    encode_response_frame,
    read_unsigned_varint,
    request_api_key,
    request_body_offset,
)
from connect_bridge.wire.client import KafkaConnection

log = logging.getLogger("connect_bridge.proxy")
_I16 = struct.Struct(">h")
_SIZE = struct.Struct(">i")

OWNER_UNKNOWN = object()
"""``UpstreamCluster.owner_of``'s answer while a group's partition is between two bridges."""

UNANSWERED_KEPT = 1024
"""acks=0 correlation ids remembered per link, for brokers that answer them anyway."""
PRODUCE_FLEXIBLE = 9
"""Produce's first flexible version (request header with tagged fields, compact strings)."""


@dataclass(frozen=True, slots=True)
class SplitRequest:
    """A request answered partly by the bridge and partly by the upstream broker.

    ``local`` and ``remote`` are request payloads (no size prefix) with the client's own header;
    ``merge(local_response, upstream_payload)`` gives the framed response for the client."""

    local: bytes
    remote: bytes
    merge: Callable[[Any, bytes], bytes]


@dataclass(frozen=True, slots=True)
class Broker:
    """An upstream broker, as its Metadata names it."""

    node_id: int
    host: str
    port: int


@dataclass
class UpstreamCluster:
    """What the bridge knows of the real cluster: its brokers and the listener port of each."""

    bootstrap: list[tuple[str, int]]
    base_port: int
    advertised_host: str
    brokers: dict[int, Broker] = field(default_factory=dict)
    api_versions: dict[int, tuple[int, int]] = field(default_factory=dict)
    coordinated: Callable[[str], bool] = lambda group: True
    ssl: ssl_module.SSLContext | None = None
    """TLS of every connection to the upstream brokers (``upstream_tls``); None: plaintext."""
    sasl: UpstreamSasl | None = None
    """The bridge's own SASL login for discovery (``upstream_sasl``); client links carry the client's."""
    owner_of: Callable[[str], tuple[str, int] | object | None] = lambda group_id: None
    """Several bridges: the (host, proxy base port) of the bridge that coordinates a group, None
    for this one (or a group no bridge coordinates), ``OWNER_UNKNOWN`` while it moves."""

    advertised_base_port: int | None = None
    """Clients are told broker N is at ``advertised_host`` on this port + N; None: ``base_port``
    (set when a NAT or a load balancer maps the listeners' ports)."""

    def listener_port(self, node_id: int) -> int:
        """Where the bridge listens for broker N. Deterministic, so the addresses handed out
        survive a restart of the bridge."""
        return self.base_port + node_id

    @property
    def advertised_base(self) -> int:
        """The base of the ports clients are told (``advertised_base_port`` or the bound base)."""
        return self.base_port if self.advertised_base_port is None else self.advertised_base_port

    def advertised_port(self, node_id: int) -> int:
        """The port clients are told for broker N's listener."""
        return self.advertised_base + node_id

    on_new_broker: Callable[[int], None] = lambda node_id: None
    """Called with the node id of a broker seen for the first time after ``discover`` (the
    server opens its listener); never called for a broker already known."""

    def learn(self, found: Iterable[Broker]) -> list[int]:
        """Record the brokers a response names; returns the node ids seen for the first time.

        A broker is never forgotten: one that left the cluster (or is down) keeps its entry, and
        its listener, so a client that cached its address reaches the bridge and gets a clean
        connection failure rather than a refused port. A broker that moved (same node id, another
        host or port) is relayed to its new address on the next connection to its listener."""
        new: list[int] = []
        for broker in found:
            known = self.brokers.get(broker.node_id)
            if known == broker:
                continue
            self.brokers[broker.node_id] = broker
            if known is None:
                new.append(broker.node_id)
                log.info("upstream broker %d is at %s:%d", broker.node_id, broker.host, broker.port)
            else:
                log.info(
                    "upstream broker %d moved from %s:%d to %s:%d",
                    broker.node_id,
                    known.host,
                    known.port,
                    broker.host,
                    broker.port,
                )
        for node_id in new:
            self.on_new_broker(node_id)
        return new

    async def discover(self) -> None:
        """Metadata and ApiVersions from the first reachable bootstrap broker."""
        await self._ask(self.bootstrap, versions=True)

    async def refresh(self, timeout_s: float) -> list[int]:
        """Metadata from the first reachable broker, known ones first and then the bootstrap
        addresses: the node ids seen for the first time. Raises OSError (or a timeout) when none
        answers within ``timeout_s`` each."""
        known = [(b.host, b.port) for _, b in sorted(self.brokers.items())]
        addresses = known + [a for a in self.bootstrap if a not in known]
        before = set(self.brokers)
        await asyncio.wait_for(
            self._ask(addresses, versions=False, timeout_s=timeout_s), timeout_s * len(addresses)
        )
        return sorted(set(self.brokers) - before)

    async def _ask(
        self, addresses: list[tuple[str, int]], *, versions: bool, timeout_s: float = 10.0
    ) -> None:
        """The cluster's brokers (and with ``versions`` its ApiVersions) from the first address
        that answers; the last address's error when none does."""
        last: Exception | None = None
        login = upstream_login(self.sasl)
        for host, port in addresses:
            try:
                conn = await KafkaConnection.connect(
                    host, port, client_id="connect-bridge", ssl=self.ssl, login=login, timeout=timeout_s
                )
            except OSError as exc:
                last = tls_failure(exc, host, port) if self.ssl is not None else exc
                continue
            try:
                if versions:
                    answer = await conn.request(ApiVersionsRequest(), 0, timeout=timeout_s)
                    self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
                meta = await conn.request(MetadataRequest(topics=[]), 1, timeout=timeout_s)
                self.learn(Broker(b.node_id, b.host, b.port) for b in meta.brokers)
                return
            except OSError as exc:  # a timeout too
                if versions:
                    raise
                last = exc
            finally:
                await conn.close()
        if last is not None:  # the last broker's own error ("Connection refused"): the caller names them
            raise last
        raise ConnectionError("no upstream bootstrap broker given")

    # ------------------------------------------------------------------ ApiVersions
    def advertised_versions(self) -> list[tuple[int, int, int]]:
        """Upstream's APIs intersected with what the bridge can relay, plus the bridge's own APIs."""
        ours = {key: (lo, hi) for key, lo, hi in supported_api_versions()}
        out: dict[int, tuple[int, int]] = {}
        for key, (lo, hi) in self.api_versions.items():
            hi = min(hi, RELAY_CAPS.get(key, hi))
            if key in ours:  # answered (or decoded) by the bridge: only versions it decodes
                lo, hi = max(lo, ours[key][0]), min(hi, ours[key][1])
            if lo <= hi:
                out[key] = (lo, hi)
        for key, versions in ours.items():
            out.setdefault(key, versions)
        return sorted((k, lo, hi) for k, (lo, hi) in out.items())

    # ------------------------------------------------------------------ rewriting
    def rewrite(
        self, api_key: int, version: int, correlation_id: int, frame: bytes, keys: list[str] | None = None
    ) -> bytes:
        """A relayed response pointed at the bridge's listeners (``ApiRow.rewrite`` says how)."""
        row = ROWS[api_key]
        if row.spec is not None:
            response = decode_response(api_key, version, frame, framed=False)
        else:
            # DescribeCluster is not one of the bridge's own APIs (no spec in codecs.messages), so
            # decode_response refuses it: decode with kafka-python's class (header + body).
            response = row.response_class.decode(frame, version=version, header=True)
        response._header = None  # re-encoded below with our own header (kafka-python would touch it)
        assert row.rewrite is not None
        rewrite = getattr(self, row.rewrite)
        if keys is not None:
            rewrite(response, version, keys)
        else:
            rewrite(response, version)
        return encode_response_frame(api_key, version, correlation_id, response)

    def _point_at_listener(self, entry: Any, node_id: int) -> None:
        entry.host, entry.port = self.advertised_host, self.advertised_port(node_id)

    def rewrite_metadata(self, response: Any, version: int) -> None:
        """Every broker becomes the bridge's listener for it, so clients keep talking through it
        (a broker not seen before is learned first: ``learn``)."""
        self.learn(Broker(b.node_id, b.host, b.port) for b in response.brokers)
        for b in response.brokers:
            self._point_at_listener(b, b.node_id)

    def rewrite_describe_cluster(self, response: Any, version: int) -> None:
        self.learn(Broker(b.broker_id, b.host, b.port) for b in response.brokers)
        for b in response.brokers:
            self._point_at_listener(b, b.broker_id)

    def rewrite_find_coordinator(self, response: Any, version: int, keys: list[str] | None = None) -> None:
        """The upstream's coordinator node N becomes listener N of the bridge that coordinates the
        group (this one unless several bridges share the groups): a group the bridges coordinate
        is answered by any listener of its bridge, any other group is relayed by that listener to
        node N. Below v4 the response does not carry its key: ``keys`` holds the request's."""
        found = response.coordinators if version >= 4 else [response]
        for c, key in zip(found, (c.key for c in found) if version >= 4 else (keys or [None]), strict=True):
            if c.error_code != ErrorCode.NONE:
                continue
            if c.node_id not in self.brokers and c.node_id >= 0:
                self.learn([Broker(c.node_id, c.host, c.port)])
            owner = self.owner_of(key) if key is not None else None
            if owner is OWNER_UNKNOWN:
                c.error_code, c.node_id, c.host, c.port = int(ErrorCode.COORDINATOR_NOT_AVAILABLE), -1, "", -1
                if hasattr(c, "error_message"):
                    c.error_message = "the group's coordinator is moving between bridges"
            elif owner is not None:
                host, base_port = owner  # type: ignore[misc]
                c.host, c.port = host, base_port + c.node_id
            else:
                self._point_at_listener(c, c.node_id)

    # ------------------------------------------------------------------ split requests
    def split(self, payload: bytes) -> SplitRequest | None:
        """A relayed request whose answer must also hold what the bridge coordinates, else None.

        - **DescribeGroups** naming coordinated *and* other groups (the Java admin client batches
          every group of one coordinator node, and the bridge's groups share the broker's node id):
          the coordinated ones are described locally, the rest upstream, answers in request order.
        - **ListGroups**: upstream's groups (minus any coordinated id it still knows) plus the
          bridge's, so ``kafka-consumer-groups --list`` shows the Connect groups as it does on Kafka.
        """
        api_key = request_api_key(payload)
        if api_key not in SPLIT:
            return None
        try:
            request = decode_request(payload, framed=False)
        except RequestDecodeError:
            return None  # the caller's path answers or closes
        version, correlation = request.api_version, request.correlation_id
        if api_key == ApiKey.LIST_GROUPS:
            return SplitRequest(
                payload, payload, lambda local, up: self._merge_list(version, correlation, local, up)
            )
        groups = list(request.body.groups or ())
        mine = [g for g in groups if self.coordinated(g)]
        if not mine or len(mine) == len(groups):
            return None
        header = bytes(
            payload[: request_body_offset(payload, flexible_header=request.spec.request_flexible(version))]
        )

        def part(ids: list[str]) -> bytes:
            body = DescribeGroupsRequest(
                groups=ids, include_authorized_operations=bool(request.body.include_authorized_operations)
            )
            return header + body.encode(version=version)

        others = [g for g in groups if not self.coordinated(g)]
        return SplitRequest(
            part(mine),
            part(others),
            lambda local, up: self._merge_describe(version, correlation, groups, local, up),
        )

    def _merge_describe(
        self, version: int, correlation: int, groups: list[str], local: Any, upstream: bytes
    ) -> bytes:
        remote = decode_response(ApiKey.DESCRIBE_GROUPS, version, upstream, framed=False)
        remote._header = None
        queues: dict[bool, collections.deque[Any]] = {
            True: collections.deque(local.groups),
            False: collections.deque(remote.groups),
        }
        remote.groups = [queues[self.coordinated(g)].popleft() for g in groups]
        if version >= 1:
            remote.throttle_time_ms = max(remote.throttle_time_ms or 0, local.throttle_time_ms or 0)
        return encode_response_frame(ApiKey.DESCRIBE_GROUPS, version, correlation, remote)

    def _merge_list(self, version: int, correlation: int, local: Any, upstream: bytes) -> bytes:
        remote = decode_response(ApiKey.LIST_GROUPS, version, upstream, framed=False)
        remote._header = None
        if remote.error_code == ErrorCode.NONE:
            remote.error_code = local.error_code
        remote.groups = [g for g in remote.groups if not self.coordinated(g.group_id)] + list(local.groups)
        return encode_response_frame(ApiKey.LIST_GROUPS, version, correlation, remote)


class ResponseSink(Protocol):
    """Where a link writes the answers of requests relayed without a future (``UpstreamLink.relay``):
    the client connection, in upstream order, which is the order the client sent them."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Part (or all) of the answer at the head of the link: hand it to the client. ``data`` is
        never changed afterwards, so the transport may keep it without copying."""

    def complete(self, started: float) -> None:
        """The head answer was written in full (``started``: when its request was read)."""

    def failed(self, exc: BaseException) -> None:
        """The link failed with answers still owed to the client (one may be half written)."""


class UpstreamLink:
    """One client connection's relay to one upstream broker: FIFO, so responses match requests.

    Responses are read with a buffered protocol: a large frame is received straight into its own
    buffer (size prefix included), which is what the client is sent, so a 1 MiB Fetch response
    is not copied by the bridge at all; small frames are cut out of one scratch buffer.

    A request relayed with :meth:`relay` (Produce, Fetch and everything else passed through as is)
    has no future: its answer goes to the link's ``sink`` as it arrives, a large one chunk by chunk
    while the rest is still being received, so the client reads a 1 MiB Fetch response while the
    bridge still receives it instead of after."""

    def __init__(self, broker: Broker, ssl: ssl_module.SSLContext | None = None) -> None:
        self.broker = broker
        self.ssl = ssl
        """TLS towards the broker (hostname checked against the host its Metadata advertises)."""
        self.transport: asyncio.Transport | None = None
        self.protocol: _UpstreamProtocol | None = None
        self.waiting: collections.deque[tuple[int, asyncio.Future[bytearray] | None, float]] = (
            collections.deque()
        )
        """Requests sent and expecting a response, oldest first (an entry precedes its response):
        correlation id, the future of its answer (None: the answer goes to ``sink``), when read."""
        self.unanswered: collections.deque[int] = collections.deque(maxlen=UNANSWERED_KEPT)
        """Correlation ids of recent acks=0 Produce requests. Kafka never answers them, but some
        brokers do (tansu 0.6): such a response is dropped, since the client expects none."""
        self.sink: ResponseSink | None = None
        """Where the answers of :meth:`relay` go (the client connection); set before the first."""

    async def _ensure(self) -> None:
        if self.transport is None or self.transport.is_closing():
            loop = asyncio.get_running_loop()
            self.transport, self.protocol = await loop.create_connection(
                lambda: _UpstreamProtocol(self, cut_through=self),
                self.broker.host,
                self.broker.port,
                ssl=self.ssl,
                server_hostname=self.broker.host if self.ssl is not None else None,
            )

    @property
    def connected(self) -> bool:
        """Connected to the broker (not closing): :meth:`relay` may be called without :meth:`open`."""
        return self.transport is not None and not self.transport.is_closing()

    async def open(self) -> None:
        """Connect to the broker unless connected (raises OSError when it cannot be reached)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            await self._ensure()

    async def send(
        self, frame: bytes, correlation_id: int, expects_response: bool
    ) -> asyncio.Future[bytearray] | None:
        """Relay a framed request; the future resolves with the framed response (size prefix
        included, ready to send to the client)."""
        await self.open()
        assert self.transport is not None and self.protocol is not None
        future: asyncio.Future[bytearray] | None = None
        if expects_response:
            future = asyncio.get_running_loop().create_future()
            self.waiting.append((correlation_id, future, 0.0))
        else:
            self.unanswered.append(correlation_id)
        self.transport.write(frame)
        await self._backpressure()
        return future

    async def relay(self, payload: bytes, correlation_id: int, started: float) -> None:
        """Relay a request (``payload``: unframed) whose answer goes to ``sink`` as it arrives, with
        no future and no copy of the request (call :meth:`open` first)."""
        transport = self.transport
        assert transport is not None and self.sink is not None
        self.waiting.append((correlation_id, None, started))
        transport.writelines((_SIZE.pack(len(payload)), payload))
        await self._backpressure()

    async def _backpressure(self) -> None:
        """A slow upstream slows the client's reads; a closed one fails the request."""
        protocol, transport = self.protocol, self.transport
        assert protocol is not None and transport is not None
        if protocol.paused or transport.is_closing():
            await protocol.drain()

    def pause_reading(self) -> None:
        """Stop reading answers (the client has not taken the last ones yet)."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _deliver(self, frame: bytearray) -> None:
        (got,) = _SIZE.unpack_from(frame, 4)
        if self.waiting and self.waiting[0][0] == got:
            _, future, started = self.waiting.popleft()
            if future is None:
                if self.sink is not None:  # None: the client connection is going away (close)
                    self.sink.write(frame)
                    self.sink.complete(started)
            elif not future.done():
                future.set_result(frame)
        elif got in self.unanswered:
            self.unanswered.remove(got)  # an answer to acks=0: the client expects none
        else:
            expected = self.waiting[0][0] if self.waiting else None
            raise ConnectionError(f"upstream answered correlation {got}, expected {expected}")

    def _streams(self, frame: bytearray) -> bool:
        """Whether the frame being received (its header read) answers the head request and goes to
        ``sink``, so its bytes may be passed on before the rest arrives."""
        if not self.waiting or self.sink is None:
            return False
        correlation, future, _ = self.waiting[0]
        return future is None and correlation == _SIZE.unpack_from(frame, 4)[0]

    def _streamed(self) -> None:
        """The head answer, passed on while it arrived, is complete."""
        _, _, started = self.waiting.popleft()
        if self.sink is not None:
            self.sink.complete(started)

    def _fail(self, exc: BaseException) -> None:
        owed = False
        while self.waiting:
            _, future, _ = self.waiting.popleft()
            if future is None:
                owed = True
            elif not future.done():
                future.set_exception(ConnectionError(f"upstream broker {self.broker.node_id} failed: {exc}"))
        if owed and self.sink is not None:
            self.sink.failed(ConnectionError(f"upstream broker {self.broker.node_id} failed: {exc}"))
        if self.transport is not None:
            self.transport.close()

    async def close(self) -> None:
        """The client connection is going away: nothing more is written to it from here."""
        self.sink = None
        if self.transport is not None:
            self.transport.close()


_SCRATCH = 64 * 1024
"""Read size for small frames; a frame with at least this much left to read is read in place."""
STREAMED = 64 * 1024
"""Answers from this size on are passed to the client chunk by chunk as they arrive (cut-through)."""
PASSED_ON = 64 * 1024
"""The smallest chunk passed on before the answer is complete: a broker's bytes may come in many
small reads, and each write to the client costs a system call and a few Python calls."""


class _UpstreamProtocol(asyncio.BufferedProtocol):
    """Frames an upstream connection's bytes into responses for its ``UpstreamLink``."""

    def __init__(self, link: UpstreamLink, cut_through: UpstreamLink | None = None) -> None:
        self.link = link
        self.cut_through = cut_through
        """The link whose passed-through answers may be written on before they are complete
        (``UpstreamLink.relay``); None: every frame is delivered whole."""
        self.scratch = bytearray(_SCRATCH)
        self.header = bytearray()
        self.frame: bytearray | None = None
        self.filled = 0
        self.in_place = False
        self.streaming: bool | None = None
        """Whether the current frame is passed on as it arrives (None: not decided yet)."""
        self.passed = 0
        """Bytes of the current frame passed on already (when streaming)."""
        self.paused = False
        self.drained: asyncio.Future[None] | None = None

    # ---------------------------------------------------------------- reading
    def get_buffer(self, sizehint: int) -> memoryview:
        frame = self.frame
        if frame is not None and len(frame) - self.filled >= _SCRATCH:
            self.in_place = True
            return memoryview(frame)[self.filled :]
        self.in_place = False
        return memoryview(self.scratch)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self.in_place:
                self.filled += nbytes
                self._complete()
                return
            data = memoryview(self.scratch)[:nbytes]
            while data:
                if self.frame is None:
                    need = 4 - len(self.header)
                    self.header += data[:need]
                    data = data[need:]
                    if len(self.header) < 4:
                        return
                    (size,) = _SIZE.unpack(self.header)
                    if size < 4:
                        raise ConnectionError(f"upstream sent a frame of {size} bytes")
                    self.frame = bytearray(4 + size)
                    self.frame[:4] = self.header
                    self.filled = 4
                    self.header = bytearray()
                take = min(len(data), len(self.frame) - self.filled)
                self.frame[self.filled : self.filled + take] = data[:take]
                self.filled += take
                data = data[take:]
                self._complete()
        except ConnectionError as exc:
            self.link._fail(exc)

    def _complete(self) -> None:
        frame = self.frame
        if frame is None:
            return
        filled = self.filled
        link = self.cut_through
        if self.streaming is None and link is not None and filled >= 8 and len(frame) >= STREAMED:
            self.streaming = link._streams(frame)
        if self.streaming:
            assert link is not None
            ready = filled - self.passed
            if ready and (ready >= PASSED_ON or filled == len(frame)) and link.sink is not None:
                # Never written to again: the transport may keep the view instead of a copy.
                link.sink.write(memoryview(frame)[self.passed : filled])
                self.passed = filled
            if filled == len(frame):
                self.frame, self.streaming, self.passed = None, None, 0
                link._streamed()
        elif filled == len(frame):
            self.frame, self.streaming = None, None
            self.link._deliver(frame)

    def eof_received(self) -> bool:
        self.link._fail(ConnectionError("upstream closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.link._fail(exc or ConnectionError("upstream connection lost"))
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    # ---------------------------------------------------------------- writing
    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)

    async def drain(self) -> None:
        transport = self.link.transport
        if transport is not None and transport.is_closing():
            raise ConnectionError(f"upstream broker {self.link.broker.node_id} connection closed")
        while self.paused:
            self.drained = asyncio.get_running_loop().create_future()
            await self.drained


def produce_acks(payload: bytes | memoryview, version: int) -> int:
    """``acks`` of a Produce request (acks=0 gets no response, so none may be queued for it)."""
    flexible = version >= PRODUCE_FLEXIBLE
    offset = request_body_offset(payload, flexible_header=flexible)
    if flexible:
        length, offset = read_unsigned_varint(payload, offset)
        offset += max(length - 1, 0)
    elif version >= 3:
        (length,) = _I16.unpack_from(payload, offset)
        offset += 2 + max(length, 0)
    (acks,) = _I16.unpack_from(payload, offset)
    return acks


def tls_failure(exc: OSError, host: str, port: int) -> OSError:
    """A failed TLS connection as a line an operator can act on: ``ssl`` errors carry an errno
    (1, "Operation not permitted") that says nothing, and a plaintext listener just resets."""
    if isinstance(exc, ssl_module.SSLCertVerificationError):
        why = f"certificate verify failed: {exc.verify_message}; check upstream_tls.cafile / check_hostname"
    elif isinstance(exc, ssl_module.SSLEOFError | ConnectionResetError):
        why = f"closed by {host}:{port} during the handshake; is it the brokers' SSL listener?"
    elif isinstance(exc, ssl_module.SSLError):
        why = f"{exc.reason or exc}; check upstream_tls"
    else:
        return exc
    return ConnectionError(f"TLS handshake failed: {why}")


def group_matcher(patterns: list[str] | None) -> Callable[[str], bool]:
    """Groups the bridge coordinates, as anchored regular expressions (None = every group)."""
    if patterns is None:
        return lambda group: True
    compiled = [re.compile(p) for p in patterns]
    return lambda group: any(p.fullmatch(group) for p in compiled)
