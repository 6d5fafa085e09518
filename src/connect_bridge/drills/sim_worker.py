"""The simulated worker process of a simulated drill: which client it runs and how it misbehaves.

A :class:`SimWorker` wraps one incarnation of an I/O-free worker object (``NewProtocolWorker`` or
``LegacyWorker``) with what the simulator needs to play it as a process: whether it is alive, what
it sent and awaits, and the misbehaviour a scenario gave it (stalls, pauses, a partition, lost or
duplicated messages, a late SyncGroup, slow revocation). The tables here say how a classic request
kind reaches the coordinator and how a misbehaviour step changes the process; the simulator
(:mod:`connect_bridge.drills.sim`) schedules the rest.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.drills.scenario import Scenario
from connect_bridge.state.classic import api as classic_api
from connect_bridge.state.model import NEW_PROTOCOL, ConfigView, Items
from connect_bridge.workers.legacy import LegacyWorker
from connect_bridge.workers.legacy_protocol import Mode
from connect_bridge.workers.new_protocol import NewProtocolWorker

SIM_MEMBER_IDS = uuid.UUID("6d1f0c52-4b7e-4c2e-9a57-3c2f1e0b8d11")
"""Namespace of the member ids simulated new-protocol workers generate (deterministic per drill)."""

Logic = NewProtocolWorker | LegacyWorker
UNAVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)
FOREVER = 2**62


class LegacyCall(NamedTuple):
    """How one kind of classic request travels: the coordinator method that answers it, the answer
    a worker sees when the bridge is unreachable, and the worker method that takes the answer."""

    method: str
    unavailable: Callable[[], Any]
    on_response: str


LEGACY_CALLS: dict[str, LegacyCall] = {
    "join": LegacyCall(
        "classic_join",
        lambda: classic_api.JoinGroupResponse(error_code=UNAVAILABLE),
        "on_join_response",
    ),
    "sync": LegacyCall(
        "classic_sync",
        lambda: classic_api.SyncGroupResponse(error_code=UNAVAILABLE),
        "on_sync_response",
    ),
    "heartbeat": LegacyCall(
        "classic_heartbeat",
        lambda: classic_api.HeartbeatResponse(error_code=UNAVAILABLE),
        "on_heartbeat_response",
    ),
}
"""Classic request kind -> how it travels."""

STALL_ATTRS = {"stall": "stalled_until", "pause": "paused_until", "partition": "partitioned_until"}
"""Misbehaviours that hold the process up for a while -> the :class:`SimWorker` field of their end."""


@dataclass(slots=True)
class SimWorker:
    name: str
    protocol: str
    logic: Logic
    incarnation: int
    alive: bool = True
    step_seq: int = 0
    last_answer_ms: int = 0
    """When the coordinator last answered this worker (KAFKA-9184: silence for a heartbeat interval
    makes a legacy worker revoke everything)."""
    in_flight: set[str] = field(default_factory=set)
    """Kinds of classic requests sent and not yet answered (a bridge restart drops them)."""
    paused_until: int = -1
    """SIGSTOP: nothing in the process runs before this time."""
    stalled_until: int = -1
    """The herder (legacy: JoinGroup/SyncGroup and their answers; new: the heartbeat loop) is stuck."""
    partitioned_until: int = -1
    deferred: list[Callable[[int], None]] = field(default_factory=list)
    """What the process would have done while paused or stalled, run in order when it resumes."""
    lose: int = 0
    duplicate: int = 0
    duplicate_responses: int = 0
    """The next this many answers are delivered twice (the copy must be ignored as stale)."""
    sent_seq: dict[str, int] = field(default_factory=dict)
    """Per classic request kind, the sequence number of the last one sent: an answer carrying an older
    one is for a request the worker gave up on (the client's correlation id no longer matches)."""
    sync_delay_ms: int = 0
    slow_revocation: tuple[int, int] = (0, -1)
    """(delay of each stop, until when): stopping revoked work takes that long."""
    new_seq: int = 0
    """Sequence number of the new-protocol heartbeat in flight (older answers are stale)."""

    @property
    def running(self) -> Items:
        return self.logic.running

    # --- misbehaviour steps that only change what the process does next (see MISBEHAVE) ----------

    def lose_responses(self, step: Any, now: int) -> None:
        self.lose += step.count

    def duplicate_requests(self, step: Any, now: int) -> None:
        self.duplicate += step.count

    def duplicate_next_responses(self, step: Any, now: int) -> None:
        self.duplicate_responses += step.count

    def delay_sync(self, step: Any, now: int) -> None:
        self.sync_delay_ms = step.delay_ms

    def revoke_slowly(self, step: Any, now: int) -> None:
        until = FOREVER if step.duration_ms is None else now + step.duration_ms
        self.slow_revocation = (step.delay_ms, until)


MISBEHAVE: dict[str, Callable[[SimWorker, Any, int], None]] = {
    "lose_responses": SimWorker.lose_responses,
    "duplicate_requests": SimWorker.duplicate_requests,
    "duplicate_responses": SimWorker.duplicate_next_responses,
    "delay_sync": SimWorker.delay_sync,
    "slow_revocation": SimWorker.revoke_slowly,
}
"""Misbehaviour step -> how it changes the process (the stalls of :data:`STALL_ATTRS` apart: the
simulator schedules their end)."""

MISBEHAVIOURS = frozenset({*STALL_ATTRS, *MISBEHAVE})


def make_logic(
    scenario: Scenario,
    name: str,
    protocol: str,
    incarnation: int,
    config_offset: int,
    config_provider: Callable[[], ConfigView],
    instance_id: str | None = None,
) -> Logic:
    """The worker object of one incarnation of ``name`` speaking ``protocol``."""
    timing = scenario.timing
    url = f"http://{name}:8083/"
    if protocol == NEW_PROTOCOL:
        return NewProtocolWorker(
            group_id=scenario.group,
            url=url,
            rebalance_timeout_ms=timing.rebalance_timeout_ms,
            session_timeout_ms=timing.session_timeout_ms,
            config_offset=config_offset,
            instance_id=instance_id,
            # The client picks its member id (the spec requires a non-empty one; Kafka's
            # KIP-1082): a duplicated first heartbeat then cannot create a second member.
            member_id=str(uuid.uuid5(SIM_MEMBER_IDS, f"{name}/{incarnation}")),
        )
    return LegacyWorker(
        scenario.group,
        url,
        cast(Mode, protocol),  # the scenario's model admits only the protocols there are
        **timing.worker_timing(),
        config_provider=config_provider,
        instance_id=instance_id,
    )
