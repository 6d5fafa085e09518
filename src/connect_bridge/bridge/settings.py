"""Settings of ``connect-bridge serve``: one YAML file, validated by pydantic, plus CLI overrides.

Everything an operator can get wrong is checked here, before a socket is opened, and reported as one
line naming the file and the field path, so a bad deploy fails at start with an actionable message
instead of misbehaving under load. The coordinator's knobs mirror ``state.config.CoordinatorConfig``
(whose defaults are taken from that class, so the two cannot drift); ``to_config`` hands them to the
pure engine.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from connect_bridge.bridge.adoption.settings import AdoptionSettings
from connect_bridge.bridge.edge.connection_settings import ConnectionSettings
from connect_bridge.bridge.ha.settings import HaSettings
from connect_bridge.bridge.security.authorization import AuthorizationSettings
from connect_bridge.bridge.security.sasl_settings import SaslSettings, UpstreamSasl, check_sasl_combination
from connect_bridge.bridge.security.tls import ListenerTls, UpstreamTls
from connect_bridge.bridge.validation import format_validation_error, nearest_key, section_model
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy
from connect_bridge.state.limits import INT16_STRING_BYTES, RequestLimits

MiB = 1024 * 1024
DEFAULT_MAX_FRAME_BYTES = 100 * MiB
MAX_INT32 = 2**31 - 1
MAX_PORT = 65535

_DEFAULTS = CoordinatorConfig()
_LIMITS = RequestLimits()
_REQUEST_LIMIT_FIELDS = {f.name for f in dataclasses.fields(RequestLimits)}
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.%\w]+)\]|(?P<host>[^\s:\[\]]+)):(?P<port>\d{1,5})$")


class SettingsError(ValueError):
    """A settings problem, already formatted as one line: ``<source>: <field.path>: <message>``."""


def parse_host_port(value: str, *, allow_zero_port: bool = False) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6addr]:PORT`` for IPv6) and check the port range.

    Port 0 ("any free port") only makes sense for our own listeners (tests bind to it), never for an
    address we connect to, hence ``allow_zero_port``.
    """
    match = _HOST_PORT.match(value)
    if match is None:
        raise ValueError(f"expected HOST:PORT (IPv6 as [ADDR]:PORT), got {value!r}")
    host = match.group("v6") or match.group("host")
    port = int(match.group("port"))
    low = 0 if allow_zero_port else 1
    if not low <= port <= MAX_PORT:
        raise ValueError(f"port must be in {low}..{MAX_PORT}, got {port}")
    return host, port


def _listen_address(value: str) -> str:
    parse_host_port(value, allow_zero_port=True)
    return value


def _remote_address(value: str) -> str:
    parse_host_port(value)
    return value


ListenAddress = Annotated[str, AfterValidator(_listen_address)]
"""An address we bind: port 0 allowed."""
RemoteAddress = Annotated[str, AfterValidator(_remote_address)]
"""An address we connect to."""


