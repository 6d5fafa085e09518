"""A ``classic`` group: the JoinGroup/SyncGroup barrier protocol, run as an Apache Kafka broker runs it.

This is Kafka's ``ClassicGroup`` plus the classic path of ``GroupMetadataManager`` (join, sync,
heartbeat, leave, the join/sync/heartbeat timers, the initial rebalance delay), for groups whose
members are all legacy Connect workers. Metadata and assignments are opaque bytes: the group elects
a protocol by vote and relays bytes between the leader and the followers; it never decodes them.

State apart from logic, the way Kafka keeps ``ClassicGroup`` apart from ``GroupMetadataManager``:
one state class, and step modules of functions that take it, a request and ``now_ms``:

===================== ================================================================
``classic.state``     :class:`ClassicGroup`: members, state machine and its invariants, the
                      timers it armed, the outbox, its record (``commit``/``apply``), which
                      fields are durable and which soft
``classic.member``    a member (``ClassicGroupMember``), Java's hash order for the vote
``classic.records``   the ``CLASSIC_GROUP`` snapshot record and its helper
``classic.join``      JoinGroup
``classic.sync``      SyncGroup, Heartbeat
``classic.leave``     LeaveGroup, deletion
``classic.rebalance`` prepare a rebalance, complete the join phase, propagate assignments
``classic.timers``    session, join, sync and switch timers
``classic.load``      after replay (``onLoaded``), after a conversion
===================== ================================================================

This module is their public face: the state class and the steps, as ``classic.group.join(group,
request, now_ms)`` and so on. Kafka completes JoinGroup/SyncGroup futures later; here a step
returns either the response or ``None`` (parked). A parked request's response comes out of
``group.drain_responses()`` tagged with the request's ``token``; a request whose own response is
produced during the same call (the last member completing the join barrier, the leader's SyncGroup)
gets it as the return value instead. Records come out of ``group.drain_records()``, already applied.

Pure and deterministic (docs/architecture.md, "Layers"): time is ``now_ms``, timers are entries in the shared
:class:`Timers`, member ids come from a persisted counter, and the group's durable state changes
only by applying its ``CLASSIC_GROUP`` record (a whole-group snapshot, like Kafka's
``GroupMetadata`` record). Deliberate differences from Kafka are listed in ``docs/classic-group.md``.
"""

from __future__ import annotations

from connect_bridge.state.classic.api import (
    EAGER_PROTOCOL,
    PROTOCOL_TYPE_CONNECT,
    ClassicGroupState,
)
from connect_bridge.state.classic.join import join
from connect_bridge.state.classic.leave import delete, leave
from connect_bridge.state.classic.load import load_converted, rebuild_after_load
from connect_bridge.state.classic.member import (
    ClassicMember,
    IllegalStateError,
    java_hashmap_order,
    java_string_hash,
)
from connect_bridge.state.classic.records import (
    ClassicGroupSnapshot,
    ClassicMemberSnapshot,
    classic_group_record,
)
from connect_bridge.state.classic.state import (
    NEW_MEMBER_JOIN_TIMEOUT_MS,
    ClassicDescribedGroup,
    ClassicDescribedMember,
    ClassicGroup,
)
from connect_bridge.state.classic.sync import heartbeat, steady_heartbeat, sync
from connect_bridge.state.classic.timers import on_timer, removed_by

__all__ = [
    "EAGER_PROTOCOL",
    "NEW_MEMBER_JOIN_TIMEOUT_MS",
    "PROTOCOL_TYPE_CONNECT",
    "ClassicDescribedGroup",
    "ClassicDescribedMember",
    "ClassicGroup",
    "ClassicGroupSnapshot",
    "ClassicGroupState",
    "ClassicMember",
    "ClassicMemberSnapshot",
    "IllegalStateError",
    "classic_group_record",
    "delete",
    "heartbeat",
    "java_hashmap_order",
    "java_string_hash",
    "join",
    "leave",
    "load_converted",
    "on_timer",
    "rebuild_after_load",
    "removed_by",
    "steady_heartbeat",
    "sync",
]
