"""The vocabulary of a legacy (classic-protocol) Connect worker: what it tells its driver, its member
states, and what Kafka's response handlers do with each error code.

Kept apart from :mod:`.legacy` so the worker's steps read as code and these as tables: a new error
code's handling is one row in an outcome table, a new member state one row in :data:`TRANSITIONS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Final, Literal

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.api import NO_GENERATION, LeaveGroupRequest, SyncGroupRequest
from connect_bridge.state.model import EMPTY, Items

__all__ = [
    "EAGER_PROTOCOL",
    "HEARTBEAT_OUTCOMES",
    "JOIN_OUTCOMES",
    "MODE_PROTOCOLS",
    "PROTOCOL_TYPE",
    "SYNC_OUTCOMES",
    "TRANSITIONS",
    "ActionKind",
    "MemberEvent",
    "MemberState",
    "Mode",
    "NextAction",
    "Outcome",
    "Reaction",
]

PROTOCOL_TYPE: Final = "connect"

Mode = Literal["eager", "compatible", "sessioned"]

MODE_PROTOCOLS: Final[dict[str, tuple[str, ...]]] = {
    "eager": ("default",),
    "compatible": ("compatible", "default"),
    "sessioned": ("sessioned", "compatible", "default"),
}
"""What each ``connect.protocol`` mode advertises in JoinGroup, most preferred first."""

EAGER_PROTOCOL: Final = "default"


# --------------------------------------------------------------------------------------------------
# What the worker tells its driver
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Reaction:
    """The outcome of one step: work to stop and start, and what the driver must do next.

    Stop before start: a driver emits every ``release`` for ``stop`` before any ``run`` for ``start``.
    """

    stop: Items = EMPTY
    start: Items = EMPTY
    generation_changed: bool = False
    """The worker now holds a new generation (its epoch): emit an ``epoch`` event."""
    generation: int = NO_GENERATION
    request: SyncGroupRequest | LeaveGroupRequest | None = None
    """A request to send right away; it already counts as in flight."""
    rejoin: bool = False
    """The worker wants to rejoin now (``next_action`` says JOIN)."""
    rejoin_at_ms: int | None = None
    """A rejoin scheduled by the assignment's delay."""
    fatal: str | None = None
    """The worker died (e.g. FENCED_INSTANCE_ID): everything it ran is in ``stop``."""

    @property
    def epoch_changed(self) -> bool:
        """Same name as the new-protocol worker's Reaction: a legacy worker's epoch is its generation."""
        return self.generation_changed


class ActionKind(StrEnum):
    JOIN = "join"
    """Call ``prepare_join`` (emit its stops) then send ``join_request`` at ``at_ms``."""
    HEARTBEAT = "heartbeat"
    """Send ``heartbeat_request`` at ``at_ms``."""
    WAIT = "wait"
    """A JoinGroup / SyncGroup / Heartbeat response is outstanding; nothing to send before ``at_ms``
    (``None``: until the response arrives)."""
    STOPPED = "stopped"
    """Dead (fatal error or shut down): nothing more to do."""


@dataclass(slots=True)
class NextAction:
    """What the worker does next, and when. Not frozen: a worker answers one on every step of its
    driver, and a frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``
    (three times slower, interpreted or compiled)."""

    kind: ActionKind
    at_ms: int | None = None
    reason: str = ""


class MemberState(StrEnum):
    """``AbstractCoordinator.MemberState`` plus DEAD (fatal error or shut down)."""

    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"
    DEAD = "DEAD"


class MemberEvent(Enum):
    JOIN_SENT = "join sent"
    JOINED = "joined"
    SYNCED = "synced"
    RESET = "generation reset"
    DIED = "died"


_S = MemberState
_ALIVE = (_S.UNJOINED, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.STABLE)
TRANSITIONS: Final[dict[tuple[MemberState, MemberEvent], MemberState]] = {
    # A failed SyncGroup that needs no reset rejoins straight from COMPLETING_REBALANCE.
    **{(s, MemberEvent.JOIN_SENT): _S.PREPARING_REBALANCE for s in _ALIVE},
    (_S.PREPARING_REBALANCE, MemberEvent.JOINED): _S.COMPLETING_REBALANCE,
    (_S.COMPLETING_REBALANCE, MemberEvent.SYNCED): _S.STABLE,
    **{(s, MemberEvent.RESET): _S.UNJOINED for s in _ALIVE},
    **{(s, MemberEvent.DIED): _S.DEAD for s in (*_ALIVE, _S.DEAD)},
}
"""The member state machine; anything not listed is a driver bug (a response out of turn)."""


class Outcome(Enum):
    """What Kafka's response handlers do with an error code (``AbstractCoordinator``)."""

    OK = "ok"
    REJOIN = "rejoin now"
    RESET_REJOIN = "reset generation and member id, rejoin now"
    RESET_GENERATION_REJOIN = "reset generation (keep member id), rejoin now"
    MEMBER_ID = "take the member id, rejoin now"
    RETRY = "coordinator not ready: retry after retry.backoff.ms"
    FATAL = "fatal"


_E = ErrorCode
JOIN_OUTCOMES: Final[dict[int, Outcome]] = {
    _E.NONE: Outcome.OK,
    _E.COORDINATOR_LOAD_IN_PROGRESS: Outcome.RETRY,
    _E.COORDINATOR_NOT_AVAILABLE: Outcome.RETRY,
    _E.NOT_COORDINATOR: Outcome.RETRY,
    _E.UNKNOWN_MEMBER_ID: Outcome.RESET_REJOIN,
    _E.MEMBER_ID_REQUIRED: Outcome.MEMBER_ID,
    _E.REBALANCE_IN_PROGRESS: Outcome.REJOIN,
    # FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, INVALID_GROUP_ID,
    # GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_VERSION and anything unexpected
    # (ILLEGAL_GENERATION included: JoinGroup never returns it, Java treats it as unexpected) are fatal.
}
SYNC_OUTCOMES: Final[dict[int, Outcome]] = {
    _E.NONE: Outcome.OK,
    _E.COORDINATOR_NOT_AVAILABLE: Outcome.RETRY,
    _E.NOT_COORDINATOR: Outcome.RETRY,
    _E.REBALANCE_IN_PROGRESS: Outcome.REJOIN,
    _E.UNKNOWN_MEMBER_ID: Outcome.RESET_REJOIN,
    _E.ILLEGAL_GENERATION: Outcome.RESET_GENERATION_REJOIN,
    # COORDINATOR_LOAD_IN_PROGRESS is not handled by Java's SyncGroup handler: unexpected, fatal.
}
HEARTBEAT_OUTCOMES: Final[dict[int, Outcome]] = {
    _E.NONE: Outcome.OK,
    _E.COORDINATOR_NOT_AVAILABLE: Outcome.RETRY,
    _E.NOT_COORDINATOR: Outcome.RETRY,
    _E.REBALANCE_IN_PROGRESS: Outcome.REJOIN,  # only when STABLE; ignored mid-rebalance
    _E.ILLEGAL_GENERATION: Outcome.RESET_GENERATION_REJOIN,
    _E.UNKNOWN_MEMBER_ID: Outcome.RESET_REJOIN,
    # FENCED_INSTANCE_ID kills the heartbeat thread, and with it the worker.
}
