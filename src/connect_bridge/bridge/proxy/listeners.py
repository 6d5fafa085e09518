"""Proxy mode's start: the relay in front of the upstream cluster and one listener per broker,
and the listeners of brokers that join the cluster while the bridge runs (:class:`BrokerListeners`).

Apart from ``server.py`` (which builds a :class:`ProxyMode` from ``BridgeServer.start``) so the
server module keeps to connections and the coordinator loop. What proxy mode needs of the server is
:class:`ProxyHost`: public attributes and methods only, so nothing here reaches into the server.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from connect_bridge.bridge.coordination.handlers import LocalApis
from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime
from connect_bridge.bridge.edge.accept import Listener
from connect_bridge.bridge.edge.connection import Answering, Connection, Outcome
from connect_bridge.bridge.ha.partitions import HighAvailability
from connect_bridge.bridge.metrics import RELAYED, Metrics
from connect_bridge.bridge.proxy.relay import PASSED_THROUGH, UNREACHABLE, Relay
from connect_bridge.bridge.server_options import ServerOptions
from connect_bridge.bridge.startup import address, bind_error, retry_until
from connect_bridge.bridge.upstream.cluster import UpstreamCluster, group_matcher
from connect_bridge.bridge.upstream.task_clients import RelayedClients
from connect_bridge.codecs.requests import DecodedRequest

if TYPE_CHECKING:  # imported in proxy_mode, only when adoption is configured
    from connect_bridge.bridge.adoption.wiring import Adoption

log = logging.getLogger("connect_bridge.server")

LISTEN_BUFFER = 64 * 1024
"""The stream reader's buffer limit per connection."""


class ListenerHost(Protocol):
    """What :class:`BrokerListeners` needs of the server: its options, whether it stops, and a
    listener bound the way every listener of the bridge is (``BridgeServer.listen``)."""

    options: ServerOptions

    @property
    def stopping(self) -> bool: ...

    async def listen(self, port: int, node_id: int | None = None) -> Listener: ...


class ProxyHost(ListenerHost, Protocol):
    """What proxy mode needs of the server it runs in (``BridgeServer``), all of it public: its
    listen port, metrics, the runtime (the coordinator's groups and ownership), the HA gate and the
    local APIs (set once the handlers exist; read per relayed request that is answered here)."""

    port: int
    metrics: Metrics | None
    runtime: CoordinatorRuntime
    ha: HighAvailability | None
    apis: LocalApis | None


Respond = Callable[[Connection, DecodedRequest | Answering | None, Outcome, int, float], Awaitable[None]]
"""``BridgeServer._respond`` as the server hands it to :func:`forward_upstream` and
:func:`forward_observed`: (connection, request, outcome, seq, started)."""


@dataclass(eq=False)
class ProxyMode:
    """Proxy mode's parts, built before anything is opened (:func:`proxy_mode`), so the server holds
    them however :meth:`start` ends: the relay, adoption (with ``adoption.groups``) and the relay
    listeners."""

    options: ServerOptions
    relay: Relay
    listeners: BrokerListeners
    adoption: Adoption | None = None

    async def start(self) -> int:
        """Discover the upstream brokers and open one listener per broker (base port + node id);
        the node id a connection to the bridge's own listen port stands for (the lowest broker's)."""
        cluster, listeners = self.relay.cluster, self.listeners
        upstream = ",".join(address(host, port) for host, port in self.options.upstream)
        timeout_s = self.options.upstream_start_timeout_ms / 1000
        await retry_until(cluster.discover, f"upstream {upstream}", timeout_s)
        for node_id in sorted(cluster.brokers):
            try:
                await listeners.open(node_id)
            except OSError as exc:
                raise listeners.bind_error(node_id, exc) from None
        bootstrap_node = min(cluster.brokers)
        ports = [cluster.listener_port(n) for n in sorted(cluster.brokers)]
        log.info("proxying %d upstream brokers on ports %s", len(cluster.brokers), ports)
        cluster.on_new_broker = listeners.learned
        self.relay.listeners_ready = listeners.ready
        return bootstrap_node


