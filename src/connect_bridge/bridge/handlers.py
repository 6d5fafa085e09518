"""The APIs the bridge answers itself: ApiVersions, FindCoordinator, Metadata and every group API.

Group APIs go through ``wire_map`` to the coordinator's typed requests and back. One table says, per
API key, how to turn the wire request into an engine call and the engine response into a wire
response, and what to answer while the coordinator is still loading its records.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse

from connect_bridge.bridge import wire_map as wm
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.messages import ApiKey, supported_api_versions
from connect_bridge.codecs.requests import DecodedRequest
from connect_bridge.state import api as napi
from connect_bridge.state import classic_api as capi
from connect_bridge.state.classic_group import ClassicDescribedGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.limits import RequestLimits, oversize

BRIDGE_NODE_ID = 0
CLUSTER_ID = "connect-bridge"
UNKNOWN_TOPIC_OR_PARTITION = 3
UNKNOWN_TOPIC_ID = 100


def _s(value: str | None) -> str:
    return value if value is not None else ""


@dataclass(slots=True)
class Parked:
    """The token of a JoinGroup/SyncGroup the classic protocol answers later."""

    future: asyncio.Future[Any]
    version: int
    to_wire: Callable[[Any, int], Any]


@dataclass(frozen=True, slots=True)
class Client:
    client_id: str
    host: str


@dataclass(frozen=True, slots=True)
class GroupApi:
    """How one group API crosses between the wire and the coordinator."""

    from_wire: Callable[[Any, int, Client], Any]
    call: Callable[[GroupCoordinator, Any, int], Any]
    to_wire: Callable[[Any, int], Any]
    error: Callable[[int, str | None], Any]
    """An engine error response: COORDINATOR_LOAD_IN_PROGRESS while loading, INVALID_REQUEST for
    a request that decodes but breaks the protocol's rules (e.g. a negative task id)."""
    parks: bool = False


_LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


def _error(response_type: type) -> Callable[[int, str | None], Any]:
    def build(code: int, message: str | None) -> Any:
        response = response_type(error_code=code)
        if message is not None and hasattr(response, "error_message"):
            response.error_message = message
        return response

    return build


GROUP_APIS: dict[int, GroupApi] = {
    ApiKey.CONNECT_GROUP_HEARTBEAT: GroupApi(
        lambda m, v, c: wm.heartbeat_from_wire(m, c.client_id, c.host),
        lambda g, r, now: g.connect_heartbeat(r, now),
        lambda r, v: wm.heartbeat_response_to_wire(r, v),
        _error(napi.HeartbeatResponse),
    ),
    ApiKey.CONNECT_GROUP_PREPARE_ASSIGNMENT: GroupApi(
        lambda m, v, c: wm.prepare_from_wire(m),
        lambda g, r, now: g.prepare_assignment(r, now),
        lambda r, v: wm.prepare_response_to_wire(r, v),
        _error(napi.PrepareAssignmentResponse),
    ),
    ApiKey.CONNECT_GROUP_INSTALL_ASSIGNMENT: GroupApi(
        lambda m, v, c: wm.install_from_wire(m),
        lambda g, r, now: g.install_assignment(r, now),
        lambda r, v: wm.install_response_to_wire(r, v),
        _error(napi.InstallAssignmentResponse),
    ),
    ApiKey.JOIN_GROUP: GroupApi(
        lambda m, v, c: wm.join_from_wire(m, v, c.client_id, c.host),
        lambda g, r, now: g.classic_join(r, now),
        lambda r, v: wm.join_response_to_wire(r, v),
        _error(capi.JoinGroupResponse),
        parks=True,
    ),
    ApiKey.SYNC_GROUP: GroupApi(
        lambda m, v, c: wm.sync_from_wire(m, v),
        lambda g, r, now: g.classic_sync(r, now),
        lambda r, v: wm.sync_response_to_wire(r, v),
        _error(capi.SyncGroupResponse),
        parks=True,
    ),
    ApiKey.HEARTBEAT: GroupApi(
        lambda m, v, c: wm.classic_heartbeat_from_wire(m, v),
        lambda g, r, now: g.classic_heartbeat(r, now),
        lambda r, v: wm.classic_heartbeat_response_to_wire(r, v),
        _error(capi.HeartbeatResponse),
    ),
    ApiKey.LEAVE_GROUP: GroupApi(
        lambda m, v, c: wm.leave_from_wire(m, v),
        lambda g, r, now: g.classic_leave(r, now),
        lambda r, v: wm.leave_response_to_wire(r, v),
        _error(capi.LeaveGroupResponse),
    ),
}


