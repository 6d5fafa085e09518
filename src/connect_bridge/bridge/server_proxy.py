"""Proxy mode's start: the relay in front of the upstream cluster and one listener per broker.

Apart from ``server.py`` (which calls :func:`start_proxy` from ``BridgeServer.start``) so the
server module keeps to connections and the coordinator loop.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from connect_bridge.bridge.adoption_upstream import UpstreamGroups
from connect_bridge.bridge.proxy import UpstreamCluster, group_matcher
from connect_bridge.bridge.server_adoption import Adoption
from connect_bridge.bridge.server_ha import HighAvailability
from connect_bridge.bridge.server_relay import UNREACHABLE, Relay
from connect_bridge.bridge.startup import address, bind_error, retry_until
from connect_bridge.bridge.task_clients import RelayedClients

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
    for node_id in sorted(cluster.brokers):
        port = cluster.listener_port(node_id)
        try:
            listener = await server.listen(port, node_id)
        except OSError as exc:
            fix = "proxy_base_port (upstream broker N is proxied on proxy_base_port + N)"
            raise bind_error(
                f"listen for upstream broker {node_id}", server.options.host, port, exc, fix
            ) from None
        server._listeners.append(listener)
    server._bootstrap_node = min(cluster.brokers)
    ports = [cluster.listener_port(n) for n in sorted(cluster.brokers)]
    log.info("proxying %d upstream brokers on ports %s", len(cluster.brokers), ports)
    return server._bootstrap_node


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


__all__ = ["LISTEN_BUFFER", "forward_observed", "forward_upstream", "start_proxy"]
