"""Fleet benchmark: drills/s of ``drill fleet --adversarial`` against one process running the same
drills in a plain loop, measured in the same run (so both see the same machine).

1. **Plain loop** (the baseline): ``--loop N`` drills of the fleet, one after another in this
   process, each exactly as an executor runs it (``random_scenario`` of the drill's seed,
   ``run_scenario``, ``check``); the seconds of each part (scenario generation, simulation,
   checking) say where a drill's time goes.
2. **Fleet**: ``connect-bridge drill fleet --count N --adversarial --seed S --master M`` in a
   subprocess (its own driver and JVM, as an operator runs it); its ``fleet.json`` gives drills/s
   (from the first drill task to the last verdict collected, Spark's start excluded) and the
   wall seconds of the whole command are measured here. The CPU seconds of the command's process
   tree (driver, JVM, Python workers) are sampled from ``/proc`` while it runs.

The last line printed is one JSON object: ``loop_drills_per_s``, ``loop_split_s`` (generate,
simulate, check), ``fleet_drills_per_s``, ``fleet_vs_loop`` (fleet rate / one process's rate; the
cores of ``--master`` bound it), ``fleet_wall_s`` and ``fleet_cpu_s`` (per process kind).
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
from pathlib import Path

from connect_bridge.drills.checker import check
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.sim import run_scenario
from connect_bridge.pipeline.fleet import FLEET_JSON, scenario_seed


def plain_loop(count: int, seed: int, adversarial: bool) -> dict[str, object]:
    """Drills ``0..count-1`` of fleet ``seed`` in this process: drills/s and the split."""
    split = {"generate": 0.0, "simulate": 0.0, "check": 0.0}
    started = time.perf_counter()
    cpu = time.process_time()
    for index in range(count):
        t0 = time.perf_counter()
        scenario = random_scenario(scenario_seed(seed, index), adversarial=adversarial)
        t1 = time.perf_counter()
        log = run_scenario(scenario)
        t2 = time.perf_counter()
        check(log.events, name=scenario.name, end_ms=scenario.end_ms)
        t3 = time.perf_counter()
        split["generate"] += t1 - t0
        split["simulate"] += t2 - t1
        split["check"] += t3 - t2
    wall = time.perf_counter() - started
    return {
        "loop_drills": count,
        "loop_s": round(wall, 2),
        "loop_cpu_ms_per_drill": round((time.process_time() - cpu) / count * 1000, 2),
        "loop_drills_per_s": round(count / wall, 2),
        "loop_split_s": {key: round(value, 2) for key, value in split.items()},
    }


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


def fleet_run(count: int, seed: int, master: str, adversarial: bool, out: Path) -> dict[str, object]:
    """The ``drill fleet`` command in a subprocess; its ``fleet.json`` rate and its CPU by process."""
    command = [sys.executable, "-m", "connect_bridge.cli", "drill", "fleet", "--count", str(count)]
    command += ["--seed", str(seed), "--master", master, "--out", str(out)]
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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000, help="drills of the fleet")
    parser.add_argument("--loop", type=int, default=200, help="drills of the plain loop")
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--plain", action="store_true", help="plain drills (--checks-only), not adversarial")
    args = parser.parse_args()
    adversarial = not args.plain
    result: dict[str, object] = {"count": args.count, "seed": args.seed, "master": args.master}
    result["adversarial"] = adversarial
    result |= plain_loop(args.loop, args.seed, adversarial)
    print(json.dumps(result), flush=True)
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as tmp:
        result |= fleet_run(args.count, args.seed, args.master, adversarial, Path(tmp))
    rate, loop = result["fleet_drills_per_s"], result["loop_drills_per_s"]
    result["fleet_vs_loop"] = round(rate / loop, 2) if isinstance(rate, float) and loop else None
    print(json.dumps(result))


if __name__ == "__main__":
    main()
