"""Forward everything the bridge does not answer itself to the upstream broker that owns it.

The bridge opens one listener per upstream broker on a deterministic port (``base port + node id``),
so the addresses it hands out survive restarts. A request arriving on broker N's listener is
relayed as raw bytes on a connection to broker N dedicated to that client connection, so upstream
order is the client's order and correlation ids need no remapping. Only responses that carry broker
addresses (Metadata, FindCoordinator, DescribeCluster) are decoded and rewritten to the bridge's
listeners; Produce and Fetch are capped below the versions that carry node endpoints, so they never
need rewriting. Groups the bridge coordinates are answered locally on every listener.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from connect_bridge.bridge.client import KafkaConnection
from connect_bridge.codecs.messages import API_SPECS, ApiKey, supported_api_versions
from connect_bridge.codecs.requests import decode_response, encode_response_frame

log = logging.getLogger("connect_bridge.proxy")
_HEADER = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_SIZE = struct.Struct(">i")

PRODUCE, FETCH, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 0, 1, 3, 10, 60
REWRITTEN = {
    METADATA: MetadataResponse,
    FIND_COORDINATOR: FindCoordinatorResponse,
    DESCRIBE_CLUSTER: DescribeClusterResponse,
}
"""Responses carrying broker addresses: decoded and rewritten to the bridge's listeners."""
VERSION_CAPS = {PRODUCE: 9, FETCH: 15}
"""Produce v10+ / Fetch v16+ may carry NodeEndpoints (leader hints): the bridge does not rewrite them."""
UNANSWERED_KEPT = 1024
"""acks=0 correlation ids remembered per link, for brokers that answer them anyway."""
GROUP_KEYED = {ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP}


@dataclass(frozen=True, slots=True)
class Broker:
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

    def listener_port(self, node_id: int) -> int:
        return self.base_port + node_id

    async def discover(self) -> None:
        """Metadata and ApiVersions from the first reachable bootstrap broker."""
        last: Exception | None = None
        for host, port in self.bootstrap:
            try:
                conn = await KafkaConnection.connect(host, port, client_id="connect-bridge")
            except OSError as exc:
                last = exc
                continue
            try:
                versions = await conn.request(ApiVersionsRequest(), 0)
                self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
                meta = await conn.request(MetadataRequest(topics=[]), 1)
                self.brokers = {b.node_id: Broker(b.node_id, b.host, b.port) for b in meta.brokers}
                return
            finally:
                await conn.close()
        raise ConnectionError(f"no upstream broker reachable at {self.bootstrap}: {last}")

    # ------------------------------------------------------------------ ApiVersions
    def advertised_versions(self) -> list[tuple[int, int, int]]:
        """Upstream's APIs intersected with what the bridge can relay, plus the bridge's own APIs."""
        ours = {key: (lo, hi) for key, lo, hi in supported_api_versions()}
        out: dict[int, tuple[int, int]] = {}
        for key, (lo, hi) in self.api_versions.items():
            hi = min(hi, VERSION_CAPS.get(key, hi))
            if key in REWRITTEN:
                hi = min(hi, REWRITTEN[key].max_version)
            if key in ours:  # answered (or decoded) by the bridge: only versions it decodes
                lo, hi = max(lo, ours[key][0]), min(hi, ours[key][1])
            if lo <= hi:
                out[key] = (lo, hi)
        for key, versions in ours.items():
            out.setdefault(key, versions)
        return sorted((k, lo, hi) for k, (lo, hi) in out.items())

    # ------------------------------------------------------------------ rewriting
    def rewrite(
        self, api_key: int, version: int, correlation_id: int, frame: bytes, header_version: int
    ) -> bytes:
        if api_key in API_SPECS:
            response = decode_response(api_key, version, frame, framed=False)
        else:
            # DescribeCluster is not one of the bridge's own APIs (no spec in codecs.messages), so
            # decode_response refuses it: decode with kafka-python's class (header + body).
            response = REWRITTEN[api_key].decode(frame, version=version, header=True)
        response._header = None  # re-encoded below with our own header (kafka-python would touch it)
        if api_key == METADATA:
            for b in response.brokers:
                b.host, b.port = self.advertised_host, self.listener_port(b.node_id)
        elif api_key == DESCRIBE_CLUSTER:
            for b in response.brokers:
                b.host, b.port = self.advertised_host, self.listener_port(b.broker_id)
        elif api_key == FIND_COORDINATOR:
            if version >= 4:
                for c in response.coordinators:
                    if c.error_code == 0:
                        c.host, c.port = self.advertised_host, self.listener_port(c.node_id)
            elif response.error_code == 0:
                response.host, response.port = self.advertised_host, self.listener_port(response.node_id)
        return encode_response_frame(api_key, version, correlation_id, response)

    def local_coordinator(self, node_id: int) -> tuple[int, str, int]:
        """Where clients find a group the bridge coordinates: this very listener (any will do)."""
        return node_id, self.advertised_host, self.listener_port(node_id)


