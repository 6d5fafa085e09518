"""Accepting connections: a slot is taken when the TCP connection is accepted, before its TLS handshake.

Why not ``asyncio.start_server(ssl=...)``: it runs the handshake before the server sees the
connection, so connections in a handshake counted against nothing and were held for asyncio's
default 60 s: 200 silent sockets were held with ``max_connections`` 20, and at the open-file limit a
real client was locked out. Here :class:`Listener` accepts the socket itself, takes a slot at once
(:class:`ConnectionSlots`: ``max_connections``, the unauthenticated share of it, the per-address
limits), and only then hands the socket to the loop, which runs the handshake with
``connections.tls_handshake_timeout_ms``; a connection refused a slot is closed unread.

A slot stays *unauthenticated* until the server calls :meth:`ConnectionSlots.authenticated` on it
(``connection_settings`` says when), and is given back by :meth:`ConnectionSlots.release`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import ssl
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from connect_bridge.bridge.edge.connection_settings import ConnectionSettings

__all__ = ["ConnectionSlots", "Listener", "RateLimited", "Slot", "divert", "start_listener"]

log = logging.getLogger("connect_bridge.server")


class RateLimited:
    """A warning that a client can trigger at will: logged at most once a second, with a count."""

    def __init__(self, interval_s: float = 1.0) -> None:
        self.interval_s = interval_s
        self.suppressed = 0
        self.last = -1e9

    def log(self, message: str, *args: Any) -> None:
        """Log now, or count it towards the next line if one went out in the last interval."""
        now = time.monotonic()
        if now - self.last < self.interval_s:
            self.suppressed += 1
            return
        more = f" ({self.suppressed} more since the last report)" if self.suppressed else ""
        log.warning(message + more, *args)
        self.last = now
        self.suppressed = 0


@dataclass(slots=True, eq=False)
class Slot:
    """One accepted connection's place in :class:`ConnectionSlots`."""

    address: str
    """The peer's IP address as the socket reports it ('' when unknown)."""
    accepted: float = field(default_factory=time.monotonic)
    """When the TCP connection was accepted (the authentication deadline counts from here)."""
    authenticated: bool = False
    released: bool = False
    gone: bool = False
    """The peer closed or reset the connection (its EOF arrived, whatever is still buffered)."""
    wake: Callable[[], None] | None = None
    """Called when the peer is gone: a reader muted until its answers are sent must not wait for an
    answer that may never come (a parked JoinGroup) to notice that nobody is there."""
    received: int = 0
    """Bytes the peer has sent so far (after TLS) that went to the connection's stream reader (not
    those a :func:`divert` lane took): the server compares them with the bytes it has read to know
    whether a next request is already buffered (``BridgeServer._read_loop``)."""

    def peer_gone(self) -> None:
        self.gone = True
        if self.wake is not None:
            self.wake()


class ConnectionSlots:
    """Who holds a connection slot: the counts the limits are checked against at accept."""

    def __init__(
        self,
        max_connections: int,
        settings: ConnectionSettings,
        *,
        names: tuple[str, str] = ("max_connections", "connections.max_unauthenticated"),
    ) -> None:
        self.max_connections = max_connections
        self.max_unauthenticated = settings.unauthenticated_limit(max_connections)
        self.max_unauthenticated_per_address = settings.max_unauthenticated_per_address
        self.max_per_address = settings.max_per_address
        self.names = names
        """How the refusal line names the total and the unauthenticated limit (another listener,
        such as the metrics listener, has settings of its own)."""
        self.total = 0
        self.unauthenticated = 0
        self._per_address: Counter[str] = Counter()
        self._unauthenticated_per_address: Counter[str] = Counter()

    def refusal(self, address: str) -> str | None:
        """Why a new connection from ``address`` gets no slot now (a log line), or None."""
        checks = (
            (self.total, self.max_connections, self.names[0]),
            (self.unauthenticated, self.max_unauthenticated, self.names[1]),
            (self._per_address[address], self.max_per_address, "connections.max_per_address"),
            (
                self._unauthenticated_per_address[address],
                self.max_unauthenticated_per_address,
                "connections.max_unauthenticated_per_address",
            ),
        )
        for held, limit, name in checks:
            if limit is not None and held >= limit:
                return f"{name} {limit} reached"
        return None

    def take(self, address: str) -> Slot | None:
        """An unauthenticated slot for a connection from ``address``, or None when a limit is reached."""
        if self.refusal(address) is not None:
            return None
        self.total += 1
        self.unauthenticated += 1
        self._per_address[address] += 1
        self._unauthenticated_per_address[address] += 1
        return Slot(address)

    def authenticated(self, slot: Slot) -> None:
        """The connection proved who it is: it no longer counts as unauthenticated (idempotent)."""
        if slot.authenticated or slot.released:
            return
        slot.authenticated = True
        self.unauthenticated -= 1
        self._forget(self._unauthenticated_per_address, slot.address)

    def release(self, slot: Slot) -> None:
        """The connection is gone (idempotent)."""
        if slot.released:
            return
        self.authenticated(slot)
        slot.released = True
        self.total -= 1
        self._forget(self._per_address, slot.address)

    def held_by(self, address: str) -> int:
        """Connections from ``address`` now."""
        return self._per_address[address]

    @staticmethod
    def _forget(counts: Counter[str], address: str) -> None:
        counts[address] -= 1
        if counts[address] <= 0:
            del counts[address]


