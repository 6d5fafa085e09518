"""How long, and for whom, the bridge holds the work of a member it removed without hearing it stop.

Pure functions (``state/`` rules: no clock, no I/O). The grace, a function of the member's session
timeout, is shared by the connect group's timers, the legacy members' join and sync timers and the
coordinator's classic-group expiry.
"""

from __future__ import annotations

from connect_bridge.state.model import HeldWork, Items, MemberMetadata

TASK_SHUTDOWN_MS = 5_000
"""Connect's ``task.shutdown.graceful.timeout.ms`` default: how long a worker may take to stop."""

CONNECTOR_SHUTDOWN_MS = 5_000
"""Connect's ``Worker.CONNECTOR_GRACEFUL_SHUTDOWN_TIMEOUT_MS``: how long a worker waits for a
connector to stop."""

REVOCATION_ROUND_MS = CONNECTOR_SHUTDOWN_MS + TASK_SHUTDOWN_MS
"""The longest a Connect worker's herder spends stopping what one revocation takes from it: its
connectors, then its tasks, each bounded by its graceful shutdown timeout."""


JOIN_GROUP_TIMEOUT_LAPSE_MS = 5_000
"""Java's ``AbstractCoordinator.JOIN_GROUP_TIMEOUT_LAPSE``: what a client adds to its rebalance
timeout when it waits for a JoinGroup answer."""

CONNECT_REQUEST_TIMEOUT_MS = 40_000
"""A Connect worker's ``request.timeout.ms`` default (``DistributedConfig``)."""


def join_group_wait_ms(rebalance_timeout_ms: int, request_timeout_ms: int) -> int:
    """How long a Java client waits for a JoinGroup answer before it gives up on the coordinator:
    its rebalance timeout plus Java's lapse, but never less than its ``request.timeout.ms`` (the
    client's network layer sends a JoinGroup with the larger of the two)."""
    return max(request_timeout_ms, rebalance_timeout_ms + JOIN_GROUP_TIMEOUT_LAPSE_MS)


def first_session_after_load_ms(
    session_timeout_ms: int, rebalance_timeout_ms: int, request_timeout_ms: int = CONNECT_REQUEST_TIMEOUT_MS
) -> int:
    """A classic-protocol member's first session at a coordinator that has just loaded its group
    from the log (a bridge restarted, or another bridge's partition taken over).

    Why longer than a session: the member may be parked in a JoinGroup at the previous coordinator.
    It then sends no heartbeat and keeps running its tasks (a cooperative rebalance revokes
    nothing before the answer) until that JoinGroup times out, ``join_group_wait_ms`` after it sent
    it; any other request it may wait on (SyncGroup, Heartbeat) times out after
    ``request_timeout_ms``, which that bound covers too. ``request_timeout_ms`` is the workers'
    ``request.timeout.ms``: the coordinator cannot see it (no request carries it), so it comes from
    the bridge's settings (``coordinator.worker_request_timeout_ms``). A killed coordinator's
    connections break and the member rejoins at once, but a paused one keeps them open: expiring
    the member a session after the load handed its tasks to a worker that came back first while it
    still ran them (seen with Java workers and a SIGSTOPped bridge, tests/test_ha_java.py). Kafka
    arms a plain session in ``onLoaded``; a Kafka coordinator that loses the partition answers its
    parked joins NOT_COORDINATOR, which a paused process cannot do.
    """
    return max(session_timeout_ms, join_group_wait_ms(rebalance_timeout_ms, request_timeout_ms))


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


def revocation_timeout_hold_ms(session_timeout_ms: int) -> int:
    """How long the work of a member removed by its revocation timer stays held even without a
    scheduled delay: longer than the zombie grace.

    That member was not silent: it kept heartbeating while its herder spent a rebalance timeout
    stopping what it was told to revoke, so it has shown that stopping takes it long. It may be in
    the middle of a revocation round, which it finishes before it can act on anything else (up to
    :data:`REVOCATION_ROUND_MS`; a member whose heartbeats wait on the herder is heard only then),
    learns of its removal at its next heartbeat (a heartbeat interval, a third of the session), and
    then stops everything it still runs (one more round). The zombie grace assumes one task
    shutdown: in adversarial drill 99302309272 a new-protocol worker removed this way took 8.2 s
    per stop and ran a connector 2.9 s after its work was dealt out (no scheduled delay).
    """
    return max(max(0, session_timeout_ms) // 3, REVOCATION_ROUND_MS) + REVOCATION_ROUND_MS


def timer_removal_hold_ms(
    session_timeout_ms: int, now_ms: int, waits_elsewhere_until_ms: int | None, grace_ms: int | None = None
) -> int:
    """The least hold on the work of a member a timer removes at ``now_ms``: ``grace_ms`` (the
    zombie grace unless given), counted from when the member can stop running its tasks. That is
    now, unless the group was just loaded and the member may still wait on a JoinGroup at the
    previous coordinator (``ClassicMember.waits_elsewhere_until_ms``): then it runs its tasks until
    that JoinGroup times out, and only then notices, finds this coordinator and comes back for its
    work. A join phase another member started right after the load ends a rebalance timeout later,
    before such a JoinGroup gives up when the workers' request timeout exceeds the rebalance
    timeout + 5 s."""
    waits_ms = 0 if waits_elsewhere_until_ms is None else max(0, waits_elsewhere_until_ms - now_ms)
    return waits_ms + (zombie_grace_ms(session_timeout_ms) if grace_ms is None else grace_ms)


def rejoin_delay_ms(held: tuple[HeldWork, ...], now_ms: int) -> int:
    """The ``delay`` a legacy member's assignment carries: how long until the first hold ends.

    Java's herder schedules a rejoin that long after it applies an assignment with a delay
    (``DistributedHerder``'s scheduled rebalance), the way a Kafka-coordinated group learns that
    Connect's leader is done waiting for lost work: every worker rejoins the moment the delay ends.
    A heartbeat would only tell it up to a heartbeat interval later. 0 = nothing held (no rejoin).
    """
    if not held:
        return 0
    return max(0, min(h.deadline_ms for h in held) - now_ms)


def hold_departed(work: Items, departed: MemberMetadata, deadline_ms: int) -> HeldWork:
    """The hold on a departed member's work, to go back to the member that is back with its url or
    instance id: one that comes back later, or one already in the group (a worker killed and
    restarted at the same url before its old member's session ended), as Connect's own leader
    deals a departed worker's work to the worker that is back without any.

    A member already in the group with that url may also be a stale member of another process
    (a duplicated JoinGroup of a worker that later lost its member, drill 14001202): held work
    returned to a legacy member stays its own until that member sends a SyncGroup
    (``LegacyMembers.returning``), so nobody else is granted it meanwhile and it is held again if
    that member goes first.
    """
    return HeldWork(work, departed.url, departed.instance_id, deadline_ms)