def proxy_mode(host: ProxyHost, advertised_host: str) -> ProxyMode:
    """The relay in front of the upstream cluster for ``host`` (listening on ``host.port``), its
    listeners (not opened yet: :meth:`ProxyMode.start`) and, with ``adoption.groups``, adoption."""
    options = host.options
    patterns = options.coordinated_groups
    base = options.proxy_base_port or host.port + 1
    matches = group_matcher(patterns if patterns is not None else ["connect.*"])
    runtime = host.runtime

    def answer_here(request: DecodedRequest, client: Any) -> Any:
        assert host.apis is not None  # set before the first connection is accepted
        return host.apis.handle(request, client)

    relay = Relay(
        UpstreamCluster(
            options.upstream,
            base,
            advertised_host,
            ssl=options.upstream_security.ssl,
            sasl=options.upstream_security.sasl,
            advertised_base_port=options.advertised_proxy_base_port,
        ),
        matches,
        lambda: runtime.coordinator.groups,
        answer_here,
        **_high_availability(host.ha),
        refused_here=refused_here(runtime, host.ha),
    )
    cluster = relay.cluster
    cluster.coordinated = relay.coordinates
    if host.ha is not None:  # FindCoordinator names the bridge owning the group's partition
        cluster.owner_of = functools.partial(host.ha.listener_for, relay.matches)
    relay.owner = lambda group_id: runtime.coordinator.ownership.state(group_id)
    metrics = host.metrics
    relay.clients = RelayedClients(
        metrics.observe_relayed if metrics is not None else lambda kind, size: None
    )
    if metrics is not None:  # answers the link writes itself are counted as the server counts its own
        relay.observe_answer = functools.partial(metrics.observe_request, RELAYED)
    adoption = None
    if options.adoption is not None and options.adoption.enabled:
        # Imported here, only when adoption is configured: a bridge without it never loads them.
        from connect_bridge.bridge.adoption.upstream import UpstreamGroups
        from connect_bridge.bridge.adoption.wiring import Adoption

        adoption = Adoption(
            options.adoption,
            UpstreamGroups(options.upstream, options.upstream_security),
            runtime,
            metrics,
        )
    return ProxyMode(options, relay, BrokerListeners(host, cluster), adoption)


class BrokerListeners:
    """The relay listeners, one per upstream broker the bridge knows, on ``base + node id``.

    The brokers present at start get theirs before the bridge accepts anything. A broker learned
    later (from a relayed Metadata, DescribeCluster or FindCoordinator response, or from
    :meth:`watch`'s periodic Metadata request) gets its listener at once, in a task: the response
    that named it waits for that bind (:meth:`ready`), so the address a client reads accepts
    connections, while every other response goes on. A listener is never closed while the bridge
    runs: a broker that left keeps its listener, and a connection to it fails like one to a dead
    broker (the client reconnects elsewhere after its next Metadata)."""

    def __init__(self, host: ListenerHost, cluster: UpstreamCluster) -> None:
        self.host = host
        self.cluster = cluster
        self.opened: list[Listener] = []
        """Every listener opened, for the server to close when it stops."""
        self.open_on: dict[int, int] = {}
        """Node id -> port of every listener open (or bound and about to accept)."""
        self.opening: dict[int, asyncio.Task[None]] = {}
        """Listeners being opened for brokers learned while serving."""
        self.serving = False
        """Set once the bridge accepts connections: listeners opened later start accepting at once."""

    async def open(self, node_id: int) -> Listener:
        """Bind broker ``node_id``'s listener (accepting only once the bridge serves: ``start``
        starts the ones bound before)."""
        port = self.cluster.listener_port(node_id)
        listener = await self.host.listen(port, node_id)
        if self.host.stopping:  # bound while the bridge stops: its close has passed already
            listener.close()
            return listener
        self.opened.append(listener)
        self.open_on[node_id] = port
        if self.serving:
            await listener.start_serving()
        return listener

    def bind_error(self, node_id: int, exc: OSError) -> Exception:
        fix = "proxy_base_port (upstream broker N is proxied on proxy_base_port + N)"
        port = self.cluster.listener_port(node_id)
        return bind_error(f"listen for upstream broker {node_id}", self.host.options.host, port, exc, fix)

    def learned(self, node_id: int) -> None:
        """A broker seen for the first time: open its listener in a task (the caller, a relayed
        response being rewritten, must not wait for the bind; :meth:`ready` lets it)."""
        if not self.serving or node_id in self.open_on or node_id in self.opening:
            return  # before serving, start() binds every known broker itself
        task = asyncio.get_running_loop().create_task(self._open_new(node_id), name=f"listener {node_id}")
        self.opening[node_id] = task
        task.add_done_callback(lambda _: self.opening.pop(node_id, None))

    async def _open_new(self, node_id: int) -> None:
        try:
            await self.open(node_id)
        except OSError as exc:  # logged; the next refresh tries again
            log.error("%s; tried again at the next upstream refresh", self.bind_error(node_id, exc))
            return
        log.info(
            "new upstream broker %d: relaying it on port %d (advertised %s:%d)",
            node_id,
            self.open_on[node_id],
            self.cluster.advertised_host,
            self.cluster.advertised_port(node_id),
        )

    async def ready(self) -> None:
        """Wait until the listeners being opened are open (or failed to bind)."""
        if self.opening:
            await asyncio.wait(list(self.opening.values()))

    def start_serving(self) -> None:
        """The bridge accepts connections now: later listeners accept as soon as they are bound."""
        self.serving = True

    async def watch(self, interval_s: float) -> None:
        """Every ``interval_s``: ask the cluster for its brokers (``UpstreamCluster.refresh``) and
        open a listener for every known broker without one (a bind that failed is tried again).
        A cluster that does not answer is logged once per outage; the relay itself is unaffected."""
        unreachable = False
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.cluster.refresh(timeout_s=min(interval_s, 10.0))
            except OSError as exc:
                if not unreachable:
                    log.warning("upstream metadata refresh failed (brokers not re-read): %s", exc)
                unreachable = True
            else:
                if unreachable:
                    log.info("upstream metadata refresh answered again")
                unreachable = False
            for node_id in sorted(self.cluster.brokers):
                self.learned(node_id)
            await self.ready()


