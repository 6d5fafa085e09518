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
import logging
import signal
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from connect_bridge.bridge.committer import Committer
from connect_bridge.bridge.handlers import Client, LocalApis, Parked, now_ms
from connect_bridge.codecs.messages import api_spec
from connect_bridge.codecs.requests import (
    RequestDecodeError,
    decode_request,
    encode_response,
    encode_response_frame,
)
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import ConfigView

log = logging.getLogger("connect_bridge.server")
_SIZE = struct.Struct(">i")


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


class BridgeServer:
    def __init__(
        self, options: ServerOptions, store: Any, metrics: Any = None, clock: Callable[[], int] = now_ms
    ) -> None:
        self.options = options
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.coordinator = GroupCoordinator(options.coordinator)
        self.loaded = False
        self.committer = Committer(store, on_fsync=self._observe_fsync)
        self._server: asyncio.AbstractServer | None = None
        self._timer_wake = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._connections: set[asyncio.Task[Any]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._stopping = asyncio.Event()
        self.port = options.port
        self.apis: LocalApis | None = None
        self._pending_view: ConfigView | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self.committer.start()
        self._server = await asyncio.start_server(
            self._on_connection, self.options.host, self.options.port, limit=64 * 1024
        )
        self.port = self._server.sockets[0].getsockname()[1]
        advertised = (
            self.options.advertised_host or self.options.host,
            self.options.advertised_port or self.port,
        )
        self.apis = LocalApis(self.coordinator, advertised, self.after_step, lambda: self.loaded, self.clock)
        self._tasks.append(asyncio.get_running_loop().create_task(self._load(), name="load"))
        log.info("listening on %s:%d (advertised %s:%d)", self.options.host, self.port, *advertised)

    async def _load(self) -> None:
        records = await asyncio.get_running_loop().run_in_executor(None, self.store.load)
        self.coordinator.replay(records, self.clock())
        self.loaded = True
        if self._pending_view is not None:
            self.set_config_view(self._pending_view)
        log.info("loaded %d records; coordinating %d groups", len(records), len(self.coordinator.groups))
        self.after_step()
        self._tasks.append(asyncio.get_running_loop().create_task(self._timer_loop(), name="timers"))

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
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for writer in list(self._writers):
            writer.close()  # readers see EOF and their connection tasks finish on their own
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._connections, *self._tasks, return_exceptions=True)
        await self.committer.close()
        with contextlib.suppress(Exception):
            self.store.close()
        log.info("stopped")

    # ------------------------------------------------------------------ the coordinator side
    def after_step(self) -> None:
        """After any coordinator call: persist records, release parked responses, re-arm timers."""
        records = self.coordinator.drain_records()
        self.committer.submit(records)
        for token, response in self.coordinator.drain_responses():
            if isinstance(token, Parked) and not token.future.done():
                token.future.set_result(token.to_wire(response, token.version))
        if records and self.metrics is not None:
            self._observe_groups()
        self._timer_wake.set()

    async def _timer_loop(self) -> None:
        while True:
            deadline = self.coordinator.next_deadline()
            timeout = None if deadline is None else max(0.0, (deadline - self.clock()) / 1000)
            self._timer_wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_wake.wait(), timeout)
            now = self.clock()
            deadline = self.coordinator.next_deadline()
            if deadline is not None and deadline <= now:
                self.coordinator.advance(now)
                self.after_step()

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
    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.options.max_connections:
            log.warning("connection limit %d reached: closing a new connection", self.options.max_connections)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        if self.metrics is not None:
            self.metrics.connections.inc()
        peer = writer.get_extra_info("peername")
        host = f"/{peer[0]}" if peer else ""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        sender = asyncio.get_running_loop().create_task(self._send_loop(queue, writer))
        try:
            await self._read_loop(reader, queue, host)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            await queue.put(None)
            with contextlib.suppress(Exception):
                await sender
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._connections.discard(task)
            self._writers.discard(writer)
            if self.metrics is not None:
                self.metrics.connections.dec()

    async def _read_loop(self, reader: asyncio.StreamReader, queue: asyncio.Queue[Any], host: str) -> None:
        idle = self.options.idle_timeout_ms / 1000
        while True:
            try:
                size_bytes = await asyncio.wait_for(reader.readexactly(4), idle)
            except TimeoutError:
                log.info("closing idle connection from %s", host)
                return
            except asyncio.IncompleteReadError:
                return
            (size,) = _SIZE.unpack(size_bytes)
            if size < 0 or size > self.options.max_frame_bytes:
                log.warning(
                    "closing %s: frame of %d bytes (limit %d)", host, size, self.options.max_frame_bytes
                )
                return
            payload = await reader.readexactly(size)
            started = self.clock()
            try:
                request = decode_request(payload, framed=False)
            except RequestDecodeError as exc:
                if exc.answerable and exc.correlation_id is not None:
                    assert self.apis is not None
                    frame = encode_response_frame(
                        18, 0, exc.correlation_id, _unsupported_api_versions(self.apis)
                    )
                    await queue.put(frame)
                    continue
                log.warning("closing %s: %s", host, exc)
                return
            try:
                assert self.apis is not None
                outcome = self.apis.handle(request, Client(request.client_id or "", host))
            except Exception as exc:  # bad input must never kill the server
                log.warning(
                    "closing %s: cannot handle %s v%d: %s",
                    host,
                    api_spec(request.api_key).name,
                    request.api_version,
                    exc,
                )
                return
            await queue.put((request, outcome, self.committer.written, started))

    async def _send_loop(self, queue: asyncio.Queue[Any], writer: asyncio.StreamWriter) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            if isinstance(item, bytes):
                writer.write(item)
                await writer.drain()
                continue
            request, outcome, seq, started = item
            if isinstance(outcome, asyncio.Future):
                outcome = await outcome
                seq = self.committer.written
            await self.committer.durable(seq)
            if self.metrics is not None:
                self.metrics.observe_request(
                    api_spec(request.api_key).name, self.clock() - started, getattr(outcome, "error_code", 0)
                )
            writer.write(encode_response(request, outcome))
            await writer.drain()

    # ------------------------------------------------------------------ metrics
    def _observe_fsync(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_fsync(seconds)

    def _observe_groups(self) -> None:
        for gid in list(self.coordinator.groups):
            described = self.coordinator.describe_any(gid)
            members = [
                (getattr(m, "protocol", "classic"), getattr(m, "state", "")) for m in described.members
            ]
            epoch = getattr(
                described, "group_epoch", getattr(self.coordinator.groups[gid], "generation_id", 0)
            )
            self.metrics.observe_group(gid, epoch, members)


def _unsupported_api_versions(apis: LocalApis) -> Any:
    response = apis.api_versions()
    response.error_code = 35
    return response
