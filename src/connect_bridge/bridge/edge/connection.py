"""What the server keeps per client connection, and the connection-level guards it shares.

Split from ``server.py`` so the relay (``proxy/relay.py``) and the server speak of the same
connection without importing each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from connect_bridge.bridge.coordination.api_table import Answer
from connect_bridge.bridge.coordination.fastpath import Framed
from connect_bridge.bridge.edge.accept import RateLimited, Slot
from connect_bridge.bridge.upstream.cluster import UpstreamLink
from connect_bridge.bridge.upstream.task_clients import ClientKind

log = logging.getLogger("connect_bridge.server")

FILES_RESERVED = 64
"""Open files kept for the state log, the metrics listener, upstream links and the executor."""


Outcome = Answer | Framed | bytes | bytearray | asyncio.Future[Any]
"""A request's answer before it is written: the bridge's own wire response (or a future of one,
:data:`Answer`), the steady path's framed answer, or an upstream's framed answer (or a future of
it: relayed)."""


class Answering(NamedTuple):
    """What encoding an answer needs from its request (a tuple: one is made per steady heartbeat,
    and a frozen dataclass costs several times as much to build)."""

    api_key: int
    api_version: int
    correlation_id: int


class LinkAnswers(Protocol):
    """Answers an upstream link writes to the client itself, as they arrive (proxy mode,
    ``proxy.relay.DirectAnswers``): what the connection's sender needs to keep request order."""

    owed: int
    """Answers relayed this way and not yet sent in full (also counted in ``Connection.pending``)."""

    async def idle(self) -> None:
        """Wait until every answer owed was sent (or the connection closes)."""


ANONYMOUS = "User:ANONYMOUS"
"""Kafka's principal for a client that did not authenticate (``KafkaPrincipal.ANONYMOUS``)."""


@dataclass(slots=True, eq=False)
class Connection:
    """One client connection: its streams, its upstream links and its queue of answers."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    host: str
    node_id: int = 0
    """The upstream broker this listener stands for (proxy mode)."""
    links: dict[int, UpstreamLink] = field(default_factory=dict)
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    pending: int = 0
    """Responses queued or not yet handed to the socket: a new one may skip the queue only when this
    is 0."""
    pending_here: int = 0
    """Of ``pending``, answers of requests the bridge answers itself (not relayed): while one is
    unsent the connection is muted, one request in flight as Kafka's broker does."""
    last_read: float = field(default_factory=time.monotonic)
    answered: asyncio.Event = field(default_factory=asyncio.Event)
    """Set whenever a queued response went out (the reader waits on it at the in-flight limit)."""
    principal: str = ANONYMOUS
    """Who the client is, as Kafka names principals (``User:alice``): set by a completed SASL
    exchange (passed through or terminated) or a verified TLS client certificate
    (``User:CN=...``, the certificate's subject, as Kafka's default SSL principal); until then
    Kafka's anonymous principal. Authorization and member ownership read it (docs/security.md)."""
    authenticated: bool = False
    """True once the connection's SASL exchange completed (always False without SASL)."""
    sasl: Any = None
    """The connection's SASL progress (``edge.sasl_gate``: mechanism, session expiry); None without SASL."""
    slot: Slot | None = None
    """Its place among the connection slots (``edge.accept``); None for a connection made by hand."""
    client_kind: ClientKind | None = None
    """Proxy mode: what its relayed requests are (a task's producer, ...), from the first one."""
    between_frames: bool = False
    """The reader waits for the next request's size prefix with nothing of it buffered: a chunk
    arriving now starts a new frame, so the steady-heartbeat lane may answer it
    (``BridgeServer._steady_lane``)."""
    direct: LinkAnswers | None = None
    """Proxy mode: the relayed answers its upstream link writes itself (``proxy.relay.DirectAnswers``,
    from the first request passed through); the sender waits for them before writing its own."""


class AcceptFailures:
    """The event loop's exception handler: an out-of-resource accept failure is logged as one line
    per second at most, with no traceback (at the open-file limit every accept fails)."""

    def __init__(self) -> None:
        self.failed = RateLimited()

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and "out of system resource" in str(context.get("message", "")):
            self.failed.log(
                "cannot accept connections: %s; raise the open-file limit (ulimit -n) or lower "
                "max_connections",
                exc.strerror or exc,
            )
            return
        loop.default_exception_handler(context)


def connections_the_open_files_allow(max_connections: int) -> int:
    """``max_connections``, lowered below the open-file limit (raised to its hard limit first): at
    the limit every accept fails, and each failure used to log a traceback (issue 11.8)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or hard > soft):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    if soft == resource.RLIM_INFINITY:
        return max_connections
    room = max(1, soft - min(FILES_RESERVED, soft // 4))
    if max_connections > room:
        log.warning(
            "max_connections %d is above what the open-file limit %d allows: using %d",
            max_connections,
            soft,
            room,
        )
        return room
    return max_connections


async def idle_watchdog(conn: Connection, idle_s: float) -> None:
    """Close a connection that sent nothing for ``idle_s`` (one timer per connection, not one per
    read: a timeout around every read costs more than the heartbeat itself)."""
    while True:
        remaining = conn.last_read + idle_s - time.monotonic()
        if remaining <= 0:
            # abort, not close: a client that never reads keeps close() waiting for a flush
            log.info("closing idle connection from %s", conn.host)
            conn.writer.transport.abort()
            conn.answered.set()  # a reader held at the in-flight limit wakes up and ends
            return
        await asyncio.sleep(remaining)


async def authentication_deadline(conn: Connection, deadline: float, refused: RateLimited) -> None:
    """Close ``conn`` if it has not authenticated by ``deadline`` (``time.monotonic`` seconds):
    before authentication a peer has proven nothing, and must not keep a slot for the idle timeout
    by sending ApiVersions now and then."""
    await asyncio.sleep(max(0.0, deadline - time.monotonic()))
    if not conn.authenticated:
        refused.log("closing %s: not authenticated within connections.authentication_timeout_ms", conn.host)
        conn.writer.transport.abort()
        conn.answered.set()
