"""Shared test fixtures.

The Connect embedded-protocol golden vectors are ``tests/data/connect-embedded-protocol.json``
(``tests/connect_vectors.py`` says what they hold; a jvm test rebuilds them from Apache Kafka's
classes on every run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import connect_vectors

# The real-Kafka fixtures (tests/kafka_fixtures.py) are registered here, not per module like tansu's:
# a Kafka broker is a JVM that takes seconds to start, so the whole session shares one.
from kafka_fixtures import bridge_proxy, connect_worker, kafka_broker
from kafka_secure import secure_kafka
from package_bytecode import compile_package

__all__ = ["bridge_proxy", "connect_worker", "kafka_broker", "secure_kafka"]

# Hypothesis' per-example deadline (200 ms) is a timing assertion: on a loaded 2-core machine a
# correct property failed on it (337 ms); too_slow is the same check on data generation. The
# tests assert behaviour, never time.
settings.register_profile("connect-bridge", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("connect-bridge")


def load_vectors() -> list[dict[str, Any]]:
    """The checked-in Connect embedded-protocol vectors."""
    return connect_vectors.load_vectors()


@pytest.fixture(scope="session")
def vectors() -> list[dict[str, Any]]:
    """All Connect embedded-protocol golden vectors (``tests/connect_vectors.py``)."""
    return load_vectors()


def pytest_configure(config: pytest.Config) -> None:
    """The package's bytecode written once for the processes the tests start (tests/package_bytecode.py)."""
    import connect_bridge

    compile_package(Path(connect_bridge.__file__).parent)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests taking ``connect_vector`` run once per golden vector, with the vector id as test id."""
    if "connect_vector" in metafunc.fixturenames:
        cases = load_vectors()
        metafunc.parametrize("connect_vector", cases, ids=[case["id"] for case in cases])


@pytest.fixture(scope="session")
def compiled_engine() -> Any:
    """The compiled drill engine's directory (``connect_bridge.drills.compiled``), built once per
    source tree into ~/.cache/connect-bridge/engine (the build is part of what is tested)."""
    from connect_bridge.drills.compiled import ensure_engine

    return ensure_engine()


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local SparkSession for the whole run (never stopped per test; see tests/conftest_spark.py)."""
    from conftest_spark import make_spark

    return make_spark()


MARKS_BY_FIXTURE: dict[str, tuple[str, ...]] = {
    "spark": ("spark",),
    "spark_cluster": ("spark",),
    "tansu": ("broker",),
    "kafka_broker": ("broker", "jvm"),
    "secure_kafka": ("broker", "jvm"),
    "reauth_kafka": ("broker", "jvm"),
    "reauth_bridge": ("live",),
    "connect_worker": ("jvm",),
    "kafka_connect_vectors": ("jvm",),
    "bridge_proxy": ("live",),
    "cli_process": ("live",),
    "compiled_engine": ("compiled",),
}
"""What a fixture starts: Spark, a broker (tansu or Apache Kafka), a JVM, a bridge process, a mypyc
build."""
MARKS_BY_MODULE: dict[str, tuple[str, ...]] = {
    "test_live_drill": ("live",),
    "test_describe": ("live",),
    "test_live_workers": ("live",),
    "test_upstream_drill": ("live",),
    "test_fail_closed": ("live",),
    "test_real_kafka": ("jvm",),
    "test_ha_membership": ("live",),
    "test_ha": ("live",),
    "test_ha_java": ("live",),
    "test_partitioned_store": ("broker", "jvm"),
    "test_three_brokers": ("broker", "jvm", "live"),
    "test_sasl_oauth": ("live",),
    "test_report_browser": ("browser",),
}
"""Modules that run a live bridge, live workers or chromium without one of those fixtures."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what each test needs (``spark``, ``broker``, ``jvm``, ``live``, ``browser``), and every
    such test ``heavy``: ``pytest -m "not heavy"`` runs the quick subset (two to three minutes), and, for
    example, ``-m "not jvm and not spark"`` everything but the Java and Spark tests."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        marks = {m for f in fixtures & MARKS_BY_FIXTURE.keys() for m in MARKS_BY_FIXTURE[f]}
        marks.update(MARKS_BY_MODULE.get(item.module.__name__, ()))  # type: ignore[union-attr]
        for mark in sorted(marks):
            item.add_marker(getattr(pytest.mark, mark))
        if marks:
            item.add_marker(pytest.mark.heavy)


ARTIFACTS = pytest.StashKey[list[str]]()
"""Files a test made for people to look at (the report's screenshots), listed after the run."""


@pytest.fixture
def keep_artifact(request: pytest.FixtureRequest) -> Any:
    """``keep_artifact(what, path)``: name a file in the run's closing summary ("artifacts")."""

    def keep(what: str, path: Any) -> None:
        request.config.stash.setdefault(ARTIFACTS, []).append(f"{what}: {path}")

    return keep


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(ARTIFACTS, [])
    if lines:
        terminalreporter.section("artifacts")
        for line in lines:
            terminalreporter.write_line(line)
