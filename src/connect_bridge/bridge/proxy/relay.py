"""Proxy mode, the server's side: which requests go upstream, and relaying them.

``upstream/cluster.py`` knows the upstream cluster (its brokers, its versions, rewriting and splitting
frames); this is the per-request decision the server makes with it, read from ``api_table``'s
routes: answered here, forwarded, forwarded and rewritten, or split and merged.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Container
from typing import Any

from connect_bridge.bridge.coordination.api_table import (
    ACKS_ONLY,
    CREATES_GROUP,
    PROXY_ROUTES,
    REWRITTEN,
    SPLIT,
    Answer,
    Route,
)
from connect_bridge.bridge.coordination.handlers import Client
from connect_bridge.bridge.edge.connection import Connection
from connect_bridge.bridge.upstream.cluster import SplitRequest, UpstreamCluster, UpstreamLink, produce_acks
from connect_bridge.bridge.upstream.task_clients import RelayedClients
from connect_bridge.codecs.messages import ApiKey
from connect_bridge.codecs.requests import (
    DecodedRequest,
    RequestDecodeError,
    decode_request,
    request_header_fields,
)
from connect_bridge.state.adoption.records import OwnershipState
from connect_bridge.state.classic.api import PROTOCOL_TYPE_CONNECT

log = logging.getLogger("connect_bridge.server")
_SIZE = struct.Struct(">i")

UNREACHABLE = object()
"""What :meth:`Relay.forward` returns when there is no upstream broker to relay to."""
PASSED_THROUGH = object()
"""What :meth:`Relay.forward` returns for a request whose answer the link writes to the client
itself (:class:`DirectAnswers`): nothing is left for the caller to answer with."""

FLUSH_ABOVE = 256 * 1024
"""Bytes waiting in a client's transport above which its link stops reading answers until they
are sent (an answer is also counted unsent until its last byte is: ``DirectAnswers``)."""


class Relay:
    """Routes a proxy listener's requests between the bridge and the upstream broker behind it."""

    def __init__(
        self,
        cluster: UpstreamCluster,
        matches: Callable[[str], bool],
        groups: Callable[[], Container[str]],
        handle: Callable[[DecodedRequest, Client], Answer],
        *,
        may_forward: Callable[[], bool] = lambda: True,
        gave_up: Callable[[str], bool] = lambda group_id: False,
        refused_here: Callable[[str], bool] = lambda group_id: False,
    ) -> None:
        self.cluster = cluster
        self.matches = matches
        """``coordinated_groups`` as a predicate."""
        self.groups = groups
        """The groups the bridge holds now."""
        self.handle = handle
        """Answers a request locally (``LocalApis.handle``)."""
        self.owner: Callable[[str], OwnershipState | None] = lambda group_id: None
        """A group's adoption phase (``GroupCoordinator.ownership``; docs/adoption.md)."""
        self.may_forward = may_forward
        """Several bridges: False while this bridge may be a zombie (its lease in the bridges'
        group ran out, e.g. it was paused): requests read now may have waited in its buffers
        since before another bridge took its groups over, so they are dropped with their
        connection instead of reaching the brokers late."""
        self.listeners_ready: Callable[[], Awaitable[None]] | None = None
        """Waits for the listeners of brokers a rewritten response just named for the first time
        (``BrokerListeners.ready``), so the client reads an address that accepts connections."""
        self.gave_up = gave_up
        self.refused_here = refused_here
        """The bridge cannot answer the group now: its state is still loading, or (several
        bridges) another bridge owns the group's partition or it is loading here. A membership
        request (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) of a group whose id matches is then
        answered here (COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR), as a coordinator that is
        loading or a broker that is not the coordinator answers. Relayed, it would reach the
        upstream, which never saw the member and answers UNKNOWN_MEMBER_ID; a worker drops its
        member id on that and rejoins as a new member. (With several bridges FindCoordinator sends
        every matching group to the owner, which relays the groups it does not hold.)"""
        """Several bridges: a group this bridge coordinated and gave up to another bridge; its
        requests are answered here (NOT_COORDINATOR), never relayed to the upstream cluster."""
        self.clients: RelayedClients | None = None
        """Counts relayed requests per client kind (task data or not); None: not counted."""
        self.observe_answer: Callable[[float], None] = lambda seconds: None
        """Counts one relayed answer passed through, ``seconds`` after its request was read."""

    def coordinates(self, group_id: str, joining_protocol_type: str | None = None) -> bool:
        """One of the bridge's groups. Its id matches ``coordinated_groups`` and the bridge has it
        already, or a JoinGroup creates it with Connect's protocol type. A consumer group whose id
        matches (a sink connector's ``connect-<name>`` matches ``connect.*``) stays the broker's:
        it joins with protocol type ``consumer``, and its offsets are the broker's. FindCoordinator
        is always the broker's answer (the real coordinator, as this bridge's listener for it): any
        listener answers the bridge's own groups.

        A group with an ownership record (adoption) is the bridge's exactly when its phase says so:
        ``relaying``/``released`` are the upstream's, ``adopted``/``releasing`` the bridge's."""
        phase = self.owner(group_id)
        if phase is not None:
            return phase.bridge_coordinates
        if self.gave_up(group_id):
            return True
        if not self.matches(group_id):
            return False
        return group_id in self.groups() or joining_protocol_type == PROTOCOL_TYPE_CONNECT

    def answers_locally(self, api_key: int, decoded: DecodedRequest | RequestDecodeError | None) -> bool:
        """The bridge's own APIs, and group APIs of the groups it coordinates."""
        route = PROXY_ROUTES.get(api_key, Route.FORWARDED)
        if route is Route.LOCAL:
            return True
        if decoded is None:
            return False
        if isinstance(decoded, RequestDecodeError):
            return True  # the local path answers or closes with the right error
        body = decoded.body
        if route is Route.BY_GROUPS:
            return all(self.coordinates(g) for g in body.groups)
        joining = body.protocol_type if api_key in CREATES_GROUP else None
        if self.coordinates(body.group_id, joining):
            return True
        return self.matches(body.group_id) and self.refused_here(body.group_id)

    def link(self, conn: Connection) -> UpstreamLink | None:
        """The connection's link to the broker its listener stands for (opened on first use)."""
        link = conn.links.get(conn.node_id)
        if link is None:
            broker = self.cluster.brokers.get(conn.node_id)
            if broker is None:
                log.warning("no upstream broker %s for %s", conn.node_id, conn.host)
                return None
            link = conn.links[conn.node_id] = UpstreamLink(broker, self.cluster.ssl)
        return link

    async def forward(
        self, conn: Connection, payload: bytes, api_key: int, *, started: float | None = None
    ) -> Any:
        """Relay to the upstream broker behind this listener. The outcome to answer with: a future of
        the framed response, None for a request that gets no response, or :data:`UNREACHABLE`.
        Raises OSError when the broker cannot be reached.

        With ``started`` (when the request was read) a request passed through as is (not rewritten,
        not split) whose answer comes right after the answers the link writes itself is relayed by
        its header alone: no future, and the link writes its answer to the client as it arrives
        (:data:`PASSED_THROUGH`; :class:`DirectAnswers`)."""
        if not self.may_forward():
            log.warning("closing %s: not relaying while this bridge's lease is not fresh", conn.host)
            return UNREACHABLE
        if self.clients is not None:
            conn.client_kind = self.clients.observe(conn.client_kind, payload, conn.host)
        split = self.cluster.split(payload) if api_key in SPLIT else None
        if split is not None:
            return await self._forward_split(conn, split)
        link = self.link(conn)
        if link is None:
            return UNREACHABLE
        _, version, correlation = request_header_fields(payload)
        expects = api_key not in ACKS_ONLY or produce_acks(payload, version) != 0
        if started is not None and expects and api_key not in REWRITTEN:
            answers = conn.direct
            if conn.pending == (answers.owed if answers is not None else 0):  # nothing queued ahead
                if not link.connected:
                    await link.open()
                if answers is None:
                    answers = conn.direct = link.sink = DirectAnswers(conn, link, self.observe_answer)
                answers.expect()
                await link.relay(payload, correlation, started)
                return PASSED_THROUGH
        future = await link.send(_SIZE.pack(len(payload)) + payload, correlation, expects)
        if future is None or api_key not in REWRITTEN:
            return future  # resolves to the framed response: no task per Produce/Fetch
        keys = _coordinator_keys(payload) if api_key == ApiKey.FIND_COORDINATOR and version < 4 else None
        return asyncio.get_running_loop().create_task(
            self._rewritten(future, api_key, version, correlation, keys)
        )

    async def _rewritten(
        self,
        upstream: asyncio.Future[bytearray],
        api_key: int,
        version: int,
        correlation: int,
        keys: list[str] | None = None,
    ) -> bytes:
        frame = await upstream  # framed (size prefix included)
        rewritten = self.cluster.rewrite(api_key, version, correlation, bytes(memoryview(frame)[4:]), keys)
        if self.listeners_ready is not None:
            await self.listeners_ready()  # a broker it names for the first time: its listener is bound
        return rewritten

    async def _forward_split(self, conn: Connection, split: SplitRequest) -> Any:
        """Answer a request partly here and partly upstream, merged (``UpstreamCluster.split``)."""
        request = decode_request(split.local, framed=False)
        local = self.handle(request, Client(request.client_id or "", conn.host, conn.principal))
        link = self.link(conn)
        if link is None:
            return UNREACHABLE
        upstream = await link.send(_SIZE.pack(len(split.remote)) + split.remote, request.correlation_id, True)
        assert upstream is not None

        async def merged() -> bytes:
            return split.merge(local, bytes(memoryview(await upstream)[4:]))

        return asyncio.get_running_loop().create_task(merged())


