"""The steady-state heartbeat path: skip the spec engine for a frame the bridge has seen before.

A stable member sends the same ConnectGroupHeartbeat bytes every interval, but for the correlation
id; the answer is the same bytes too while nothing changes (no assignment, no error). So the decoded
engine request is cached by the request bytes without the correlation id, and the framed response
by the fields it is made of (its correlation id patched in per answer). The coordinator still
handles every heartbeat, through the runtime like every other caller (sessions are renewed, epochs
checked, the result applied: ``CoordinatorRuntime.submit_steady`` hands back a result only when it
has something to apply, which a steady heartbeat has not); only decoding, encoding and the empty
result are saved. Anything unusual takes the full path.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, NamedTuple

from connect_bridge.bridge.coordination.api_table import API_NAMES
from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.messages import API_SPECS, ApiKey
from connect_bridge.codecs.requests import (
    decode_request,
    request_header_fields,
    response_frame,
    without_correlation_id,
)
from connect_bridge.state.api import HeartbeatRequest, HeartbeatResponse
from connect_bridge.state.classic import api as capi
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.result import CoordinatorResult
from connect_bridge.wire import maps as wm

_HEARTBEAT = int(ApiKey.CONNECT_GROUP_HEARTBEAT)
_CLASSIC_HEARTBEAT = int(ApiKey.HEARTBEAT)
_NONE = int(ErrorCode.NONE)
_HEARTBEAT_VERSION = 0
"""The one ConnectGroupHeartbeat version taken here."""
_RESPONSE_HEADER = API_SPECS[_HEARTBEAT].response_header_version(_HEARTBEAT_VERSION)
_CLASSIC_RESPONSE_HEADER = tuple(
    API_SPECS[_CLASSIC_HEARTBEAT].response_header_version(v)
    for v in range(API_SPECS[_CLASSIC_HEARTBEAT].max_version + 1)
)
"""Response header version by Heartbeat version (v4+ is flexible: the header has tagged fields)."""
_ENTRY_OVERHEAD = 256
"""Bytes counted per cache entry besides its key (the dict slot, the decoded request or answer)."""
_HEARTBEAT_NAME = API_NAMES[_HEARTBEAT]
_CLASSIC_HEARTBEAT_NAME = API_NAMES[_CLASSIC_HEARTBEAT]
"""The ``api`` label of each heartbeat's metrics, as the full path names it."""
_CONNECT_STEADY, _CONNECT_FULL = GroupCoordinator.steady_connect_heartbeat, GroupCoordinator.connect_heartbeat
_CLASSIC_STEADY, _CLASSIC_FULL = GroupCoordinator.steady_classic_heartbeat, GroupCoordinator.classic_heartbeat
"""Each heartbeat's steps: the steady one first, the full one when it does not apply."""


class Framed(NamedTuple):
    """A response already framed here, with its error code and the name of its API (the metrics
    label it by both)."""

    frame: bytes
    error_code: int
    api: str