class UpstreamLink:
    """One client connection's relay to one upstream broker: FIFO, so responses match requests."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.waiting: collections.deque[tuple[int, asyncio.Future[bytes]]] = collections.deque()
        """Requests sent and expecting a response, oldest first (an entry precedes its response)."""
        self.unanswered: collections.deque[int] = collections.deque(maxlen=UNANSWERED_KEPT)
        """Correlation ids of recent acks=0 Produce requests. Kafka never answers them, but some
        brokers do (tansu 0.6): such a response is dropped, since the client expects none."""
        self._task: asyncio.Task[None] | None = None

    async def _ensure(self) -> None:
        if self.writer is None or self.writer.is_closing():
            self.reader, self.writer = await asyncio.open_connection(self.broker.host, self.broker.port)
            self._task = asyncio.get_running_loop().create_task(self._read_loop())

    async def send(
        self, frame: bytes, correlation_id: int, expects_response: bool
    ) -> asyncio.Future[bytes] | None:
        """Relay a framed request; the future resolves with the response payload (no size prefix)."""
        await self._ensure()
        assert self.writer is not None
        future: asyncio.Future[bytes] | None = None
        if expects_response:
            future = asyncio.get_running_loop().create_future()
            self.waiting.append((correlation_id, future))
        else:
            self.unanswered.append(correlation_id)
        self.writer.write(frame)
        await self.writer.drain()  # backpressure: a slow upstream slows the client's reads
        return future

    async def _read_loop(self) -> None:
        assert self.reader is not None
        try:
            while True:
                (size,) = _SIZE.unpack(await self.reader.readexactly(4))
                payload = await self.reader.readexactly(size)
                (got,) = _SIZE.unpack_from(payload, 0)
                if self.waiting and self.waiting[0][0] == got:
                    _, future = self.waiting.popleft()
                    if not future.done():
                        future.set_result(payload)
                elif got in self.unanswered:
                    self.unanswered.remove(got)  # an answer to acks=0: the client expects none
                else:
                    expected = self.waiting[0][0] if self.waiting else None
                    raise ConnectionError(f"upstream answered correlation {got}, expected {expected}")
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        while self.waiting:
            _, future = self.waiting.popleft()
            if not future.done():
                future.set_exception(ConnectionError(f"upstream broker {self.broker.node_id} failed: {exc}"))
        if self.writer is not None:
            self.writer.close()

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


def request_body_offset(payload: bytes | memoryview, flexible_header: bool) -> int:
    """Where the request body starts: after api key, version, correlation id, client id (and the
    header's tagged fields when the header is flexible)."""
    (length,) = _I16.unpack_from(payload, 8)
    offset = 10 + max(length, 0)
    if flexible_header:
        count, offset = _uvarint(payload, offset)
        for _ in range(count):
            _, offset = _uvarint(payload, offset)
            size, offset = _uvarint(payload, offset)
            offset += size
    return offset


def produce_acks(payload: bytes | memoryview, version: int) -> int:
    """``acks`` of a Produce request (acks=0 gets no response, so none may be queued for it)."""
    offset = request_body_offset(payload, flexible_header=version >= 9)
    if version >= 9:
        length, offset = _uvarint(payload, offset)
        offset += max(length - 1, 0)
    elif version >= 3:
        (length,) = _I16.unpack_from(payload, offset)
        offset += 2 + max(length, 0)
    (acks,) = _I16.unpack_from(payload, offset)
    return acks


def _uvarint(data: bytes | memoryview, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7


def group_matcher(patterns: list[str] | None) -> Callable[[str], bool]:
    """Groups the bridge coordinates, as anchored regular expressions (None = every group)."""
    if patterns is None:
        return lambda group: True
    compiled = [re.compile(p) for p in patterns]
    return lambda group: any(p.fullmatch(group) for p in compiled)


def api_versions_response(cluster: UpstreamCluster) -> Any:
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
        for k, lo, hi in cluster.advertised_versions()
    ]
    return ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)
