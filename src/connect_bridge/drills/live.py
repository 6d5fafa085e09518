"""Live drills: a real ``connect-bridge serve`` process, real worker clients, real time.

:func:`run_live` replays a scenario (docs/drills.md) against a bridge subprocess and writes the same
event log as the simulator, so ``check()`` and the pipeline judge both alike:

* the bridge runs as ``python -m connect_bridge.cli serve`` with the scenario's timing as coordinator
  settings (a YAML file in ``out_dir``), its record store in ``out_dir/state`` and the config view in
  ``out_dir/config.json`` (rewritten, offset + 1, on every config step);
* ``new`` workers are :class:`~connect_bridge.workers.live_new.LiveNewWorker` (asyncio, on this
  event loop); ``eager`` / ``compatible`` / ``sessioned`` workers are
  :class:`~connect_bridge.workers.live_legacy.LiveLegacyWorker` (kafka-python's group coordinator,
  its own threads); legacy workers read the config view straight from the runner, as a herder reads
  the config topic;
* ``restart_bridge`` SIGKILLs the bridge and starts it again after ``down_ms`` on the same port and
  state directory;
* at ``end_ms`` the log is closed (``drill_end``) and everything is torn down; nothing that happens
  after ``end_ms`` is logged.

Upstream mode (``run_live(..., upstream="HOST:PORT")``, a running Kafka-compatible cluster such as
tansu): the bridge runs as a proxy in front of it (``upstream``, ``proxy_base_port``), keeps its
state on a fresh compacted topic (``state_topic``) and reads the config view from a fresh Connect
config topic (``config_view.topic``); workers still bootstrap through the bridge. Config steps
become Connect config-topic records produced straight to the cluster (``connector-<name>``
``{"properties": ...}``, ``task-<name>-<n>``, ``commit-<name>`` ``{"tasks": N}``; a tombstone on
``connector-<name>`` removes it), and the view's offset is Connect's: last record's offset + 1.
``restart_bridge`` restarts on the same port, base port and state topic.

``t_ms`` is wall-clock milliseconds since the drill started (the bridge was up); one lock stamps and
appends every event, so the file order is the order things happened across threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connect_bridge.drills.events import EventLog
from connect_bridge.drills.scenario import Scenario, Timing
from connect_bridge.state.model import NEW_PROTOCOL, ConfigView
from connect_bridge.workers.live_legacy import LiveLegacyWorker
from connect_bridge.workers.live_new import LiveNewWorker

__all__ = ["Incarnation", "LiveDrill", "bridge_settings_yaml", "new_protocol_worker", "run_live", "step_name"]

log = logging.getLogger("connect_bridge.drills.live")

HOST = "127.0.0.1"
BRIDGE_START_TIMEOUT_S = 30.0


def bridge_settings_yaml(
    scenario: Scenario,
    config_file: Path,
    *,
    upstream: str | None = None,
    config_topic: str | None = None,
    state_topic: str | None = None,
    proxy_base_port: int | None = None,
) -> str:
    """The bridge's settings for a drill: the scenario's timing as coordinator settings.

    With ``upstream``: proxy mode, the config view from ``config_topic`` and the state on
    ``state_topic`` instead of ``config_file`` and the state directory.
    """
    t = scenario.timing
    coordinator = {
        "session_timeout_ms": t.session_timeout_ms,
        "heartbeat_interval_ms": t.heartbeat_interval_ms,
        "scheduled_rebalance_max_delay_ms": t.scheduled_rebalance_max_delay_ms,
        "migration_policy": scenario.migration_policy,
        # the classic group waits this long for more members on its first rebalance: keep it short
        "classic_initial_rebalance_delay_ms": min(3000, t.heartbeat_interval_ms),
        "classic_min_session_timeout_ms": min(6000, t.session_timeout_ms),
    }
    poll_ms = max(20, min(100, t.heartbeat_interval_ms // 3))
    doc: dict[str, Any] = {
        "coordinator": coordinator,
        "config_view": {"file": str(config_file), "group": scenario.group, "poll_interval_ms": poll_ms},
    }
    if upstream is not None:
        doc["upstream"] = [upstream]
        doc["config_view"] = {"topic": config_topic, "group": scenario.group, "poll_interval_ms": poll_ms}
        doc["state_topic"] = state_topic
        if proxy_base_port is not None:
            doc["proxy_base_port"] = proxy_base_port
    # JSON is YAML: no YAML writer needed.
    return json.dumps(doc, indent=2) + "\n"


class _Recorder:
    """The thread-safe front of the EventLog: stamps ``t_ms`` and appends under one lock."""

    def __init__(self, end_ms: int) -> None:
        self.log = EventLog()
        self.lock = threading.Lock()
        self.end_ms = end_ms
        self.t0 = time.monotonic()
        self.closed = False

    def now(self) -> int:
        return int((time.monotonic() - self.t0) * 1000)

    def emit(self, type: str, worker: str | None = None, **fields: Any) -> None:
        with self.lock:
            self._emit(type, worker, **fields)

    def _emit(self, type: str, worker: str | None, **fields: Any) -> None:
        if self.closed:
            return
        t = self.now()
        if t > self.end_ms:
            return  # after the drill's end: not part of the drill
        self.log.emit(max(t, self.log._last_t), type, worker, **fields)

    def close(self) -> None:
        with self.lock:
            if not self.closed:
                self.closed = True
                self.log.drill_end(max(self.end_ms, self.log._last_t))


@dataclass(eq=False)
class Incarnation:
    """One incarnation of a live worker, and how its events reach a drill's log.

    ``emit(type, worker, **fields)`` appends one event and is only called with ``lock`` held (the
    caller's log stamps the time). Also used by the Java worker drills (tests/test_java_drills.py),
    which run new-protocol workers next to Java Connect workers."""

    name: str
    protocol: str
    lock: threading.Lock
    emit: Callable[..., None]
    worker: LiveNewWorker | LiveLegacyWorker | None = None
    alive: bool = True

    def on_event(self, type: str, **fields: Any) -> None:
        """The worker's ``on_event``: a stopped incarnation's late news is dropped; ``fatal`` (the
        worker died of a group error) is logged as ``worker_crash``."""
        with self.lock:
            if not self.alive:
                return  # an old incarnation's late news
            if type == "fatal":
                log.warning("worker %s died: %s", self.name, fields.get("reason"))
                self.emit("worker_crash", self.name, protocol=self.protocol)
                self.alive = False
                return
            self.emit(type, self.name, **fields)

    def start(self, worker: LiveNewWorker | LiveLegacyWorker) -> None:
        """Log ``worker_start``, then start ``worker`` (made with :meth:`on_event` as its sink)."""
        self.worker = worker
        with self.lock:
            self.emit("worker_start", self.name, protocol=self.protocol)
        worker.start()

    async def stop(self) -> None:
        """Graceful stop (work released, then the leave); ``worker_stop`` once it has left."""
        worker = self.worker
        if not self.alive or worker is None:
            return
        if isinstance(worker, LiveNewWorker):
            await worker.stop()
        else:
            await asyncio.to_thread(worker.stop)
        with self.lock:
            if self.alive:
                self.emit("worker_stop", self.name, protocol=self.protocol)
                self.alive = False

    async def crash(self, log_it: bool = True) -> None:
        """``worker_crash`` (unless ``log_it`` is false), then the client dies without a leave."""
        worker = self.worker
        if worker is None:
            return
        with self.lock:
            if self.alive and log_it:
                self.emit("worker_crash", self.name, protocol=self.protocol)
            self.alive = False
        if isinstance(worker, LiveNewWorker):
            await worker.crash()
        else:
            await asyncio.to_thread(worker.crash)


def new_protocol_worker(
    host: str,
    port: int,
    group: str,
    name: str,
    on_event: Callable[..., None],
    timing: Timing,
    *,
    url: str | None = None,
    config_offset: int = -1,
) -> LiveNewWorker:
    """The new-protocol worker of live drills, for the bridge at ``host:port``: ``timing``'s session,
    rebalance timeout and heartbeat interval, client id ``name``, REST url ``url`` (default
    ``http://NAME:8083/``; the worker serves no REST API)."""
    return LiveNewWorker(
        host,
        port,
        group,
        url or f"http://{name}:8083/",
        on_event,
        session_timeout_ms=timing.session_timeout_ms,
        rebalance_timeout_ms=timing.rebalance_timeout_ms,
        heartbeat_interval_ms=timing.heartbeat_interval_ms,
        config_offset=config_offset,
        client_id=name,
    )


@dataclass
class LiveDrill:
    scenario: Scenario
    out_dir: Path
    python: str = sys.executable
    upstream: str | None = None
    """Bootstrap HOST:PORT of a running cluster: upstream mode (module doc); None = embedded."""
    progress: Callable[[int, int, str], None] | None = None
    """Told ``(steps done, steps, what comes next)`` before each step and once after the last, for
    the operator's progress bar: a live drill runs in real time, minutes for a long scenario."""
    rec: _Recorder = field(init=False)

    def __post_init__(self) -> None:
        self.out_dir = Path(self.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.config_file = (self.out_dir / "config.json").resolve()
        self.settings_file = (self.out_dir / "bridge.yaml").resolve()
        self.state_dir = (self.out_dir / "state").resolve()
        self.bridge_log = (self.out_dir / "bridge.log").resolve()
        self.connectors = dict(self.scenario.connectors)
        self.offset = 0
        self.view = ConfigView.of(self.offset, self.connectors)
        self.handles: dict[str, Incarnation] = {}
        self.proc: asyncio.subprocess.Process | None = None
        self.port = 0
        self.rec = _Recorder(self.scenario.end_ms)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._bridge_lock = asyncio.Lock()
        suffix = uuid.uuid4().hex[:12]
        self.config_topic = f"connect-configs-{suffix}"
        self.state_topic = f"connect-bridge-state-{suffix}"
        self.proxy_base_port: int | None = None
        self._producer: Any = None

    # ------------------------------------------------------------------ the bridge process
    def _write_config(self) -> None:
        tmp = self.config_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"offset": self.offset, "connectors": self.connectors}) + "\n")
        os.replace(tmp, self.config_file)

    async def _start_bridge(self) -> None:
        listen = f"{HOST}:{self.port}"
        args = ["--listen", listen, "--state-dir", str(self.state_dir), "--metrics-listen", "off"]
        if self.upstream is None:  # upstream mode: the config view comes from the topic (bridge.yaml)
            args += ["--config-view", str(self.config_file)]
        with open(self.bridge_log, "ab") as err:
            self.proc = await asyncio.create_subprocess_exec(
                self.python,
                "-m",
                "connect_bridge.cli",
                "serve",
                "--config",
                str(self.settings_file),
                *args,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                stdin=asyncio.subprocess.DEVNULL,
            )
        assert self.proc.stdout is not None
        try:
            line = await asyncio.wait_for(self.proc.stdout.readline(), BRIDGE_START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        text = line.decode(errors="replace").strip()
        prefix = "connect-bridge listening on "
        if not text.startswith(prefix):
            await self._kill_bridge()
            tail = self.bridge_log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the bridge did not start (stdout {text!r}); {self.bridge_log}:\n{tail}")
        self.port = int(text[len(prefix) :].rsplit(":", 1)[1])
        self._spawn(self._drain(self.proc.stdout))

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        with contextlib.suppress(Exception):
            while await stream.read(65536):
                pass

    async def _kill_bridge(self, sig: int = signal.SIGKILL) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()

    # ------------------------------------------------------------------ workers
    def _start_worker(self, name: str, protocol: str) -> None:
        old = self.handles.get(name)
        if old is not None and old.alive:
            log.warning("start %s: already running; ignored", name)
            return
        t = self.scenario.timing
        handle = Incarnation(name, protocol, self.rec.lock, self.rec._emit)
        url = f"http://{name}:8083/"
        worker: LiveNewWorker | LiveLegacyWorker
        if protocol == NEW_PROTOCOL:
            worker = new_protocol_worker(
                HOST,
                self.port,
                self.scenario.group,
                name,
                handle.on_event,
                t,
                url=url,
                config_offset=self.offset,
            )
        else:
            worker = LiveLegacyWorker(
                f"{HOST}:{self.port}",
                self.scenario.group,
                url,
                protocol,  # type: ignore[arg-type]
                handle.on_event,
                **t.worker_timing(),
                config_provider=lambda: self.view,
                client_id=name,
            )
        self.handles[name] = handle
        handle.start(worker)

    async def _stop_worker(self, name: str) -> None:
        handle = self.handles.get(name)
        if handle is not None:
            await handle.stop()

    async def _crash_worker(self, name: str, log_it: bool = True) -> None:
        handle = self.handles.get(name)
        if handle is not None:
            await handle.crash(log_it)

    # ------------------------------------------------------------------ the upstream cluster
    def _prepare_upstream(self) -> None:
        """Blocking: the config topic with the scenario's initial connectors, and the proxy's base
        port (so that the listener of the lowest broker id is on a port free right now)."""
        from kafka import KafkaAdminClient, KafkaProducer
        from kafka.admin import NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.upstream, client_id="drill-admin")
        try:
            node_ids = [int(b["broker_id"]) for b in admin.describe_cluster()["brokers"]]
            admin.create_topics(
                [NewTopic(self.config_topic, 1, 1, topic_configs={"cleanup.policy": "compact"})]
            )
        finally:
            admin.close()
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            free = sock.getsockname()[1]
        self.proxy_base_port = free - min(node_ids)
        if self.proxy_base_port < 1:
            raise RuntimeError(f"broker ids {node_ids} too large for a proxy base port")
        self._producer = KafkaProducer(
            bootstrap_servers=self.upstream, acks="all", max_in_flight_requests_per_connection=1
        )
        records: list[tuple[str, dict[str, Any] | None]] = []
        for name, tasks in self.connectors.items():
            records += _connector_records(name, tasks)
        self.offset = self._produce_config(records) if records else -1
        self.view = ConfigView.of(self.offset, self.connectors)

    def _produce_config(self, records: list[tuple[str, dict[str, Any] | None]]) -> int:
        """Blocking: write Connect config records in order; Connect's view offset after them."""
        futures = [
            self._producer.send(
                self.config_topic,
                key=key.encode(),
                value=None if value is None else json.dumps(value).encode(),
                partition=0,
            )
            for key, value in records
        ]
        self._producer.flush(10)
        return max(f.get(10).offset for f in futures) + 1

    # ------------------------------------------------------------------ config and steps
    async def _config_step(self, connector: str, tasks: int | None) -> None:
        """A config change: a Connect config-topic write (upstream mode) or the next file offset."""
        if tasks is None:
            self.connectors.pop(connector, None)
        else:
            self.connectors[connector] = tasks
        if self.upstream is None:
            self._config_changed(self.offset + 1)
            return
        records = _connector_records(connector, tasks)
        self._config_changed(await asyncio.to_thread(self._produce_config, records))

    def _config_changed(self, offset: int) -> None:
        self.offset = offset
        self.view = ConfigView.of(self.offset, self.connectors)
        self.rec.emit("config", None, connectors=dict(self.connectors), offset=self.offset)
        if self.upstream is None:
            self._write_config()
        for handle in list(self.handles.values()):
            if handle.alive and isinstance(handle.worker, LiveLegacyWorker):
                handle.worker.on_config_change()

    async def _restart_bridge(self, down_ms: int) -> None:
        async with self._bridge_lock:
            await self._kill_bridge(signal.SIGKILL)
            self.rec.emit("bridge_restart")
            await asyncio.sleep(down_ms / 1000)
            await self._start_bridge()
            self.rec.emit("bridge_up")

    async def _restart_worker(self, name: str, down_ms: int, protocol: str | None) -> None:
        handle = self.handles.get(name)
        protocol = protocol or (handle.protocol if handle else NEW_PROTOCOL)
        await self._stop_worker(name)
        await asyncio.sleep(down_ms / 1000)
        self._start_worker(name, protocol)

    async def _step(self, step: Any) -> None:
        play = _LIVE_STEPS.get(step.action)
        if play is None:
            raise ValueError(
                f"live drills do not play {step.action!r} (misbehaving workers are simulated: --mode sim)"
            )
        pending = play(self, step)
        if pending is not None:
            await pending

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("live drill step failed", exc_info=task.exception())

    async def _sleep_until(self, t_ms: int) -> None:
        delay = t_ms - self.rec.now()
        if delay > 0:
            await asyncio.sleep(delay / 1000)

    # ------------------------------------------------------------------ run
    async def run(self) -> EventLog:
        if self.upstream is not None:
            await asyncio.to_thread(self._prepare_upstream)
        self.settings_file.write_text(
            bridge_settings_yaml(
                self.scenario,
                self.config_file,
                upstream=self.upstream,
                config_topic=self.config_topic,
                state_topic=self.state_topic,
                proxy_base_port=self.proxy_base_port,
            )
        )
        self._write_config()
        await self._start_bridge()
        try:
            self.rec = _Recorder(self.scenario.end_ms)  # t = 0: the bridge is up
            self.rec.emit("config", None, connectors=dict(self.connectors), offset=self.offset)
            self.rec.emit("timing", None, **self.scenario.timing.model_dump())
            steps = sorted(self.scenario.steps, key=lambda s: s.at_ms)
            tell = self.progress or (lambda _done, _total, _next: None)
            for done, step in enumerate(steps):
                if step.at_ms > self.scenario.end_ms:
                    break
                tell(done, len(steps), f"{step_name(step)} at {step.at_ms / 1000:g} s")
                await self._sleep_until(step.at_ms)
                await self._step(step)
            tell(len(steps), len(steps), f"until the end at {self.scenario.end_ms / 1000:g} s")
            await self._sleep_until(self.scenario.end_ms)
            self.rec.close()
        finally:
            self.rec.close()
            await self._teardown()
        return self.rec.log

    async def _teardown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(
            *(self._crash_worker(name, log_it=False) for name in list(self.handles)), return_exceptions=True
        )
        await self._kill_bridge(signal.SIGTERM)
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await asyncio.to_thread(producer.close, 5)