class _Strict(BaseModel):
    """Unknown keys are errors: a typo in a YAML key must not silently fall back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class CoordinatorSettings(_Strict):
    """The group coordinator's configs (Kafka's ``group.*`` broker configs and Connect's delay)."""

    session_timeout_ms: int = Field(_DEFAULTS.session_timeout_ms, gt=0)
    heartbeat_interval_ms: int = Field(_DEFAULTS.heartbeat_interval_ms, gt=0)
    scheduled_rebalance_max_delay_ms: int = Field(_DEFAULTS.scheduled_rebalance_max_delay_ms, ge=0)
    worker_request_timeout_ms: int = Field(_DEFAULTS.worker_request_timeout_ms, gt=0)
    """The largest ``request.timeout.ms`` among the workers (no request carries it): how long a
    JoinGroup a worker parked at a paused previous owner can keep it running its tasks."""
    default_assignor: Literal["connect-cooperative", "connect-eager"] = "connect-cooperative"
    max_group_size: int = Field(_DEFAULTS.max_group_size, gt=0, le=MAX_INT32)
    max_groups: int = Field(_DEFAULTS.max_groups, gt=0)
    migration_policy: MigrationPolicy = _DEFAULTS.migration_policy
    classic_initial_rebalance_delay_ms: int = Field(_DEFAULTS.classic_initial_rebalance_delay_ms, ge=0)
    classic_min_session_timeout_ms: int = Field(_DEFAULTS.classic_min_session_timeout_ms, gt=0)
    classic_max_session_timeout_ms: int = Field(_DEFAULTS.classic_max_session_timeout_ms, gt=0)
    classic_cooperative_switch_rebalance_ms: int | None = Field(
        _DEFAULTS.classic_cooperative_switch_rebalance_ms, ge=0
    )
    empty_group_expiry_ms: int | None = Field(_DEFAULTS.empty_group_expiry_ms, gt=0)
    """How long an emptied group stays before it is deleted (Kafka: at its next cleanup, every
    ``offsets.retention.check.interval.ms``, 10 minutes); null keeps empty groups."""

    @model_validator(mode="after")
    def _consistent(self) -> CoordinatorSettings:
        # Same rules Kafka enforces at broker start: a heartbeat interval not below the session
        # timeout would expire every member, and an empty classic timeout window rejects every join.
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be below "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.classic_min_session_timeout_ms > self.classic_max_session_timeout_ms:
            raise ValueError(
                f"classic_min_session_timeout_ms ({self.classic_min_session_timeout_ms}) must not exceed "
                f"classic_max_session_timeout_ms ({self.classic_max_session_timeout_ms})"
            )
        return self

    def to_config(self) -> CoordinatorConfig:
        """The engine's own (pydantic-free) config: ``state`` must not depend on settings parsing."""
        return CoordinatorConfig(**self.model_dump())


class LimitsSettings(_Strict):
    """Bounds on what one client controls (docs/serve.md "Limits"): request contents, buffered bytes,
    requests in flight per connection, cache sizes."""

    max_string_bytes: int = Field(_LIMITS.max_string_bytes, gt=0, le=INT16_STRING_BYTES)
    max_bytes_field: int = Field(_LIMITS.max_bytes_field, gt=0)
    max_items: int = Field(_LIMITS.max_items, gt=0)
    max_request_bytes: int = Field(_LIMITS.max_request_bytes, gt=0, le=32 * MiB)
    describe_max_groups: int = Field(_LIMITS.describe_max_groups, gt=0)
    """Groups one DescribeGroups / ConnectGroupDescribe describes; later ones are deferred (14)."""
    describe_max_members: int = Field(_LIMITS.describe_max_members, gt=0)
    describe_max_ids: int = Field(_LIMITS.describe_max_ids, gt=0)
    """Group ids one describe request may name; more closes the connection."""
    max_cluster_request_bytes: int = Field(_LIMITS.max_cluster_request_bytes, gt=0)
    """Frame size of the cluster APIs the bridge decodes (FindCoordinator, Metadata, describe...)."""
    max_inflight_per_connection: int = Field(64, gt=0)
    """Relayed requests read but not yet answered on one connection; past this the bridge stops
    reading it. A request the bridge answers itself is always one in flight (as Kafka's broker)."""
    max_buffered_bytes: int = Field(256 * MiB, gt=0)
    """Bytes of large frames (over 1 MiB) being read at once over all connections."""
    heartbeat_cache_bytes: int = Field(16 * MiB, gt=0)
    """Memory for the steady-heartbeat cache (request bytes kept per stable member)."""

    def to_limits(self) -> RequestLimits:
        """The engine's per-request bounds: the fields ``RequestLimits`` has. The others here bound
        the server (in-flight requests, buffers, caches) and go to ``ServerOptions``."""
        return RequestLimits(**self.model_dump(include=_REQUEST_LIMIT_FIELDS))


