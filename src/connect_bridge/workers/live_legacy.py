"""A live legacy (classic-protocol) Connect worker on kafka-python's real group coordinator.

:class:`ConnectWorkerCoordinator` is a ``kafka.coordinator.base.BaseCoordinator`` whose hooks call the
I/O-free :class:`~connect_bridge.workers.legacy.LegacyWorker` (the object the simulator drives):

* ``protocol_type()`` is ``"connect"``; ``group_protocols()`` is :meth:`LegacyWorker.protocols`
  (one subscription per advertised protocol, most preferred first);
* ``_on_join_prepare_async`` -> :meth:`LegacyWorker.prepare_join` (eager: stop everything);
* ``_perform_assignment`` -> :meth:`LegacyWorker.perform_assignment` (the leader's Connect assignor);
* ``_on_join_complete_async`` -> :meth:`LegacyWorker.on_join_complete` (apply, start, revoke);
* a successful JoinGroup electing ``default`` (eager) makes a cooperative worker stop everything
  before its SyncGroup goes out, as :meth:`LegacyWorker.on_join_response` does
  (docs/legacy-workers.md, "deviation").

kafka-python owns the wire protocol: FindCoordinator, JoinGroup / SyncGroup with its own retry and
error handling, the heartbeat coroutine on its network thread, LeaveGroup on close. kafka-python 3.x
runs all I/O and the hooks on one network thread (``client._net``); :class:`LiveLegacyWorker` adds a
driver thread that calls ``ensure_active_group`` / ``poll_heartbeat`` in a loop (the herder's tick),
asks the coordinator to rejoin when :meth:`LegacyWorker.needs_rejoin` says so (revocations, scheduled
rebalance delay, config changes), and revokes everything when the coordinator has been unreachable
for a heartbeat interval (``WorkerCoordinator.poll``, KAFKA-9184). One lock serialises every access
to the :class:`LegacyWorker` between the two threads.

Work changes are reported through ``on_event(type, **fields)`` exactly as the new-protocol live worker
does: ``release`` / ``run`` (``connector``, ``task``), ``epoch`` (``epoch``), and ``fatal``
(``reason``) when the worker dies of a protocol error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, Unpack

import kafka.errors as Errors
from kafka.coordinator.base import BaseCoordinator
from kafka.net.compat import KafkaNetClient

from connect_bridge.state.model import EMPTY, Items
from connect_bridge.workers.legacy import LegacyWorker
from connect_bridge.workers.legacy_member import LegacyWorkerOptions
from connect_bridge.workers.legacy_protocol import EAGER_PROTOCOL, PROTOCOL_TYPE, Mode, Reaction
from connect_bridge.workers.live_new import EventSink, emit_items, monotonic_ms

__all__ = ["ConnectWorkerCoordinator", "LiveLegacyWorker"]

log = logging.getLogger("connect_bridge.workers.live_legacy")


class ConnectWorkerCoordinator(BaseCoordinator):
    """Connect's ``WorkerCoordinator`` on kafka-python: the group protocol is kafka-python's, the
    Connect logic is :class:`LegacyWorker`'s."""

    def __init__(
        self,
        client: Any,
        logic: LegacyWorker,
        on_event: EventSink,
        lock: threading.RLock,
        clock: Callable[[], int] = monotonic_ms,
        **configs: Any,
    ) -> None:
        super().__init__(client, **configs)
        self.logic = logic
        self.on_event = on_event
        self.lock = lock
        self.clock = clock

    # -- what the member advertises ----------------------------------------------------------------

    def protocol_type(self) -> str:
        return PROTOCOL_TYPE

    def group_protocols(self) -> list[tuple[str, bytes]]:
        with self.lock:
            return list(self.logic.protocols())

    # -- the hooks ---------------------------------------------------------------------------------

    async def _on_join_prepare_async(self, generation: int, member_id: str, timeout_ms: Any = None) -> None:
        with self.lock:
            self.apply(self.logic.prepare_join(self.clock()))

    def _process_join_group_response(self, response: Any, send_time: float) -> Any:
        response = super()._process_join_group_response(response, send_time)
        with self.lock:
            logic = self.logic
            if response.protocol_name == EAGER_PROTOCOL and logic.current_protocol != EAGER_PROTOCOL:
                # LegacyWorker._joined's deviation from Java: the group went eager, so stop
                # everything before any eager assignment can hand our work to someone else.
                stopped, logic.running = logic.running, EMPTY
                self.apply(Reaction(stop=stopped))
        return response

    def _perform_assignment(self, leader_id: str, protocol: str, members: Any) -> dict[str, bytes]:
        raw: Mapping[str, bytes] = {m.member_id: bytes(m.metadata) for m in members}
        with self.lock:
            return self.logic.perform_assignment(
                leader_id, protocol, raw, self._generation.generation_id, self.clock()
            )

    async def _on_join_complete_async(
        self, generation: int, member_id: str, protocol: str, member_assignment_bytes: bytes
    ) -> None:
        with self.lock:
            reaction = self.logic.on_join_complete(
                generation, member_id, protocol, bytes(member_assignment_bytes), self.clock()
            )
            self.apply(reaction)
            if reaction.rejoin:
                self.request_rejoin()

    # -- helpers -----------------------------------------------------------------------------------

    def apply(self, reaction: Reaction) -> None:
        """Report a Reaction (call with the lock held): releases, runs, then the new generation."""
        emit_items(self.on_event, reaction.stop, reaction.start)
        if reaction.generation_changed:
            self.on_event("epoch", epoch=reaction.generation)
        if reaction.fatal is not None:
            self.on_event("fatal", reason=reaction.fatal)


