"""The ownership phases of adopted groups (docs/adoption.md): adoption, phase changes and the
hand-back, as one object the coordinator holds.

:class:`OwnershipPhases` owns the ownership table and the hand-back's soft state. It reaches the
coordinator's groups only through what its constructor is given (the groups mapping, the record
queue, and the coordinator's flush and after-step callbacks and classic-group factory), and writes
only through records like every other step. The coordinator calls its public methods; neither
reads the other's private attributes (``tests/test_engine_reshape.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from connect_bridge.state.adoption.build import AdoptionError, adoption_records
from connect_bridge.state.adoption.handback import (
    earlier_incarnations,
    hand_back_hold_ms,
    unsynced_leader_round,
    unsynced_round_key,
)
from connect_bridge.state.adoption.observation import UpstreamGeneration
from connect_bridge.state.adoption.records import OwnershipState, OwnershipTable
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic import group as classic_steps
from connect_bridge.state.classic.group import ClassicGroup, ClassicGroupState, ClassicMember
from connect_bridge.state.classic.leader_memory import worker_key
from connect_bridge.state.classic.rebalance import prepare_rebalance
from connect_bridge.state.classic.records import Protocols
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect import group as connect_steps
from connect_bridge.state.connect.group import ConnectGroup
from connect_bridge.state.holds import timer_removal_hold_ms
from connect_bridge.state.migration.conversion import may_run_any
from connect_bridge.state.records import Record

_PREPARING = ClassicGroupState.PREPARING_REBALANCE

Groups = dict[str, ConnectGroup | ClassicGroup]
"""The coordinator's groups by id: read here, and an entry removed when a group is retired."""
QueueRecords = Callable[[Iterable[Record]], None]
"""Queues records for the store after those already queued (the coordinator's record queue)."""
FlushGroup = Callable[[ConnectGroup | ClassicGroup], None]
"""Moves a group's queued effects (records, released answers) into the coordinator's queues."""
AfterStep = Callable[[str, int], None]
"""The coordinator's end of a step of a group at ``now_ms``: effects flushed, a pending conversion
run, a dead or empty unpersisted classic group dropped; for a classic group it first calls
:meth:`OwnershipPhases.rejoin_after_early_join`."""
NewClassicGroup = Callable[[str], ClassicGroup]
"""Creates an empty classic group on the coordinator's config and timers, entered in the groups
mapping and marked changed."""


