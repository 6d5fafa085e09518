"""What the bridge learns about a group the upstream coordinator runs, and when it may take it over.

Adoption (issue 16, docs/adoption.md) puts the bridge in front of a running Connect cluster: the
group stays coordinated upstream while workers are repointed one by one, the bridge relaying their
JoinGroup/SyncGroup/Heartbeat/LeaveGroup. An :class:`Observation` is fed those relayed exchanges
(``bridge.relay_observer`` decodes them) and builds the group's current generation as the upstream
coordinator formed it: the leader's JoinGroup response lists every member with its metadata, each
member's own JoinGroup request carries its full protocol list and timeouts, the leader's SyncGroup
request carries every member's assignment and each member's SyncGroup response the assignment it
actually received.

:func:`takeover_ready` is the takeover condition: only at a generation boundary, and only when the
upstream's own DescribeGroups (not a guess) shows the same members, all of them connected through
the bridge. Otherwise it says why not, for describe and metrics.

Pure (docs/architecture.md, "Layers"): the observation is fed typed values and ``now_ms``; nothing
here reads a clock or a socket.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.classic.records import Protocols
from connect_bridge.state.classic.state import ClassicDescribedGroup

_ENDS_GENERATION = frozenset(
    {ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID}
)
"""Answers to a member of the current generation that mean the generation is over (a rebalance
started, or the member was removed, after which Kafka rebalances)."""


@dataclass(frozen=True, slots=True)
class UpstreamMember:
    """One member of an upstream generation, as far as the relayed traffic showed it."""

    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = -1
    session_timeout_ms: int = -1
    protocols: Protocols = ()
    """Every protocol of the member's own JoinGroup request when it was seen (``joined``), else
    only the elected protocol with the metadata the leader's JoinGroup response listed."""
    joined: bool = False
    """The member's own JoinGroup of this generation was relayed (its full metadata is known)."""
    assignment: bytes | None = None
    """What the member received in SyncGroup (or, before that, what the leader sent for it)."""
    synced: bool = False
    """The member's own SyncGroup response of this generation (error 0) was relayed."""


@dataclass(frozen=True, slots=True)
class UpstreamGeneration:
    """A generation of the upstream group: what the bridge needs to continue it as its own."""

    group_id: str
    generation_id: int
    protocol_type: str
    protocol_name: str | None
    leader_id: str
    members: tuple[UpstreamMember, ...]
    """In the leader's JoinGroup response order (Kafka's member order), then any member seen only
    through its own exchanges."""

    def member(self, member_id: str) -> UpstreamMember | None:
        return next((m for m in self.members if m.member_id == member_id), None)

    @property
    def member_ids(self) -> frozenset[str]:
        return frozenset(m.member_id for m in self.members)


