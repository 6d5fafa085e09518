"""The state half of a legacy (classic-protocol) Connect worker: what its steps read and write.

Split from :mod:`.legacy` as Kafka splits ``ClassicGroup`` (state) from its join/sync/heartbeat
handlers: here are the member's fields, the ``AbstractCoordinator.MemberState`` machine, when to
rejoin or heartbeat next, and the herder's view of the config topic. Free of I/O like the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypedDict

from connect_bridge.codecs.connect_protocol import Assignment
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.classic.api import NO_GENERATION, UNKNOWN_MEMBER_ID
from connect_bridge.state.model import EMPTY, ConfigView, Items
from connect_bridge.workers.connect_assignors import (
    DEFAULT_MAX_DELAY_MS,
    NO_ERROR,
    ConfigLike,
    IncrementalCooperativeAssignor,
    as_config_view,
)
from connect_bridge.workers.legacy_assignment import ConnectLeader
from connect_bridge.workers.legacy_protocol import (
    MODE_PROTOCOLS,
    TRANSITIONS,
    ActionKind,
    MemberEvent,
    MemberState,
    Mode,
    NextAction,
    Reaction,
)

__all__ = ["NO_CONFIG", "LegacyMember", "LegacyWorkerOptions"]

NO_CONFIG: Final = ConfigView()
"""Offset -1, no connectors: a worker that has not read the config topic yet."""
_S = MemberState


class LegacyWorkerOptions(TypedDict, total=False):
    """The keyword settings a driver (e.g. the live worker) passes through to :class:`LegacyMember`,
    whose signature holds their defaults."""

    session_timeout_ms: int
    rebalance_timeout_ms: int
    heartbeat_interval_ms: int
    max_delay_ms: int
    config: ConfigLike
    config_provider: Callable[[], ConfigLike] | None
    retry_backoff_ms: int


class LegacyMember:
    """The membership state of a legacy Connect worker and the plumbing all its steps share.

    :class:`~connect_bridge.workers.legacy.LegacyWorker` adds the steps (join, sync, heartbeat,
    leave); this holds what they read and write, the member state machine, and the herder's view of
    the config topic, so each step reads as a handler over one state.
    """

    revoke_on_generation_reset: bool
    """Off = Java (a cooperative worker keeps running after losing its generation). On = the
    consumer's rule: stop everything and rejoin with no allocation."""
    protocol: str | None
    """The elected protocol of the current generation (``AbstractCoordinator.generation``)."""
    current_protocol: str
    """``currentConnectProtocol``: the last elected protocol; decides eager vs cooperative."""
    held_generation: int
    """The generation last reported in a Reaction (the worker's epoch)."""
    snapshot: Assignment | None
    """``assignmentSnapshot``: the full current assignment, sent back as the allocation."""
    running: Items
    leader_state: dict[ConnectorTaskId, str] | None
    """``WorkerCoordinator.leaderState``: who runs what (REST url), built only by running the
    assignor as the elected leader and cleared by every ``onJoinPrepare``."""
    fatal_error: str | None

    def __init__(
        self,
        group_id: str,
        url: str,
        mode: Mode,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        heartbeat_interval_ms: int = 3_000,
        instance_id: str | None = None,
        config: ConfigLike = NO_CONFIG,
        config_provider: Callable[[], ConfigLike] | None = None,
        *,
        max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
        retry_backoff_ms: int = 100,
        revoke_on_generation_reset: bool = False,
    ) -> None:
        if mode not in MODE_PROTOCOLS:
            raise ValueError(
                f"unknown connect.protocol mode {mode!r}; expected one of {sorted(MODE_PROTOCOLS)}"
            )
        self.group_id = group_id
        self.url = url
        self.mode: Mode = mode
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.instance_id = instance_id
        self.config_provider = config_provider
        self._config = as_config_view(config_provider() if config_provider else config)
        self.retry_backoff_ms = retry_backoff_ms
        self.revoke_on_generation_reset = revoke_on_generation_reset

        self.state = MemberState.UNJOINED
        self.member_id = UNKNOWN_MEMBER_ID
        self.generation = NO_GENERATION
        self.protocol = None
        self.current_protocol = MODE_PROTOCOLS[mode][0]
        self.last_completed_generation = NO_GENERATION
        self.held_generation = NO_GENERATION
        self.snapshot = None
        self.running = EMPTY
        self.leader_id = ""
        self.leader_url = ""
        self.leader_state = None
        self.fatal_error = None

        self._config_snapshot = self._config
        self._leader = ConnectLeader(max_delay_ms)
        self._rejoin_after_sync = False
        self._reconfig_pending = False
        self._rejoin_needed = True
        self._rejoin_requested = False
        self._needs_join_prepare = True
        self._scheduled_rebalance_ms: int | None = None
        self._retry_at_ms = 0
        self._join_in_flight = self._sync_in_flight = self._heartbeat_in_flight = False
        self._heartbeat_sent_generation: tuple[int, str] | None = None
        self._heartbeat_base_ms = 0
        self._heartbeat_retry = False

    # -- views -------------------------------------------------------------------------------------

    @property
    def config(self) -> ConfigView:
        """The worker's view of the config topic (the herder's ``configState``)."""
        return self._config

    @config.setter
    def config(self, value: ConfigLike) -> None:
        self._config = as_config_view(value)

    @property
    def is_leader(self) -> bool:
        """``DistributedHerder.isLeader``: the current assignment names this member as leader."""
        return self.snapshot is not None and bool(self.member_id) and self.snapshot.leader == self.member_id

    @property
    def scheduled_rejoin_ms(self) -> int | None:
        return self._scheduled_rebalance_ms

    @property
    def assignor(self) -> IncrementalCooperativeAssignor:
        """The leader-side cooperative assignor and its remembered state."""
        return self._leader.cooperative

    def needs_rejoin(self, now_ms: int) -> bool:
        """``WorkerCoordinator.rejoinNeededOrPending`` plus the herder's scheduled rebalance."""
        if self.state is MemberState.DEAD:
            return False
        due = self._scheduled_rebalance_ms is not None and now_ms >= self._scheduled_rebalance_ms
        failed = self.snapshot is None or self.snapshot.error != NO_ERROR
        return self._rejoin_needed or self._rejoin_requested or failed or due

    def next_action(self, now_ms: int) -> NextAction:
        """What the driver should do next, and when."""
        if self.state is MemberState.DEAD:
            return NextAction(ActionKind.STOPPED, None, self.fatal_error or "shut down")
        if self._join_in_flight:
            return NextAction(ActionKind.WAIT, None, "awaiting JoinGroup response")
        if self.needs_rejoin(now_ms) and not self._sync_in_flight:
            return NextAction(ActionKind.JOIN, max(now_ms, self._retry_at_ms), self._join_reason(now_ms))
        heartbeat = self._heartbeat_due()
        scheduled = self._scheduled_rebalance_ms
        if heartbeat is not None and (scheduled is None or heartbeat < scheduled or self._sync_in_flight):
            return NextAction(ActionKind.HEARTBEAT, heartbeat, "heartbeat interval")
        if scheduled is not None and not self._sync_in_flight:
            return NextAction(ActionKind.JOIN, scheduled, "scheduled rebalance delay")
        waiting = "awaiting SyncGroup response" if self._sync_in_flight else "awaiting Heartbeat response"
        return NextAction(ActionKind.WAIT, None, waiting)

    def _join_reason(self, now_ms: int) -> str:
        if self.snapshot is None:
            return "no assignment yet"
        if self.snapshot.error != NO_ERROR:
            return "assignment failed"
        due = self._scheduled_rebalance_ms
        if due is not None and now_ms >= due and not (self._rejoin_needed or self._rejoin_requested):
            return "scheduled rebalance delay expired"
        return "rejoin requested"

    def _heartbeat_due(self) -> int | None:
        """Heartbeats run once JoinGroup succeeded (COMPLETING_REBALANCE and STABLE), one at a time."""
        if self._heartbeat_in_flight or self.state not in (_S.COMPLETING_REBALANCE, _S.STABLE):
            return None
        return self._heartbeat_base_ms + (
            self.retry_backoff_ms if self._heartbeat_retry else self.heartbeat_interval_ms
        )

    def heartbeat_due_ms(self) -> int | None:
        """When the heartbeat thread sends its next heartbeat, whatever the herder is doing (``None``:
        not in COMPLETING_REBALANCE / STABLE, or one in flight). A driver whose herder is stalled with a
        rejoin pending uses it: Java's heartbeat thread keeps the session alive until the poll timeout."""
        return self._heartbeat_due()

    # -- state machine plumbing --------------------------------------------------------------------

    def _transition(self, event: MemberEvent) -> None:
        target = TRANSITIONS.get((self.state, event))
        if target is None:
            raise RuntimeError(f"illegal transition: {event.value} in state {self.state}")
        self.state = target

    def _request_rejoin(self) -> None:
        self._rejoin_requested = True

    def on_config_change(self) -> Reaction:
        """The config topic changed: stop work of removed connectors and dropped tasks at once (the
        herder does this itself, whatever the group says), then ask for a rebalance."""
        configured = self._read_config().items()
        stop = self.running - configured
        self.running = self.running - stop
        self.request_rejoin()
        return Reaction(stop=stop, generation=self.generation)

    def request_rejoin(self) -> None:
        """The herder asks for a rebalance (a connector was added or removed in the config topic).

        Like ``DistributedHerder.needsReconfigRebalance``: a request that arrives during a rebalance
        is acted on once that rebalance completes (its assignment may predate the change).
        """
        if self.state is MemberState.STABLE:
            self._request_rejoin()
        else:
            self._reconfig_pending = True

    def _reset_generation(self, reset_member_id: bool) -> None:
        """``resetStateAndRejoin``: the next join starts a new rebalance (onJoinPrepare runs again)."""
        self.generation = NO_GENERATION
        self.protocol = None
        if reset_member_id:
            self.member_id = UNKNOWN_MEMBER_ID
        self._transition(MemberEvent.RESET)
        self._rejoin_needed = True
        self._needs_join_prepare = True

    def _die(self, reason: str | None) -> Reaction:
        """The worker process stops (fatal error, or ``reason=None`` for a graceful stop), and so does
        all its work."""
        stop = self.running
        self.running = EMPTY
        self.fatal_error = reason
        self._join_in_flight = self._sync_in_flight = self._heartbeat_in_flight = False
        self._transition(MemberEvent.DIED)
        return Reaction(stop=stop, fatal=reason, generation=self.generation)

    def _read_config(self) -> ConfigView:
        """Read the config topic to its end: the provider when there is one, else the attribute."""
        if self.config_provider is not None:
            self.config = as_config_view(self.config_provider())
        return self.config
