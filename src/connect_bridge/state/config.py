"""Coordinator settings (the broker-side ``group.*`` configs of a real coordinator)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from connect_bridge.state.assignors import COOPERATIVE


class MigrationPolicy(StrEnum):
    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def allows_upgrade(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def allows_downgrade(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    session_timeout_ms: int = 10000
    heartbeat_interval_ms: int = 3000
    scheduled_rebalance_max_delay_ms: int = 300000
    """Connect's ``scheduled.rebalance.max.delay.ms``: how long lost work waits for its worker."""
    worker_request_timeout_ms: int = 40000
    """The workers' ``request.timeout.ms`` (Connect's default 40 s), which no request carries: a
    JoinGroup that a worker sent to a previous coordinator (a paused bridge) keeps it running its
    tasks for the larger of this and its rebalance timeout + 5 s, so a member loaded after a restart
    or a takeover gets a first session that long (``holds.first_session_after_load_ms``). Set it to
    the largest ``request.timeout.ms`` of the workers."""
    default_assignor: str = COOPERATIVE
    max_group_size: int = 2147483647
    max_groups: int = 100_000
    """Groups one bridge coordinates; a join that would create one more gets COORDINATOR_NOT_AVAILABLE."""
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL
    classic_initial_rebalance_delay_ms: int = 3000
    classic_min_session_timeout_ms: int = 6000
    classic_max_session_timeout_ms: int = 1800000
    classic_cooperative_switch_rebalance_ms: int | None = 3000
    """How long after a classic Connect group's first cooperative generation following an eager one
    becomes Stable the bridge starts one more rebalance (None: never). Java Connect 4.3.1 workers
    stop tasks then on stale task-config updates from the eager phase and never ask for the
    rebalance that restarts them, under Kafka's coordinator too (docs/live-drills.md)."""
    empty_group_expiry_ms: int | None = 600_000
    """How long a group stays after it became empty (no members, nothing held) before its
    tombstones are written and it is forgotten (None: kept). Kafka deletes such a group at its
    next cleanup, every ``offsets.retention.check.interval.ms`` (10 minutes by default): a Connect
    group commits no offsets. ``state.empty_groups``."""
    member_id_salt: str = ""
    """Secret mixed into the member ids the coordinator makes up, so nobody can guess another
    worker's id (ids are bearer tokens). The server draws a random one at start; simulations leave
    it empty, so their ids stay reproducible. Not a setting: it is never persisted or shown."""
