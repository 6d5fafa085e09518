"""A live new-protocol Connect worker: :class:`NewProtocolWorker` over a real connection (asyncio).

The group logic is the I/O-free :class:`~connect_bridge.workers.new_protocol.NewProtocolWorker` the
simulator drives; this class only moves its ConnectGroupHeartbeat requests over a
:class:`~connect_bridge.wire.client.KafkaConnection` and keeps time:

* heartbeats at the interval the coordinator returns, and at once after a revocation (the ack);
* a connection error (refused, reset, timed out) is handled like a COORDINATOR_NOT_AVAILABLE answer:
  drop the connection, retry every heartbeat interval, reconnecting each time;
* the worker fences itself when its session must have expired at the coordinator
  (:meth:`NewProtocolWorker.expire_session`), whether or not it can reach the bridge;
* :meth:`LiveNewWorker.stop` stops all work and then leaves (member epoch -1);
  :meth:`LiveNewWorker.crash` just closes the socket.

Every change of running work is reported through ``on_event(type, **fields)`` with ``type`` one of
``run`` / ``release`` (``connector``, ``task``) or ``epoch`` (``epoch``), releases before runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state import api
from connect_bridge.state.model import Items
from connect_bridge.wire import maps as wm
from connect_bridge.wire.client import KafkaConnection, find_coordinator
from connect_bridge.workers.new_protocol import NewProtocolWorker, Reaction

__all__ = ["HEARTBEAT_VERSION", "EventSink", "LiveNewWorker", "monotonic_ms"]

log = logging.getLogger("connect_bridge.workers.live_new")

HEARTBEAT_VERSION = 0
_UNAVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)

EventSink = Callable[..., None]
"""``on_event(type, **fields)``."""


_MOVED = frozenset({int(ErrorCode.NOT_COORDINATOR), int(ErrorCode.COORDINATOR_NOT_AVAILABLE)})
"""Answers after which a client looks for the group's coordinator again."""


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def emit_items(on_event: EventSink, stop: Items, start: Items) -> None:
    """``release`` for every stopped item, then ``run`` for every started one (sorted)."""
    for connector, task in sorted(stop):
        on_event("release", connector=connector, task=task)
    for connector, task in sorted(start):
        on_event("run", connector=connector, task=task)