@dataclass(slots=True)
class Observation:
    """The relayed exchanges of one group, folded into its current upstream generation.

    Each ``on_*`` method takes the typed request, the response the upstream gave it and ``now_ms``.
    A response of an older generation than the one being built is ignored; one of a newer generation
    starts the next. The observation is soft state: a bridge restart starts a new one, and the
    takeover condition then waits for the next complete generation.
    """

    group_id: str
    generation_id: int = -1
    protocol_type: str = ""
    protocol_name: str | None = None
    leader_id: str = ""
    ending: str | None = None
    """Why the current generation is over (a rebalance began, a member left or was removed)."""
    last_seen_ms: int = -1
    last_describe: ClassicDescribedGroup | None = None
    """The latest upstream DescribeGroups answer for the group that passed through the relay."""
    _members: dict[str, UpstreamMember] = field(default_factory=dict)
    _roster: tuple[str, ...] = ()
    """Member ids of the leader's JoinGroup response, in its order (empty until it is seen)."""
    _rejoin_asked: set[str] = field(default_factory=set)
    """Members whose next Heartbeat the relay answers REBALANCE_IN_PROGRESS itself (:meth:`ask_rejoin`)."""
    _asked_in: int | None = None
    """The generation id when the last round of asks started (one round per generation)."""

    # ------------------------------------------------------------------ feeding
    def on_join(self, req: capi.JoinGroupRequest, resp: capi.JoinGroupResponse, now_ms: int) -> None:
        """A JoinGroup answered by the upstream. Errors (MEMBER_ID_REQUIRED and the like) show no
        generation; an answer in a newer generation starts it."""
        self.last_seen_ms = now_ms
        if resp.error_code != ErrorCode.NONE or not resp.member_id:
            return
        if not self._enter(resp.generation_id):
            return
        self.protocol_type = resp.protocol_type or req.protocol_type
        self.protocol_name = resp.protocol_name
        self.leader_id = resp.leader
        member = self._member(resp.member_id)
        self._members[resp.member_id] = replace(
            member,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocols=req.protocols,
            joined=True,
        )
        if resp.members:
            self._roster = tuple(m.member_id for m in resp.members)
            for listed in resp.members:
                known = self._member(listed.member_id)
                if not known.joined:
                    elected = ((resp.protocol_name or "", listed.metadata),)
                    known = replace(known, group_instance_id=listed.group_instance_id, protocols=elected)
                self._members[listed.member_id] = known

    def on_sync(self, req: capi.SyncGroupRequest, resp: capi.SyncGroupResponse, now_ms: int) -> None:
        """A SyncGroup answered by the upstream: the leader's carries every member's assignment, and
        every member's answer the assignment it received."""
        self.last_seen_ms = now_ms
        if req.generation_id != self.generation_id:
            return
        if resp.error_code != ErrorCode.NONE:
            self._maybe_end(req.member_id, resp.error_code, "SyncGroup")
            return
        for member_id, assignment in req.assignments:
            known = self._members.get(member_id)  # Kafka ignores assignments of non-members
            if known is not None and not known.synced:
                self._members[member_id] = replace(known, assignment=assignment)
        member = self._member(req.member_id)
        self._members[req.member_id] = replace(member, assignment=resp.assignment, synced=True)

    def on_heartbeat(self, req: capi.HeartbeatRequest, resp: capi.HeartbeatResponse, now_ms: int) -> None:
        """REBALANCE_IN_PROGRESS (or the member being unknown or of an old generation) to a member
        of the current generation: the generation is ending."""
        self.last_seen_ms = now_ms
        if req.generation_id == self.generation_id:
            self._maybe_end(req.member_id, resp.error_code, "Heartbeat")

    def on_leave(self, req: capi.LeaveGroupRequest, resp: capi.LeaveGroupResponse, now_ms: int) -> None:
        """A member of the generation that left ends it (Kafka rebalances the group)."""
        self.last_seen_ms = now_ms
        if resp.error_code != ErrorCode.NONE:
            return
        errors = {member_id: code for member_id, _, code in resp.members}
        for leaving in req.members:
            if leaving.member_id in self._members and errors.get(leaving.member_id, 0) == ErrorCode.NONE:
                self.ending = f"member {leaving.member_id} left"
                self._members.pop(leaving.member_id)

    def on_describe(self, described: ClassicDescribedGroup, now_ms: int) -> None:
        """An upstream DescribeGroups answer for this group (kept for describe; the takeover check
        takes its own, fresh one)."""
        self.last_seen_ms = now_ms
        self.last_describe = described

    def _enter(self, generation_id: int) -> bool:
        """Make ``generation_id`` the current one if it is not older; False for a stale answer."""
        if generation_id < self.generation_id:
            return False
        if generation_id > self.generation_id:
            self.generation_id = generation_id
            self.ending = None
            self._members = {}
            self._roster = ()
            self._rejoin_asked = set()  # a rebalance came: what was asked for is under way
        return True

    # ------------------------------------------------------------------ asking for a rebalance
    def ask_rejoin(self, members: frozenset[str]) -> bool:
        """Start a round of asks (``TakeoverCheck.rejoin``): the next Heartbeat of each of
        ``members`` is answered REBALANCE_IN_PROGRESS by the relay, so the workers rejoin and the
        upstream rebalances through the bridge (the leader's JoinGroup starts the rebalance; a
        follower's alone is answered at once). At most one round per generation, so a generation
        the relay still cannot see whole is not rebalanced over and over. True when a round
        started."""
        if not members or self._asked_in == self.generation_id:
            return False
        self._asked_in = self.generation_id
        self._rejoin_asked = set(members)
        return True

    def answers_rejoin(self, req: capi.HeartbeatRequest) -> bool:
        """Whether the relay answers this Heartbeat REBALANCE_IN_PROGRESS itself, instead of
        relaying it (once per member asked)."""
        if req.member_id not in self._rejoin_asked:
            return False
        self._rejoin_asked.discard(req.member_id)
        return True

    def _member(self, member_id: str) -> UpstreamMember:
        return self._members.get(member_id) or UpstreamMember(member_id)

    def _maybe_end(self, member_id: str, error_code: int, api: str) -> None:
        if member_id in self._members and error_code in _ENDS_GENERATION:
            self.ending = f"{api} of {member_id} answered {ErrorCode(error_code).name}"

    # ------------------------------------------------------------------ reading
    def generation(self) -> UpstreamGeneration | None:
        """The current generation as seen so far (None before any JoinGroup answer)."""
        if self.generation_id < 0:
            return None
        order = list(self._roster) + [m for m in self._members if m not in self._roster]
        return UpstreamGeneration(
            self.group_id,
            self.generation_id,
            self.protocol_type,
            self.protocol_name,
            self.leader_id,
            tuple(self._members[m] for m in order if m in self._members),
        )


