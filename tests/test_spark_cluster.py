"""The pipeline on a real standalone Spark cluster (docs/pipeline.md, "On a cluster").

A master and a worker are started from the installed PySpark (``spark_cluster.py``); ``connect-bridge
drill fleet --master spark://…`` and ``connect-bridge analyze --master spark://…`` run on them as
an operator would run them. The drills simulated in the cluster's executors must give the
checker's numbers for the same drills simulated here, and ``analyze`` on the cluster must write
the ``summary.json`` that the local session writes for the same inputs: the same numbers, whatever
the master. The worker's executors get no ``PYTHONPATH`` from
the test run, so the drills find the package only because the command shipped it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("matplotlib")

from connect_bridge.drills.checker import check
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.sim import run_scenario
from connect_bridge.pipeline import fleet
from connect_bridge.pipeline.analyze import analyze
from connect_bridge.pipeline.session import PACKAGE_ZIP
from spark_cluster import StandaloneCluster, client_env, standalone_cluster
from test_fleet import NUMBERS  # the per-drill numbers both sides must give

COUNT = 4
SEED = 31
COMMAND_TIMEOUT = 600


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


def _cli(cluster: StandaloneCluster, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "connect_bridge.cli", *args, "--master", cluster.url],
        env=client_env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    assert done.returncode == 0, f"{args}: exit {done.returncode}\n{done.stderr[-4000:]}\n{cluster.logs()}"
    return done


def _summary(report: Path) -> dict[str, Any]:
    return json.loads((report / "summary.json").read_text(encoding="utf-8"))


def _checked(seed: int) -> dict[str, Any]:
    """A fleet drill's numbers from the checker on events simulated here, in this process."""
    scenario = random_scenario(seed)
    doc = check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms).to_json()
    return {"name": scenario.name, **{k: doc[k] for k in NUMBERS}}


def test_fleet_and_analyze_on_a_standalone_cluster_equal_local(
    spark_cluster: StandaloneCluster, spark: Any, tmp_path: Path
) -> None:
    on_cluster = tmp_path / "cluster"
    fleet_args = ("--count", str(COUNT), "--seed", str(SEED), "--out", str(on_cluster))
    _cli(spark_cluster, "drill", "fleet", *fleet_args)
    ran = json.loads((on_cluster / fleet.FLEET_JSON).read_text(encoding="utf-8"))
    assert ran["count"] == COUNT and ran["drills_analyzed"] == COUNT and ran["missing_drills"] == 0
    assert ran["failed"] == []
    # The executors imported the drills from the zip the command shipped (nothing else gave it to them).
    shipped = [d for d in spark_cluster.executor_dirs() if (d / PACKAGE_ZIP).is_file()]
    assert shipped, [sorted(p.name for p in d.iterdir()) for d in spark_cluster.executor_dirs()]
    # The drills the executors simulated are the drills simulated here.
    fleet_doc = _summary(on_cluster / fleet.REPORT_DIR)
    got = [{"name": d["name"], **{k: d[k] for k in NUMBERS}} for d in fleet_doc["drills"]]
    wanted = sorted((_checked(fleet.scenario_seed(SEED, i)) for i in range(COUNT)), key=lambda d: d["name"])
    assert got == wanted

    # analyze on the cluster: the fleet's Parquet plus one JSON-lines log, read by the executors;
    # the same inputs analyzed by the local session must give the same document.
    scenario = random_scenario(fleet.scenario_seed(SEED, COUNT))
    log_dir = tmp_path / "logs" / scenario.name
    log_dir.mkdir(parents=True)
    run_scenario(scenario).write_jsonl(log_dir / "events.jsonl")
    inputs = [str(on_cluster / fleet.EVENTS_DIR), str(tmp_path / "logs")]
    analyzed = tmp_path / "cluster-analysis"
    done = _cli(spark_cluster, "analyze", *inputs, "--out", str(analyzed), "--charts", "0")
    local = analyze(inputs, tmp_path / "local-analysis", spark=spark, chart_drills=0)
    assert len(local["drills"]) == COUNT + 1
    assert json.loads(done.stdout.strip().splitlines()[-1])["drills"] == COUNT + 1
    assert _summary(analyzed) == local
    # ...and the fleet's own analysis on the cluster is the local one of its drills.
    assert fleet_doc["drills"] == [d for d in local["drills"] if d["name"] != scenario.name]
    assert fleet_doc["totals"] == ran["totals"] and ran["totals"]["drills"] == ran["totals"]["ok"] == COUNT
