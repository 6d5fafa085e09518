"""One row per API: where the bridge answers it, how it is bounded, and what answers it.

Every request the bridge treats by its API key is described by one :class:`ApiRow` in
:data:`API_TABLE`; ``server.py`` (routing, frame bounds), ``handlers.py`` (dispatch, wire
conversion) and ``upstream/cluster.py`` (relayed versions, rewriting, split requests) read the sets
and lookups derived here instead of keeping lists of their own. A key without a row is relayed as bytes in
proxy mode; in embedded mode the bridge cannot answer it and closes the connection.

Adding an API:

1. its codec entry: its name in ``codecs.messages.ApiKey`` and its entry in ``codecs.messages.APIS``
   (the codec layer, below the bridge: the request decoder needs them on its own) -- message
   classes and versions for an API the bridge decodes, a ``RelayedApi`` (version cap, response
   class) for one it only relays. Each row here reads it back as :attr:`ApiRow.api`, so key
   facts and versions are written down once;
2. one row here: its ``ApiKey``, its ``proxy`` route, its frame ``limit`` and its ``handler``
   (a :class:`LocalApis` method name for a cluster API, a :func:`group_call` for a group API,
   built from the ``wire.maps`` functions that convert it); :func:`_check` fails at import when an
   entry of ``APIS`` has no row or a row no entry;
3. its handler: the ``LocalApis`` method, or the coordinator method the group call names.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Flag, StrEnum, auto
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from kafka.protocol.api_message import ApiMessage

from connect_bridge.codecs.messages import API_SPECS, KNOWN_APIS, ApiKey, ApiSpec, RelayedApi
from connect_bridge.state import api as napi
from connect_bridge.state.classic import api as capi
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import ANONYMOUS
from connect_bridge.wire import maps as wm


class Route(StrEnum):
    """Where a request goes in proxy mode (embedded, the bridge answers every decoded API)."""

    LOCAL = "local"
    """Answered by the bridge on every listener (its own APIs, ApiVersions)."""
    BY_GROUP = "by-group"
    """Decoded first: answered here for a group the bridge coordinates, else forwarded."""
    BY_GROUPS = "by-groups"
    """Decoded first: here when every group named is the bridge's, forwarded when none is, else
    split between the two and the answers merged (DescribeGroups)."""
    MERGED = "merged"
    """Answered here and upstream, the answers merged (ListGroups)."""
    REWRITTEN = "rewritten"
    """Forwarded; the response's broker addresses are rewritten to the bridge's listeners."""
    FORWARDED = "forwarded"
    """Relayed as bytes both ways (also every key without a row)."""


class Limit(Flag):
    """Frame bounds checked before a request is decoded (decoding costs ~1 us per array entry
    on the event loop, issue 11.6)."""

    NONE = 0
    CLUSTER = auto()
    """Carries no group state: refused above ``limits.max_cluster_request_bytes``."""
    CLUSTER_EMBEDDED = auto()
    """The same, in embedded mode only (proxy mode relays a real cluster's Metadata, which may
    name every topic)."""
    GROUP = auto()
    """Refused above what the request limits admit (``FrameDecoder.too_large``)."""


@dataclass(frozen=True, slots=True)
class Client:
    """Who sent a request (the member's ``ClientId`` and ``ClientHost``, and the connection's
    principal: authorization and member ownership read it, docs/security.md)."""

    client_id: str
    host: str
    principal: str = ANONYMOUS


Answer = ApiMessage | asyncio.Future[ApiMessage] | None
"""What the bridge answers a request it handles itself: the wire response, a future of one (a
parked JoinGroup/SyncGroup), or None (no response)."""

EngineRequest = TypeVar("EngineRequest")
EngineResponse = TypeVar("EngineResponse")


@dataclass(frozen=True, slots=True)
class GroupCall(Generic[EngineRequest, EngineResponse]):
    """How one group API crosses between the wire and the coordinator: the wire request becomes
    the engine's typed request (``state.api``, ``state.classic.api``), the coordinator's typed
    response (None: parked) becomes the wire response."""

    from_wire: Callable[[ApiMessage, int, Client], EngineRequest]
    call: Callable[[GroupCoordinator, EngineRequest, int], EngineResponse | None]
    to_wire: Callable[[EngineResponse, int], ApiMessage]
    error: Callable[[int, str | None], EngineResponse]
    """An engine error response: COORDINATOR_LOAD_IN_PROGRESS while loading, INVALID_REQUEST for
    a request that decodes but breaks the protocol's rules (e.g. a negative task id)."""
    parks: bool = False
    """JoinGroup/SyncGroup: the coordinator may answer later (the response is a future)."""


