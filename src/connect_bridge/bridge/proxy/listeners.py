"""Proxy mode's start: the relay in front of the upstream cluster and one listener per broker,
and the listeners of brokers that join the cluster while the bridge runs (:class:`BrokerListeners`).

Apart from ``server.py`` (which calls :func:`start_proxy` from ``BridgeServer.start``) so the
server module keeps to connections and the coordinator loop.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from connect_bridge.bridge.adoption.upstream import UpstreamGroups
from connect_bridge.bridge.adoption.wiring import Adoption
from connect_bridge.bridge.edge.accept import Listener
from connect_bridge.bridge.ha.partitions import HighAvailability
from connect_bridge.bridge.proxy.relay import UNREACHABLE, Relay
from connect_bridge.bridge.startup import address, bind_error, retry_until
from connect_bridge.bridge.upstream.cluster import UpstreamCluster, group_matcher
from connect_bridge.bridge.upstream.task_clients import RelayedClients

log = logging.getLogger("connect_bridge.server")

LISTEN_BUFFER = 64 * 1024
"""The stream reader's buffer limit per connection."""


async def start_proxy(server: Any, advertised_host: str) -> int:
    """Discover the upstream brokers and open one listener per broker (base port + node id) for
    ``server`` (a ``BridgeServer``); sets its relay (and adoption) and returns the node id a
    connection to its own listen port stands for (the lowest broker's)."""
    patterns = server.options.coordinated_groups
    base = server.options.proxy_base_port or server.port + 1
    matches = group_matcher(patterns if patterns is not None else ["connect.*"])
    relay = Relay(
        UpstreamCluster(
            server.options.upstream,
            base,
            advertised_host,
            ssl=server.options.upstream_security.ssl,
            sasl=server.options.upstream_security.sasl,
            advertised_base_port=server.options.advertised_proxy_base_port,
        ),
        matches,
        lambda: server.coordinator.groups,
        lambda request, client: server.apis.handle(request, client),
        **_high_availability(server.ha),
    )
    cluster = relay.cluster
    cluster.coordinated = relay.coordinates
    if server.ha is not None:  # FindCoordinator names the bridge owning the group's partition
        cluster.owner_of = functools.partial(server.ha.listener_for, relay.matches)
    relay.owner = lambda group_id: server.coordinator.ownership.state(group_id)
    metrics = server.metrics
    relay.clients = RelayedClients(
        metrics.observe_relayed if metrics is not None else lambda kind, size: None
    )
    server.relay = relay
    adoption = server.options.adoption
    if adoption is not None and adoption.enabled:
        server.adoption = Adoption(
            adoption,
            UpstreamGroups(server.options.upstream, server.options.upstream_security),
            server.runtime,
            server.metrics,
        )
    upstream = ",".join(address(host, port) for host, port in server.options.upstream)
    await retry_until(
        cluster.discover, f"upstream {upstream}", server.options.upstream_start_timeout_ms / 1000
    )
    listeners = BrokerListeners(server, cluster)
    for node_id in sorted(cluster.brokers):
        try:
            await listeners.open(node_id)
        except OSError as exc:
            raise listeners.bind_error(node_id, exc) from None
    server._bootstrap_node = min(cluster.brokers)
    ports = [cluster.listener_port(n) for n in sorted(cluster.brokers)]
    log.info("proxying %d upstream brokers on ports %s", len(cluster.brokers), ports)
    cluster.on_new_broker = listeners.learned
    relay.listeners_ready = listeners.ready
    server.broker_listeners = listeners
    return server._bootstrap_node


class BrokerListeners:
    """The relay listeners, one per upstream broker the bridge knows, on ``base + node id``.

    The brokers present at start get theirs before the bridge accepts anything. A broker learned
    later (from a relayed Metadata, DescribeCluster or FindCoordinator response, or from
    :meth:`watch`'s periodic Metadata request) gets its listener at once, in a task: the response
    that named it waits for that bind (:meth:`ready`), so the address a client reads accepts
    connections, while every other response goes on. A listener is never closed while the bridge
    runs: a broker that left keeps its listener, and a connection to it fails like one to a dead
    broker (the client reconnects elsewhere after its next Metadata)."""

    def __init__(self, server: Any, cluster: UpstreamCluster) -> None:
        self.server = server
        self.cluster = cluster
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
        listener = await self.server.listen(port, node_id)
        if self.server.stopping:  # bound while the bridge stops: its close has passed already
            listener.close()
            return listener
        self.server._listeners.append(listener)
        self.open_on[node_id] = port
        if self.serving:
            await listener.start_serving()
        return listener

    def bind_error(self, node_id: int, exc: OSError) -> Exception:
        fix = "proxy_base_port (upstream broker N is proxied on proxy_base_port + N)"
        port = self.cluster.listener_port(node_id)
        return bind_error(f"listen for upstream broker {node_id}", self.server.options.host, port, exc, fix)

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


async def forward_upstream(server: Any, conn: Any, payload: bytes, api_key: int, started: float) -> bool:
    """Forward to the upstream broker behind this listener; False when it is gone."""
    assert server.relay is not None
    try:
        outcome = await server.relay.forward(conn, payload, api_key)
    except OSError as exc:
        log.warning("closing %s: upstream broker %s unreachable: %s", conn.host, conn.node_id, exc)
        return False
    if outcome is UNREACHABLE:
        return False
    if outcome is not None:
        await server._respond(conn, None, outcome, 0, started)
    return True


async def forward_observed(server: Any, conn: Any, payload: bytes, decoded: Any, started: float) -> bool:
    """Relay a request of a group under adoption and hand its exchange to the observer."""
    assert server.relay is not None and server.adoption is not None
    group_id = decoded.body.group_id
    try:
        outcome = await server.relay.forward(conn, payload, decoded.api_key)
    except BaseException as exc:  # never leave the request counted in flight (a takeover waits)
        server.adoption.not_relayed(group_id)
        if not isinstance(exc, OSError):
            raise
        log.warning("closing %s: upstream broker %s unreachable: %s", conn.host, conn.node_id, exc)
        return False
    server.adoption.relayed(conn, payload, decoded, outcome)
    if outcome is UNREACHABLE:
        return False
    if outcome is not None:
        await server._respond(conn, None, outcome, 0, started)
    return True


__all__ = ["LISTEN_BUFFER", "BrokerListeners", "forward_observed", "forward_upstream", "start_proxy"]
