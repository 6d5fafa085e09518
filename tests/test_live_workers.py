"""Live worker clients against an in-process bridge (real sockets, real time, short timeouts)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from connect_bridge.bridge.server import BridgeServer, ServerOptions
from connect_bridge.bridge.stores.store import MemoryRecordStore
from connect_bridge.drills.checker import check
from connect_bridge.drills.events import EventLog
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.model import ConfigView
from connect_bridge.workers.live_legacy import LiveLegacyWorker
from connect_bridge.workers.live_new import LiveNewWorker
from polling import eventually

GROUP = "connect-cluster"
SESSION_MS = 3000
HEARTBEAT_MS = 300
VIEW = ConfigView.of(1, {"A": 2, "B": 1})
ALL_ITEMS = VIEW.items()


class Recorder:
    """Thread-safe event collection, stamped like a live drill (ms since start)."""

    def __init__(self) -> None:
        self.log = EventLog()
        self.lock = threading.Lock()
        self.t0 = time.monotonic()

    def sink(self, worker: str) -> Callable[..., None]:
        def on_event(type: str, **fields: Any) -> None:
            assert type != "fatal", fields
            self.emit(type, worker, **fields)

        return on_event

    def emit(self, type: str, worker: str | None = None, **fields: Any) -> None:
        with self.lock:
            t = max(int((time.monotonic() - self.t0) * 1000), self.log._last_t)
            self.log.emit(t, type, worker, **fields)

    def now(self) -> int:
        return int((time.monotonic() - self.t0) * 1000)


@contextlib.asynccontextmanager
async def running_bridge() -> AsyncIterator[BridgeServer]:
    config = CoordinatorConfig(
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        scheduled_rebalance_max_delay_ms=1000,
        classic_initial_rebalance_delay_ms=0,
        classic_min_session_timeout_ms=1000,
    )
    server = BridgeServer(ServerOptions(host="127.0.0.1", port=0, coordinator=config), MemoryRecordStore())
    await server.start()
    server.set_config_view(VIEW)
    try:
        yield server
    finally:
        server.request_stop()
        await server.stop()


async def _in_bridge(body: Callable[[BridgeServer], Any]) -> None:
    async with running_bridge() as bridge:
        await asyncio.wait_for(body(bridge), 30)


async def wait_for(condition: Callable[[], object], timeout_s: float = 8.0) -> None:
    """Poll every 50 ms: the workers under test share the loop (and two cores) with the poller."""
    await eventually(condition, timeout_s, 0.05)


def new_worker(bridge: BridgeServer, name: str, rec: Recorder) -> LiveNewWorker:
    return LiveNewWorker(
        "127.0.0.1",
        bridge.port,
        GROUP,
        f"http://{name}:8083/",
        rec.sink(name),
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        rebalance_timeout_ms=5000,
        client_id=name,
    )


def split_evenly(*running: frozenset) -> bool:
    union = frozenset().union(*running)
    return union == ALL_ITEMS and sum(len(r) for r in running) == len(ALL_ITEMS) and all(running)


def test_two_new_workers_share_the_work() -> None:
    asyncio.run(_in_bridge(_test_two_new_workers_share_the_work))


async def _test_two_new_workers_share_the_work(bridge: BridgeServer) -> None:
    rec = Recorder()
    w1, w2 = new_worker(bridge, "w1", rec), new_worker(bridge, "w2", rec)
    rec.emit("config", None, connectors={"A": 2, "B": 1}, offset=1)
    rec.emit("worker_start", "w1", protocol="new")
    w1.start()
    await wait_for(lambda: w1.running == ALL_ITEMS)
    rec.emit("worker_start", "w2", protocol="new")
    w2.start()
    await wait_for(lambda: split_evenly(w1.running, w2.running))
    assert w1.member_epoch > 0 and w2.member_epoch > 0

    # a graceful stop hands everything to the survivor (after the scheduled delay)
    await w1.stop()
    rec.emit("worker_stop", "w1", protocol="new")
    assert w1.running == frozenset()
    await wait_for(lambda: w2.running == ALL_ITEMS)
    end = rec.now()
    await w2.crash()
    rec.log.drill_end(max(end, rec.log._last_t))
    summary = check(rec.log.events, name="two-new", end_ms=end)
    assert summary.exclusive, summary.to_json()


def test_new_worker_fences_itself_when_the_bridge_vanishes() -> None:
    asyncio.run(_in_bridge(_test_new_worker_fences_itself_when_the_bridge_vanishes))


async def _test_new_worker_fences_itself_when_the_bridge_vanishes(bridge: BridgeServer) -> None:
    rec = Recorder()
    w1 = new_worker(bridge, "w1", rec)
    w1.start()
    await wait_for(lambda: w1.running == ALL_ITEMS)
    bridge.request_stop()
    await bridge.stop()  # connections close, nobody listens: the worker keeps retrying
    cut = time.monotonic()
    await wait_for(lambda: not w1.running, timeout_s=SESSION_MS / 1000 + 2)
    assert time.monotonic() - cut <= SESSION_MS / 1000 + 0.5
    assert w1.member_epoch == 0
    await w1.crash()


def test_legacy_and_new_worker_coexist() -> None:
    asyncio.run(_in_bridge(_test_legacy_and_new_worker_coexist))


async def _test_legacy_and_new_worker_coexist(bridge: BridgeServer) -> None:
    rec = Recorder()
    rec.emit("config", None, connectors={"A": 2, "B": 1}, offset=1)
    legacy = LiveLegacyWorker(
        f"127.0.0.1:{bridge.port}",
        GROUP,
        "http://l1:8083/",
        "sessioned",
        rec.sink("l1"),
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        rebalance_timeout_ms=5000,
        max_delay_ms=1000,
        config_provider=lambda: VIEW,
        client_id="l1",
    )
    rec.emit("worker_start", "l1", protocol="sessioned")
    legacy.start()
    try:
        await wait_for(lambda: legacy.running == ALL_ITEMS)
        w2 = new_worker(bridge, "w2", rec)
        rec.emit("worker_start", "w2", protocol="new")
        w2.start()
        await wait_for(lambda: split_evenly(legacy.running, w2.running))
        await asyncio.sleep(1.0)  # a few more heartbeats of both kinds: nothing may move
        assert split_evenly(legacy.running, w2.running)
        assert legacy.error is None and not legacy.dead
        end = rec.now()
        rec.log.drill_end(max(end, rec.log._last_t))
        summary = check(rec.log.events, name="mixed", end_ms=end)
        assert summary.exclusive and summary.converged and summary.balanced, summary.to_json()
        await w2.stop()
    finally:
        await asyncio.to_thread(legacy.stop)