class _Lru(OrderedDict):
    """Least recently used entries go first once the entries' bytes exceed ``limit_bytes``."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__()
        self.limit_bytes = limit_bytes
        self.bytes = 0

    @staticmethod
    def _cost(key: Any) -> int:
        return _ENTRY_OVERHEAD + (len(key) if isinstance(key, bytes) else sum(len(str(k)) for k in key))

    def put(self, key: Any, value: Any) -> None:
        if key not in self:
            self.bytes += self._cost(key)
        self[key] = value
        while self.bytes > self.limit_bytes and self:
            old, _ = self.popitem(last=False)
            self.bytes -= self._cost(old)


class SteadyHeartbeats:
    """Caches decoded steady heartbeats and framed answers (three LRUs sharing ``limit_bytes``)."""

    def __init__(
        self,
        runtime: CoordinatorRuntime,
        limit_bytes: int = 16 * 1024 * 1024,
        max_frame: int = 4096,
    ) -> None:
        self.runtime = runtime
        """The way to the coordinator: its checks (``answers_here``) and its steps."""
        self.max_frame = max_frame
        """Larger frames take the full path (a steady heartbeat is a few dozen bytes)."""
        self.requests: _Lru = _Lru(limit_bytes // 3)
        self.classic_requests: _Lru = _Lru(limit_bytes // 3)
        self.answers: _Lru = _Lru(limit_bytes // 3)
        """Framed steady answers (correlation id 0), by the fields they are made of."""

    def answer(self, payload: bytes) -> tuple[Framed, CoordinatorResult[Any] | None] | None:
        """The framed response (with its error code and API name) and the step's result when it
        has effects (``CoordinatorRuntime.submit_steady``: None for every steady heartbeat;
        ``settle_steady`` it either way once the answer is written), or None when this frame needs
        the full path."""
        api_key, version, correlation = request_header_fields(payload)
        if len(payload) > self.max_frame:
            return None
        if api_key == _CLASSIC_HEARTBEAT:
            return self._classic(payload, version, correlation)
        if api_key != _HEARTBEAT or version != _HEARTBEAT_VERSION:
            return None
        key = without_correlation_id(payload)
        req: HeartbeatRequest | None = self.requests.get(key)
        known = req is not None
        if req is None:
            decoded = decode_request(payload, framed=False)
            req = wm.heartbeat_from_wire(decoded.body, decoded.client_id or "", "")
            if not _steady_request(req):
                return None
        runtime = self.runtime
        if not runtime.answers_here(req.group_id):
            return None
        resp, result = runtime.submit_steady(_CONNECT_STEADY, _CONNECT_FULL, req)
        if not known and resp.error_code == _NONE:
            # Cached only once the coordinator knew the member: requests naming unknown members
            # must not fill the cache (issue 11.4).
            self.requests.put(key, req)
        if resp.assignment is not None or resp.error_code != _NONE:
            # Not steady after all: the caller must not have changed state twice, so answer here.
            body = wm.heartbeat_response_to_wire(resp, version).encode(version=version)
            frame = response_frame(correlation, _RESPONSE_HEADER, body)
            return Framed(frame, resp.error_code, _HEARTBEAT_NAME), result
        # The steady answer's bytes but for the correlation id, which is the request's (bytes 4-8).
        template = self.answers.get((resp.member_id, resp.member_epoch, resp.heartbeat_interval_ms))
        if template is None:
            template = self._steady_frame(resp)
        return Framed(template[:4] + payload[4:8] + template[8:], _NONE, _HEARTBEAT_NAME), result

    def _classic(
        self, payload: bytes, version: int, correlation: int
    ) -> tuple[Framed, CoordinatorResult[Any] | None] | None:
        """A Java worker's classic Heartbeat (the same bytes every interval) for a group this bridge
        holds; any other group takes the full path, which relays it upstream in proxy mode."""
        key = without_correlation_id(payload)
        req: capi.HeartbeatRequest | None = self.classic_requests.get(key)
        known = req is not None
        if req is None:
            decoded = decode_request(payload, framed=False)
            req = wm.classic_heartbeat_from_wire(decoded.body, version)
        runtime = self.runtime
        if req.group_id not in runtime.coordinator.groups or not runtime.answers_here(req.group_id):
            return None
        resp, result = runtime.submit_steady(_CLASSIC_STEADY, _CLASSIC_FULL, req)
        if not known and resp.error_code == _NONE:
            self.classic_requests.put(key, req)  # known members only, as above
        body_key = ("classic", version, resp.error_code)
        template = self.answers.get(body_key)
        if template is None:
            body = wm.classic_heartbeat_response_to_wire(resp, version).encode(version=version)
            template = response_frame(0, _CLASSIC_RESPONSE_HEADER[version], body)
            self.answers.put(body_key, template)
        frame = template[:4] + payload[4:8] + template[8:]  # the request's correlation id, as above
        return Framed(frame, resp.error_code, _CLASSIC_HEARTBEAT_NAME), result

    def _steady_frame(self, resp: HeartbeatResponse) -> bytes:
        """The framed steady answer ``resp`` (correlation id 0): the same bytes for every heartbeat
        of the member at its epoch, so they are encoded once."""
        key = (resp.member_id, resp.member_epoch, resp.heartbeat_interval_ms)
        template = self.answers.get(key)
        if template is None:
            body = wm.heartbeat_response_to_wire(resp, _HEARTBEAT_VERSION).encode(version=_HEARTBEAT_VERSION)
            template = response_frame(0, _RESPONSE_HEADER, body)
            self.answers.put(key, template)
        return template


def _steady_request(req: HeartbeatRequest) -> bool:
    """Only partial heartbeats of a member in the group (epoch > 0: not a join or a leave) that report
    nothing new are cached. ``reports_nothing`` is the group's own steady-heartbeat predicate, so
    the cache cannot hold a request the group would not treat as steady."""
    return req.member_epoch > 0 and req.reports_nothing
