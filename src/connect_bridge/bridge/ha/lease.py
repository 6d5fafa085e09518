"""The zombie guard of a bridge in the bridges' group: may it still answer for its partitions?

A bridge owns the state-topic partitions Kafka assigned it only while the group coordinator (the
broker) keeps it in the group, i.e. until its session times out. A paused process (SIGSTOP, a long
GC-like stall, a VM migration) or one cut off by a network partition keeps believing it owns them:
its consumer thread has not run, so nothing told it otherwise. The lease is what it can know
without running anything: the broker refreshed its session no earlier than the moment the last
successful heartbeat (or SyncGroup) was *sent*, so until ``sent + session_timeout`` the broker
cannot have expired it. ``valid()`` answers from the monotonic clock alone, so after SIGCONT it is
False at once, before any kafka-python thread has noticed anything.

Why the send time and not kafka-python's own ``Heartbeat.last_receive``: the broker may process a
request long before its response is read (a process stopped with a heartbeat in flight reads the
response after SIGCONT), so the receive time can be arbitrarily later than the session refresh.
And ``Heartbeat.reset_timeouts`` also runs on a FindCoordinator answer, which proves nothing about
membership. kafka-python passes the send time to ``_handle_heartbeat_response`` and
``_process_sync_group_response``; ``install_lease_hooks`` wraps those two (and
``reset_generation``) on one coordinator instance instead of re-implementing heartbeats.

The margin (``session_timeout / 5`` by default, at least one heartbeat interval) covers the time
between a server checking the lease and its answer or write taking effect.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka import errors as kafka_errors

__all__ = ["Lease", "install_lease_hooks", "lease_margin_ms"]


def lease_margin_ms(session_timeout_ms: int, heartbeat_interval_ms: int) -> int:
    """How much shorter than the session the lease is; the lease must outlast a heartbeat interval
    with room to spare, or it would flap between heartbeats."""
    margin = max(session_timeout_ms // 5, heartbeat_interval_ms)
    if session_timeout_ms - margin < 2 * heartbeat_interval_ms:
        raise ValueError(
            f"heartbeat_interval_ms={heartbeat_interval_ms} is too long for session_timeout_ms="
            f"{session_timeout_ms}: the lease ({session_timeout_ms - margin} ms) must span two heartbeats"
        )
    return margin


class Lease:
    """The monotonic instant the broker last refreshed this member's session, at the latest; valid
    for ``duration_ms`` after it. ``fail()`` ends it for good (a membership that gave up)."""

    def __init__(self, duration_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._duration_s = duration_ms / 1000
        self._clock = clock
        self._anchor = -math.inf
        self._failed = False
        self._lock = threading.Lock()

    def renew(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` (monotonic seconds) was answered as a member's."""
        with self._lock:
            if not self._failed:
                self._anchor = max(self._anchor, sent_at)

    def drop(self) -> None:
        """The broker no longer counts us as a member (unknown member, fenced generation, left)."""
        with self._lock:
            self._anchor = -math.inf

    def fail(self) -> None:
        with self._lock:
            self._failed = True
            self._anchor = -math.inf

    def valid(self) -> bool:
        with self._lock:
            return self._clock() - self._anchor < self._duration_s

    def age_s(self) -> float:
        """Seconds since the anchor (infinite before the first contact), for logs and metrics."""
        with self._lock:
            return self._clock() - self._anchor


def install_lease_hooks(coordinator: Any, lease: Lease, on_generation_reset: Callable[[], None]) -> None:
    """Wrap three methods of one kafka-python ``ConsumerCoordinator`` instance (its own code calls
    them through ``self``): a heartbeat answered without error or with REBALANCE_IN_PROGRESS (the
    broker still knows the member and refreshed its session) and a successful SyncGroup renew the
    lease from the request's send time; ``reset_generation`` (UNKNOWN_MEMBER_ID,
    ILLEGAL_GENERATION, leaving) drops it and calls ``on_generation_reset`` (on kafka-python's IO
    thread; it must not block)."""
    handle_heartbeat = coordinator._handle_heartbeat_response
    process_sync = coordinator._process_sync_group_response
    reset_generation = coordinator.reset_generation

    def heartbeat_response(response: Any, send_time: float) -> Any:
        try:
            result = handle_heartbeat(response, send_time)
        except kafka_errors.RebalanceInProgressError:
            lease.renew(send_time)
            raise
        lease.renew(send_time)
        return result

    def sync_group_response(response: Any, send_time: float) -> Any:
        assignment = process_sync(response, send_time)
        lease.renew(send_time)
        return assignment

    def generation_reset(*args: Any, **kwargs: Any) -> Any:
        lease.drop()
        on_generation_reset()
        return reset_generation(*args, **kwargs)

    coordinator._handle_heartbeat_response = heartbeat_response
    coordinator._process_sync_group_response = sync_group_response
    coordinator.reset_generation = generation_reset
