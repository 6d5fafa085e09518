"""Java Connect workers (``ConnectDistributed``) for tests: started with a generated
``worker.properties``, driven through their REST API and read through their logs. The factory
fixture ``connect_worker`` lives in ``kafka_fixtures`` (registered in ``tests/conftest.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jvm_cds
from addon_jar import ensure_addon_jar
from kafka_processes import (
    HEAP,
    HOST,
    SCHEDULED_DELAY_MS,
    KafkaProcess,
    KafkaStartError,
    free_ports,
    jvm_command,
    require_java,
    spawn,
    write_properties,
)
from tansu import await_ready

WORKER_START_TIMEOUT_S = 90.0
CONNECT_PROTOCOLS = ("eager", "compatible", "sessioned")
VERIFIABLE_SOURCE = "org.apache.kafka.connect.tools.VerifiableSourceConnector"
VERIFIABLE_SINK = "org.apache.kafka.connect.tools.VerifiableSinkConnector"
MOCK_SOURCE = "org.apache.kafka.connect.tools.MockSourceConnector"
JOINED_MARK = "Joined group at generation"
JOINED_LINE = re.compile(r"Joined group at generation (-?\d+) ")
LEADER_URL = re.compile(r"Joined group at generation -?\d+ .*?leaderUrl='([^']*)'")
"""The leader's REST URL in a worker's ``Joined group at generation N ... Assignment{...}`` line."""


CONNECT_STOP_TIMEOUT_S = 75.0
"""A worker's graceful stop begins with its REST server, and Connect gives Jetty up to 60 s to
finish requests in flight (a follower's forwarded request can be one): wait past that."""
THREAD_DUMP_WAIT_S = 2.0


class RestError(RuntimeError):
    """A Connect REST call answered an error status (``status``, ``body``)."""

    def __init__(self, method: str, url: str, status: int, body: Any) -> None:
        super().__init__(f"{method} {url}: HTTP {status}: {body}")
        self.status = status
        self.body = body


@dataclass
class ConnectWorker(KafkaProcess):
    """A running Java Connect worker in distributed mode."""

    name: str = ""
    rest_port: int = 0
    bootstrap: str = ""
    group_id: str = ""
    protocol: str = ""
    config_topic: str = ""
    offset_topic: str = ""
    status_topic: str = ""
    config_path: Path = Path()
    log_offset: int = 0
    """Where this process's output starts in ``log_path``."""

    stop_timeout_s = CONNECT_STOP_TIMEOUT_S

    def stop(self, timeout_s: float | None = None) -> int | None:
        """SIGTERM and wait; a worker still running after the timeout gets SIGQUIT first (the JVM
        writes a thread dump to the log, so a hung shutdown can be diagnosed), then SIGKILL."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(self.stop_timeout_s if timeout_s is None else timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, signal.SIGQUIT)
                time.sleep(THREAD_DUMP_WAIT_S)
        code = super().stop(0.1)
        jvm_cds.settle()
        return code

    def kill(self) -> None:
        """SIGKILL (a crash). Idempotent."""
        super().kill()
        jvm_cds.settle()

    def discard(self) -> int | None:
        """End a worker whose test is over: SIGKILL, as nothing is judged after it. A graceful stop
        takes seconds (tasks stopped, the group left), and can wait out its timeouts (Jetty's join,
        a coordinator that is gone: :data:`CONNECT_STOP_TIMEOUT_S`). Only a worker recording the
        class-data archive stops gracefully, since it writes the archive as it exits (jvm_cds)."""
        if self.process.poll() is None and jvm_cds.records(self.process):
            return self.stop()
        self.kill()
        return self.process.returncode

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines the runtime wrote, without the test connector's JSON output
        (one line per record, which would otherwise push every herder message out of view)."""
        own = [line for line in self.log_text().splitlines() if not line.startswith("{")]
        return "\n".join(own[-lines:]) or f"({self.log_path} has no runtime lines)"

    @property
    def url(self) -> str:
        """REST base URL (also the URL this worker advertises to its group)."""
        return f"http://{HOST}:{self.rest_port}"

    @property
    def worker_id(self) -> str:
        """How the REST status names this worker (``host:port``)."""
        return f"{HOST}:{self.rest_port}"

    def rest(self, method: str, path: str, body: Any = None, timeout_s: float = 10.0) -> Any:
        """One REST call; the decoded JSON answer (None when empty), ``RestError`` on 4xx/5xx."""
        url = self.url + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            exc.close()
            try:
                detail: Any = json.loads(raw) if raw else None
            except ValueError:
                detail = raw.decode(errors="replace")
            raise RestError(method, url, exc.code, detail) from None
        return json.loads(raw) if raw else None

    def create_connector(self, name: str, config: dict[str, Any], timeout_s: float = 30.0) -> Any:
        """``POST /connectors``, retried while the group rebalances (409) or the worker starts (5xx).

        Creating is not idempotent. An attempt whose answer was lost (no answer within the request
        timeout: on a loaded machine a follower answers only after the herder's next rebalance and
        the leader's write, seen 13 s) or was a 5xx may still have created the connector, and every
        retry then gets 409 ``Connector <name> already exists``. After such an attempt a connector
        that exists with exactly this config counts as created (its config is returned)."""
        body = {"name": name, "config": {k: str(v) for k, v in config.items()}}
        unanswered: list[str] = []

        def call() -> Any:
            try:
                return self.rest("POST", "/connectors", body)
            except OSError as exc:
                unanswered.append(f"{type(exc).__name__}: {exc}")
                raise
            except RestError as exc:
                if exc.status >= 500:
                    unanswered.append(f"HTTP {exc.status}")
                elif exc.status == 409 and unanswered and "already exists" in str(exc.body):
                    existing = {k: v for k, v in self.connector_config(name).items() if k != "name"}
                    if existing == body["config"]:
                        return {"name": name, "config": existing}
                raise

        return self._retry_noted(call, timeout_s, None)

    def connector_status(self, name: str) -> Any:
        return self.rest("GET", f"/connectors/{name}/status")

    def task_configs(self, name: str, timeout_s: float = 30.0) -> Any:
        """``GET /connectors/<name>/tasks``, retried like :meth:`put_connector_config`: right after a
        rebalance a worker answers 500 "a rebalance is expected" (or 409) until it has rejoined."""
        return self._retry_noted(lambda: self.rest("GET", f"/connectors/{name}/tasks"), timeout_s, None)

    def wait_running(
        self,
        name: str,
        tasks: int,
        timeout_s: float = 40.0,
        on: Iterable[ConnectWorker | str] | None = None,
    ) -> dict[str, Any]:
        """Poll ``GET /connectors/<name>/status`` until the connector and ``tasks`` tasks are
        RUNNING (on the workers ``on`` only, when given: workers or worker ids); the last status.
        A FAILED connector or task fails at once with its trace.

        The status comes from the status topic, written by the workers themselves: a worker that
        stopped or died may still be shown RUNNING its tasks for a while, so after a departure
        pass ``on`` with the workers that are left."""
        allowed = None if on is None else {w.worker_id if isinstance(w, ConnectWorker) else w for w in on}
        deadline = time.monotonic() + timeout_s
        status: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RestError, OSError):
                status = self.connector_status(name)
            if status is not None:
                failed = [t for t in status.get("tasks", []) if t.get("state") == "FAILED"]
                if status.get("connector", {}).get("state") == "FAILED" or failed:
                    raise AssertionError(f"connector {name} failed: {json.dumps(status, indent=1)}")
                units = [status.get("connector", {}), *status.get("tasks", [])]
                if (
                    len(units) == tasks + 1
                    and all(u.get("state") == "RUNNING" for u in units)
                    and (allowed is None or all(u.get("worker_id") in allowed for u in units))
                ):
                    return status
            if not self.running:
                break
            time.sleep(0.25)
        raise AssertionError(
            f"connector {name} not RUNNING with {tasks} tasks"
            f"{'' if allowed is None else f' on {sorted(allowed)}'} within {timeout_s:.0f}s (worker "
            f"{'running' if self.running else 'exited'}); last status {status}; log {self.log_path}:\n"
            f"{self.log_tail()}"
        )

    def own_log(self) -> str:
        """This process's part of ``log_path`` (a worker restarted in the same directory appends)."""
        with contextlib.suppress(OSError), open(self.log_path, "rb") as handle:
            handle.seek(self.log_offset)
            return handle.read().decode("utf-8", errors="replace")
        return ""

    def generations(self) -> list[int]:
        """The generations this worker joined, from its ``Joined group at generation N`` lines."""
        return [int(m.group(1)) for m in JOINED_LINE.finditer(self.own_log())]

    def joined(self) -> bool:
        """Ready: the worker logged ``Joined group at generation`` (it is a member with an
        assignment) and ``GET /`` and ``GET /connectors`` answer 200. A worker answers
        ``GET /connectors`` before its first join completes (its herder serves requests between
        polls), so the REST API alone does not tell."""
        if JOINED_MARK not in self.own_log():
            return False
        try:
            self.rest("GET", "/", timeout_s=5)
            self.rest("GET", "/connectors", timeout_s=5)
            return True
        except (RestError, OSError, ValueError):
            return False

    # --- config changes as an operator's script makes them (issue 12 drill (f)) -------------------

    def put_connector_config(
        self,
        name: str,
        config: dict[str, Any],
        timeout_s: float = 60.0,
        retries: list[str] | None = None,
    ) -> Any:
        """``PUT /connectors/<name>/config`` (create or update), retried until ``timeout_s`` on 409
        (rebalance in progress, stale config), 5xx (a forward to a leader that is gone) and
        connection errors; each retried answer is appended to ``retries``. Idempotent, so a retry
        after an answer that was lost is harmless."""
        body = {k: str(v) for k, v in config.items()}
        path = f"/connectors/{name}/config"
        return self._retry_noted(lambda: self.rest("PUT", path, body, 30.0), timeout_s, retries)

    def delete_connector(self, name: str, timeout_s: float = 60.0, retries: list[str] | None = None) -> None:
        """``DELETE /connectors/<name>``, retried like :meth:`put_connector_config`. A 404 after a
        failed attempt counts as done (that attempt may have been applied before its answer was lost)."""
        tried: list[str] = []

        def call() -> Any:
            try:
                return self.rest("DELETE", f"/connectors/{name}", timeout_s=30.0)
            except RestError as exc:
                if exc.status == 404 and tried:
                    return None
                raise

        self._retry_noted(call, timeout_s, tried)
        if retries is not None:
            retries.extend(tried)

    def connector_config(self, name: str) -> dict[str, str]:
        """``GET /connectors/<name>/config``."""
        return dict(self.rest("GET", f"/connectors/{name}/config"))

    def connector_names(self) -> list[str]:
        """``GET /connectors``."""
        return sorted(self.rest("GET", "/connectors"))

    def _retry_noted(self, call: Callable[[], Any], timeout_s: float, retries: list[str] | None) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return call()
            except RestError as exc:
                if exc.status not in (409, 500, 503) or time.monotonic() > deadline:
                    raise
                note = f"HTTP {exc.status}: {exc.body}"
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise
                note = f"{type(exc).__name__}: {exc}"
            if retries is not None:
                retries.append(note)
            time.sleep(0.25)

    def leader_url(self) -> str | None:
        """The ``leaderUrl`` of the last assignment this process logged (``Joined group at
        generation ... Assignment{..., leaderUrl='http://...'}``), None before its first join."""
        found = LEADER_URL.findall(self.own_log())
        return found[-1] if found else None


