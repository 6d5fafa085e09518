"""The APIs the bridge answers itself: ApiVersions, FindCoordinator, Metadata and every group API.

Which method answers which API key is a column of ``api_table``: a cluster API names a method of
:class:`LocalApis`, a group API a :class:`GroupCall` (``wire.maps`` to the coordinator's typed
request, the coordinator method, ``wire.maps`` back). The group path is the runtime's
(``runtime.CoordinatorRuntime.call``): refuse while the coordinator is loading, refuse requests the
codec, the authorizer, the partition gate or the limits reject, park the JoinGroup/SyncGroup the
classic protocol answers later.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse
from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse

from connect_bridge.bridge.coordination.api_table import GROUP_CALLS, LOCAL_HANDLERS, Answer, Client
from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime, Parked
from connect_bridge.bridge.security.acls import Operation
from connect_bridge.bridge.security.authorization import GroupAuthorizer
from connect_bridge.codecs import messages as m
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.messages import supported_api_versions
from connect_bridge.codecs.requests import DecodedRequest
from connect_bridge.state import api as napi
from connect_bridge.state.classic.group import ClassicDescribedGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.limits import RequestLimits
from connect_bridge.wire import maps as wm

__all__ = ["BRIDGE_NODE_ID", "CLUSTER_ID", "Client", "LocalApis", "Parked", "now_ms", "versions_response"]

BRIDGE_NODE_ID = 0
CLUSTER_ID = "connect-bridge"
KEY_TYPE_GROUP = 0
"""FindCoordinator ``KeyType`` of a group (1 is a transaction, which the bridge does not coordinate)."""
NO_NODE = -1
"""Node id and port of "no coordinator" / "no controller"."""
NOT_A_GROUP = "the bridge coordinates groups only"

_LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
_INVALID = int(ErrorCode.INVALID_REQUEST)
_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
_AUTHORIZED_LISTS = frozenset({"describe_groups", "list_groups", "connect_describe", "find_coordinator"})
"""Cluster-API methods that answer per group, so they take the client to authorize DESCRIBE."""
_NO_COORDINATOR = {"node_id": NO_NODE, "host": "", "port": NO_NODE}
"""Kafka's ``Node.noNode``: the coordinator of a refused key."""
DENIED_MESSAGE = "Group authorization failed."
"""Kafka's ``Errors.GROUP_AUTHORIZATION_FAILED`` message, the one a refused FindCoordinator < v4 carries."""


def _s(value: str | None) -> str:
    return value if value is not None else ""


def now_ms() -> int:
    """Wall-clock milliseconds: held-work deadlines in the records must survive a restart."""
    return int(time.time() * 1000)


def versions_response(rows: list[tuple[int, int, int]]) -> m.ApiVersionsResponse:
    """An ApiVersions response advertising ``(api_key, min_version, max_version)`` rows."""
    keys = [ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in rows]
    return ApiVersionsResponse(error_code=int(ErrorCode.NONE), api_keys=keys, throttle_time_ms=0)