_LIVE_STEPS: dict[str, Callable[[LiveDrill, Any], Awaitable[None] | None]] = {
    "start": lambda drill, step: drill._start_worker(step.worker, step.protocol),
    "stop": lambda drill, step: drill._stop_worker(step.worker),
    "crash": lambda drill, step: drill._crash_worker(step.worker),
    # Restarts run in the background: the next steps do not wait out the downtime.
    "restart": lambda drill, step: drill._spawn(
        drill._restart_worker(step.worker, step.down_ms, step.protocol)
    ),
    "add_connector": lambda drill, step: drill._config_step(step.connector, step.tasks),
    "set_tasks": lambda drill, step: drill._config_step(step.connector, step.tasks),
    "remove_connector": lambda drill, step: drill._config_step(step.connector, None),
    "restart_bridge": lambda drill, step: drill._spawn(drill._restart_bridge(step.down_ms)),
}
"""Scenario step action -> what the live drill does (an awaitable is awaited before the next step)."""


def _connector_records(name: str, tasks: int | None) -> list[tuple[str, dict[str, Any] | None]]:
    """What a Connect herder writes for a connector config (``tasks``) or its deletion (None)."""
    if tasks is None:
        return [(f"connector-{name}", None)]
    props = {"name": name, "connector.class": "DrillConnector", "tasks.max": str(max(tasks, 1))}
    records: list[tuple[str, dict[str, Any] | None]] = [(f"connector-{name}", {"properties": props})]
    records += [(f"task-{name}-{n}", {"properties": {**props, "task.id": str(n)}}) for n in range(tasks)]
    records.append((f"commit-{name}", {"tasks": tasks}))
    return records


def step_name(step: Any) -> str:
    """``restart w2``, ``add_connector orders``, ``restart_bridge``: a step as an operator names it."""
    subject = getattr(step, "worker", None) or getattr(step, "connector", None)
    return f"{step.action} {subject}" if subject else step.action


def run_live(
    scenario: Scenario,
    out_dir: str | Path,
    upstream: str | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> EventLog:
    """Run ``scenario`` live (real bridge process, real workers, wall-clock time); see the module doc.

    ``upstream``: bootstrap ``HOST:PORT`` of a running Kafka-compatible cluster to run the bridge
    in front of (proxy mode, config and state topics on that cluster); None = embedded bridge.
    ``progress``: see :attr:`LiveDrill.progress`.
    """
    return asyncio.run(LiveDrill(scenario, Path(out_dir), upstream=upstream, progress=progress).run())
