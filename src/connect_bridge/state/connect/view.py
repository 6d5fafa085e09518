"""What the client-side assignment steps of a ``connect`` group may see of it, as a protocol.

``client_side`` (choosing who computes, validating what it installs) takes the group as an
argument and only reads it. Typing it against this protocol instead of ``ConnectGroup`` keeps
``state/`` free of import circles (the group's state class composes ``ClientSideAssignment``), and
says in one place what it may read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect.member_index import MemberIndex
from connect_bridge.state.model import (
    AssignedMetadata,
    ConfigView,
    GroupMetadata,
    Items,
    Member,
)


class ConnectGroupView(Protocol):
    """Read-only view of a connect group."""

    group_id: str
    config: CoordinatorConfig
    metadata: GroupMetadata
    members: dict[str, Member]
    target: dict[str, Items]
    assignor_metadata: dict[str, AssignedMetadata]
    index: MemberIndex

    @property
    def view(self) -> ConfigView: ...

    @property
    def group_epoch(self) -> int: ...

    @property
    def assignment_epoch(self) -> int: ...

    def assignor_name(self) -> str: ...

    def leader_url(self) -> str: ...

    def assignment_config_offset(self) -> int: ...

    def member_by_instance(self, instance_id: str) -> Member | None: ...

    def owner_lookup(self) -> Callable[[ConnectorTaskId], str | None]: ...
