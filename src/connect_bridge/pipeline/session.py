"""One quiet, reused SparkSession per process for the analysis pipeline.

A local ``analyze`` of one drill (a few hundred events) used to take 30-60 s on two cores, nearly
all of it fixed cost: JIT-compiling Spark in a fresh JVM, generating and compiling Java code for
every stage, planning adaptive stages and scheduling shuffle tasks with nothing in them. A local
session for a small input is therefore tuned for a short run (:data:`SHORT_RUN_CONF`,
:data:`SHORT_RUN_JAVA_OPTIONS`); the numbers stay exactly the same, only the plans run
differently. ``benchmarks/analyze_small.py`` measures it against the untuned settings.

The JVM's banner (``Using Spark's default log4j profile``, the incubator-module warning, the
native-hadoop warning) goes to a log file instead of the terminal unless the ``connect_bridge``
loggers are at DEBUG (``connect-bridge --log-level debug``): see :func:`get_spark`.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_MASTER = "local[*]"
LOCAL_SHUFFLE_PARTITIONS = 8
"""At most this many shuffle partitions locally (one per core, at least 2): drill logs are small
per drill, and every window or join is a shuffle whose tasks cost more than their work."""

LOCAL_CONF: dict[str, str] = {
    # Adaptive execution re-plans after every shuffle to coalesce partitions and split skewed
    # ones. A local session has a few shuffle partitions, and the analysis has one shuffle (by
    # drill: metrics.in_time_order): the re-planning, one job per query stage, is pure cost.
    "spark.sql.adaptive.enabled": "false",
}
"""Settings of every local session (whatever the input's size)."""

SHORT_RUN_CONF: dict[str, str] = {
    # Whole-stage code generation compiles Java source per stage (Janino, then the JIT): for the
    # many small stages of one analysis that is most of the run; interpreted operators are plenty.
    "spark.sql.codegen.wholeStage": "false",
    # ...and the same for single expressions (projections, predicates, sort orders): interpreted,
    # not compiled. An internal setting, but the one that says exactly this; measured on one drill
    # it saves a quarter of the JVM's CPU time.
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
"""Settings of a local session for a short run (small input: :data:`SHORT_RUN_BYTES`)."""

SHORT_RUN_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
"""The driver JVM of a short local run: the serial collector starts fastest and has no GC threads
competing for two cores, and stopping the JIT at C1 compiles Spark's hot paths in a fraction of the
time C2 takes, which a run of seconds never earns back (a fleet of millions of events does)."""

SHORT_RUN_BYTES = 16 * 1024 * 1024
"""Input up to this size (about 200,000 events of JSON lines, at ~70 bytes an event) is a short run
for ``analyze``: seconds of work, where the fixed cost is what matters."""

SPARK_LOG_LEVEL = "ERROR"
"""Spark's log level unless the ``connect_bridge`` loggers are at DEBUG (then ``WARN``)."""


def is_local(master: str) -> bool:
    """A ``local``, ``local[N]`` or ``local[N,F]`` master: driver and executors in this JVM."""
    return master.startswith("local")


def _local_partitions(master: str) -> int:
    found = re.fullmatch(r"local\[(\d+)(?:,\s*\d+)?\]", master)
    cores = int(found.group(1)) if found else (os.cpu_count() or 2)
    return max(2, min(LOCAL_SHUFFLE_PARTITIONS, cores))


_lock = threading.Lock()
_session: Any = None
_keep_sigint = False


def keep_sigint_handler(keep: bool = True) -> None:
    """Keep the process's SIGINT handler when Spark starts (the CLI's, ``cli_interrupt``).

    A SparkContext installs its own, which cancels every job from inside the signal handler: when
    Ctrl-C lands while the driver waits on the Py4J gateway, that re-enters the gateway in the
    middle of a command, and the operator sees Py4J's tracebacks and a "Gateway must be connected"
    error instead of ``interrupted``. The CLI cancels the jobs itself once the interrupt unwound."""
    global _keep_sigint
    _keep_sigint = keep


def cancel_jobs() -> None:
    """Cancel the running session's jobs, if any (after an interrupt); errors are not reported:
    a JVM that the same Ctrl-C stopped has no jobs left to cancel."""
    with contextlib.suppress(Exception):
        if _session is not None:
            _session.sparkContext.cancelAllJobs()


def _alive(spark: Any) -> bool:
    try:
        return spark.sparkContext._jsc is not None and not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # a session whose JVM went away
        return False


def _verbose() -> bool:
    """Show Spark's own output: the operator asked for debug logging (``--log-level debug`` sets
    the ``connect_bridge`` loggers to DEBUG, :mod:`connect_bridge.logs`)."""
    return logging.getLogger(__name__).isEnabledFor(logging.DEBUG)


@contextlib.contextmanager
def _jvm_stderr_to_file() -> Iterator[None]:
    """While the JVM starts, point file descriptor 2 at a log file: the JVM inherits it, so its
    banner and warnings (written before any log level can be set) land there, not on the terminal.
    Python's own stderr is restored at once. The file is removed at exit; it is named in the
    debug log for whoever wants to read it while the process runs."""
    fd, path = tempfile.mkstemp(prefix="connect-bridge-spark-", suffix=".log")
    atexit.register(_remove, path)
    logging.getLogger(__name__).debug("Spark's console output goes to %s", path)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        os.dup2(fd, 2)
        yield
    except Exception:  # (not an interrupt: the operator who pressed Ctrl-C wants no JVM log)
        # The JVM did not start: what it said is the reason, so it goes where the operator looks.
        os.dup2(saved, 2)
        with contextlib.suppress(OSError), open(path, encoding="utf-8", errors="replace") as log:
            sys.stderr.write(log.read()[-4000:])
        raise
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def get_spark(master: str | None = None, app: str = "connect-bridge", short_run: bool = False) -> Any:
    """The process-wide :class:`pyspark.sql.SparkSession`, started on first use.

    ``master`` defaults to ``local[*]``; once a session runs, later calls return it whatever they
    pass (Spark allows one SparkContext per process). Before starting, the driver binds to
    127.0.0.1 (``SPARK_LOCAL_IP``) and Python workers use this interpreter. Local sessions run
    without the web UI and with few shuffle partitions (one per core, 2..8); ``short_run`` (a small
    input) adds :data:`SHORT_RUN_CONF` and :data:`SHORT_RUN_JAVA_OPTIONS`. The console shows only
    Spark's errors, and nothing of the JVM's start, unless the ``connect_bridge`` loggers are at DEBUG.
    """
    global _session
    with _lock:
        if _session is not None and _alive(_session):
            return _session
        master = master or DEFAULT_MASTER
        local = is_local(master)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # Executors run the interpreter named here. Locally that is this one; on a cluster one the
        # operator named (the path on the workers) wins, else the same path as here.
        if local or not os.environ.get("PYSPARK_PYTHON"):
            os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        builder = (
            SparkSession.builder.master(master)
            .appName(app)
            .config("spark.ui.showConsoleProgress", "false")
            # json.loads keeps the last of duplicate keys; make from_json's maps agree.
            .config("spark.sql.mapKeyDedupPolicy", "LAST_WIN")
            .config("spark.sql.session.timeZone", "UTC")
        )
        if local:
            partitions = str(_local_partitions(master))
            builder = builder.config("spark.sql.shuffle.partitions", partitions).config(
                "spark.default.parallelism", partitions
            )
            builder = builder.config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
            for key, value in LOCAL_CONF.items():
                builder = builder.config(key, value)
            if short_run:
                for key, value in SHORT_RUN_CONF.items():
                    builder = builder.config(key, value)
                builder = builder.config("spark.driver.extraJavaOptions", SHORT_RUN_JAVA_OPTIONS)
        verbose = _verbose()
        on_sigint = signal.getsignal(signal.SIGINT)
        with contextlib.nullcontext() if verbose else _jvm_stderr_to_file():
            spark = builder.getOrCreate()
        if _keep_sigint and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, on_sigint)
        spark.sparkContext.setLogLevel("WARN" if verbose else SPARK_LOG_LEVEL)
        _session = spark
        return spark


CLUSTER_PARTITION_BYTES = 32 * 1024 * 1024
"""On a cluster, one shuffle partition per this many input bytes (at least one per executor core,
at most Spark's default 200), unless the session's configuration sets ``spark.sql.shuffle.partitions``."""


def fit_shuffle_partitions(spark: Any, input_bytes: int) -> None:
    """Size the shuffles of a run on a cluster to its input, unless the operator set them.

    Spark's default of 200 shuffle partitions is made for big inputs: a 6-drill fleet on a
    standalone cluster ran 6,400 tasks in 45 stages (200 per stage, nearly all empty) and took four
    minutes. Local sessions already have one partition per core (:func:`get_spark`)."""
    sc = spark.sparkContext
    if is_local(sc.master) or sc.getConf().contains("spark.sql.shuffle.partitions"):
        return
    wanted = max(2, sc.defaultParallelism, -(-input_bytes // CLUSTER_PARTITION_BYTES))
    spark.conf.set("spark.sql.shuffle.partitions", str(min(200, wanted)))


PACKAGE_ZIP = "connect_bridge.zip"
_shipped: set[str] = set()


def ship_package(spark: Any) -> None:
    """Give a cluster's executors this package: zip the imported ``connect_bridge`` and add it with
    ``SparkContext.addPyFile`` (Spark copies it to every executor and puts it first on the Python
    workers' ``sys.path``), once per application. Only the jobs that run Python in the executors
    need it (``drill fleet``'s drills); a local session's executors already import it from here."""
    import zipfile

    import connect_bridge

    sc = spark.sparkContext
    if is_local(sc.master) or sc.applicationId in _shipped:
        return
    root = Path(connect_bridge.__file__).parent
    folder = tempfile.mkdtemp(prefix="connect-bridge-ship-")
    atexit.register(_remove_tree, folder)
    archive = Path(folder) / PACKAGE_ZIP
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                zf.write(path, Path("connect_bridge") / path.relative_to(root))
    sc.addPyFile(str(archive))
    _shipped.add(sc.applicationId)


def _remove_tree(path: str) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
