"""The Spark session behind the ``spark`` fixture of ``conftest.py`` (imported lazily there, so
test modules that do not use Spark never import pyspark)."""

from __future__ import annotations

from typing import Any

import pytest


def make_spark() -> Any:
    pytest.importorskip("pyspark")
    from connect_bridge.pipeline.session import get_spark

    # Test data is tiny: a short run's session (the driver JVM with the serial collector and C1 only,
    # no generated code: pipeline.session.SHORT_RUN_CONF), as `analyze` starts for a small input.
    spark = get_spark("local[2]", short_run=True)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    return spark
