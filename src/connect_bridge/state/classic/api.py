"""Typed classic group requests and responses (JoinGroup / SyncGroup / Heartbeat / LeaveGroup).

Version-independent: the bridge maps every wire version onto these. ``api_version`` is kept where
behaviour depends on it (MEMBER_ID_REQUIRED from JoinGroup v4, the protocol type/name checks of
SyncGroup v5). The classic protocol parks JoinGroup and SyncGroup until the group is ready, so a
handler returns either a response or ``None`` (parked); parked responses come out later, tagged with
the caller's ``token``, from ``GroupCoordinator.drain_responses()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from connect_bridge.state.model import ANONYMOUS

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
PROTOCOL_TYPE_CONNECT = "connect"
"""The protocol type of Kafka Connect's embedded protocol (a classic group of Connect workers)."""
EAGER_PROTOCOL = "default"
"""Connect's eager protocol name; ``compatible`` and ``sessioned`` are cooperative."""
SYNC_MANDATORY_PROTOCOL_MIN_VERSION = 5
"""From SyncGroup v5 ProtocolType and ProtocolName must not be null (Kafka answers
INCONSISTENT_GROUP_PROTOCOL before looking the group up)."""


class ClassicGroupState(StrEnum):
    """Kafka's ``ClassicGroupState``, spelled as Kafka prints it (DescribeGroups, ListGroups): the
    state of a classic group, and of each legacy member the bridge keeps inside a connect group."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    """(protocol name, metadata) in the member's order of preference."""
    session_timeout_ms: int = 10000
    rebalance_timeout_ms: int = 60000
    group_instance_id: str | None = None
    reason: str | None = None
    client_id: str = ""
    client_host: str = ""
    api_version: int = 9
    token: Any = None
    """Opaque to the coordinator: identifies the request when its response is released later."""
    principal: str = ANONYMOUS
    """Who sent the request; a new member is owned by it (``state.ownership``)."""


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinGroupResponse:
    error_code: int = 0
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()
    """Filled for the leader only: every member with its metadata for the elected protocol."""
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A request a member makes within a generation (SyncGroup, Heartbeat): the group checks the
    member, then the generation, from these fields alike (``classic.sync.generation_error``)."""

    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class SyncGroupRequest(GenerationRequest):
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()
    """(member id, assignment bytes); only the leader sends them."""
    api_version: int = 5
    token: Any = None
    principal: str = ANONYMOUS


@dataclass(slots=True)
class SyncGroupResponse:
    error_code: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatRequest(GenerationRequest):
    principal: str = ANONYMOUS


@dataclass(slots=True)
class HeartbeatResponse:
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeavingMember, ...]
    """LeaveGroup v0-v2 carry one member id; v3+ a batch (the bridge maps both onto this)."""
    principal: str = ANONYMOUS


@dataclass(slots=True)
class LeaveGroupResponse:
    error_code: int = 0
    members: list[tuple[str, str | None, int]] = field(default_factory=list)
    """(member id, instance id, error code) per leaving member."""
