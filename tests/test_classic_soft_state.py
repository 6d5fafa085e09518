"""Classic-group state that used to live only in memory between two persisted generations, and is
now in the ``CLASSIC_GROUP`` record, so a bridge restarted at that moment (records replayed into a
fresh coordinator, time as an argument) carries on as if it had not restarted:

* the extra rebalance a few seconds after a group leaves eager (docs/classic-group.md deviation 11);
* a static member replaced during a rebalance (docs/known-issues.md): its new member id.
"""

from __future__ import annotations

from dataclasses import replace

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic.api import JoinGroupRequest
from connect_bridge.state.classic.group import ClassicGroup, ClassicGroupState
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record, RecordType
from test_classic_group import (
    COMPATIBLE,
    NONE,
    REBALANCE,
    SESSION,
    SESSIONED,
    G,
    Harness,
    _leave_eager,
    finish_initial_rebalance,
)

S = ClassicGroupState


def restarted(records: list[Record], config, now_ms: int) -> tuple[GroupCoordinator, ClassicGroup]:
    """A fresh coordinator that replayed ``records`` (through their wire form) at ``now_ms``."""
    coord = GroupCoordinator(config)
    coord.replay([decode_record(*encode_record(r)) for r in records], now_ms)
    group = coord.groups[G]
    assert isinstance(group, ClassicGroup)
    return coord, group


def test_the_extra_rebalance_after_leaving_eager_survives_a_restart() -> None:
    """Generation 2 (sessioned, after an eager generation 1) is Stable at T: the extra round is due
    at T + 3 s. The bridge restarts at T + 1 s; the round still starts at T + 3 s (before, the timer
    was lost with the process and the group stayed Stable: Connect's stalled tasks ran nowhere)."""
    h = Harness()
    _, sessioned = _leave_eager(h)
    stable_at = h.now
    due = stable_at + h.config.classic_cooperative_switch_rebalance_ms  # type: ignore[operator]
    coord, group = restarted(h.records, h.config, stable_at + 1_000)
    assert group.state is S.STABLE and group.generation_id == 2
    coord.advance(due - 1)
    assert group.state is S.STABLE
    coord.advance(due)
    assert group.state is S.PREPARING_REBALANCE
    beat = coord.classic_heartbeat(_heartbeat(sessioned, 2), due)
    assert beat.error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_a_restart_after_the_extra_round_started_runs_it_again_and_only_once() -> None:
    """The round started but its generation was not persisted before the restart: the loaded
    group is the generation before it, so the round is due again (at once); the generation it
    completes is persisted without it, and no further round follows."""
    h = Harness()
    _, sessioned = _leave_eager(h)
    h.at(h.now + 3_000)
    assert h.group.state is S.PREPARING_REBALANCE
    coord, group = restarted(h.records, h.config, h.now + 500)
    coord.advance(h.now + 500)
    assert group.state is S.PREPARING_REBALANCE
    now = h.now + 600
    coord.classic_join(_join(sessioned, SESSIONED), now)  # answered at once: the only member
    coord.advance(now)
    assert group.state is S.COMPLETING_REBALANCE and group.generation_id == 3
    from connect_bridge.state.classic.api import SyncGroupRequest

    sync = SyncGroupRequest(G, sessioned, 3, assignments=((sessioned, b"a"),), api_version=4)
    answer = coord.classic_sync(sync, now)
    assert answer is not None and answer.error_code == NONE and group.state is S.STABLE
    snapshots = [r.value for r in coord.drain_records() if r.type is RecordType.CLASSIC_GROUP]
    assert snapshots[-1].extra_rebalance_at_ms == -1  # type: ignore[union-attr]
    for later in (now + 3_000, now + 6_000, now + 9_000):  # past when a second round would be due
        coord.advance(later)
        assert coord.classic_heartbeat(_heartbeat(sessioned, 3), later).error_code == NONE
    assert group.state is S.STABLE and group.generation_id == 3