class ConfigViewSource(_Strict):
    """Where the config view comes from: the Connect config topic of the upstream cluster, or a JSON
    file (``config_source.read_config_view`` describes its format) standing in for that topic when
    the bridge runs without one."""

    file: Path | None = None
    topic: str | None = Field(None, min_length=1)
    """The Connect config topic on the upstream cluster (``config.storage.topic``), instead of a file."""
    group: str | None = Field(None, min_length=1)
    """The group id the view applies to; None applies it to every Connect group the bridge hosts."""
    poll_interval_ms: int = Field(1000, gt=0)

    @model_validator(mode="after")
    def _one_source(self) -> ConfigViewSource:
        if (self.file is None) == (self.topic is None):
            raise ValueError("config_view needs exactly one of 'file' or 'topic'")
        return self

    def applies_to(self, group_id: str) -> bool:
        return self.group is None or self.group == group_id


class BridgeSettings(_Strict):
    """Everything ``connect-bridge serve`` needs. Relative paths are relative to the working directory."""

    listen: ListenAddress = "127.0.0.1:9092"
    advertised_host: str | None = Field(None, min_length=1)
    """Host workers are told to connect to; defaults to the listen host (see ``advertised``)."""
    advertised_port: int | None = Field(None, ge=1, le=MAX_PORT)
    state_dir: Path = Path("state")
    metrics_listen: ListenAddress | None = "127.0.0.1:9404"
    """HTTP listener for /metrics, /livez, /readyz; None (or "off") disables it."""
    max_frame_bytes: int = Field(DEFAULT_MAX_FRAME_BYTES, gt=0, le=MAX_INT32)
    """Largest request frame accepted; checked on the 4-byte length prefix, before buffering."""
    max_connections: int = Field(10000, gt=0)
    idle_timeout_ms: int = Field(600000, gt=0)
    event_loop: Literal["auto", "uvloop", "asyncio"] = "auto"
    """``auto``: uvloop when it is installed (a dependency), else asyncio's own loop."""
    coordinator: CoordinatorSettings = CoordinatorSettings()
    limits: LimitsSettings = LimitsSettings()
    config_view: ConfigViewSource | None = None
    upstream: list[RemoteAddress] = []
    """Bootstrap brokers of the real cluster (HOST:PORT); what the bridge does not answer goes there."""
    state_topic: str | None = Field(None, min_length=1)
    """With ``upstream``: keep the state records on this compacted topic instead of ``state_dir``."""
    upstream_start_timeout_ms: int = Field(60000, gt=0)
    """With ``upstream``: how long ``serve`` retries an unreachable cluster at start (backoff 1 s
    doubling to 10 s) before it gives up with one line; brokers and bridge often start together."""
    upstream_metadata_refresh_ms: int = Field(30000, gt=0)
    """With ``upstream``: how often the bridge asks the cluster for its brokers, to open the relay
    listener of a broker that joined (a relayed Metadata response naming one opens it at once)."""
    proxy_base_port: int | None = Field(None, ge=1, le=MAX_PORT)
    """With ``upstream``: the listener of upstream broker N is on this port + N (default: listen port + 1)."""
    advertised_proxy_base_port: int | None = Field(None, ge=1, le=MAX_PORT)
    """With ``upstream``: clients are told upstream broker N is at ``advertised_host`` on this port
    + N (default: the bound ``proxy_base_port``). For listeners reached through a NAT, a load
    balancer or a Kubernetes Service that maps ports: the bind addresses never leave the bridge."""
    coordinated_groups: list[str] | None = None
    """Regexes of the group ids the bridge coordinates (default: every group embedded; in front of
    an upstream cluster exactly ``config_view.group`` if set, else ``connect.*``; other groups go to
    the real coordinator)."""
    tls: ListenerTls | None = None
    """TLS on the worker listener and on every proxy listener (docs/security.md); None: plaintext."""
    metrics_tls: ListenerTls | None = None
    """TLS (HTTPS) on the metrics listener; None: plain HTTP."""
    admin_allow_remote: bool = False
    """Answer the admin endpoint (``/admin/...`` on the metrics listener) from any peer. Off: only
    loopback peers and clients whose certificate ``metrics_tls`` verified; others get 403
    (``admin_access.py``, docs/security.md)."""
    # The metrics/admin listener's bounds and the admin token (docs/security.md "Bounds").
    metrics_max_connections: int = Field(64, gt=0)
    """Connections the metrics listener holds at once, counted from accept (before a TLS handshake;
    half of them at most in a handshake, a quarter from one address); past it a new one is closed
    at accept (503 first on plaintext)."""
    metrics_request_timeout_ms: int = Field(5000, gt=0)
    """Time from accept a client of the metrics listener has for its TLS handshake and its whole
    request head together."""
    metrics_group_ids: bool = True
    """Label the per-group series of /metrics with the group id; false: with ``sha256:`` and the
    first 12 hex digits of its SHA-256 instead (/metrics answers whoever reaches the listener)."""
    admin_token_file: Path | None = None
    """The token a state-changing admin request needs (``Authorization: Bearer``), created 0600 when
    missing; default ``<state_dir>/admin.token`` (``admin_access.py``)."""
    admin_hosts: list[str] = []
    """Host names the admin endpoint answers to besides IP addresses, localhost and this machine's name."""

    @property
    def admin_token_path(self) -> Path:
        return self.admin_token_file if self.admin_token_file is not None else self.state_dir / "admin.token"

    upstream_tls: UpstreamTls | None = None
    """TLS on every connection the bridge opens to the upstream brokers (relay links, discovery,
    state and config topics); None: plaintext."""
    sasl: SaslSettings = SaslSettings()
    """How clients of the bridge authenticate: passthrough, terminated or none (docs/security.md)."""
    upstream_sasl: UpstreamSasl | None = None
    """The bridge's own SASL identity on the upstream cluster (discovery, state and config topics)."""
    authorization: AuthorizationSettings = AuthorizationSettings()
    """Group ACLs for the groups the bridge coordinates (docs/security.md "Authorization wired")."""
    adoption: AdoptionSettings = AdoptionSettings()
    """Which groups the bridge may take over from the upstream coordinator, and when (docs/adoption.md)."""
    ha: HaSettings = HaSettings()
    """Several bridges sharing the groups through ``state_topic``'s partitions (docs/high-availability.md)."""
    connections: ConnectionSettings = ConnectionSettings()
    """What a client may hold before it authenticated: slots, deadlines, frame sizes (docs/security.md)."""

    @model_validator(mode="after")
    def _ha_needs_state_topic(self) -> BridgeSettings:
        if self.ha.enabled and (not self.upstream or self.state_topic is None):
            raise ValueError(
                "ha.enabled needs upstream and state_topic (the bridges share their state through "
                "the upstream cluster's state topic)"
            )
        if self.ha.enabled and self.adoption.enabled:
            raise ValueError(
                "ha.enabled and adoption.groups cannot be combined yet; adopt with one bridge first"
            )
        return self

    @model_validator(mode="after")
    def _adoption_needs_upstream(self) -> BridgeSettings:
        if self.adoption.enabled and not self.upstream:
            raise ValueError(
                "adoption.groups needs upstream (groups are adopted from the upstream cluster's coordinator)"
            )
        return self

    @model_validator(mode="after")
    def _acls_from_upstream_need_upstream(self) -> BridgeSettings:
        if self.authorization.enabled and self.authorization.from_upstream and not self.upstream:
            raise ValueError(
                "authorization.from_upstream needs upstream (the ACLs are read from the upstream "
                "cluster); without one use authorization.acl_file"
            )
        return self

    @model_validator(mode="after")
    def _sasl_fits_upstream(self) -> BridgeSettings:
        check_sasl_combination(self.sasl, self.upstream_sasl, self.upstream)
        return self

    @field_validator("metrics_listen", mode="before")
    @classmethod
    def _check_metrics_listen(cls, value: Any) -> Any:
        # A CLI override cannot pass None, so the usual spellings of "disabled" mean None too; and
        # YAML 1.1 reads a bare ``off``/``no``/``false`` as False.
        if value is False:
            return None
        if isinstance(value, str) and value.strip().lower() in {"", "off", "none", "null", "disabled"}:
            return None
        return value

    @field_validator("upstream", mode="before")
    @classmethod
    def _split_upstream(cls, value: Any) -> Any:
        # ``--upstream a:1,b:2`` arrives as one string. An empty one (``--upstream "$UNSET"``) is
        # an error, not "no upstream": that would silently start an embedded bridge instead.
        if isinstance(value, str):
            parts = [part.strip() for part in value.split(",") if part.strip()]
            if not parts:
                raise ValueError(f"expected HOST:PORT[,HOST:PORT...], got {value!r}")
            return parts
        return value

    @model_validator(mode="after")
    def _topics_need_upstream(self) -> BridgeSettings:
        # Both topics live on the upstream cluster; without one the bridge would silently read
        # nothing (config view) or keep state elsewhere (state topic), which an operator would
        # only find out after a rebalance went wrong.
        if not self.upstream:
            if self.config_view is not None and self.config_view.topic is not None:
                raise ValueError(
                    "config_view.topic needs upstream (the topic is read from the upstream cluster); "
                    "set upstream, or use config_view.file without one"
                )
            if self.state_topic is not None:
                raise ValueError(
                    "state_topic needs upstream (the topic lives on the upstream cluster); "
                    "set upstream, or drop state_topic to keep the state in state_dir"
                )
            if self.upstream_tls is not None:
                raise ValueError(
                    "upstream_tls needs upstream (it secures the connections to the upstream cluster)"
                )
        return self

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_host_port(self.listen, allow_zero_port=True)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return (
            None
            if self.metrics_listen is None
            else parse_host_port(self.metrics_listen, allow_zero_port=True)
        )

    @property
    def upstream_addresses(self) -> list[tuple[str, int]]:
        return [parse_host_port(address) for address in self.upstream]

    @property
    def upstream_bootstrap(self) -> str:
        """``upstream`` as kafka-python's ``bootstrap_servers`` (for the state and config topics)."""
        return ",".join(f"{host}:{port}" for host, port in self.upstream_addresses)

    def advertised(self, bound_port: int | None = None) -> tuple[str, int]:
        """The address put in FindCoordinator/Metadata responses.

        Defaults to the listen address, except that a wildcard listen host is replaced by this
        machine's host name (workers cannot connect to 0.0.0.0) and a listen port of 0 by the port
        actually bound (``bound_port``), which is only known once the server is up.
        """
        listen_host, listen_port = self.listen_address
        host = self.advertised_host
        if host is None:
            host = socket.gethostname() if listen_host in _WILDCARD_HOSTS else listen_host
        port = self.advertised_port
        if port is None:
            port = bound_port if listen_port == 0 and bound_port is not None else listen_port
        return host, port


