"""A real standalone Spark cluster for tests: one master and one worker, started from the installed
PySpark's ``spark-class`` on 127.0.0.1 with free ports and little memory.

Both daemons run in their own process groups (``start_new_session``); the worker starts its
executors as its children, in its group, so stopping the two groups stops every JVM of the cluster
(SIGTERM, then SIGKILL for whatever is still there after a few seconds): no JVM outlives the test
run. The executors' Python gets no ``PYTHONPATH`` from the test run: the package must reach them
the way docs/pipeline.md says (``pipeline.session.ship_package``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kafka_processes import free_ports
from polling import poll

HOST = "127.0.0.1"
WORKER_CORES = 2
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "512m"
DAEMON_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
"""The master and worker do little work: start them fast and small."""
START_TIMEOUT = 120.0
"""Two JVMs on a loaded 2-core machine have taken 20 s to come up; a minute more is slack."""


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class StandaloneCluster:
    url: str
    """``spark://127.0.0.1:PORT``, for ``--master``."""
    work_dir: Path
    """The worker's ``--work-dir``: one ``app-*/N/`` directory per executor, with its logs and the
    files Spark shipped to it."""
    log_dir: Path

    def executor_dirs(self) -> list[Path]:
        return sorted(p for p in self.work_dir.glob("app-*/*") if p.is_dir())

    def logs(self) -> str:
        """The daemons' output, for a failure message."""
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.log_dir.glob("*.log"))
        )


def _daemon_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_SUBMIT_ARGS")}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=HOST,
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS=DAEMON_JAVA_OPTIONS,
    )
    return env


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{ui_port}/json/", timeout=2) as reply:
            return int(json.load(reply).get("aliveworkers", 0))
    except (OSError, ValueError):
        return 0


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every group, then SIGKILL the groups still running after 10 s."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # also executors the worker left behind
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


@contextlib.contextmanager
def standalone_cluster(base: Path) -> Iterator[StandaloneCluster]:
    """Start a master and one worker; yield once the worker has registered; stop both."""
    spark_class = str(spark_home() / "bin" / "spark-class")
    port, ui_port, worker_port, worker_ui_port = free_ports(4, HOST)
    url = f"spark://{HOST}:{port}"
    work_dir, log_dir = base / "work", base / "logs"
    work_dir.mkdir(parents=True)
    log_dir.mkdir(parents=True)
    env = _daemon_env()
    commands = {
        "master": [
            spark_class, "org.apache.spark.deploy.master.Master",
            "--host", HOST, "--port", str(port), "--webui-port", str(ui_port),
        ],
        "worker": [
            spark_class, "org.apache.spark.deploy.worker.Worker",
            "--host", HOST, "--port", str(worker_port), "--webui-port", str(worker_ui_port),
            "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY, "--work-dir", str(work_dir), url,
        ],
    }  # fmt: skip
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, command in commands.items():
            with open(log_dir / f"{name}.log", "wb") as log:
                procs.append(
                    subprocess.Popen(
                        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
                    )
                )
        cluster = StandaloneCluster(url=url, work_dir=work_dir, log_dir=log_dir)
        up = poll(
            lambda: _alive_workers(ui_port) >= 1 or any(p.poll() is not None for p in procs),
            timeout=START_TIMEOUT,
            interval=0.5,
        )
        if not up or any(p.poll() is not None for p in procs):
            raise RuntimeError(f"the standalone Spark cluster did not start:\n{cluster.logs()}")
        yield cluster
    finally:
        _stop(procs)


def client_env() -> dict[str, str]:
    """The environment of a ``connect-bridge`` process that uses the cluster: small executors, and
    the driver and executor JVMs started as the daemons are (:data:`DAEMON_JAVA_OPTIONS`: a test's
    jobs run seconds, which C2's compile work and G1's threads never pay back on two cores)."""
    return {
        **os.environ,
        "PYSPARK_SUBMIT_ARGS": shlex.join(
            [
                *("--conf", f"spark.executor.memory={EXECUTOR_MEMORY}"),
                *("--conf", f"spark.executor.extraJavaOptions={DAEMON_JAVA_OPTIONS}"),
                *("--driver-java-options", DAEMON_JAVA_OPTIONS),
                "pyspark-shell",
            ]
        ),
    }
