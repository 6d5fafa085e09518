"""The reference new-protocol worker's reaction to an Assignment with an error (CONFIG_MISMATCH)."""

from __future__ import annotations

from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.api import HeartbeatResponse, MemberAssignment
from connect_bridge.state.connect.legacy_members import CONFIG_MISMATCH
from connect_bridge.workers.new_protocol import NewProtocolWorker

A0, A1, B0 = ConnectorTaskId("a", 0), ConnectorTaskId("a", 1), ConnectorTaskId("b", 0)


def answer(worker: NewProtocolWorker, work: frozenset, *, error: int = 0, offset: int = 10):
    resp = HeartbeatResponse(
        member_id="m1",
        member_epoch=2,
        heartbeat_interval_ms=3_000,
        assignment=MemberAssignment(work, "m1", "http://m1:8083/", offset, error=error),
    )
    return worker.on_response(resp)


def running_worker(work: frozenset) -> NewProtocolWorker:
    worker = NewProtocolWorker(group_id="g", url="http://w:8083/", member_id="m1", config_offset=10)
    worker.heartbeat_request(0)
    answer(worker, work)
    assert worker.running == work
    worker.heartbeat_request(3_000)  # a partial one
    return worker


def test_a_config_mismatch_starts_nothing_and_asks_again_with_a_full_heartbeat() -> None:
    worker = running_worker(frozenset({A0}))
    reaction = answer(worker, frozenset({A0, A1}), error=CONFIG_MISMATCH, offset=11)
    assert reaction.start == frozenset() and reaction.stop == frozenset()
    assert worker.running == frozenset({A0}) and worker.config_offset == 11
    again = worker.heartbeat_request(6_000)
    assert again.is_full and again.config_offset == 11 and again.owned == frozenset({A0})
    # The view caught up: the same work without error is started.
    reaction = answer(worker, frozenset({A0, A1}), offset=11)
    assert reaction.start == frozenset({A1}) and worker.running == frozenset({A0, A1})


def test_a_config_mismatch_still_revokes() -> None:
    """Stopping is always safe: what the assignment no longer has is stopped and acknowledged."""
    worker = running_worker(frozenset({A0, B0}))
    reaction = answer(worker, frozenset({A0, A1}), error=CONFIG_MISMATCH, offset=11)
    assert reaction.stop == frozenset({B0}) and reaction.start == frozenset()
    assert reaction.heartbeat_now and worker.running == frozenset({A0})


def test_workers_ahead_of_the_view_start_nothing_until_it_catches_up() -> None:
    """Against the engine: a worker that has read offset 11 joins while the view is at 10."""
    from connect_bridge.state.config import CoordinatorConfig
    from connect_bridge.state.coordinator import GroupCoordinator
    from connect_bridge.state.model import ConfigView

    coord = GroupCoordinator(CoordinatorConfig())
    coord.set_config("g", ConfigView.of(10, {"a": 2}), 0)
    w1 = NewProtocolWorker(group_id="g", url="http://w1:8083/", member_id="w1", config_offset=10)
    w2 = NewProtocolWorker(group_id="g", url="http://w2:8083/", member_id="w2", config_offset=11)
    now = 0

    def round_trip(worker: NewProtocolWorker):
        return worker.on_response(coord.connect_heartbeat(worker.heartbeat_request(now), now))

    for _ in range(3):
        round_trip(w1)
    assert len(w1.running) == 3  # a, a-0, a-1
    before = w1.running
    for _ in range(6):
        now += 3_000
        for w in (w1, w2):
            assert not round_trip(w).start, "nothing starts while the view is behind"
    assert w1.running <= before and w2.running == frozenset()
    assert w1.config_offset == 11  # told the highest offset, read as far
    coord.set_config("g", ConfigView.of(11, {"a": 2}), now)
    for _ in range(6):
        now += 3_000
        for w in (w1, w2):
            round_trip(w)
    assert w1.running | w2.running == frozenset(
        {ConnectorTaskId("a", -1), ConnectorTaskId("a", 0), ConnectorTaskId("a", 1)}
    )
    assert not w1.running & w2.running and w2.running
