"""The bridge process: an asyncio Kafka-protocol server in front of the pure coordinator.

One event loop owns the coordinator, so requests from every connection are serialized into it.
A connection takes a slot when accepted, before its TLS handshake (``edge.accept``). Per
connection a reader decodes frames (size checked before buffering; smaller limits before
authentication), one request in flight for the bridge's own answers, and queues, in request
order, either a ready response or a future of one; a writer sends them in that same order, each
only after the records it may reveal are durable (``Committer``). Timers run from a task that
sleeps until the coordinator's next deadline. Records are replayed before group APIs are served
(COORDINATOR_LOAD_IN_PROGRESS meanwhile). Every change to the coordinator goes through one
``runtime.CoordinatorRuntime``, which checks requests, submits records, completes parked requests
and wakes the timer loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import secrets
import signal
import ssl
import struct
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from connect_bridge.bridge.coordination.api_table import API_NAMES, DECODED_FOR_ROUTING, Answer
from connect_bridge.bridge.coordination.fastpath import Framed, SteadyHeartbeats
from connect_bridge.bridge.coordination.handlers import Client, LocalApis, now_ms
from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime
from connect_bridge.bridge.edge.accept import (
    ConnectionSlots,
    Listener,
    RateLimited,
    Slot,
    divert,
    start_listener,
)
from connect_bridge.bridge.edge.connection import (
    AcceptFailures,
    Answering,
    Connection,
    Outcome,
    authentication_deadline,
    connections_the_open_files_allow,
    idle_watchdog,
)
from connect_bridge.bridge.edge.decoding import FrameDecoder
from connect_bridge.bridge.edge.frames import FrameAdmission
from connect_bridge.bridge.edge.sasl_gate import Admission, SaslGate
from connect_bridge.bridge.ha.owners import BridgeAddress
from connect_bridge.bridge.ha.partitions import HighAvailability, membership_factory
from connect_bridge.bridge.metrics import RELAYED, Metrics
from connect_bridge.bridge.proxy.listeners import (
    LISTEN_BUFFER,
    BrokerListeners,
    forward_observed,
    forward_upstream,
    proxy_mode,
)
from connect_bridge.bridge.proxy.relay import Relay
from connect_bridge.bridge.security.tls import certificate_principal
from connect_bridge.bridge.server_options import ServerOptions
from connect_bridge.bridge.startup import bind_error
from connect_bridge.bridge.stores.committer import Committer, Fenced
from connect_bridge.bridge.stores.store import RecordStore, StoreError
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.messages import ApiKey, api_spec
from connect_bridge.codecs.requests import (
    DecodedRequest,
    RequestDecodeError,
    encode_response_frame,
    request_api_key,
    request_header_fields,
)
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import ConfigView
from connect_bridge.state.result import CoordinatorResult

__all__ = ["BridgeServer", "ServerOptions"]

if TYPE_CHECKING:  # imported only when adoption is configured (``proxy.listeners``)
    from connect_bridge.bridge.adoption.wiring import Adoption

log = logging.getLogger("connect_bridge.server")
_SIZE = struct.Struct(">i")
_NONE = int(ErrorCode.NONE)


class BridgeServer:
    """The listeners, the connections and the one coordinator they all feed (see the module doc)."""

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
        self.failure: str | None = None
        """Why the bridge stopped itself (a background task or the store failed); None while healthy."""
        self._refused = RateLimited()
        self._unauthenticated_closed = RateLimited()
        self.slots = ConnectionSlots(options.max_connections, options.connections)
        """Who holds a connection slot, counted from accept (before the TLS handshake)."""
        self.ha: HighAvailability | None = None
        """``ha.enabled`` in proxy mode: the partitions this bridge holds and the gate in front of
        their groups (the runtime's ``gate``, the relay's ``may_forward``)."""
        if options.ha is not None and options.upstream:
            self.ha = HighAvailability(options.ha, store, self.apply_view_to, self.fatal, metrics)
        self.committer = Committer(
            store,
            on_fsync=self._observe_fsync,
            on_failure=self._store_failed,
            on_fenced=self.ha.fenced if self.ha is not None else None,
        )
        self.runtime = CoordinatorRuntime(
            GroupCoordinator(config),
            self.committer,
            clock,
            fatal=self.fatal,
            metrics=metrics,
            authorizer=options.authorizer,
            limits=options.limits,
            gate=self.ha,
            view_behind=self._view_behind,
        )
        """The one way into the coordinator (``runtime``): handlers, fast path, timers, HA, adoption."""
        self._server: Listener | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._connections: set[asyncio.Task[Any]] = set()
        self.open_connections: set[Connection] = set()
        self._resuming: set[asyncio.Task[None]] = set()
        """Connections the steady lane paused for back-pressure, waiting to resume (``_steady_lane``)."""
        self._stopping = asyncio.Event()
        self.port = options.port
        self.apis: LocalApis | None = None
        self._pending_view: ConfigView | None = None
        self.config_refresh: Callable[[], None] | None = None
        """Asks the config view source to read again at once (``ViewDelivery.refresh``; set by
        ``app.run``): called when a member reports a config offset its group's view has not reached."""
        self.relay: Relay | None = None
        """Proxy mode: routes requests between the bridge and the upstream cluster."""
        self.adoption: Adoption | None = None
        """Proxy mode with ``adoption.groups``: relays, observes and takes groups over (issue 16)."""
        self.sasl: SaslGate | None = None
        """``sasl.mode`` passthrough or terminated: authenticates every connection (edge/sasl_gate.py)."""
        self._bootstrap_node = 0
        self.broker_listeners: BrokerListeners | None = None
        """Proxy mode: the relay listener of every upstream broker, opened as brokers appear."""

    @property
    def coordinator(self) -> GroupCoordinator:
        return self.runtime.coordinator

    @property
    def loaded(self) -> bool:
        """Whether the saved state is replayed (group APIs are answered only then)."""
        return self.runtime.loaded

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Listen (and discover the upstream cluster in proxy mode); the state loads in the background."""
        loop = asyncio.get_running_loop()
        self.options.max_connections = connections_the_open_files_allow(self.options.max_connections)
        self.slots = ConnectionSlots(self.options.max_connections, self.options.connections)
        loop.set_exception_handler(AcceptFailures())
        self.committer.start()
        self._server = await self._bind()
        self.port = self._server.sockets[0].getsockname()[1]
        if self.ha is not None and self.ha.node_id is None:
            self.ha.node_id = self.port  # named by its listen port unless ``ha.node_id`` says
        advertised = (
            self.options.advertised_host or self.options.host,
            self.options.advertised_port or self.port,
        )
        node = 0
        if self.options.upstream:
            proxy = proxy_mode(self, advertised[0])
            self.relay, self.adoption, self.broker_listeners = proxy.relay, proxy.adoption, proxy.listeners
            node = self._bootstrap_node = await proxy.start()
            advertised = (advertised[0], proxy.relay.cluster.advertised_port(node))
        self._set_up_handlers(advertised, node)
        self._tasks.append(self.supervise(self._load(), "loading the state"))
        # Not before: in proxy mode the upstream may take a while to answer (retried), and a
        # connection accepted meanwhile would meet a server without its request handlers.
        for server in self._listeners():
            await server.start_serving()
        if self.broker_listeners is not None:
            self.broker_listeners.start_serving()
            refresh_s = self.options.upstream_metadata_refresh_ms / 1000
            self._tasks.append(self.supervise(self.broker_listeners.watch(refresh_s), "the upstream refresh"))
        log.info("listening on %s:%d (advertised %s:%d)", self.options.host, self.port, *advertised)

    async def _bind(self) -> Listener:
        """The worker listener, bound but not accepting yet: a port in use fails ``start`` here,
        before anything else is set up; accepting starts once the handlers exist."""
        try:
            return await self.listen(self.options.port)
        except OSError as exc:  # a port in use, an address not on this host
            raise bind_error("listen", self.options.host, self.options.port, exc, "--listen") from None

    async def listen(self, port: int, node_id: int | None = None) -> Listener:
        """A listener on ``port`` (not accepting yet) whose connections take a slot when accepted,
        before their TLS handshake (``edge.accept``); ``node_id``: the upstream broker it stands for."""
        return await start_listener(
            functools.partial(self._on_connection, node_id=node_id),
            self.options.host,
            port,
            self.slots,
            tls=self._listener_ssl,
            handshake_timeout_ms=self.options.connections.tls_handshake_timeout_ms,
            limit=LISTEN_BUFFER,
            refused=self._refused,
            sasl=self.options.sasl is not None and self.options.sasl.enabled,
            backlog=self.options.connections.listen_backlog,
        )

    def _set_up_handlers(self, advertised: tuple[str, int], node: int) -> None:
        """What every connection meets, built before the first is accepted: the local APIs, the
        fast path, the HA gate in front of them, SASL and the frame checks."""
        self.apis = LocalApis(
            self.runtime,
            advertised,
            node_id=node,
            advertised_versions=self.relay.cluster.advertised_versions if self.relay else None,
            limits=self.options.limits,
        )
        self.steady = SteadyHeartbeats(self.runtime, limit_bytes=self.options.heartbeat_cache_bytes)
        if self.options.sasl is not None and self.options.sasl.enabled:
            relay = self.relay
            self.sasl = SaslGate(
                self.options.sasl,
                self.clock,
                lambda conn, answering, out: self._respond(conn, answering, out, 0, time.perf_counter()),
                relay.forward if relay is not None else None,
                metrics=self.metrics,
                max_unauthenticated_frame_bytes=self.options.connections.max_unauthenticated_frame_bytes,
            )
        self.decoder = FrameDecoder(self.options.limits)
        self.frames = FrameAdmission(self.options, self.decoder)
        self._lane_max_frame = min(
            self.frames.plain_bytes, self.options.max_frame_bytes, self.steady.max_frame
        )
        """Frames up to this size may take the steady lane: within every limit the read loop checks."""

    def _listeners(self) -> list[Listener]:
        """The worker listener and, in proxy mode, every relay listener opened so far."""
        opened = self.broker_listeners.opened if self.broker_listeners is not None else []
        return [listener for listener in [self._server, *opened] if listener is not None]

    @property
    def _listener_ssl(self) -> ssl.SSLContext | None:
        """The TLS context of every listener (worker and proxy): one, which reloads per handshake."""
        return self.options.tls.context if self.options.tls is not None else None

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
        self.runtime.load(records)
        if self._pending_view is not None:
            self.set_config_view(self._pending_view)
        log.info("loaded %d records; coordinating %d groups", len(records), len(self.coordinator.groups))
        self._tasks.append(self.supervise(self.runtime.timer_loop(), "the timer loop"))
        if self.ha is not None:  # partitions (and their groups) arrive through the bridges' group
            assert self.apis is not None and self.relay is not None
            options = self.options
            me = BridgeAddress(self.ha.node_id, self.apis.advertised[0], self.relay.cluster.advertised_base)
            self.ha.start(self.runtime, membership_factory(options.ha, options, me))
            self._tasks.append(self.supervise(self.ha.watch(), "the partition map watch"))
        if self.adoption is not None:
            for group_id in self.coordinator.ownership.snapshot():
                self.adoption.observe_phase(group_id)
            self._tasks.append(self.supervise(self.adoption.watch(), "the adoption watch"))

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop gracefully (in-flight answers written, the store flushed)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self._stopping.set)

    async def serve_until_stopped(self) -> None:
        """Serve until a signal, :meth:`request_stop` or :meth:`fatal`, then stop."""
        await self._stopping.wait()
        await self.stop()

    async def drain(self) -> None:
        """Several bridges: hand every partition on now, then stop (``POST /admin/drain``)."""
        if self.ha is not None:
            await self.ha.drain()
        self.request_stop()

    @property
    def stopping(self) -> bool:
        """A stop was asked for (a signal, :meth:`request_stop` or :meth:`fatal`)."""
        return self._stopping.is_set()

    def request_stop(self) -> None:
        """Ask :meth:`serve_until_stopped` to stop (safe from any task on the loop)."""
        self._stopping.set()

    async def stop(self) -> None:
        """Graceful shutdown: stop accepting, finish in-flight writes, flush the store."""
        for server in self._listeners():
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
        if self.adoption is not None:
            await self.adoption.close()
        if self.ha is not None:  # hands the partitions on (LeaveGroup) after their writes are durable
            await self.ha.close()
        await self.committer.close()
        self.decoder.close()
        with contextlib.suppress(Exception):
            self.store.close()
        log.info("stopped")

    # ------------------------------------------------------------------ the coordinator side
    def _view_behind(self) -> None:
        """A member reported a config offset its group's view has not reached: read it again now."""
        if self.config_refresh is not None:
            self.config_refresh()

    def set_config_view(self, view: ConfigView) -> None:
        """A new config view (from the watched file or the config topic)."""
        self.coordinator.default_view = view
        self._pending_view = view
        if self.loaded:
            group = self.options.config_group
            self.apply_view_to([group] if group else list(self.coordinator.groups))

    def apply_view_to(self, group_ids: Iterable[str]) -> None:
        """Give the groups the current config view (``config_view.group`` only, if set); with several
        bridges, only groups this bridge coordinates now (others get it when their partition loads)."""
        view, config_group = self._pending_view, self.options.config_group
        if view is None:
            return
        now = self.clock()
        runtime = self.runtime

        def give_view(coordinator: GroupCoordinator) -> None:
            for gid in group_ids:
                if config_group and gid != config_group:
                    continue
                if runtime.refusal(gid) is not None:
                    continue
                coordinator.set_config(gid, view, now)

        runtime.run(give_view)

    # ------------------------------------------------------------------ connections
    async def _on_connection(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        slot: Slot,
        node_id: int | None = None,
    ) -> None:
        try:
            await self._serve_connection(reader, writer, slot, node_id)
        finally:
            self.slots.release(slot)

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slot: Slot, node_id: int | None
    ) -> None:
        """One connection after its slot was taken (and its TLS handshake done): reader, sender and
        watchdogs until it ends."""
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        if self.metrics is not None:
            self.metrics.connections.inc()
        peer = writer.get_extra_info("peername")
        conn = Connection(reader, writer, f"/{peer[0]}" if peer else "", slot=slot)
        if self.options.tls is not None:
            principal = certificate_principal(writer.get_extra_info("peercert"))
            if principal is not None:  # verified by the handshake (client_auth requested/required)
                conn.principal = principal
        conn.node_id = self._bootstrap_node if node_id is None else node_id
        # Kafka mutes a connection while a response is unsent: with these limits drain() waits
        # until every answer byte was handed to the socket, so a client that does not read its
        # answers is not read from either (and costs nothing more than its slot). Not high=0: TLS
        # transports (asyncio's and uvloop's) pause at a buffered size >= high, so an empty buffer
        # paused the writer and only the next bytes read resumed it; a client that pipelined its
        # requests and then waited never got the later answers.
        writer.transport.set_write_buffer_limits(high=1, low=0)
        slot.wake = conn.answered.set
        if self.sasl is None:  # with SASL every frame passes the gate first (the read loop's)
            divert(writer, functools.partial(self._steady_lane, conn))
        self.open_connections.add(conn)
        loop = asyncio.get_running_loop()
        sender = loop.create_task(self._send_loop(conn))
        watchdog = loop.create_task(idle_watchdog(conn, self.options.idle_timeout_ms / 1000))
        deadline: asyncio.Task[None] | None = None
        if self._still_unauthenticated(conn):
            timeout_s = self.options.connections.authentication_timeout_ms / 1000
            closed = self._unauthenticated_closed
            deadline = loop.create_task(authentication_deadline(conn, slot.accepted + timeout_s, closed))
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
            if deadline is not None:
                deadline.cancel()
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
            if self.adoption is not None:
                self.adoption.connection_closed(conn)
            if self.metrics is not None:
                self.metrics.connections.dec()

    def _still_unauthenticated(self, conn: Connection) -> bool:
        """Whether ``conn`` must still authenticate (a listener with SASL, its exchange not completed);
        once it has, its slot stops counting as unauthenticated (``connection_settings``)."""
        if self.sasl is not None and not conn.authenticated:
            return True
        if conn.slot is not None:
            self.slots.authenticated(conn.slot)
        return False

    def _muted(self, conn: Connection, unauthenticated: bool) -> bool:
        """Whether the next request must wait for answers to go out first. As Kafka's broker, one
        request in flight: an answer of the bridge's own (or any answer before authentication) must
        be written before the next request is read. Relayed requests pipeline, up to
        ``limits.max_inflight_per_connection``, as they would to the broker over the network."""
        if conn.pending >= self.options.max_inflight_per_connection:
            return True
        return conn.pending > 0 and (conn.pending_here > 0 or unauthenticated)

    async def _read_loop(self, conn: Connection) -> bool:
        """Serve requests until the peer closes (False) or a frame the bridge closes on (True)."""
        reader = conn.reader
        options = self.options
        frames = self.frames
        runtime = self.runtime
        consumed = 0
        """Bytes of the frames read so far (size prefixes included)."""
        unauthenticated = True
        """Whether the connection must still authenticate: once it has, it stays so
        (``Connection.authenticated`` is never reset), so it is no longer asked about per frame."""
        while True:
            # One request per connection per turn of the loop: frames already buffered would
            # otherwise be served back to back without yielding, and a client pipelining many
            # would hold the loop while new clients wait for their ApiVersions. When nothing more
            # has arrived, reading the next size prefix waits (the loop turns) anyway: a client
            # that waits for each answer costs no extra turn.
            if conn.slot is None or conn.slot.received > consumed:
                await asyncio.sleep(0)
            if unauthenticated:
                unauthenticated = self._still_unauthenticated(conn)
            while conn.pending and self._muted(conn, unauthenticated):  # the in-flight limit is >= 1
                conn.answered.clear()
                if conn.slot is None or not conn.slot.gone:
                    await conn.answered.wait()
                if conn.writer.transport.is_closing() or (conn.slot is not None and conn.slot.gone):
                    return False  # closed while waiting (peer gone, idle, stop): nothing more to read
                if unauthenticated:
                    unauthenticated = self._still_unauthenticated(conn)
            # Nothing of a next frame buffered: a chunk arriving while this waits starts one.
            conn.between_frames = conn.slot is not None and conn.slot.received == consumed
            try:
                size_bytes = await reader.readexactly(4)
            except asyncio.IncompleteReadError:
                return False
            finally:
                conn.between_frames = False
            conn.last_read = time.monotonic()
            (size,) = _SIZE.unpack(size_bytes)
            if unauthenticated:
                unauthenticated = self._still_unauthenticated(conn)
            limit = options.max_frame_bytes
            if unauthenticated and options.connections.max_unauthenticated_frame_bytes < limit:
                # Checked on the size prefix, before anything of the frame is read (Kafka's
                # sasl.server.max.receive.size): a peer without credentials reserves nothing.
                limit = options.connections.max_unauthenticated_frame_bytes
                name = "connections.max_unauthenticated_frame_bytes, before authentication"
            else:
                name = "max_frame_bytes"
            if size < 0 or size > limit:
                log.warning("closing %s: frame of %d bytes (limit %d, %s)", conn.host, size, limit, name)
                return True
            if not unauthenticated and size <= frames.plain_bytes:
                payload = await reader.readexactly(size)
            else:
                if frames.unbudgeted(size, authenticated=not unauthenticated):
                    payload = await reader.readexactly(size)
                else:
                    payload = await frames.read_payload(conn, size, authenticated=not unauthenticated)
                if payload is None or frames.over_bound(conn, payload, size):
                    return True
            consumed += 4 + size
            started = time.perf_counter()
            if self.sasl is not None:  # before anything answers: SASL first, then the session's expiry
                admitted = await self.sasl.admit(conn, payload)
                if admitted is Admission.CLOSE:
                    return True
                if admitted is Admission.DONE:
                    continue
            if len(payload) >= 8 and runtime.fast_path_open(conn.principal):
                try:
                    answered = self.steady.answer(payload)
                except Exception:  # anything odd takes the full path, which reports it properly
                    answered = None
                if answered is not None:
                    framed, result = answered
                    if self._write_steady(conn, framed, result, started):
                        # Back-pressure: stop reading while the client lags. Only bytes the socket
                        # did not take can pause the writer (limits high=1, low=0), so with none
                        # left there is nothing to wait for (a peer gone shows at the next read).
                        if conn.writer.transport.get_write_buffer_size():
                            await conn.writer.drain()
                    else:
                        answering = Answering(*request_header_fields(payload))
                        runtime.settle_steady(result)
                        self._enqueue(conn, answering, framed, self.committer.written, started)
                    continue
            if not await self._serve(conn, payload, started):
                return True

    def _steady_lane(self, conn: Connection, data: bytes) -> bool:
        """Answer a steady heartbeat straight from the event loop's callback (``accept.divert``),
        when ``data`` is exactly one whole frame arriving while the read loop waits for the next
        one and nothing is queued ahead: the read loop would do the same with it (fast path,
        :meth:`_write_steady`), only after a stream reader, a future and a task switch, which cost
        as much as the answer. False leaves ``data`` to the read loop (with nothing changed): a
        partial or pipelined frame, any other request, anything the fast path does not answer."""
        if not conn.between_frames or conn.pending or len(data) < 12:
            return False
        (size,) = _SIZE.unpack_from(data)
        if size + 4 != len(data) or size > self._lane_max_frame:
            return False
        runtime, committer = self.runtime, self.committer
        transport = conn.writer.transport
        if (
            not runtime.fast_path_open(conn.principal)
            or not committer.is_durable(committer.written)
            or transport.get_write_buffer_size()
            or transport.is_closing()
        ):
            return False
        started = time.perf_counter()
        payload = data[4:]
        try:
            answered = self.steady.answer(payload)
        except Exception:  # anything odd takes the full path, which reports it properly
            return False
        if answered is None:
            return False
        conn.last_read = time.monotonic()
        framed, result = answered
        if result is None or committer.is_durable(committer.written):
            # :meth:`_write_steady`, whose checks were made above (a step without a result
            # submitted no records: what was durable still is).
            transport.write(framed.frame)
            if self.metrics is not None:
                self.metrics.observe_request(framed.api, time.perf_counter() - started, framed.error_code)
            runtime.settle_steady(result)
            if not transport.get_write_buffer_size():
                return True
        else:  # records to make durable first: the sender writes it once they are (as _respond)
            runtime.settle_steady(result)
            answering = Answering(*request_header_fields(payload))
            self._enqueue(conn, answering, framed, committer.written, started)
        # The read loop would now wait for this answer to go out (muted, one request in flight) and
        # for the client to take it (back-pressure) before reading on: so is the connection read.
        if transport.is_closing():  # the write failed: the read loop sees the connection end
            return True
        transport.pause_reading()
        resuming = asyncio.get_running_loop().create_task(self._resume_when_answered(conn))
        self._resuming.add(resuming)  # held until done (the loop keeps only weak references)
        resuming.add_done_callback(self._resuming.discard)
        return True

    @staticmethod
    async def _resume_when_answered(conn: Connection) -> None:
        """Resume reading a connection the steady lane paused once every answer it owes went out
        and the socket took all of it."""
        transport = conn.writer.transport
        while conn.pending and not transport.is_closing():
            conn.answered.clear()
            await conn.answered.wait()
        with contextlib.suppress(ConnectionError):
            await conn.writer.drain()
        if not transport.is_closing():
            transport.resume_reading()

    def _write_steady(
        self, conn: Connection, framed: Framed, result: CoordinatorResult[Any] | None, started: float
    ) -> bool:
        """:meth:`_respond`'s direct case for the steady-heartbeat path's answer, without a
        coroutine of its own: written at once when nothing is queued ahead and nothing must be
        waited for (every steady heartbeat of a worker that waits for its answers), counted under
        the API name ``framed`` carries; False when it must go through :meth:`_respond` instead
        (nothing done then). ``result``: what the step left to settle (``submit_steady``), settled
        once the answer is written, off the path of a worker waiting for it (and before anything
        else runs). The caller sees to back-pressure after a True."""
        if conn.pending or not self.committer.is_durable(self.committer.written):
            return False
        seconds = time.perf_counter() - started
        conn.writer.write(framed.frame)
        # Counted once written: the metrics cost the worker waiting for this answer nothing.
        if self.metrics is not None:
            self.metrics.observe_request(framed.api, seconds, framed.error_code)
        self.runtime.settle_steady(result)
        return True

    async def _serve(self, conn: Connection, payload: bytes, started: float) -> bool:
        """Answer one request here or relay it upstream; False when the connection must close."""
        decoded: DecodedRequest | RequestDecodeError | None = None
        relay = self.relay
        if relay is not None and len(payload) >= 10:
            api_key = request_api_key(payload)
            if api_key in DECODED_FOR_ROUTING:
                decoded = await self.decoder.decode(payload)
            adoption = self.adoption
            adopting = adoption is not None and self.loaded and isinstance(decoded, DecodedRequest)
            asked = adoption.rejoin_answer(api_key, decoded) if adopting else None
            if asked is not None:  # a relayed member asked to rejoin, answered here
                await self._respond(conn, decoded, asked, self.committer.written, started)
                return True
            if adopting and await adoption.before_routing(conn, api_key, decoded):
                return await forward_observed(relay, adoption, self._respond, conn, payload, decoded, started)
            owed_round = adopting and adoption.owed_round(api_key, decoded)
            if not owed_round and not relay.answers_locally(api_key, decoded):
                return await forward_upstream(relay, self._respond, conn, payload, api_key, started)
        if decoded is None:
            decoded = await self.decoder.decode(payload)
        if isinstance(decoded, RequestDecodeError):
            if not (decoded.answerable and decoded.correlation_id is not None):
                log.warning("closing %s: %s", conn.host, decoded)
                return False
            conn.pending += 1
            conn.pending_here += 1
            await conn.queue.put(self._unsupported_version(decoded.correlation_id))
            return True
        try:
            outcome = self._answer_here(decoded, conn)
        except Exception as exc:  # bad input must never kill the server
            name, version = api_spec(decoded.api_key).name, decoded.api_version
            log.warning("closing %s: cannot handle %s v%d: %s", conn.host, name, version, exc)
            return False
        await self._respond(conn, decoded, outcome, self.committer.written, started)
        return True

    def _answer_here(self, request: DecodedRequest, conn: Connection) -> Answer:
        assert self.apis is not None
        return self.apis.handle(request, Client(request.client_id or "", conn.host, conn.principal))

    def _unsupported_version(self, correlation_id: int) -> bytes:
        """ApiVersions v0 with UNSUPPORTED_VERSION, which any client can read (KIP-511)."""
        assert self.apis is not None
        response = self.apis.api_versions()
        response.error_code = int(ErrorCode.UNSUPPORTED_VERSION)
        return encode_response_frame(ApiKey.API_VERSIONS, 0, correlation_id, response)

    async def _respond(
        self,
        conn: Connection,
        request: DecodedRequest | Answering | None,
        outcome: Outcome,
        seq: int,
        started: float,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Answer in request order: directly when nothing is queued ahead and nothing must be
        waited for, else through the connection's sender task. ``then``: work no answer waits for,
        run right after the answer is written (or queued), before anything else runs."""
        if conn.pending == 0 and not isinstance(outcome, asyncio.Future) and self.committer.is_durable(seq):
            frame = self._frame(request, outcome)
            seconds = time.perf_counter() - started
            conn.writer.write(frame)
            # Counted once written: the metrics cost the worker waiting for this answer nothing.
            self._observe(request, outcome, seconds)
            if then is not None:
                then()
            await conn.writer.drain()  # backpressure: stop reading while the client lags
            return
        if then is not None:
            then()
        self._enqueue(conn, request, outcome, seq, started)

    @staticmethod
    def _enqueue(
        conn: Connection,
        request: DecodedRequest | Answering | None,
        outcome: Outcome,
        seq: int,
        started: float,
    ) -> None:
        """Queue an answer for the connection's sender (its queue has no bound: this never waits)."""
        conn.pending += 1
        if request is not None:
            conn.pending_here += 1
        # Only what the answer needs is queued, not the request's body: up to the in-flight limit
        # of large requests would otherwise stay in memory behind a parked one (issue 11.4).
        answering = request and Answering(request.api_key, request.api_version, request.correlation_id)
        conn.queue.put_nowait((answering, outcome, seq, started))

    async def _send_loop(self, conn: Connection) -> None:
        try:
            await self._send_queued(conn)
        finally:
            conn.answered.set()  # a reader waiting for answers to go out wakes up and sees why

    async def _send_queued(self, conn: Connection) -> None:
        writer = conn.writer
        while True:
            item = await conn.queue.get()
            if conn.direct is not None and conn.direct.owed:
                await conn.direct.idle()  # relayed answers of earlier requests go first
            if item is None:
                return
            here = True
            if isinstance(item, bytes):
                writer.write(item)
            else:
                request, outcome, seq, started = item
                here = request is not None
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
                try:
                    await self.committer.durable(seq)
                except Fenced as exc:  # another bridge owns the group now: never reveal this answer
                    log.warning("closing a client connection: %s", exc)
                    writer.transport.abort()
                    return
                writer.write(self._encode(request, outcome, started))
            await writer.drain()  # the answer is unsent until the socket took all of it
            conn.pending -= 1
            if here:
                conn.pending_here -= 1
            conn.answered.set()

    def _encode(self, request: DecodedRequest | Answering | None, outcome: Outcome, started: float) -> bytes:
        """``outcome`` is a response message, or an already framed response (``request`` None)."""
        self._observe(request, outcome, time.perf_counter() - started)
        return self._frame(request, outcome)

    def _observe(self, request: DecodedRequest | Answering | None, outcome: Outcome, seconds: float) -> None:
        """Count one answer, ``seconds`` after its request arrived."""
        if self.metrics is not None:
            # A relayed answer is not decoded: its error code is the broker's business (NONE here).
            name = RELAYED if request is None else API_NAMES.get(request.api_key) or str(request.api_key)
            self.metrics.observe_request(name, seconds, getattr(outcome, "error_code", _NONE))

    @staticmethod
    def _frame(request: DecodedRequest | Answering | None, outcome: Outcome) -> bytes:
        """The answer's bytes: ``outcome`` is a response message, or an already framed response."""
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
