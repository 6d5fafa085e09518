"""Typed requests and responses of the coordinator, independent of wire versions.

The bridge maps Kafka wire messages onto these (and back). Keeping the engine on small slotted
values instead of wire containers keeps a stable-group heartbeat cheap and lets simulations skip
serialization entirely. ``None`` in a request field means "unchanged since the last heartbeat".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from connect_bridge.state.model import ANONYMOUS, AssignedMetadata, ClientAssignor, HeldWork, Items

LEAVE_EPOCH = -1
TEMPORARY_LEAVE_EPOCH = -2


@dataclass(slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    client_assignors: tuple[ClientAssignor, ...] | None = None
    owned: Items | None = None
    url: str | None = None
    config_offset: int | None = None
    client_id: str = ""
    client_host: str = ""
    principal: str = ANONYMOUS
    """Who sent the request (the connection's authenticated principal): see ``state.ownership``."""

    @property
    def reports_nothing(self) -> bool:
        """A partial heartbeat that carries none of the optional fields: by itself it changes no
        state. The group's steady path and the server's fast-path cache both key on this one
        predicate, so they cannot drift apart (a cached request must be one the group treats as
        steady)."""
        return (
            self.owned is None
            and self.client_assignors is None
            and self.server_assignor is None
            and self.url is None
            and self.config_offset is None
            and self.instance_id is None
            and self.rebalance_timeout_ms == -1
        )

    @property
    def is_full(self) -> bool:
        """A full request: seed 000 has a member set every top-level field when it joins or after an
        error (a worker's ``requestRejoin`` sends one too). Instance id, rack and assignors may be
        null there ("not provided", "not used"); the fields every worker has are set only then:
        the rebalance timeout, the url, the config offset and what it owns (Kafka detects a
        consumer's full request by its non-optional fields the same way)."""
        return (
            self.rebalance_timeout_ms != -1
            and self.url is not None
            and self.config_offset is not None
            and self.owned is not None
        )


class AssignmentHeader(NamedTuple):
    """What every member's Assignment says besides its work: the same for the whole group."""

    leader_id: str
    leader_url: str
    config_offset: int
    error: int


@dataclass(frozen=True, slots=True)
class MemberAssignment:
    """What a member must run now, and who leads the Connect cluster.

    ``error`` is CONFIG_MISMATCH while a member has read config records the group's view has not
    (``ConnectGroup.assignment_header``), else the error the assignor reported with the group's
    target (InstallAssignment ``Error``); ``metadata_version``/``metadata`` are what it gave this
    member (InstallAssignment ``Members[].MetadataVersion``/``Metadata``), carried with the target.
    """

    items: Items
    leader_id: str
    leader_url: str
    config_offset: int
    error: int = 0
    metadata_version: int = 0
    metadata: bytes = b""


@dataclass(slots=True)
class HeartbeatResponse:
    error_code: int = 0
    error_message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: MemberAssignment | None = None


@dataclass(slots=True)
class PrepareAssignmentRequest:
    group_id: str
    member_id: str
    member_epoch: int
    principal: str = ANONYMOUS


@dataclass(frozen=True, slots=True)
class PreparedMember:
    member_id: str
    member_epoch: int
    instance_id: str | None
    url: str
    config_offset: int
    assignor: ClientAssignor | None
    target: Items


@dataclass(slots=True)
class PrepareAssignmentResponse:
    error_code: int = 0
    error_message: str | None = None
    group_epoch: int = -1
    assignor_name: str = ""
    config_offset: int = -1
    connectors: dict[str, int] = field(default_factory=dict)
    members: tuple[PreparedMember, ...] = ()


@dataclass(slots=True)
class InstallAssignmentRequest:
    group_id: str
    member_id: str
    member_epoch: int
    group_epoch: int
    error: int = 0
    members: dict[str, Items] = field(default_factory=dict)
    metadata: dict[str, AssignedMetadata] = field(default_factory=dict)
    """Per member: the assignor's metadata for it; members without an entry get none."""
    principal: str = ANONYMOUS


@dataclass(slots=True)
class InstallAssignmentResponse:
    error_code: int = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    protocol: str
    member_epoch: int
    state: str
    url: str
    config_offset: int
    current: Items
    revoking: Items
    target: Items
    client_id: str = ""
    client_host: str = ""
    rack_id: str | None = None
    classic_state: str | None = None
    """A legacy member's classic state (``ClassicGroupState`` value); None for a new member."""
    waiting_for: str = ""
    """What the member waits for (a ``state.connect.describe.Waiting`` value); "" when not known (v0)."""
    wait_deadline_ms: int = -1
    """When a timer removes the member if that wait does not end; -1 if none bounds it."""


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    group_id: str
    error_code: int = 0
    group_type: str = ""
    state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor: str = ""
    leader_id: str = ""
    leader_url: str = ""
    config_offset: int = -1
    members: tuple[DescribedMember, ...] = ()
    now_ms: int = -1
    """The time the group was described at (the caller's clock); -1 when not known (v0)."""
    held: tuple[HeldWork, ...] = ()
    """Work of departed workers held back, with its deadlines."""
