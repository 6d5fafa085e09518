"""The bridge process: an asyncio Kafka-protocol server in front of the pure coordinator.

One event loop owns the coordinator, so requests from every connection are serialized into it.
Per connection a reader decodes frames (size checked before buffering) and queues, in request
order, either a ready response or a future of one; a writer sends them in that same order, each
only after the records it may reveal are durable (``Committer``). Timers run from a task that
sleeps until the coordinator's next deadline. Records are replayed before group APIs are served
(COORDINATOR_LOAD_IN_PROGRESS meanwhile).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import resource
import secrets
import signal
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from connect_bridge.bridge.committer import Committer
from connect_bridge.bridge.decisions import log_decisions
from connect_bridge.bridge.decoding import FrameDecoder
from connect_bridge.bridge.fastpath import Framed, SteadyHeartbeats
from connect_bridge.bridge.handlers import Client, LocalApis, Parked, now_ms
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.proxy import (
    GROUP_KEYED,
    PRODUCE,
    REWRITTEN,
    SplitRequest,
    UpstreamCluster,
    UpstreamLink,
    api_versions_response,
    group_matcher,
    produce_acks,
)
from connect_bridge.bridge.store import RecordStore, StoreError
from connect_bridge.codecs.messages import ApiKey, api_spec
from connect_bridge.codecs.requests import (
    DecodedRequest,
    RequestDecodeError,
    decode_request,
    encode_response_frame,
)
from connect_bridge.state.classic_group import PROTOCOL_TYPE_CONNECT as CONNECT_PROTOCOL_TYPE
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.limits import RequestLimits
from connect_bridge.state.model import ConfigView, MemberMetadata
from connect_bridge.state.records import Record, RecordType

log = logging.getLogger("connect_bridge.server")
_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PEEK = struct.Struct(">hhi")
FILES_RESERVED = 64
"""Open files kept for the state log, the metrics listener, upstream links and the executor."""
RELAYED = "Relayed"
"""The metrics label of answers relayed from the upstream cluster."""
LARGE_FRAME = 1024 * 1024
"""Frames above this count against ``max_buffered_bytes`` while they are read."""
CLUSTER_APIS = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.FIND_COORDINATOR,
        ApiKey.METADATA,
        ApiKey.LIST_GROUPS,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.CONNECT_GROUP_DESCRIBE,
    }
)
"""Requests the bridge decodes that carry no group state: capped at ``max_cluster_request_bytes``."""
LOCAL_ONLY = {
    ApiKey.API_VERSIONS,
    ApiKey.CONNECT_GROUP_HEARTBEAT,
    ApiKey.CONNECT_GROUP_PREPARE_ASSIGNMENT,
    ApiKey.CONNECT_GROUP_INSTALL_ASSIGNMENT,
    ApiKey.CONNECT_GROUP_DESCRIBE,
}
ROUTED_BY_GROUP = frozenset({*GROUP_KEYED, ApiKey.DESCRIBE_GROUPS})
"""Proxy mode: requests answered here or upstream depending on the groups they name."""


@dataclass(frozen=True, slots=True)
class _Answering:
    """What encoding an answer needs from its request."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(slots=True, eq=False)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    host: str
    node_id: int = 0
    """The upstream broker this listener stands for (proxy mode)."""
    links: dict[int, UpstreamLink] = field(default_factory=dict)
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    pending: int = 0
    """Responses queued or being written: a new one may skip the queue only when this is 0."""
    last_read: float = field(default_factory=time.monotonic)
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    """Set whenever a queued response went out (the reader waits on it at the in-flight limit)."""


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    advertised_port: int | None = None
    max_frame_bytes: int = 100 * 1024 * 1024
    max_connections: int = 10_000
    idle_timeout_ms: int = 600_000
    config_group: str | None = None
    """Group the watched config view applies to (None: every group)."""
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    upstream: list[tuple[str, int]] = field(default_factory=list)
    """Bootstrap brokers of the real cluster; empty = embedded mode (the bridge is the only broker)."""
    proxy_base_port: int | None = None
    """Listener port of upstream broker N is base + N (default: the listen port + 1)."""
    coordinated_groups: list[str] | None = None
    """Regexes of the groups the bridge coordinates; None = all (embedded) / 'connect.*' (proxy)."""
    limits: RequestLimits = field(default_factory=RequestLimits)
    max_inflight_per_connection: int = 64
    """Requests read and not yet answered on one connection before the bridge stops reading it."""
    max_buffered_bytes: int = 256 * 1024 * 1024
    """Bytes of large frames being read at once, over all connections."""
    heartbeat_cache_bytes: int = 16 * 1024 * 1024