class FromWire(StrEnum):
    """What a ``wire.maps`` ``*_from_wire`` function takes besides the message."""

    MESSAGE = "message"
    VERSION = "version"
    CLIENT = "client"
    VERSION_AND_CLIENT = "version and client"


def _adapt(
    convert: Callable[..., EngineRequest], takes: FromWire
) -> Callable[[ApiMessage, int, Client], EngineRequest]:
    """One signature for every ``*_from_wire`` function, built once per API (not per request)."""
    if takes is FromWire.MESSAGE:
        return lambda msg, version, client: convert(msg)
    if takes is FromWire.VERSION:
        return lambda msg, version, client: convert(msg, version)
    if takes is FromWire.CLIENT:
        return lambda msg, version, client: convert(msg, client.client_id, client.host)
    return lambda msg, version, client: convert(msg, version, client.client_id, client.host)


def _error(response_type: type[EngineResponse]) -> Callable[[int, str | None], EngineResponse]:
    def build(code: int, message: str | None) -> EngineResponse:
        response = response_type(error_code=code)
        if message is not None and hasattr(response, "error_message"):
            response.error_message = message
        return response

    return build


def group_call(
    from_wire: Callable[..., EngineRequest],
    takes: FromWire,
    call: Callable[[GroupCoordinator, EngineRequest, int], EngineResponse | None],
    to_wire: Callable[[EngineResponse, int], ApiMessage],
    response: type[EngineResponse],
    parks: bool = False,
) -> GroupCall[EngineRequest, EngineResponse]:
    """A group API's handler: ``wire.maps`` in, a coordinator method, ``wire.maps`` out."""
    return GroupCall(_adapt(from_wire, takes), call, to_wire, _error(response), parks)


@dataclass(frozen=True, slots=True)
class ApiRow:
    """One API key and everything the bridge does with it."""

    key: ApiKey
    proxy: Route
    limit: Limit = Limit.NONE
    handler: str | GroupCall[Any, Any] | None = None
    """Embedded mode, and proxy mode when answered here: a ``LocalApis`` method name
    (``method(body, version)``), or the group call; None for a relayed-only API."""
    creates_group: bool = False
    """A request that may create a group: in proxy mode its protocol type decides whose it is."""
    rewrite: str | None = None
    """``REWRITTEN``: the ``UpstreamCluster`` method that points the response at the listeners."""
    acks_only: bool = False
    """Produce: a request with acks=0 gets no response, so none may be waited for."""
    before_auth: bool = False
    """Allowed on a SASL listener before the client authenticated (Kafka's
    ``SaslServerAuthenticator`` accepts only ApiVersions, SaslHandshake and SaslAuthenticate)."""

    @property
    def api(self) -> ApiSpec | RelayedApi:
        """The codec's entry: key, message classes and versions (decoded or relayed)."""
        return KNOWN_APIS[self.key]

    @property
    def spec(self) -> ApiSpec | None:
        """The codec's entry for an API the bridge decodes."""
        return API_SPECS.get(self.key)

    @property
    def response_class(self) -> type:
        """The class a relayed response decodes with (for rewriting)."""
        response = self.api.response
        assert response is not None, f"{self.key.name} has no response class"
        return response

    @property
    def relay_cap(self) -> int | None:
        """The highest version relayed upstream, where the bridge limits it."""
        api = self.api
        caps = [api.max_version] if isinstance(api, RelayedApi) and api.max_version is not None else []
        if self.proxy is Route.REWRITTEN:
            caps.append(self.response_class.max_version)
        return min(caps) if caps else None