class OwnershipPhases:
    """Adoption, ownership phase changes and the hand-back, on the groups the coordinator hands in.

    Holds :attr:`table` (which side coordinates each adopted or released group, durable through
    its records) and the hand-back's soft state (lost at a restart; each says what follows)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        groups: Groups,
        *,
        queue_records: QueueRecords,
        flush: FlushGroup,
        after: AfterStep,
        new_classic: NewClassicGroup,
    ) -> None:
        self._config = config
        self._groups = groups
        self._queue_records = queue_records
        self._flush = flush
        self._after = after
        self._new_classic = new_classic
        self.table = OwnershipTable()
        """Which side coordinates each adopted or released group (docs/adoption.md)."""
        self._release_rejoins: set[str] = set()
        """``releasing`` groups whose join phase began before ``releasing`` was written (see
        :meth:`rebalance_to_release`)."""
        self._unsynced_rounds: dict[str, set[str]] = {}
        """``releasing`` group -> the workers (``handback.unsynced_round_key``) already answered with
        an unsynced leader round in this hand-back. Soft: after a restart a worker gets one more
        round."""
        self._released_rounds: dict[str, set[tuple[str, int]]] = {}
        """``released`` group -> (member id, generation) of the unsynced leader rounds answered since
        ``released``, so that their SyncGroup and Heartbeat are answered here (UNKNOWN_MEMBER_ID),
        not relayed upstream, which would fence a static worker whose instance id it knows. Soft:
        after a restart they go upstream, which answers a dynamic member UNKNOWN_MEMBER_ID as well."""

    # ------------------------------------------------------------------ adoption (docs/adoption.md)
    def adopt(
        self, gen: UpstreamGeneration, now_ms: int, principals: dict[str, str] | None = None
    ) -> list[Record]:
        """Continue the upstream generation ``gen`` as the bridge's own classic group.

        The records (group snapshot, then ownership ``adopted``) are queued for the store and
        applied exactly as replay applies them, so the group is Stable with fresh sessions from
        ``now_ms``. Raises :class:`AdoptionError` if the generation is incomplete or the bridge
        already runs a group with that id that has members (an empty connect group, which a config
        view creates, is retired with its tombstones first), and
        ``OwnershipError`` if the group's phase does not allow adoption."""
        existing = self._groups.get(gen.group_id)
        if existing is not None and existing.members:
            raise AdoptionError(f"the bridge already coordinates a live group {gen.group_id}")
        if isinstance(existing, ConnectGroup):
            seq = existing.metadata.member_seq
        else:
            seq = existing.member_seq if isinstance(existing, ClassicGroup) else 0
        records = adoption_records(gen, now_ms, principals=principals, member_seq=seq)
        self.table.change(gen.group_id, OwnershipState.ADOPTED, gen.generation_id, now_ms)
        if isinstance(existing, ConnectGroup):
            # The empty connect group a config view made (``set_config``) while the group lived
            # upstream: retired with its tombstones, as a downgrade retires one.
            connect_steps.tombstone_all(existing)
            self._flush(existing)
            del self._groups[gen.group_id]
            existing = None
        # A fresh group (an empty classic one the bridge had is replaced, its timers stale), loaded
        # below as replay loads it; no step marks it changed, the factory does.
        group = self._new_classic(gen.group_id)
        group.apply(records[0])
        classic_steps.rebuild_after_load(group, now_ms)
        self._queue_records(records)
        return records

    def adopt_emptied(self, group_id: str, generation_id: int, now_ms: int) -> Record:
        """Take over a relayed group whose upstream group has emptied (docs/adoption.md, "An
        emptied upstream group"): only ``adopted`` is written (``generation_id``: the last upstream
        generation observed, -1 if none), with no group snapshot, since no member is left to carry
        over. A group the bridge already holds stays as it is (the empty connect group a config view
        makes); one with members is refused (:class:`AdoptionError`), as by :meth:`adopt`."""
        existing = self._groups.get(group_id)
        if existing is not None and existing.members:
            raise AdoptionError(f"the bridge already coordinates a live group {group_id}")
        return self.change_ownership(group_id, OwnershipState.ADOPTED, generation_id, now_ms)

    def change_ownership(self, group_id: str, state: OwnershipState, generation: int, now_ms: int) -> Record:
        """Record a phase change other than adoption (relaying, releasing, released); raises
        ``OwnershipError`` for a change the phases do not allow."""
        record = self.table.change(group_id, state, generation, now_ms)
        self._queue_records((record,))
        return record

    # ------------------------------------------------------------------ hand-back (docs/adoption.md)
    def start_release(self, group_id: str, now_ms: int) -> Record:
        """Write ``releasing`` for an adopted group. Only a classic group (or none, or an empty one)
        can be handed back: upstream's coordinator would not know the bridge's connect-protocol
        members, so a group with new-protocol members is refused (downgrade it first,
        docs/migration.md). Raises :class:`AdoptionError` or ``OwnershipError``."""
        group = self._groups.get(group_id)
        if isinstance(group, ConnectGroup) and group.members:
            new_protocol = sum(1 for m in group.members.values() if not m.metadata.is_legacy)
            detail = (
                f"{new_protocol} member(s) use the new protocol: downgrade them first "
                "(connect-bridge docs migration)"
                if new_protocol
                else "the bridge holds a departed worker's work in a connect group; retry once the hold ends"
            )
            raise AdoptionError(f"group {group_id} cannot be handed back yet: {detail}")
        generation = group.generation_id if isinstance(group, ClassicGroup) else -1
        if isinstance(group, ConnectGroup):
            generation = group.group_epoch  # a legacy member's generation is its member epoch
        owned = self.table.get(group_id)
        if generation < 0 and owned is not None:
            generation = owned.generation
        record = self.change_ownership(group_id, OwnershipState.RELEASING, generation, now_ms)
        self._unsynced_rounds.pop(group_id, None)
        if isinstance(group, ClassicGroup):
            self.rebalance_to_release(group, now_ms)
        elif isinstance(group, ConnectGroup):
            self._hold_emptied_hand_back(group, now_ms)
        return record

    def _hold_emptied_hand_back(self, group: ConnectGroup, now_ms: int) -> None:
        """An emptied connect group is handed back: its members left or were removed by timers,
        and the work it still holds for those a timer removed may still run on them. The hand-back
        is not finished before those holds end (upstream's leader would deal that work at once),
        and each such worker gets an unsynced leader round at its next JoinGroup: as a legacy
        member of the connect group it was elected Connect leader and ran its assignor on the
        bridge's view, and leading upstream it would take the work held then for lost and delay it
        a second time (fleet drill 98903296711928)."""
        pending = [h for h in group.metadata.held if h.deadline_ms > now_ms]
        if not pending:
            return
        record = self.table.hold(group.group_id, max(h.deadline_ms for h in pending))
        if record is not None:
            self._queue_records((record,))
        self._owe_rounds(group.group_id, {h.url or worker_key((), h.instance_id) for h in pending} - {""})

    def rebalance_to_release(self, group: ClassicGroup, now_ms: int) -> None:
        """Every member of a ``releasing`` group rejoins (REBALANCE_IN_PROGRESS on its next
        Heartbeat); the generation that completes revokes everything (``state.adoption.handback``). At the
        start of a hand-back, and again after a restart during one: a loaded group is Stable in its
        last generation, which revoked nothing if the bridge died before completing the revoking one.

        A group already PreparingRebalance has members whose JoinGroup was taken before
        ``releasing`` was written, so none of them was sent away, and one with nothing to revoke
        (eager, or an empty allocation) would complete that generation and never join again: the
        group would never empty. So that join phase is followed by another one at once
        (:meth:`rejoin_after_early_join`), whose JoinGroups all come while ``releasing``."""
        if not group.members:
            return
        if group.state is _PREPARING:
            self._release_rejoins.add(group.group_id)
            return
        prepare_rebalance(group, now_ms)
        self._after(group.group_id, now_ms)

    def rejoin_pending(self, group_id: str) -> bool:
        """Whether a join phase of the group that began before ``releasing`` is yet to be followed
        by another (:meth:`rejoin_after_early_join` has work to do after the group's next step)."""
        return group_id in self._release_rejoins

    def rejoin_after_early_join(self, group: ClassicGroup, now_ms: int) -> None:
        """Called by the coordinator after each step of a classic group: once a join phase that began before
        ``releasing`` has ended, start another rebalance (its SyncGroups are answered
        REBALANCE_IN_PROGRESS, so every member joins again and is sent away or revoked)."""
        if group.group_id not in self._release_rejoins or group.state is _PREPARING:
            return
        self._release_rejoins.discard(group.group_id)
        if self.releasing(group.group_id) and group.members and group.state is not ClassicGroupState.DEAD:
            prepare_rebalance(group, now_ms)

    def release_member(self, group_id: str, member_id: str, now_ms: int) -> bool:
        """Hand-back: remove one member of a ``releasing`` group (its request is then answered
        UNKNOWN_MEMBER_ID and it joins again with an empty id, which is relayed upstream). Removed
        directly from the classic group: none of the leader-leaving or expiry holds apply, since
        no generation of the bridge's group completes any more. False if it is not a member."""
        group = self._groups.get(group_id)
        if not self.releasing(group_id) or not isinstance(group, ClassicGroup):
            return False
        member = group.members.get(member_id)
        if member is None:
            return False
        leaving = capi.LeavingMember(member_id, member.group_instance_id, "hand-back to the upstream")
        classic_steps.leave(group, capi.LeaveGroupRequest(group_id, (leaving,), member.principal), now_ms)
        self._after(group_id, now_ms)
        return True

    def hold_hand_back(self, classic: ClassicGroup, removed: list[ClassicMember], now_ms: int) -> None:
        """Members of a ``releasing`` group are about to be removed without having stopped their
        work (a timer, or an administrative LeaveGroup): the hand-back is not finished before the
        longest of their holds has passed (``handback.hand_back_hold_ms``; for a member loaded while
        it may still wait on a JoinGroup at the previous owner, ``holds.timer_removal_hold_ms``).
        Written at once as the group's ownership record, so a restart keeps it. Members that run
        nothing need no hold."""
        if not self.releasing(classic.group_id):
            return
        delay = self._config.scheduled_rebalance_max_delay_ms
        holds = [
            max(
                hand_back_hold_ms(classic.protocol_name, m.session_timeout_ms, delay),
                timer_removal_hold_ms(m.session_timeout_ms, now_ms, m.waits_elsewhere_until_ms),
            )
            for m in removed
            if may_run_any(classic, m)
        ]
        record = self.table.hold(classic.group_id, now_ms + max(holds)) if holds else None
        if record is not None:
            self._queue_records((record,))
        if classic.protocol_name != capi.EAGER_PROTOCOL:
            # Each may have led a bridge generation: it forgets before it leads upstream.
            owned = self.table.get(classic.group_id)
            assert owned is not None
            keys = {worker_key(m.protocols, m.group_instance_id) for m in removed} - {""}
            self._owe_rounds(classic.group_id, set(owned.rounds_due) | keys)

    def _owe_rounds(self, group_id: str, due: set[str]) -> None:
        record = self.table.rounds(group_id, due)
        if record is not None:
            self._queue_records((record,))

    def hand_back_hold_until(self, group_id: str) -> int:
        """The time before which a ``releasing`` group's hand-back is not finished (-1: none)."""
        owned = self.table.get(group_id)
        return owned.hold_until_ms if owned is not None else -1

    def release_returned(
        self, group_id: str, protocols: Protocols, instance_id: str | None, now_ms: int
    ) -> list[str]:
        """Hand-back: a JoinGroup with an empty member id (held until ``released``) that reports
        nothing comes from a worker that has stopped; members of the ``releasing`` group that are
        earlier incarnations of it (``handback.earlier_incarnations``) are removed like
        :meth:`release_member`, with no hold. The member ids removed."""
        group = self._groups.get(group_id)
        if not self.releasing(group_id) or not isinstance(group, ClassicGroup):
            return []
        stale = [m.member_id for m in earlier_incarnations(group, protocols, instance_id)]
        for member_id in stale:
            self.release_member(group_id, member_id, now_ms)
        return stale

    def unsynced_round_due(self, req: capi.JoinGroupRequest) -> bool:
        """Whether a JoinGroup of a ``releasing`` group gets :meth:`unsynced_round` as its answer: it
        names no member of the bridge's group (sent away, unknown or empty id), offers a cooperative
        protocol, and its worker has not had such a round in this hand-back.
        Such a JoinGroup is answered here, not held for upstream (docs/adoption.md "Hand-back")."""
        return self._unsynced_round_answer(req) is not None

    def unsynced_round(self, req: capi.JoinGroupRequest) -> capi.JoinGroupResponse | None:
        """The answer of :meth:`unsynced_round_due` (``handback.unsynced_leader_round``), noting that
        the worker had its round (for a worker whose round is owed, by a record); ``None`` when none
        is due."""
        answer = self._unsynced_round_answer(req)
        if answer is None:
            return None
        key = unsynced_round_key(req)
        owned = self.table.get(req.group_id)
        if owned is not None and key in owned.rounds_due:
            self._owe_rounds(req.group_id, set(owned.rounds_due) - {key})
        if self.releasing(req.group_id):
            self._unsynced_rounds.setdefault(req.group_id, set()).add(key)
        else:
            self._released_rounds.setdefault(req.group_id, set()).add(
                (answer.member_id, answer.generation_id)
            )
        return answer

    def _unsynced_round_answer(self, req: capi.JoinGroupRequest) -> capi.JoinGroupResponse | None:
        owned = self.table.get(req.group_id)
        key = unsynced_round_key(req)
        if owned is None or not key:
            return None
        group = self._groups.get(req.group_id)
        if owned.state is OwnershipState.RELEASING and isinstance(group, ClassicGroup):
            if req.member_id in group.members:
                return None
            if group.protocol_name == capi.EAGER_PROTOCOL:
                return None  # the group's last generation was eager: no worker's assignor remembers it
            if key in self._unsynced_rounds.get(req.group_id, ()):
                return None
            return unsynced_leader_round(group.generation_id, req)
        if owned.state in (OwnershipState.RELEASING, OwnershipState.RELEASED) and key in owned.rounds_due:
            # A worker removed by a timer whose round is owed (an emptied connect group handed
            # back, or a worker back after the hand-back finished): its JoinGroup would otherwise
            # reach upstream remembering the bridge's generations.
            return unsynced_leader_round(owned.generation, req)
        return None

    def from_unsynced_round(self, group_id: str, member_id: str, generation_id: int) -> bool:
        """Whether a SyncGroup or Heartbeat of a ``releasing`` group comes from an unsynced leader
        round (:meth:`unsynced_round`): its member id is no member of the bridge's classic group and
        its generation is past the group's, which only that round hands out. It is answered
        UNKNOWN_MEMBER_ID, as the round intends, before the static-member check: a static worker
        whose instance id still names a member of the group (its earlier incarnation, or any
        member not yet sent away) would otherwise get FENCED_INSTANCE_ID, which a Java worker
        takes as fatal (``FencedInstanceIdException``: the herder exits and the worker is gone).
        ``released``: the request comes from a round answered since (``_released_rounds``)."""
        if self.table.state(group_id) is OwnershipState.RELEASED:
            return (member_id, generation_id) in self._released_rounds.get(group_id, ())
        if not self.releasing(group_id):
            return False
        group = self._groups.get(group_id)
        return (
            isinstance(group, ClassicGroup)
            and member_id not in group.members
            and generation_id > group.generation_id
        )

    def finish_release(self, group_id: str, now_ms: int) -> bool:
        """Hand-back: when the ``releasing`` group has no member left and no removed member's hold
        is pending, write its tombstone, then ``released`` (a cut between the two replays as
        ``releasing`` with no group, which the wiring finishes). False while members remain or
        before the hold ends: until ``released`` no worker reaches the upstream coordinator, whose
        leader would deal a removed zombie's work at once."""
        if self.table.state(group_id) is not OwnershipState.RELEASING:
            return False
        group = self._groups.get(group_id)
        if group is not None and group.members:
            return False
        if now_ms < self.hand_back_hold_until(group_id):
            return False
        owned = self.table.get(group_id)
        generation = owned.generation if owned is not None else -1
        rounds_due = owned.rounds_due if owned is not None else ()
        if isinstance(group, ClassicGroup):
            # Above every generation a worker completed here (an owed round is numbered past it).
            generation = max(generation, group.generation_id)
            classic_steps.delete(group, now_ms)
            self._queue_records(group.drain_records())
            group.drain_responses()
        elif isinstance(group, ConnectGroup):
            connect_steps.tombstone_all(group)
            self._flush(group)
        self._groups.pop(group_id, None)
        self._unsynced_rounds.pop(group_id, None)
        self._released_rounds.pop(group_id, None)
        record = self.table.change(group_id, OwnershipState.RELEASED, generation, now_ms, rounds_due)
        self._queue_records((record,))
        return True

    def releasing(self, group_id: str) -> bool:
        """Whether the group is being handed back (``releasing``)."""
        return self.table.state(group_id) is OwnershipState.RELEASING

    def drop_unowned(self, now_ms: int, group_ids: set[str]) -> None:
        """After a replay: a classic group whose ownership says the upstream coordinates it is a
        leftover of a cut between an adoption's two records, or of a hand-back that wrote
        ``released`` before its tombstone; delete it so exactly one coordinator answers."""
        for gid, group in [(gid, g) for gid, g in self._groups.items() if gid in group_ids]:
            state = self.table.state(gid)
            if state is None or state.bridge_coordinates or not isinstance(group, ClassicGroup):
                continue
            classic_steps.delete(group, now_ms)
            self._queue_records(group.drain_records())
            group.drain_responses()
            del self._groups[gid]
