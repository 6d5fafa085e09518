"""The APIs the bridge answers itself: ApiVersions, FindCoordinator, Metadata and every group API.

Group APIs go through ``wire_map`` to the coordinator's typed requests and back. One table says, per
API key, how to turn the wire request into an engine call and the engine response into a wire
response, and what to answer while the coordinator is still loading its records.
"""

from __future__ import annotations

import asyncio
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
            return self.metadata(req.body)
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

    def metadata(self, body: Any) -> Any:
        host, port = self.advertised
        brokers = [
            MetadataResponse.MetadataResponseBroker(node_id=BRIDGE_NODE_ID, host=host, port=port, rack=None)
        ]
        topics = [
            MetadataResponse.MetadataResponseTopic(
                error_code=UNKNOWN_TOPIC_OR_PARTITION, name=t.name, is_internal=False, partitions=[]
            )
            for t in (body.topics or ())
        ]
        return MetadataResponse(
            throttle_time_ms=0,
            brokers=brokers,
            cluster_id=CLUSTER_ID,
            controller_id=BRIDGE_NODE_ID,
            topics=topics,
        )

    # ------------------------------------------------------------------ describe
    # While loading, the coordinator's (empty) state must not be revealed as "no such group".
    def describe_groups(self, body: Any, version: int) -> Any:
        if not self.loaded():
            loading = [ClassicDescribedGroup(gid, _LOADING, state="") for gid in body.groups]
            return wm.describe_groups_response_to_wire(loading, version)
        return wm.describe_groups_response_to_wire(
            [self.coordinator.describe_any(group_id) for group_id in body.groups], version
        )

    def list_groups(self, body: Any, version: int) -> Any:
        if not self.loaded():
            return wm.list_groups_response_to_wire([], body, version, error_code=_LOADING)
        return wm.list_groups_response_to_wire(self.coordinator.list_groups(), body, version)

    def connect_describe(self, body: Any, version: int) -> Any:
        ids = list(body.group_ids or ()) or sorted(
            gid
            for gid, g in self.coordinator.groups.items()
            if self.coordinator.connect_group(gid) is not None
        )
        if not self.loaded():
            loading = [napi.DescribedGroup(gid, error_code=_LOADING) for gid in ids]
            return wm.describe_response_to_wire(loading, version)
        return wm.describe_response_to_wire([self.coordinator.describe(gid) for gid in ids], version)


def _with_token(req: Any, token: object) -> Any:
    from dataclasses import replace

    return replace(req, token=token)