def _high_availability(ha: HighAvailability | None) -> dict[str, Any]:
    """The relay's several-bridges checks (``Relay``'s ``may_forward`` and ``gave_up``), none
    without ``ha``."""
    if ha is None:
        return {}
    return {"may_forward": ha.relay_allowed, "gave_up": ha.gave_up}


def refused_here(runtime: CoordinatorRuntime, ha: HighAvailability | None) -> Callable[[str], bool]:
    """``Relay.refused_here``: the state is loading, or another bridge (or a load here) holds the
    group's partition."""
    if ha is None:
        return lambda group_id: not runtime.loaded
    return lambda group_id: not runtime.loaded or ha.not_owned_here(group_id)


async def forward_upstream(
    relay: Relay, respond: Respond, conn: Connection, payload: bytes, api_key: int, started: float
) -> bool:
    """Forward to the upstream broker behind this listener; False when it is gone."""
    try:
        outcome = await relay.forward(conn, payload, api_key, started=started)
    except OSError as exc:
        log.warning("closing %s: upstream broker %s unreachable: %s", conn.host, conn.node_id, exc)
        return False
    if outcome is PASSED_THROUGH:
        return True  # the link writes the answer itself
    if outcome is UNREACHABLE:
        return False
    if outcome is not None:
        await respond(conn, None, outcome, 0, started)
    return True


async def forward_observed(
    relay: Relay,
    adoption: Adoption,
    respond: Respond,
    conn: Connection,
    payload: bytes,
    decoded: DecodedRequest,
    started: float,
) -> bool:
    """Relay a request of a group under adoption and hand its exchange to the observer."""
    group_id = decoded.body.group_id
    try:
        outcome = await relay.forward(conn, payload, decoded.api_key)
    except BaseException as exc:  # never leave the request counted in flight (a takeover waits)
        adoption.not_relayed(group_id)
        if not isinstance(exc, OSError):
            raise
        log.warning("closing %s: upstream broker %s unreachable: %s", conn.host, conn.node_id, exc)
        return False
    adoption.relayed(conn, payload, decoded, outcome)
    if outcome is UNREACHABLE:
        return False
    if outcome is not None:
        await respond(conn, None, outcome, 0, started)
    return True


__all__ = [
    "LISTEN_BUFFER",
    "BrokerListeners",
    "ListenerHost",
    "ProxyHost",
    "ProxyMode",
    "forward_observed",
    "forward_upstream",
    "proxy_mode",
]
