"""Random operation sequences against the engine: safety holds at every step and records replay exactly."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import ConfigView
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.workers.new_protocol import NewProtocolWorker

G = "g"
WORKERS = ("w0", "w1", "w2", "w3", "w4")

op = st.one_of(
    st.tuples(st.just("heartbeat"), st.sampled_from(WORKERS)),
    st.tuples(st.just("start"), st.sampled_from(WORKERS)),
    st.tuples(st.just("stop"), st.sampled_from(WORKERS)),
    st.tuples(st.just("crash"), st.sampled_from(WORKERS)),
    st.tuples(st.just("advance"), st.integers(min_value=1, max_value=20_000)),
    st.tuples(st.just("config"), st.dictionaries(st.sampled_from("ABCD"), st.integers(0, 4), max_size=4)),
)


class Harness:
    def __init__(self, delay: int) -> None:
        self.coord = GroupCoordinator(
            CoordinatorConfig(session_timeout_ms=10_000, scheduled_rebalance_max_delay_ms=delay)
        )
        self.now = 0
        self.offset = 0
        self.coord.set_config(G, ConfigView.of(0, {"A": 2, "B": 1}), 0)
        self.workers: dict[str, NewProtocolWorker] = {}
        self.records = self.coord.drain_records()

    def heartbeat(self, name: str) -> None:
        worker = self.workers.get(name)
        if worker is None:
            return
        resp = self.coord.connect_heartbeat(worker.heartbeat_request(self.now), self.now)
        reaction = worker.on_response(resp)
        if reaction.heartbeat_now:
            worker.on_response(self.coord.connect_heartbeat(worker.heartbeat_request(self.now), self.now))

    def apply(self, operation: tuple) -> None:
        kind, arg = operation
        if kind == "heartbeat":
            self.heartbeat(arg)
        elif kind == "start" and arg not in self.workers:
            self.workers[arg] = NewProtocolWorker(
                G, f"http://{arg}/", rebalance_timeout_ms=30_000, session_timeout_ms=10_000
            )
            self.heartbeat(arg)
        elif kind == "stop" and arg in self.workers:
            self.coord.connect_heartbeat(self.workers.pop(arg).leave_request(), self.now)
        elif kind == "crash":
            self.workers.pop(arg, None)
        elif kind == "advance":
            # Nobody heartbeats meanwhile (a partition): workers fence themselves when their session
            # must have expired, before the coordinator acts on the expiry at the same instant.
            target = self.now + arg
            while (deadline := self.coord.next_deadline()) is not None and deadline <= target:
                self.now = max(self.now, deadline)
                self.expire_sessions()
                self.coord.advance(self.now)
            self.now = target
            self.expire_sessions()
        elif kind == "config":
            self.offset += 1
            self.coord.set_config(G, ConfigView.of(self.offset, arg), self.now)
        self.records += self.coord.drain_records()

    def expire_sessions(self) -> None:
        for worker in self.workers.values():
            worker.expire_session(self.now)

    def check_safety(self) -> None:
        seen: dict = {}
        for name, worker in self.workers.items():
            for item in worker.running:
                assert item not in seen, f"{item} runs on {seen[item]} and {name}"
                seen[item] = name
        group = self.coord.groups[G]
        owners = {}
        for mid, member in group.members.items():
            for item in member.current.owned:
                assert item not in owners, f"{item} owned by {owners[item]} and {mid}"
                owners[item] = mid
        assert owners == group.owners


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=60), delay=st.sampled_from([0, 15_000]))
def test_random_operations_stay_exclusive_and_replay_exactly(ops: list[tuple], delay: int) -> None:
    h = Harness(delay)
    for operation in ops:
        h.apply(operation)
        h.check_safety()
    # Replay every record (through its wire encoding) into a fresh coordinator: identical state.
    compacted: dict = {}
    for record in h.records:
        key, value = encode_record(record)
        compacted[key] = decode_record(key, value)
    replayed = GroupCoordinator(h.coord.config)
    replayed.replay([r for r in compacted.values() if not r.is_tombstone], h.now)
    assert replayed.snapshot() == h.coord.snapshot()
    assert replayed.groups[G].owners == h.coord.groups[G].owners


def test_convergence_after_quiet_period() -> None:
    """With live workers heartbeating and no changes, everything configured runs exactly once, balanced."""
    h = Harness(delay=0)
    for name in WORKERS[:3]:
        h.apply(("start", name))
    h.apply(("config", {"A": 4, "B": 3, "C": 2}))
    for _ in range(6):
        for name in WORKERS[:3]:
            h.apply(("heartbeat", name))
    running = [item for w in h.workers.values() for item in w.running]
    assert sorted(running) == sorted(ConfigView.of(0, {"A": 4, "B": 3, "C": 2}).items())
    counts = [sum(1 for i in w.running if not i.is_connector) for w in h.workers.values()]
    assert max(counts) - min(counts) <= 1
