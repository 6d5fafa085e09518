"""The coordinator runtime: the one way into the coordinator, for every caller in the bridge.

Kafka's ``CoordinatorRuntime`` runs each write operation on a shard, appends the records the
operation returned, completes its response once they are committed and schedules its timers. Here
the request handlers (``handlers``), the steady-heartbeat path (``fastpath``), the timer loop, the
high-availability hand-overs (``ha.partitions``) and adoption (``adoption.wiring``) all change the
coordinator through :meth:`CoordinatorRuntime.run` (or :meth:`submit` then :meth:`settle`; the
steady-heartbeat path :meth:`submit_steady` then :meth:`settle_steady`, which build no result for a
step that changed nothing but a session): a step is a function of the coordinator, and its effects
come back as one value (``state.result.CoordinatorResult``), which the runtime applies:

* the records go to the committer (a response computed now waits until they are durable);
* parked JoinGroup/SyncGroup answers the step released are completed;
* the metrics of the groups the step touched are refreshed;
* the timer loop is woken when the step armed a timer earlier than the one it sleeps until.

Before a group request reaches the coordinator it passes one check chain, in Kafka's order:
loaded, authorized, coordinated here (the partition owned and the lease fresh with several bridges,
not the upstream's under adoption), within the request limits (:meth:`CoordinatorRuntime.call`).
The steady-heartbeat path asks the same questions of a request it answers
(:meth:`CoordinatorRuntime.answers_here`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from kafka.protocol.api_message import ApiMessage

from connect_bridge.bridge.coordination.api_table import Answer, Client, GroupCall
from connect_bridge.bridge.coordination.decisions import log_decisions
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.acls import Operation
from connect_bridge.bridge.security.authorization import GroupAuthorizer
from connect_bridge.bridge.stores.config_source import view_behind
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.adoption.records import OwnershipState
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.limits import RequestLimits, oversize
from connect_bridge.state.model import ANONYMOUS
from connect_bridge.state.records import Record
from connect_bridge.state.result import CoordinatorResult

__all__ = ["CoordinatorRuntime", "Gate", "Parked", "RecordCommitter"]

log = logging.getLogger("connect_bridge.server")
R = TypeVar("R")
Q = TypeVar("Q")

_LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
_INVALID = int(ErrorCode.INVALID_REQUEST)
_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)


class RecordCommitter(Protocol):
    """What the runtime needs of ``committer.Committer``."""

    @property
    def written(self) -> int: ...
    def submit(self, records: Sequence[Record]) -> int: ...
    async def durable(self, seq: int) -> None: ...


class Gate(Protocol):
    """Several bridges (``ha.partitions.HighAvailability``): whether this bridge answers for a group."""

    def refusal(self, group_id: str) -> int | None:
        """The error code a request of ``group_id`` gets here, None when this bridge answers it."""
        ...


@dataclass(slots=True)
class Parked:
    """The token of a JoinGroup/SyncGroup the classic protocol answers later: the future its
    connection waits on, and how the engine's answer becomes the wire's."""

    future: asyncio.Future[ApiMessage]
    version: int
    to_wire: Callable[[Any, int], ApiMessage]


class CoordinatorRuntime:
    """Runs coordinator steps and applies their results (module docstring)."""

    def __init__(
        self,
        coordinator: GroupCoordinator,
        committer: RecordCommitter,
        clock: Callable[[], int],
        *,
        fatal: Callable[[str], None] | None = None,
        metrics: Metrics | None = None,
        authorizer: GroupAuthorizer | None = None,
        limits: RequestLimits | None = None,
        gate: Gate | None = None,
        view_behind: Callable[[], None] | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.committer = committer
        self.clock = clock
        self.fatal = fatal
        """Stops the bridge (records that cannot be written: memory and the store differ)."""
        self.metrics = metrics
        self.authorizer = authorizer
        """``authorization.enabled``: READ for every group call (Kafka's mapping); None lets everyone in."""
        self.limits = limits if limits is not None else RequestLimits()
        self.gate = gate
        self.view_behind = view_behind
        """Called when a step's records name a config offset the group's view has not reached."""
        self.loaded = False
        """Whether the saved state is replayed: group requests are answered only then."""
        self._groups_observed = False
        """Whether the metrics have seen every group once (after loading)."""
        self._timer_wake = asyncio.Event()
        self._sleeping_until: int | None = None
        """The deadline the timer loop sleeps until (None: not sleeping on one)."""

    # ------------------------------------------------------------------ checks
    def may(self, client: Client | None, operation: Operation, group_id: str) -> bool:
        """Authorization of one group (always yes without an authorizer)."""
        if self.authorizer is None:
            return True
        principal, host = (client.principal, client.host) if client is not None else (ANONYMOUS, "")
        # ClientHost is Kafka's "/1.2.3.4"; ACL hosts are bare addresses.
        return self.authorizer.allowed(principal, host.lstrip("/"), operation, group_id)

    def refusal(self, group_id: str) -> int | None:
        """Several bridges: the error code of a group this bridge does not coordinate now
        (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS), None when it does or with one bridge."""
        return self.gate.refusal(group_id) if self.gate is not None else None

    def answers_here(self, group_id: str) -> bool:
        """Whether a request of ``group_id`` may be answered from the coordinator now, as far as
        the steady-heartbeat path can tell (the full path answers every other case properly): this
        bridge coordinates the group (``refusal``), and the group is not the upstream's under
        adoption (``relaying``/``released``; a ``releasing`` group's members are sent back upstream
        one by one by the full path, ``adoption.wiring``)."""
        phase = self.coordinator.ownership.state(group_id)
        if phase is not None and phase is not OwnershipState.ADOPTED:
            return False
        gate = self.gate  # :meth:`refusal`, without the call (once per steady heartbeat)
        return gate is None or gate.refusal(group_id) is None

    def fast_path_open(self, principal: str) -> bool:
        """The steady-heartbeat cache keys on request bytes alone: it serves anonymous clients of a
        bridge without authorization. Anything else takes the full path, where the group is
        authorized and the request carries the connection's principal (member ownership)."""
        return self.loaded and self.authorizer is None and principal == ANONYMOUS

    # ------------------------------------------------------------------ the handlers' entry
    def call(self, api: GroupCall[Any, Any], body: ApiMessage, version: int, client: Client) -> Answer:
        """One group request: the check chain (loaded, request valid, authorized, coordinated
        here, the member's principal, within the limits), then the step. A wire response, or a
        future of one (a parked JoinGroup/SyncGroup)."""
        if not self.loaded:
            return api.to_wire(api.error(_LOADING, "the coordinator is loading its state"), version)
        try:
            engine_req = api.from_wire(body, version, client)
        except CodecError as exc:
            return api.to_wire(api.error(_INVALID, str(exc)), version)
        if not self.may(client, Operation.READ, engine_req.group_id):
            # Kafka answers every group call without READ on the group this way, before any lookup.
            return api.to_wire(api.error(_DENIED, None), version)
        refused = self.refusal(engine_req.group_id)
        if refused is not None:  # Kafka's answer from a broker that does not coordinate the group
            return api.to_wire(api.error(refused, None), version)
        if client.principal != ANONYMOUS:
            engine_req = replace(engine_req, principal=client.principal)  # the member's owner
        too_large = oversize(engine_req, self.limits)
        if too_large is not None:  # refused before anything changes (issue 11.1, 11.2)
            return api.to_wire(api.error(_INVALID, too_large), version)
        parked: Parked | None = None
        if api.parks:
            parked = Parked(asyncio.get_running_loop().create_future(), version, api.to_wire)
            engine_req = replace(engine_req, token=parked)
        now = self.clock()
        response = self.run(lambda coordinator: api.call(coordinator, engine_req, now))
        if response is None:
            assert parked is not None
            return parked.future
        return api.to_wire(response, version)

    # ------------------------------------------------------------------ steps
    def run(self, step: Callable[[GroupCoordinator], R]) -> R:
        """Run ``step`` on the coordinator and apply its result; the step's return value."""
        result = self.submit(step)
        self.settle(result)
        return result.response

    def submit(self, step: Callable[[GroupCoordinator], R]) -> CoordinatorResult[R]:
        """Run ``step`` and hand its records to the committer: the part of applying a result an
        answer must wait for (it is written once they are durable). :meth:`settle` does the rest."""
        coordinator = self.coordinator
        return self._commit(coordinator.result(step(coordinator)))

    def submit_steady(
        self,
        steady: Callable[[GroupCoordinator, Q, int], R | None],
        full: Callable[[GroupCoordinator, Q, int], R],
        request: Q,
    ) -> tuple[R, CoordinatorResult[R] | None]:
        """:meth:`submit` for the steady-heartbeat path: ``steady(coordinator, request, now)``, or
        ``full`` (the same arguments) when that answers None. The step's response, and its result
        only when it has effects to apply (records, released answers, a classic state change, or
        metrics that have not seen every group yet); None for a steady heartbeat, which only renews
        a session: building and settling a result for it would cost more than the step itself.
        Either way :meth:`settle_steady` it once the answer is written."""
        coordinator = self.coordinator
        now = self.clock()
        response = steady(coordinator, request, now)
        if response is None:
            response = full(coordinator, request, now)
        if coordinator.has_effects() or (self.metrics is not None and not self._groups_observed):
            return response, self._commit(coordinator.result(response))
        return response, None

    def settle_steady(self, result: CoordinatorResult[Any] | None) -> None:
        """:meth:`settle` of what :meth:`submit_steady` gave: without a result, only the timer loop
        is woken if the step armed a deadline earlier than the one it sleeps until (a heartbeat
        can end another member's first session sooner: ``connect.membership.heard_from``)."""
        if result is not None:
            self.settle(result)
        else:
            self._wake_for(self.coordinator.next_deadline())

    def _commit(self, result: CoordinatorResult[R]) -> CoordinatorResult[R]:
        """Hand ``result``'s records to the committer (and note what they reveal); ``result``."""
        coordinator = self.coordinator
        records = result.records
        try:
            self.committer.submit(records)
        except Exception as exc:
            # Memory has changed and the records cannot be written: never answer from that state.
            # Request limits (state/limits.py) keep every record storable, so this is a bug or a disk.
            if self.fatal is not None:
                self.fatal(f"cannot write {len(records)} records: {exc}")
            raise
        if records:
            log_decisions(records)
            if self.view_behind is not None and view_behind(records, coordinator.view):
                self.view_behind()
        return result

    def settle(self, result: CoordinatorResult[Any]) -> None:
        """The part of applying a result no answer waits for: parked answers completed, the
        metrics of the groups it touched, the timer loop woken for an earlier deadline."""
        for token, response in result.released:
            if isinstance(token, Parked) and not token.future.done():
                token.future.set_result(token.to_wire(response, token.version))
        if self.metrics is not None and (
            result.records or result.classic_changed or not self._groups_observed
        ):
            self._observe_groups(result)
        self._wake_for(result.next_deadline)

    def _wake_for(self, deadline: int | None) -> None:
        """Wake the timer loop when ``deadline`` (the coordinator's next, after a step) is earlier
        than the one it sleeps until: only then, or it would sleep past it."""
        if deadline is not None and (self._sleeping_until is None or deadline < self._sleeping_until):
            self._timer_wake.set()

    async def durable(self) -> None:
        """Wait until everything handed to the committer so far is durable."""
        await self.committer.durable(self.committer.written)

    def load(self, records: list[Record]) -> set[str]:
        """Replay the saved state (the whole store, or one partition's with several bridges) and
        serve from it; the group ids the records touched."""
        now = self.clock()
        result = self.submit(lambda coordinator: coordinator.replay(records, now))
        self.loaded = True  # before settling: the metrics then see every group once
        self.settle(result)
        return result.response

    # ------------------------------------------------------------------ timers
    async def timer_loop(self) -> None:
        """Fire the coordinator's timers when they are due, for ever (the server supervises it)."""
        while True:
            deadline = self.coordinator.next_deadline()
            timeout = None if deadline is None else max(0.0, (deadline - self.clock()) / 1000)
            self._timer_wake.clear()
            self._sleeping_until = deadline
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_wake.wait(), timeout)
            self._sleeping_until = None
            now = self.clock()
            deadline = self.coordinator.next_deadline()
            if deadline is not None and deadline <= now:
                self.run(lambda coordinator: coordinator.advance(now))  # noqa: B023 (run at once)

    # ------------------------------------------------------------------ metrics
    def _observe_groups(self, result: CoordinatorResult[Any]) -> None:
        """Refresh the metrics of the groups the result touched (records carry their group id):
        per step, work in proportion to what changed, not to how many groups exist (issue 11.6).
        A touched group that no longer exists has its series dropped. Once loaded, the first call
        observes every group (replay leaves no records behind), setting each one's baseline."""
        assert self.metrics is not None
        if self._groups_observed:
            touched = result.touched_groups
        elif self.loaded:
            self._groups_observed = True
            touched = {*self.coordinator.groups, *(r.group_id for r in result.records)}
        else:
            return
        self.metrics.observe_groups(touched, self.coordinator.metrics_view)