def now_ms() -> int:
    """Wall-clock milliseconds: held-work deadlines in the records must survive a restart."""
    return int(time.time() * 1000)


class LocalApis:
    """Answers the requests the bridge owns; ``after_step`` persists and releases parked responses."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        advertised: tuple[str, int],
        after_step: Callable[[], None],
        loaded: Callable[[], bool],
        clock: Callable[[], int] = now_ms,
        node_id: int = BRIDGE_NODE_ID,
        api_versions: Callable[[], Any] | None = None,
        limits: RequestLimits | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.limits = limits if limits is not None else RequestLimits()
        self.advertised = advertised
        self.node_id = node_id
        self._api_versions = api_versions
        self.after_step = after_step
        self.loaded = loaded
        self.clock = clock

    def handle(self, req: DecodedRequest, client: Client) -> Any:
        """A wire response, or a future of one (a parked classic request); None = no response."""
        key = req.api_key
        if key == ApiKey.API_VERSIONS:
            return self.api_versions()
        if key == ApiKey.FIND_COORDINATOR:
            return self.find_coordinator(req.body, req.api_version)
        if key == ApiKey.METADATA:
            return self.metadata(req.body, req.api_version)
        if key == ApiKey.DESCRIBE_GROUPS:
            return self.describe_groups(req.body, req.api_version)
        if key == ApiKey.LIST_GROUPS:
            return self.list_groups(req.body, req.api_version)
        if key == ApiKey.CONNECT_GROUP_DESCRIBE:
            return self.connect_describe(req.body, req.api_version)
        api = GROUP_APIS[key]
        version = req.api_version
        if not self.loaded():
            return api.to_wire(api.error(_LOADING, "the coordinator is loading its state"), version)
        try:
            engine_req = api.from_wire(req.body, version, client)
        except CodecError as exc:
            return api.to_wire(api.error(int(ErrorCode.INVALID_REQUEST), str(exc)), version)
        too_large = oversize(engine_req, self.limits)
        if too_large is not None:  # refused before anything changes (issue 11.1, 11.2)
            return api.to_wire(api.error(int(ErrorCode.INVALID_REQUEST), too_large), version)
        parked: Parked | None = None
        if api.parks:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            parked = Parked(future, version, api.to_wire)
            engine_req = _with_token(engine_req, parked)
        response = api.call(self.coordinator, engine_req, self.clock())
        self.after_step()
        if response is None:
            assert parked is not None
            return parked.future
        return api.to_wire(response, version)

    # ------------------------------------------------------------------ cluster APIs
    def api_versions(self) -> Any:
        if self._api_versions is not None:
            return self._api_versions()
        keys = [
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in supported_api_versions()
        ]
        return ApiVersionsResponse(error_code=0, api_keys=keys, throttle_time_ms=0)

    def find_coordinator(self, body: Any, version: int) -> Any:
        host, port = self.advertised
        if version >= 4:
            coordinators = [
                FindCoordinatorResponse.Coordinator(
                    key=key,
                    node_id=self.node_id if body.key_type == 0 else -1,
                    host=host if body.key_type == 0 else "",
                    port=port if body.key_type == 0 else -1,
                    error_code=0 if body.key_type == 0 else int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                    error_message=None if body.key_type == 0 else "the bridge coordinates groups only",
                )
                for key in body.coordinator_keys
            ]
            return FindCoordinatorResponse(throttle_time_ms=0, coordinators=coordinators)
        key_type = getattr(body, "key_type", 0) or 0
        if key_type != 0:
            return FindCoordinatorResponse(
                throttle_time_ms=0,
                error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                error_message="the bridge coordinates groups only",
                node_id=-1,
                host="",
                port=-1,
            )
        return FindCoordinatorResponse(
            throttle_time_ms=0, error_code=0, error_message=None, node_id=self.node_id, host=host, port=port
        )

    def metadata(self, body: Any, version: int) -> Any:
        """The bridge as the only broker, and no topics: every topic asked for is unknown.

        Null ``Topics`` (v1+) means all topics (none here). A null topic ``Name`` (v10+) asks by
        topic id, which only v12+ supports: below v12 Kafka's handler throws InvalidRequestException
        and ``MetadataRequest.getErrorResponse`` answers every topic INVALID_REQUEST, a null name as
        "" (no brokers); from v12 an id it does not know is UNKNOWN_TOPIC_ID with a null name."""
        topic_cls = MetadataResponse.MetadataResponseTopic
        asked = list(body.topics or ())
        if version < 12 and any(t.name is None or t.topic_id is not None for t in asked):
            return MetadataResponse(
                throttle_time_ms=0,
                error_code=int(ErrorCode.INVALID_REQUEST),
                brokers=[],
                cluster_id=None,
                controller_id=-1,
                topics=[
                    topic_cls(
                        error_code=int(ErrorCode.INVALID_REQUEST),
                        name=_s(t.name),
                        topic_id=t.topic_id,
                        is_internal=False,
                        partitions=[],
                    )
                    for t in asked
                ],
            )
        host, port = self.advertised
        brokers = [
            MetadataResponse.MetadataResponseBroker(node_id=BRIDGE_NODE_ID, host=host, port=port, rack=None)
        ]
        topics = [
            topic_cls(
                error_code=UNKNOWN_TOPIC_OR_PARTITION if t.name is not None else UNKNOWN_TOPIC_ID,
                name=t.name,
                topic_id=t.topic_id if t.name is None else None,
                is_internal=False,
                partitions=[],
            )
            for t in asked
        ]
        return MetadataResponse(
            throttle_time_ms=0,
            error_code=0,
            brokers=brokers,
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

    def describe_groups(self, body: Any, version: int) -> Any:
        ids = list(body.groups or ())
        self._check_ids("DescribeGroups", ids)
        if not self.loaded():
            loading = [ClassicDescribedGroup(gid, _LOADING, state="") for gid in ids]
            return wm.describe_groups_response_to_wire(loading, version)
        n = self._describable(ids, self._members_of)
        described: list[Any] = [self.coordinator.describe_any(gid) for gid in ids[:n]]
        described += [ClassicDescribedGroup(gid, _LOADING, state="") for gid in ids[n:]]
        response = wm.describe_groups_response_to_wire(described, version)
        if n < len(ids) and version >= 6:
            self._explain_deferred(response.groups, n, len(ids))
        return response

    def list_groups(self, body: Any, version: int) -> Any:
        if not self.loaded():
            return wm.list_groups_response_to_wire([], body, version, error_code=_LOADING)
        return wm.list_groups_response_to_wire(self.coordinator.list_groups(), body, version)

    def connect_describe(self, body: Any, version: int) -> Any:
        """Empty ``GroupIds`` = every connect group (the first `describe_max_ids` by id)."""
        ids = list(body.group_ids or ())
        self._check_ids("ConnectGroupDescribe", ids)
        if not ids:
            groups = self.coordinator.groups
            connect = (gid for gid in groups if self.coordinator.connect_group(gid) is not None)
            ids = heapq.nsmallest(self._describe_limit("ids"), connect)
        if not self.loaded():
            loading = [napi.DescribedGroup(gid, error_code=_LOADING) for gid in ids]
            return wm.describe_response_to_wire(loading, version)
        n = self._describable(ids, self._members_of_connect)
        described = [self.coordinator.describe(gid) for gid in ids[:n]]
        described += [napi.DescribedGroup(gid, error_code=_LOADING) for gid in ids[n:]]
        response = wm.describe_response_to_wire(described, version)
        if n < len(ids):
            self._explain_deferred(response.groups, n, len(ids))
        return response


def _with_token(req: Any, token: object) -> Any:
    from dataclasses import replace

    return replace(req, token=token)
