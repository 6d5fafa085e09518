"""What a Connect worker's cooperative assignor remembers, and the answer that makes it forget.

Connect's ``IncrementalCooperativeAssignor`` keeps the assignment it last computed as leader and
uses it in its next leader round only if the worker's last *completed* generation is the one it
led: ``performTaskAssignment`` compares its ``previousGenerationId``, set whenever it computes, with
``WorkerCoordinator.lastCompletedGenerationId``, set only in ``onJoinComplete``. Work in that
memory that no member reports running is taken for lost and waits
``scheduled.rebalance.max.delay.ms`` before it is dealt again.

Two places hand a legacy worker from a coordination whose leader rounds did not decide anything to
one where its leader round does, and there that memory is wrong:

* a hand-back (``state.adoption.handback``): the worker led a bridge generation whose assignment the bridge
  replaced by revocations, then leads upstream;
* a connect group that emptied and became a fresh classic group (``classic.join``): inside the
  connect group the bridge elected a legacy worker Connect leader in each of its JoinGroups, ran
  its assignor on the bridge's ownership and ignored what it sent (docs/legacy-workers.md, "The
  Connect leader"); work the bridge held for a departed member ran nowhere in that view, so the
  assignor dealt it out and remembered that. Leading the fresh group's first generation, it would
  take that work for lost and delay it a second time after the bridge's own hold.

:func:`unsynced_leader_round` is the answer for both: a generation of the worker's own that it leads
and never completes, after which its assignor forgets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from connect_bridge.codecs.connect_protocol import CONNECT_PROTOCOL_NAMES, decode_subscription
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.classic.api import JoinGroupMember, JoinGroupRequest, JoinGroupResponse


@dataclass(slots=True)
class ForgetRounds:
    """The unsynced leader rounds a classic group that replaced an emptied connect group answers
    first JoinGroups with (``classic.join.forget_round``). Soft: after a bridge restart nobody
    gets one (a worker's assignor may then remember the connect era once more)."""

    generation: int
    """The rounds' generation: one past the replaced connect group's epoch, so above every
    generation a worker completed there."""
    done: set[str] = field(default_factory=set)
    """The workers (:func:`unsynced_round_key`) already answered with a round."""

    def answered(self, key: str) -> None:
        """The worker ``key`` was answered with its round: it gets no second one."""
        self.done.add(key)


def worker_url(protocols: Iterable[tuple[str, bytes]]) -> str:
    """The REST url a Connect JoinGroup's subscriptions carry ("" when none can be read)."""
    for name, metadata in protocols:
        if name not in CONNECT_PROTOCOL_NAMES or not metadata:
            continue
        try:
            return decode_subscription(metadata).url
        except CodecError:
            continue
    return ""


def worker_key(protocols: Iterable[tuple[str, bytes]], instance_id: str | None) -> str:
    """Who a worker is across its member ids, for :func:`unsynced_leader_round` (one round per
    worker): its REST url, else its instance id ("" when neither is known: no round for it)."""
    return worker_url(protocols) or (f"instance:{instance_id}" if instance_id else "")


def unsynced_round_key(req: JoinGroupRequest) -> str:
    """Who a JoinGroup comes from (:func:`worker_key`)."""
    return worker_key(req.protocols, req.group_instance_id)


def unsynced_leader_round(last_generation: int, req: JoinGroupRequest, tag: str) -> JoinGroupResponse | None:
    """The answer that makes a Connect worker's cooperative assignor forget what it last computed.

    The worker is made the leader of a generation of its own, ``last_generation + 1``, which must
    lie above every generation the worker may have completed (so above its last completed one); it
    never completes it: the worker is no member of the group, so its SyncGroup is answered
    UNKNOWN_MEMBER_ID and it joins again with an empty id. Its assignor then remembers a generation
    it did not complete, and clears that memory in its next leader round.

    Only for a JoinGroup that offers a cooperative protocol (the eager assignor remembers nothing);
    ``None`` otherwise. Whether it reports work or not: the worker receives no assignment from the
    round, so what it runs does not change. The member id is the request's, or for an empty one a
    name made from ``tag`` and the generation (never added to any group)."""
    offered = [(name, data) for name, data in req.protocols if CONNECT_PROTOCOL_NAMES.get(name, 0) > 0]
    if not offered:
        return None
    name, metadata = offered[0]
    generation = last_generation + 1
    member_id = req.member_id or f"{req.client_id or 'connect'}-{tag}-{generation}"
    return JoinGroupResponse(
        generation_id=generation,
        protocol_type=req.protocol_type,
        protocol_name=name,
        leader=member_id,
        member_id=member_id,
        members=(JoinGroupMember(member_id, req.group_instance_id, metadata),),
    )


__all__ = ["ForgetRounds", "unsynced_leader_round", "unsynced_round_key", "worker_key", "worker_url"]
