"""The Spark session behind the ``spark`` fixture of ``conftest.py`` (imported lazily there, so
test modules that do not use Spark never import pyspark)."""

from __future__ import annotations

from typing import Any

import pytest


def make_spark() -> Any:
    pytest.importorskip("pyspark")
    from connect_bridge.pipeline.session import get_spark

    spark = get_spark("local[2]")
    # Test data is tiny: compiling whole-stage code costs more than it saves.
    spark.conf.set("spark.sql.codegen.wholeStage", "false")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    return spark