@dataclass(frozen=True, slots=True)
class TakeoverCheck:
    """The takeover condition's answer: ``ready``, or ``reason`` why not (for describe/metrics)."""

    ready: bool
    reason: str
    behind: int = 0
    """Upstream members connected through the bridge ("members behind the bridge N of M")."""
    total: int = 0
    generation: UpstreamGeneration | None = None
    """The generation to take over when ``ready``."""
    emptied: bool = False
    """Ready because the upstream group has emptied (Empty or Dead, no member left): there is
    nothing to hand over, so the bridge coordinates the group from now on with no member, as it
    does a watched group that is Empty upstream at its first JoinGroup (``generation`` is None)."""
    rejoin: frozenset[str] = frozenset()
    """Not ready only because the relay has not seen the upstream's current generation whole,
    while the upstream is Stable and every one of its members is behind the bridge: nothing will
    show it but a rebalance, which no worker has a reason to start (after a bridge restart the
    observation starts empty, and a stable group may never rebalance again). These members (the
    upstream's) are to be asked to rejoin (``Observation.ask_rejoin``)."""


_EMPTIED = frozenset({ClassicGroupState.EMPTY.value, ClassicGroupState.DEAD.value})
"""Upstream states of a group without members (Kafka describes an unknown group as Dead)."""


def upstream_emptied(upstream_describe: ClassicDescribedGroup | None) -> bool:
    """True when the upstream's own DescribeGroups answers, without error, a group with no member
    (Empty, or Dead for a group it no longer knows)."""
    return (
        upstream_describe is not None
        and upstream_describe.error_code == ErrorCode.NONE
        and upstream_describe.state in _EMPTIED
        and not upstream_describe.members
    )


def takeover_ready(
    observation: Observation,
    behind_bridge: set[str] | frozenset[str],
    upstream_describe: ClassicDescribedGroup | None,
) -> TakeoverCheck:
    """True only at a generation boundary the upstream itself confirms.

    ``behind_bridge``: member ids with a live connection through the bridge.
    ``upstream_describe``: the upstream's DescribeGroups answer for the group, fetched for this
    check. Ready when: a generation was observed and is not ending; the upstream says Stable with
    the observed protocol and exactly the observed members (and, where it shows them, the same
    assignments: DescribeGroups does not carry the generation id, so this is how a stale or
    newer generation is told apart); every member is behind the bridge; each member's own
    JoinGroup (its full metadata) and its own SyncGroup answer (its assignment) of the generation
    were seen.

    Also ready (``emptied``) when the upstream group has no member left (every worker stopped, or
    left and came back as a new-protocol worker, which the upstream cannot coordinate): no
    generation remains to take over, and without this a group relayed to an empty upstream group
    would wait for a classic member that may never come.
    """
    if upstream_emptied(upstream_describe):
        assert upstream_describe is not None
        reason = f"ready: the upstream group is {upstream_describe.state}, nothing to hand over"
        return TakeoverCheck(True, reason, emptied=True)
    rejoin = _unseen_but_behind(upstream_describe, behind_bridge)
    gen = observation.generation()
    if gen is None:
        return TakeoverCheck(False, "no generation of the group has been observed yet", rejoin=rejoin)
    members = gen.member_ids
    behind = len(members & set(behind_bridge))
    total = len(members)

    def no(reason: str, rejoin: frozenset[str] = frozenset()) -> TakeoverCheck:
        return TakeoverCheck(False, reason, behind, total, rejoin=rejoin)

    if observation.ending is not None:
        # (Stable upstream with every member behind the bridge: the end was not followed by a
        # generation the relay saw, or it was no end; only a rebalance through the relay tells.)
        return no(f"generation {gen.generation_id} is ending: {observation.ending}", rejoin)
    disagreement = _upstream_disagreement(gen, upstream_describe)
    if disagreement is not None:
        return no(disagreement, rejoin)
    if behind < total:
        outside = sorted(members - set(behind_bridge))
        return no(f"{behind} of {total} members behind the bridge; not yet: {outside}")
    assert upstream_describe is not None  # no disagreement: the upstream answered
    unseen = _unseen_step(gen, {m.member_id: m.assignment for m in upstream_describe.members})
    if unseen is not None:
        return no(unseen, rejoin)
    return TakeoverCheck(True, f"ready: generation {gen.generation_id}, {total} members", behind, total, gen)


