"""A bridge's membership in the bridges' Kafka consumer group: which state partitions it coordinates.

Several bridges share the Connect groups the way Kafka's brokers share consumer groups: a group's
records live in one partition of the state topic (``state.partitioning.partition_for``), and the
bridge that owns the partition coordinates the group. Ownership is not a protocol of our own: every
bridge is a member of one ordinary consumer group (``ha.group``) subscribed to the state topic, and
the partitions Kafka assigns it are the ones it owns (docs/high-availability.md, "Membership and
ownership").

- **The consumer.** A daemon thread runs a kafka-python ``KafkaConsumer`` (``client_id`` = this
  bridge's ``BridgeAddress.encode()``, no offset commits) with the ``cooperative-sticky`` assignor
  (KIP-429): a bridge joining or leaving moves only the partitions that must move, and a moving
  partition is first revoked from its owner (whose ``on_revoked`` returns) and only given to the
  new owner in the follow-up rebalance. The records are not needed here (the partitioned store
  reads them), so assigned partitions are paused and ``poll`` only drives the membership.
- **Callbacks.** kafka-python runs rebalance listeners on its IO thread, the thread that also sends
  heartbeats; a blocking listener there would stop the heartbeats and get the bridge expired in
  the middle of loading. So the listener is an ``AsyncConsumerRebalanceListener`` that runs
  ``on_assigned``/``on_revoked`` on a short-lived callback thread (one at a time, in rebalance
  order) and awaits it: they may block as long as loading or unloading takes, heartbeats go on,
  and the rebalance does not proceed (nothing is given up, nothing re-joins) until they return.
- **Lost partitions.** When the broker expired this member (a paused process, a partition),
  kafka-python learns it from a heartbeat or JoinGroup answer (UNKNOWN_MEMBER_ID /
  ILLEGAL_GENERATION -> ``reset_generation``); the next ``poll`` re-joins, and
  ``ConsumerCoordinator._on_join_prepare_async`` calls ``on_partitions_lost`` with every partition
  still held, which reaches ``on_revoked`` here before the JoinGroup is sent. The poll loop runs
  every ``POLL_TIMEOUT_MS``, so that is prompt; meanwhile ``lease_valid()`` is already False.
  kafka-python's cooperative assignor would advertise the lost partitions as still owned in the
  next JoinGroup (it keeps ``member_assignment`` across a lost generation), which could make the
  leader hand them back to this member while another one holds them; the generation reset hook
  clears it (``ha.lease.install_lease_hooks``).
- **A join that outlasts a poll.** kafka-python 3.0.12 orphans a leader's re-join triggered by a
  metadata change once it outlasts one ``poll``: the member is never told its assignment, is
  expired, and the other bridges get every partition (the 4/0/0 seen in ``tests/test_ha.py``);
  ``ha.join.install_join_completion_hook`` keeps ``need_rejoin()`` True until the join completes.
  The assignor itself (placement, the cooperative two rounds) was not at fault.
- **A callback that raises** ends the membership (fail closed): the lease is revoked for good
  (``lease_valid()`` False at once, so the server stops answering for every group), the remaining
  partitions go through ``on_revoked`` (including any whose ``on_assigned`` raised, so a partial
  load is unloaded), LeaveGroup is sent so the other bridges take them over now, and ``failure``
  holds the exception (``failed()``: the reason on one line). The bridge does not re-join by
  itself: a load that failed once is likely to fail again, and a bridge flapping in and out of the
  group would move partitions every time; the process should exit and be restarted.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kafka import KafkaConsumer
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.future import Future as KafkaFuture
from kafka.structs import TopicPartition

from connect_bridge.bridge.ha.join import install_join_completion_hook
from connect_bridge.bridge.ha.lease import Lease, install_lease_hooks, lease_margin_ms
from connect_bridge.bridge.ha.owners import BridgeAddress, OwnersRefresher, merge_own

__all__ = ["BridgeAddress", "BridgeMembership", "PartitionsCallback"]

log = logging.getLogger(__name__)

PartitionsCallback = Callable[[frozenset[int]], None]
POLL_TIMEOUT_MS = 200
"""How long one ``poll`` waits: the longest a stop request or a lost membership waits for the
membership thread."""
RETRY_BACKOFF_S = 1.0
CLOSE_TIMEOUT_S = 5.0


class BridgeMembership:
    """This bridge's member of the bridges' consumer group ``group_id`` on the state ``topic``."""

    def __init__(
        self,
        bootstrap: str | list[str],
        topic: str,
        group_id: str,
        me: BridgeAddress,
        *,
        on_assigned: PartitionsCallback,
        on_revoked: PartitionsCallback,
        session_timeout_ms: int = 10000,
        heartbeat_interval_ms: int = 1000,
        refresh_owners_ms: int = 1000,
        client_options: dict[str, Any] | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._group_id = group_id
        self._me = me
        self._client_id = me.encode()
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._session_timeout_ms = session_timeout_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._client_options = dict(client_options or {})
        margin = lease_margin_ms(session_timeout_ms, heartbeat_interval_ms)
        self._lease = Lease(session_timeout_ms - margin)
        self._assignor = CooperativeStickyAssignor()
        self._owners = OwnersRefresher(
            bootstrap, topic, group_id, interval_ms=refresh_owners_ms, client_options=self._client_options
        )
        self._lock = threading.Lock()
        self._assigned: frozenset[int] = frozenset()
        self._failure: BaseException | None = None
        self._failed_because: str | None = None
        self._stopping = threading.Event()
        self._close_timeout_ms = int(CLOSE_TIMEOUT_S * 1000)
        self._consumer: KafkaConsumer | None = None
        self._thread = threading.Thread(target=self._run, name=f"ha-membership-{group_id}", daemon=True)

    # ------------------------------------------------------------------------------- public view

    def start(self) -> None:
        self._owners.start()
        self._thread.start()

    @property
    def me(self) -> BridgeAddress:
        return self._me

    @property
    def assigned(self) -> frozenset[int]:
        """The partitions this bridge holds: added once ``on_assigned`` returned, removed once
        ``on_revoked`` returned."""
        with self._lock:
            return self._assigned

    @property
    def failure(self) -> BaseException | None:
        """The exception of the callback that ended the membership, or None."""
        with self._lock:
            return self._failure

    def failed(self) -> str | None:
        """Why the membership gave up for good, on one line (the server's health and logs), or None
        while it is a member or may still become one. Set once a callback raised (module docstring);
        the bridge then answers for no group until restarted."""
        with self._lock:
            return self._failed_because

    def owners(self) -> dict[int, BridgeAddress]:
        """partition -> owning bridge: the latest description of the bridges' group (refreshed every
        ``refresh_owners_ms`` and right after this bridge's own rebalances), corrected by what this
        bridge holds itself. Partitions in flight are absent."""
        return merge_own(self._owners.snapshot(), self._me, self.assigned)

    def lease_valid(self) -> bool:
        """True only while the broker cannot yet have expired this member: its last successful
        heartbeat or SyncGroup was *sent* less than the session timeout minus a margin ago
        (``ha.lease``). Answers from the monotonic clock alone, so a process resumed after a pause
        longer than the session sees False before any of its threads ran."""
        return self._lease.valid()

    def lease_age_s(self) -> float:
        """Seconds since the broker last refreshed this member's session at the latest (metrics)."""
        return self._lease.age_s()

    def drain(self, timeout_s: float = 30.0) -> None:
        """Give up every partition (``on_revoked`` for all) and send LeaveGroup, so the other
        bridges take them over now rather than after a session timeout (a rolling upgrade).
        Returns once left; after ``timeout_s`` it logs, ends the lease and returns anyway."""
        self._close_timeout_ms = max(1, int(timeout_s * 1000))
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("HA membership %s: not left after %.1f s; lease ended", self._client_id, timeout_s)
            self._lease.fail()
        self._owners.stop()

    def close(self) -> None:
        """``drain`` with a short timeout; idempotent."""
        self.drain(CLOSE_TIMEOUT_S)

    # ------------------------------------------------------------------------ membership thread

    def _run(self) -> None:
        consumer = None
        try:
            while consumer is None and not self._stopping.is_set():
                try:
                    consumer = self._consumer = self._make_consumer()
                except Exception as exc:  # an unreachable cluster is retried
                    log.warning("HA membership %s: cannot connect (%s); retrying", self._client_id, exc)
                    self._stopping.wait(RETRY_BACKOFF_S)
            while consumer is not None and not self._stopping.is_set() and self.failure is None:
                try:
                    consumer.poll(timeout_ms=POLL_TIMEOUT_MS)
                except Exception as exc:  # our callbacks' failures end the loop below
                    if self.failure is None:
                        log.warning("HA membership %s: poll failed: %s", self._client_id, exc)
                        self._stopping.wait(RETRY_BACKOFF_S)
        finally:
            try:
                if consumer is not None:
                    consumer.close(autocommit=False, timeout_ms=self._close_timeout_ms)
            except Exception as exc:  # leaving is best effort; the session expires anyway
                log.warning("HA membership %s: closing the consumer failed: %s", self._client_id, exc)
            finally:
                self._lease.fail()
                log.info("HA membership %s: left group %s", self._client_id, self._group_id)

    def _make_consumer(self) -> KafkaConsumer:
        consumer = KafkaConsumer(
            bootstrap_servers=self._bootstrap,
            group_id=self._group_id,
            client_id=self._client_id,
            enable_auto_commit=False,
            partition_assignment_strategy=[self._assignor],
            session_timeout_ms=self._session_timeout_ms,
            heartbeat_interval_ms=self._heartbeat_interval_ms,
            **self._client_options,
        )
        coordinator = consumer._coordinator
        install_lease_hooks(coordinator, self._lease, self._forget_owned)
        install_join_completion_hook(coordinator)
        # The listener below is async and awaits the blocking callbacks off the IO thread; the
        # "slow sync listener" warning kafka-python logs after 1 s does not apply to it.
        coordinator._REBALANCE_LISTENER_WARN_SECS = math.inf
        consumer.subscribe([self._topic], listener=_Listener(self, consumer))
        return consumer

    def _forget_owned(self) -> None:
        """Generation reset: the next JoinGroup must not claim partitions Kafka may have given away."""
        self._assignor.member_assignment = None
        self._assignor.generation = -1
        self._owners.poke()

    def _generation(self) -> int:
        consumer = self._consumer
        return consumer._coordinator._generation.generation_id if consumer is not None else -1

    # ------------------------------------------------------------- callbacks (kafka-python IO thread)

    async def _take(self, consumer: KafkaConsumer, partitions: frozenset[int]) -> None:
        consumer.pause(*(TopicPartition(self._topic, p) for p in sorted(partitions)))
        await self._call(self._on_assigned, partitions, consumer)
        with self._lock:
            self._assigned = self._assigned | partitions
            held = sorted(self._assigned)
        log.info(
            "HA membership %s: gained partitions %s (now %s), generation %d",
            self._client_id,
            sorted(partitions),
            held,
            self._generation(),
        )
        self._owners.poke()

    async def _give_up(self, consumer: KafkaConsumer, partitions: frozenset[int], how: str) -> None:
        try:
            await self._call(self._on_revoked, partitions, consumer)
        finally:
            with self._lock:
                self._assigned = self._assigned - partitions
                held = sorted(self._assigned)
            log.info(
                "HA membership %s: gave up partitions %s (%s; now %s), generation %d",
                self._client_id,
                sorted(partitions),
                how,
                held,
                self._generation(),
            )
            self._owners.poke()

    async def _call(self, callback: PartitionsCallback, partitions: frozenset[int], consumer: Any) -> None:
        """Run ``callback(partitions)`` on its own thread and wait for it without blocking the IO
        loop (heartbeats keep flowing). A raising callback ends the membership (module docstring)."""
        done = KafkaFuture()
        net = consumer._net
        outcome: list[BaseException | None] = []

        def resolve() -> None:
            error = outcome[0]
            if error is None:
                done.success(None)
            else:
                done.failure(error)

        def work() -> None:
            try:
                callback(partitions)
                outcome.append(None)
            except BaseException as exc:  # reported to the waiting listener
                log.exception(
                    "HA membership %s: %s(%s) failed; leaving the group",
                    self._client_id,
                    getattr(callback, "__name__", "callback"),
                    sorted(partitions),
                )
                with self._lock:
                    if self._failure is None:
                        self._failure = exc
                        name = getattr(callback, "__name__", "callback")
                        message = " ".join(str(exc).split())
                        self._failed_because = (
                            f"{name}({sorted(partitions)}) raised {type(exc).__name__}: {message}; "
                            f"left group {self._group_id} for good"
                        )
                self._lease.fail()
                outcome.append(exc)
            net.call_soon_threadsafe(resolve)

        threading.Thread(target=work, name=f"ha-callback-{self._group_id}", daemon=True).start()
        await done


class _Listener(AsyncConsumerRebalanceListener):
    """kafka-python's listener interface -> the membership's partition numbers on ``topic``."""

    def __init__(self, membership: BridgeMembership, consumer: KafkaConsumer) -> None:
        self._membership = membership
        self._consumer = consumer

    def _numbers(self, partitions: Iterable[TopicPartition]) -> frozenset[int]:
        return frozenset(tp.partition for tp in partitions if tp.topic == self._membership._topic)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        if partitions := self._numbers(assigned):
            await self._membership._take(self._consumer, partitions)

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if partitions := self._numbers(revoked):
            await self._membership._give_up(self._consumer, partitions, "revoked")

    async def on_partitions_lost(self, lost: Any) -> None:
        if partitions := self._numbers(lost):
            await self._membership._give_up(self._consumer, partitions, "lost")