_C, _G = Limit.CLUSTER, Limit.GROUP

API_TABLE: tuple[ApiRow, ...] = (
    # --- the bridge's own: answered on every listener
    ApiRow(ApiKey.API_VERSIONS, Route.LOCAL, _C | _G, "api_versions", before_auth=True),
    # SASL: with ``sasl.mode`` passthrough or terminated, ``edge.sasl_gate.SaslGate`` takes these before
    # any routing; without SASL the bridge answers ILLEGAL_SASL_STATE as a non-SASL Kafka listener does.
    ApiRow(ApiKey.SASL_HANDSHAKE, Route.LOCAL, _C, "sasl_not_enabled", before_auth=True),
    ApiRow(ApiKey.SASL_AUTHENTICATE, Route.LOCAL, handler="sasl_not_enabled", before_auth=True),
    ApiRow(
        ApiKey.CONNECT_GROUP_HEARTBEAT,
        Route.LOCAL,
        _G,
        group_call(
            wm.heartbeat_from_wire,
            FromWire.CLIENT,
            GroupCoordinator.connect_heartbeat,
            wm.heartbeat_response_to_wire,
            napi.HeartbeatResponse,
        ),
    ),
    ApiRow(
        ApiKey.CONNECT_GROUP_PREPARE_ASSIGNMENT,
        Route.LOCAL,
        _G,
        group_call(
            wm.prepare_from_wire,
            FromWire.MESSAGE,
            GroupCoordinator.prepare_assignment,
            wm.prepare_response_to_wire,
            napi.PrepareAssignmentResponse,
        ),
    ),
    ApiRow(
        ApiKey.CONNECT_GROUP_INSTALL_ASSIGNMENT,
        Route.LOCAL,
        _G,
        group_call(
            wm.install_from_wire,
            FromWire.MESSAGE,
            GroupCoordinator.install_assignment,
            wm.install_response_to_wire,
            napi.InstallAssignmentResponse,
        ),
    ),
    ApiRow(ApiKey.CONNECT_GROUP_DESCRIBE, Route.LOCAL, _C | _G, "connect_describe"),
    # --- classic group APIs: the bridge's groups here, the broker's upstream
    ApiRow(
        ApiKey.JOIN_GROUP,
        Route.BY_GROUP,
        _G,
        group_call(
            wm.join_from_wire,
            FromWire.VERSION_AND_CLIENT,
            GroupCoordinator.classic_join,
            wm.join_response_to_wire,
            capi.JoinGroupResponse,
            parks=True,
        ),
        creates_group=True,
    ),
    ApiRow(
        ApiKey.SYNC_GROUP,
        Route.BY_GROUP,
        _G,
        group_call(
            wm.sync_from_wire,
            FromWire.VERSION,
            GroupCoordinator.classic_sync,
            wm.sync_response_to_wire,
            capi.SyncGroupResponse,
            parks=True,
        ),
    ),
    ApiRow(
        ApiKey.HEARTBEAT,
        Route.BY_GROUP,
        _G,
        group_call(
            wm.classic_heartbeat_from_wire,
            FromWire.VERSION,
            GroupCoordinator.classic_heartbeat,
            wm.classic_heartbeat_response_to_wire,
            capi.HeartbeatResponse,
        ),
    ),
    ApiRow(
        ApiKey.LEAVE_GROUP,
        Route.BY_GROUP,
        _G,
        group_call(
            wm.leave_from_wire,
            FromWire.VERSION,
            GroupCoordinator.classic_leave,
            wm.leave_response_to_wire,
            capi.LeaveGroupResponse,
        ),
    ),
    ApiRow(ApiKey.DESCRIBE_GROUPS, Route.BY_GROUPS, _C, "describe_groups"),
    ApiRow(ApiKey.LIST_GROUPS, Route.MERGED, _C, "list_groups"),
    # --- cluster APIs: the bridge is the only broker (embedded), or points at its listeners (proxy)
    ApiRow(
        ApiKey.FIND_COORDINATOR, Route.REWRITTEN, _C, "find_coordinator", rewrite="rewrite_find_coordinator"
    ),
    ApiRow(ApiKey.METADATA, Route.REWRITTEN, Limit.CLUSTER_EMBEDDED, "metadata", rewrite="rewrite_metadata"),
    ApiRow(ApiKey.DESCRIBE_CLUSTER, Route.REWRITTEN, rewrite="rewrite_describe_cluster"),
    # --- relayed, with a version cap (``codecs.messages.APIS``)
    ApiRow(ApiKey.PRODUCE, Route.FORWARDED, acks_only=True),
    ApiRow(ApiKey.FETCH, Route.FORWARDED),
)