def worker_properties(
    *,
    bootstrap: str,
    group_id: str,
    protocol: str,
    rest_port: int,
    topics_prefix: str,
    scheduled_rebalance_max_delay_ms: int,
) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group_id,
        "connect.protocol": protocol,
        "scheduled.rebalance.max.delay.ms": scheduled_rebalance_max_delay_ms,
        "config.storage.topic": f"{topics_prefix}-configs",
        "offset.storage.topic": f"{topics_prefix}-offsets",
        "status.storage.topic": f"{topics_prefix}-status",
        "config.storage.replication.factor": 1,
        "offset.storage.replication.factor": 1,
        "status.storage.replication.factor": 1,
        "offset.storage.partitions": 1,
        "status.storage.partitions": 1,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": "false",
        "value.converter.schemas.enable": "false",
        "listeners": f"http://{HOST}:{rest_port}",
        "rest.advertised.host.name": HOST,
        "rest.advertised.port": rest_port,
        "rest.advertised.listener": "http",
        "offset.flush.interval.ms": 1000,
        # The built-in and test connectors are on the classpath and list themselves in
        # META-INF/services: no plugin.path, no slow reflective scan of ~95 jars.
        "plugin.discovery": "service_load",
    }


ADDON_MAIN = "io.connectbridge.connect.BridgeConnectDistributed"
"""The connect-bridge-worker add-on's launcher (jvm/connect-bridge-worker): stock Connect with
``group.protocol`` unset or ``classic``, a ConnectGroupHeartbeat member with ``connect``."""