def _client_configs(logic: LegacyWorker, bootstrap: str, client_id: str) -> dict[str, Any]:
    """kafka-python's settings for the worker's group membership: the same timeouts as ``logic``."""
    heartbeat_interval_ms, session_timeout_ms = logic.heartbeat_interval_ms, logic.session_timeout_ms
    return {
        "bootstrap_servers": [bootstrap],
        "client_id": client_id,
        "group_id": logic.group_id,
        "session_timeout_ms": session_timeout_ms,
        "heartbeat_interval_ms": heartbeat_interval_ms,
        "max_poll_interval_ms": logic.rebalance_timeout_ms,
        "retry_backoff_ms": logic.retry_backoff_ms,
        # the bridge restarts in drills: do not back off for tens of seconds
        "reconnect_backoff_ms": 50,
        "reconnect_backoff_max_ms": max(200, heartbeat_interval_ms),
        "request_timeout_ms": max(session_timeout_ms, 2000),
        "socket_connection_setup_timeout_ms": 1000,
        "socket_connection_setup_timeout_max_ms": max(1000, heartbeat_interval_ms),
    }


class LiveLegacyWorker:
    """A legacy Connect worker process: kafka-python's client, :class:`ConnectWorkerCoordinator`, and
    a driver thread. ``start()`` returns at once; ``stop()`` / ``crash()`` block until it is down."""

    def __init__(
        self,
        bootstrap: str,
        group_id: str,
        url: str,
        mode: Mode,
        on_event: EventSink,
        *,
        clock: Callable[[], int] = monotonic_ms,
        client_id: str = "connect-bridge-legacy-worker",
        **options: Unpack[LegacyWorkerOptions],
    ) -> None:
        self.bootstrap = bootstrap
        self.on_event = on_event
        self.clock = clock
        self.lock = threading.RLock()
        self.logic = LegacyWorker(group_id, url, mode, **options)
        self.heartbeat_interval_ms = self.logic.heartbeat_interval_ms
        self._configs = _client_configs(self.logic, bootstrap, client_id)
        self.client: Any = None
        self.coordinator: ConnectWorkerCoordinator | None = None
        self._thread: threading.Thread | None = None
        self._halt = threading.Event()
        self._graceful = False
        self.error: BaseException | None = None
        self.dead = False
        """Stopped, crashed, or died of a fatal group error."""

    @property
    def running(self) -> Items:
        with self.lock:
            return self.logic.running

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name=f"legacy {self.logic.url}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Graceful stop (``DistributedHerder.halt``): stop all work, then LeaveGroup."""
        if self.dead:
            return
        self.dead = True
        with self.lock:
            reaction = self.logic.shutdown(self.clock())
            emit_items(self.on_event, reaction.stop, EMPTY)
        self._graceful = True
        self._halt.set()
        self._join(timeout_s)

    def crash(self, timeout_s: float = 5.0) -> None:
        """The process dies: no leave; the sockets close."""
        if self.dead:
            return
        self.dead = True
        with self.lock:
            self.logic.running = EMPTY  # the work dies with the process (no events: the runner logs it)
        self._halt.set()
        self._join(timeout_s)

    def on_config_change(self) -> None:
        """The config topic changed (the herder's config listener)."""
        with self.lock:
            if self.dead:
                return
            reaction = self.logic.on_config_change()
            emit_items(self.on_event, reaction.stop, EMPTY)

    def _join(self, timeout_s: float) -> None:
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("%s: driver thread did not stop within %.1fs", self.logic.url, timeout_s)

    # ------------------------------------------------------------------ the driver thread
    def _main(self) -> None:
        try:
            self._connect()
            self._loop()
        except BaseException as exc:
            if not self._halt.is_set():
                log.exception("%s: worker died", self.logic.url)
                self.error = exc
                self._die(f"{type(exc).__name__}: {exc}")
        finally:
            self._shutdown()

    def _connect(self) -> None:
        while not self._halt.is_set():
            client = KafkaNetClient(**self._configs)
            client._net.start()
            try:
                client._manager.bootstrap(max(1000, self.heartbeat_interval_ms))
            except Errors.KafkaError as exc:
                log.info("%s: bootstrap failed (%s); retrying", self.logic.url, exc)
                client.close()
                self._halt.wait(self.heartbeat_interval_ms / 1000)
                continue
            configs = dict(self._configs, api_version=client._manager.broker_version)
            self.client = client
            self.coordinator = ConnectWorkerCoordinator(
                client, self.logic, self.on_event, self.lock, self.clock, **configs
            )
            return

    def _loop(self) -> None:
        coord = self.coordinator
        if coord is None:
            return
        step_s = min(0.05, self.heartbeat_interval_ms / 4000)
        unknown_since: int | None = None
        while not self._halt.is_set():
            now = self.clock()
            with self.lock:
                if self.logic.fatal_error is not None:
                    return
                if self.logic.needs_rejoin(now) and not coord.need_rejoin():
                    coord.request_rejoin()
            if coord.coordinator_unknown():
                unknown_since = now if unknown_since is None else unknown_since
                if now - unknown_since >= self.heartbeat_interval_ms:
                    with self.lock:
                        lost = self.logic.coordinator_lost(now)
                        if lost.stop:
                            log.info("%s: coordinator unreachable; revoking everything", self.logic.url)
                        coord.apply(lost)
                    coord.request_rejoin()
                    unknown_since = now
            else:
                unknown_since = None
            if coord.need_rejoin() or coord.coordinator_unknown():
                try:
                    coord.ensure_active_group(timeout_ms=self.heartbeat_interval_ms)
                except (Errors.KafkaConnectionError, Errors.NodeNotReadyError, Errors.RetriableError) as exc:
                    log.debug("%s: join attempt failed: %s", self.logic.url, exc)
            try:
                coord.poll_heartbeat()
            except Errors.KafkaError as exc:
                log.info("%s: heartbeat loop failed: %s", self.logic.url, exc)
            self._halt.wait(step_s)

    def _die(self, reason: str) -> None:
        with self.lock:
            if self.dead:
                return
            self.dead = True
            reaction = self.logic._die(reason) if self.logic.fatal_error is None else Reaction()
            emit_items(self.on_event, reaction.stop, EMPTY)
            self.on_event("fatal", reason=reason)

    def _shutdown(self) -> None:
        coord, client = self.coordinator, self.client
        try:
            if coord is not None:
                coord._close_heartbeat()
                if self._graceful:
                    try:
                        coord.maybe_leave_group(reason="the worker is stopping", timeout_ms=2000)
                    except Exception as exc:
                        log.info("%s: LeaveGroup failed: %s", self.logic.url, exc)
        finally:
            if client is not None:
                try:
                    client.close()
                except Exception as exc:
                    log.debug("%s: close failed: %s", self.logic.url, exc)
