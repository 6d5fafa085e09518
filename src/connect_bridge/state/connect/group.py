"""A ``connect`` group: the epoch engine of seed 000 driven by ConnectGroupHeartbeat.

The coordinator owns the group: membership changes bump the group epoch, a bumped epoch produces a
new declarative target assignment (server-side assignor, or one member computing it client-side),
and every member is reconciled toward that target on its own heartbeats, revoking before assigning.
All inputs carry ``now_ms``; all effects are responses, records (``drain_records``) and timers
(``timers``). Nothing here does I/O.

State apart from logic, the way Kafka keeps ``ConsumerGroup`` apart from ``GroupMetadataManager``:
one state class, and step modules of functions that take it, a request and ``now_ms``:

======================== ================================================================
``connect.state``        :class:`ConnectGroup`: persisted, derived and soft state, its
                         invariants, the record writers (``write``) and appliers (``apply``,
                         which replay runs), the timer primitives
``connect.records``      the records a connect group writes
``connect.heartbeat``    ConnectGroupHeartbeat (join, rejoin, leave, reconcile, answer),
                         PrepareAssignment, InstallAssignment, the config view
``connect.membership``   the membership, target and timer steps both protocols share, and
                         what a load or a conversion re-arms
``connect.describe``     ConnectGroupDescribe
``legacy_members``       the classic API of legacy members (composed into the group; its
                         steps take the group)
``client_side``          who computes a client-side target (composed likewise)
======================== ================================================================

The pure steps they use: ``reconciliation`` (a member toward its target), ``target_assignment``
(the assignor's input and the records of a new target), ``holds`` and ``connect.validation``.

This module is their public face: the state class and the steps, as ``connect.group.heartbeat(group,
request, now_ms)`` and so on.
"""

from __future__ import annotations

from connect_bridge.state.connect.describe import describe_group
from connect_bridge.state.connect.heartbeat import (
    heartbeat,
    install_assignment,
    prepare_assignment,
    set_config,
    steady_heartbeat,
)
from connect_bridge.state.connect.membership import (
    downgrade_due,
    expect_downgrade,
    heard_from,
    install_converted,
    maybe_update_target,
    on_timer,
    rebuild_after_load,
    remove_member,
    tombstone_all,
)
from connect_bridge.state.connect.state import HELD_OWNER, ConnectGroup
from connect_bridge.state.connect.validation import check_heartbeat
from connect_bridge.state.errors import RequestError

__all__ = [
    "HELD_OWNER",
    "ConnectGroup",
    "RequestError",
    "check_heartbeat",
    "describe_group",
    "downgrade_due",
    "expect_downgrade",
    "heard_from",
    "heartbeat",
    "install_assignment",
    "install_converted",
    "maybe_update_target",
    "on_timer",
    "prepare_assignment",
    "rebuild_after_load",
    "remove_member",
    "set_config",
    "steady_heartbeat",
    "tombstone_all",
]
