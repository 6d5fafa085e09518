"""Fleet benchmark: drills/s of ``drill fleet --adversarial`` on each drill engine (interpreted and
compiled, ``connect_bridge.drills.compiled``), against one process running the same drills in a
plain loop, all measured in the same run (so all see the same machine).

For each engine of ``--engines`` (default ``python,compiled``: the interpreted engine is the
baseline):

1. **Plain loop**: ``--loop N`` drills of the fleet, one after another in this process, each
   exactly as an executor runs it (``random_scenario`` of the drill's seed, ``run_scenario``,
   ``check``); the seconds of each part (scenario generation, simulation, checking) say where a
   drill's time goes.
2. **Fleet**: ``connect-bridge drill fleet --count N --adversarial --seed S --master M --engine E``
   in a subprocess (its own driver and JVM, as an operator runs it); its ``fleet.json`` gives
   drills/s (from the first drill task to the last verdict collected, Spark's start and the
   engine's build excluded) and the wall seconds of the whole command are measured here. The CPU
   seconds of the command's process tree (driver, JVM, Python workers) are sampled from ``/proc``
   while it runs.

The compiled engine is built (or found in the cache) before anything is timed. The last line
printed is one JSON object: per engine ``E``, ``E_loop_drills_per_s``, ``E_loop_split_s``,
``E_fleet_drills_per_s``, ``E_fleet_vs_loop`` (fleet rate / one process's rate; the cores of
``--master`` bound it), ``E_fleet_wall_s``, ``E_fleet_cpu_s``; and ``compiled_vs_python`` (the
fleets' rates).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from connect_bridge.drills.batch import collected_between_drills
from connect_bridge.drills.compiled import DrillFunctions, drill_functions, ensure_engine, is_compiled
from connect_bridge.pipeline.fleet import FLEET_JSON, scenario_seed


def plain_loop(drills: DrillFunctions, count: int, seed: int, adversarial: bool) -> dict[str, object]:
    """Drills ``0..count-1`` of fleet ``seed`` in this process: drills/s and the split."""
    split = {"generate": 0.0, "simulate": 0.0, "check": 0.0}
    with collected_between_drills() as between_drills:
        started = time.perf_counter()
        cpu = time.process_time()
        _loop(drills, count, seed, adversarial, split, between_drills)
        wall = time.perf_counter() - started
        cpu = time.process_time() - cpu
    return {
        "loop_drills": count,
        "loop_s": round(wall, 2),
        "loop_cpu_ms_per_drill": round(cpu / count * 1000, 2),
        "loop_drills_per_s": round(count / wall, 2),
        "loop_split_s": {key: round(value, 2) for key, value in split.items()},
    }


def _loop(
    drills: DrillFunctions,
    count: int,
    seed: int,
    adversarial: bool,
    split: dict[str, float],
    between_drills: Callable[[], None],
) -> None:
    """The drills as an executor runs them (``pipeline.fleet._checked``), the collector's run after
    each counted with the check."""
    for index in range(count):
        t0 = time.perf_counter()
        scenario = drills.random_scenario(scenario_seed(seed, index), adversarial=adversarial)
        t1 = time.perf_counter()
        log = drills.run_scenario(scenario)
        t2 = time.perf_counter()
        drills.check(log.events, name=scenario.name, end_ms=scenario.end_ms)
        del log
        between_drills()
        t3 = time.perf_counter()
        split["generate"] += t1 - t0
        split["simulate"] += t2 - t1
        split["check"] += t3 - t2


def _tree(root: int) -> list[int]:
    """``root`` and its descendants (from ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, ()))
    return out


def _sample_cpu(root: int, seen: dict[int, tuple[str, float]], done: threading.Event) -> None:
    """Until ``done``: each process of ``root``'s tree -> (its name, its CPU seconds so far)."""
    tick = os.sysconf("SC_CLK_TCK")
    while not done.wait(0.5):
        for pid in _tree(root):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            seen[pid] = (name, (int(fields[11]) + int(fields[12])) / tick)


def fleet_run(
    engine: str, count: int, seed: int, master: str, adversarial: bool, out: Path
) -> dict[str, object]:
    """The ``drill fleet`` command in a subprocess; its ``fleet.json`` rate and its CPU by process."""
    command = [sys.executable, "-m", "connect_bridge.cli", "drill", "fleet", "--count", str(count)]
    command += ["--seed", str(seed), "--master", master, "--out", str(out), "--engine", engine]
    command += ["--adversarial"] if adversarial else ["--checks-only"]
    seen: dict[int, tuple[str, float]] = {}
    done = threading.Event()
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sampler = threading.Thread(target=_sample_cpu, args=(proc.pid, seen, done), daemon=True)
    sampler.start()
    status = proc.wait()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    doc = json.loads((out / FLEET_JSON).read_text())
    cpu: dict[str, float] = {}
    for name, seconds in seen.values():
        cpu[name] = round(cpu.get(name, 0.0) + seconds, 1)
    return {
        "fleet_status": status,
        "fleet_drills": doc["count"],
        "fleet_failed": doc["failed_drills"],
        "fleet_s": doc["seconds"],
        "fleet_drills_per_s": doc["drills_per_s"],
        "fleet_wall_s": round(wall, 1),
        "fleet_cpu_s": cpu,
        "fleet_engine": doc.get("engine"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="drills of the fleet")
    parser.add_argument("--loop", type=int, default=200, help="drills of the plain loop")
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--engines", default="python,compiled", help="engines to measure, in this order")
    parser.add_argument("--plain", action="store_true", help="plain drills (--checks-only), not adversarial")
    args = parser.parse_args()
    adversarial = not args.plain
    engines = args.engines.split(",")
    result: dict[str, object] = {"count": args.count, "seed": args.seed, "master": args.master}
    result["adversarial"] = adversarial
    built = time.perf_counter()
    functions = {
        engine: drill_functions(ensure_engine() if engine == "compiled" else None) for engine in engines
    }
    result["engine_ready_s"] = round(time.perf_counter() - built, 1)
    for engine, drills in functions.items():
        assert is_compiled(drills) == (engine == "compiled"), engine
        loop = plain_loop(drills, args.loop, args.seed, adversarial)
        result |= {f"{engine}_{key}": value for key, value in loop.items()}
        print(json.dumps(result), flush=True)
    for engine in engines:
        with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
            fleet = fleet_run(engine, args.count, args.seed, args.master, adversarial, Path(tmp))
        result |= {f"{engine}_{key}": value for key, value in fleet.items()}
        rate, loop_rate = fleet["fleet_drills_per_s"], result[f"{engine}_loop_drills_per_s"]
        ratio = (
            round(rate / loop_rate, 2) if isinstance(rate, float) and isinstance(loop_rate, float) else None
        )
        result[f"{engine}_fleet_vs_loop"] = ratio
        print(json.dumps(result), flush=True)
    python, native = result.get("python_fleet_drills_per_s"), result.get("compiled_fleet_drills_per_s")
    if isinstance(python, float) and isinstance(native, float):
        result["compiled_vs_python"] = round(native / python, 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