def _unseen_but_behind(
    upstream_describe: ClassicDescribedGroup | None, behind_bridge: set[str] | frozenset[str]
) -> frozenset[str]:
    """The upstream's members, when its DescribeGroups answers Stable without error and every one
    of them is behind the bridge (else nothing: a rebalance asked for now would not run whole
    through the relay, or one is under way)."""
    if (
        upstream_describe is None
        or upstream_describe.error_code != ErrorCode.NONE
        or upstream_describe.state != ClassicGroupState.STABLE.value
        or not upstream_describe.members
    ):
        return frozenset()
    described = frozenset(m.member_id for m in upstream_describe.members)
    return described if described <= set(behind_bridge) else frozenset()


def _upstream_disagreement(
    gen: UpstreamGeneration, upstream_describe: ClassicDescribedGroup | None
) -> str | None:
    """Why the upstream's DescribeGroups answer does not confirm ``gen`` as its stable generation
    (None: it does). DescribeGroups carries no generation id, so state, protocol and members are
    what tell a stale or newer generation apart."""
    if upstream_describe is None:
        return "no upstream DescribeGroups answer"
    if upstream_describe.error_code != ErrorCode.NONE:
        return f"upstream DescribeGroups answered error {upstream_describe.error_code}"
    if upstream_describe.state != ClassicGroupState.STABLE.value:
        return f"upstream group is {upstream_describe.state}, not Stable"
    if (upstream_describe.protocol_type, upstream_describe.protocol_data) != (
        gen.protocol_type,
        gen.protocol_name or "",
    ):
        return (
            f"upstream runs protocol {upstream_describe.protocol_type}/{upstream_describe.protocol_data}, "
            f"generation {gen.generation_id} was {gen.protocol_type}/{gen.protocol_name}"
        )
    described = {m.member_id for m in upstream_describe.members}
    if described != gen.member_ids:
        missing = sorted(gen.member_ids - described)
        unknown = sorted(described - gen.member_ids)
        return (
            f"upstream members differ from generation {gen.generation_id}: "
            f"not upstream {missing}, not observed {unknown}"
        )
    return None


def _unseen_step(gen: UpstreamGeneration, shown: dict[str, bytes]) -> str | None:
    """Which member's JoinGroup or SyncGroup answer of ``gen`` the bridge has not seen (None: all
    were): without both it cannot serve the member its metadata and assignment. ``shown``: the
    assignment the upstream shows per member, where it shows one, must be the one seen."""
    for m in gen.members:
        if not m.joined:
            return f"JoinGroup of {m.member_id} in generation {gen.generation_id} was not seen"
        if not m.synced or m.assignment is None:
            return f"{m.member_id} has not received its assignment of generation {gen.generation_id}"
        if shown[m.member_id] and shown[m.member_id] != m.assignment:
            return f"upstream assignment of {m.member_id} differs from generation {gen.generation_id}'s"
    return None


def upstream_conflict(
    adopted: frozenset[str] | set[str], upstream_describe: ClassicDescribedGroup
) -> str | None:
    """After a takeover, whether the upstream group has a member the bridge did not take over.

    The adopted members linger upstream until they leave or their session expires there (Kafka then
    rebalances the upstream group to Empty): that is the expected drain, not a conflict. A member id
    outside ``adopted`` is a worker that joined the upstream coordinator directly (it was not
    repointed), forming a second group with the same id that the bridge cannot stop: the caller
    reports it loudly (log, metric, describe).
    """
    if upstream_describe.error_code != ErrorCode.NONE:
        return None
    strangers = sorted(m.member_id for m in upstream_describe.members if m.member_id not in adopted)
    if not strangers:
        return None
    return (
        f"group {upstream_describe.group_id} has members upstream that the bridge did not adopt: "
        f"{strangers} (upstream state {upstream_describe.state}); they may run the same work twice"
    )


__all__ = [
    "Observation",
    "TakeoverCheck",
    "UpstreamGeneration",
    "UpstreamMember",
    "takeover_ready",
    "upstream_conflict",
    "upstream_emptied",
]
