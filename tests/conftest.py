"""Shared test fixtures.

The golden vectors live outside the repository (``../shared/vectors`` next to the checkout) because
several projects share them. A missing vector file is a broken checkout, so it fails the run instead
of skipping the tests that need it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

# The real-Kafka fixtures (tests/kafka_fixtures.py) are registered here, not per module like tansu's:
# a Kafka broker is a JVM that takes seconds to start, so the whole session shares one.
from kafka_fixtures import bridge_proxy, connect_worker, kafka_broker

__all__ = ["bridge_proxy", "connect_worker", "kafka_broker"]

CONNECT_VECTORS = "connect-embedded-protocol.json"


def vectors_dir() -> Path:
    """``<repo>/../shared/vectors``."""
    return Path(__file__).resolve().parents[1].parent / "shared" / "vectors"


def load_vectors(name: str = CONNECT_VECTORS) -> list[dict[str, Any]]:
    path = vectors_dir() / name
    if not path.is_file():
        pytest.fail(f"golden vectors not found at {path}", pytrace=False)
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def vectors() -> list[dict[str, Any]]:
    """All Connect embedded-protocol golden vectors (``shared/vectors/README.md``)."""
    return load_vectors()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking ``connect_vector`` run once per golden vector, with the vector id as test id."""
    if "connect_vector" in metafunc.fixturenames:
        cases = load_vectors()
        metafunc.parametrize("connect_vector", cases, ids=[case["id"] for case in cases])


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local SparkSession for the whole run (never stopped per test; see tests/conftest_spark.py)."""
    from conftest_spark import make_spark

    return make_spark()


HEAVY_FIXTURES = frozenset({"spark", "tansu", "kafka_broker", "connect_worker", "bridge_proxy"})
"""Fixtures that start Spark, a broker, a Connect worker or a bridge process: their tests are ``heavy``."""
HEAVY_MODULES = frozenset(
    {"test_live_drill", "test_live_workers", "test_real_kafka", "test_report_browser", "test_upstream_drill"}
)
"""Modules that run a live bridge, live workers or chromium."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that need Spark, a broker, a live bridge or a browser ``heavy``, so
    ``pytest -m "not heavy"`` runs the quick subset (everything else, in about two minutes)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & HEAVY_FIXTURES or item.module.__name__ in HEAVY_MODULES:  # type: ignore[union-attr]
            item.add_marker(pytest.mark.heavy)
