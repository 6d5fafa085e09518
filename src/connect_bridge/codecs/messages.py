"""The Kafka wire messages the bridge itself speaks, by API key.

The classic group APIs are kafka-python's own classes (generated from Apache Kafka's JSON specs); the
Connect group APIs are our JSON specs in ``codecs/specs`` loaded by the same engine, so one decoder and
one encoder cover both. The registry is a table rather than code so ApiVersions, the request decoder
and the docs cannot disagree about what is supported.

:data:`APIS` is the one table of every API the bridge treats by its key, with the facts the codec
layer owns: the key, the message classes and the versions (decoded and advertised, or relayed). The
request decoder needs them below the bridge. ``bridge.api_table`` adds one row per key with only what
the bridge does with it (route, frame bounds, handler, wire conversion), reading key and versions
from here; it fails at import when an API here has no row there or the other way round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Any, NamedTuple

from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from connect_bridge.codecs import specs
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import CONNECTOR_TASK, ConnectorTaskId

__all__ = [
    "APIS",
    "API_SPECS",
    "KNOWN_APIS",
    "ApiKey",
    "ApiSpec",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "ConnectGroupDescribeRequest",
    "ConnectGroupDescribeResponse",
    "ConnectGroupHeartbeatRequest",
    "ConnectGroupHeartbeatResponse",
    "ConnectGroupInstallAssignmentRequest",
    "ConnectGroupInstallAssignmentResponse",
    "ConnectGroupPrepareAssignmentRequest",
    "ConnectGroupPrepareAssignmentResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "MetadataRequest",
    "MetadataResponse",
    "RelayedApi",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "WireConnectorTasks",
    "WireConnectorsAndTasks",
    "api_spec",
    "connectors_and_tasks",
    "items_of",
    "supported_api_versions",
]


# --- The Connect group APIs (specs/ConnectGroup*.json) ------------------------------------------


class ConnectGroupHeartbeatRequest(ApiMessage, load_json=specs):
    """Join, leave, heartbeat and report owned work in one call (the draft's core API)."""


class ConnectGroupHeartbeatResponse(ApiMessage, load_json=specs):
    """Epoch, heartbeat interval, and the assignment when it changed; COMPUTE_ASSIGNMENT as an error."""


class ConnectGroupPrepareAssignmentRequest(ApiMessage, load_json=specs):
    """Asks for the input of the client-side assignor after COMPUTE_ASSIGNMENT."""


class ConnectGroupPrepareAssignmentResponse(ApiMessage, load_json=specs):
    """The group state a client-side assignor computes the new target assignment from."""


class ConnectGroupInstallAssignmentRequest(ApiMessage, load_json=specs):
    """Installs a client-side assignor's result as the group's target assignment."""


class ConnectGroupInstallAssignmentResponse(ApiMessage, load_json=specs):
    """Success, or INVALID_ASSIGNMENT when the assignment breaks the draft's invariants."""


class ConnectGroupDescribeRequest(ApiMessage, load_json=specs):
    """Describes groups the bridge coordinates (``connect-bridge describe``)."""


class ConnectGroupDescribeResponse(ApiMessage, load_json=specs):
    """Group type, epochs, leader, config view and per-member current/target assignments."""


# --- The registry ---------------------------------------------------------------------------------


class ApiKey(IntEnum):
    """API keys the bridge knows by name, each with its entry in :data:`APIS`: the ones it decodes
    (an :class:`ApiSpec`) and the relayed ones it treats specially (a :class:`RelayedApi`); every
    other key is relayed upstream undecoded."""

    PRODUCE = 0
    FETCH = 1
    METADATA = 3
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    SASL_AUTHENTICATE = 36
    DESCRIBE_CLUSTER = 60
    CONNECT_GROUP_HEARTBEAT = 1000
    CONNECT_GROUP_PREPARE_ASSIGNMENT = 1001
    CONNECT_GROUP_INSTALL_ASSIGNMENT = 1002
    CONNECT_GROUP_DESCRIBE = 1003


@dataclass(frozen=True)
class ApiSpec:
    """One API: its message classes and the versions the bridge accepts (and advertises)."""

    api_key: ApiKey
    request: type[ApiMessage]
    response: type[ApiMessage]
    min_version: int
    max_version: int

    @classmethod
    def of(
        cls, request: type[ApiMessage], response: type[ApiMessage], min_version: int, max_version: int
    ) -> ApiSpec:
        """An entry whose key is the one its message classes carry (from their JSON spec), so the
        table never states a key its classes could contradict."""
        return cls(ApiKey(request.API_KEY), request, response, min_version, max_version)

    @property
    def name(self) -> str:
        return self.request.name.removesuffix("Request")

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def request_flexible(self, version: int) -> bool:
        """Whether requests of this version use the flexible (v2) request header and compact fields."""
        return bool(self.request.flexible_version_q(version))

    def response_header_version(self, version: int) -> int:
        """0 or 1. ApiVersions always answers with header v0 so any client can parse the answer."""
        if self.api_key == ApiKey.API_VERSIONS:
            return 0
        return 1 if self.response.flexible_version_q(version) else 0


@dataclass(frozen=True)
class RelayedApi:
    """An API the bridge relays without decoding its request, and what the codec knows of it."""

    api_key: ApiKey
    max_version: int | None = None
    """The highest version relayed (None: whatever the client and the broker agree on)."""
    response: type[ApiMessage] | None = None
    """The class its response decodes with, for an API whose response the bridge rewrites."""


APIS: tuple[ApiSpec | RelayedApi, ...] = (
    # Decoded: the versions are what we decode and advertise; the tests check that each range is
    # within what the spec itself declares.
    ApiSpec.of(MetadataRequest, MetadataResponse, 0, 13),
    ApiSpec.of(FindCoordinatorRequest, FindCoordinatorResponse, 0, 6),
    ApiSpec.of(JoinGroupRequest, JoinGroupResponse, 0, 9),
    ApiSpec.of(HeartbeatRequest, HeartbeatResponse, 0, 4),
    ApiSpec.of(LeaveGroupRequest, LeaveGroupResponse, 0, 5),
    ApiSpec.of(SyncGroupRequest, SyncGroupResponse, 0, 5),
    ApiSpec.of(DescribeGroupsRequest, DescribeGroupsResponse, 0, 6),
    ApiSpec.of(ListGroupsRequest, ListGroupsResponse, 0, 5),
    ApiSpec.of(ApiVersionsRequest, ApiVersionsResponse, 0, 4),
    # SASL: v0 of SaslHandshake (tokens unframed on the socket) is gone since Kafka 4.0 (KIP-896).
    ApiSpec.of(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1),
    ApiSpec.of(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2),
    ApiSpec.of(ConnectGroupHeartbeatRequest, ConnectGroupHeartbeatResponse, 0, 0),
    ApiSpec.of(ConnectGroupPrepareAssignmentRequest, ConnectGroupPrepareAssignmentResponse, 0, 0),
    ApiSpec.of(ConnectGroupInstallAssignmentRequest, ConnectGroupInstallAssignmentResponse, 0, 0),
    ApiSpec.of(ConnectGroupDescribeRequest, ConnectGroupDescribeResponse, 0, 1),
    # Relayed: Produce v10+ and Fetch v16+ may carry NodeEndpoints, which the bridge does not rewrite.
    RelayedApi(ApiKey.PRODUCE, max_version=9),
    RelayedApi(ApiKey.FETCH, max_version=15),
    RelayedApi(ApiKey.DESCRIBE_CLUSTER, response=DescribeClusterResponse),
)
"""Every API the bridge treats by its key: the one place its key, classes and versions are written."""

KNOWN_APIS: Mapping[int, ApiSpec | RelayedApi] = MappingProxyType({api.api_key: api for api in APIS})
"""API key -> its entry in :data:`APIS`."""

API_SPECS: Mapping[int, ApiSpec] = MappingProxyType(
    {key: api for key, api in KNOWN_APIS.items() if isinstance(api, ApiSpec)}
)
"""API key -> :class:`ApiSpec` for every API the bridge decodes."""


def api_spec(api_key: int) -> ApiSpec | None:
    return API_SPECS.get(api_key)


def supported_api_versions() -> list[tuple[int, int, int]]:
    """``(api_key, min_version, max_version)`` rows for the locally handled APIs, for ApiVersions."""
    return [(int(s.api_key), s.min_version, s.max_version) for s in API_SPECS.values()]


# --- Connectors and tasks on the wire ---------------------------------------------------------------
#
# The Connect APIs carry work as {Connectors: [name], Tasks: [{Connector, TaskIds: [int]}]} (the draft's
# shape), while every other layer uses ConnectorTaskId with task -1 for the connector instance (the
# embedded protocol's shape). These two helpers are the only place the two meet.


class WireConnectorTasks(NamedTuple):
    """One ``Tasks`` entry; field order is the spec's, so the encoder can read it as a tuple."""

    connector: str
    task_ids: list[int]


class WireConnectorsAndTasks(NamedTuple):
    """Any ``ConnectorsAndTasks``-shaped struct (also ``CurrentAssignment``, ``PendingRevocation``...)."""

    connectors: list[str]
    tasks: list[WireConnectorTasks]


def connectors_and_tasks(items: Iterable[ConnectorTaskId]) -> WireConnectorsAndTasks:
    """Work items in the wire shape, sorted so equal sets always encode to equal bytes."""
    connectors: set[str] = set()
    tasks: dict[str, set[int]] = {}
    for item in items:
        if item.task == CONNECTOR_TASK:
            connectors.add(item.connector)
        elif item.task >= 0:
            tasks.setdefault(item.connector, set()).add(item.task)
        else:
            raise CodecError(f"task index {item.task} of connector {item.connector!r} is not encodable")
    return WireConnectorsAndTasks(
        sorted(connectors),
        [WireConnectorTasks(name, sorted(ids)) for name, ids in sorted(tasks.items())],
    )


def items_of(value: Any, field: str = "ConnectorsAndTasks") -> frozenset[ConnectorTaskId]:
    """The work items in a decoded (or constructed) ``ConnectorsAndTasks``-shaped value; null = none.

    Task ids must be >= 0 (the connector instance is listed under ``Connectors``); anything else is a
    request the coordinator should answer with INVALID_REQUEST, hence a :class:`CodecError` naming the
    field rather than a silently conflated connector instance.
    """
    if value is None:
        return frozenset()
    out: set[ConnectorTaskId] = set()
    for name in value.connectors or ():
        if name is None:
            raise CodecError("null connector name", field=f"{field}.Connectors")
        out.add(ConnectorTaskId(name, CONNECTOR_TASK))
    for i, entry in enumerate(value.tasks or ()):
        connector, task_ids = entry.connector, entry.task_ids
        if connector is None:
            raise CodecError("null connector name", field=f"{field}.Tasks[{i}].Connector")
        for task in task_ids or ():
            if task < 0:
                raise CodecError(f"negative task id {task}", field=f"{field}.Tasks[{i}].TaskIds")
            out.add(ConnectorTaskId(connector, task))
    return frozenset(out)
