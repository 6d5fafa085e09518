"""What the side steps of a ``connect`` group may see and call of it, as protocols.

``client_side`` (choosing who computes, validating what it installs) and ``legacy_members`` (the
classic API) are steps that take the group as an argument. Typing them against these protocols
instead of ``ConnectGroup`` keeps ``state/`` free of import circles, and says in one place which
operations they may use: the client side only reads; the legacy steps change the group through the
same membership and reconciliation steps as ConnectGroupHeartbeat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.member_index import MemberIndex
from connect_bridge.state.model import (
    AssignedMetadata,
    ConfigView,
    GroupMetadata,
    Items,
    Member,
    MemberMetadata,
)


class ConnectGroupView(Protocol):
    """Read-only view of a connect group."""

    group_id: str
    config: CoordinatorConfig
    view: ConfigView
    metadata: GroupMetadata
    members: dict[str, Member]
    target: dict[str, Items]
    assignor_metadata: dict[str, AssignedMetadata]
    index: MemberIndex

    @property
    def group_epoch(self) -> int: ...

    @property
    def assignment_epoch(self) -> int: ...

    def assignor_name(self) -> str: ...

    def leader_url(self) -> str: ...

    def assignment_config_offset(self) -> int: ...

    def member_by_instance(self, instance_id: str) -> Member | None: ...

    def owner_lookup(self) -> Callable[[ConnectorTaskId], str | None]: ...


class LegacyHost(ConnectGroupView, Protocol):
    """The membership steps a legacy (classic-protocol) member goes through."""

    def new_member_id(self) -> str: ...

    def add_member(self, member_id: str, metadata: MemberMetadata, now_ms: int) -> Member: ...

    def take_over_static(self, old: Member, new_id: str, metadata: MemberMetadata, now_ms: int) -> Member: ...

    def update_member_metadata(self, member: Member, metadata: MemberMetadata) -> None: ...

    def release_unowned(self, member: Member, owned: Items) -> None: ...

    def arm_session(self, member: Member, now_ms: int) -> None: ...

    def maybe_update_target(self, now_ms: int) -> None: ...

    def reconcile(self, member: Member, owned: Items | None, now_ms: int) -> None: ...

    def remove_member(self, member: Member, now_ms: int, min_hold_ms: int = 0) -> None: ...

    def remove_by_timer(self, member: Member, now_ms: int) -> None: ...

    def waits_elsewhere(self, member_id: str) -> bool: ...
