"""The group data model of seed 000: members, target assignment, current assignments, config view.

Everything here is plain data. The transitions are records applied by ``connect.state``, decided in
``connect.heartbeat``/``connect.membership`` and the pure steps (``reconciliation``, ``target_assignment``);
keeping data and rules apart is what lets the record replay rebuild identical state.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from connect_bridge.codecs.ids import ConnectorTaskId, configured_items

Items = frozenset[ConnectorTaskId]
EMPTY: Items = frozenset()

ANONYMOUS = "User:ANONYMOUS"
"""Kafka's principal for a client that did not authenticate (``KafkaPrincipal.ANONYMOUS``): every
request carries a principal, and a deployment without authentication is all ``ANONYMOUS``."""

NEW_PROTOCOL = "new"
"""Protocol name of members speaking ConnectGroupHeartbeat (the legacy ones use Connect's names)."""


class GroupType(StrEnum):
    CLASSIC = "classic"
    CONNECT = "connect"


class GroupState(StrEnum):
    """KIP-848 group states, derived from epochs (never stored)."""

    EMPTY = "EMPTY"
    ASSIGNING = "ASSIGNING"
    RECONCILING = "RECONCILING"
    STABLE = "STABLE"
    DEAD = "DEAD"


class MemberState(StrEnum):
    """Reconciliation state of one member (Kafka's ``MemberState``)."""

    STABLE = "STABLE"
    UNREVOKED = "UNREVOKED"
    """Owns work that left its target; keeps its epoch until it acknowledges the revocation."""
    UNRELEASED = "UNRELEASED"
    """At the target epoch but waiting for other members to release newly targeted work."""


@dataclass(frozen=True, slots=True)
class ConfigView:
    """The group's view of the Connect config topic: what must run, and at which offset it was read."""

    offset: int = -1
    connectors: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, offset: int, connectors: dict[str, int]) -> ConfigView:
        return cls(offset, tuple(sorted(connectors.items())))

    @property
    def connector_tasks(self) -> dict[str, int]:
        return dict(self.connectors)

    def items(self) -> Items:
        return configured_items(self.connector_tasks)


@dataclass(frozen=True, slots=True)
class ClientAssignor:
    """A client-side assignor a member advertises (seed 000 ``Assignor``)."""

    name: str
    minimum_version: int
    maximum_version: int
    reason: int = 0
    version: int = 0
    metadata: bytes = b""


@dataclass(frozen=True, slots=True)
class AssignedMetadata:
    """The client-side assignor's opaque data for one member of a target (seed 000 ``Version``,
    ``Metadata``): given by InstallAssignment, kept with the target, handed to the member in its
    heartbeat's Assignment. The default means "none" (what the server-side assignors give)."""

    version: int = 0
    metadata: bytes = b""


NO_METADATA = AssignedMetadata()


@dataclass(frozen=True, slots=True)
class TargetMember:
    """A TARGET_MEMBER record value when the assignor gave the member metadata.

    Without metadata the value stays the plain ``Items`` it always was, so records of server-side
    groups (the vast majority) and their readers are unchanged.
    """

    items: Items
    assigned: AssignedMetadata


def target_member_value(items: Items, assigned: AssignedMetadata) -> Items | TargetMember:
    """The TARGET_MEMBER record value of a member's target: plain items unless it has metadata."""
    return items if assigned == NO_METADATA else TargetMember(items, assigned)


def split_target_member(value: Items | TargetMember) -> tuple[Items, AssignedMetadata]:
    """A TARGET_MEMBER record value as (items, assignor metadata)."""
    if isinstance(value, TargetMember):
        return value.items, value.assigned
    return value, NO_METADATA


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """What a worker tells the coordinator about itself; a change bumps the group epoch."""

    instance_id: str | None = None
    rebalance_timeout_ms: int = 60000
    session_timeout_ms: int = 10000
    url: str = ""
    config_offset: int = -1
    client_id: str = ""
    client_host: str = ""
    server_assignor: str | None = None
    client_assignors: tuple[ClientAssignor, ...] = ()
    protocol: str = NEW_PROTOCOL
    classic_protocols: tuple[tuple[str, bytes], ...] | None = None
    """A legacy member's JoinGroup protocols (name, subscription) in its order; None for new members."""
    principal: str = ANONYMOUS
    """Who created the member (``state.ownership``): only that principal may act on it. Persisted
    with the member, so a restart or a replay keeps the ownership."""

    @property
    def is_legacy(self) -> bool:
        return self.classic_protocols is not None


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """Seed 000 "Current Assignment": the member's epoch and the work it owns."""

    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Items = EMPTY
    """Work the member may run now."""
    revoking: Items = EMPTY
    """Work the member was told to stop and has not yet acknowledged stopping."""
    left_temporarily: bool = False
    """A static member that sent epoch -2: it keeps its assignment until its session expires."""

    @property
    def owned(self) -> Items:
        return self.assigned | self.revoking


@dataclass(slots=True)
class Member:
    member_id: str
    metadata: MemberMetadata
    current: CurrentAssignment


@dataclass(frozen=True, slots=True)
class HeldWork:
    """Work of a departed worker held back for ``scheduled.rebalance.max.delay.ms``.

    Connect's IncrementalCooperativeAssignor waits before reassigning lost work so that a bouncing
    worker gets it back; the worker is recognised by its REST url or static instance id.
    """

    items: Items
    url: str
    instance_id: str | None
    deadline_ms: int


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """Group-level state persisted as one record (seed 000 "Group Metadata" plus our additions)."""

    group_epoch: int = 0
    leader_id: str = ""
    member_seq: int = 0
    """Counter behind server-generated member ids, so ids stay unique across restarts."""
    held: tuple[HeldWork, ...] = ()


@dataclass(frozen=True, slots=True)
class TargetMetadata:
    assignment_epoch: int = 0
    error: int = 0