ROWS: Mapping[int, ApiRow] = MappingProxyType({row.key: row for row in API_TABLE})
"""API key -> its row."""


API_NAMES: Mapping[int, str] = MappingProxyType({key: spec.name for key, spec in API_SPECS.items()})
"""The name of each API the bridge decodes (the metrics label its answers by it)."""


def _keys(keep: Callable[[ApiRow], bool]) -> frozenset[int]:
    return frozenset(int(row.key) for row in API_TABLE if keep(row))


GROUP_CALLS: Mapping[int, GroupCall[Any, Any]] = MappingProxyType(
    {row.key: row.handler for row in API_TABLE if isinstance(row.handler, GroupCall)}
)
"""The group APIs: key -> how it crosses to the coordinator."""
LOCAL_HANDLERS: Mapping[int, str] = MappingProxyType(
    {row.key: row.handler for row in API_TABLE if isinstance(row.handler, str)}
)
"""The cluster APIs answered by a ``LocalApis`` method: key -> method name."""
PROXY_ROUTES: Mapping[int, Route] = MappingProxyType({row.key: row.proxy for row in API_TABLE})
"""Proxy mode: key -> route (a key not here is ``Route.FORWARDED``)."""
DECODED_FOR_ROUTING = _keys(lambda row: row.proxy in (Route.BY_GROUP, Route.BY_GROUPS))
"""Proxy mode: requests decoded (once) because the groups they name decide where they go."""
SPLIT = _keys(lambda row: row.proxy in (Route.BY_GROUPS, Route.MERGED))
"""Proxy mode: requests that may be answered partly here and partly upstream."""
REWRITTEN = _keys(lambda row: row.proxy is Route.REWRITTEN)
CREATES_GROUP = _keys(lambda row: row.creates_group)
ACKS_ONLY = _keys(lambda row: row.acks_only)
BEFORE_AUTH = _keys(lambda row: row.before_auth)
"""Requests a SASL listener serves before authentication; anything else closes the connection."""
GROUP_FRAMES = _keys(lambda row: Limit.GROUP in row.limit)
"""Frames refused above what the request limits admit (``FrameDecoder.too_large``)."""
CLUSTER_FRAMES_EMBEDDED = _keys(lambda row: bool(row.limit & (Limit.CLUSTER | Limit.CLUSTER_EMBEDDED)))
"""Embedded mode: frames refused above ``limits.max_cluster_request_bytes``."""
CLUSTER_FRAMES_PROXY = _keys(lambda row: Limit.CLUSTER in row.limit)
"""Proxy mode: frames refused above ``limits.max_cluster_request_bytes``."""
RELAY_CAPS: Mapping[int, int] = MappingProxyType(
    {row.key: cap for row in API_TABLE if (cap := row.relay_cap) is not None}
)
"""Proxy mode: the highest version of a relayed API the bridge advertises."""


def _check() -> None:
    """Fail at import, not on the first request, when a row and the codec's table disagree: every
    entry of ``codecs.messages.APIS`` has exactly one row, and a handler exactly when it is decoded."""
    if len(ROWS) != len(API_TABLE):
        raise AssertionError("an API key with two rows")
    if set(ROWS) != set(KNOWN_APIS):
        raise AssertionError(f"rows and codec entries differ: {sorted(set(ROWS) ^ set(KNOWN_APIS))}")
    for row in API_TABLE:
        if (row.spec is not None) != (row.handler is not None):
            raise AssertionError(f"{row.key.name}: a handler exactly when the codec decodes it")


_check()