class LiveNewWorker:
    """One new-protocol worker connected to a bridge at ``host:port``."""

    def __init__(
        self,
        host: str,
        port: int,
        group_id: str,
        url: str,
        on_event: EventSink,
        *,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        heartbeat_interval_ms: int = 3_000,
        config_offset: int = -1,
        client_id: str = "connect-bridge-worker",
        clock: Callable[[], int] = monotonic_ms,
        request_timeout_ms: int | None = None,
        bootstrap: list[tuple[str, int]] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.bootstrap = bootstrap
        """Several bridges: ask these for the group's coordinator (FindCoordinator) and follow it
        after NOT_COORDINATOR or a lost connection, as a Java client does; None: ``host:port`` is
        the coordinator."""
        self.on_event = on_event
        self.clock = clock
        self.client_id = client_id
        self.logic = NewProtocolWorker(
            group_id=group_id,
            url=url,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            config_offset=config_offset,
            member_id=str(uuid.uuid4()),  # client-chosen, as the spec asks (non-empty MemberId)
        )
        self.logic._last_interval = heartbeat_interval_ms
        self.retry_interval_ms = heartbeat_interval_ms
        self.request_timeout_ms = request_timeout_ms or max(session_timeout_ms, 1000)
        self._conn: KafkaConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self.stopped = False

    # ------------------------------------------------------------------ views
    @property
    def running(self) -> Items:
        return self.logic.running

    @property
    def member_id(self) -> str:
        return self.logic.member_id

    @property
    def member_epoch(self) -> int:
        return self.logic.member_epoch

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start heartbeating (needs a running event loop)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"worker {self.logic.url}")

    async def stop(self, timeout_ms: int = 2000) -> None:
        """Graceful stop: stop all work (``release`` events), then leave with epoch -1."""
        if self.stopped:
            return
        self.stopped = True
        await self._cancel()
        self._apply(Reaction(stop=self.logic.running))
        self.logic.running = frozenset()
        if self.logic.member_id:
            leave = self.logic.leave_request()
            try:
                conn = self._conn or await self._connect(timeout_ms / 1000)
                self._conn = conn
                await conn.request(wm.heartbeat_to_wire(leave), HEARTBEAT_VERSION, timeout=timeout_ms / 1000)
            except (OSError, TimeoutError) as exc:
                log.info("%s: leave failed (%s); the session will expire", self.logic.url, exc)
        await self._close()

    async def crash(self) -> None:
        """The process dies: no leave, no events; the socket just closes."""
        if self.stopped:
            return
        self.stopped = True
        await self._cancel()
        await self._close()

    async def _cancel(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    # ------------------------------------------------------------------ the loop
    async def _run(self) -> None:
        try:
            while True:
                resp = await self._heartbeat()
                reaction = self.logic.on_response(resp)
                self._apply(reaction)
                if resp.error_code in _MOVED and self.bootstrap is not None:
                    await self._close()  # the next heartbeat looks for the coordinator again
                if resp.error_code == _UNAVAILABLE or reaction.interval_ms <= 0:
                    delay = 0 if reaction.heartbeat_now else self.retry_interval_ms
                else:
                    delay = 0 if reaction.heartbeat_now else reaction.interval_ms
                    self.retry_interval_ms = reaction.interval_ms
                await self._sleep_until(self.clock() + delay)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug: log it loudly, and behave like a crashed process
            log.exception("%s: worker loop failed", self.logic.url)
            raise

    async def _heartbeat(self) -> api.HeartbeatResponse:
        now = self.clock()
        request = self.logic.heartbeat_request(now)
        timeout_ms = self.request_timeout_ms
        expiry = self.logic.session_expiry_ms()
        if expiry is not None:
            # never wait for an answer past our own session: fence first (see _sleep_until)
            timeout_ms = max(1, min(timeout_ms, expiry - now))
        try:
            if self._conn is None:
                self._conn = await self._connect(timeout_ms / 1000)
            wire = await self._conn.request(
                wm.heartbeat_to_wire(request), HEARTBEAT_VERSION, timeout=timeout_ms / 1000
            )
            return wm.heartbeat_response_from_wire(wire)
        except (OSError, TimeoutError) as exc:
            log.debug("%s: heartbeat failed: %s", self.logic.url, exc)
            await self._close()
            return api.HeartbeatResponse(error_code=_UNAVAILABLE)

    async def _connect(self, timeout_s: float) -> KafkaConnection:
        """A connection to the group's coordinator: ``host:port``, or whichever bridge the
        bootstrap bridges name (``bootstrap``)."""
        host, port = self.host, self.port
        if self.bootstrap is not None:
            connect = functools.partial(KafkaConnection.connect, client_id=self.client_id, timeout=timeout_s)
            host, port = await find_coordinator(self.bootstrap, self.logic.group_id, connect, timeout_s)
        return await KafkaConnection.connect(host, port, self.client_id, timeout=timeout_s)

    async def _sleep_until(self, at_ms: int) -> None:
        """Sleep until ``at_ms``, fencing ourselves on the way if the session runs out first."""
        while True:
            now = self.clock()
            expiry = self.logic.session_expiry_ms()
            if expiry is not None and expiry <= now:
                reaction = self.logic.expire_session(now)
                if reaction is not None:
                    self._apply(reaction)
                    return  # rejoin at once, with epoch 0
            if now >= at_ms:
                return
            wake = at_ms if expiry is None else min(at_ms, expiry)
            await asyncio.sleep(max(wake - now, 1) / 1000)

    def _apply(self, reaction: Reaction) -> None:
        emit_items(self.on_event, reaction.stop, reaction.start)
        if reaction.epoch_changed:
            self.on_event("epoch", epoch=self.logic.member_epoch)
