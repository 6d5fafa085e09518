"""One quiet, reused SparkSession per process for the analysis pipeline."""

from __future__ import annotations

import os
import re
import sys
import threading
from typing import Any

DEFAULT_MASTER = "local[*]"
LOCAL_SHUFFLE_PARTITIONS = 8
"""At most this many shuffle partitions locally (one per core, at least 2): drill logs are small
per drill, and every window or join is a shuffle whose tasks cost more than their work."""


def _local_partitions(master: str) -> int:
    found = re.fullmatch(r"local\[(\d+)(?:,\s*\d+)?\]", master)
    cores = int(found.group(1)) if found else (os.cpu_count() or 2)
    return max(2, min(LOCAL_SHUFFLE_PARTITIONS, cores))


_lock = threading.Lock()
_session: Any = None


def _alive(spark: Any) -> bool:
    try:
        return spark.sparkContext._jsc is not None and not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # a session whose JVM went away
        return False


def get_spark(master: str | None = None, app: str = "connect-bridge") -> Any:
    """The process-wide :class:`pyspark.sql.SparkSession`, started on first use.

    ``master`` defaults to ``local[*]``; once a session runs, later calls return it whatever they
    pass (Spark allows one SparkContext per process). Before starting, the driver binds to
    127.0.0.1 (``SPARK_LOCAL_IP``) and Python workers use this interpreter. Local sessions run
    without the web UI and with few shuffle partitions (one per core, 2..8); the console only shows errors.
    """
    global _session
    with _lock:
        if _session is not None and _alive(_session):
            return _session
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        master = master or DEFAULT_MASTER
        local = master.startswith("local")
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
            builder = (
                builder.config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", partitions)
                .config("spark.default.parallelism", partitions)
                .config("spark.driver.host", "127.0.0.1")
            )
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        _session = spark
        return spark
