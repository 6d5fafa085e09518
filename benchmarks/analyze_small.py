"""``analyze`` of one small drill: wall time of the whole command, tuned session vs the old settings.

The fixed cost of a fresh local Spark session dominates the analysis of one drill (a few hundred
events). This runs ``connect-bridge drill run EXAMPLE`` once, then, each in a fresh process:

- ``baseline``: ``analyze`` on a session with the settings ``pipeline/session.py`` used before the
  short-run tuning (no UI, one shuffle partition per core, C2 JIT, G1, whole-stage codegen,
  adaptive execution);
- ``tuned``: ``connect-bridge analyze DRILL --out DIR``, exactly as an operator runs it.

Reported per variant: wall seconds of the process (JVM start included), CPU seconds of the JVM
(steadier than wall time on a busy machine), the lines written to stderr, and whether
``summary.json`` is the same for both. The last line printed is one JSON object.

    python benchmarks/analyze_small.py [--example FILE] [--runs N] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EXAMPLE = ROOT / "examples" / "rolling-upgrade-sessioned-to-new.json"
BASELINE_CONF = {
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
}
"""``get_spark``'s settings before the short-run tuning (plus the partition counts, per master)."""


def _jvm_cpu_s(spark: Any) -> float:
    """User + system CPU seconds of the driver JVM so far (Linux ``/proc``)."""
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _child(variant: str, drill: str, out: str, master: str) -> None:
    """One measured process: prints ``{"jvm_cpu_s": ...}`` as its last stdout line."""
    from connect_bridge.pipeline.session import _local_partitions, get_spark

    if variant == "baseline":
        from pyspark.sql import SparkSession

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
        partitions = str(_local_partitions(master))
        builder = SparkSession.builder.master(master).appName("baseline")
        conf = {**BASELINE_CONF, "spark.sql.shuffle.partitions": partitions}
        conf["spark.default.parallelism"] = partitions
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        from connect_bridge.pipeline.analyze import analyze

        analyze([drill], out, spark=spark)
    else:
        from connect_bridge.cli import main

        status = main(["analyze", drill, "--out", out, "--master", master])
        if status != 0:
            raise SystemExit(status)
        spark = get_spark()
    print(json.dumps({"jvm_cpu_s": round(_jvm_cpu_s(spark), 2)}))


def _measure(variant: str, drill: Path, out: Path, master: str) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", variant, str(drill), str(out), "--master", master],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{variant} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    lines = len(proc.stderr.splitlines())
    return {"wall_s": round(wall, 2), "jvm_cpu_s": last["jvm_cpu_s"], "stderr_lines": lines}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--example", type=Path, default=DEFAULT_EXAMPLE, help="scenario to drill")
    parser.add_argument("--runs", type=int, default=1, help="runs of each variant (medians reported)")
    parser.add_argument("--master", default="local[2]", help="Spark master of both variants")
    parser.add_argument("--child", nargs=3, metavar=("VARIANT", "DRILL", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(*args.child, master=args.master)
        return
    with tempfile.TemporaryDirectory(prefix="analyze-small-") as tmp:
        work = Path(tmp)
        drill = work / "drill"
        command = [sys.executable, "-m", "connect_bridge.cli", "drill", "run", str(args.example)]
        subprocess.run([*command, "--out", str(drill)], check=True, capture_output=True)
        events = sum(1 for line in (drill / "events.jsonl").open() if line.strip())
        runs: dict[str, list[dict[str, Any]]] = {"baseline": [], "tuned": []}
        for i in range(args.runs):
            for variant in runs:  # interleaved, so a busy spell hits both alike
                runs[variant].append(_measure(variant, drill, work / f"{variant}-{i}", args.master))
                print(f"{variant} run {i + 1}: {runs[variant][-1]}", file=sys.stderr)
        same = all(
            json.loads((work / f"{v}-{i}" / "summary.json").read_text())
            == json.loads((work / "baseline-0" / "summary.json").read_text())
            for v in runs
            for i in range(args.runs)
        )
        load = os.getloadavg()[0]
    result: dict[str, Any] = {"benchmark": "analyze_small", "example": args.example.name, "events": events}
    for variant, measured in runs.items():
        result[variant] = {k: statistics.median(m[k] for m in measured) for k in measured[0]}
    result["speedup_wall"] = round(result["baseline"]["wall_s"] / result["tuned"]["wall_s"], 2)
    result["same_summary"] = same
    result["load_average"] = round(load, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