def _check_override_key(dotted: str) -> None:
    """Reject unknown names here: pydantic would blame a made-up section's shape, not the name."""
    keys = dotted.split(".")
    model: type[BaseModel] | None = BridgeSettings
    for index, key in enumerate(keys):
        parent = ".".join(keys[:index])
        if model is None:
            raise SettingsError(f"command line: {dotted}: {parent} is a value, not a section")
        field = model.model_fields.get(key)
        if field is None:
            guess = nearest_key(key, list(model.model_fields))
            hint = f"; did you mean {guess}?" if guess else ""
            raise SettingsError(
                f"command line: {dotted}: no setting {key!r} in {parent or 'the top level'}{hint}"
            )
        model = section_model(field.annotation)


def _apply_override(data: dict[str, Any], dotted: str, value: Any) -> None:
    _check_override_key(dotted)
    keys = dotted.split(".")
    node = data
    for index, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            section = ".".join(keys[: index + 1])
            raise SettingsError(f"command line: {dotted}: {section} is not a section")
        node = child
    node[keys[-1]] = value


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise SettingsError(f"{path}: invalid YAML: {where}{exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
    if data is None:  # an empty (or all-comments) file means "all defaults"
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: the top level must be a mapping of settings, got {type(data).__name__}")
    return data


def load_settings(path: Path | None = None, overrides: Mapping[str, Any] | None = None) -> BridgeSettings:
    """Read ``path`` (YAML; None = defaults only), apply ``overrides``, validate.

    Override keys are dotted setting paths (``listen``, ``coordinator.session_timeout_ms``); values
    may be strings (they are converted like YAML scalars would be by pydantic). A None value means
    "not given" so an argparse namespace can be passed through unfiltered. Raises SettingsError.
    """
    data = _read_yaml(path) if path is not None else {}
    given = {key: value for key, value in (overrides or {}).items() if value is not None}
    for key, value in given.items():
        _apply_override(data, key, value)
    try:
        return BridgeSettings.model_validate(data)
    except ValidationError as exc:
        source = str(path) if path is not None else "command line"
        raise SettingsError(format_validation_error(source, exc, frozenset(given), BridgeSettings)) from None


_EXAMPLE_YAML = """\
# connect-bridge serve --config bridge.yaml
# Every key is optional; the values shown are the defaults unless marked "example".

# Where workers connect (their bootstrap.servers). HOST:PORT, IPv6 as [ADDR]:PORT.
listen: "127.0.0.1:9092"
# What FindCoordinator tells workers; defaults to the listen host and port.
# advertised_host: bridge-1.example.internal   # example
# advertised_port: 9092                        # example

# Durable group state (the record store's log files).
state_dir: state

# HTTP endpoint for /metrics, /livez and /readyz; off (or null) disables it.
metrics_listen: "127.0.0.1:9404"

# Network limits. A frame larger than max_frame_bytes closes the connection before it is read.
max_frame_bytes: 104857600      # 100 MiB
max_connections: 10000
idle_timeout_ms: 600000         # close connections silent for 10 minutes
event_loop: auto                # uvloop when installed; or uvloop | asyncio

coordinator:
  session_timeout_ms: 10000
  heartbeat_interval_ms: 3000
  scheduled_rebalance_max_delay_ms: 300000   # = the workers' scheduled.rebalance.max.delay.ms
  worker_request_timeout_ms: 40000           # >= the workers' request.timeout.ms
  default_assignor: connect-cooperative      # or connect-eager
  max_group_size: 2147483647
  max_groups: 100000
  migration_policy: bidirectional            # upgrade | downgrade | disabled
  classic_initial_rebalance_delay_ms: 3000
  classic_min_session_timeout_ms: 6000
  classic_max_session_timeout_ms: 1800000
  classic_cooperative_switch_rebalance_ms: 3000   # null: no extra rebalance after eager -> cooperative
  empty_group_expiry_ms: 600000              # an emptied group is deleted 10 min later; null: kept

# What one client may send and hold (docs: "Hostile or broken input").
limits:
  max_string_bytes: 4096
  max_bytes_field: 1048576
  max_items: 100000
  max_request_bytes: 8388608
  describe_max_groups: 1000
  describe_max_members: 2000
  describe_max_ids: 2000
  max_cluster_request_bytes: 65536
  max_inflight_per_connection: 64
  max_buffered_bytes: 268435456
  heartbeat_cache_bytes: 16777216

# The config view (connectors and task counts), read from a JSON file that is watched for changes:
#   {"offset": 42, "connectors": {"orders-sink": 4, "users-source": 1}}
config_view:                     # example; omit the section when there is no file
  file: connect-config.json
  group: connect-cluster         # the group id it applies to; omit for every group
  poll_interval_ms: 1000

# What a client may hold on the worker listener before it authenticated (docs/security.md
# "Before authentication"). The frame limits and the deadline apply on listeners with SASL.
connections:
  listen_backlog: 1024                    # queued by the kernel before accept (capped by somaxconn)
  tls_handshake_timeout_ms: 10000
  max_unauthenticated: null               # null: half of max_connections
  max_unauthenticated_per_address: 100    # each loopback address counts on its own; null: no limit
  max_per_address: null                   # every connection from one address; null: no limit
  authentication_timeout_ms: 30000
  max_unauthenticated_frame_bytes: 524288
  max_unauthenticated_buffered_bytes: 16777216

# Brokers of the real Kafka cluster: every other API is relayed to them (docs/upstream.md).
upstream: []
# With upstream: how long serve retries an unreachable cluster at start before it gives up.
upstream_start_timeout_ms: 60000
# With upstream: how often the bridge reads the cluster's brokers (a new broker gets its listener).
upstream_metadata_refresh_ms: 30000
"""


def example_yaml() -> str:
    """A commented example config (docs/serve.md embeds it; a test keeps the two identical)."""
    return _EXAMPLE_YAML