Lane = Callable[[bytes], bool]
"""Takes a chunk of received bytes before the stream reader sees it: True when it consumed the
chunk (answered it), False to let the stream reader have it."""


class _Stream(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, telling the slot how much arrived and when the peer is gone, and
    letting a lane (:func:`divert`) take a chunk before the stream reader does."""

    def __init__(self, reader: asyncio.StreamReader, connected: Any, slot: Slot) -> None:
        super().__init__(reader, connected, loop=asyncio.get_running_loop())
        self.slot = slot
        self.lane: Lane | None = None

    def data_received(self, data: bytes) -> None:
        lane = self.lane
        if lane is not None and lane(data):
            return
        self.slot.received += len(data)
        super().data_received(data)

    def eof_received(self) -> bool:
        self.slot.peer_gone()
        return bool(super().eof_received())

    def connection_lost(self, exc: Exception | None) -> None:
        self.slot.peer_gone()
        super().connection_lost(exc)


def divert(writer: asyncio.StreamWriter, lane: Lane) -> bool:
    """Hand every chunk the connection of ``writer`` receives to ``lane`` first, straight from the
    event loop's callback: a request answered there costs no stream reader, no future and no task
    switch (the steady-heartbeat lane, ``BridgeServer._steady_lane``). False when the connection
    is not one this module accepted (nothing changed then)."""
    protocol = writer.transport.get_protocol()
    if not isinstance(protocol, _Stream):
        return False
    protocol.lane = lane
    return True


OnConnection = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Slot], Awaitable[None]]

LISTEN_BACKLOG = 100
"""Connections the kernel queues before they are accepted, unless the caller says otherwise
(``asyncio.start_server``'s default; the worker listener takes ``connections.listen_backlog``)."""
ACCEPT_RETRY_S = 0.1
"""After a failed accept (the open-file limit), wait this long before accepting again."""


class Listener:
    """Listening sockets whose connections this module accepts itself (``sock_accept``): the
    peer's address and a slot come first, then ``connect_accepted_socket`` runs the TLS handshake
    with its timeout. Nothing is read from the socket before the handshake, on asyncio's loop and on
    uvloop alike (a protocol that pauses reading in ``connection_made`` still gets data on uvloop).

    The part of ``asyncio.Server`` the bridge uses: ``sockets``, ``start_serving``, ``close``,
    ``wait_closed``."""

    def __init__(
        self,
        sockets: list[socket.socket],
        on_connection: OnConnection,
        slots: ConnectionSlots,
        *,
        tls: ssl.SSLContext | None,
        handshake_timeout_s: float,
        limit: int,
        refused: RateLimited,
        sasl: bool,
        turn_away: Callable[[socket.socket], None] | None = None,
    ) -> None:
        self.sockets = sockets
        self.turn_away = turn_away
        """Called with a socket refused a slot, before it is closed (on a plaintext listener the
        metrics listener writes its 503 there; nothing is read from the socket)."""
        self.sasl = sasl
        """Whether clients authenticate with SASL after the handshake (else the handshake, or the
        accept on a plaintext listener, is all there is to prove)."""
        self.on_connection = on_connection
        self.slots = slots
        self.tls = tls
        self.handshake_timeout_s = handshake_timeout_s
        self.limit = limit
        self.refused = refused
        self.failed = RateLimited()
        self._accepting: list[asyncio.Task[None]] = []
        self._opening: set[asyncio.Task[None]] = set()

    async def start_serving(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in self.sockets:
            self._accepting.append(loop.create_task(self._accept(sock)))

    def close(self) -> None:
        for task in [*self._accepting, *self._opening]:
            task.cancel()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._accepting, *self._opening, return_exceptions=True)

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, peer = await loop.sock_accept(listening)
            except OSError as exc:  # at the open-file limit every accept fails: one line a second
                self.failed.log(
                    "cannot accept connections: %s; raise the open-file limit (ulimit -n) or lower "
                    "max_connections",
                    exc.strerror or exc,
                )
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
            slot = self.slots.take(address)
            if slot is None:
                self.refused.log("closing a new connection from %s: %s", address, self.slots.refusal(address))
                if self.turn_away is not None:
                    with contextlib.suppress(OSError):
                        self.turn_away(sock)
                sock.close()
                continue
            if self.tls is None and not self.sasl:
                self.slots.authenticated(slot)  # a plaintext listener without SASL: nothing to prove
            task = loop.create_task(self._open(sock, slot))
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    async def _open(self, sock: socket.socket, slot: Slot) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=self.limit, loop=loop)

        def connected(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> Awaitable[None]:
            return self.on_connection(r, w, slot)

        protocol = _Stream(reader, connected, slot)
        try:
            if self.tls is None:
                await loop.connect_accepted_socket(lambda: protocol, sock)
            else:
                await loop.connect_accepted_socket(
                    lambda: protocol, sock, ssl=self.tls, ssl_handshake_timeout=self.handshake_timeout_s
                )
        except BaseException as exc:
            # A failed or timed-out handshake is the peer's business: one DEBUG line, slot given back.
            log.debug("closing a connection from %s before it was served: %s", slot.address, exc)
            sock.close()
            self.slots.release(slot)
            if not isinstance(exc, Exception):
                raise
        else:
            # connection_made has started ``on_connection``, which releases the slot at its end
            if not self.sasl:
                self.slots.authenticated(slot)


async def start_listener(
    on_connection: OnConnection,
    host: str,
    port: int,
    slots: ConnectionSlots,
    *,
    tls: ssl.SSLContext | None,
    handshake_timeout_ms: int,
    limit: int,
    refused: RateLimited,
    sasl: bool,
    turn_away: Callable[[socket.socket], None] | None = None,
    backlog: int = LISTEN_BACKLOG,
) -> Listener:
    """Listening sockets for ``host``:``port`` (every address it resolves to, as
    ``asyncio.start_server`` binds them; not accepting yet: call ``start_serving``) whose connections
    take a slot in ``slots`` when accepted and reach ``on_connection(reader, writer, slot)`` after
    the TLS handshake; ``on_connection`` must release the slot when it ends. ``sasl``: clients
    authenticate with SASL after the handshake (else a slot stops counting as unauthenticated once
    the handshake completed, or at accept on a plaintext listener). Raises ``OSError`` when
    the address cannot be bound."""
    loop = asyncio.get_running_loop()
    bound = await loop.create_server(asyncio.Protocol, host, port, start_serving=False)
    # The loop binds (address families, reuse flags, dual stack) exactly as start_server would;
    # this module keeps duplicates of those sockets and accepts on them itself.
    sockets = []
    try:
        for transport_socket in bound.sockets:
            sock = socket.socket(fileno=os.dup(transport_socket.fileno()))
            sock.setblocking(False)
            sock.listen(backlog)
            sockets.append(sock)
    finally:
        bound.close()
    return Listener(
        sockets,
        on_connection,
        slots,
        tls=tls,
        handshake_timeout_s=handshake_timeout_ms / 1000,
        limit=limit,
        refused=refused,
        sasl=sasl,
        turn_away=turn_away,
    )
