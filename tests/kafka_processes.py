"""The Apache Kafka test processes' common ground: ``java`` command lines, free ports, properties
files, and ``KafkaProcess`` (a JVM or bridge subprocess with its log), for ``kafka_fixtures`` (the
broker and the bridge) and ``kafka_workers`` (Java Connect workers)."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import uuid
from pathlib import Path
from typing import Any

from kafka_jars import KafkaJarsError, java_binary, kafka_classpath, log4j_config
from tansu import LoggedProcess

HOST = "127.0.0.1"
BROKER_NODE_ID = 1
STOP_TIMEOUT_S = 30.0
HEAP = "512m"
SCHEDULED_DELAY_MS = 10_000
"""``scheduled.rebalance.max.delay.ms`` of the test workers and the bridge's
``coordinator.scheduled_rebalance_max_delay_ms`` (both default to 5 minutes). They must agree: when
a classic group's leader leaves, the bridge holds its work for its own delay, not the workers'."""


class KafkaStartError(RuntimeError):
    """Java/Maven missing, a JVM exited, or it was not ready in time."""


def require_java() -> None:
    """Java and the Kafka jars are there (fetched on first use), or ``KafkaStartError`` says why."""
    try:
        java_binary()
        kafka_classpath()
    except KafkaJarsError as exc:
        raise KafkaStartError(str(exc)) from exc


FAST_START = ("-XX:TieredStopAtLevel=1", "-Xshare:auto")
"""JVM options of a test process that starts often and runs light: the C1 compiler only. A Connect
worker then joins its group in about half the wall time and CPU (measured on two shared cores:
9-10 s -> 5 s, 6.5 -> 3.7 CPU s per start; C2's compiler threads compete with every other process of
the suite). Benchmarks turn it off (``fast_start=False``): it also slows a long run's hot loop."""


def jvm_command(
    main_class: str,
    *args: str,
    heap: str = HEAP,
    classpath_prefix: str | None = None,
    fast_start: bool = True,
) -> list[str]:
    """``java`` with a small heap, Kafka's GC settings and the tests' log4j2 config;
    ``classpath_prefix`` goes before Kafka's jars (the connect-bridge-worker add-on);
    ``fast_start``: :data:`FAST_START`."""
    return [
        java_binary(),
        "-Xms64m",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
        *(FAST_START if fast_start else ()),
        "-Djava.awt.headless=true",
        # Log timestamps in UTC: drills compare them with the test's time.time() (java_timeline).
        "-Duser.timezone=UTC",
        f"-Dlog4j2.configurationFile={log4j_config()}",
        "-cp",
        kafka_classpath()
        if classpath_prefix is None
        else f"{classpath_prefix}{os.pathsep}{kafka_classpath()}",
        main_class,
        *args,
    ]


def free_ports(count: int, host: str = HOST) -> list[int]:
    """``count`` distinct free ports (all bound at once, so they differ)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


def kafka_uuid() -> str:
    """A random Kafka ``Uuid`` string (URL-safe base64 of 16 bytes, no padding), like
    ``kafka-storage.sh random-uuid`` without starting a JVM."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def write_properties(path: Path, props: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="utf-8")
    return path


class KafkaProcess(LoggedProcess):
    """A Kafka, Connect or bridge process: a JVM may take a while to stop."""

    stop_timeout_s = STOP_TIMEOUT_S

    def discard(self) -> int | None:
        """End the process at a fixture's teardown, when nothing is judged after it: ``stop()``
        here; a Java Connect worker is killed (``kafka_workers.ConnectWorker.discard``)."""
        return self.stop()


def spawn(command: list[str], log_path: Path, cwd: Path) -> tuple[subprocess.Popen[bytes], Any]:
    log_file = open(log_path, "ab")  # owned by the KafkaProcess, closed in stop()/kill()
    try:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd
        )
    except OSError as exc:
        log_file.close()
        raise KafkaStartError(f"cannot run {command[0]}: {exc}") from exc
    return process, log_file