class BridgeServer:
    def __init__(
        self,
        options: ServerOptions,
        store: RecordStore,
        metrics: Metrics | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.options = options
        self.store = store
        self.metrics = metrics
        self.clock = clock
        config = options.coordinator
        if not config.member_id_salt:  # unguessable member ids on the wire (issue 11.3)
            config = dataclasses.replace(config, member_id_salt=secrets.token_hex(16))
        self.coordinator = GroupCoordinator(config)
        self.loaded = False
        self.failure: str | None = None
        """Why the bridge stopped itself (a background task or the store failed); None while healthy."""
        self._buffered = 0
        """Bytes of large frames being read right now, over all connections."""
        self._accept_failed = _RateLimited()
        self._refused = _RateLimited()
        self.committer = Committer(store, on_fsync=self._observe_fsync, on_failure=self._store_failed)
        self._server: asyncio.AbstractServer | None = None
        self._timer_wake = asyncio.Event()
        self._sleeping_until: int | None = None
        """The deadline the timer loop sleeps until (None: not sleeping on one)."""
        self._tasks: list[asyncio.Task[Any]] = []
        self._connections: set[asyncio.Task[Any]] = set()
        self.open_connections: set[_Connection] = set()
        self._stopping = asyncio.Event()
        self.port = options.port
        self.apis: LocalApis | None = None
        self._pending_view: ConfigView | None = None
        self.config_refresh: Callable[[], None] | None = None
        """Asks the config view source to read again at once (``ViewDelivery.refresh``; set by
        ``app.run``): called when a member reports a config offset its group's view has not reached."""
        self.proxy: UpstreamCluster | None = None
        self._matches: Callable[[str], bool] = lambda group: True
        """Proxy mode: ``coordinated_groups`` as a predicate (see :meth:`_coordinates`)."""
        self._listeners: list[asyncio.AbstractServer] = []
        self._bootstrap_node = 0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._limit_connections_to_open_files()
        loop.set_exception_handler(self._loop_exception)
        self.committer.start()
        self._server = await asyncio.start_server(
            self._on_connection, self.options.host, self.options.port, limit=64 * 1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        advertised = (
            self.options.advertised_host or self.options.host,
            self.options.advertised_port or self.port,
        )
        node = 0
        if self.options.upstream:
            node = await self._start_proxy(advertised[0])
            advertised = (advertised[0], self.proxy.listener_port(node))
        self.apis = LocalApis(
            self.coordinator,
            advertised,
            self.after_step,
            lambda: self.loaded,
            self.clock,
            node_id=node,
            api_versions=(lambda: api_versions_response(self.proxy)) if self.proxy else None,
            limits=self.options.limits,
        )
        self.steady = SteadyHeartbeats(
            lambda: self.coordinator, self.clock, limit_bytes=self.options.heartbeat_cache_bytes
        )
        self.decoder = FrameDecoder(self.options.limits)
        self._tasks.append(self.supervise(self._load(), "loading the state"))
        log.info("listening on %s:%d (advertised %s:%d)", self.options.host, self.port, *advertised)

    def _limit_connections_to_open_files(self) -> None:
        """Keep ``max_connections`` below the open-file limit (raised to its hard limit first): at
        the limit every accept fails, and each failure used to log a traceback (issue 11.8)."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
                soft = hard
        if soft == resource.RLIM_INFINITY:
            return
        room = max(1, soft - min(FILES_RESERVED, soft // 4))
        if self.options.max_connections > room:
            log.warning(
                "max_connections %d is above what the open-file limit %d allows: using %d",
                self.options.max_connections,
                soft,
                room,
            )
            self.options.max_connections = room

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Out-of-resource accept failures: one line per second at most, no traceback."""
        exc = context.get("exception")
        if isinstance(exc, OSError) and "out of system resource" in str(context.get("message", "")):
            self._accept_failed.log(
                "cannot accept connections: %s; raise the open-file limit (ulimit -n) or lower "
                "max_connections",
                exc.strerror or exc,
            )
            return
        loop.default_exception_handler(context)

    async def _start_proxy(self, advertised_host: str) -> int:
        """Discover the upstream brokers and open one listener per broker (base port + node id)."""
        patterns = self.options.coordinated_groups
        base = self.options.proxy_base_port or self.port + 1
        self._matches = group_matcher(patterns if patterns is not None else ["connect.*"])
        self.proxy = UpstreamCluster(
            self.options.upstream, base, advertised_host, coordinated=self._coordinates
        )
        await self.proxy.discover()
        for node_id in sorted(self.proxy.brokers):
            server = await asyncio.start_server(
                functools.partial(self._on_connection, node_id=node_id),
                self.options.host,
                self.proxy.listener_port(node_id),
                limit=64 * 1024,
            )
            self._listeners.append(server)
        self._bootstrap_node = min(self.proxy.brokers)
        log.info(
            "proxying %d upstream brokers on ports %s",
            len(self.proxy.brokers),
            [self.proxy.listener_port(n) for n in sorted(self.proxy.brokers)],
        )
        return self._bootstrap_node

    @property
    def ready(self) -> bool:
        """Serving group APIs from durable state: loaded, and nothing failed since."""
        return self.loaded and self.failure is None

    def supervise(self, coro: Any, what: str) -> asyncio.Task[Any]:
        """Run a background task whose failure must stop the bridge, never die silently."""

        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.fatal(f"{what} failed: {exc}")

        return asyncio.get_running_loop().create_task(guarded(), name=what)

    def fatal(self, reason: str) -> None:
        """Stop serving with one line saying why; ``connect-bridge serve`` then exits non-zero.

        State in memory may now differ from what is durable, so nothing more may be answered from
        it: readiness drops at once and every connection is closed by the stop.
        """
        if self.failure is None:
            self.failure = reason
            log.error("stopping: %s", reason)
        for writer in [c.writer for c in self.open_connections]:
            writer.transport.abort()
        self._stopping.set()

    def _store_failed(self, exc: BaseException) -> None:
        self.fatal(f"the record store failed: {exc}; free the disk or fix the state directory, then restart")

    async def _load(self) -> None:
        try:
            records = await asyncio.get_running_loop().run_in_executor(None, self.store.load)
        except StoreError as exc:
            self.fatal(
                f"cannot load the saved state: {exc}. Restore the state directory from a backup, or move "
                "it away to start with no state (every group then rebalances from nothing)"
            )
            return
        self.coordinator.replay(records, self.clock())
        self.loaded = True
        if self._pending_view is not None:
            self.set_config_view(self._pending_view)
        log.info("loaded %d records; coordinating %d groups", len(records), len(self.coordinator.groups))
        self.after_step()
        self._tasks.append(self.supervise(self._timer_loop(), "the timer loop"))

    def install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self._stopping.set)

    async def serve_until_stopped(self) -> None:
        await self._stopping.wait()
        await self.stop()

    def request_stop(self) -> None:
        self._stopping.set()

    async def stop(self) -> None:
        """Graceful shutdown: stop accepting, finish in-flight writes, flush the store."""
        for server in [self._server, *self._listeners]:
            if server is not None:
                server.close()
                await server.wait_closed()
        for writer in [c.writer for c in self.open_connections]:
            # abort, not close: close() waits to flush to a peer that may never read again, which
            # would leave its connection task stuck in drain() forever.
            writer.transport.abort()
        for task in self._tasks:
            task.cancel()
        pending = [*self._connections, *self._tasks]
        if pending:
            _, stuck = await asyncio.wait(pending, timeout=5)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
        await self.committer.close()
        self.decoder.close()
        with contextlib.suppress(Exception):
            self.store.close()
        log.info("stopped")

    # ------------------------------------------------------------------ the coordinator side
    def after_step(self) -> None:
        """After any coordinator call: persist records, release parked responses, re-arm timers."""
        records = self.coordinator.drain_records()
        try:
            self.committer.submit(records)
        except Exception as exc:
            # Memory has changed and the records cannot be written: never answer from that state.
            # Request limits (state/limits.py) keep every record storable, so this is a bug or a disk.
            self.fatal(f"cannot write {len(records)} records: {exc}")
            raise
        if records:
            log_decisions(records)
            if self.config_refresh is not None and self._view_behind(records):
                self.config_refresh()
        for token, response in self.coordinator.drain_responses():
            if isinstance(token, Parked) and not token.future.done():
                token.future.set_result(token.to_wire(response, token.version))
        if self.metrics is not None and (records or not getattr(self, "_groups_observed", False)):
            self._observe_groups(records)
        deadline = self.coordinator.next_deadline()
        if deadline is not None and (self._sleeping_until is None or deadline < self._sleeping_until):
            self._timer_wake.set()  # only when the timer loop would otherwise sleep past it

    async def _timer_loop(self) -> None:
        while True:
            deadline = self.coordinator.next_deadline()
            timeout = None if deadline is None else max(0.0, (deadline - self.clock()) / 1000)
            self._timer_wake.clear()
            self._sleeping_until = deadline
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_wake.wait(), timeout)
            self._sleeping_until = None
            now = self.clock()
            deadline = self.coordinator.next_deadline()
            if deadline is not None and deadline <= now:
                self.coordinator.advance(now)
                self.after_step()

    def _view_behind(self, records: list[Record]) -> bool:
        """A member (re)joined with a config offset beyond its group's view: the config topic holds
        records the bridge has not read yet, and its classic members get CONFIG_MISMATCH until it
        has (``LegacyMembers.encode_assignment``), so read now rather than a poll interval later."""
        for record in records:
            value = record.value
            if (
                record.type is RecordType.MEMBER_METADATA
                and isinstance(value, MemberMetadata)
                and value.config_offset > self.coordinator.view(record.group_id).offset
            ):
                return True
        return False

    def set_config_view(self, view: ConfigView) -> None:
        """A new config view (from the watched file or the config topic)."""
        group = self.options.config_group
        targets = [group] if group else list(self.coordinator.groups)
        self.coordinator.default_view = view
        self._pending_view = view
        if self.loaded:
            for gid in targets:
                self.coordinator.set_config(gid, view, self.clock())
            self.after_step()

    # ------------------------------------------------------------------ connections
    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, node_id: int | None = None
    ) -> None:
        if len(self._connections) >= self.options.max_connections:
            limit = self.options.max_connections
            self._refused.log("connection limit %d reached: closing new connections", limit)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        if self.metrics is not None:
            self.metrics.connections.inc()
        peer = writer.get_extra_info("peername")
        conn = _Connection(reader, writer, f"/{peer[0]}" if peer else "")
        conn.node_id = self._bootstrap_node if node_id is None else node_id
        self.open_connections.add(conn)
        sender = asyncio.get_running_loop().create_task(self._send_loop(conn))
        watchdog = asyncio.get_running_loop().create_task(self._idle_watchdog(conn))
        answer_first = False
        try:
            answer_first = await self._read_loop(conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if answer_first:
                # A frame the bridge closes on: Kafka reads one request at a time, so everything
                # before it was answered first. Let the sender write what is queued, for at most
                # the idle timeout (a parked JoinGroup may wait for its whole rebalance).
                await conn.queue.put(None)
                with contextlib.suppress(Exception, asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(sender), self.options.idle_timeout_ms / 1000)
            watchdog.cancel()
            for link in conn.links.values():
                await link.close()
            # The connection is going away (peer gone, idle, stop(), or answered up to a frame we
            # close on): drop what is still queued, as Kafka does. Waiting instead would hang on a
            # parked JoinGroup/SyncGroup whose rebalance may never end (stop() cancels the timers).
            sender.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await sender
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._connections.discard(task)
            self.open_connections.discard(conn)
            if self.metrics is not None:
                self.metrics.connections.dec()

    async def _read_loop(self, conn: _Connection) -> bool:
        """Serve requests until the peer closes (False) or a frame the bridge closes on (True)."""
        reader = conn.reader
        while True:
            while conn.pending >= self.options.max_inflight_per_connection:
                # Kafka reads one request per connection at a time; a pipelining client gets this
                # many before the bridge stops reading (a parked JoinGroup cannot grow the queue).
                conn.answered.clear()
                await conn.answered.wait()
            try:
                size_bytes = await reader.readexactly(4)
            except asyncio.IncompleteReadError:
                return False
            conn.last_read = time.monotonic()
            (size,) = _SIZE.unpack(size_bytes)
            if size < 0 or size > self.options.max_frame_bytes:
                log.warning(
                    "closing %s: frame of %d bytes (limit %d)", conn.host, size, self.options.max_frame_bytes
                )
                return True
            payload = await self._read_payload(conn, size)
            if payload is None:
                return True
            if size > self.options.limits.max_cluster_request_bytes and self._decoded_here(payload):
                # Decoding costs a few microseconds per array entry on the event loop: a 1 MB
                # FindCoordinator of 100,000 keys held it 0.4 s (issue 11.6). These requests are tiny.
                log.warning(
                    "closing %s: %s request of %d bytes (limit %d)",
                    conn.host,
                    api_spec(_I16.unpack_from(payload, 0)[0]).name,
                    size,
                    self.options.limits.max_cluster_request_bytes,
                )
                return True
            if self.decoder.too_large(size) and self._group_api(payload):
                # No request the limits admit is this large, and decoding it costs a microsecond
                # and ~80 bytes per array entry on the event loop (issue 11.6).
                log.warning(
                    "closing %s: %s request of %d bytes (limit %d, limits.max_request_bytes)",
                    conn.host,
                    api_spec(_I16.unpack_from(payload, 0)[0]).name,
                    size,
                    self.decoder.max_frame_bytes,
                )
                return True
            started = time.perf_counter()
            if self.loaded and len(payload) >= 8:
                try:
                    frame = self.steady.answer(payload)
                except Exception:  # anything odd takes the full path, which reports it properly
                    frame = None
                if frame is not None:
                    self.after_step()
                    answering = _Answering(*_PEEK.unpack_from(payload, 0))
                    await self._respond(conn, answering, frame, self.committer.written, started)
                    continue
            decoded: DecodedRequest | RequestDecodeError | None = None
            if self.proxy is not None and len(payload) >= 10:
                decoded = await self._decode_if_routed_by_group(payload)
                if not self._answers_locally(payload, decoded):
                    split = self.proxy.split(payload)
                    if split is not None:
                        forwarded = await self._forward_split(conn, split, started)
                    else:
                        forwarded = await self._forward(conn, payload, started)
                    if not forwarded:
                        return True
                    continue
            if decoded is None:
                decoded = await self.decoder.decode(payload)
            if isinstance(decoded, RequestDecodeError):
                if decoded.answerable and decoded.correlation_id is not None:
                    assert self.apis is not None
                    conn.pending += 1
                    frame = encode_response_frame(
                        ApiKey.API_VERSIONS, 0, decoded.correlation_id, _unsupported_api_versions(self.apis)
                    )
                    await conn.queue.put(frame)
                    continue
                log.warning("closing %s: %s", conn.host, decoded)
                return True
            request = decoded
            try:
                assert self.apis is not None
                outcome = self.apis.handle(request, Client(request.client_id or "", conn.host))
            except Exception as exc:  # bad input must never kill the server
                log.warning(
                    "closing %s: cannot handle %s v%d: %s",
                    conn.host,
                    api_spec(request.api_key).name,
                    request.api_version,
                    exc,
                )
                return True
            await self._respond(conn, request, outcome, self.committer.written, started)

    def _decoded_here(self, payload: bytes) -> bool:
        """A cluster API (not a group API) that the bridge decodes itself rather than relays."""
        if len(payload) < 2:
            return False
        api_key = _I16.unpack_from(payload, 0)[0]
        if api_key not in CLUSTER_APIS:
            return False
        return self.proxy is None or api_key != ApiKey.METADATA

    async def _read_payload(self, conn: _Connection, size: int) -> bytes | None:
        """The frame's bytes; large frames share one budget over all connections (issue 11.4)."""
        if size <= LARGE_FRAME:
            return await conn.reader.readexactly(size)
        if self._buffered + size > self.options.max_buffered_bytes:
            log.warning(
                "closing %s: a %d-byte frame would exceed the %d bytes of large frames being read at once",
                conn.host,
                size,
                self.options.max_buffered_bytes,
            )
            return None
        self._buffered += size
        try:
            return await conn.reader.readexactly(size)
        finally:
            self._buffered -= size

    def _group_api(self, payload: bytes) -> bool:
        """A group API the bridge decodes (answered here, or routed by its group id)."""
        api_key = _I16.unpack_from(payload, 0)[0]
        return api_key in LOCAL_ONLY or api_key in GROUP_KEYED

    async def _decode_if_routed_by_group(self, payload: bytes) -> DecodedRequest | RequestDecodeError | None:
        """Proxy mode: decode (once) a request whose group decides where it goes."""
        if _I16.unpack_from(payload, 0)[0] not in ROUTED_BY_GROUP:
            return None
        return await self.decoder.decode(payload)

    def _answers_locally(self, payload: bytes, decoded: DecodedRequest | RequestDecodeError | None) -> bool:
        """In proxy mode: the bridge's own APIs, and group APIs of the groups it coordinates."""
        assert self.proxy is not None
        api_key = _I16.unpack_from(payload, 0)[0]
        if api_key in LOCAL_ONLY:
            return True
        if decoded is None:
            return False
        if isinstance(decoded, RequestDecodeError):
            return True  # the local path answers or closes with the right error
        body = decoded.body
        if api_key == ApiKey.DESCRIBE_GROUPS:
            return all(self._coordinates(g) for g in body.groups)
        joining = body.protocol_type if api_key == ApiKey.JOIN_GROUP else None
        return self._coordinates(body.group_id, joining)

    def _coordinates(self, group_id: str, joining_protocol_type: str | None = None) -> bool:
        """Proxy mode: one of the bridge's groups. Its id matches ``coordinated_groups`` and the bridge
        has it already, or a JoinGroup creates it with Connect's protocol type. A consumer group
        whose id matches (a sink connector's ``connect-<name>`` matches ``connect.*``) stays the
        broker's: it joins with protocol type ``consumer``, and its offsets are the broker's.
        FindCoordinator is always the broker's answer (the real coordinator, as this bridge's
        listener for it): any listener answers the bridge's own groups."""
        if not self._matches(group_id):
            return False
        return group_id in self.coordinator.groups or joining_protocol_type == CONNECT_PROTOCOL_TYPE

    def _link(self, conn: _Connection) -> UpstreamLink | None:
        assert self.proxy is not None
        link = conn.links.get(conn.node_id)
        if link is None:
            broker = self.proxy.brokers.get(conn.node_id)
            if broker is None:
                log.warning("no upstream broker %s for %s", conn.node_id, conn.host)
                return None
            link = conn.links[conn.node_id] = UpstreamLink(broker)
        return link

    async def _forward_split(self, conn: _Connection, split: SplitRequest, started: float) -> bool:
        """Answer a request partly here and partly upstream, merged (``UpstreamCluster.split``)."""
        assert self.apis is not None
        request = decode_request(split.local, framed=False)
        local = self.apis.handle(request, Client(request.client_id or "", conn.host))
        link = self._link(conn)
        if link is None:
            return False
        try:
            frame = _SIZE.pack(len(split.remote)) + split.remote
            upstream = await link.send(frame, request.correlation_id, True)
        except OSError as exc:
            log.warning("closing %s: upstream broker %s unreachable: %s", conn.host, conn.node_id, exc)
            return False
        assert upstream is not None

        async def merged() -> bytes:
            return split.merge(local, bytes(memoryview(await upstream)[4:]))

        await self._respond(conn, None, asyncio.get_running_loop().create_task(merged()), 0, started)
        return True

    async def _forward(self, conn: _Connection, payload: bytes, started: float) -> bool:
        """Relay to the upstream broker behind this listener; False when the upstream is gone."""
        api_key, version, correlation = _PEEK.unpack_from(payload, 0)
        link = self._link(conn)
        if link is None:
            return False
        expects = not (api_key == PRODUCE and produce_acks(payload, version) == 0)
        try:
            future = await link.send(_SIZE.pack(len(payload)) + payload, correlation, expects)
        except OSError as exc:
            log.warning("closing %s: upstream broker %s unreachable: %s", conn.host, conn.node_id, exc)
            return False
        if future is not None:
            if api_key in REWRITTEN:
                loop = asyncio.get_running_loop()
                done = loop.create_task(self._finish_forward(future, api_key, version, correlation))
                await self._respond(conn, None, done, 0, started)
            else:  # the link's future resolves to the framed response: no task per Produce/Fetch
                await self._respond(conn, None, future, 0, started)
        return True

    async def _finish_forward(
        self, upstream: asyncio.Future[bytearray], api_key: int, version: int, correlation: int
    ) -> bytes:
        frame = await upstream  # framed (size prefix included)
        assert self.proxy is not None
        return self.proxy.rewrite(api_key, version, correlation, bytes(memoryview(frame)[4:]), 0)

    async def _respond(
        self, conn: _Connection, request: DecodedRequest | None, outcome: Any, seq: int, started: float
    ) -> None:
        """Answer in request order: directly when nothing is queued ahead and nothing must be
        waited for, else through the connection's sender task."""
        if conn.pending == 0 and not isinstance(outcome, asyncio.Future) and self.committer.is_durable(seq):
            conn.writer.write(self._encode(request, outcome, started))
            await conn.writer.drain()  # backpressure: stop reading while the client lags
            return
        conn.pending += 1
        # Only what the answer needs is queued, not the request's body: up to the in-flight limit
        # of large requests would otherwise stay in memory behind a parked one (issue 11.4).
        answering = (
            None
            if request is None
            else _Answering(request.api_key, request.api_version, request.correlation_id)
        )
        await conn.queue.put((answering, outcome, seq, started))

    async def _idle_watchdog(self, conn: _Connection) -> None:
        """Close a connection that sent nothing for the idle timeout (one timer per connection,
        not one per read: a timeout around every read costs more than the heartbeat itself)."""
        idle = self.options.idle_timeout_ms / 1000
        while True:
            remaining = conn.last_read + idle - time.monotonic()
            if remaining <= 0:
                # abort, not close: a client that never reads keeps close() waiting for a flush
                log.info("closing idle connection from %s", conn.host)
                conn.writer.transport.abort()
                return
            await asyncio.sleep(remaining)

    async def _send_loop(self, conn: _Connection) -> None:
        writer = conn.writer
        while True:
            item = await conn.queue.get()
            if item is None:
                return
            if isinstance(item, bytes):
                writer.write(item)
            else:
                request, outcome, seq, started = item
                if isinstance(outcome, asyncio.Future):
                    try:
                        outcome = await outcome
                    except Exception as exc:
                        # Upstream gone, or a forwarded response the bridge cannot rewrite: close,
                        # so the client sees EOF at once instead of waiting for its request timeout
                        # on a connection whose sender has died.
                        log.warning("closing a client connection: %s", exc)
                        writer.close()
                        return
                    seq = self.committer.written
                await self.committer.durable(seq)
                writer.write(self._encode(request, outcome, started))
            conn.pending -= 1
            conn.answered.set()
            await writer.drain()

    def _encode(self, request: DecodedRequest | _Answering | None, outcome: Any, started: float) -> bytes:
        """``outcome`` is a response message, or an already framed response (``request`` None)."""
        name = RELAYED if request is None else _api_name(request.api_key)
        if self.metrics is not None:
            # A relayed answer is not decoded: its error code is the broker's business (0 here).
            self.metrics.observe_request(
                name, time.perf_counter() - started, getattr(outcome, "error_code", 0)
            )
        if isinstance(outcome, Framed):
            return outcome.frame  # framed by the steady-heartbeat path
        if request is None or isinstance(outcome, bytes | bytearray):
            return outcome  # relayed
        if outcome.API_KEY != request.api_key:
            raise TypeError(f"{type(outcome).__name__} does not answer API key {request.api_key}")
        return encode_response_frame(request.api_key, request.api_version, request.correlation_id, outcome)

    # ------------------------------------------------------------------ metrics
    def _observe_fsync(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_fsync(seconds)

    def _observe_groups(self, records: list[Any]) -> None:
        """Refresh the metrics of the groups this step's records touched (records carry their group
        id): per step, work in proportion to what changed, not to how many groups exist (issue 11.6).
        A touched group that no longer exists has its series dropped. Once loaded, the first call
        observes every group (replay leaves no records behind), setting each one's baseline."""
        if getattr(self, "_groups_observed", False):
            touched = {r.group_id for r in records}
        elif self.loaded:
            self._groups_observed = True
            touched = {*self.coordinator.groups, *(r.group_id for r in records)}
        else:
            return
        for gid in touched:
            seen = self.coordinator.metrics_view(gid)
            if seen is None:
                self.metrics.forget_group(gid)
            else:
                self.metrics.observe_group_counts(gid, *seen)


class _RateLimited:
    """A warning that a client can trigger at will: logged at most once a second, with a count."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.suppressed = 0
        self.last = -1e9

    def log(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self.last < self.interval_s:
            self.suppressed += 1
            return
        more = f" ({self.suppressed} more since the last report)" if self.suppressed else ""
        log.warning(message + more, *args)
        self.last = now
        self.suppressed = 0


def _api_name(api_key: int) -> str:
    spec = api_spec(api_key)
    return spec.name if spec is not None else str(api_key)


def _unsupported_api_versions(apis: LocalApis) -> Any:
    response = apis.api_versions()
    response.error_code = 35
    return response
