"""The assignment steps of a legacy Connect worker, as small pure pieces.

The leader's step (:class:`ConnectLeader`) is ``WorkerCoordinator.onLeaderElected``: pick the elected
protocol's assignor, hand out empty assignments first on a downgrade to eager (KIP-415), and keep the
``LeaderState`` REST routing needs. The member's step (:func:`apply_assignment`) is the first half of
``onJoinComplete``: what to stop now and the full assignment to report back as the next allocation.
Both are Kafka's ``TargetAssignmentBuilder`` / ``CurrentAssignmentBuilder`` split, Connect flavour;
:class:`~connect_bridge.workers.legacy.LegacyWorker` only sequences them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from connect_bridge.codecs.connect_protocol import CONNECT_PROTOCOL_NAMES, Assignment, Subscription
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.classic.api import NO_GENERATION
from connect_bridge.state.model import EMPTY, ConfigView, Items
from connect_bridge.workers.connect_assignors import NO_ERROR, EagerAssignor, IncrementalCooperativeAssignor
from connect_bridge.workers.errors import LeaderStateMissing
from connect_bridge.workers.legacy_protocol import EAGER_PROTOCOL

__all__ = [
    "ConnectLeader",
    "LeaderAssignment",
    "LeaderStateMissing",
    "apply_assignment",
    "full_assignment",
    "ordered_union",
]


def ordered_union(*parts: Iterable[ConnectorTaskId]) -> list[ConnectorTaskId]:
    """De-duplicated in first-seen order: the wire order of an assignment is Java's, not sorted."""
    return list(dict.fromkeys(item for part in parts for item in part))


def full_assignment(base: Assignment, items: Iterable[ConnectorTaskId]) -> Assignment:
    """``base`` with its assignment replaced by the full set (stale revoked/delay kept, like Java)."""
    return Assignment.build(
        base.error, base.leader, base.leader_url, base.config_offset, items, base.revoked_items, base.delay_ms
    )


def apply_assignment(
    snapshot: Assignment | None, new: Assignment, protocol: str, running: Items
) -> tuple[Items, Assignment]:
    """(the running items to stop now, the new full assignment).

    Eager assignments are complete sets (everything was stopped before joining); cooperative ones
    are ``previous - revoked + delta``, and revoked work stops at once."""
    if protocol != EAGER_PROTOCOL:
        revoked = set(new.revoked_items)
        previous = [] if snapshot is None else [i for i in snapshot.items if i not in revoked]
        return running & revoked, full_assignment(new, ordered_union(new.items, previous))
    return EMPTY, full_assignment(new, ordered_union(new.items))


@dataclass(frozen=True, slots=True)
class LeaderAssignment:
    """What the leader computed for one generation."""

    assignments: dict[str, Assignment]
    version: int
    """The elected protocol's version: the one to encode every assignment at."""
    downgrading: bool
    """The KIP-415 empty round of a downgrade: the leader must rejoin after its SyncGroup."""
    leader_state: dict[ConnectorTaskId, str]
    """``LeaderState``: item -> REST url of its owner once the revocations are done."""


class ConnectLeader:
    """The leader-side assignors and what they remember across generations."""

    def __init__(self, max_delay_ms: int) -> None:
        self.eager = EagerAssignor()
        self.cooperative = IncrementalCooperativeAssignor(max_delay_ms)
        self.led: tuple[int, str, frozenset[str]] = (NO_GENERATION, "", frozenset())
        """(generation, protocol, member ids) of the last assignment this worker computed as leader."""

    def assign(
        self,
        leader_id: str,
        protocol: str,
        subscriptions: Mapping[str, Subscription],
        generation: int,
        now_ms: int,
        config: ConfigView,
        last_completed_generation: int,
        refresh: Callable[[], ConfigView],
    ) -> LeaderAssignment:
        """``onLeaderElected`` after decoding: run the elected protocol's assignor on ``config``
        (the leader's own view, which ``refresh`` may catch up with the members')."""
        version = CONNECT_PROTOCOL_NAMES[protocol]
        downgrading = version == 0 and self._downgrading(generation, subscriptions)
        self.led = (generation, protocol, frozenset(subscriptions))
        if downgrading:
            # KIP-415: on a downgrade to eager the leader first hands out empty assignments, so the
            # cooperative workers (which did not stop their work before joining) stop everything,
            # then a second, regular eager rebalance follows.
            offset = max([config.offset, *(s.config_offset for s in subscriptions.values())])
            leader_url = subscriptions[leader_id].url if leader_id in subscriptions else ""
            empty = Assignment.build(NO_ERROR, leader_id, leader_url, offset, ())
            assignments = dict.fromkeys(subscriptions, empty)
        elif version == 0:
            assignments = self.eager.assign(subscriptions, leader_id, None, config, refresh_config=refresh)
        else:
            assignments = self.cooperative.assign(
                subscriptions,
                leader_id,
                None,
                config,
                generation,
                now_ms,
                last_completed_generation=last_completed_generation,
                refresh_config=refresh,
            )
        leader_state = self._leader_state(subscriptions, assignments, version)
        return LeaderAssignment(assignments, version, downgrading, leader_state)

    def _leader_state(
        self, subscriptions: Mapping[str, Subscription], assignments: Mapping[str, Assignment], version: int
    ) -> dict[ConnectorTaskId, str]:
        """The complete assignment this leader computed, as item -> owner url."""
        if version == 0:
            full = {mid: frozenset(asg.items) for mid, asg in assignments.items()}
        else:
            full = self.cooperative.last_full_assignment
        return {
            item: subscriptions[mid].url
            for mid, items in full.items()
            if mid in subscriptions
            for item in items
        }

    def _downgrading(self, generation: int, members: Mapping[str, Subscription]) -> bool:
        """Whether a member of this eager generation may still run work it did not stop.

        Every member of an eager generation has stopped everything by the time it got that
        generation's JoinGroup response (eager workers before joining, cooperative ones on seeing
        the eager election). So a regular eager assignment is safe only when this leader led the
        previous generation under eager and every member now was a member then.
        """
        led_generation, led_protocol, led_members = self.led
        # The same generation again: a coordinator that elects it in every JoinGroup (connect-bridge
        # does, so the leader has leader state) answers at an unchanged epoch; nothing new joined.
        return not (
            led_generation in (generation - 1, generation)
            and led_protocol == EAGER_PROTOCOL
            and set(members) <= led_members
        )