def _join(member_id: str, protocols, instance: str | None = None, token: object = None) -> JoinGroupRequest:
    return JoinGroupRequest(
        G,
        member_id,
        "connect",
        protocols,
        session_timeout_ms=SESSION,
        rebalance_timeout_ms=REBALANCE,
        group_instance_id=instance,
        client_id="worker",
        token=token,
    )


def _heartbeat(member_id: str, generation: int, instance: str | None = None):
    from connect_bridge.state.classic.api import HeartbeatRequest

    return HeartbeatRequest(G, member_id, generation, instance)


def static_generation(h: Harness) -> tuple[str, str]:
    """Static workers a (leader) and b form generation 1, Stable and persisted."""
    for instance in ("a", "b"):
        assert h.join("", SESSIONED, group_instance_id=instance, token=("join", instance)) is None
    finish_initial_rebalance(h)
    a, b = h.group.static_member_id("a"), h.group.static_member_id("b")
    assert a is not None and b is not None and h.group.leader_id == a
    assert h.sync(b, 1, group_instance_id="b", token=("sync", "b")) is None
    done = h.sync(a, 1, {a: b"a", b: b"b"}, group_instance_id="a")
    assert done is not None and done.error_code == NONE and h.group.state is S.STABLE
    return a, b


def test_a_static_replacement_during_a_rebalance_survives_a_restart() -> None:
    """b starts a rebalance (new metadata); a's process restarts meanwhile and joins with its
    instance id: it is a under a new member id, which the completed join phase tells it. The bridge
    restarts before the leader's SyncGroup persists generation 2. Before, the log still had a's old
    id, and the new process's requests were FENCED_INSTANCE_ID (fatal for a Java worker); now the
    replacement is in the log, and the new process simply rejoins the loaded group."""
    h = Harness()
    old_a, b = static_generation(h)
    assert h.join(b, COMPATIBLE, group_instance_id="b", token="b2") is None
    assert h.group.state is S.PREPARING_REBALANCE
    # a's new process: the last to join, so the join phase completes and answers it at once
    told = h.join("", SESSIONED, group_instance_id="a", token="a2")
    new_a = h.group.static_member_id("a")
    assert new_a is not None and new_a != old_a
    assert told is not None
    assert told.error_code == NONE and told.member_id == new_a  # type: ignore[attr-defined]
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.generation_id == 2

    coord, group = restarted(h.records, h.config, h.now + 100)
    assert group.static_member_id("a") == new_a and old_a not in group.members
    assert group.generation_id == 1  # the rebalance itself is soft state, as in Kafka
    now = h.now + 200
    beat = coord.classic_heartbeat(_heartbeat(new_a, 2, "a"), now)
    assert beat.error_code != ErrorCode.FENCED_INSTANCE_ID
    joined = coord.classic_join(_join(new_a, SESSIONED, "a", token="a3"), now)
    assert joined is None or joined.error_code != ErrorCode.FENCED_INSTANCE_ID
    b_joined = coord.classic_join(_join(b, COMPATIBLE, "b", token="b3"), now)
    assert b_joined is not None and b_joined.error_code == NONE  # the last to join: answered at once
    coord.advance(now)
    answers = dict(coord.drain_responses())
    assert answers["a3"].error_code == NONE and answers["a3"].member_id == new_a  # type: ignore[attr-defined]
    assert group.generation_id == 2 and group.state is S.COMPLETING_REBALANCE


def test_the_replacement_record_keeps_the_member_id_counter() -> None:
    """Ids handed out since the last generation was persisted are not handed out again after a
    restart: the replacement record carries the current counter."""
    h = Harness()
    static_generation(h)
    h.join(h.group.static_member_id("b"), COMPATIBLE, group_instance_id="b", token="b2")  # type: ignore[arg-type]
    h.join("", SESSIONED, group_instance_id="a", token="a2")
    last = [r.value for r in h.records if r.type is RecordType.CLASSIC_GROUP][-1]
    assert last.member_seq == h.group.member_seq  # type: ignore[union-attr]
    assert replace(last, members=()).generation == 1  # type: ignore[type-var]
