"""How long the bridge holds the work of a member it removed without hearing it stop.

A pure function of the member's session timeout, shared by the connect group's timers, the legacy members'
join and sync timers and the coordinator's classic-group expiry (``state/`` rules: no clock, no I/O).
"""

from __future__ import annotations

TASK_SHUTDOWN_MS = 5_000
"""Connect's ``task.shutdown.graceful.timeout.ms`` default: how long a worker may take to stop."""


def zombie_grace_ms(session_timeout_ms: int) -> int:
    """How long the work of a member removed by a timer (session, revocation, join or sync) stays
    held even without a scheduled delay.

    A timer proves nothing about the process. Its client measures its session from the last
    *answer* it got, the coordinator from the last *request*, so it notices it is out up to a
    heartbeat interval (a third of the session, Kafka's default ratio) after the coordinator does,
    and then takes up to Connect's task shutdown timeout to stop. Dealing its work out before that
    ran items twice in adversarial drills (a partitioned worker in an eager group).
    """
    return max(0, session_timeout_ms) // 3 + TASK_SHUTDOWN_MS