class DirectAnswers:
    """A client connection's relayed answers written by its upstream link as they arrive, in the
    order the requests were read (the link's order): no future, no task and no queue per request.

    Every such answer counts in ``conn.pending`` (the in-flight limit, muting) until its last byte
    was handed to the socket, as the sender task counts the answers it writes. An answer the
    bridge queues (its own, a rewritten or split one) is relayed or queued only after every answer
    owed here: the sender waits for :meth:`idle` before writing it, and a request read while one is
    queued takes the queue too, so answers leave in request order."""

    def __init__(self, conn: Connection, link: UpstreamLink, observe: Callable[[float], None]) -> None:
        self.conn = conn
        self.link = link
        self.transport = conn.writer.transport
        self.observe = observe
        self.owed = 0
        """Answers relayed this way and not yet sent in full (also counted in ``conn.pending``)."""
        self.unsent = 0
        """Of ``owed``, answers received in full whose bytes wait in the client's transport."""
        self.flushing: asyncio.Task[None] | None = None
        self.idle_waiter: asyncio.Future[None] | None = None

    def expect(self) -> None:
        """One more request relayed whose answer is written here."""
        self.owed += 1
        self.conn.pending += 1

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.transport.write(data)
        if self.flushing is None and self.transport.get_write_buffer_size() > FLUSH_ABOVE:
            self._flush_later()

    def complete(self, started: float) -> None:
        self.observe(time.perf_counter() - started)
        if self.flushing is None and not self.transport.get_write_buffer_size():
            self._settle(1)
        else:
            self.unsent += 1
            self._flush_later()

    def failed(self, exc: BaseException) -> None:
        # Upstream gone with answers owed (one may be half written): close, so the client sees EOF
        # at once instead of waiting for its request timeout.
        log.warning("closing a client connection: %s", exc)
        self.conn.writer.close()
        self.owed = self.unsent = 0
        self._wake()

    async def idle(self) -> None:
        """Wait until every answer owed here was sent (or the connection closes)."""
        while self.owed and not self.transport.is_closing():
            self.idle_waiter = asyncio.get_running_loop().create_future()
            await self.idle_waiter

    def _flush_later(self) -> None:
        if self.flushing is None:
            self.link.pause_reading()  # no more answers into the transport until it has sent these
            self.flushing = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        try:
            while True:
                await self.conn.writer.drain()
                if not self.transport.get_write_buffer_size() or self.transport.is_closing():
                    break
                # Answers delivered from bytes read before the pause went in after: wait for them too.
                await asyncio.sleep(0)
        except Exception:  # the client is gone: its connection's teardown follows
            pass
        finally:
            self.flushing = None
            unsent, self.unsent = self.unsent, 0
            self._settle(unsent)
            self.link.resume_reading()

    def _settle(self, answers: int) -> None:
        if answers:
            self.owed -= answers
            self.conn.pending -= answers
            self._wake()

    def _wake(self) -> None:
        self.conn.answered.set()
        if not self.owed and self.idle_waiter is not None and not self.idle_waiter.done():
            self.idle_waiter.set_result(None)


def _coordinator_keys(payload: bytes) -> list[str] | None:
    """The key of a FindCoordinator below v4, whose response does not repeat it."""
    try:
        return [decode_request(payload, framed=False).body.key]
    except RequestDecodeError:
        return None