def spawn_worker(
    wdir: Path, props: dict[str, Any], heap: str, fast_start: bool = True, **fields: Any
) -> ConnectWorker:
    """Run ``ConnectDistributed`` on ``props`` (written to ``wdir/worker.properties``), its output
    appended to ``wdir/worker.log``; ``fields`` name the worker (``ConnectWorker``'s fields);
    ``fast_start``: ``kafka_processes.FAST_START``.

    When ``props`` has ``group.protocol``, the worker runs through the add-on's launcher
    (:data:`ADDON_MAIN`, the jar before Kafka's on the classpath), built first if needed."""
    config = write_properties(wdir / "worker.properties", props)
    log_path = wdir / "worker.log"
    log_offset = log_path.stat().st_size if log_path.exists() else 0
    main = ADDON_MAIN if "group.protocol" in props else "org.apache.kafka.connect.cli.ConnectDistributed"
    prefix = str(ensure_addon_jar()) if main == ADDON_MAIN else None
    command = jvm_command(main, str(config), heap=heap, classpath_prefix=prefix, fast_start=fast_start)
    recording = None
    if fast_start:  # class-data sharing (tests/jvm_cds.py), with the C1 compiler of a fast start
        shared, recording = jvm_cds.cds_options(command[0], main, command[command.index("-cp") + 1])
        command[1:1] = shared
    try:
        process, log_file = spawn(command, log_path, wdir)
    except BaseException:
        jvm_cds.attach(recording, None)
        raise
    jvm_cds.attach(recording, process)
    return ConnectWorker(
        process,
        log_path,
        log_file,
        config_topic=str(props["config.storage.topic"]),
        offset_topic=str(props["offset.storage.topic"]),
        status_topic=str(props["status.storage.topic"]),
        config_path=config,
        log_offset=log_offset,
        **fields,
    )


