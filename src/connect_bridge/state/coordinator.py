"""The group coordinator: routes typed requests to groups by id, owns the shared timers.

Like Apache Kafka's GroupMetadataManager, it is one deterministic state machine for many groups:
callers hand in requests and ``now_ms``, call ``advance(now_ms)`` at ``next_deadline()``, and persist
what ``drain_records()`` returns before revealing responses.
"""

from __future__ import annotations

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.api import (
    DescribedGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    InstallAssignmentRequest,
    InstallAssignmentResponse,
    PrepareAssignmentRequest,
    PrepareAssignmentResponse,
)
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect_group import ConnectGroup
from connect_bridge.state.model import ConfigView
from connect_bridge.state.records import Record, RecordType
from connect_bridge.state.timers import Timers


class GroupCoordinator:
    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        self.config = config or CoordinatorConfig()
        self.timers = Timers()
        self.groups: dict[str, ConnectGroup] = {}
        self.default_view = ConfigView()

    # ------------------------------------------------------------------ groups
    def group(self, group_id: str, create: bool = False) -> ConnectGroup | None:
        group = self.groups.get(group_id)
        if group is None and create:
            group = ConnectGroup(group_id, self.config, self.timers, self.default_view)
            self.groups[group_id] = group
        return group

    def set_config(self, group_id: str, view: ConfigView, now_ms: int) -> None:
        group = self.group(group_id, create=True)
        assert group is not None
        group.set_config(view, now_ms)

    # ------------------------------------------------------------------ new protocol APIs
    def connect_heartbeat(self, req: HeartbeatRequest, now_ms: int) -> HeartbeatResponse:
        if not req.group_id:
            return HeartbeatResponse(
                error_code=int(ErrorCode.INVALID_REQUEST), error_message="GroupId must be non-empty"
            )
        group = self.group(req.group_id, create=req.member_epoch == 0)
        if group is None:
            return HeartbeatResponse(
                error_code=int(ErrorCode.UNKNOWN_MEMBER_ID),
                error_message=f"group {req.group_id} does not exist",
                member_id=req.member_id,
                member_epoch=req.member_epoch,
            )
        return group.heartbeat(req, now_ms)

    def prepare_assignment(self, req: PrepareAssignmentRequest, now_ms: int) -> PrepareAssignmentResponse:
        group = self.groups.get(req.group_id) if req.group_id else None
        if group is None:
            code = ErrorCode.INVALID_REQUEST if not req.group_id else ErrorCode.GROUP_ID_NOT_FOUND
            return PrepareAssignmentResponse(error_code=int(code), error_message=f"group {req.group_id!r}")
        return group.prepare_assignment(req, now_ms)

    def install_assignment(self, req: InstallAssignmentRequest, now_ms: int) -> InstallAssignmentResponse:
        group = self.groups.get(req.group_id) if req.group_id else None
        if group is None:
            code = ErrorCode.INVALID_REQUEST if not req.group_id else ErrorCode.GROUP_ID_NOT_FOUND
            return InstallAssignmentResponse(error_code=int(code), error_message=f"group {req.group_id!r}")
        return group.install_assignment(req, now_ms)

    def describe(self, group_id: str) -> DescribedGroup:
        group = self.groups.get(group_id)
        if group is None:
            return DescribedGroup(
                group_id=group_id, error_code=int(ErrorCode.GROUP_ID_NOT_FOUND), state="DEAD"
            )
        return group.describe()

    # ------------------------------------------------------------------ time
    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def advance(self, now_ms: int) -> None:
        """Fire every timer due at ``now_ms``."""
        for key in self.timers.expired(now_ms):
            group = self.groups.get(key[1])
            if group is not None:
                group.on_timer(key, now_ms)

    # ------------------------------------------------------------------ records
    def drain_records(self) -> list[Record]:
        out: list[Record] = []
        for group in self.groups.values():
            out.extend(group.drain_records())
        return out

    def replay(self, records: list[Record], now_ms: int) -> None:
        """Load state from records (a fresh coordinator), then re-arm timers from ``now_ms``."""
        for record in records:
            group = self.group(record.group_id, create=True)
            assert group is not None
            group.apply(record)
        for group in self.groups.values():
            group.drain_records()
            group.rebuild_after_load(now_ms)

    def snapshot(self) -> dict[str, dict]:
        return {gid: g.snapshot() for gid, g in sorted(self.groups.items())}


__all__ = ["GroupCoordinator", "RecordType"]
