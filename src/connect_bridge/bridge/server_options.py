"""What a bridge server is told at start: listeners, bounds, and the upstream cluster (if any).

Apart from ``server.py`` so settings and tests can build options without the server's imports;
``server.ServerOptions`` is the same class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from connect_bridge.bridge.adoption.settings import AdoptionSettings
from connect_bridge.bridge.edge.connection_settings import ConnectionSettings
from connect_bridge.bridge.ha.settings import HaSettings
from connect_bridge.bridge.security.authorization import GroupAuthorizer
from connect_bridge.bridge.security.sasl_settings import SaslSettings
from connect_bridge.bridge.security.tls import ReloadingServerContext
from connect_bridge.bridge.security.upstream_security import UpstreamSecurity
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.limits import RequestLimits


@dataclass
class ServerOptions:
    """The ``serve`` settings the server itself reads (``settings.py`` maps the YAML onto these)."""

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
    advertised_proxy_base_port: int | None = None
    """Clients are told upstream broker N is at the advertised host on this port + N (default: the
    bound base): listeners behind a NAT or a port-mapping load balancer."""
    coordinated_groups: list[str] | None = None
    """Regexes of the groups the bridge coordinates; None = all (embedded) / 'connect.*' (proxy)."""
    limits: RequestLimits = field(default_factory=RequestLimits)
    max_inflight_per_connection: int = 64
    """Relayed requests read and not yet answered on one connection before the bridge stops reading
    it; a request the bridge answers itself is one in flight (``BridgeServer._muted``)."""
    max_buffered_bytes: int = 256 * 1024 * 1024
    """Bytes of large frames being read at once, over all connections."""
    heartbeat_cache_bytes: int = 16 * 1024 * 1024
    upstream_start_timeout_ms: int = 60_000
    """How long ``start`` retries an unreachable upstream cluster before giving up."""
    upstream_metadata_refresh_ms: int = 30_000
    """How often the bridge reads the upstream cluster's brokers itself, to open the listener of a
    broker that joined (relayed Metadata responses also reveal one at once)."""
    connections: ConnectionSettings = field(default_factory=ConnectionSettings)
    """What a client may hold before it authenticated (``connections:``, docs/security.md)."""
    tls: ReloadingServerContext | None = None
    """TLS of the worker listener and the proxy listeners (one context, reloaded per handshake)."""
    upstream_security: UpstreamSecurity = field(default_factory=UpstreamSecurity)
    """TLS (and SASL) of the bridge's own connections to the upstream brokers."""
    authorizer: GroupAuthorizer | None = None
    """Group ACLs (``authorization.enabled``); None: every principal may use every group."""
    sasl: SaslSettings | None = None
    """How clients authenticate (``sasl:``): passthrough, terminated; None or mode none: no SASL."""
    adoption: AdoptionSettings | None = None
    """Which groups may be taken over from the upstream coordinator (``adoption:``; proxy mode)."""
    state_topic: str | None = None
    """The state topic (``ha``: the bridges' group subscribes to it)."""
    ha: HaSettings | None = None
    """Several bridges share the groups (``ha.enabled``; proxy mode with a partitioned state topic)."""