@dataclass(eq=False)
class LocalApis:
    """Answers the requests the bridge owns; group requests go to the coordinator through the
    runtime (``runtime.CoordinatorRuntime.call``), which checks them and applies their effects."""

    runtime: CoordinatorRuntime
    advertised: tuple[str, int]
    node_id: int = BRIDGE_NODE_ID
    advertised_versions: Callable[[], list[tuple[int, int, int]]] | None = None
    """Proxy mode: the versions advertised (upstream's intersected with the bridge's)."""
    limits: RequestLimits = field(default_factory=RequestLimits)
    """The describe bounds (``limits.describe_max_*``)."""

    def __post_init__(self) -> None:
        if self.limits is None:
            self.limits = RequestLimits()

    @property
    def coordinator(self) -> GroupCoordinator:
        return self.runtime.coordinator

    @property
    def authorizer(self) -> GroupAuthorizer | None:
        return self.runtime.authorizer

    def loaded(self) -> bool:
        return self.runtime.loaded

    def clock(self) -> int:
        return self.runtime.clock()

    def handle(self, req: DecodedRequest, client: Client) -> Answer:
        """A wire response, or a future of one (a parked classic request); None = no response."""
        method = LOCAL_HANDLERS.get(req.api_key)
        if method is not None:
            if method in _AUTHORIZED_LISTS:
                return getattr(self, method)(req.body, req.api_version, client)
            return getattr(self, method)(req.body, req.api_version)
        return self.runtime.call(GROUP_CALLS[req.api_key], req.body, req.api_version, client)

    def _may(self, client: Client | None, operation: Operation, group_id: str) -> bool:
        """Authorization of one group (always yes without an authorizer)."""
        return self.runtime.may(client, operation, group_id)

    # ------------------------------------------------------------------ cluster APIs
    def api_versions(
        self, body: m.ApiVersionsRequest | None = None, version: int = 0
    ) -> m.ApiVersionsResponse:
        """The bridge's versions (embedded), or upstream's intersected with them (proxy mode)."""
        rows = (
            self.advertised_versions() if self.advertised_versions is not None else supported_api_versions()
        )
        return versions_response(rows)

    def sasl_not_enabled(
        self, body: m.SaslHandshakeRequest | m.SaslAuthenticateRequest, version: int
    ) -> m.SaslHandshakeResponse | m.SaslAuthenticateResponse:
        """SaslHandshake/SaslAuthenticate on a bridge without ``sasl`` (``edge.sasl_gate`` takes them
        when it is on): ILLEGAL_SASL_STATE, what Kafka's ``KafkaApis`` answers on a non-SASL listener."""
        code = int(ErrorCode.ILLEGAL_SASL_STATE)
        if body.API_KEY == SaslHandshakeRequest.API_KEY:
            return SaslHandshakeResponse(error_code=code, mechanisms=[])
        return SaslAuthenticateResponse(
            error_code=code, error_message="SASL is not enabled on this listener", auth_bytes=b""
        )

    def _coordinator(self, key_type: int) -> dict[str, Any]:
        """FindCoordinator's answer for one key: this listener for a group, none for anything else."""
        if key_type != KEY_TYPE_GROUP:
            error = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return {
                "error_code": error,
                "error_message": NOT_A_GROUP,
                "node_id": NO_NODE,
                "host": "",
                "port": NO_NODE,
            }
        host, port = self.advertised
        return {
            "error_code": int(ErrorCode.NONE),
            "error_message": None,
            "node_id": self.node_id,
            "host": host,
            "port": port,
        }

    def find_coordinator(
        self, body: m.FindCoordinatorRequest, version: int, client: Client | None = None
    ) -> m.FindCoordinatorResponse:
        """This listener coordinates every group (v4+ answers a batch of keys).

        With authorization, a group key needs DESCRIBE on the group, as Kafka's
        ``KafkaApis.getCoordinator`` checks: a refused key of a v4+ batch gets its own
        GROUP_AUTHORIZATION_FAILED (no message, no node) and the others their answer; before v4
        the whole response is that error with Kafka's message. The decision is counted and logged
        like every other (``GroupAuthorizer``)."""
        if version >= 4:
            answer = self._coordinator(body.key_type)
            coordinators = [
                FindCoordinatorResponse.Coordinator(
                    key=key, **self._describable_key(body.key_type, key, answer, client)
                )
                for key in body.coordinator_keys
            ]
            return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
        key_type = getattr(body, "key_type", KEY_TYPE_GROUP) or KEY_TYPE_GROUP
        if key_type == KEY_TYPE_GROUP and not self._may(client, Operation.DESCRIBE, body.key):
            return FindCoordinatorResponse(
                throttle_time_ms=0, error_code=_DENIED, error_message=DENIED_MESSAGE, **_NO_COORDINATOR
            )
        return FindCoordinatorResponse(throttle_time_ms=0, **self._coordinator(key_type))

    def _describable_key(
        self, key_type: int, key: str, answer: dict[str, Any], client: Client | None = None
    ) -> dict[str, Any]:
        """One v4+ key's answer: ``answer``, or the refusal of a group key without DESCRIBE."""
        if key_type != KEY_TYPE_GROUP or self._may(client, Operation.DESCRIBE, key):
            return answer
        return {"error_code": _DENIED, "error_message": None, **_NO_COORDINATOR}

    def metadata(self, body: m.MetadataRequest, version: int) -> m.MetadataResponse:
        """The bridge as the only broker, and no topics: every topic asked for is unknown.

        Null ``Topics`` (v1+) means all topics (none here). A null topic ``Name`` (v10+) asks by
        topic id, which only v12+ supports: below v12 Kafka's handler throws InvalidRequestException
        and ``MetadataRequest.getErrorResponse`` answers every topic INVALID_REQUEST, a null name as
        "" (no brokers); from v12 an id it does not know is UNKNOWN_TOPIC_ID with a null name."""
        topic = MetadataResponse.MetadataResponseTopic
        asked = list(body.topics or ())
        if version < 12 and any(t.name is None or t.topic_id is not None for t in asked):
            topics = [
                topic(
                    error_code=_INVALID,
                    name=_s(t.name),
                    topic_id=t.topic_id,
                    is_internal=False,
                    partitions=[],
                )
                for t in asked
            ]
            return MetadataResponse(
                throttle_time_ms=0,
                error_code=_INVALID,
                brokers=[],
                cluster_id=None,
                controller_id=NO_NODE,
                topics=topics,
            )
        host, port = self.advertised
        broker = MetadataResponse.MetadataResponseBroker(
            node_id=BRIDGE_NODE_ID, host=host, port=port, rack=None
        )
        topics = [
            topic(
                error_code=int(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if t.name is not None else ErrorCode.UNKNOWN_TOPIC_ID
                ),
                name=t.name,
                topic_id=t.topic_id if t.name is None else None,
                is_internal=False,
                partitions=[],
            )
            for t in asked
        ]
        return MetadataResponse(
            throttle_time_ms=0,
            error_code=int(ErrorCode.NONE),
            brokers=[broker],
            cluster_id=CLUSTER_ID,
            controller_id=BRIDGE_NODE_ID,
            topics=topics,
        )

    # ------------------------------------------------------------------ describe
    # While loading, the coordinator's (empty) state must not be revealed as "no such group".
    #
    # Bounds (docs/serve.md "Bounds on work per request"; 100,000 ids blocked the event loop 1.9 s,
    # issue 11.6). Kafka puts no limit on the groups of one DescribeGroups; here one request
    # describes at most `describe_max_groups` groups holding `describe_max_members` members in all (the
    # first group is always described, so any group can be described on its own); the groups after
    # those are answered COORDINATOR_LOAD_IN_PROGRESS, which Kafka's admin client retries in a later
    # request. A request naming more than `describe_max_ids` groups is not answered: the connection is
    # closed, as for an oversized frame (answering each id costs ~8 us even when nothing is looked
    # up). The three bounds are ``limits.describe_max_groups`` / ``_members`` / ``_ids``.
    def _describe_limit(self, name: str) -> int:
        return int(getattr(self.limits, f"describe_max_{name}"))

    def _check_ids(self, api: str, ids: list[str]) -> None:
        max_ids = self._describe_limit("ids")
        if len(ids) > max_ids:  # the server closes the connection on an exception
            raise ValueError(f"{api} names {len(ids)} groups, more than {max_ids} per request")

    def _describable(self, ids: list[str], size: Callable[[str], int]) -> int:
        """How many of ``ids``, from the first, this request describes (``size``: a group's members)."""
        max_groups = self._describe_limit("groups")
        budget = self._describe_limit("members")
        for i, gid in enumerate(ids[:max_groups]):
            members = size(gid)
            if i and members > budget:
                return i
            budget -= members
        return min(len(ids), max_groups)

    def _members_of(self, group_id: str) -> int:
        group = self.coordinator.groups.get(group_id)
        return len(group.members) if group is not None else 0

    def _members_of_connect(self, group_id: str) -> int:
        group = self.coordinator.connect_group(group_id)
        return len(group.members) if group is not None else 0

    def _explain_deferred(self, wire_groups: Any, start: int, total: int) -> None:
        """The error message of the groups left undescribed (where the version has one)."""
        message = (
            f"not described: the request names {total} groups and one request describes at most "
            f"{self._describe_limit('groups')} groups and {self._describe_limit('members')} members; "
            "ask again for this group"
        )
        for g in wire_groups[start:]:
            g.error_message = message

    def describe_groups(
        self, body: m.DescribeGroupsRequest, version: int, client: Client | None = None
    ) -> m.DescribeGroupsResponse:
        """Classic and Connect groups alike, in the classic shape (``kafka-consumer-groups``).
        A group the client may not DESCRIBE is answered GROUP_AUTHORIZATION_FAILED, as by Kafka."""
        ids = list(body.groups or ())
        self._check_ids("DescribeGroups", ids)
        refused = {gid for gid in ids if not self._may(client, Operation.DESCRIBE, gid)}
        if not self.loaded():
            loading = [
                ClassicDescribedGroup(gid, _DENIED if gid in refused else _LOADING, state="") for gid in ids
            ]
            return wm.describe_groups_response_to_wire(loading, version)
        n = self._describable(ids, lambda gid: 0 if gid in refused else self._members_of(gid))
        described: list[Any] = [
            ClassicDescribedGroup(gid, _DENIED, state="")
            if gid in refused
            else self.coordinator.describe_any(gid)
            for gid in ids[:n]
        ]
        described += [ClassicDescribedGroup(gid, _LOADING, state="") for gid in ids[n:]]
        response = wm.describe_groups_response_to_wire(described, version)
        if n < len(ids) and version >= 6:
            self._explain_deferred(response.groups, n, len(ids))
        return response

    def list_groups(
        self, body: m.ListGroupsRequest, version: int, client: Client | None = None
    ) -> m.ListGroupsResponse:
        """Every group, with its type; nothing while loading (the state is not known yet). With
        authorization only the groups the client may DESCRIBE, as Kafka lists them."""
        if not self.loaded():
            return wm.list_groups_response_to_wire([], body, version, error_code=_LOADING)
        groups = self.coordinator.list_groups()
        if self.authorizer is not None:
            groups = [g for g in groups if self._may(client, Operation.DESCRIBE, g[0])]
        return wm.list_groups_response_to_wire(groups, body, version)

    def connect_describe(
        self, body: m.ConnectGroupDescribeRequest, version: int, client: Client | None = None
    ) -> m.ConnectGroupDescribeResponse:
        """Empty ``GroupIds`` = every connect group (the first `describe_max_ids` by id), with
        authorization every one the client may DESCRIBE; a named group it may not describe is
        answered GROUP_AUTHORIZATION_FAILED."""
        ids = list(body.group_ids or ())
        self._check_ids("ConnectGroupDescribe", ids)
        if not ids:
            groups = self.coordinator.groups
            connect = (
                gid
                for gid in groups
                if self.coordinator.connect_group(gid) is not None
                and (self.authorizer is None or self._may(client, Operation.DESCRIBE, gid))
            )
            ids = heapq.nsmallest(self._describe_limit("ids"), connect)
        refused = {gid for gid in ids if not self._may(client, Operation.DESCRIBE, gid)}
        if not self.loaded():
            loading = [
                napi.DescribedGroup(gid, error_code=_DENIED if gid in refused else _LOADING) for gid in ids
            ]
            return wm.describe_response_to_wire(loading, version)
        n = self._describable(ids, lambda gid: 0 if gid in refused else self._members_of_connect(gid))
        now = self.clock()
        described = [
            napi.DescribedGroup(gid, error_code=_DENIED)
            if gid in refused
            else self.coordinator.describe(gid, now)
            for gid in ids[:n]
        ]
        described += [napi.DescribedGroup(gid, error_code=_LOADING) for gid in ids[n:]]
        response = wm.describe_response_to_wire(described, version)
        if n < len(ids):
            self._explain_deferred(response.groups, n, len(ids))
        return response
