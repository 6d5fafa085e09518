"""Behaviour identity of drill speedups: hash the scenarios, events and verdicts of many drills.

``python benchmarks/fleet_hash.py [N] [--seed S]`` runs drills ``0..N-1`` of fleet ``S`` (default
300 of fleet 5151) twice, plain and adversarial, exactly as ``drill fleet`` does
(``random_scenario`` of ``pipeline.fleet.scenario_seed(S, i)``, ``run_scenario``, ``check``), and
hashes for every drill its scenario (JSON), the ``repr`` of every event (keys in order) and the
checker's ``summary.json``. Two versions of the code behave the same on these drills exactly when
they print the same hashes. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time

from connect_bridge.drills.checker import check
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.sim import run_scenario
from connect_bridge.pipeline.fleet import scenario_seed


def fleet_hash(count: int, seed: int, adversarial: bool) -> dict[str, object]:
    """The hash of drills ``0..count-1`` of fleet ``seed``, with their events and failures."""
    digest = hashlib.sha256()
    events = failed = 0
    started = time.process_time()
    for index in range(count):
        scenario = random_scenario(scenario_seed(seed, index), adversarial=adversarial)
        digest.update(scenario.model_dump_json().encode())
        log = run_scenario(scenario)
        for event in log.events:
            digest.update(repr(event).encode())
        summary = check(log.events, name=scenario.name, end_ms=scenario.end_ms)
        digest.update(json.dumps(summary.to_json(), sort_keys=False).encode())
        events += len(log.events)
        failed += not summary.ok
    return {
        "sha256": digest.hexdigest(),
        "events": events,
        "failed": failed,
        "cpu_s": round(time.process_time() - started, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("count", type=int, nargs="?", default=300)
    parser.add_argument("--seed", type=int, default=5151)
    args = parser.parse_args()
    result = {
        "count": args.count,
        "seed": args.seed,
        "plain": fleet_hash(args.count, args.seed, adversarial=False),
        "adversarial": fleet_hash(args.count, args.seed, adversarial=True),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