def start_connect_worker(
    workdir: Path,
    *,
    bootstrap: str,
    group_id: str = "connect-cluster",
    protocol: str = "sessioned",
    name: str | None = None,
    rest_port: int | None = None,
    topics_prefix: str | None = None,
    scheduled_rebalance_max_delay_ms: int = SCHEDULED_DELAY_MS,
    overrides: dict[str, Any] | None = None,
    timeout_s: float = WORKER_START_TIMEOUT_S,
    heap: str = HEAP,
    group_protocol: str | None = None,
    fast_start: bool = True,
) -> ConnectWorker:
    """Start a distributed Connect worker and wait until it joined its group.
    ``fast_start``: the JVM's C1 compiler only (``kafka_processes.FAST_START``; benchmarks turn it off).

    ``group_protocol`` (``classic`` or ``connect``) runs the worker through the connect-bridge-worker
    add-on's launcher with that ``group.protocol``; None runs stock ``ConnectDistributed``.

    Topics are ``<topics_prefix>-configs/-offsets/-status`` (default prefix: the group id), with
    replication factor 1. ``protocol`` is ``connect.protocol`` (eager, compatible, sessioned).
    ``name`` (default ``worker-<port>``) names its directory under ``workdir``; a worker restarted
    with the same ``name`` and ``rest_port`` keeps its worker id (``127.0.0.1:<port>``) and appends
    to the same log (``own_log()`` is the new process's part)."""
    if protocol not in CONNECT_PROTOCOLS:
        raise ValueError(f"connect.protocol must be one of {CONNECT_PROTOCOLS}, got {protocol!r}")
    require_java()
    last_error = ""
    for _attempt in range(3):
        port = rest_port or free_ports(1)[0]
        worker_name = name or f"worker-{port}"
        wdir = Path(workdir) / worker_name
        wdir.mkdir(parents=True, exist_ok=True)
        props = (
            worker_properties(
                bootstrap=bootstrap,
                group_id=group_id,
                protocol=protocol,
                rest_port=port,
                topics_prefix=topics_prefix or group_id,
                scheduled_rebalance_max_delay_ms=scheduled_rebalance_max_delay_ms,
            )
            | ({} if group_protocol is None else {"group.protocol": group_protocol})
            | (overrides or {})
        )
        worker = spawn_worker(
            wdir,
            props,
            heap,
            fast_start,
            name=worker_name,
            rest_port=port,
            bootstrap=bootstrap,
            group_id=group_id,
            protocol=protocol,
        )
        detail = f" ({worker.url}, group {group_id}, {protocol}, bootstrap {bootstrap})"
        what = f"Connect worker {worker_name}"
        last_error = await_ready(
            worker, ConnectWorker.joined, what, timeout_s, 0.25, KafkaStartError, detail=detail
        )
        if not last_error:
            return worker
        if "address already in use" not in last_error.lower():
            break
    raise KafkaStartError(last_error)
